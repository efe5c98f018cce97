"""Judging: runs (one or repeated), the GPU's environment around a run, plausibility, claims' reasons,
snippet expectations and recorded sanitizer passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import COURSE
from orchestrator.judge.comparison import FieldStatus, check_plausibility, fraction_of_peak
from orchestrator.judge.evidence import EvidenceMeta, write_evidence
from orchestrator.manifest.load import load_manifest
from orchestrator.transcript.claims import ClaimResult
from orchestrator.judge import judging
from orchestrator.judge.judging import (claim_reason, compare_with_previous, describe_environment, judge_recorded_pass,
                                        parse_evidence, resolve_snippets)
from orchestrator.judge.results import Status, settle
from orchestrator.process import CommandResult
from orchestrator.cuda.toolchain import Gpu, GpuState, peak_fp32
from orchestrator.transcript.parse import flatten, parse_transcript

SEEDS = Path(__file__).parent / "data" / "seeds"
DAY16 = "day16-tiled-matmul"
H200 = Gpu(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability="9.0",
           peak_gbps=4814.3, peak_fp32_gflops=66908.2)


def judge_runs(manifest, lesson, runs, gpu, arch, compare, resources, environment):
    """judging.judge_runs, then settled as the scheduler settles a lesson after its workflow's last stage."""
    result, chosen = judging.judge_runs(manifest, lesson, runs, gpu, arch, compare=compare, resources=resources, environment=environment)
    return settle(result, compared=compare), chosen


def run_of(text: str, seconds: float = 0.5) -> CommandResult:
    return CommandResult(argv=["./tiled_matmul"], returncode=0, stdout=text.encode(), seconds=seconds)


