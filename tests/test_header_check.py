"""verify --offline's check of a source's Build/Run/Verified lines reads each GPU's evidence (its meta.json),
never parses its transcript, and builds no page; the stages after it take the sets it read, and judge_evidence
parses each transcript once a lesson for them all."""
from __future__ import annotations

from orchestrator.cuda.toolchain import Toolchain
from orchestrator.judge import evidence, judging
from orchestrator.judge.results import LessonResult
from orchestrator.manifest.load import load_manifest
from orchestrator.render import course as render_course, figures, godbolt, source_header
from orchestrator.render.course import render_all, write_pages
from orchestrator.transcript import parse
from orchestrator.workflows.pipeline import VERIFY_OFFLINE
from orchestrator.workflows.turn import OfflineTurn
from test_render import course  # noqa: F401  (the fixture: a course with evidence)


def test_the_header_check_parses_no_transcript(course, monkeypatch):  # noqa: F811
    write_pages(render_all(load_manifest(course / "lessons.yaml")))
    manifest = load_manifest(course / "lessons.yaml")
    lesson = manifest.lesson("day01-scale")
    assert evidence.list_gpus(manifest.root, lesson.id), "the fixture's lesson has evidence"

    def no_parse(*args, **kwargs):
        raise AssertionError("a transcript was parsed")

    monkeypatch.setattr(parse, "parse_transcript", no_parse)
    monkeypatch.setattr("orchestrator.judge.judging.parse_transcript", no_parse)
    assert source_header.stale_source_header(manifest, lesson) is None
    scale = course / "lessons/day01-scale/scale.cu"
    scale.write_text(scale.read_text().replace("-O3", "-O2", 1))
    assert source_header.stale_source_header(manifest, lesson).endswith("run `coursectl render`")


def test_the_header_check_builds_no_page_link_or_figure(course, monkeypatch):  # noqa: F811
    write_pages(render_all(load_manifest(course / "lessons.yaml")))
    manifest = load_manifest(course / "lessons.yaml")

    def no_page(*args, **kwargs):
        raise AssertionError("the header check built part of a page")

    for module, name in ((godbolt, "godbolt_url"), (godbolt, "page_link"), (figures, "build_figures"),
                         (figures, "build_charts"), (render_course, "render_all")):
        monkeypatch.setattr(module, name, no_page)
    assert [source_header.stale_source_header(manifest, lesson) for lesson in manifest.lessons] == [None, None]


def walk(manifest, lesson) -> LessonResult:
    turn, result = OfflineTurn(manifest, Toolchain(), lesson), LessonResult(lesson=lesson.id)
    for stage in VERIFY_OFFLINE:
        result = stage(turn, result)
    return result


def test_the_offline_stages_read_and_parse_each_set_once(course, monkeypatch):  # noqa: F811
    write_pages(render_all(load_manifest(course / "lessons.yaml")))
    manifest = load_manifest(course / "lessons.yaml")
    lesson = manifest.lesson("day01-scale")
    slugs = evidence.list_gpus(manifest.root, lesson.id)
    assert slugs, "the fixture's lesson has evidence"
    alone = walk(manifest, lesson)
    loads, parses, builds = [], [], []
    real_load, real_parse, real_build = evidence.load_evidence, judging.parse_transcript, evidence.load_build_evidence

    def counted(calls, function):
        def call(*args, **kwargs):
            calls.append(args)
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(evidence, "load_evidence", counted(loads, real_load))
    monkeypatch.setattr(judging, "parse_transcript", counted(parses, real_parse))
    monkeypatch.setattr(evidence, "load_build_evidence", counted(builds, real_build))
    monkeypatch.setattr(judging, "load_build_evidence", counted(builds, real_build))
    again = walk(manifest, lesson)
    assert (len(loads), len(parses)) == (len(slugs), len(slugs))
    assert len(builds) <= len(manifest.architectures)
    assert again.model_dump(exclude={"seconds"}) == alone.model_dump(exclude={"seconds"})
