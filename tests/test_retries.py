"""verify --retries N: a timed run that crashed or timed out is run and judged again; one that then passes is FLAKY,
a pass without --strict and a failure with it (run_verdict)."""

from __future__ import annotations

import json
import signal
import xml.etree.ElementTree as ET

import pytest

from conftest import coursectl, lines, statuses, tally_line
from orchestrator.process import CommandResult, run_command
from orchestrator.workflows import pipeline
from orchestrator.judge.results import quiet

LESSON = "day13-shared-memory"


def failing_first(monkeypatch, how: str, times: int) -> list[int]:
    """verify's runner: the first `times` timed runs of LESSON crash (SIGSEGV) or time out, then run as they are.

    Returns the list of the timed runs' attempts, one entry each, as they come."""
    attempts: list[int] = []

    def runner(argv, **kwargs):
        if not any(str(arg).endswith(f"/{LESSON}.txt") for arg in argv[1:]):
            return run_command(argv, **kwargs)   # the builds, the other lessons
        attempts.append(len(attempts) + 1)
        if len(attempts) <= times:
            if how == "crash":
                return CommandResult(argv=list(argv), returncode=-signal.SIGSEGV, signal=signal.SIGSEGV,
                                     stderr=b"Segmentation fault\n", seconds=0.01)
            return CommandResult(argv=list(argv), returncode=None, timed_out=True, seconds=30.0)
        return run_command(argv, **kwargs)

    monkeypatch.setattr(pipeline.verify, "__defaults__", (quiet, runner))
    return attempts


@pytest.fixture
def recorded(course, fake_gpu, prebuilt):
    course([LESSON, "day14-syncthreads"])
    assert coursectl("record", "--all", "-q").exit_code == 0


@pytest.mark.parametrize("how, status", [("crash", "CRASH"), ("timeout", "TIMEOUT")])
def test_a_run_that_fails_once_passes_on_a_retry_as_flaky(recorded, monkeypatch, tmp_path, how, status):
    attempts = failing_first(monkeypatch, how, 1)
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    result = coursectl("verify", "--all", "-q", "--retries", "2", "--json", report, "--junit", junit)
    assert result.exit_code == 0
    assert attempts == [1, 2]
    assert statuses(result.stdout) == {LESSON: "FLAKY", "day14-syncthreads": "PASS"}
    assert tally_line(result.stdout) == "1 passed, 1 flaky, 0 failed in T s"
    [flaky] = [r for r in json.loads(report.read_text())["results"] if r["lesson"] == LESSON]
    assert flaky["status"] == "FLAKY"
    assert flaky["retried"] == [f"attempt 1: {status}: " + ("killed by signal 11 (SIGSEGV)" if how == "crash"
                                                             else "timed out after 30.0 s")]
    case = next(c for c in ET.parse(junit).getroot().findall("testcase") if c.get("name") == LESSON)
    assert case.find("failure") is None and case.find("skipped") is None
    assert case.find("system-err").text.startswith("passed on a retry, after:\nattempt 1: ")


def test_a_stand_in_that_crashes_once_then_passes_is_flaky(recorded, monkeypatch, tmp_path):
    """The replaying stand-in itself dies of SIGABRT on its first run (STANDIN_CRASH_ONCE), then replays."""
    monkeypatch.setenv("STANDIN_CRASH_ONCE", str(tmp_path / "crashed"))
    once = coursectl("verify", LESSON, "-q")
    assert (once.exit_code, statuses(once.stdout)) == (1, {LESSON: "CRASH"})
    (tmp_path / "crashed").unlink()
    report = tmp_path / "r.json"
    retried = coursectl("verify", LESSON, "-q", "--retries", "1", "--json", report)
    assert (retried.exit_code, statuses(retried.stdout)) == (0, {LESSON: "FLAKY"})
    [result] = json.loads(report.read_text())["results"]
    assert result["retried"] == ["attempt 1: CRASH: killed by signal 6 (SIGABRT)"]   # no path of this machine
    assert f"{LESSON}: note: attempt 1: CRASH: killed by signal 6 (SIGABRT); run again (--retries 1)" in lines(
        retried.stdout)
    (tmp_path / "crashed").unlink()
    shown = coursectl("verify", LESSON, "--retries", "1")   # its line as it finishes: why it is not PASS
    assert any(line.startswith("FLAKY") and line.endswith(
        "passed on retry 1, after attempt 1: CRASH: killed by signal 6 (SIGABRT)") for line in lines(shown.stdout))


def test_strict_counts_a_flaky_lesson_as_failed(recorded, monkeypatch, tmp_path):
    failing_first(monkeypatch, "crash", 1)
    junit = tmp_path / "r.xml"
    result = coursectl("verify", "--all", "-q", "--retries", "1", "--strict", "--junit", junit)
    assert result.exit_code == 1
    assert tally_line(result.stdout) == "1 passed, 1 flaky, 0 failed in T s; --strict: 1 flaky, counted as failed"
    case = next(c for c in ET.parse(junit).getroot().findall("testcase") if c.get("name") == LESSON)
    assert case.find("failure").get("type") == "FLAKY"
    assert case.find("failure").get("message").startswith("--strict: flaky, counted as failed: passed on retry 1")


def test_a_run_that_keeps_crashing_is_a_crash_after_its_retries(recorded, monkeypatch):
    attempts = failing_first(monkeypatch, "crash", 10)
    result = coursectl("verify", "--all", "-q", "--retries", "2")
    assert result.exit_code == 1
    assert attempts == [1, 2, 3]
    assert statuses(result.stdout)[LESSON] == "CRASH"


def test_without_retries_a_crash_is_run_once(recorded, monkeypatch):
    attempts = failing_first(monkeypatch, "crash", 1)
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, attempts, statuses(result.stdout)[LESSON]) == (1, [1], "CRASH")


def test_a_failure_that_is_no_crash_or_timeout_is_not_retried(course, fake_gpu, prebuilt, monkeypatch):
    """A gate that fails fails the same way again: only CRASH and TIMEOUT are run again."""
    course(["fail"])
    runs = []

    def runner(argv, **kwargs):
        runs.append(argv[0])
        return run_command(argv, **kwargs)

    monkeypatch.setattr(pipeline.verify, "__defaults__", (quiet, runner))
    result = coursectl("verify", "--all", "-q", "--retries", "3")
    assert result.exit_code == 1 and statuses(result.stdout)["fail"] == "FAIL"
    assert len([r for r in runs if "nvcc" not in r]) == 1


def test_retries_are_refused_offline(course):
    course([LESSON])
    result = coursectl("verify", "--all", "--offline", "--retries", "1")
    assert result.exit_code == 2
    assert lines(result.stderr) == ["coursectl: error: --retries: for runs on a GPU; --offline runs nothing on one"]


def test_flaky_is_a_pass_unless_strict_in_the_one_verdict():
    from orchestrator.judge.results import LessonResult, Status, run_verdict, settle

    result = settle(LessonResult(lesson="x", gpu="g", evidence="g", retried=["attempt 1: CRASH: killed by signal 6"]))
    assert result.status is Status.FLAKY and not result.status.is_failure
    assert not run_verdict([result], strict=False).failed
    strict = run_verdict([result], strict=True)
    assert (strict.failed, strict.flaky, strict.reasons) == (True, 1, ["1 flaky, counted as failed"])
    assert strict.counts_as_failed(result) and not run_verdict([result], strict=False).counts_as_failed(result)
