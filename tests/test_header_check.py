"""verify --offline's check of a source's Build/Run/Verified lines reads each GPU's evidence (its meta.json),
never parses its transcript: judge_evidence parses it, once a lesson."""
from __future__ import annotations

from orchestrator.manifest.load import load_manifest
from orchestrator.render import source_header
from orchestrator.render.course import render_all, write_pages
from orchestrator.transcript import parse
from test_render import course  # noqa: F401  (the fixture: a course with evidence)


def test_the_header_check_parses_no_transcript(course, monkeypatch):  # noqa: F811
    write_pages(render_all(load_manifest(course / "lessons.yaml")))
    manifest = load_manifest(course / "lessons.yaml")
    lesson = manifest.lesson("day01-scale")
    assert source_header.list_gpus(manifest.root, lesson.id), "the fixture's lesson has evidence"

    def no_parse(*args, **kwargs):
        raise AssertionError("a transcript was parsed")

    monkeypatch.setattr(parse, "parse_transcript", no_parse)
    monkeypatch.setattr("orchestrator.judge.judging.parse_transcript", no_parse)
    assert source_header.stale_source_header(manifest, lesson) is None
    scale = course / "lessons/day01-scale/scale.cu"
    scale.write_text(scale.read_text().replace("-O3", "-O2", 1))
    assert source_header.stale_source_header(manifest, lesson).endswith("run `coursectl render`")
