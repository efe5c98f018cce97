"""The command line through typer's CliRunner, on stand-in lessons and a stood-in H200.

Each test builds a course tree in tmp_path (conftest.write_course) whose lessons
are the stand-ins of tests/data/standins/, judged by the real day-13, day-14 and
day-16 output schemas and claims, and runs coursectl in it. Builds are real and
shared through the session's cache; the GPU, nvidia-smi and compute-sanitizer
are stood in for.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer

from conftest import (tally_line, unverified, GPU_SLUG, GPU_UUID, HH, REAL_NVCC, SANITIZER_DATA, SEEDS, H, after, coursectl, edit, is_gone, lines,
                      real_lessons, seconds_masked, snapshot, statuses, table)
from orchestrator import __version__
from orchestrator.cli import common
from orchestrator.errors import INTERRUPTED, RunFailed, UsageError
from orchestrator.cuda.toolchain import NO_GPU_HINT


def claim(lesson: str, claim_id: str) -> dict:
    return next(c for c in real_lessons()[lesson]["claims"] if c["id"] == claim_id)


SUMMARY_HEADER = ["lesson", "status", "gpu", "evidence", "run", "sanitizers", "total"]
GPU_LINE = "GPU: NVIDIA H200 (compute capability 9.0)"


# -- version, help, doctor ---------------------------------------------------------------
def test_version():
    result = coursectl("--version")
    assert (result.exit_code, result.stdout) == (0, f"coursectl {__version__}\n")


def test_help_lists_the_commands():
    result = coursectl("--help")
    assert result.exit_code == 0
    out = lines(result.stdout)
    commands = [line.split()[0] for line in out[out.index("Commands:") + 1:] if line.strip()]
    expected = ["doctor", "build", "run", "verify", "record", "sanitize", "report"]
    assert [c for c in commands if c in expected] == expected  # later commands may join them


def host_compiler_row() -> str:
    """doctor's row for this machine's g++: its resolved path and the first line of its --version."""
    path = os.path.realpath(shutil.which("g++"))
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    return f" host compiler     {H} {path} ({version})"


def test_doctor_shows_the_gpu_and_the_evidence(course, fake_sanitizer, sanitizer_bin, nvcc_version, prebuilt):
    course(["day13-shared-memory", "day16-tiled-matmul"])
    assert coursectl("record", "day13-shared-memory", "-q").exit_code == 0
    result = coursectl("doctor")
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout) == [
        f" nvcc              {H} {shutil.which('nvcc')} ({nvcc_version})",
        host_compiler_row(),
        f" compute-sanitizer {H} {sanitizer_bin / 'compute-sanitizer'} (2025.3.1.0)",
        f" driver            {H} 580.159.04",
        f" CUDA (driver)     {H} 13.0",
        f" GPUs via          {H} nvidia-smi",
        f" GPU 0             {H} NVIDIA H200, compute capability 9.0, 143771 MiB, 00000000:19:00.0, {GPU_UUID}",
        "evidence",
        f" lesson              {HH} recorded on {HH} this nvidia-h200",
        "━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━",
        f" day13-shared-memory {H} nvidia-h200 {H} yes",
        f" day16-tiled-matmul  {H} none        {H} NO",
    ]


def test_doctor_without_compute_sanitizer_or_gpu_reports_and_exits_0(course, monkeypatch, nvcc_bin, nvcc_version):
    """Without a GPU or compute-sanitizer there is still work for this machine: verify --offline, render."""
    from orchestrator.cuda import toolchain

    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(nvcc_bin))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])  # not /usr/local/cuda/bin of this machine
    monkeypatch.setenv("COURSECTL_NO_NVML", "1")
    result = coursectl("doctor")
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout)[:6] == [
        f" nvcc              {H} {nvcc_bin / 'nvcc'} ({nvcc_version})",
        host_compiler_row(),
        f" compute-sanitizer {H} NOT FOUND: verify and record need --no-sanitize",
        f" driver            {H} -",
        f" CUDA (driver)     {H} -",
        f" GPUs via          {H} none: verify --offline, build, check, new, compare and render work here"]


def test_doctor_in_a_narrow_terminal_shows_the_path_of_nvcc_whole(course, monkeypatch, nvcc_bin, nvcc_version):
    """At 40 columns the path was cut to '/tmp/pytest-of-root/pyt…': the one thing doctor is asked for."""
    from orchestrator.cuda import toolchain

    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(nvcc_bin))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])
    monkeypatch.setenv("COURSECTL_NO_NVML", "1")
    result = coursectl("doctor", columns=40)
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout)[0] == f" nvcc              {H} {nvcc_bin / 'nvcc'} ({nvcc_version})"


def test_doctor_without_a_host_compiler_says_so_and_exits_0(course, monkeypatch, tmp_path, nvcc_version):
    """nvcc builds host code with g++ (or NVCC_CCBIN's compiler): doctor names the one a build would use."""
    from orchestrator.cuda import toolchain

    course(["day13-shared-memory"])
    alone = tmp_path / "bin"
    alone.mkdir()
    (alone / "nvcc").symlink_to(REAL_NVCC)
    monkeypatch.setenv("PATH", str(alone))
    monkeypatch.delenv("NVCC_CCBIN", raising=False)
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])
    monkeypatch.setenv("COURSECTL_NO_NVML", "1")
    result = coursectl("doctor")
    assert result.exit_code == 0
    assert lines(result.stdout)[1] == f" host compiler     {H} g++: NOT FOUND on PATH: nvcc builds host code with it"
    monkeypatch.setenv("NVCC_CCBIN", shutil.which("gcc", path=os.defpath))
    gcc = os.path.realpath(shutil.which("gcc", path=os.defpath))
    assert lines(coursectl("doctor").stdout)[1].startswith(f" host compiler     {H} {gcc} (")


def test_doctor_without_nvcc_exits_3(course, monkeypatch, gpu_bin):
    from orchestrator.cuda import toolchain

    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(gpu_bin))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])
    result = coursectl("doctor")
    assert result.exit_code == 3
    assert lines(result.stdout)[0] == f" nvcc              {H} NOT FOUND"
    assert result.stderr == ("coursectl: error: nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin\n"
                             "hint: install the CUDA toolkit or set CUDA_HOME\n")


@pytest.mark.gpu
def test_doctor_finds_the_real_gpu(course):
    course(["day13-shared-memory"])
    result = coursectl("doctor")
    rows = {line.split(H)[0].strip(): line.split(H)[1].strip() for line in lines(result.stdout) if H in line}
    assert rows["GPUs via"] in ("nvml", "nvidia-smi")
    assert re.fullmatch(r"NVIDIA .+, compute capability \d+\.\d+, \d+ MiB, \S+, GPU-[0-9a-f-]+", rows["GPU 0"])


