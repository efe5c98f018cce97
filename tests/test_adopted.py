"""tests/fixtures/adopted: a course brought in from an existing one, its program copied unedited
(`source_header: false`, `skip_output: true`, snippets by function and by lines, prose naming days the
course lacks). docs/adopting.md walks through it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.manifest.load import load_manifest
from orchestrator.render.course import render_all, write_pages

ADOPTED = Path(__file__).resolve().parent / "fixtures" / "adopted"


@pytest.fixture
def adopted(tmp_path: Path) -> Path:
    root = tmp_path / "adopted"
    shutil.copytree(ADOPTED, root)
    return root


def test_the_adopted_lesson_loads_without_the_default_gpu_line(adopted):
    lesson = load_manifest(adopted / "lessons.yaml").lessons[0]
    assert lesson.output.items[0].line == "n = {n:int}, max error = {err:float}"


def test_its_page_shows_the_function_and_line_snippets_and_leaves_the_source_untouched(adopted):
    source = adopted / "lessons/day03-tiled/tiled.cu"
    before = source.read_bytes()
    manifest = load_manifest(adopted / "lessons.yaml")
    write_pages(render_all(manifest))
    assert source.read_bytes() == before
    page = (adopted / "lessons/day03-tiled/README.md").read_text(encoding="utf-8")
    code = page.split("## The code")[1].split("## Expected output")[0]
    assert "__global__ void matmulTiled(const float *a" in code and "c[row * n + col] = sum;\n}" in code
    assert "static float check(const float *c, int n)" in code


def test_its_prose_names_missing_days_as_text_with_a_warning_or_a_link(adopted):
    manifest = load_manifest(adopted / "lessons.yaml")
    page = next(p for p in render_all(manifest) if p.name == "lessons/day03-tiled/README.md").new
    assert "[Day 5](https://example.com/course/day05)" in page
    assert "naive kernel of Day 2 reads" in page
    assert [w.split(": ")[0] for w in manifest.warnings] == ["lessons/day03-tiled/prose.md:1"]


def test_the_long_loop_lesson_bounds_its_racecheck_and_shows_its_kernel(adopted):
    manifest = load_manifest(adopted / "lessons.yaml")
    page = next(p for p in render_all(manifest) if p.name == "lessons/day04-loop/README.md").new
    assert "compute-sanitizer --tool racecheck --launch-count 20 ./loop 50" in page
    assert "__global__ void step(float *x, int n)" in page.split("## The code")[1]


def test_the_fixture_pages_are_up_to_date(adopted):
    assert [p.name for p in render_all(load_manifest(adopted / "lessons.yaml")) if p.changed] == []