def with_time(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1
    return text.replace(old, new)


@pytest.fixture
def course(tmp_path):
    """A copy of the course whose day-16 evidence is the seed's H200 transcript."""
    shutil.copy(COURSE / "lessons.yaml", tmp_path / "lessons.yaml")
    shutil.copytree(COURSE / "lessons", tmp_path / "lessons")
    transcript = (SEEDS / "tiled_matmul.txt").read_text()
    meta = EvidenceMeta(lesson=DAY16, date="2026-11-29T00:00:00+00:00", gpu_name="NVIDIA H200",
                        gpu_slug="nvidia-h200", compute_capability="9.0", driver_version="580.159.04",
                        cuda_version="13.0", nvcc_version="13.0.88", arch="sm_90", flags=["-std=c++17", "-O3"],
                        source_sha256="", transcript_sha256="", wall_seconds=0.5, exit_status=0,
                        coursectl_version="test")
    write_evidence(tmp_path, meta, transcript)
    manifest = load_manifest(tmp_path / "lessons.yaml")
    return manifest, manifest.lesson(DAY16), transcript


def test_one_run_is_judged_as_it_is(course):
    manifest, lesson, transcript = course
    result, chosen = judge_runs(manifest, lesson, [run_of(transcript)], H200, "sm_90", compare=True, resources=None, environment={})
    assert (result.status, chosen, result.runs, result.spread) == (Status.PASS, 0, 1, {})
    assert {f.status for f in result.fields} == {FieldStatus.same}


def test_timings_are_judged_by_their_median_and_the_run_nearest_it_is_chosen(course):
    manifest, lesson, transcript = course
    row = "611x613x617      tiled         0.070      6589.1            78"
    runs = [run_of(transcript),
            run_of(with_time(transcript, row, "611x613x617      tiled         0.071      6480.0            78")),
            run_of(with_time(transcript, row, "611x613x617      tiled         0.090      5300.0            78"))]
    result, chosen = judge_runs(manifest, lesson, runs, H200, "sm_90", compare=True, resources=None, environment={})
    fields = {f.path: f for f in result.fields}
    gflops = fields["cases[611x613x617/tiled].gflops"]
    assert (gflops.old, gflops.new, gflops.status) == (6589.1, 6480.0, FieldStatus.within)
    assert result.spread["cases[611x613x617/tiled].gflops"] == round((6589.1 - 5300.0) / 6480.0, 4)
    assert result.spread["cases[256x256x256/naive].gflops"] == 0.0
    assert chosen == 1
    assert result.status is Status.PASS


def test_a_spread_wider_than_the_tolerance_is_ambiguous_not_failed(course):
    manifest, lesson, transcript = course
    row = "611x613x617      tiled         0.070      6589.1            78"
    runs = [run_of(transcript),
            run_of(with_time(transcript, row, "611x613x617      tiled         0.140      3300.0            78")),
            run_of(with_time(transcript, row, "611x613x617      tiled         0.070      6600.0            78"))]
    result, _ = judge_runs(manifest, lesson, runs, H200, "sm_90", compare=True, resources=None, environment={})
    fields = {f.path: f for f in result.fields}
    assert fields["cases[611x613x617/tiled].gflops"].status is FieldStatus.ambiguous
    assert fields["cases[611x613x617/tiled].ms"].status is FieldStatus.ambiguous
    assert fields["cases[611x613x617/naive].gflops"].status is FieldStatus.same
    assert result.status is Status.PASS, result.reasons


def test_record_gives_each_field_the_status_verify_gives_it(course):
    """Repeated runs on a throttled GPU: a spread past its tolerance is ambiguous, a move untrusted, for both."""
    manifest, lesson, transcript = course
    row = "611x613x617      tiled         0.070      6589.1            78"
    slow = with_time(transcript, "256x256x256      tiled         0.010      3350.1",
                     "256x256x256      tiled         0.200       167.5")
    runs = [run_of(slow), run_of(with_time(slow, row, "611x613x617      tiled         0.140      3300.0            78")),
            run_of(with_time(slow, row, "611x613x617      tiled         0.070      6600.0            78"))]
    environment = describe_environment(GpuState(throttle_reasons=0x20), GpuState(throttle_reasons=0x20))
    verified, _ = judge_runs(manifest, lesson, runs, H200, "sm_90", compare=True, resources=None, environment=environment)
    recorded, _ = judge_runs(manifest, lesson, runs, H200, "sm_90", compare=False, resources=None, environment=environment)
    compare_with_previous(manifest, lesson, recorded, "nvidia-h200")
    statuses = {f.path: f.status for f in verified.fields}
    assert (statuses["cases[611x613x617/tiled].gflops"], statuses["cases[256x256x256/tiled].gflops"]) == (
        FieldStatus.ambiguous, FieldStatus.untrusted)
    assert {f.path: f.status for f in recorded.fields} == statuses


def test_a_gate_failing_in_any_run_fails_the_lesson(course):
    manifest, lesson, transcript = course
    broken = with_time(transcript, "all 3 cases match the CPU reference at every element\n",
                       "FAILED tiled case 611x613x617: first wrong element at row 0, column 0: got 11, want 4\n")
    runs = [run_of(transcript), run_of(transcript), run_of(broken)]
    result, _ = judge_runs(manifest, lesson, runs, H200, "sm_90", compare=True, resources=None, environment={})
    assert result.status is Status.FAIL
    assert any(r.startswith("run 3 of 3: gate 'every-case-matches' failed") for r in result.reasons)


def test_a_throttled_run_does_not_fail_on_its_timings(course):
    manifest, lesson, transcript = course
    slow = with_time(transcript, "611x613x617      tiled         0.070      6589.1            78",
                     "611x613x617      tiled         0.200      2300.0            78")
    environment = describe_environment(GpuState(throttle_reasons=0x20), GpuState(throttle_reasons=0x20))
    result, _ = judge_runs(manifest, lesson, [run_of(slow)], H200, "sm_90", compare=True, resources=None, environment=environment)
    fields = {f.path: f for f in result.fields}
    assert fields["cases[611x613x617/tiled].gflops"].status is FieldStatus.untrusted
    assert result.status is Status.PASS
    assert result.notes[0] == ("timings not trusted: GPU throttled before the run (clocks event reasons 0x20); "
                               "GPU throttled after the run (clocks event reasons 0x20)")


def test_the_same_slow_run_on_a_quiet_gpu_fails(course):
    manifest, lesson, transcript = course
    slow = with_time(transcript, "611x613x617      tiled         0.070      6589.1            78",
                     "611x613x617      tiled         0.200      2300.0            78")
    environment = describe_environment(GpuState(throttle_reasons=0x1), GpuState(throttle_reasons=0x0))
    assert environment.untrusted is None
    result, _ = judge_runs(manifest, lesson, [run_of(slow)], H200, "sm_90", compare=True, resources=None, environment=environment)
    assert result.status is Status.FAIL
    assert "cases[611x613x617/tiled].gflops [tolerance ±25%]: moved: evidence 6589.1, now 2300.0" in result.reasons[0]


def test_another_process_on_the_gpu_makes_the_run_untrusted():
    environment = describe_environment(GpuState(processes=[4242]), GpuState())
    assert environment.untrusted == "other processes on the GPU: 4242"


def test_the_h200s_fp32_peak():
    # 132 SMs x 128 FP32 lanes x 2 (FMA) x 1980 MHz, as NVML reports the H200.
    assert peak_fp32("9.0", 132, 1980) == 66908.2
    assert peak_fp32("9.9", 132, 1980) is None
    assert peak_fp32("9.0", None, 1980) is None


def test_plausibility_names_the_figure_and_the_peak():
    lesson = load_manifest(COURSE / "lessons.yaml").lesson(DAY16)
    text = (SEEDS / "tiled_matmul.txt").read_text().replace("6589.1", "70000.0")
    flats = list(flatten(lesson.output.items, parse_transcript(lesson.output, text).scope))
    assert check_plausibility(flats, 4814.3, 66908.2) == [
        "plausibility: cases[611x613x617/tiled].gflops = 70000 GFLOP/s exceeds the GPU's peak 66908.2 GFLOP/s; "
        "the lesson's byte or flop count is wrong"]
    assert check_plausibility(flats, None, None) == []
    assert fraction_of_peak(2407.15, "GB/s", 4814.3, None) == 0.5
    assert fraction_of_peak(1.0, "ms", 4814.3, 66908.2) is None


def test_record_and_verify_with_repeat_through_the_cli(make_course, fake_gpu, prebuilt, monkeypatch):
    import json

    from conftest import coursectl, table

    made = make_course(["day16-tiled-matmul"], sanitizers={})
    monkeypatch.chdir(made.root)
    recorded = coursectl("record", "--all", "--repeat", "3", "--no-sanitize")
    assert (recorded.exit_code, recorded.stderr) == (0, "")
    meta = json.loads((made.evidence("day16-tiled-matmul") / "meta.json").read_text())
    assert meta["repeat"]["runs"] == 3
    assert set(meta["repeat"]["spread"].values()) == {0.0}
    verified = coursectl("verify", "--all", "--repeat", "3", "--no-sanitize", "-vv")
    assert verified.exit_code == 0
    rows = table(verified.stdout, "day16-tiled-matmul: 31 fields against nvidia-h200 evidence (31 same)")
    assert rows[0] == ["field", "rule", "evidence", "median of 3", "ratio", "spread", "result"]
    assert ["cases[611x613x617/tiled].gflops", "tolerance ±25%", "6589.1", "6589.1", "1.000", "0.0%", "same"] in rows


# -- claims' reasons, snippets, recorded passes ----------------------------------------------------
def test_a_failed_claim_has_one_text_whatever_judged_it():
    claim = ClaimResult(id="fast", kind="gate", says="tiles beat naive", expression="x", held=False, checked=7,
                        failures=[f"case {n}: x is false" for n in range(7)])
    assert claim_reason(claim) == "\n".join([
        "gate 'fast' failed (tiles beat naive)", *(f"  case {n}: x is false" for n in range(5)), "  ... and 2 more"])
    assert claim_reason(claim, "memcheck: ", " under the sanitizer").splitlines()[0] == \
        "memcheck: gate 'fast' failed under the sanitizer (tiles beat naive)"


def test_a_snippet_expectation_becomes_the_snippets_lines_in_the_source():
    from orchestrator.manifest.passes import ExpectedFinding
    from orchestrator.manifest.snippets import Snippet

    snippets = {"racy": Snippet(name="racy", path="x.cu", first_line=145, last_line=159, text="")}
    wanted = [ExpectedFinding(kernel="reverseTileRacy", snippet="racy"), ExpectedFinding(kind="api", text="oops")]
    resolved = resolve_snippets(wanted, snippets, "syncthreads.cu")
    assert [(f.line_range, f.file) for f in resolved] == [((145, 159), "syncthreads.cu"), (None, None)]
    assert resolved[0].describe() == "in reverseTileRacy inside snippet 'racy' (lines 145-159)"


def test_the_recorded_racecheck_of_day14_is_judged_once_for_verify_and_render():
    """The committed evidence: the race it exists to show is found in the 'racy' snippet, nothing else."""
    manifest = load_manifest(COURSE / "lessons.yaml")
    lesson = manifest.lesson("day14-syncthreads")
    parsed = parse_evidence(manifest, lesson, "nvidia-h200")
    outcome, report = judge_recorded_pass(manifest, lesson, parsed.evidence, "racecheck",
                                          manifest.sanitizers(lesson)["racecheck"])
    assert (outcome.recorded, outcome.problems, outcome.kernels) == (True, [], ["reverseTileRacy"])
    assert outcome.findings == len(report.findings) > 0
    assert judge_recorded_pass(manifest, lesson, parsed.evidence, "synccheck",
                               manifest.sanitizers(lesson)["racecheck"]) is None   # never recorded


# -- a claim over ptxas' report on the evidence: one outcome for the page and verify --offline -------------
TILED_SMEM = "ptxas agrees that the tiled kernel holds two 16 x 16 float tiles and the naive one none"


def on_the_page(manifest, says: str) -> str:
    """What day 16's page says of a claim on the H200 evidence: held, failed or not checked."""
    import re

    from orchestrator.render.course import render_all

    [page] = [p for p in render_all(manifest) if p.name == f"lessons/{DAY16}/README.md"]
    return re.search(rf"<summary>{re.escape(says)}: <b>([a-z ]+)</b>", page.new).group(1)


def with_smem(kernels: dict, smem: int) -> dict:
    return {name: k.model_copy(update={"smem": smem}) if name == "matmulTiled" else k for name, k in kernels.items()}


@pytest.mark.parametrize("recorded_smem, today_smem, on_the_evidence", [
    (2048, 2112, "held"),     # today's build pads a tile: the evidence, and its ptxas report, still hold
    (2112, 2048, "failed"),   # the recorded ptxas report disagrees with the transcript; today's build does not
], ids=["today-changed", "recorded-differs"])
def test_a_claim_over_ptxas_report_has_the_pages_outcome_in_verify_offline(course_copy, recorded_smem, today_smem,
                                                                           on_the_evidence):
    from orchestrator.cuda.build import BuildResult
    from orchestrator.cuda.resources import BuildEvidence
    from orchestrator.judge.judging import judge_evidence
    from orchestrator.judge.results import LessonResult

    path = course_copy / "evidence" / DAY16 / "build" / "sm_90.json"
    recorded = BuildEvidence.model_validate_json(path.read_text())
    assert recorded.kernels["matmulTiled"].smem == 2048
    path.write_text(recorded.model_copy(update={"kernels": with_smem(recorded.kernels, recorded_smem)})
                    .model_dump_json(indent=2) + "\n")
    manifest = load_manifest(course_copy / "lessons.yaml")
    today = BuildResult(lesson=DAY16, arch="sm_90", binary=course_copy / "tiled_matmul", cached=True,
                        command=["nvcc"], resources=with_smem(recorded.kernels, today_smem))
    out = LessonResult(lesson=DAY16, builds=[today])
    judge_evidence(manifest, manifest.lesson(DAY16), out)
    claims = {claim.id: claim for claim in out.claims}

    assert on_the_page(manifest, TILED_SMEM) == on_the_evidence
    assert ("held" if claims["tiled-smem-is-two-tiles"].held else "failed") == on_the_evidence
    assert claims["tiled-smem-is-two-tiles [sm_90]"].held is (today_smem == 2048)
    failed = [reason.splitlines()[0] for reason in out.reasons if "tiled-smem-is-two-tiles" in reason]
    assert failed == [f"nvidia-h200: gate 'tiled-smem-is-two-tiles{'' if on_the_evidence == 'failed' else ' [sm_90]'}' "
                      f"failed ({TILED_SMEM})"]
    # Every other claim: the evidence and today's build agree, and it is listed once.
    assert [c for c in claims if c.startswith("no-kernel-spills")] == ["no-kernel-spills [sm_90]"]


def test_the_evidence_is_judged_with_its_build_evidence_else_with_todays_build_of_its_architecture(course_copy):
    from orchestrator.cuda.build import BuildResult
    from orchestrator.cuda.resources import BuildEvidence
    from orchestrator.errors import EvidenceError
    from orchestrator.judge.judging import claims_on_evidence

    manifest = load_manifest(course_copy / "lessons.yaml")
    lesson = manifest.lesson(DAY16)
    parsed = parse_evidence(manifest, lesson, "nvidia-h200")
    path = course_copy / "evidence" / DAY16 / "build" / "sm_90.json"
    kernels = BuildEvidence.model_validate_json(path.read_text()).kernels

    def build(arch: str, smem: int) -> BuildResult:
        return BuildResult(lesson=DAY16, arch=arch, binary=course_copy / "tiled_matmul", cached=True,
                           command=["nvcc"], resources=with_smem(kernels, smem))

    def tiled_smem(builds) -> tuple[bool | None, type | None]:
        claims, unreadable = claims_on_evidence(manifest, lesson, parsed, builds)
        held = {claim.id: claim.held for claim in claims}
        assert ("no-kernel-spills" in held) is ("tiled-smem-is-two-tiles" in held)
        return held.get("tiled-smem-is-two-tiles"), type(unreadable) if unreadable else None

    today = [build("sm_75", 2048), build("sm_90", 2112)]
    assert tiled_smem(today) == (True, None)                 # the recorded report, not today's
    path.unlink()
    assert tiled_smem(today) == (False, None)                # none recorded: today's build for sm_90
    assert tiled_smem(today[:1]) == (None, None)             # nor built for sm_90 today: not judged
    path.mkdir()
    assert tiled_smem(today) == (None, EvidenceError)        # recorded, and unreadable: said, not judged