# -- build and run -------------------------------------------------------------------------
def test_build_reuses_the_cached_binary(course, fake_gpu, prebuilt):
    course(["day13-shared-memory"])
    result = coursectl("build", "--all")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"day13-shared-memory (sm_90): cached: {prebuilt['day13-shared-memory']}\n"


def test_run_prints_the_transcript(course, fake_gpu, prebuilt):
    course(["day16-tiled-matmul"])
    result = coursectl("run", "day16-tiled-matmul")
    assert (result.exit_code, result.stdout, result.stderr) == (0, (SEEDS / "tiled_matmul.txt").read_text(), "")


def test_unknown_lesson_is_a_usage_error(course, fake_gpu):
    course(["day13-shared-memory"])
    result = coursectl("verify", "day99-nothing")
    assert result.exit_code == 2
    assert result.stderr == ("coursectl: error: no lesson 'day99-nothing' in lessons.yaml\n"
                             "hint: lessons: day13-shared-memory\n")


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "11", "soon"])
def test_a_start_gap_that_is_no_number_of_seconds_from_0_to_10_is_a_usage_error(course, fake_gpu, value):
    course(["day13-shared-memory"])
    for command in ("verify", "record"):
        result = coursectl(command, "--all", "--start-gap", value)
        assert result.exit_code == 2
        assert "Invalid value for '--start-gap'" in result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_coursectl_itself_refuses_a_start_gap_that_is_nan_or_infinite(value):
    """typer 0.16 to 0.28 let `--start-gap nan` through min=0 and max=10; coursectl's own check does not."""
    from orchestrator.cli.common import seconds_option as _seconds
    from orchestrator.errors import UsageError

    with pytest.raises(UsageError, match=rf"^Invalid value for '--start-gap': {value} is not a number of seconds$"):
        _seconds("--start-gap", float(value))
    assert _seconds("--start-gap", 0.5) == 0.5 and _seconds("--start-gap", None) is None


# -- verify and record ---------------------------------------------------------------------
def test_verify_without_evidence(course, fake_gpu, prebuilt):
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 0
    assert table(seconds_masked(result.stdout), "verify") == [
        SUMMARY_HEADER,
        ["day13-shared-memory", "NO_EVIDENCE", GPU_SLUG, "-", "T s", "-", "T s"],
        ["day14-syncthreads", "NO_EVIDENCE", GPU_SLUG, "-", "T s", "-", "T s"],
        ["day16-tiled-matmul", "NO_EVIDENCE", GPU_SLUG, "-", "T s", "-", "T s"]]
    assert after(result.stdout, "verify") == [unverified("day13-shared-memory"), unverified("day14-syncthreads"),
                                              unverified("day16-tiled-matmul")]
    assert tally_line(result.stdout) == "0 passed, 3 without evidence, 0 failed in T s"


FIELDS_DAY16 = [
    ["gpu", "device", "NVIDIA H200", "NVIDIA H200", "", "same"],
    ["cc", "device", "9.0", "9.0", "", "same"],
    ["tile", "exact", "16", "16", "1.000", "same"],
    ["tile_cols", "exact", "16", "16", "1.000", "same"],
    ["threads", "exact", "256", "256", "1.000", "same"],
    ["smem_bytes", "exact", "2048", "2048", "1.000", "same"],
] + [
    row
    for case, kernel, ms, gflops, loads in [
        ("256x256x256", "naive", "0.025", "1344", "512"), ("256x256x256", "tiled", "0.01", "3350.1", "32"),
        ("512x512x512", "naive", "0.062", "4297", "1024"), ("512x512x512", "tiled", "0.041", "6608.3", "64"),
        ("611x613x617", "naive", "0.113", "4088.6", "1234"), ("611x613x617", "tiled", "0.07", "6589.1", "78")]
    for row in ([f"cases[{case}/{kernel}].ms", "tolerance ±25% + ±0.003", ms, ms, "1.000", "same"],
                [f"cases[{case}/{kernel}].gflops", "tolerance ±25%", gflops, gflops, "1.000", "same"],
                [f"cases[{case}/{kernel}].loads", "exact", loads, loads, "1.000", "same"])
] + [
    row
    for case, speedup, fewer in [("256x256x256", "2.49", "16"), ("512x512x512", "1.54", "16"),
                                 ("611x613x617", "1.61", "15.8")]
    for row in ([f"speedups[{case}].speedup", "tolerance ±30%", speedup, speedup, "1.000", "same"],
                [f"speedups[{case}].fewer_loads", "exact", fewer, fewer, "1.000", "same"])
] + [["cases_matched", "exact", "3", "3", "1.000", "same"]]


def test_record_then_verify_passes_with_the_field_table(course, fake_sanitizer, prebuilt, nvcc_version):
    made = course(["day16-tiled-matmul"])
    recorded = coursectl("record", "--all")
    assert (recorded.exit_code, recorded.stderr) == (0, "")
    assert statuses(recorded.stdout, "record") == {"day16-tiled-matmul": "PASS (recorded)"}
    evidence = made.evidence("day16-tiled-matmul")
    assert sorted(p.name for p in evidence.iterdir()) == ["meta.json", "transcript.txt"]
    assert (evidence / "transcript.txt").read_bytes() == (SEEDS / "tiled_matmul.txt").read_bytes()
    meta = json.loads((evidence / "meta.json").read_text())
    source = (made.root / "standins" / "replay.cpp").read_bytes()
    assert {k: meta[k] for k in ("lesson", "gpu_name", "gpu_slug", "compute_capability", "driver_version",
                                 "cuda_version", "nvcc_version", "arch", "flags", "source_sha256",
                                 "exit_status", "coursectl_version", "sanitizer_version", "files")} == {
        "lesson": "day16-tiled-matmul", "gpu_name": "NVIDIA H200", "gpu_slug": GPU_SLUG,
        "compute_capability": "9.0", "driver_version": "580.159.04", "cuda_version": "13.0",
        "nvcc_version": nvcc_version, "arch": "sm_90", "flags": ["-std=c++17", "-O3"],
        "source_sha256": hashlib.sha256(source).hexdigest(), "exit_status": 0,
        "coursectl_version": __version__, "sanitizer_version": "2025.3.1.0", "files": {}}
    assert meta["sources"] == {"standins/replay.cpp": hashlib.sha256(source).hexdigest()}   # it includes no header

    result = coursectl("verify", "--all", "-vv")
    assert (result.exit_code, result.stderr) == (0, "")
    title = "day16-tiled-matmul: 31 fields against nvidia-h200 evidence (31 same)"
    assert table(result.stdout, title) == [["field", "rule", "evidence", "now", "ratio", "result"], *FIELDS_DAY16]
    assert table(result.stdout, "day16-tiled-matmul: claims") == [
        ["claim", "kind", "checked", "held"],
        ["every-case-matches", "gate", "1", "yes"],
        ["loads-per-thread", "gate", "6", "yes"],
        ["shared-memory-is-two-tiles", "gate", "1", "yes"],
        ["tiled-is-faster", "expect", "3", "yes"]]
    assert table(seconds_masked(result.stdout), "verify")[1] == [
        "day16-tiled-matmul", "PASS", GPU_SLUG, GPU_SLUG, "T s", "-", "T s"]
    assert after(result.stdout, "verify") == []
    assert tally_line(result.stdout) == "1 passed, 0 failed in T s"


