"""orchestrator.cuda.sanitizer_cache: the key of a pass, storing it, and damaged entries read as misses."""

from __future__ import annotations

import hashlib
import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import (GPU_SLUG, SANITIZER_DATA, after, coursectl, sanitizer_runs, seconds_masked, table,
                      unverified, write_course)
from orchestrator.process import CommandResult
from orchestrator.workflows.turn import SCRATCH
from orchestrator.cuda.sanitizer_cache import (FOLDER, entry_path, is_cacheable, key_environment, load_pass, pass_key,
                                          store_pass)

LOG = b"========= ERROR SUMMARY: 0 errors\n"
XML = b"<?xml version='1.0'?><ComputeSanitizerOutput/>\n"


@pytest.fixture
def binary(tmp_path) -> Path:
    path = tmp_path / "bin" / "replay"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF the -lineinfo build")
    return path


def key_of(binary: Path, **changes):
    args = dict(tool="memcheck", tool_args=["--leak-check", "full"], program_args=["--check-only"],
                sanitizer_version="2025.3.1.0", driver_version="580.159.04", gpu_name="NVIDIA H200",
                env={"CUDA_VISIBLE_DEVICES": "GPU-00000000-test", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    args.update(changes)
    return pass_key(binary, **args)


def ran(returncode: int | None = 0, **changes) -> CommandResult:
    fields = dict(argv=["compute-sanitizer", "--tool", "memcheck", "./replay"], returncode=returncode,
                  stdout=b"transcript\n", stderr=b"", seconds=0.8125)
    fields.update(changes)
    return CommandResult(**fields)


def test_the_key_holds_every_input_and_not_the_gpu_a_pass_ran_on(binary, monkeypatch):
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    key = key_of(binary)
    assert key.model_dump() == {
        "format": 3, "binary_sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
        "tool": "memcheck", "tool_args": ["--leak-check", "full"],
        "program_args": ["--check-only"],
        "command": ["compute-sanitizer", "--tool", "memcheck", "--log-file", "LOG", "--xml", "--save", "XML",
                    "--error-exitcode", "86", "--leak-check", "full", "PROGRAM", "--check-only"],
        "sanitizer_version": "2025.3.1.0", "driver_version": "580.159.04", "gpu": "NVIDIA H200",
        "environment": key_environment(), "files": {}}
    # The environment's variables that may change what a pass does, this process's with the pass's on top.
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    assert key_of(binary, env={"CUDA_LAUNCH_BLOCKING": "1"}).environment == key_environment(
        {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}) != key.environment
    assert key_of(binary).environment["CUDA_MODULE_LOADING"] == "EAGER"
    monkeypatch.delenv("CUDA_MODULE_LOADING")
    # Which of the GPUs of one model, and where the toolkit lies, change nothing.
    assert key_of(binary, env={"CUDA_VISIBLE_DEVICES": "GPU-00000001-test"}).digest() == key.digest()
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-elsewhere")
    assert key_of(binary).digest() == key.digest()


@pytest.mark.parametrize("change", ["binary", "tool", "tool_args", "program_args", "sanitizer_version",
                                    "driver_version", "gpu_name", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                                    "LD_PRELOAD", "LD_LIBRARY_PATH"])
def test_a_change_of_any_input_changes_the_key(binary, monkeypatch, change):
    for name in ("CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "LD_PRELOAD", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    before = key_of(binary).digest()
    changes = {"tool": dict(tool="racecheck"), "tool_args": dict(tool_args=["--leak-check", "no"]),
               "program_args": dict(program_args=[]), "sanitizer_version": dict(sanitizer_version="2025.4.0.0"),
               "driver_version": dict(driver_version="595.84"), "gpu_name": dict(gpu_name="NVIDIA H100 80GB HBM3")}
    if change == "binary":
        binary.write_bytes(binary.read_bytes() + b" rebuilt")
    elif change == "CUDA_LAUNCH_BLOCKING":
        monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")   # inherited
    elif change == "CUDA_MODULE_LOADING":
        changes[change] = dict(env={"CUDA_MODULE_LOADING": "EAGER"})   # set for the run
    elif change == "LD_PRELOAD":
        monkeypatch.setenv("LD_PRELOAD", "/opt/intercept/libhook.so")   # a library loaded before the program's
    elif change == "LD_LIBRARY_PATH":
        monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other-driver/lib64")   # another libcuda
    assert key_of(binary, **changes.get(change, {})).digest() != before


def test_the_files_the_arguments_name_are_in_the_key_by_their_content(tmp_path, binary):
    """A program given a file reads it: another content is another pass, wherever the argument puts the name."""
    folder = tmp_path / "lesson"
    (folder / "data").mkdir(parents=True)
    data, suppressions = folder / "data" / "numbers.txt", tmp_path / "known.xml"
    data.write_text("1 2 3\n")
    suppressions.write_text("<suppressions/>\n")
    args = dict(tool_args=["--suppressions", str(suppressions)], program_args=["--input=data/numbers.txt", "-v"],
                folder=folder)
    key = key_of(binary, **args)
    assert key.files == {str(suppressions): hashlib.sha256(b"<suppressions/>\n").hexdigest(),
                         "data/numbers.txt": hashlib.sha256(b"1 2 3\n").hexdigest()}
    assert key_of(binary, **args).digest() == key.digest()
    data.write_text("1 2 4\n")
    changed = key_of(binary, **args)
    assert changed.digest() != key.digest()
    suppressions.write_text("<suppressions></suppressions>\n")
    assert key_of(binary, **args).digest() != changed.digest()
    # Read from where the program runs: from another folder the same words name no file.
    assert key_of(binary, **{**args, "folder": tmp_path}).files == {str(suppressions): key_of(binary, **args).files[
        str(suppressions)]}
    # Words that cannot be paths are no files, never an error.
    assert key_of(binary, program_args=["x" * 5000, "a\0b", ""], folder=folder).files == {}


def test_an_arguments_file_is_read_once_while_it_stays_as_it_was_and_every_time_while_it_is_new(tmp_path, monkeypatch):
    from orchestrator.cuda import sanitizer_cache

    data = tmp_path / "numbers.txt"
    data.write_text("1 2 3\n")
    reads: list[str] = []
    read = sanitizer_cache.sha256_file
    monkeypatch.setattr(sanitizer_cache, "sha256_file", lambda path: reads.append(path) or read(path))
    monkeypatch.setattr(sanitizer_cache, "RACY", 3600.0)   # changed within the hour: as good as just now
    for _ in range(3):
        assert sanitizer_cache.argument_files(["numbers.txt"], tmp_path) == {
            "numbers.txt": hashlib.sha256(b"1 2 3\n").hexdigest()}
    assert len(reads) == 3, "a file just written is read each time: its times may not show a second write"
    monkeypatch.setattr(sanitizer_cache, "RACY", 0.0)
    for _ in range(3):
        sanitizer_cache.argument_files(["numbers.txt"], tmp_path)
    assert len(reads) == 4, "unchanged since it was read: read once"
    data.write_text("1 2 3 4\n")
    assert sanitizer_cache.argument_files(["numbers.txt"], tmp_path) == {
        "numbers.txt": hashlib.sha256(b"1 2 3 4\n").hexdigest()}
    assert len(reads) == 5

def test_a_changed_data_file_runs_the_pass_again(course, fake_sanitizer, prebuilt, pass_log):
    """The replaying stand-in prints the transcript its argument names: changed, the pass is not taken as before."""
    lesson = "day13-shared-memory"
    made = course([lesson], sanitizers={lesson: {"memcheck": {}}})
    assert coursectl("verify", "--all", "-q").exit_code == 0
    assert summary_row(coursectl("verify", "--all", "-q"))[5] == "memcheck ok (cached)"
    transcript = made.transcript(lesson)
    transcript.write_text(transcript.read_text() + "\n")
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, summary_row(result)[5], len(sanitizer_runs(pass_log))) == (0, "memcheck ok T s", 2)
    assert summary_row(coursectl("verify", "--all", "-q"))[5] == "memcheck ok (cached)"


def test_stored_then_loaded_as_it_ran(tmp_path, binary):
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(86, stderr=b"warn\n"), LOG, XML)
    assert path == entry_path(tmp_path, "day13-shared-memory", key) == \
        tmp_path / FOLDER / "day13-shared-memory" / f"memcheck-{key.digest()}.json"
    stored = load_pass(tmp_path, "day13-shared-memory", key)
    assert (stored.log_bytes, stored.xml_bytes) == (LOG, XML)
    assert stored.command_result() == CommandResult(argv=["compute-sanitizer", "--tool", "memcheck", "./replay"],
                                                    returncode=86, stdout=b"transcript\n", stderr=b"warn\n",
                                                    seconds=0.812)
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, None)
    assert load_pass(tmp_path, "day13-shared-memory", key).xml_bytes is None
    assert load_pass(tmp_path, "day14-syncthreads", key) is None
    assert load_pass(tmp_path, "day13-shared-memory", key_of(binary, tool="racecheck")) is None


