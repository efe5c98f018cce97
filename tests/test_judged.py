"""verify --offline takes a lesson's result from its last judging only where nothing it is judged from changed
(workflows/judged.py): each thing it is judged from, changed, has that lesson judged again; a failure is judged
every time; an entry that cannot be trusted is no entry. Each test records a stand-in course of its own."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from conftest import GPU_SLUG, coursectl, lines, snapshot
from orchestrator.cuda.toolchain import Toolchain
from orchestrator.judge.results import Options
from orchestrator.workflows import judged

DAY13, DAY16 = "day13-shared-memory", "day16-tiled-matmul"
OFFLINE = ("verify", "--all", "--offline", "--arch", "sm_90", "-q")


@pytest.fixture(autouse=True)
def trusted_at_once(monkeypatch):
    """The files a test has just written are trusted to their status at once (judged.RACY_S is 2 s)."""
    monkeypatch.setattr(judged, "RACY_S", 0.0)


@pytest.fixture
def made(course, fake_gpu, prebuilt):
    made = course([DAY13, DAY16], architectures=["sm_90"])
    result = coursectl("record", "--all", "-q")
    assert result.exit_code == 0, result.stdout
    return made


def offline(made, *extra: str) -> tuple[object, dict[str, dict]]:
    """verify --offline: its result and each lesson's JSON result."""
    report = made.root.parent / "report.json"
    result = coursectl(*OFFLINE, "--json", report, *extra)
    assert result.exit_code in (0, 1), result.stdout
    return result, {entry["lesson"]: entry for entry in json.loads(report.read_text())["results"]}


def reused(results: dict[str, dict]) -> dict[str, bool]:
    return {lesson: entry["reused"] for lesson, entry in results.items()}


def judged_part(entry: dict) -> dict:
    """A lesson's JSON result less what changes from run to run (times, whether a build was cached) and less
    whether it was taken from its last judging."""
    entry = {key: value for key, value in entry.items() if key not in ("seconds", "reused")}
    entry["covered"] = {key: value for key, value in entry["covered"].items() if key != "reused"}
    entry["builds"] = [{key: value for key, value in build.items() if key not in ("cached", "seconds")}
                       for build in entry["builds"]]
    return entry


def edit_entry(made, lesson_id: str, **update) -> None:
    manifest = yaml.safe_load(made.manifest.read_text())
    next(lesson for lesson in manifest["lessons"] if lesson["id"] == lesson_id).update(update)
    made.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False, width=1000))


def test_an_unchanged_course_is_taken_from_its_last_judging_and_says_so(made):
    first, before = offline(made)
    assert reused(before) == {DAY13: False, DAY16: False}
    assert lines(first.stdout)[-1].startswith("0 passed, 2 re-judged, 0 failed")
    second, after = offline(made)
    assert reused(after) == {DAY13: True, DAY16: True}
    assert re.fullmatch(r"0 passed, 2 re-judged, 0 failed in \d+\.\d s; 2 unchanged since last judged",
                        lines(second.stdout)[-1]), lines(second.stdout)[-1]
    verbose = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-v")
    assert f"{DAY16}: covered: as last judged, nothing it is judged from changed; 3 gates held" in verbose.stdout
    assert {k: judged_part(v) for k, v in after.items()} == {k: judged_part(v) for k, v in before.items()}
    assert all(build["cached"] for entry in after.values() for build in entry["builds"])


def test_judging_keeps_nothing_in_the_course(made):
    offline(made)
    course = snapshot(made.root)
    offline(made)
    assert snapshot(made.root) == course


def _touch_transcript(made):
    path = made.evidence(DAY16) / "transcript.txt"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))   # the same times; the change time moves


def _retitle(made):
    edit_entry(made, DAY16, title="tiled matmul, retitled")


def _set_aside(made):
    (made.root / "evidence" / DAY16 / f".{GPU_SLUG}.old").mkdir()


@pytest.mark.parametrize("change", [_touch_transcript, _retitle, _set_aside],
                         ids=["evidence rewritten as it was", "its entry in lessons.yaml", "a folder in its evidence"])
def test_a_lesson_whose_input_changed_is_judged_again_and_the_others_are_not(made, change):
    offline(made)
    change(made)
    _, results = offline(made)
    assert reused(results) == {DAY13: True, DAY16: False}
    _, again = offline(made)
    assert reused(again)[DAY16] == (again[DAY16]["status"] == "PASS")   # kept where it came out clean


def test_a_failure_is_judged_every_time(made):
    offline(made)
    path = made.evidence(DAY16) / "transcript.txt"
    path.write_text(path.read_text() + "a line the program never printed\n")
    for _ in range(2):
        result, results = offline(made)
        assert result.exit_code == 1 and results[DAY16]["status"] == "FAIL" and reused(results) == {DAY13: True,
                                                                                                     DAY16: False}
        assert any("transcript" in reason for reason in results[DAY16]["reasons"]), results[DAY16]["reasons"]


def test_a_source_edited_judges_every_lesson_built_from_it_again(made):
    offline(made)
    source = made.root / "standins" / "replay.cpp"
    source.write_text(source.read_text() + "// edited\n")
    _, results = offline(made)
    assert reused(results) == {DAY13: False, DAY16: False}
    assert {entry["status"] for entry in results.values()} == {"STALE"}