def test_field_table_names_table_rows_by_key(course, fake_gpu, prebuilt):
    """A row key such as [copyRowMajor] is printed as it is, not taken for rich markup."""
    course(["day13-shared-memory"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    result = coursectl("verify", "--all", "-vv")
    fields = [row[0] for row in table(result.stdout, "day13-shared-memory: 29 fields against nvidia-h200 "
                                                     "evidence (29 same)")[1:]]
    assert fields[11:14] == ["kernels[copyRowMajor].ms", "kernels[copyRowMajor].gbps",
                             "kernels[copyRowMajor].vs_copy"]


def test_verify_names_a_timing_that_moved(course, fake_gpu, prebuilt):
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.100")
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert statuses(result.stdout) == {"day16-tiled-matmul": "FAIL"}
    assert after(result.stdout, "verify") == [
        "day16-tiled-matmul: 1 field(s) differ from the nvidia-h200 evidence:",
        "  cases[256x256x256/naive].ms [tolerance ±25% + ±0.003]: moved: evidence 0.025, now 0.1"]


def test_verify_accepts_a_timing_within_tolerance(course, fake_gpu, prebuilt):
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.030")
    result = coursectl("verify", "--all", "-vv")
    assert result.exit_code == 0
    assert statuses(result.stdout) == {"day16-tiled-matmul": "PASS"}
    title = "day16-tiled-matmul: 31 fields against nvidia-h200 evidence (30 same, 1 within)"
    assert table(result.stdout, title)[7] == [
        "cases[256x256x256/naive].ms", "tolerance ±25% + ±0.003", "0.025", "0.03", "1.200", "within"]


def test_record_refuses_when_a_gate_fails(course, fake_gpu, prebuilt):
    made = course(["day13-shared-memory"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    before = snapshot(made.evidence("day13-shared-memory"))
    edit(made.transcript("day13-shared-memory"), "cudaFuncSetAttribute:         no error",
         "cudaFuncSetAttribute:         invalid argument")
    result = coursectl("record", "--all")
    assert result.exit_code == 1
    assert statuses(result.stdout, "record") == {"day13-shared-memory": "FAIL"}
    gate = claim("day13-shared-memory", "optin-lifts-the-cap")
    assert after(result.stdout, "record") == [
        "day13-shared-memory: not recorded: the previous evidence is untouched",
        f"day13-shared-memory: gate 'optin-lifts-the-cap' failed ({gate['says']})",
        f"  {gate['gate']} is false (after_optin = 'invalid argument', optin_bytes = 53248, "
        "smem_default = 49152); the part of 'and' that is false: after_optin == 'no error'"]
    assert snapshot(made.evidence("day13-shared-memory")) == before
    assert [p.name for p in made.evidence("day13-shared-memory").parent.iterdir() if p.name.startswith(".")] == []


# -- lessons that misbehave ------------------------------------------------------------------
@pytest.mark.slow
def test_hang_times_out_and_the_other_lessons_still_run(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory", "hang", "day16-tiled-matmul"])
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    assert result.exit_code == 1
    assert statuses(result.stdout) == {"day13-shared-memory": "NO_EVIDENCE", "hang": "TIMEOUT",
                                       "day16-tiled-matmul": "NO_EVIDENCE"}
    reasons = after(result.stdout, "verify")
    reasons[1] = re.sub(r"^hang: killed after \d+\.\d s", "hang: killed after T s", reasons[1])
    assert reasons == [unverified("day13-shared-memory"),
                       "hang: killed after T s (timeout 0.5 s) with its process group; last output:",
                       GPU_LINE,
                       "Matrix: 2003 x 3001 floats, 22.9 MiB",
                       unverified("day16-tiled-matmul")]
    assert tally_line(result.stdout) == "0 passed, 2 without evidence, 1 failed (1 timed out) in T s"
    run = json.loads(report.read_text())["results"][1]["run"]
    assert (run["timed_out"], run["exit_status"], run["signal"]) == (True, None, 15)
    child = int(run["stderr_tail"].split()[1])
    assert run["stderr_tail"] == f"child {child}"
    assert is_gone(child)


def test_crash_reports_the_signal(course, fake_gpu, prebuilt):
    course(["crash"])
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert statuses(result.stdout) == {"crash": "CRASH"}
    assert after(result.stdout, "verify") == [f"crash: $ {prebuilt['crash']}",
                                              "killed by signal 6 (SIGABRT)",
                                              "stdout (last lines):",
                                              GPU_LINE]


def test_garbage_is_a_parse_error_naming_the_line(course, fake_gpu, prebuilt):
    course(["garbage"])
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert statuses(result.stdout) == {"garbage": "FAIL"}
    assert after(result.stdout, "verify") == [
        "garbage: garbage stdout:2: binary output (a NUL byte) where text was expected"]


FAIL_REASONS = [
    "fail: fail stdout:1: expected a line matching 'Matrix: {rows:int} x {cols:int} floats, "
    "{buffer_mib:float} MiB per buffer'; the transcript ends at line 1",
    "fail: $ {binary}",
    "exit status 1",
    "stdout (last lines):",
    GPU_LINE,
    "stderr (last lines):",
    "CUDA error at shared_memory.cu:142: cudaMalloc(&d_in, bytes): out of memory (cudaErrorMemoryAllocation)",
]


def test_failing_lesson_reports_its_exit_status_and_stderr(course, fake_gpu, prebuilt):
    course(["fail"])
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert after(result.stdout, "verify") == [line.replace("{binary}", str(prebuilt["fail"]))
                                              for line in FAIL_REASONS]


def test_failing_lesson_is_fail_not_crash(course, fake_gpu, prebuilt):
    course(["fail"])
    result = coursectl("verify", "--all", "-q")
    assert statuses(result.stdout) == {"fail": "FAIL"}


# -- errors before anything runs ---------------------------------------------------------------
def break_comparison(manifest: dict) -> None:
    manifest["lessons"][0]["output"]["items"][1]["fields"] = {"rows": {"compare": "aprox"}}


def test_manifest_error_names_file_and_line(course, fake_gpu):
    made = course(["day13-shared-memory"], edit=break_comparison)
    line = made.manifest.read_text().splitlines().index("          compare: aprox") + 1
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"coursectl: error: lessons.yaml:{line}: lesson 'day13-shared-memory': "
                             "output.items[1].fields.rows.compare: unknown comparison 'aprox'; expected "
                             "'exact', 'tolerance', 'device' or 'volatile'\n"
                             "hint: fix lessons.yaml; docs/schema.md describes every key\n")


def test_manifest_error_stays_on_one_line_in_a_narrow_terminal(course, fake_gpu):
    made = course(["day13-shared-memory"], edit=break_comparison)
    line = made.manifest.read_text().splitlines().index("          compare: aprox") + 1
    result = coursectl("verify", "--all", columns=80)
    assert result.stderr.splitlines()[0] == (
        f"coursectl: error: lessons.yaml:{line}: lesson 'day13-shared-memory': "
        "output.items[1].fields.rows.compare: unknown comparison 'aprox'; expected "
        "'exact', 'tolerance', 'device' or 'volatile'")


@pytest.mark.parametrize("args, hint", [
    (["verify", "--all"], "on a machine without a GPU use --offline"),
    (["run", "day13-shared-memory"], NO_GPU_HINT),
    (["record", "--all"], NO_GPU_HINT),
    (["sanitize", "day13-shared-memory"], NO_GPU_HINT),
], ids=["verify", "run", "record", "sanitize"])
def test_no_gpu_exits_3(course, monkeypatch, nvcc_bin, args, hint):
    """Only verify has --offline; the others say what works without a GPU."""
    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(nvcc_bin))
    result = coursectl(*args)
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == f"coursectl: error: no NVIDIA GPU found (nvidia-smi not on PATH)\nhint: {hint}\n"


# -- offline -----------------------------------------------------------------------------------
def record_then_unplug(made, monkeypatch, gpu_bin, *lesson_ids) -> None:
    """Record with the stood-in GPU, then take nvidia-smi off PATH again."""
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", os.pathsep.join([str(gpu_bin), path]))
    assert coursectl("record", *lesson_ids, "-q").exit_code == 0
    monkeypatch.setenv("PATH", path)


def test_verify_offline_builds_every_architecture_and_passes(course, monkeypatch, gpu_bin, prebuilt, tmp_path):
    made = course(["day16-tiled-matmul"])
    record_then_unplug(made, monkeypatch, gpu_bin, "day16-tiled-matmul")
    report = tmp_path / "offline.json"
    result = coursectl("verify", "--all", "--offline", "--json", report)
    assert (result.exit_code, result.stderr) == (0, "")
    assert table(seconds_masked(result.stdout), "verify --offline") == [
        SUMMARY_HEADER, ["day16-tiled-matmul", "PASS", "-", GPU_SLUG, "-", "-", "T s"]]   # its builds and judging
    [lesson] = json.loads(report.read_text())["results"]
    cache = Path(os.environ["COURSECTL_CACHE"])
    assert [(b["arch"], b["command"][3], (cache / b["binary"].removeprefix("$COURSECTL_CACHE/")).is_file())
            for b in lesson["builds"]] == [("sm_90", "-arch=sm_90", True), ("sm_75", "-arch=sm_75", True)]
    # The report names no path of this machine: the cache by its variable, nvcc by its name.
    assert lesson["builds"][0]["binary"] == "$COURSECTL_CACHE/" + prebuilt["day16-tiled-matmul"].relative_to(
        cache).as_posix()
    assert lesson["builds"][0]["command"][0] == "nvcc"
    assert (lesson["status"], lesson["reasons"], lesson["evidence"]) == ("PASS", [], GPU_SLUG)


def test_verify_offline_fails_on_an_edited_evidence_transcript(course, monkeypatch, gpu_bin, prebuilt, tmp_path):
    made = course(["day16-tiled-matmul"])
    record_then_unplug(made, monkeypatch, gpu_bin, "day16-tiled-matmul")
    transcript = made.evidence("day16-tiled-matmul") / "transcript.txt"
    edit(transcript, "naive         0.025", "naive         0.020")
    report = tmp_path / "offline.json"
    result = coursectl("verify", "--all", "--offline", "-q", "--json", report)
    assert result.exit_code == 1
    assert statuses(result.stdout, "verify --offline") == {"day16-tiled-matmul": "FAIL"}
    [lesson] = json.loads(report.read_text())["results"]
    named = transcript.relative_to(made.root).as_posix()   # as the course names it: no path of this machine
    assert lesson["reasons"] == [f"evidence for nvidia-h200: {named}: transcript does not match the "
                                 "sha256 in meta.json: it was edited after recording"]
    assert str(made.root) not in result.stdout


# -- reports -----------------------------------------------------------------------------------
def test_json_and_junit_reports(course, fake_gpu, prebuilt, tmp_path):
    made = course(["day13-shared-memory", "day16-tiled-matmul", "crash"])
    assert coursectl("record", "day13-shared-memory", "day16-tiled-matmul", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.100")
    json_path, junit_path = tmp_path / "out" / "report.json", tmp_path / "out" / "report.xml"
    result = coursectl("verify", "--all", "-q", "--json", json_path, "--junit", junit_path)
    assert result.exit_code == 1

    report = json.loads(json_path.read_text())
    assert (report["command"], report["offline"], report["shard"]) == ("verify", False, None)
    assert [(r["lesson"], r["status"], r["gpu"], r["evidence"]) for r in report["results"]] == [
        ("day13-shared-memory", "PASS", GPU_SLUG, GPU_SLUG),
        ("day16-tiled-matmul", "FAIL", GPU_SLUG, GPU_SLUG),
        ("crash", "CRASH", GPU_SLUG, None)]
    assert report["toolchain"]["gpus"][0]["uuid"] == GPU_UUID

    suite = ET.parse(junit_path).getroot()
    assert (suite.tag, suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        "testsuite", "coursectl verify", "3", "2", "0")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("coursectl.nvidia-h200", "day13-shared-memory"), ("coursectl.nvidia-h200", "day16-tiled-matmul"),
        ("coursectl.nvidia-h200", "crash")]
    assert cases[0].find("failure") is None
    assert cases[0].findtext("system-out") == (SEEDS / "shared_memory.txt").read_text()
    failure = cases[1].find("failure")
    moved = "1 field(s) differ from the nvidia-h200 evidence:"
    assert (failure.get("type"), failure.get("message")) == ("FAIL", moved)
    assert failure.text == (f"{moved}\n"
                            "  cases[256x256x256/naive].ms [tolerance ±25% + ±0.003]: moved: evidence 0.025, "
                            "now 0.1")
    crash = cases[2].find("failure")
    assert (crash.get("type"), crash.get("message")) == ("CRASH", f"$ {prebuilt['crash']}")


def test_shards_partition_the_lessons_and_merge(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    first, second, merged = tmp_path / "1.json", tmp_path / "2.json", tmp_path / "merged.json"
    assert coursectl("verify", "--all", "-q", "--shard", "1/2", "--json", first).exit_code == 0
    assert coursectl("verify", "--all", "-q", "--shard", "2/2", "--json", second).exit_code == 0
    one = json.loads(first.read_text())
    two = json.loads(second.read_text())
    assert (one["shard"], [r["lesson"] for r in one["results"]]) == ("1/2", ["day13-shared-memory",
                                                                            "day16-tiled-matmul"])
    assert (two["shard"], [r["lesson"] for r in two["results"]]) == ("2/2", ["day14-syncthreads"])

    result = coursectl("report", "merge", first, second, "--json", merged)
    assert (result.exit_code, result.stderr) == (0, "")
    assert statuses(result.stdout, "merged 2 reports") == {"day13-shared-memory": "NO_EVIDENCE",
                                                           "day16-tiled-matmul": "NO_EVIDENCE",
                                                           "day14-syncthreads": "NO_EVIDENCE"}
    report = json.loads(merged.read_text())
    assert (report["command"], sorted(r["lesson"] for r in report["results"])) == (
        "report merge", ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])


def test_record_takes_a_shard_and_a_keyword_as_verify_does(course, fake_gpu, prebuilt, tmp_path):
    """`record --shard K/N` records the share `verify --shard K/N` takes, and says so in its report; the shards'
    reports merge; -k narrows it first. Without --shard the option was refused and each shard recorded all."""
    made = course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    result = coursectl("record", "--all", "-q", "--shard", "2/2", "--json", second)
    assert (result.exit_code, result.stderr) == (0, "")
    recorded = sorted(p.parent.parent.name for p in (made.root / "evidence").glob(f"*/{GPU_SLUG}/meta.json"))
    assert recorded == ["day14-syncthreads"]
    report = json.loads(second.read_text())
    assert (report["shard"], report["shards"], report["selection"]["lessons"]) == ("2/2", ["2/2"],
                                                                                 ["day14-syncthreads"])
    assert coursectl("record", "--all", "-q", "--shard", "1/2", "--json", first).exit_code == 0
    recorded = sorted(p.parent.parent.name for p in (made.root / "evidence").glob(f"*/{GPU_SLUG}/meta.json"))
    assert recorded == ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"]
    merged = coursectl("report", "merge", first, second)
    assert (merged.exit_code, merged.stderr) == (0, "")

    keyword = coursectl("record", "-k", "tiled or shared", "--shard", "2/2", "--collect-only")
    assert (keyword.exit_code, lines(keyword.stdout)[0]) == (0, "day16-tiled-matmul")
    bad = coursectl("record", "--all", "--shard", "3/2")
    assert (bad.exit_code, bad.stderr) == (2, "coursectl: error: --shard '3/2': K must be between 1 and N\n")


def test_merging_a_report_with_itself_is_an_error(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory"])
    report = tmp_path / "1.json"
    assert coursectl("verify", "--all", "-q", "--json", report).exit_code == 0
    result = coursectl("report", "merge", report, report)
    assert (result.exit_code, result.stdout) == (1, "")   # as for a shard missing: no honest report to make
    assert result.stderr == ("coursectl: error: lesson 'day13-shared-memory' on nvidia-h200 appears in "
                             "reports 1 and 2\n")


def test_merging_a_file_that_is_not_a_report(tmp_path):
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"command": "verify"}')
    result = coursectl("report", "merge", bogus)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"coursectl: error: {bogus}: not a coursectl JSON report: "
                             "date: Field required\n")


@pytest.mark.parametrize("shard", ["abc", "1/x", "1/0", "3/2"])
def test_merging_a_report_whose_shard_is_not_k_of_n(course, fake_gpu, prebuilt, tmp_path, shard):
    """A shard the schema takes for a string crashed the merge (IndexError, ValueError) or merged as 1/0."""
    course(["day13-shared-memory"])
    report = tmp_path / "1.json"
    assert coursectl("verify", "--all", "-q", "--json", report).exit_code == 0
    data = json.loads(report.read_text())
    data["shard"], data["shards"] = shard, [shard]
    report.write_text(json.dumps(data))
    result = coursectl("report", "merge", report)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"coursectl: error: {report}: not a coursectl JSON report: shard: {shard!r} is not "
                             "a shard K/N of a split, with 1 <= K <= N\n")


@pytest.mark.parametrize("shard, message", [("3/2", "--shard '3/2': K must be between 1 and N"),
                                            ("half", "--shard 'half' must look like 2/4")])
def test_bad_shard(course, fake_gpu, shard, message):
    course(["day13-shared-memory"])
    result = coursectl("verify", "--all", "--shard", shard)
    assert (result.exit_code, result.stderr) == (2, f"coursectl: error: {message}\n")


# -- compute-sanitizer passes --------------------------------------------------------------------
DAY14_SANITIZERS = {"day14-syncthreads": {"memcheck": {},
                                          "racecheck": {"findings": [{"kernel": "reverseTileRacy"}]}}}


def test_sanitize_passes_on_the_recorded_race(course, fake_sanitizer, monkeypatch, prebuilt):
    course(["day14-syncthreads"], sanitizers=DAY14_SANITIZERS)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    result = coursectl("sanitize", "day14-syncthreads")
    assert (result.exit_code, result.stderr) == (0, "")
    out = lines(seconds_masked(result.stdout))
    passes = [line for line in out if line.startswith("day14-syncthreads ")]
    assert passes == ["day14-syncthreads memcheck: 0 finding(s) in no kernel, errors 0, T s: ok",
                      "day14-syncthreads racecheck: 4 finding(s) in reverseTileRacy, errors 3, T s: ok"]
    assert table(seconds_masked(result.stdout), "sanitize")[1] == [
        "day14-syncthreads", "PASS", GPU_SLUG, "-", "-", "memcheck ok T s, racecheck ok T s", "T s"]
    assert after(result.stdout, "sanitize") == []


def test_sanitize_fails_when_the_race_is_not_found(course, fake_sanitizer, prebuilt):
    course(["day14-syncthreads"], sanitizers=DAY14_SANITIZERS)
    result = coursectl("sanitize", "day14-syncthreads")
    assert result.exit_code == 1
    passes = [line for line in lines(seconds_masked(result.stdout)) if line.startswith("day14-syncthreads ")]
    assert passes[1] == "day14-syncthreads racecheck: 0 finding(s) in no kernel, errors 0, T s: FAIL"
    assert statuses(result.stdout, "sanitize") == {"day14-syncthreads": "FAIL"}
    assert after(result.stdout, "sanitize") == [
        "day14-syncthreads: racecheck: expected a finding in reverseTileRacy, none reported"]


def test_a_sanitizer_pass_past_its_timeout_is_timeout_naming_the_pass(course, fake_sanitizer, monkeypatch, prebuilt):
    """Not "racecheck FAIL": the lesson is TIMEOUT, and the reason says which pass ran how long."""
    sanitizers = {"day14-syncthreads": {"memcheck": {}, "racecheck": {"timeout": 0.5}}}
    course(["day14-syncthreads"], sanitizers=sanitizers)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_SLEEP", "30")
    result = coursectl("verify", "day14-syncthreads", "-q", "--json", "report.json")
    assert result.exit_code == 1
    assert table(seconds_masked(result.stdout), "verify")[1] == [
        "day14-syncthreads", "TIMEOUT", GPU_SLUG, "-", "T s", "memcheck ok T s, racecheck TIMEOUT T s", "T s"]
    [reason] = after(result.stdout, "verify")
    assert re.fullmatch(r"day14-syncthreads: racecheck: timed out: killed after 0\.\d s \(timeout 0\.5 s\) "
                        r"with its process group; bound it in lessons.yaml under sanitizers.racecheck: "
                        r"args: \[--launch-count, N\] .*program_args.*", reason), reason
    assert tally_line(result.stdout) == "0 passed, 1 failed (1 timed out) in T s"
    [lesson] = json.loads(Path("report.json").read_text())["results"]
    racecheck = [p for p in lesson["sanitizers"] if p["tool"] == "racecheck"][0]
    assert (lesson["status"], racecheck["timed_out"]) == ("TIMEOUT", True)


def test_verify_memcheck_names_the_out_of_bounds_kernel(course, fake_sanitizer, monkeypatch, prebuilt, tmp_path):
    course(["day16-tiled-matmul"], sanitizers={"day16-tiled-matmul": {"memcheck": {}}})
    log = tmp_path / "oob.log"
    log.write_text("========= ERROR SUMMARY: 29 errors\n")  # the last line of that run's log
    monkeypatch.setenv("FAKE_SANITIZER_MEMCHECK_LOG", str(log))
    monkeypatch.setenv("FAKE_SANITIZER_MEMCHECK_XML", str(SANITIZER_DATA / "oob.xml"))
    result = coursectl("verify", "day16-tiled-matmul", "-q")
    assert result.exit_code == 1
    assert table(seconds_masked(result.stdout), "verify")[1] == [
        "day16-tiled-matmul", "FAIL", GPU_SLUG, "-", "T s", "memcheck FAIL T s", "T s"]
    assert after(result.stdout, "verify") == [
        "day16-tiled-matmul: memcheck: unexpected error in wr at oob.cu:2 (28 reports): "
        "Invalid __global__ write of size 4 bytes is out of bounds",
        "day16-tiled-matmul: memcheck: unexpected API error: Program hit cudaErrorLaunchFailure (error 719) "
        'due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.']


def test_record_keeps_the_sanitizer_logs_with_the_evidence(course, fake_sanitizer, monkeypatch, prebuilt):
    made = course(["day14-syncthreads"], sanitizers=DAY14_SANITIZERS)
    recording = SANITIZER_DATA / "syncthreads.racecheck.txt"
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(recording))
    result = coursectl("record", "--all", "-q")
    assert result.exit_code == 0
    evidence = made.evidence("day14-syncthreads")
    assert sorted(p.name for p in evidence.iterdir()) == ["memcheck.log", "memcheck.stdout.txt", "meta.json",
                                                           "racecheck.log", "racecheck.stdout.txt", "transcript.txt"]
    clean = b"========= ERROR SUMMARY: 0 errors\n"
    assert (evidence / "racecheck.log").read_bytes() == recording.read_bytes()
    assert (evidence / "memcheck.log").read_bytes() == clean
    program = made.transcript("day14-syncthreads").read_bytes()   # what the stand-in printed under each tool
    assert (evidence / "racecheck.stdout.txt").read_bytes() == program
    assert json.loads((evidence / "meta.json").read_text())["files"] == {
        "memcheck.log": hashlib.sha256(clean).hexdigest(),
        "memcheck.stdout.txt": hashlib.sha256(program).hexdigest(),
        "racecheck.log": hashlib.sha256(recording.read_bytes()).hexdigest(),
        "racecheck.stdout.txt": hashlib.sha256(program).hexdigest()}

    verified = coursectl("verify", "--all", "-q")
    assert verified.exit_code == 0
    assert statuses(verified.stdout) == {"day14-syncthreads": "PASS"}