def _damage(path: Path, how: str, fifo) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "cut-in-half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "not-json":
        path.write_bytes(b"\x00\xffnot json")
    elif how == "log-edited":
        entry = json.loads(data)
        entry["log"] = entry["log"][:-4] + "AAAA"
        path.write_text(json.dumps(entry))
    elif how == "field-missing":
        entry = json.loads(data)
        del entry["exit_status"]
        path.write_text(json.dumps(entry))
    elif how == "bad-base64":
        entry = json.loads(data)
        entry["stdout"] = "!!!"
        path.write_text(json.dumps(entry))
    elif how == "a-list":
        path.write_text("[1, 2]")
    elif how == "nested-100000-deep":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif how == "a-fifo":
        path.unlink()
        fifo(path)


@pytest.mark.parametrize("how", ["empty", "cut-in-half", "not-json", "log-edited", "field-missing", "bad-base64",
                                 "a-list", "nested-100000-deep", "a-fifo"])
def test_a_damaged_entry_is_a_miss(tmp_path, binary, fifo, how):
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)
    _damage(path, how, fifo)
    started = time.monotonic()
    assert load_pass(tmp_path, "day13-shared-memory", key) is None
    assert time.monotonic() - started < 0.5   # a FIFO is not waited on (the fixture lets a reader go after 1 s)
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)   # a run now replaces it
    assert load_pass(tmp_path, "day13-shared-memory", key).log_bytes == LOG


