"""orchestrator.judge.drift: what changed since the evidence (provenance, claims, sanitizer findings), shown
by verify and record, `record --dry-run`, and the Markdown drift report of `--report`.

The upgrade is simulated with fixture evidence written (evidence.write_evidence)
in a test course as if recorded under driver 570.86.15 and CUDA 12.8; the
stood-in H200 reports driver 580.159.04 and CUDA 13.0.
"""

from __future__ import annotations

import json

import pytest

from conftest import (FLAGS, GPU_SLUG, SANITIZER_DATA, after, coursectl, lines, snapshot, statuses, table)
from orchestrator import __version__
from orchestrator.transcript.claims import ClaimResult
from orchestrator.judge.comparison import FieldResult, FieldStatus
from orchestrator.judge.drift import (Provenance, claim_changes, drift_report, finding_changes, moved_fields,
                                provenance_changes)
from orchestrator.judge.evidence import EvidenceMeta, lesson_digest, load_evidence, write_evidence
from orchestrator.judge.results import ClaimChange, FindingChange, LessonResult, ProvenanceChange, Status
from orchestrator.manifest.passes import Tool
from orchestrator.cuda.sanitizer_output import build_report
from orchestrator.cuda.toolchain import Toolchain

DAY16 = "day16-tiled-matmul"
DAY14 = "day14-syncthreads"
DAY14_RACECHECK = {DAY14: {"racecheck": {"findings": [{"kernel": "reverseTileRacy"}]}}}

NOW_512 = """\
512x512x512      naive         0.062      4297.0          1024
512x512x512      tiled         0.041      6608.3            64
                 tiled is 1.54x faster and reads 16.0x fewer floats per thread
"""
# Under the old driver the tiled kernel was no faster at 512^3: three fields and a prediction differ.
OLD_512 = """\
512x512x512      naive         0.062      4297.0          1024
512x512x512      tiled         0.063      4260.9            64
                 tiled is 0.98x faster and reads 16.0x fewer floats per thread
"""
MOVED_ROWS = [
    ["cases[512x512x512/tiled].ms", "tolerance ±25% + ±0.003", "0.063", "0.041", "0.651", "moved"],
    ["cases[512x512x512/tiled].gflops", "tolerance ±25%", "4260.9", "6608.3", "1.551", "moved"],
    ["speedups[512x512x512].speedup", "tolerance ±30%", "0.98", "1.54", "1.571", "moved"],
]
UPGRADE_LINES = ["day16-tiled-matmul: evidence from driver 570.86.15, now 580.159.04",
                 "day16-tiled-matmul: evidence from CUDA 12.8, now 13.0"]
FIELDS_TITLE = "day16-tiled-matmul: 31 fields against nvidia-h200 evidence (28 same, 3 moved)"


def write_old_evidence(made, nvcc_version: str) -> None:
    """Day 16's evidence as recorded on this H200 under driver 570.86.15 and CUDA 12.8."""
    transcript = made.transcript(DAY16).read_text()
    assert transcript.count(NOW_512) == 1
    meta = EvidenceMeta(
        lesson=DAY16, date="2026-10-01T12:00:00+00:00", gpu_name="NVIDIA H200", gpu_slug=GPU_SLUG,
        compute_capability="9.0", driver_version="570.86.15", cuda_version="12.8", nvcc_version=nvcc_version,
        arch="sm_90", flags=FLAGS, source_sha256=lesson_digest(made.root / "standins" / "replay.cpp"),
        transcript_sha256="", wall_seconds=0.5, exit_status=0, coursectl_version=__version__,
        sanitizer_version="2025.3.1.0", max_sm_clock_mhz=1980)
    write_evidence(made.root, meta, transcript.replace(NOW_512, OLD_512))


def redate(made, lesson: str, date: str = "2026-11-02T08:00:00+00:00") -> None:
    """Give recorded evidence a fixed date (a report names it), keeping every file."""
    evidence = load_evidence(made.root, lesson, GPU_SLUG)
    extra = {name: (evidence.directory / name).read_bytes() for name in evidence.meta.files}
    write_evidence(made.root, evidence.meta.model_copy(update={"date": date}), evidence.transcript, extra)


def field_title_index(out: list[str], title: str = FIELDS_TITLE) -> int:
    return out.index(title)


