"""The fault matrix of docs/faults.md: what coursectl does when a lesson, a tool, a file,
the GPU or the user misbehaves.

Most tests run coursectl in this process (typer's CliRunner) on stand-in lessons
and a stood-in H200, as tests/test_cli.py does. The ones about signals and about
two coursectl processes sharing a GPU start coursectl as a process of its own
and watch its children through /proc.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import (named, unverified, GPU_SLUG, GPU_UUID, ROOT, SEEDS, after, coursectl, edit, is_gone, lines, snapshot,
                      standin_runs, statuses, wait_for)
from orchestrator.judge import evidence as evidence_module
from orchestrator import files
from orchestrator.cuda.buildkey import cache_key
from orchestrator.judge.evidence import EvidenceMeta, write_evidence

INTERRUPTED = "coursectl: error: interrupted: running programs were stopped; nothing was recorded\n"
BUILD_INTERRUPTED = "coursectl: error: interrupted: builds were stopped; no cache entry is half-written\n"
H100 = "NVIDIA H100 80GB HBM3"   # another GPU of compute capability 9.0
H100_SLUG = "nvidia-h100-80gb-hbm3"
NO_SPACE = os.strerror(errno.ENOSPC)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def progress(text: str) -> list[str]:
    """The progress lines of a run without a terminal, their clock left out."""
    return [re.sub(r"^\[ *\d+\.\d s\] ", "", line) for line in lines(text) if re.match(r"^\[ *\d+\.\d s\] ", line)]


# -- processes -----------------------------------------------------------------------------
def _ctrl_c_on() -> None:
    """In the child before exec: Ctrl-C acts, even where the suite was started with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_coursectl(*args) -> subprocess.Popen:
    """coursectl in a process of its own, in this test's working directory and environment."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_on,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200",
                                     PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])))


def processes() -> dict[int, tuple[str, int, int, list[str]]]:
    """Every process on the machine: pid -> (state, parent pid, process group, argv)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid, pgid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        found[int(entry.name)] = (state, int(ppid), int(pgid), [a.decode(errors="replace") for a in argv])
    return found