# -- a green run means every declared check ran and held --------------------------------------------
def _claims_over_the_build(*claims):
    def edit(manifest):
        manifest["lessons"][0]["claims"] += list(claims)
    return edit


def test_offline_a_lesson_never_recorded_is_checked_as_far_as_it_can_be_and_says_why(course, monkeypatch,
                                                                                   prebuilt, tmp_path):
    """Path 1: its claims over ptxas' report are judged; what needs a transcript is named as not checked."""
    course(["day16-tiled-matmul"], edit=_claims_over_the_build(
        {"id": "no-kernels", "gate": "len(resources) == 0", "says": "the stand-in launches nothing"},
        {"id": "tile-fits", "gate": "len(resources) == 0 and tile == 16"}))
    report = tmp_path / "offline.json"
    result = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-v", "--json", report)
    assert (result.exit_code, result.stderr) == (0, "")
    assert statuses(result.stdout, "verify --offline") == {"day16-tiled-matmul": "NO_EVIDENCE"}
    assert table(result.stdout, "day16-tiled-matmul: claims") == [["claim", "kind", "checked", "held"],
                                                                 ["no-kernels [sm_90]", "gate", "1", "yes"]]
    assert after(result.stdout, "verify --offline") == [
        unverified("day16-tiled-matmul", gpu=None),
        "day16-tiled-matmul: note: gate 'tile-fits' not checked: it needs a recorded transcript (tile)"]
    assert tally_line(result.stdout) == "0 passed, 1 without evidence, 0 failed in T s"
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["unverified"].startswith("never recorded on a GPU")