# -- 1. provenance, claims and findings: computed once ---------------------------------------------
H200_NOW = Provenance(gpu="NVIDIA H200", compute_capability="9.0", driver="580.159.04", cuda="13.0",
                      nvcc="13.0.88", sanitizer="2025.3.1.0", coursectl="0.2.0", source="b" * 64,
                      flags=["-std=c++17", "-O3"], arch="sm_90", max_sm_clock_mhz=1980, peak_gbps=4814.3,
                      peak_fp32_gflops=66908.2)


def test_every_provenance_item_that_differs_is_named_in_order():
    old = H200_NOW.model_copy(update={
        "driver": "570.86.15", "cuda": "12.8", "nvcc": "12.8.93", "sanitizer": "2025.1.0.0", "coursectl": "0.1.0",
        "source": "a" * 64, "flags": ["-std=c++17", "-O2"], "max_sm_clock_mhz": 1755, "peak_gbps": None,
        "peak_fp32_gflops": 59320.3})
    changes = provenance_changes(old, H200_NOW)
    assert [change.text for change in changes] == [
        "evidence from driver 570.86.15, now 580.159.04",
        "evidence from CUDA 12.8, now 13.0",
        "evidence from nvcc 12.8.93, now 13.0.88",
        "evidence from compute-sanitizer 2025.1.0.0, now 2025.3.1.0",
        "evidence from coursectl 0.1.0, now 0.2.0",
        "evidence from source sha256 aaaaaaaaaaaa, now bbbbbbbbbbbb",
        "evidence from flags -std=c++17 -O2, now -std=c++17 -O3",
        "evidence from max SM clock 1755 MHz, now 1980 MHz",
        "evidence from peak DRAM bandwidth not recorded, now 4814.3 GB/s",
        "evidence from peak FP32 59320.3 GFLOP/s, now 66908.2 GFLOP/s",
    ]
    assert changes[5] == ProvenanceChange(what="source sha256", old="a" * 64, new="b" * 64)
    assert provenance_changes(H200_NOW, H200_NOW) == []
    assert provenance_changes(H200_NOW, H200_NOW.model_copy(update={"peak_gbps": None}))[0].text == (
        "evidence from peak DRAM bandwidth 4814.3 GB/s, now unknown")


def claim(held: bool, failures: list[str] = (), claim_id: str = "tiled-is-faster", kind: str = "expect") -> ClaimResult:
    return ClaimResult(id=claim_id, kind=kind, says="tiled beats naive", expression="speedup > 1", held=held,
                       checked=3, failures=list(failures))


def test_a_claim_that_stopped_or_started_holding():
    failure = "speedups[512x512x512]: speedup > 1 is false (speedup = 0.98)"
    assert claim_changes([claim(True), claim(True, claim_id="g", kind="gate")],
                         [claim(False, [failure]), claim(True, claim_id="g", kind="gate")]) == [
        ClaimChange(id="tiled-is-faster", kind="expect", says="tiled beats naive", was=True, now=False,
                    failures=[failure])]
    assert claim_changes([claim(False, [failure])], [claim(True)]) == [
        ClaimChange(id="tiled-is-faster", kind="expect", says="tiled beats naive", was=False, now=True,
                    failures=[failure])]
    # A claim judged on one side only (one over ptxas' report, without build evidence) is no change.
    assert claim_changes([], [claim(False, [failure])]) == []


def racecheck(text: str):
    return build_report(Tool.RACECHECK, 86, text)


RACE_LOG = (SANITIZER_DATA / "syncthreads.racecheck.txt").read_text()
MOVED_RACE_LOG = RACE_LOG.replace("syncthreads.cu:150", "syncthreads.cu:152").replace(
    "syncthreads.cu:156", "syncthreads.cu:157")


def test_findings_that_appeared_or_went_away_by_kernel_kind_and_place():
    old, new = racecheck(RACE_LOG), racecheck(MOVED_RACE_LOG)
    said = ("Race reported between Write access at reverseTileRacy(const float *, float *, unsigned long)+0x150 "
            "in syncthreads.cu:{write} and Read access at reverseTileRacy(const float *, float *, unsigned long)"
            "+0x1a0 in syncthreads.cu:{read}")
    assert finding_changes("racecheck", old, new) == [
        FindingChange(tool="racecheck", change="appeared", kernel="reverseTileRacy", kind="Race",
                      at="write syncthreads.cu:152 → read syncthreads.cu:157", reports=4,
                      text=said.format(write=152, read=157)),
        FindingChange(tool="racecheck", change="went away", kernel="reverseTileRacy", kind="Race",
                      at="write syncthreads.cu:150 → read syncthreads.cu:156", reports=4,
                      text=said.format(write=150, read=156))]
    assert finding_changes("racecheck", old, racecheck(RACE_LOG)) == []