def group_is_gone(pgid: int, within: float = 5.0) -> bool:
    """Whether no process of group `pgid` is left (zombies waiting to be reaped count as gone)."""
    deadline = time.monotonic() + within
    while any(state != "Z" and group == pgid for state, _, group, _ in processes().values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def nvcc_child(parent: int) -> int | None:
    """The pid of the nvcc build `parent` started, if it is running."""
    return next((pid for pid, (state, ppid, _, argv) in processes().items()
                 if ppid == parent and "--resource-usage" in argv and state != "Z"), None)


def terminate(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> tuple[str, str]:
    proc.send_signal(signum)
    return proc.communicate(timeout=60)


@pytest.fixture
def spawned():
    """start_coursectl, killing whatever is left of the processes when the test ends."""
    started: list[subprocess.Popen] = []

    def start(*args) -> subprocess.Popen:
        started.append(start_coursectl(*args))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            # A test that failed midway: end the lessons it left running, then coursectl.
            for pid, (_, ppid, group, _) in processes().items():
                if ppid == proc.pid and group == pid:
                    os.killpg(group, signal.SIGKILL)
            proc.kill()
            proc.communicate()


def hang_for_a_minute(pid_file: Path):
    """An edit to the manifest: the hang stand-in gets 60 s and writes its child's pid to pid_file."""
    def edit_manifest(manifest: dict) -> None:
        manifest["lessons"][0].update(timeout=60, args=[str(pid_file)])
    return edit_manifest


def hang_group(pid_file: Path) -> tuple[int, int]:
    """(the hang stand-in's process group, its forked child), once it has started."""
    def written() -> str | None:
        text = pid_file.read_text() if pid_file.exists() else ""
        return text if text.endswith("\n") else None

    child = int(wait_for(written, "the hang stand-in to start"))
    return processes()[child][2], child


# -- output cut, garbage, a flood (hangs, crashes and failures: test_cli.py) ---------------------
@pytest.mark.slow
def test_a_flood_is_cut_at_the_capture_limit_and_named_at_its_first_line(course, fake_gpu, prebuilt, tmp_path):
    """100 MiB on stdout: 16 MiB kept, the cut said, the first line that is not the schema's named."""
    course(["flood"])
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    assert statuses(result.stdout) == {"flood": "FAIL"}
    assert after(result.stdout, "verify") == [
        "flood: output exceeded the capture limit and was cut; the transcript is incomplete",
        "flood: flood stdout:1: expected a line matching 'GPU: {gpu} (compute capability {cc:word})'; found '"
        + "x" * 63 + "'"]
    [flood] = json.loads(report.read_text())["results"]
    assert (flood["run"]["exit_status"], flood["run"]["stdout_truncated"]) == (0, True)
    assert flood["transcript"].startswith("x" * 63 + "\n")   # its head, not the 16 MiB: see test_junit.py
    assert flood["transcript"].endswith("… cut: the transcript holds 16,777,216 characters; the report keeps the "
                                        "first 262,144\n")


def test_invalid_utf8_is_a_parse_error_naming_the_line(course, fake_gpu, prebuilt):
    made = course(["day16-tiled-matmul"])
    transcript = made.transcript("day16-tiled-matmul")
    transcript.write_bytes(transcript.read_bytes().replace(b"tile 16 x 16", b"tile \xc3\x28 x 16"))
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, result.stderr) == (1, "")
    assert after(result.stdout, "verify") == [
        "day16-tiled-matmul: day16-tiled-matmul stdout:2: expected a line matching 'tile {tile:int} x "
        "{tile_cols:int}, {threads:int} threads per block, {smem_bytes:int} bytes of shared memory per block'; "
        "found 'tile \ufffd( x 16, 256 threads per block, 2048 bytes of shared memory per block'"]


# -- lessons.yaml: see test_manifest.py; a flag a shell would expand -----------------------------
@pytest.mark.parametrize("flag", ['-DGREETING="`id`"', "-DHOME=$HOME"], ids=["backquote", "dollar"])
def test_a_flag_a_shell_would_expand_is_refused_before_anything_runs(course, fake_gpu, flag):
    made = course(["day13-shared-memory"], edit=lambda m: m["defaults"].update(flags=["-O3", flag]))
    line = made.manifest.read_text().splitlines().index("  flags:") + 1
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"coursectl: error: lessons.yaml:{line}: defaults.flags: flag {flag!r} holds '$' or "
                             "'`', which nvcc's own host-compiler step would expand in a shell; write the value "
                             "without them\n"
                             "hint: fix lessons.yaml; docs/schema.md describes every key\n")
    assert not (made.root / "evidence").exists()


# -- the toolchain and the GPU ----------------------------------------------------------------------
@pytest.mark.parametrize("command", [["verify", "--all"], ["verify", "--all", "--offline"], ["build", "--all"]],
                         ids=["verify", "offline", "build"])
def test_without_nvcc_exits_3(course, monkeypatch, gpu_bin, command):
    from orchestrator.cuda import toolchain

    course(["day13-shared-memory"])
    monkeypatch.setenv("PATH", str(gpu_bin))
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])  # not /usr/local/cuda/bin of this machine
    result = coursectl(*command)
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == ("coursectl: error: nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin\n"
                             "hint: install the CUDA toolkit or set CUDA_HOME\n")


def test_an_unreadable_manifest_is_coursectls_error_and_doctor_still_reports(course, monkeypatch):
    """click's own readability check made an unreadable lessons.yaml a `Usage:` block, and doctor, which
    reports the tools whatever the course, printed nothing. The check is click's, by os.access: told the
    file is unreadable, it must not be the one that answers (coursectl's reader reads it here, as root)."""
    course(["day13-shared-memory"])
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: (
        False if Path(path).name == "lessons.yaml" and mode == os.R_OK else real_access(path, mode, *a, **k)))
    for command in (["doctor"], ["render", "--check"]):
        result = coursectl(*command)
        assert "Usage:" not in result.stderr, command
    assert coursectl("doctor").stdout.startswith(" nvcc ")