def test_a_pass_stored_again_is_written_over_its_entry_in_place(tmp_path, binary):
    """Renaming a new file over the entry freed the old one's blocks: most of the CPU of storing a pass run again."""
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(86, stdout=b"a longer transcript\n" * 50), LOG, XML)
    inode = path.stat().st_ino
    store_pass(tmp_path, "day13-shared-memory", key, ran(0), LOG, None)
    assert path.stat().st_ino == inode
    stored = load_pass(tmp_path, "day13-shared-memory", key)
    assert (stored.exit_status, stored.command_result().stdout, stored.xml_bytes) == (0, b"transcript\n", None)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_new_entry_is_made_where_it_goes_with_no_file_beside_it(tmp_path, binary, monkeypatch):
    """A temporary file and a rename for each new entry cost most of storing a pass run for the first time."""
    import tempfile

    def no_temporary_file(*args, **kwargs):
        raise AssertionError("a temporary file was made")

    monkeypatch.setattr(tempfile, "mkstemp", no_temporary_file)
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)   # its lesson's folder made too
    assert load_pass(tmp_path, "day13-shared-memory", key).log_bytes == LOG
    assert [p.name for p in path.parent.iterdir()] == [path.name]



def test_an_entry_takes_one_open_and_is_truncated_only_when_it_shrinks(tmp_path, binary, monkeypatch):
    from orchestrator import files

    calls: list[str] = []
    opened, truncated = os.open, os.ftruncate
    monkeypatch.setattr(files.os, "open", lambda *a, **k: calls.append("open") or opened(*a, **k))
    monkeypatch.setattr(files.os, "ftruncate", lambda *a: calls.append("truncate") or truncated(*a))
    key, other = key_of(binary), key_of(binary, program_args=["--other"])
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)   # its folder made: one open more
    calls.clear()
    path = store_pass(tmp_path, "day13-shared-memory", other, ran(), LOG, XML)   # new, in a folder there
    assert calls == ["open"]
    calls.clear()
    store_pass(tmp_path, "day13-shared-memory", other, ran(), LOG, XML)   # as many bytes as before
    assert calls == ["open"]
    calls.clear()
    store_pass(tmp_path, "day13-shared-memory", other, ran(), LOG, None)   # fewer: cut to its length
    assert calls == ["open", "truncate"]
    assert load_pass(tmp_path, "day13-shared-memory", other).xml_bytes is None
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, entry_path(tmp_path, "day13-shared-memory", key).name])