def test_verify_names_the_changes_underneath_above_the_field_table(course, fake_sanitizer, prebuilt, nvcc_version,
                                                                   tmp_path):
    made = course([DAY16])
    write_old_evidence(made, nvcc_version)
    report = tmp_path / "verify.json"
    result = coursectl("verify", DAY16, "--json", report)
    assert result.exit_code == 1
    out = lines(result.stdout)
    title = field_title_index(out)
    assert out[title - 2:title] == UPGRADE_LINES
    assert [row for row in table(result.stdout, FIELDS_TITLE) if row[-1] == "moved"] == MOVED_ROWS
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["evidence_date"] == "2026-10-01T12:00:00+00:00"
    assert lesson["provenance"] == [{"what": "driver", "old": "570.86.15", "new": "580.159.04"},
                                    {"what": "CUDA", "old": "12.8", "new": "13.0"}]
    assert lesson["claim_changes"] == [{
        "id": "tiled-is-faster", "kind": "expect", "says": "tiled beats naive on every case (a prediction)",
        "was": False, "now": True, "failures": ["speedups[512x512x512]: speedup > 1 is false (speedup = 0.98)"]}]
    assert lesson["finding_changes"] == []


def test_record_names_the_changes_underneath_above_what_moved(course, fake_sanitizer, prebuilt, nvcc_version):
    made = course([DAY16])
    write_old_evidence(made, nvcc_version)
    result = coursectl("record", DAY16)
    assert (result.exit_code, result.stderr) == (0, "")
    out = lines(result.stdout)
    title = field_title_index(out)
    assert out[title - 2:title] == UPGRADE_LINES
    assert table(result.stdout, FIELDS_TITLE) == [["field", "rule", "evidence", "now", "ratio", "result"],
                                                  *MOVED_ROWS]
    assert statuses(result.stdout, "record") == {DAY16: "PASS (recorded)"}
    assert load_evidence(made.root, DAY16, GPU_SLUG).meta.driver_version == "580.159.04"


def test_right_after_record_nothing_changed_underneath(course, fake_sanitizer, monkeypatch, prebuilt, tmp_path):
    """What verify compares with is what record writes: no change right after a record."""
    course([DAY14, DAY16], sanitizers=DAY14_RACECHECK)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    assert coursectl("record", "--all", "-q").exit_code == 0
    report = tmp_path / "verify.json"
    result = coursectl("verify", "--all", "--json", report)
    assert result.exit_code == 0
    assert [(r["lesson"], r["provenance"], r["claim_changes"], r["finding_changes"])
            for r in json.loads(report.read_text())["results"]] == [(DAY14, [], [], []), (DAY16, [], [], [])]
    assert not any("evidence from" in line for line in lines(result.stdout))


# -- 2. record --dry-run -----------------------------------------------------------------------------
def test_record_dry_run_writes_nothing_and_shows_what_moved(course, fake_sanitizer, prebuilt, nvcc_version,
                                                            tmp_path):
    made = course([DAY16])
    write_old_evidence(made, nvcc_version)
    before = snapshot(made.root / "evidence")
    report = tmp_path / "dry.json"
    result = coursectl("record", DAY16, "--dry-run", "--json", report)
    assert (result.exit_code, result.stderr) == (0, "")
    assert snapshot(made.root / "evidence") == before  # no evidence, no build evidence, no staging folder
    out = lines(result.stdout)
    title = field_title_index(out)
    assert out[title - 2:title] == UPGRADE_LINES
    assert table(result.stdout, FIELDS_TITLE)[1:] == MOVED_ROWS
    assert statuses(result.stdout, "record --dry-run") == {DAY16: "PASS"}
    assert after(result.stdout, "record --dry-run") == [
        "day16-tiled-matmul: note: dry run: would write evidence/day16-tiled-matmul/nvidia-h200/ (transcript.txt, "
        "meta.json) and evidence/day16-tiled-matmul/build/sm_90.json, evidence/day16-tiled-matmul/build/sm_75.json; "
        "nothing was written"]
    written = json.loads(report.read_text())
    assert (written["command"], written["results"][0]["recorded"]) == ("record --dry-run", False)