@pytest.mark.slow
def test_a_lesson_nvcc_refuses_fails_and_the_others_still_run(course, fake_gpu, prebuilt, nvcc_version, tmp_path,
                                                              real_nvcc):
    def broken_source(manifest: dict) -> None:
        manifest["lessons"][0]["source"] = "standins/broken.cu"

    made = course(["day16-tiled-matmul", "day13-shared-memory"], edit=broken_source)
    source = made.root / "standins" / "broken.cu"
    source.write_text("int main() {\n    return 0\n}\n")
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    day13 = next(n for n, row in enumerate(made.manifest.read_text().splitlines(), 1) if "day: 13" in row)
    assert (result.exit_code, result.stderr) == (1, (
        f"coursectl: warning: lessons.yaml:{day13}: lesson 'day13-shared-memory': day: day 13 comes after day 16 "
        "(lesson 'day16-tiled-matmul'); the pages and the index list lessons in day order, but commands take them in "
        "lessons.yaml's order\n"))
    assert statuses(result.stdout) == {"day16-tiled-matmul": "FAIL", "day13-shared-memory": "NO_EVIDENCE"}
    [broken, other] = json.loads(report.read_text())["results"]
    key = cache_key(source.read_bytes(), ["-std=c++17", "-O3"], "sm_90", nvcc_version, "plain", "broken")
    group = Path(os.environ["COURSECTL_CACHE"]) / "sm_90-plain" / key
    output = Path(re.search(r" -o (\S+) ", broken["reasons"][0])[1])   # in the build's own folder, gone since
    assert (output.name, output.parent.parent) == ("broken", group)
    assert re.fullmatch(rf"\.{key}\.\w+\.build", output.parent.name)
    assert (broken["run"], broken["reasons"]) == (None, [
        f"{source}:3: nvcc failed for lesson 'day16-tiled-matmul' (sm_90):\n"
        f"$ {shutil.which('nvcc')} -std=c++17 -O3 -arch=sm_90 --resource-usage -MD -MF {output}.d -o "
        f"{output} {source}\n"
        "exit status 2\n"
        "stderr (last lines):\n"
        f'{source}(3): error: expected a ";"\n'
        "  }\n"
        "  ^\n"
        "\n"
        f'1 error detected in the compilation of "{source}".'])
    assert files_under(group) == []
    assert other["run"]["exit_status"] == 0


def test_a_lesson_needing_a_newer_gpu_is_unsupported_and_not_run(course, fake_gpu, prebuilt, tmp_path):
    """min_compute_capability "10.0" on the stood-in H200 (9.0): compared as numbers, not as text."""
    def needs_cc_10(manifest: dict) -> None:
        manifest["lessons"][1]["min_compute_capability"] = "10.0"

    course(["day13-shared-memory", "day16-tiled-matmul"], edit=needs_cc_10)
    report, junit = tmp_path / "report.json", tmp_path / "report.xml"
    result = coursectl("verify", "--all", "-q", "--json", report, "--junit", junit)
    assert (result.exit_code, result.stderr) == (0, "")
    assert statuses(result.stdout) == {"day13-shared-memory": "NO_EVIDENCE", "day16-tiled-matmul": "UNSUPPORTED"}
    reason = "needs compute capability 10.0; NVIDIA H200 has 9.0"
    assert after(result.stdout, "verify") == [unverified("day13-shared-memory"), f"day16-tiled-matmul: {reason}"]
    [ran, unsupported] = json.loads(report.read_text())["results"]
    assert (ran["run"]["exit_status"], unsupported["run"], unsupported["transcript"]) == (0, None, None)
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "0", "2")
    no_evidence = unverified("day13-shared-memory").removeprefix("day13-shared-memory: ")
    assert [(case.get("name"), case.find("skipped").get("type"), case.find("skipped").get("message"))
            for case in suite.findall("testcase")] == [("day13-shared-memory", "NO_EVIDENCE", no_evidence),
                                                       ("day16-tiled-matmul", "UNSUPPORTED", reason)]


def test_sanitizer_passes_without_compute_sanitizer_exit_3(course, monkeypatch, nvcc_bin, gpu_bin, prebuilt):
    from orchestrator.cuda import toolchain

    course(["day14-syncthreads", "day16-tiled-matmul"], sanitizers={"day14-syncthreads": {"memcheck": {}}})
    monkeypatch.setenv("PATH", os.pathsep.join([str(nvcc_bin), str(gpu_bin)]))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])  # not /usr/local/cuda/bin of this machine
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == ("coursectl: error: compute-sanitizer not found on PATH, beside nvcc or in "
                             "$CUDA_HOME/bin\n"
                             "hint: install the CUDA toolkit's compute-sanitizer, or use --no-sanitize\n")

    # The lesson without passes needs none; --no-sanitize runs them all without it.
    assert coursectl("verify", "day16-tiled-matmul", "-q").exit_code == 0
    unsanitized = coursectl("verify", "--all", "-q", "--no-sanitize")
    assert (unsanitized.exit_code, unsanitized.stderr) == (0, "")
    assert statuses(unsanitized.stdout) == {"day14-syncthreads": "NO_EVIDENCE", "day16-tiled-matmul": "NO_EVIDENCE"}


