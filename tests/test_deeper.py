"""Build evidence and plausibility, judged offline against what was recorded on the H200."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import COURSE
from bugs import make_bug_course
from conftest import build_in_background
from orchestrator.judge.evidence import load_evidence, write_evidence
from orchestrator.manifest.load import load_manifest
from orchestrator.workflows.pipeline import verify_offline
from orchestrator.judge.results import Options, Status
from orchestrator.cuda.toolchain import discover

DAY16 = "day16-tiled-matmul"
DAY13 = "day13-shared-memory"


PADDED_TILE = {"file": "test", "name": "padded-tile", "lesson": DAY16,
               "old": "__shared__ float aTile[kTileDim][kTileDim];",
               "new": "__shared__ float aTile[kTileDim][kTileDim + 1];"}


# Day 16 and day 13 as they are, and day 16 with a padded tile, for sm_90: built
# while other tests run (see conftest), each test's verify_offline finds its
# build in the session's cache, made moments before.
build_in_background("real day16", "real", lambda folder: COURSE / "lessons.yaml", DAY16, "real_builds")
build_in_background("real day13", "real", lambda folder: COURSE / "lessons.yaml", DAY13, "real_builds")
build_in_background("padded day16", "padded", lambda folder: make_bug_course(PADDED_TILE, folder, COURSE), DAY16,
                    "real_builds")


@pytest.fixture(scope="module")
def real_builds(built_in_background) -> None:
    """Built in the background, or already by another test of the session (coursectl check builds day 16)."""
    for name in ("real day16", "real day13", "padded day16"):
        assert built_in_background[name].binary.is_file()


@pytest.mark.slow
def test_recorded_build_evidence_matches_a_fresh_build(real_builds):
    manifest = load_manifest(COURSE / "lessons.yaml")
    lesson = manifest.lesson(DAY16)
    recorded = json.loads((COURSE / "evidence" / DAY16 / "build" / "sm_90.json").read_text())
    assert recorded["kernels"]["matmulTiled"]["smem"] == 2 * 16 * 16 * 4
    [result] = verify_offline(manifest, [lesson], discover(), Options(jobs=2, arch="sm_90"))
    assert result.status is Status.PASS, result.reasons


@pytest.mark.slow
def test_a_padded_tile_fails_offline_naming_the_kernel_and_resource(tmp_path, real_builds):
    manifest = load_manifest(make_bug_course(PADDED_TILE, tmp_path / "course", COURSE))
    [result] = verify_offline(manifest, manifest.lessons, discover(), Options(jobs=2, arch="sm_90"))
    text = "\n".join(result.reasons)
    assert result.status is Status.FAIL
    assert "sm_90: matmulTiled: smem 2048 -> 2112" in text
    assert "gate 'tiled-smem-is-two-tiles [sm_90]' failed" in text


@pytest.mark.slow
def test_a_padded_tile_still_holds_on_the_evidence_offline_as_the_page_shows(tmp_path, real_builds):
    """Today's build changed, the evidence did not: verify --offline gives the claim on the evidence the page's
    outcome, and today's build its own."""
    from orchestrator.render.course import render_all

    manifest = load_manifest(make_bug_course(PADDED_TILE, tmp_path / "course", COURSE))
    shutil.copy(COURSE / "README.md", manifest.root / "README.md")   # render also writes its lessons table
    [result] = verify_offline(manifest, manifest.lessons, discover(), Options(jobs=2, arch="sm_90"))
    held = {claim.id: claim.held for claim in result.claims}
    assert (held["tiled-smem-is-two-tiles"], held["tiled-smem-is-two-tiles [sm_90]"]) == (True, False)
    [page] = [p for p in render_all(manifest, COURSE / "templates") if p.name == f"lessons/{DAY16}/README.md"]
    assert ("<summary>ptxas agrees that the tiled kernel holds two 16 x 16 float tiles and the naive one none: "
            "<b>held</b> (gate)</summary>") in page.new