def test_a_lesson_added_at_the_end_leaves_the_others_as_they_were(made):
    offline(made)
    manifest = yaml.safe_load(made.manifest.read_text())
    manifest["lessons"].append({**manifest["lessons"][0], "id": "day99-added", "day": 99,
                                "page": {"path": "lessons/day99-added/README.md"}})
    made.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False, width=1000))
    _, results = offline(made)
    assert reused(results) == {DAY13: True, DAY16: True, "day99-added": False}
    assert results["day99-added"]["status"] == "NO_EVIDENCE"


def test_rejudge_judges_every_lesson_and_keeps_what_it_finds(made):
    offline(made)
    _, results = offline(made, "--rejudge")
    assert reused(results) == {DAY13: False, DAY16: False}
    assert reused(offline(made)[1]) == {DAY13: True, DAY16: True}


def test_rejudge_is_for_offline_only(made):
    result = coursectl("verify", "--all", "--rejudge")
    assert result.exit_code == 2 and "--rejudge: for --offline" in result.stderr


def test_other_code_judges_every_lesson_again(made, monkeypatch):
    offline(made)
    monkeypatch.setattr(judged, "_CODE", ["another coursectl"])
    assert reused(offline(made)[1]) == {DAY13: False, DAY16: False}


def test_a_file_changed_within_the_racy_window_is_not_kept(made, monkeypatch):
    monkeypatch.setattr(judged, "RACY_S", 3600.0)   # everything the test wrote is that recent
    offline(made)
    assert reused(offline(made)[1]) == {DAY13: False, DAY16: False}


@pytest.mark.parametrize("damage", [b"", b"not json\n{}", b'{"key": 1}\n{}', b"\xff\xfe\n"])
def test_an_entry_that_cannot_be_read_or_trusted_is_no_entry(made, damage):
    offline(made)
    manifest = made.load()
    kept = judged.Judged(manifest, Toolchain(), Options())
    for lesson in manifest.lessons:
        kept.path_of(lesson).write_bytes(damage)
    result, results = offline(made)
    assert result.exit_code == 0 and reused(results) == {DAY13: False, DAY16: False}
    assert {entry["status"] for entry in results.values()} == {"PASS"}


def test_a_file_the_judging_read_that_no_build_read_is_part_of_the_key(made):
    """A header the evidence names that no build reads any more: kept with the entry, by its status."""
    offline(made)
    manifest = made.load()
    lesson = manifest.lesson(DAY16)
    kept = judged.Judged(manifest, Toolchain(), Options())
    head, _, body = kept.path_of(lesson).read_bytes().partition(b"\n")
    entry = json.loads(head)
    header = made.root / "standins" / "old.h"
    header.write_text("// once included\n")
    entry["files"].append(["standins/old.h", judged.file_status(header)])
    kept.path_of(lesson).write_bytes(json.dumps(entry).encode() + b"\n" + body)
    assert reused(offline(made)[1])[DAY16] is True
    header.write_text("// edited\n")
    assert reused(offline(made)[1])[DAY16] is False


def test_the_code_digest_covers_every_file_of_the_package(tmp_path, monkeypatch):
    package = tmp_path / "orchestrator"
    (package / "judge").mkdir(parents=True)
    (package / "judge" / "rules.py").write_text("RULE = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    monkeypatch.setattr(judged, "PACKAGE", package)

    def digest() -> str:
        monkeypatch.setattr(judged, "_CODE", [])
        return judged.code_digest()

    first = digest()
    (package / "__pycache__" / "x.pyc").write_bytes(b"compiled again")
    assert digest() == first
    (package / "judge" / "rules.py").write_text("RULE = 2\n")
    assert digest() != first
    assert Path(judged.__file__).resolve().parent.parent.name == "orchestrator"


@pytest.mark.slow
def test_the_runs_of_a_lesson_with_claims_across_them_are_judged_every_time(tmp_path, monkeypatch, fake_gpu):
    """Those claims are judged on every run's parsed transcript, which a kept result does not hold."""
    from test_runs import FIXTURE, _host

    from conftest import fixture_course
    course = fixture_course(FIXTURE, tmp_path, monkeypatch)
    _host(course)
    monkeypatch.chdir(course)
    assert coursectl("record", "--all").exit_code == 0
    report = tmp_path / "runs.json"
    for _ in range(2):
        result = coursectl("verify", "--all", "--offline", "--json", report)
        assert result.exit_code == 0, result.stdout
        entries = json.loads(report.read_text())["results"]
        assert {entry["lesson"]: entry["reused"] for entry in entries} == {"day01-heat[basic]": False,
                                                                          "day01-heat[shared]": False}
        assert all(any(claim["id"] == "same-temperatures" and claim["held"] for claim in entry["claims"])
                   for entry in entries), entries


def test_a_file_named_outside_the_course_is_not_looked_at_and_nothing_is_kept(made, tmp_path):
    from orchestrator.cuda.build import BuildResult
    from orchestrator.judge.results import LessonResult

    manifest = made.load()
    lesson = manifest.lesson(DAY16)
    kept = judged.Judged(manifest, Toolchain(), Options())
    build = BuildResult(lesson=DAY16, arch="sm_90", binary=tmp_path / "binary", cached=True, command=["nvcc"])
    clean = LessonResult(lesson=DAY16, evidence=GPU_SLUG)
    kept.keep(lesson, [build], clean, ["standins/replay.cpp"])
    assert kept.path_of(lesson).is_file()   # a clean result with its files inside the course is kept
    kept.path_of(lesson).unlink()
    kept.keep(lesson, [build], clean, ["../outside.h"])
    assert not kept.path_of(lesson).exists()