# -- evidence ---------------------------------------------------------------------------------------
def test_evidence_for_another_gpu_only(course, fake_gpu, prebuilt, monkeypatch):
    """Recorded on an H100, verified on the H200: NO_EVIDENCE, yet every exact field is still compared."""
    made = course(["day16-tiled-matmul"])
    monkeypatch.setenv("FAKE_GPU_NAME", H100)
    assert coursectl("record", "--all", "-q").exit_code == 0
    monkeypatch.delenv("FAKE_GPU_NAME")
    assert sorted(p.name for p in made.evidence("day16-tiled-matmul").parent.iterdir()) == ["build", H100_SLUG]

    result = coursectl("verify", "--all", "-vv")
    assert (result.exit_code, result.stderr) == (0, "")
    rows = {line.split()[0]: line.split()[-1] for line in lines(result.stdout) if "│" in line and "." in line}
    assert rows["cases[256x256x256/naive].ms"] == "other-gpu"       # tolerance: not across GPUs
    assert rows["cases[256x256x256/naive].loads"] == "same"         # exact: on any GPU
    assert f"day16-tiled-matmul: 31 fields against {H100_SLUG} evidence (17 other-gpu, 14 same)" in lines(result.stdout)
    summary = [line.split("│") for line in lines(result.stdout) if line.startswith(" day16-tiled-matmul │")]
    assert [cell.strip() for cell in summary[0][:4]] == ["day16-tiled-matmul", "NO_EVIDENCE", GPU_SLUG, H100_SLUG]

    edit(made.transcript("day16-tiled-matmul"), "reads 16.0x fewer floats per thread\n512",
         "reads 17.0x fewer floats per thread\n512")
    moved = coursectl("verify", "--all", "-q")
    assert moved.exit_code == 1
    assert statuses(moved.stdout) == {"day16-tiled-matmul": "FAIL"}
    assert after(moved.stdout, "verify") == [
        f"day16-tiled-matmul: 1 field(s) differ from the {H100_SLUG} evidence:",
        "  speedups[256x256x256].fewer_loads [exact]: moved: evidence 16.0, now 17.0"]


CORRUPT_META = [
    (b"{not json", "Invalid JSON: key must be a string at line 1 column 2"),
    (b"\xff\xfe", "Invalid JSON: expected value at line 1 column 1"),
    (b"", "Invalid JSON: EOF while parsing a value at line 1 column 0"),
    (b'{"lesson": 3}', "lesson: Input should be a valid string"),
]


@pytest.mark.parametrize("data, message", CORRUPT_META, ids=["not-json", "not-utf8", "empty", "wrong-type"])
def test_corrupt_evidence_is_said_in_one_reason_and_record_replaces_it(course, fake_gpu, prebuilt, tmp_path,
                                                                        data, message):
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    meta = made.evidence("day16-tiled-matmul") / "meta.json"
    meta.write_bytes(data)
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    assert statuses(result.stdout) == {"day16-tiled-matmul": "FAIL"}
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["reasons"] == [f"evidence: {named(meta, made.root)}: corrupt metadata: {message}"]

    recorded = coursectl("record", "--all", "-q", "--json", report)
    assert (recorded.exit_code, recorded.stderr) == (0, "")
    [lesson] = json.loads(report.read_text())["results"]
    assert (lesson["status"], lesson["recorded"], lesson["notes"]) == (
        "PASS", True, [f"previous evidence was unreadable and is replaced: {named(meta, made.root)}: corrupt metadata: "
                       f"{message}"])
    assert coursectl("verify", "--all", "-q").exit_code == 0


def test_evidence_whose_metadata_is_deleted_fails_and_record_replaces_it(course, fake_gpu, prebuilt, tmp_path):
    """It was NO_EVIDENCE, exit 0: the transcript and the sanitizer reports left behind were not said."""
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    meta = made.evidence("day16-tiled-matmul") / "meta.json"
    meta.unlink()
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    assert statuses(result.stdout) == {"day16-tiled-matmul": "FAIL"}
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["reasons"] == [f"evidence: {named(meta, made.root)}: transcript without its metadata"]
    offline = coursectl("verify", "--all", "--offline", "-q")
    assert (offline.exit_code, statuses(offline.stdout, "verify --offline")) == (1, {"day16-tiled-matmul": "FAIL"})

    recorded = coursectl("record", "--all", "-q", "--json", report)
    assert (recorded.exit_code, recorded.stderr) == (0, "")
    [lesson] = json.loads(report.read_text())["results"]
    assert (lesson["status"], lesson["notes"]) == (
        "PASS", [f"previous evidence was unreadable and is replaced: {named(meta, made.root)}: transcript without "
                 "its metadata"])
    assert coursectl("verify", "--all", "-q").exit_code == 0