def test_a_dangling_link_where_an_entry_goes_is_replaced_not_followed(tmp_path, binary):
    key = key_of(binary)
    path = entry_path(tmp_path, "day13-shared-memory", key)
    path.parent.mkdir(parents=True)
    target = tmp_path / "made-through-the-link.json"
    path.symlink_to(target)
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)
    assert not target.exists() and not path.is_symlink()
    assert load_pass(tmp_path, "day13-shared-memory", key).log_bytes == LOG


def test_an_entry_written_over_halfway_is_a_miss(tmp_path, binary):
    """In place, a reader may meet the entry half-written (or a crash leave it so): its checksum makes it a miss."""
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(0, stdout=b"x" * 4000), LOG, XML)
    old = path.read_bytes()
    store_pass(tmp_path, "day13-shared-memory", key, ran(0, stdout=b"y" * 4000), LOG, XML)
    new = path.read_bytes()
    path.write_bytes(new[: len(new) // 2] + old[len(new) // 2:])
    assert load_pass(tmp_path, "day13-shared-memory", key) is None


@pytest.mark.parametrize("how", ["a-link", "a-second-name"])
def test_an_entry_that_is_a_link_or_has_another_name_is_replaced_not_written_through(tmp_path, binary, how):
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    if how == "a-link":
        path.symlink_to(elsewhere)
    else:
        os.link(elsewhere, path)
    before = elsewhere.read_bytes()
    store_pass(tmp_path, "day13-shared-memory", key, ran(86), LOG, None)
    assert elsewhere.read_bytes() == before
    assert not path.is_symlink() and path.stat().st_nlink == 1
    assert load_pass(tmp_path, "day13-shared-memory", key).exit_status == 86


def test_an_entry_stored_under_another_key_is_a_miss(tmp_path, binary):
    """A file moved or copied to another key's name: the key inside it is checked too."""
    key, other = key_of(binary), key_of(binary, program_args=[])
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)
    entry_path(tmp_path, "day13-shared-memory", key).rename(entry_path(tmp_path, "day13-shared-memory", other))
    assert load_pass(tmp_path, "day13-shared-memory", other) is None


@pytest.mark.parametrize("result, log, cacheable", [
    (ran(0), LOG, True),
    (ran(86), LOG, True),                                       # the tool found something: a result like any other
    (ran(None, timed_out=True, signal=15), LOG, False),         # timed out
    (ran(-9, signal=9), LOG, False),                            # killed
    (ran(250), LOG, False),                                     # the program or the tool crashed
    (ran(1), LOG, False),                                       # the tool failed
    (ran(0), b"", False),                                       # no log: the tool never got going
], ids=["clean", "findings", "timed-out", "killed", "crashed", "failed", "no-log"])
def test_only_a_pass_that_ended_as_the_tool_ends_is_stored(result, log, cacheable):
    assert is_cacheable(result, log) is cacheable


# -- through verify, record and sanitize -------------------------------------------------------
DAY14 = "day14-syncthreads"
DAY14_SANITIZERS = {DAY14: {"memcheck": {}, "racecheck": {"findings": [{"kernel": "reverseTileRacy"}]}}}
RACE_LOG = SANITIZER_DATA / "syncthreads.racecheck.txt"


@pytest.fixture
def pass_log(tmp_path, monkeypatch) -> Path:
    """$FAKE_SANITIZER_RUNS: where the fake compute-sanitizer logs each pass it runs."""
    log = tmp_path / "passes.log"
    monkeypatch.setenv("FAKE_SANITIZER_RUNS", str(log))
    return log


def passes_of(report: Path) -> list[dict]:
    [lesson] = json.loads(report.read_text())["results"]
    return lesson["sanitizers"]


def summary_row(result) -> list[str]:
    return table(seconds_masked(result.stdout), "verify")[1]


def test_a_warm_verify_takes_each_pass_from_the_cache_and_says_so(course, fake_sanitizer, prebuilt, monkeypatch,
                                                                   pass_log, tmp_path):
    course([DAY14], sanitizers=DAY14_SANITIZERS)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(RACE_LOG))
    cold = coursectl("verify", "--all", "-q", "--json", tmp_path / "cold.json")
    assert (cold.exit_code, cold.stderr) == (0, "")
    assert summary_row(cold) == [DAY14, "NO_EVIDENCE", GPU_SLUG, "-", "T s", "memcheck ok T s, racecheck ok T s",
                                 "T s"]
    assert sorted(run.tool for run in sanitizer_runs(pass_log)) == ["memcheck", "racecheck"]

    warm = coursectl("verify", "--all", "-q", "--json", tmp_path / "warm.json", "--junit", tmp_path / "warm.xml")
    assert (warm.exit_code, warm.stderr) == (0, "")
    assert summary_row(warm) == [DAY14, "NO_EVIDENCE", GPU_SLUG, "-", "T s",
                                 "memcheck ok (cached), racecheck ok (cached)", "T s"]
    assert len(sanitizer_runs(pass_log)) == 2, "a pass ran again"
    # What is reported is what the run that was stored reported, seconds and command included.
    cold_passes, warm_passes = passes_of(tmp_path / "cold.json"), passes_of(tmp_path / "warm.json")
    assert [p["cached"] for p in cold_passes] == [False, False]
    assert [p["cached"] for p in warm_passes] == [True, True]
    assert [{**p, "cached": False} for p in warm_passes] == cold_passes
    assert warm_passes[1]["findings"] > 0 and warm_passes[1]["problems"] == []
    suite = ET.parse(tmp_path / "warm.xml").getroot()
    assert [(case.get("name"), case.get("time")) for case in suite.findall("testcase")][1:] == [
        (f"{DAY14} [memcheck] (cached)", "0.000"), (f"{DAY14} [racecheck] (cached)", "0.000")]

    rerun = coursectl("verify", "--all", "-q", "--rerun-sanitizers")
    assert (rerun.exit_code, rerun.stderr) == (0, "")
    assert summary_row(rerun)[5] == "memcheck ok T s, racecheck ok T s"
    assert len(sanitizer_runs(pass_log)) == 4
    # The tools wrote their logs and XML reports into the process's scratch folder, each read and removed.
    assert SCRATCH.folder is not None and Path(SCRATCH.folder).is_dir()
    assert list(Path(SCRATCH.folder).iterdir()) == []


