"""orchestrator.sanitizer_cache: the key of a pass, storing it, and damaged entries read as misses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.process import CommandResult
from orchestrator.sanitizer_cache import (FOLDER, entry_path, is_cacheable, key_environment, load_pass, pass_key,
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
        "format": 1, "binary_sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
        "tool": "memcheck", "tool_args": ["--leak-check", "full"],
        "program_args": ["--check-only"],
        "command": ["compute-sanitizer", "--tool", "memcheck", "--log-file", "LOG", "--xml", "--save", "XML",
                    "--error-exitcode", "86", "--leak-check", "full", "PROGRAM", "--check-only"],
        "sanitizer_version": "2025.3.1.0", "driver_version": "580.159.04", "gpu": "NVIDIA H200",
        "environment": key_environment()}
    # Which of the GPUs of one model, and where the toolkit lies, change nothing.
    assert key_of(binary, env={"CUDA_VISIBLE_DEVICES": "GPU-00000001-test"}).digest() == key.digest()
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-elsewhere")
    assert key_of(binary).digest() == key.digest()


@pytest.mark.parametrize("change", ["binary", "tool", "tool_args", "program_args", "sanitizer_version",
                                    "driver_version", "gpu_name", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING"])
def test_a_change_of_any_input_changes_the_key(binary, monkeypatch, change):
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    monkeypatch.delenv("CUDA_MODULE_LOADING", raising=False)
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
    assert key_of(binary, **changes.get(change, {})).digest() != before


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


def _damage(path: Path, how: str) -> None:
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


@pytest.mark.parametrize("how", ["empty", "cut-in-half", "not-json", "log-edited", "field-missing", "bad-base64",
                                 "a-list"])
def test_a_damaged_entry_is_a_miss(tmp_path, binary, how):
    key = key_of(binary)
    path = store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)
    _damage(path, how)
    assert load_pass(tmp_path, "day13-shared-memory", key) is None
    store_pass(tmp_path, "day13-shared-memory", key, ran(), LOG, XML)   # a run now replaces it
    assert load_pass(tmp_path, "day13-shared-memory", key).log_bytes == LOG


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