def test_a_long_reason_stays_on_one_line_in_a_narrow_terminal(course, fake_gpu, prebuilt):
    """A reason naming a long path is never folded: `path:line:` stays whole for the eye and for grep."""
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    meta = made.evidence("day16-tiled-matmul") / "meta.json"
    meta.write_text("{not json")
    result = coursectl("verify", "--all", "-q", columns=80)
    assert after(result.stdout, "verify") == [
        f"day16-tiled-matmul: evidence: {named(meta, made.root)}: corrupt metadata: Invalid JSON: key must be a string at line 1 "
        "column 2"]


# -- two coursectl processes on one GPU -------------------------------------------------------------
@pytest.mark.slow
def test_two_processes_take_turns_on_one_gpu(course, fake_gpu, prebuilt, monkeypatch, tmp_path, spawned):
    """The second waits for the per-GPU lock, says so and who holds it, and runs after the first."""
    course(["day16-tiled-matmul"])
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    monkeypatch.setenv("STANDIN_LOG", str(log))
    monkeypatch.setenv("STANDIN_SLEEP", "60")   # each run lasts until the gate opens
    monkeypatch.setenv("STANDIN_GATE", str(gate))
    first = spawned("verify", "--all", "-v")
    wait_for(lambda: log.exists() and " start " in log.read_text(), "the first run to start")
    second = spawned("verify", "--all", "-v")
    seen = []
    while not any(": waiting (" in line or ": running (" in line for line in seen):
        line = second.stdout.readline()
        assert line, f"the second coursectl ended early: {second.communicate()}"
        seen.append(line)
    gate.touch()
    first_out, first_err = first.communicate(timeout=60)
    second_rest, second_err = second.communicate(timeout=60)
    assert (first.returncode, first_err, second.returncode, second_err) == (0, "", 0, "")

    lesson = "day16-tiled-matmul"
    assert progress(first_out) == [f"{lesson}: building", f"{lesson}: built (sm_90, cached)", f"{lesson}: running (GPU 0)",
                                   f"{lesson}: comparing", f"{lesson}: done (NO_EVIDENCE)"]
    assert progress("".join(seen) + second_rest) == [
        f"{lesson}: building", f"{lesson}: built (sm_90, cached)",
        f"{lesson}: waiting (waiting for GPU {GPU_UUID}: held by coursectl pid {first.pid})",
        f"{lesson}: running (GPU 0)", f"{lesson}: comparing", f"{lesson}: done (NO_EVIDENCE)"]
    runs = standin_runs(log)
    assert [run.visible for run in runs] == [GPU_UUID, GPU_UUID]
    assert runs[0].end <= runs[1].start, "the two runs overlapped on one GPU"


# -- Ctrl-C and SIGTERM -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_a_lesson_runs_stops_its_process_group(course, fake_gpu, prebuilt, tmp_path, spawned,
                                                              signum):
    """SIGINT is Ctrl-C; the lesson runs in a session of its own, so only coursectl can stop it."""
    pid_file, report = tmp_path / "hang.pid", tmp_path / "report.json"
    made = course(["hang"], edit=hang_for_a_minute(pid_file))
    proc = spawned("verify", "--all", "-v", "--json", report)
    group, child = hang_group(pid_file)
    out, err = terminate(proc, signum)
    assert (proc.returncode, err) == (130, INTERRUPTED)
    assert progress(out) == ["hang: building", "hang: built (sm_90, cached)", "hang: running (GPU 0)"]
    assert group_is_gone(group) and is_gone(child)
    [result] = json.loads(report.read_text())["results"]   # the report of what finished: nothing did
    assert (result["lesson"], result["status"], result["reasons"]) == ("hang", "SKIPPED",
                                                                       ["interrupted before it finished"])
    assert not (made.root / "evidence").exists()
    cache = Path(os.environ["COURSECTL_CACHE"])
    assert [p for p in [*made.root.rglob("*"), *cache.rglob("*")] if p.suffix in (".partial", ".tmp")] == []


