"""A lesson's status follows from what was found, in one place."""

from __future__ import annotations

import pytest

from orchestrator.judge.results import LessonResult, PassResult, RunInfo, Status, run_verdict, settle, stopped


def run(**kwargs) -> RunInfo:
    return RunInfo(command=["./x"], exit_status=kwargs.pop("exit_status", 0), seconds=0.1, **kwargs)


@pytest.mark.parametrize("found, compared, status", [
    (dict(run=run(timed_out=True), reasons=["killed"]), True, Status.TIMEOUT),
    (dict(run=run(signal=11), reasons=["segfault"]), True, Status.CRASH),
    (dict(run=run(exit_status=1), reasons=["exit status 1"]), True, Status.FAIL),
    (dict(reasons=["a build failed"]), False, Status.FAIL),
    (dict(gpu="nvidia-h200", evidence=None), True, Status.NO_EVIDENCE),
    (dict(gpu="nvidia-h200", evidence="tesla-t4"), True, Status.NO_EVIDENCE),
    (dict(gpu="nvidia-h200", evidence="nvidia-h200"), True, Status.PASS),
    (dict(gpu=None, evidence="tesla-t4"), True, Status.PASS),          # offline: any GPU's evidence
    (dict(gpu=None, evidence=None), True, Status.NO_EVIDENCE),
    (dict(gpu="nvidia-h200", evidence=None), False, Status.PASS),      # nothing was compared
    (dict(run=run(), sanitizers=[PassResult(tool="memcheck", problems=["memcheck: unexpected error"]),
                                 PassResult(tool="racecheck", timed_out=True, problems=["racecheck: timed out"])],
          reasons=["memcheck: unexpected error", "racecheck: timed out"]), True, Status.TIMEOUT),
    (dict(run=run(), sanitizers=[PassResult(tool="memcheck", problems=["memcheck: unexpected error"])],
          reasons=["memcheck: unexpected error"]), True, Status.FAIL),
], ids=["timeout", "signal", "reasons", "build", "no-evidence", "other-gpu", "pass", "offline-pass",
        "offline-none", "not-compared", "sanitizer-timeout", "sanitizer-fail"])
def test_settle(found, compared, status):
    assert settle(LessonResult(lesson="x", **found), compared=compared).status is status


def test_settle_overrides_what_was_there_before():
    result = LessonResult(lesson="x", status=Status.FAIL, gpu="g", evidence="g")
    assert settle(result).status is Status.PASS


def test_a_stopped_lesson_keeps_the_status_of_why_it_stopped():
    result = stopped("x", Status.UNSUPPORTED, "needs compute capability 9.0", gpu="tesla-t4")
    assert (result.status, result.reasons, result.gpu) == (Status.UNSUPPORTED, ["needs compute capability 9.0"],
                                                           "tesla-t4")
    assert not result.status.is_failure and Status.CRASH.is_failure


def test_values_print_with_every_digit_that_tells_them_apart():
    from orchestrator.words import format_value

    assert [format_value(v) for v in (18011780.0, 18011750.0, 0.0094, 1344.0, 2.5e-06, None, True)] == [
        "18011780", "18011750", "0.0094", "1344", "2.5e-06", "-", "yes"]


def _of(*statuses: Status) -> list[LessonResult]:
    return [LessonResult(lesson=f"l{i}", status=status) for i, status in enumerate(statuses)]


@pytest.mark.parametrize("results, strict, partial, failed, reasons", [
    (_of(Status.PASS), False, "", False, []),
    (_of(Status.PASS, Status.FAIL), False, "", True, []),
    (_of(Status.PASS, Status.NO_EVIDENCE, Status.SKIPPED), False, "", False, []),
    (_of(Status.PASS, Status.NO_EVIDENCE, Status.SKIPPED), True, "", True, ["2 not verified, counted as failed"]),
    (_of(Status.UNSUPPORTED, Status.TIMEOUT), True, "", True, ["1 not verified, counted as failed"]),
    ([], False, "", False, []),
    ([], True, "", True, ["an empty selection, counted as failed"]),
    (_of(Status.PASS), False, "shard 2 of 2 missing", False, []),
    (_of(Status.PASS), True, "shard 2 of 2 missing", True, ["a partial merge (shard 2 of 2 missing), counted as failed"]),
    (_of(Status.NO_EVIDENCE), True, "shard 2 of 2 missing", True,
     ["1 not verified, counted as failed", "a partial merge (shard 2 of 2 missing), counted as failed"]),
], ids=["pass", "fail", "unverified", "strict-unverified", "strict-failed-too", "empty", "strict-empty", "partial",
        "strict-partial", "strict-both"])
def test_run_verdict(results, strict, partial, failed, reasons):
    verdict = run_verdict(results, strict=strict, partial=partial)
    assert (verdict.failed, verdict.reasons) == (failed, reasons)
    assert [verdict.counts_as_failed(r) for r in results] == [
        r.status.is_failure or (strict and r.status is not Status.PASS) for r in results]