def test_offline_a_claim_over_the_build_fails_a_lesson_never_recorded(course, prebuilt):
    course(["day16-tiled-matmul"], edit=_claims_over_the_build(
        {"id": "one-kernel", "gate": "len(resources) == 1", "says": "one kernel"}))
    result = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-q")
    assert result.exit_code == 1
    assert after(result.stdout, "verify --offline") == [
        "day16-tiled-matmul: gate 'one-kernel [sm_90]' failed (one kernel)",
        "  len(resources) == 1 is false (resources = (no rows))"]


def test_strict_fails_a_lesson_without_evidence(course, monkeypatch, gpu_bin, prebuilt):
    """Path 1, deleting the evidence: without --strict it is reported, never as passed; with it, it fails."""
    made = course(["day16-tiled-matmul"])
    record_then_unplug(made, monkeypatch, gpu_bin, "day16-tiled-matmul")
    assert coursectl("verify", "--all", "--offline", "--arch", "sm_90", "--strict", "-q").exit_code == 0
    shutil.rmtree(made.evidence("day16-tiled-matmul"))
    lenient = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-q")
    strict = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-q", "--strict")
    assert (lenient.exit_code, strict.exit_code) == (0, 1)
    assert tally_line(lenient.stdout) == "0 passed, 1 without evidence, 0 failed in T s"
    assert tally_line(strict.stdout) == ("0 passed, 1 without evidence, 0 failed in T s; "
                                         "--strict: 1 not verified, counted as failed")