def test_record_dry_run_without_evidence_creates_nothing(course, fake_sanitizer, monkeypatch, prebuilt):
    made = course([DAY14], sanitizers=DAY14_RACECHECK)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    result = coursectl("record", "--all", "--dry-run", "-q")
    assert result.exit_code == 0
    assert not (made.root / "evidence").exists()
    assert after(result.stdout, "record --dry-run") == [
        "day14-syncthreads: note: dry run: would write evidence/day14-syncthreads/nvidia-h200/ (transcript.txt, "
        "meta.json, racecheck.log, racecheck.stdout.txt) and evidence/day14-syncthreads/build/sm_90.json, "
        "evidence/day14-syncthreads/build/sm_75.json; nothing was written"]


# -- 3. the Markdown drift report ---------------------------------------------------------------------
def now_line(nvcc_version: str) -> str:
    return (f"Now: driver 580.159.04, CUDA 13.0, nvcc {nvcc_version}, compute-sanitizer 2025.3.1.0; "
            f"coursectl {__version__}.")


# 6. The upgrade: verify names the change and the drift report lists what moved.
UPGRADE_REPORT = """\
<!-- Generated by coursectl verify --report from the run and the evidence it was compared with. -->
## Evidence drift: coursectl verify on nvidia-h200

{now}

| lesson | status | underneath | fields moved | claims changed | sanitizer findings changed |
| --- | --- | ---: | ---: | ---: | ---: |
| `day16-tiled-matmul` | FAIL | 2 | 3 of 31 (3 outside their rules) | 1 | 0 |

### day16-tiled-matmul

FAIL against the nvidia-h200 evidence of 2026-10-01.

What changed underneath:

| what | evidence | now |
| --- | --- | --- |
| driver | 570.86.15 | 580.159.04 |
| CUDA | 12.8 | 13.0 |

3 of 31 fields moved, those outside their rule first, then the largest |log ratio| first:

| field | rule | evidence | now | ratio | result |
| --- | --- | ---: | ---: | ---: | --- |
| `speedups[512x512x512].speedup` | tolerance ±30% | 0.98 | 1.54 | 1.571 | **moved** |
| `cases[512x512x512/tiled].gflops` | tolerance ±25% | 4260.9 | 6608.3 | 1.551 | **moved** |
| `cases[512x512x512/tiled].ms` | tolerance ±25% + ±0.003 | 0.063 | 0.041 | 0.651 | **moved** |

Claims whose outcome changed:

| claim | kind | on the evidence | now | why |
| --- | --- | --- | --- | --- |
| `tiled-is-faster`: tiled beats naive on every case (a prediction) | prediction | missed | held | `speedups[512x512x512]: speedup > 1 is false (speedup = 0.98)` |

<details><summary>Why it is FAIL</summary>

```text
3 field(s) differ from the nvidia-h200 evidence:
  cases[512x512x512/tiled].ms [tolerance ±25% + ±0.003]: moved: evidence 0.063, now 0.041
  cases[512x512x512/tiled].gflops [tolerance ±25%]: moved: evidence 4260.9, now 6608.3
  speedups[512x512x512].speedup [tolerance ±30%]: moved: evidence 0.98, now 1.54
```

</details>
"""


def test_an_upgrade_verify_names_it_and_the_drift_report_lists_what_moved(course, fake_sanitizer, prebuilt,
                                                                          nvcc_version, tmp_path):
    made = course([DAY16])
    write_old_evidence(made, nvcc_version)
    drift = tmp_path / "drift.md"
    result = coursectl("verify", DAY16, "--report", drift)
    assert result.exit_code == 1
    out = lines(result.stdout)
    assert out[field_title_index(out) - 2:field_title_index(out)] == UPGRADE_LINES
    assert drift.read_text() == UPGRADE_REPORT.format(now=now_line(nvcc_version))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".drift")] == []  # atomic: no temp file left