@pytest.mark.slow
def test_sigterm_during_record_keeps_the_old_evidence(course, fake_gpu, prebuilt, nvcc_version, tmp_path, spawned):
    pid_file = tmp_path / "hang.pid"
    made = course(["hang"], edit=hang_for_a_minute(pid_file))
    old = EvidenceMeta(lesson="hang", date="2026-11-29T14:00:00+00:00", gpu_name="NVIDIA H200", gpu_slug=GPU_SLUG,
                       compute_capability="9.0", driver_version="580.159.04", cuda_version="13.0",
                       nvcc_version=nvcc_version, arch="sm_90", flags=["-std=c++17", "-O3"],
                       source_sha256="0" * 64, transcript_sha256="", wall_seconds=0.4, exit_status=0,
                       coursectl_version="0.1.0")
    write_evidence(made.root, old, (SEEDS / "shared_memory.txt").read_text())
    before = snapshot(made.root / "evidence")
    proc = spawned("record", "hang")
    group, child = hang_group(pid_file)
    out, err = terminate(proc)
    assert (proc.returncode, err) == (130, INTERRUPTED)
    assert group_is_gone(group) and is_gone(child)
    assert snapshot(made.root / "evidence") == before
    assert sorted(p.name for p in (made.root / "evidence" / "hang").iterdir()) == [GPU_SLUG]


@pytest.mark.slow
def test_sigterm_while_verify_builds_leaves_no_cache_entry(course, fake_gpu, monkeypatch, tmp_path, spawned, real_nvcc):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))   # so that nvcc really runs
    course(["day16-tiled-matmul"], cuda=True)   # a build that lasts: nvcc's CUDA path
    proc = spawned("verify", "--all", "-v")
    nvcc = wait_for(lambda: nvcc_child(proc.pid), "nvcc to start")
    time.sleep(0.2)   # let coursectl count nvcc among its children: see the next test
    out, err = terminate(proc)
    assert (proc.returncode, err) == (130, INTERRUPTED)
    assert progress(out) == ["day16-tiled-matmul: building"]
    assert group_is_gone(nvcc)
    assert files_under(cache) == []


@pytest.mark.slow
def test_an_interrupt_as_nvcc_starts_still_stops_it(course, fake_gpu, monkeypatch, tmp_path, ctrl_c, real_nvcc):
    """The scheduler's worst case, made certain: the interrupt lands between Popen and the live set."""
    from orchestrator import process

    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    course(["day16-tiled-matmul"], cuda=True)   # a build that lasts: nvcc's CUDA path
    nvcc_started = threading.Event()

    class SlowToRegister(subprocess.Popen):
        def __init__(self, argv, **kwargs):
            super().__init__(argv, **kwargs)
            if "--resource-usage" in argv:
                nvcc_started.set()
                time.sleep(0.5)

    def interrupt_when_nvcc_starts():
        if nvcc_started.wait(timeout=30):
            os.kill(os.getpid(), signal.SIGINT)   # a real Ctrl-C: it wakes a main thread that waits

    monkeypatch.setattr(process.subprocess, "Popen", SlowToRegister)
    threading.Thread(target=interrupt_when_nvcc_starts, daemon=True).start()
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stderr) == (130, INTERRUPTED)
    assert files_under(cache) == []