@pytest.mark.parametrize("how", ["no-lessons", "empty-shard"])
def test_an_empty_selection_says_nothing_was_verified_and_fails_with_strict(course, fake_gpu, prebuilt, how):
    """Path 6: `lessons: []`, or --shard 5/5 of four lessons."""
    if how == "no-lessons":
        course(["day13-shared-memory"], edit=lambda manifest: manifest.update(lessons=[]))
        args = ["verify", "--all"]
    else:
        course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"])
        args = ["verify", "--all", "--shard", "5/5"]
    lenient, strict = coursectl(*args), coursectl(*args, "--strict")
    assert (lenient.exit_code, strict.exit_code) == (0, 1)
    assert tally_line(lenient.stdout) == "0 passed, 0 failed in T s; no lesson was selected, nothing was verified"


def _shard_reports(tmp_path) -> tuple[Path, Path]:
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    assert coursectl("verify", "--all", "-q", "--shard", "1/2", "--json", first).exit_code == 0
    assert coursectl("verify", "--all", "-q", "--shard", "2/2", "--json", second).exit_code == 0
    return first, second


def test_merge_refuses_a_missing_shard_unless_allowed(course, fake_gpu, prebuilt, tmp_path):
    """Path 4: shard 1/2 alone is not the whole run."""
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    first, _ = _shard_reports(tmp_path)
    refused = coursectl("report", "merge", first)
    assert (refused.exit_code, refused.stdout) == (2, "")   # a file the command needs is missing: a usage error
    assert refused.stderr == "coursectl: error: nvidia-h200: shard 2 of 2 missing; merge every shard, or pass --allow-partial\n"
    merged = tmp_path / "merged.json"
    allowed = coursectl("report", "merge", first, "--allow-partial", "--json", merged)
    assert allowed.exit_code == 0
    assert lines(allowed.stdout)[0] == "merged 1 report (partial: shards missing)"
    report = json.loads(merged.read_text())
    assert (report["partial"], report["shards"]) == (True, ["1/2"])
    assert coursectl("report", "merge", first, "--allow-partial", "--strict").exit_code == 1


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_strict_partial_merge_says_why_it_fails_in_a_red_tally(course, fake_gpu, prebuilt, tmp_path):
    """`report merge 1.json --allow-partial --strict` of a shard that passed printed a green `N passed, 0 failed`
    and exited 1, saying nothing about why; its JUnit had no failure."""
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    first, _ = _shard_reports(tmp_path)
    junit = tmp_path / "merged.xml"
    strict = coursectl("--color", "always", "report", "merge", first, "--allow-partial", "--strict", "--junit", junit)
    assert (strict.exit_code, strict.stderr) == (1, "")
    tally = lines(strict.stdout)[-1]
    statuses = [r["status"] for r in json.loads(first.read_text())["results"]]
    assert statuses and set(statuses) == {"PASS"}
    passed = len(statuses)
    assert tally_line(ANSI.sub("", strict.stdout)) == (
        f"{passed} passed, 0 failed in T s; --strict: a partial merge (nvidia-h200: shard 2 of 2 missing), counted as failed")
    assert tally.startswith("\x1b[1;31m"), repr(tally)   # bold red, as every run that exits 1
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == (str(passed + 1), "1")
    [case] = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert (case.get("name"), case.find("failure").get("type"), case.find("failure").get("message")) == (
        "--strict", "STRICT", "a partial merge (nvidia-h200: shard 2 of 2 missing), counted as failed")

    lenient = coursectl("--color", "always", "report", "merge", first, "--allow-partial")
    assert lenient.exit_code == 0
    assert tally_line(ANSI.sub("", lenient.stdout)) == f"{passed} passed, 0 failed in T s"
    assert lines(lenient.stdout)[-1].startswith("\x1b[32m")