RECORD_REPORT = """\
<!-- Generated by coursectl record --report from the run and the evidence it was compared with. -->
## Evidence drift: coursectl record on nvidia-h200

{now}

| lesson | status | underneath | fields moved | claims changed | sanitizer findings changed |
| --- | --- | ---: | ---: | ---: | ---: |
| `day14-syncthreads` | PASS (recorded) | 0 | 0 of 42 | 0 | 2 |
| `day16-tiled-matmul` | PASS (recorded) | 0 | 1 of 31 | 0 | 0 |

### day14-syncthreads

PASS (recorded) against the nvidia-h200 evidence of 2026-11-02.

No field moved.

Sanitizer findings that appeared or went away:

| tool | change | kernel | kind | at | reports |
| --- | --- | --- | --- | --- | ---: |
| racecheck | appeared | `reverseTileRacy` | Race | write syncthreads.cu:152 → read syncthreads.cu:157 | 4 |
| racecheck | went away | `reverseTileRacy` | Race | write syncthreads.cu:150 → read syncthreads.cu:156 | 4 |

### day16-tiled-matmul

PASS (recorded) against the nvidia-h200 evidence of 2026-11-02.

1 of 31 fields moved, those outside their rule first, then the largest |log ratio| first:

| field | rule | evidence | now | ratio | result |
| --- | --- | ---: | ---: | ---: | --- |
| `cases[256x256x256/naive].ms` | tolerance ±25% + ±0.003 | 0.025 | 0.03 | 1.200 | within |
"""


def test_record_report_lists_moved_fields_and_sanitizer_findings(course, fake_sanitizer, monkeypatch, prebuilt,
                                                                 nvcc_version, tmp_path):
    made = course([DAY14, DAY16], sanitizers=DAY14_RACECHECK)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    assert coursectl("record", "--all", "-q").exit_code == 0
    redate(made, DAY14)
    redate(made, DAY16)
    moved = tmp_path / "moved.racecheck.log"   # the same races, two lines further down the source
    moved.write_text(MOVED_RACE_LOG)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(moved))
    transcript = made.transcript(DAY16)
    transcript.write_text(transcript.read_text().replace("naive         0.025", "naive         0.030"))
    drift = tmp_path / "pr" / "drift.md"
    result = coursectl("record", "--all", "-q", "--report", drift)
    assert (result.exit_code, result.stderr) == (0, "")
    assert drift.read_text() == RECORD_REPORT.format(now=now_line(nvcc_version))


def test_a_report_where_nothing_moved_is_short(course, fake_sanitizer, prebuilt, nvcc_version, tmp_path):
    course([DAY16])
    assert coursectl("record", "--all", "-q").exit_code == 0
    drift = tmp_path / "drift.md"
    assert coursectl("verify", "--all", "-q", "--report", drift).exit_code == 0
    assert drift.read_text() == (
        "<!-- Generated by coursectl verify --report from the run and the evidence it was compared with. -->\n"
        "## Evidence drift: coursectl verify on nvidia-h200\n"
        "\n"
        f"{now_line(nvcc_version)}\n"
        "\n"
        "No field moved; nothing changed underneath: `day16-tiled-matmul` against the nvidia-h200 evidence.\n")


def test_a_report_without_evidence_says_there_was_nothing_to_compare(course, fake_sanitizer, prebuilt,
                                                                     nvcc_version, tmp_path):
    course([DAY16])
    drift = tmp_path / "drift.md"
    assert coursectl("record", "--all", "-q", "--report", drift).exit_code == 0
    assert drift.read_text().splitlines()[4:] == [
        "", "Nothing to compare: no evidence for this GPU before this run, or the run stopped first: "
            "`day16-tiled-matmul` PASS (recorded)."]


def test_report_is_refused_offline(course, tmp_path):
    course([DAY16])
    result = coursectl("verify", "--all", "--offline", "--report", tmp_path / "drift.md")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == ("coursectl: error: --report compares a run on a GPU with the evidence; "
                             "--offline runs nothing\n")


