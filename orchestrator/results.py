"""What a workflow returns: a result per lesson, its status, and the events shown while it runs.

A lesson's status follows from what was found in exactly one place,
`settle`; a lesson stopped before anything could be judged (an unsupported
GPU, an interrupt, a crash of coursectl itself) gets its status from why it
stopped, through `stopped`.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

from pydantic import BaseModel, Field

from .build import BuildResult
from .claims import ClaimResult
from .comparison import FieldResult
from .sanitizer import Report
from .transcript import Flat


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"
    UNSUPPORTED = "UNSUPPORTED"
    NO_EVIDENCE = "NO_EVIDENCE"
    SKIPPED = "SKIPPED"

    @property
    def is_failure(self) -> bool:
        return self in (Status.FAIL, Status.TIMEOUT, Status.CRASH)


class Event(BaseModel):
    """A stage change, for progress display. The core never prints."""

    lesson: str
    stage: str
    detail: str = ""


Emit = Callable[[Event], None]


def quiet(_: Event) -> None:
    """An Emit that shows nothing."""


class RunInfo(BaseModel):
    command: list[str]
    exit_status: int | None
    signal: int | None = None
    timed_out: bool = False
    seconds: float
    stdout_truncated: bool = False
    stderr_tail: str = ""


class PassResult(BaseModel):
    """One compute-sanitizer tool run on one lesson (or its recorded report), judged."""

    tool: str
    command: list[str] = []          # empty for a recorded report re-judged
    recorded: bool = False           # judged from the evidence, not run now
    seconds: float = 0.0
    exit_status: int | None = None
    timed_out: bool = False
    errors: int | None = None
    warnings: int | None = None
    findings: int = 0
    kernels: list[str] = []
    problems: list[str] = []
    report: Report | None = None     # what the tool said, for a pass run now

    @property
    def ok(self) -> bool:
        return not self.problems


class LessonResult(BaseModel):
    lesson: str
    status: Status = Status.PASS
    reasons: list[str] = []          # why it is not PASS
    notes: list[str] = []            # predictions that did not hold, and other remarks
    gpu: str | None = None
    arch: str | None = None
    builds: list[BuildResult] = []
    run: RunInfo | None = None
    transcript: str | None = None
    claims: list[ClaimResult] = []
    fields: list[FieldResult] = []
    evidence: str | None = None      # the GPU slug of the evidence compared against
    recorded: bool = False
    sanitizers: list[PassResult] = []
    environment: dict = {}           # GPU clocks, throttling and other processes around the run
    spread: dict[str, float] = {}    # with --repeat: (max - min) / |median| per tolerance field
    flats: list[Flat] | None = Field(default=None, exclude=True)  # the parsed fields; None: no parse
    runs: int = 1
    seconds: float = 0.0


class Options(BaseModel):
    jobs: int = 1
    arch: str | None = None
    gpus: str | None = None
    sanitize: bool = True
    sanitize_tools: list[str] | None = None   # run these passes instead of the declared ones
    all_archs: bool = False                   # also build the manifest's architectures (record)
    repeat: int = 1


def settle(result: LessonResult, compared: bool = True) -> LessonResult:
    """Set a judged lesson's status from what was found, and return it.

    A run that timed out or died of a signal says so first; then any reason
    fails the lesson; then, where the workflow compares with evidence, a
    lesson without evidence for its GPU (offline: for any GPU) has none.
    """
    run = result.run
    if run is not None and run.timed_out:
        result.status = Status.TIMEOUT
    elif run is not None and run.signal:
        result.status = Status.CRASH
    elif result.reasons:
        result.status = Status.FAIL
    elif compared and (result.evidence is None or (result.gpu is not None and result.evidence != result.gpu)):
        result.status = Status.NO_EVIDENCE
    else:
        result.status = Status.PASS
    return result


def stopped(lesson: str, status: Status, reason: str, gpu: str | None = None,
            arch: str | None = None, builds: list[BuildResult] | None = None) -> LessonResult:
    """A lesson that ended before it could be judged, with the one reason why."""
    return LessonResult(lesson=lesson, status=status, reasons=[reason], gpu=gpu, arch=arch,
                        builds=builds or [])