def test_a_strict_empty_selection_says_why_it_fails(course, fake_gpu, prebuilt):
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"])
    strict = coursectl("verify", "--all", "--shard", "5/5", "--strict")
    assert strict.exit_code == 1
    assert tally_line(strict.stdout) == ("0 passed, 0 failed in T s; no lesson was selected, nothing was verified; "
                                         "--strict: an empty selection, counted as failed")


def test_merge_refuses_reports_of_different_manifests_and_keeps_toolchain_and_shards(course, fake_gpu, prebuilt,
                                                                                    tmp_path):
    made = course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    first, second = _shard_reports(tmp_path)
    merged = tmp_path / "merged.json"
    assert coursectl("report", "merge", second, first, "--json", merged).exit_code == 0
    report = json.loads(merged.read_text())
    assert (report["shards"], report["partial"], report["toolchain"]["gpus"][0]["uuid"]) == (
        ["1/2", "2/2"], False, GPU_UUID)
    assert report["manifest_sha256"] == hashlib.sha256(made.manifest.read_bytes()).hexdigest()

    made.manifest.write_text(made.manifest.read_text().replace("timeout: 30", "timeout: 31"))
    changed = tmp_path / "2b.json"
    assert coursectl("verify", "--all", "-q", "--shard", "2/2", "--json", changed).exit_code == 0
    refused = coursectl("report", "merge", first, changed)
    assert (refused.exit_code, refused.stderr) == (1, (
        "coursectl: error: the reports come from 2 different manifests (lessons.yaml changed between the shards' "
        "runs); merge the shards of one run\n"))