@pytest.mark.parametrize("args, named", [
    (["--gpus", "7"], "--gpus"),
    (["--repeat", "3", "--rerun-sanitizers"], "--repeat, --rerun-sanitizers"),
    (["--sanitizer-jobs", "2", "--start-gap", "0"], "--sanitizer-jobs, --start-gap"),   # 0 is given too
])
def test_options_for_gpu_runs_are_refused_offline_not_dropped(course, args, named):
    """They were taken and silently ignored: `--offline --gpus 7` ran as if they had not been given."""
    course([DAY16])
    result = coursectl("verify", "--all", "--offline", *args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: {named}: for runs on a GPU; --offline runs nothing on one\n"


def field(path: str, old, new, status: FieldStatus = FieldStatus.within) -> FieldResult:
    ratio = new / old if isinstance(old, float) and isinstance(new, float) and old else None
    return FieldResult(path=path, rule="tolerance ±25%", old=old, new=new, ratio=ratio, status=status)


def test_moves_are_ordered_outside_the_rule_first_then_by_log_ratio_and_long_tables_fold():
    fields = [field(f"k[{n}].ms", 1.0, 1.0 + n / 100) for n in range(1, 12)]
    fields += [field("k[halved].ms", 1.0, 0.5, FieldStatus.moved), field("same", 2.0, 2.0, FieldStatus.same),
               field("name", "a", "b", FieldStatus.moved), field("k[gone].ms", 3.0, None, FieldStatus.missing)]
    result = LessonResult(lesson="day99-x", status=Status.FAIL, gpu=GPU_SLUG, evidence=GPU_SLUG, fields=fields,
                          evidence_date="2026-11-02T08:00:00+00:00")
    assert [f.path for f in moved_fields(result)] == [
        "name", "k[gone].ms", "k[halved].ms", *(f"k[{n}].ms" for n in range(11, 0, -1))]
    text = drift_report("verify", [result], Toolchain())
    body = text[text.index("| field |"):]
    assert body.splitlines()[:3] == ["| field | rule | evidence | now | ratio | result |",
                                     "| --- | --- | ---: | ---: | ---: | --- |",
                                     "| `name` | tolerance ±25% | a | b | - | **moved** |"]
    assert body.splitlines()[11:] == [
        "| `k[5].ms` | tolerance ±25% | 1 | 1.05 | 1.050 | within |",
        "",
        "<details><summary>4 more fields</summary>",
        "",
        "| field | rule | evidence | now | ratio | result |",
        "| --- | --- | ---: | ---: | ---: | --- |",
        *(f"| `k[{n}].ms` | tolerance ±25% | 1 | 1.0{n} | 1.0{n}0 | within |" for n in (4, 3, 2, 1)),
        "",
        "</details>"]


@pytest.mark.parametrize("command", [["verify"], ["record", "--dry-run"]])
def test_the_json_report_carries_what_changed(command, course, fake_sanitizer, prebuilt, nvcc_version, tmp_path):
    made = course([DAY16])
    write_old_evidence(made, nvcc_version)
    report = tmp_path / "out.json"
    coursectl(*command, DAY16, "-q", "--json", report)
    [lesson] = json.loads(report.read_text())["results"]
    assert [change["what"] for change in lesson["provenance"]] == ["driver", "CUDA"]
    assert [change["id"] for change in lesson["claim_changes"]] == ["tiled-is-faster"]


def test_a_claim_over_ptxas_report_drifts_against_todays_build_where_no_build_evidence_was_recorded(course_copy):
    """The evidence's claims come from judging.claims_on_evidence: without build evidence for its architecture,
    with the build that ran; so a claim over ptxas' report that now fails is a change, not left out."""
    from orchestrator.cuda.build import BuildResult
    from orchestrator.cuda.resources import BuildEvidence
    from orchestrator.cuda.toolchain import Gpu
    from orchestrator.judge.drift import describe_drift
    from orchestrator.manifest.load import load_manifest

    path = course_copy / "evidence" / DAY16 / "build" / "sm_90.json"
    kernels = BuildEvidence.model_validate_json(path.read_text()).kernels
    path.unlink()
    manifest = load_manifest(course_copy / "lessons.yaml")
    build = BuildResult(lesson=DAY16, arch="sm_90", binary=course_copy / "tiled_matmul", cached=True,
                        command=["nvcc"], resources=kernels)
    failed = ClaimResult(id="tiled-smem-is-two-tiles", kind="gate", says="", expression="", held=False, checked=1,
                         failures=["smem moved"])
    result = LessonResult(lesson=DAY16, claims=[failed])
    gpu = Gpu(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability="9.0")
    describe_drift(manifest, manifest.lesson(DAY16), Toolchain(), gpu, "sm_90", result, build)
    assert [(c.id, c.was, c.now) for c in result.claim_changes] == [("tiled-smem-is-two-tiles", True, False)]