def test_each_pass_has_files_of_its_own_in_the_scratch_folder_made_again_if_it_is_gone():
    first, second = SCRATCH.paths("memcheck"), SCRATCH.paths("memcheck")
    assert first[0] != second[0] and first[1] != second[1]
    assert first[0].parent == second[0].parent and first[0].suffix == ".log" and first[1].suffix == ".xml"
    first[0].parent.rmdir()
    again = SCRATCH.paths("racecheck")
    assert again[0].parent.is_dir() and again[0].parent != first[0].parent


def test_a_changed_expectation_is_judged_again_without_running_the_pass(course, fake_sanitizer, prebuilt,
                                                                       monkeypatch, pass_log):
    made = course([DAY14], sanitizers=DAY14_SANITIZERS)
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(RACE_LOG))
    assert coursectl("verify", "--all", "-q").exit_code == 0
    expect_another = {DAY14: {"memcheck": {}, "racecheck": {"findings": [{"kernel": "reverseTileSynced"}]}}}
    write_course(made.root, [DAY14], sanitizers=expect_another)

    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert summary_row(result) == [DAY14, "FAIL", GPU_SLUG, "-", "T s", "memcheck ok (cached), racecheck FAIL (cached)",
                                   "T s"]
    assert after(result.stdout, "verify") == [
        f"{DAY14}: racecheck: unexpected race in reverseTileRacy at syncthreads.cu:150 (1051020 hazards, 4 reports)",
        f"{DAY14}: racecheck: expected a finding in reverseTileSynced, none reported"]
    assert len(sanitizer_runs(pass_log)) == 2, "a pass ran again"

    write_course(made.root, [DAY14], sanitizers=DAY14_SANITIZERS)
    again = coursectl("verify", "--all", "-q")
    assert (again.exit_code, summary_row(again)[5]) == (0, "memcheck ok (cached), racecheck ok (cached)")
    assert len(sanitizer_runs(pass_log)) == 2