def test_record_without_sanitizers_keeps_the_recorded_reports(course, fake_sanitizer, monkeypatch, prebuilt):
    """Path 5: record --no-sanitize replaces the run, not the memcheck and racecheck evidence."""
    made = course(["day14-syncthreads"], sanitizers=DAY14_SANITIZERS)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    assert coursectl("record", "--all", "-q").exit_code == 0
    evidence = made.evidence("day14-syncthreads")
    kept = ("memcheck.log", "memcheck.stdout.txt", "racecheck.log", "racecheck.stdout.txt")
    reports = {name: (evidence / name).read_bytes() for name in kept}

    again = coursectl("record", "--all", "--no-sanitize", "-q")
    assert again.exit_code == 0
    assert {name: (evidence / name).read_bytes() for name in reports} == reports
    meta = json.loads((evidence / "meta.json").read_text())
    assert (sorted(meta["files"]), meta["stale_passes"]) == (list(kept), [])
    assert statuses(coursectl("verify", "--all", "-q").stdout) == {"day14-syncthreads": "PASS"}

    source = made.root / "standins" / "replay.cpp"
    source.write_text(source.read_text() + "// the build changes\n")
    changed = coursectl("record", "--all", "--no-sanitize", "-q")
    assert changed.exit_code == 0
    assert json.loads((evidence / "meta.json").read_text())["stale_passes"] == ["memcheck", "racecheck"]
    assert "day14-syncthreads: note: racecheck: kept the report recorded" in changed.stdout
    offline = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-q")
    assert statuses(offline.stdout, "verify --offline") == {"day14-syncthreads": "STALE"}
    assert any(line.startswith(f"day14-syncthreads: stale: {GPU_SLUG}: the recorded racecheck report is stale: "
                               "the build changed after it was recorded") for line in lines(offline.stdout))


# -- command-line conventions ---------------------------------------------------------------------------
def test_k_selects_by_substring_or_glob_of_id_or_title(course, fake_gpu, prebuilt):
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    assert list(statuses(coursectl("verify", "-k", "sync", "-q").stdout)) == ["day14-syncthreads"]
    assert list(statuses(coursectl("verify", "-k", "day1[36]*", "-q").stdout)) == ["day13-shared-memory",
                                                                                 "day16-tiled-matmul"]
    assert list(statuses(coursectl("verify", "-k", "STAND-IN", "-q").stdout)) == [
        "day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"]   # titles: "... (stand-in)"


def test_x_stops_at_the_first_failure(course, fake_gpu, prebuilt):
    course(["fail", "day13-shared-memory", "day16-tiled-matmul"])
    result = coursectl("verify", "--all", "-x", "-j", "1", "-q")
    assert result.exit_code == 1
    found = statuses(result.stdout)
    assert found["fail"] == "FAIL"
    assert "SKIPPED" in found.values()
    assert ("day16-tiled-matmul: not run: an earlier lesson failed, and --exitfirst stops at the first failure"
            in lines(result.stdout)) or found["day16-tiled-matmul"] != "SKIPPED"


@pytest.mark.parametrize("flag, env, coloured", [
    ("never", {}, False), ("always", {}, True), ("auto", {}, False), ("auto", {"FORCE_COLOR": "1"}, True),
    ("auto", {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False), ("always", {"NO_COLOR": "1"}, True)])
def test_color_follows_the_flag_then_no_color_and_force_color(course, fake_gpu, prebuilt, monkeypatch,
                                                             flag, env, coloured):
    course(["day16-tiled-matmul"])
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = coursectl("--color", flag, "verify", "--all", "-q")
    assert result.exit_code == 0
    assert ("\x1b[" in result.stdout) is coloured


def test_json_to_standard_output_leaves_it_to_the_report(course, fake_gpu, prebuilt):
    course(["day16-tiled-matmul"])
    result = coursectl("verify", "--all", "--json", "-")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert (report["format"], [r["lesson"] for r in report["results"]]) == (1, ["day16-tiled-matmul"])


def test_help_shows_no_python_type_placeholders():
    for command in ("verify", "record", "build", "run", "sanitize", "render", "doctor", "report merge", "schema report"):
        text = coursectl(*command.split(), "--help").stdout
        assert not re.search(r"<(list|int|str|path|int range|float)\b", text), (command, text)


def test_build_help_says_what_its_v_prints():
    """build's -v was described as verify's: 'every stage and each lesson's claims; -vv: every field'."""
    help_text = " ".join(coursectl("build", "--help").stdout.split())
    assert "-v, --verbose Also each nvcc command and ptxas' report of every kernel." in help_text
    assert "claims; -vv" not in help_text


def test_build_says_when_k_selects_nothing_and_refuses_a_job_count_below_1(course, nvcc_bin, monkeypatch):
    """`build -k zzz` printed nothing at all and exited 0; `-j -1` and `-j 0` were taken for every core.
    A -k that selects nothing now exits 5, as pytest's `no tests ran`."""
    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(nvcc_bin))
    result = coursectl("build", "-k", "zzz")
    assert (result.exit_code, result.stdout) == (5, "no lesson was selected, nothing was built\n")
    assert result.stderr == "coursectl: error: -k 'zzz' selected none of the 1 lesson\n"
    for jobs in ("-1", "0"):
        result = coursectl("build", "--all", "-j", jobs)
        assert result.exit_code == 2 and "Invalid value for '--jobs'" in result.stderr, jobs


@pytest.mark.parametrize("error, status, stderr", [
    (RunFailed(), 1, ""),
    (UsageError("no lesson 'x'", hint="see lessons.yaml"), 2, "coursectl: error: no lesson 'x'\nhint: see lessons.yaml\n"),
    (KeyboardInterrupt(), 130, INTERRUPTED + "\n"),
    (FileNotFoundError(2, "No such file or directory", "a.json"), 1,
     "coursectl: error: cannot write/read a.json: No such file or directory\n"),
])
def test_handle_errors_chooses_every_exit_status_and_run_failed_adds_no_line(capsys, error, status, stderr):
    """RunFailed is how a command that has printed why its run failed exits 1: nothing more is printed."""
    @common.handle_errors
    def command():
        print("what the command printed")
        raise error

    with pytest.raises(typer.Exit) as stopped:
        command()
    assert stopped.value.exit_code == status
    assert capsys.readouterr() == ("what the command printed\n", stderr)


DEFERRED = ("orchestrator.workflows.pipeline", "orchestrator.workflows.authoring", "orchestrator.render.course",
            "orchestrator.workflows.compare", "orchestrator.judge.drift", "orchestrator.cli.report", "jinja2")


def test_help_imports_none_of_what_the_commands_defer():
    """cli/'s function-level imports keep these off `coursectl --help` (4-45 ms each, jinja2 among them)."""
    code = f"import sys, orchestrator.cli.main; print(sorted(set({DEFERRED!r}) & set(sys.modules)))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout == "[]\n"