@pytest.mark.slow
def test_an_interrupt_while_a_build_is_handed_to_a_thread_still_waits_for_that_build(course, fake_gpu, monkeypatch,
                                                                                   tmp_path, real_nvcc):
    """Ctrl-C landing inside the pool's start of a worker thread: the stop waits for that thread's build too."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    course(["day16-tiled-matmul"], cuda=True)   # a build that lasts: nvcc's CUDA path
    start = threading.Thread.start
    workers = []

    def start_then_interrupt(thread):
        start(thread)
        if thread.name.startswith("ThreadPoolExecutor") and not workers:
            workers.append(thread)
            os.kill(os.getpid(), signal.SIGINT)   # before the pool has counted the thread it started
            time.sleep(0.2)

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stderr) == (130, INTERRUPTED)
    [worker] = workers
    assert not worker.is_alive(), "verify returned while a build thread still ran"
    assert files_under(cache) == []


@pytest.mark.slow
def test_sigterm_during_coursectl_build_stops_nvcc(course, fake_gpu, monkeypatch, tmp_path, spawned, real_nvcc):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    course(["day16-tiled-matmul"], cuda=True)   # a build that lasts: nvcc's CUDA path
    proc = spawned("build", "--all")
    wait_for(lambda: nvcc_child(proc.pid), "nvcc to start")
    out, err = terminate(proc)
    assert (proc.returncode, out, err) == (130, "", BUILD_INTERRUPTED)
    assert files_under(cache) == []


# -- a disk that is full, a file that cannot be written -------------------------------------------------
@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, NO_SPACE), KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path, monkeypatch, failure):
    """Every write of evidence, cache entries, reports and pages goes through files.atomic_write."""
    target = tmp_path / "meta.json"
    target.write_text("the old file\n")

    def fsync(fd):
        raise failure

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(type(failure)):
        files.atomic_write(target, "the new file, half written when the failure came\n")
    monkeypatch.undo()
    assert target.read_text() == "the old file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]   # the temp file is gone


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch):
    target = tmp_path / "meta.json"

    def fsync(fd):
        raise OSError(errno.ENOSPC, NO_SPACE)   # what the kernel's ENOSPC looks like in Python

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(OSError) as caught:
        files.atomic_write(target, "data\n")
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(target))


def test_no_space_for_the_report_is_one_line(course, fake_gpu, prebuilt, monkeypatch, tmp_path):
    course(["day16-tiled-matmul"])
    report = tmp_path / "report.json"
    report.write_text("the previous report\n")

    def disk_full(path, data):
        raise OSError(errno.ENOSPC, NO_SPACE, str(path))

    monkeypatch.setattr(files, "atomic_write", disk_full)
    result = coursectl("verify", "--all", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, f"coursectl: error: cannot write/read {report}: {NO_SPACE}\n")
    assert statuses(result.stdout) == {"day16-tiled-matmul": "NO_EVIDENCE"}
    assert report.read_text() == "the previous report\n"


def test_a_report_path_that_is_a_folder_is_one_line(course, fake_gpu, prebuilt, tmp_path):
    """Refused before anything runs: a report goes to a file."""
    course(["day16-tiled-matmul"])
    folder = tmp_path / "reports"
    folder.mkdir()
    result = coursectl("verify", "--all", "-q", "--json", folder)
    assert (result.exit_code, result.stderr) == (2, f"coursectl: error: --json {folder}: is a folder; a report goes "
                                                    f"to a file\n")
    assert result.stdout == ""
    assert [p.name for p in tmp_path.iterdir() if p.name != "course"] == ["reports"]
    assert list(folder.iterdir()) == []


def test_no_space_while_recording_evidence_ends_that_lesson_only(course, fake_gpu, prebuilt, monkeypatch):
    """A worker that raises ends its lesson as CRASH with the error in one line; the old evidence stays."""
    made = course(["day16-tiled-matmul"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    before = snapshot(made.evidence("day16-tiled-matmul"))

    def disk_full(path, data):
        raise OSError(errno.ENOSPC, NO_SPACE, str(path))

    monkeypatch.setattr(evidence_module, "atomic_write", disk_full)
    result = coursectl("record", "--all", "-q", "--json", "report.json")
    staging = made.evidence("day16-tiled-matmul").parent / f".{GPU_SLUG}.new-{os.getpid()}"
    [lesson] = json.loads((made.root / "report.json").read_text())["results"]
    assert (result.exit_code, result.stderr) == (1, "")
    assert (lesson["status"], lesson["reasons"]) == (
        "CRASH", [f"cannot write/read {staging / 'transcript.txt'}: {NO_SPACE}"])
    assert f"day16-tiled-matmul: cannot write/read {staging / 'transcript.txt'}: {NO_SPACE}" in result.stdout
    assert snapshot(made.evidence("day16-tiled-matmul")) == before
    assert sorted(p.name for p in made.evidence("day16-tiled-matmul").parent.iterdir()) == ["build", GPU_SLUG]


# -- the matrix itself ---------------------------------------------------------------------------------
def test_the_fault_matrix_names_only_tests_that_exist():
    matrix = (ROOT / "docs" / "faults.md").read_text(encoding="utf-8")
    named = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`", matrix)
    assert len(named) > 30
    missing = [f"{path}::{name}" for path, name in named
               if not re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE)]
    assert missing == []