@pytest.mark.slow
def test_a_figure_above_the_recorded_peak_fails_plausibility(tmp_path, real_builds):
    manifest = load_manifest(COURSE / "lessons.yaml")
    evidence = load_evidence(COURSE, DAY13, "nvidia-h200")
    assert evidence.meta.peak_gbps and evidence.meta.peak_gbps > 1000
    course = tmp_path / "course"
    shutil.copytree(COURSE / "lessons" / DAY13, course / "lessons" / DAY13)
    shutil.copy(COURSE / "lessons.yaml", course / "lessons.yaml")
    for other in manifest.lessons:
        if other.id != DAY13:
            shutil.copytree(COURSE / "lessons" / other.id, course / "lessons" / other.id)
    row = next(line for line in evidence.transcript.splitlines() if line.startswith("copyRowMajor"))
    gbps = row.split()[2]
    inflated = evidence.transcript.replace(row, row.replace(gbps, "9999.9"))
    write_evidence(course, evidence.meta, inflated)
    copy = load_manifest(course / "lessons.yaml")
    [result] = verify_offline(copy, [copy.lesson(DAY13)], discover(), Options(jobs=1, arch="sm_90"))
    text = "\n".join(result.reasons)
    assert result.status is Status.FAIL
    assert (f"nvidia-h200: plausibility: kernels[copyRowMajor].gbps = 9999.9 GB/s exceeds the GPU's peak "
            f"{evidence.meta.peak_gbps:g} GB/s") in text


@pytest.mark.parametrize("lesson_id", ["day13-shared-memory", "day14-syncthreads", DAY16, "day71-matmul-fp16"])
def test_every_recorded_transcript_parses_and_holds_its_gates(lesson_id):
    from orchestrator.transcript.claims import evaluate_claims
    from orchestrator.cuda.resources import BuildEvidence
    from orchestrator.transcript.parse import parse_transcript

    manifest = load_manifest(COURSE / "lessons.yaml")
    lesson = manifest.lesson(lesson_id)
    evidence = load_evidence(COURSE, lesson_id, "nvidia-h200")
    assert evidence.meta.gpu_name == "NVIDIA H200" and evidence.meta.compute_capability == "9.0"
    transcript = parse_transcript(lesson.output, evidence.transcript)
    build = BuildEvidence.model_validate_json((COURSE / "evidence" / lesson_id / "build" / "sm_90.json").read_text())
    claims = evaluate_claims(lesson.output, transcript, lesson.claims, build.kernels)
    assert [c.id for c in claims] == [c.id for c in lesson.claims]
    assert [c.id for c in claims if c.kind == "gate" and not c.held] == []


@pytest.mark.slow
def test_a_stale_source_header_fails_offline_naming_the_fix(course_copy):
    """A source whose Build line no longer says how it is built: verify --offline says so, render fixes it."""
    course = course_copy
    source = course / "lessons" / DAY16 / "tiled_matmul.cu"
    text = source.read_text()
    assert text.count("-std=c++17 -O3") == 1
    source.write_text(text.replace("-std=c++17 -O3", "-std=c++17 -O2"))
    manifest = load_manifest(course / "lessons.yaml")
    [result] = verify_offline(manifest, [manifest.lesson(DAY16)], discover(), Options(jobs=2, arch="sm_90"))
    assert result.status is Status.FAIL
    assert (f"lessons/{DAY16}/tiled_matmul.cu: its Build/Run/Verified lines are not the ones render writes from "
            "lessons.yaml and the evidence; run `coursectl render`") in result.reasons


@pytest.mark.slow
def test_an_edited_transcript_of_a_lesson_with_a_source_header_is_one_reason_naming_it_from_the_course(course_copy):
    """The Build/Run/Verified check reads the evidence too; what is wrong with it is said once, by the evidence."""
    course = course_copy
    transcript = course / "evidence" / DAY16 / "nvidia-h200" / "transcript.txt"
    transcript.write_text(transcript.read_text().replace("GPU: NVIDIA", "GPU: nvidia", 1))
    manifest = load_manifest(course / "lessons.yaml")
    [result] = verify_offline(manifest, [manifest.lesson(DAY16)], discover(), Options(jobs=2, arch="sm_90"))
    assert result.status is Status.FAIL
    assert result.reasons == [f"evidence for nvidia-h200: evidence/{DAY16}/nvidia-h200/transcript.txt: transcript "
                              "does not match the sha256 in meta.json: it was edited after recording"]