def test_a_changed_input_runs_the_pass_again(course, fake_sanitizer, prebuilt, monkeypatch, pass_log):
    made = course(["day13-shared-memory"], sanitizers={"day13-shared-memory": {"memcheck": {}}})
    assert coursectl("verify", "--all", "-q").exit_code == 0
    changes = {"CUDA_LAUNCH_BLOCKING": lambda: monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1"),
               "tool args": lambda: write_course(made.root, ["day13-shared-memory"], sanitizers={
                   "day13-shared-memory": {"memcheck": {"args": ["--check-device-heap=no"]}}}),
               "program args": lambda: write_course(made.root, ["day13-shared-memory"], sanitizers={
                   "day13-shared-memory": {"memcheck": {"args": ["--check-device-heap=no"], "program_args": ["0"]}}})}
    for count, (change, make) in enumerate(changes.items(), start=2):
        make()
        result = coursectl("verify", "--all", "-q")
        assert (result.exit_code, summary_row(result)[5], len(sanitizer_runs(pass_log))) == (
            0, "memcheck ok T s", count), change
    again = coursectl("verify", "--all", "-q")
    assert (again.exit_code, summary_row(again)[5]) == (0, "memcheck ok (cached)")
    assert len(sanitizer_runs(pass_log)) == 4


def test_a_stored_pass_longer_than_the_timeout_now_runs_again(course, fake_sanitizer, prebuilt, monkeypatch,
                                                               pass_log):
    """Lowering a pass's timeout below what it took: run now it would be killed, so it is run, not taken as ok."""
    lesson = "day13-shared-memory"
    made = course([lesson], sanitizers={lesson: {"memcheck": {"timeout": 30}}})
    monkeypatch.setenv("FAKE_SANITIZER_MEMCHECK_SLEEP", "0.6")
    assert coursectl("verify", "--all", "-q").exit_code == 0
    write_course(made.root, [lesson], sanitizers={lesson: {"memcheck": {"timeout": 20}}})
    longer = coursectl("verify", "--all", "-q")   # still within it: taken from the cache
    assert (longer.exit_code, summary_row(longer)[5], len(sanitizer_runs(pass_log))) == (
        0, "memcheck ok (cached)", 1)

    write_course(made.root, [lesson], sanitizers={lesson: {"memcheck": {"timeout": 0.3}}})
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    assert (summary_row(result)[1], summary_row(result)[5]) == ("TIMEOUT", "memcheck TIMEOUT T s")
    assert pass_log.read_text().count(" start ") == 2   # the second was killed, and never logged its end


def test_record_and_sanitize_always_run_the_passes_and_refresh_the_cache(course, fake_sanitizer, prebuilt,
                                                                         monkeypatch, pass_log):
    course([DAY14], sanitizers=DAY14_SANITIZERS)
    # Without the recorded race the racecheck pass finds nothing: FAIL, and stored so.
    failed = coursectl("verify", "--all", "-q")
    assert (failed.exit_code, summary_row(failed)[5]) == (1, "memcheck ok T s, racecheck FAIL T s")
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(RACE_LOG))
    still = coursectl("verify", "--all", "-q")
    assert (still.exit_code, summary_row(still)[5]) == (1, "memcheck ok (cached), racecheck FAIL (cached)")
    assert len(sanitizer_runs(pass_log)) == 2

    recorded = coursectl("record", "--all", "-q")
    assert recorded.exit_code == 0
    assert table(seconds_masked(recorded.stdout), "record")[1][5] == "memcheck ok T s, racecheck ok T s"
    assert len(sanitizer_runs(pass_log)) == 4
    verified = coursectl("verify", "--all", "-q")
    assert (verified.exit_code, summary_row(verified)[1], summary_row(verified)[5]) == (
        0, "PASS", "memcheck ok (cached), racecheck ok (cached)")

    sanitized = coursectl("sanitize", DAY14, "--tool", "racecheck")
    assert (sanitized.exit_code, sanitized.stderr) == (0, "")
    assert [run.tool for run in sanitizer_runs(pass_log)][4:] == ["racecheck"]


def test_a_damaged_cache_entry_runs_the_pass_again(course, fake_sanitizer, prebuilt, pass_log):
    course(["day13-shared-memory"], sanitizers={"day13-shared-memory": {"memcheck": {}}})
    entries = Path(os.environ["COURSECTL_CACHE"]) / FOLDER / "day13-shared-memory"   # beside the build cache
    others = set(entries.glob("*"))   # of other tests: the session shares one cache
    assert coursectl("verify", "--all", "-q").exit_code == 0
    [entry] = set(entries.glob("*")) - others
    assert entry.name.startswith("memcheck-") and entry.suffix == ".json"
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])   # as a disk that filled up mid-write would leave it
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, result.stderr) == (0, "")
    assert (summary_row(result)[1], summary_row(result)[5]) == ("NO_EVIDENCE", "memcheck ok T s")
    assert after(result.stdout, "verify") == [unverified("day13-shared-memory")]   # nothing about the cache
    assert len(sanitizer_runs(pass_log)) == 2
    assert json.loads(entry.read_bytes())["exit_status"] == 0   # replaced whole
    again = coursectl("verify", "--all", "-q")
    assert summary_row(again)[5] == "memcheck ok (cached)"


@pytest.mark.slow
def test_a_crashed_pass_is_not_stored(course, fake_sanitizer, prebuilt, pass_log):
    course(["crash"], sanitizers={"crash": {"memcheck": {}}})
    for count in (1, 2):
        result = coursectl("verify", "--all", "-q")
        assert (result.exit_code, summary_row(result)[1], summary_row(result)[5]) == (1, "CRASH", "memcheck FAIL T s")
        assert len(sanitizer_runs(pass_log)) == count
    assert not (Path(os.environ["COURSECTL_CACHE"]) / FOLDER / "crash").exists()


def test_a_result_that_cannot_be_stored_is_a_note(course, fake_sanitizer, prebuilt, monkeypatch, tmp_path):
    import orchestrator.workflows.turn

    full = tmp_path / "cache" / "memcheck.json"

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device", str(full))

    monkeypatch.setattr(orchestrator.workflows.turn, "store_pass", no_space)
    course(["day13-shared-memory"], sanitizers={"day13-shared-memory": {"memcheck": {}}})
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, result.stderr) == (0, "")
    assert (summary_row(result)[1], summary_row(result)[5]) == ("NO_EVIDENCE", "memcheck ok T s")
    assert after(result.stdout, "verify") == [
        unverified("day13-shared-memory"),
        "day13-shared-memory: note: memcheck: not stored in the sanitizer cache: "
        f"cannot write/read {full}: No space left on device"]
