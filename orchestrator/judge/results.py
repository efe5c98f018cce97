"""What a workflow returns: a result per lesson, its status, and the events shown while it runs.

A lesson's status follows from what was found in exactly one place,
`settle`; a lesson stopped before anything could be judged (an unsupported
GPU, an interrupt, a crash of coursectl itself) gets its status from why it
stopped, through `stopped`. Whether a whole run failed, with --strict or
without, is `run_verdict`'s answer alone: the tally, the exit status and the
JUnit report all take it from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from ..cuda.build import BuildResult
from ..transcript.claims import ClaimResult
from .comparison import FieldResult
from .evidence import describe_source_change
from .tolerances import Suggestion
from ..cuda.sanitizer import Report
from ..cuda.toolchain import GpuState
from ..transcript.parse import Flat, Transcript
from ..words import command_line


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"
    UNSUPPORTED = "UNSUPPORTED"
    NO_EVIDENCE = "NO_EVIDENCE"
    SKIPPED = "SKIPPED"
    FLAKY = "FLAKY"
    STALE = "STALE"              # the evidence no longer describes the course: source, flags or rules changed
    INCOMPLETE = "INCOMPLETE"    # a declared sanitizer pass neither ran nor had a recorded report re-judged

    @property
    def is_failure(self) -> bool:
        return self in (Status.FAIL, Status.TIMEOUT, Status.CRASH)


class RunInfo(BaseModel):
    command: list[str]
    exit_status: int | None
    signal: int | None = None
    timed_out: bool = False
    seconds: float
    stdout_truncated: bool = False
    stderr_tail: str = ""


class RunEnvironment(BaseModel):
    """The GPU's clocks and other users before and after a lesson's runs."""

    before: GpuState | None = None
    after: GpuState | None = None
    untrusted: str | None = None   # why its timings cannot be trusted: throttling, other processes


class PassResult(BaseModel):
    """One compute-sanitizer tool run on one lesson (or its recorded report), judged."""

    tool: str
    command: list[str] = Field(default_factory=list)   # empty for a recorded report re-judged
    recorded: bool = False           # judged from the evidence, not run now
    cached: bool = False             # judged from the sanitizer cache: the tool was not run now
    seconds: float = 0.0             # when cached, those of the run it was stored from
    exit_status: int | None = None
    timed_out: bool = False
    errors: int | None = None
    warnings: int | None = None
    findings: int = 0
    kernels: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    report: Report | None = None     # what the tool said, for a pass run now
    not_run: str | None = None       # a declared pass that neither ran nor was recorded: why

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str:
        """`ok`, `FAIL` or `TIMEOUT`, as the summary and `coursectl sanitize` show a pass."""
        return "TIMEOUT" if self.timed_out else ("ok" if self.ok else "FAIL")


class ProvenanceChange(BaseModel):
    """One thing underneath a lesson's figures that differs from its evidence: the driver, CUDA, ..."""

    what: str                        # driver, CUDA, nvcc, compute-sanitizer, coursectl, source sha256, ...
    old: str | None                  # as the evidence records it; None: not recorded
    new: str | None                  # now (or the other side of a comparison); None: unknown
    # `what` is a local file the build reads (a path in the course), its values sha256s; only for `text`,
    # the report has the path in `what` and keeps its shape.
    file: SkipJsonSchema[bool] = Field(default=False, exclude=True)

    @property
    def text(self) -> str:
        """`evidence from driver 570.86.15, now 580.159.04`; `common/check.cuh changed since the evidence`."""
        if self.file:
            return describe_source_change(self.what, self.old, self.new)
        return f"evidence from {self.what} {shown(self.old, 'not recorded')}, now {shown(self.new, 'unknown')}"


def shown(value: str | None, absent: str) -> str:
    """A provenance value as people read it: a sha256 cut to its first 12 digits."""
    if value is None:
        return absent
    return value[:12] if len(value) == 64 and all(c in "0123456789abcdef" for c in value) else value


class ClaimChange(BaseModel):
    """A claim that held on the evidence and no longer does, or the other way round."""

    id: str
    kind: str                        # gate | expect
    says: str
    was: bool                        # held on the evidence's transcript
    now: bool                        # holds on this run
    failures: list[str] = Field(default_factory=list)   # the first failures of the side where it does not hold


class FindingChange(BaseModel):
    """Sanitizer findings of one kernel, kind and place that appeared or went away since the evidence."""

    tool: str
    change: str                      # appeared | went away
    kernel: str | None
    kind: str
    at: str                          # file:line, a race as write file:line -> read file:line
    reports: int                     # how many reports of the pass stand for it
    text: str


class LessonResult(BaseModel):
    lesson: str
    status: Status = Status.PASS
    reasons: list[str] = Field(default_factory=list)   # why it failed, or why it was stopped (UNSUPPORTED, SKIPPED)
    unverified: str | None = None    # NO_EVIDENCE: what was not checked, and the command that fixes it
    # STALE: what changed since the evidence, each with the command that fixes it
    stale: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)   # predictions that did not hold, and other remarks
    gpu: str | None = None
    arch: str | None = None
    builds: list[BuildResult] = Field(default_factory=list)
    run: RunInfo | None = None
    transcript: str | None = None
    claims: list[ClaimResult] = Field(default_factory=list)
    fields: list[FieldResult] = Field(default_factory=list)
    evidence: str | None = None      # the GPU slug of the evidence compared against
    recorded: bool = False
    sanitizers: list[PassResult] = Field(default_factory=list)
    environment: RunEnvironment = RunEnvironment()
    spread: dict[str, float] = Field(default_factory=dict)   # with --repeat: (max - min) / |median| per tolerance field
    ambiguous: SkipJsonSchema[list[str]] = Field(default=[], exclude=True)  # with --repeat: spread past tolerance
    suggestions: SkipJsonSchema[list[Suggestion]] = Field(default=[], exclude=True)  # record --repeat
    evidence_date: str | None = None  # when the evidence compared against was recorded
    provenance: list[ProvenanceChange] = Field(default_factory=list)  # what differs underneath, evidence -> now
    claim_changes: list[ClaimChange] = Field(default_factory=list)   # claims whose outcome differs from the evidence's
    finding_changes: list[FindingChange] = Field(default_factory=list)  # sanitizer findings that appeared or went away
    flats: list[Flat] | None = Field(default=None, exclude=True)  # the parsed fields; None: no parse
    # The parsed transcript it was judged on, by GPU slug (a run: this GPU's; verify --offline: each GPU's
    # evidence); claims across runs read them (judge/across.py)
    transcripts: SkipJsonSchema[dict[str, Transcript]] = Field(default={}, exclude=True)
    runs: int = 1
    seconds: float = 0.0
    # --retries: each attempt before the one judged, that crashed or timed out: why
    retried: list[str] = Field(default_factory=list)
    # what its verdict covered (coverage): gates held, fields by rule, passes
    covered: dict = Field(default_factory=dict)
    # verify --offline: its result is the one its last judging gave, nothing it is judged from having changed
    # since (workflows/judged.py)
    reused: bool = False


class Options(BaseModel):
    jobs: int = 1
    arch: str | None = None
    gpus: str | None = None
    sanitize: bool = True
    sanitize_tools: list[str] | None = None   # run these passes instead of the declared ones
    all_archs: bool = False                   # also build the manifest's architectures (record)
    repeat: int = 1
    exitfirst: bool = False                   # after the first failure, the lessons not yet run are SKIPPED
    dry_run: bool = False                     # record: judge and show, write nothing
    rerun_sanitizers: bool = False            # run every pass even where the sanitizer cache holds its result
    sanitizer_jobs: int | None = None         # passes at once (default: see sharing.GpuShare)
    start_gap: float | None = None            # seconds between timed runs' starts (default: sharing.START_GAP)
    retries: int = 0                          # verify: a timed run that crashed or timed out, run and judged again
    rejudge: bool = False                     # verify --offline: judge every lesson, none taken from workflows/judged.py


class Event(BaseModel):
    """A stage change, for progress display. The core never prints."""

    lesson: str
    stage: str
    detail: str = ""
    result: LessonResult | None = None   # with stage "done": the lesson's result
    build: BuildResult | None = None     # with stage "built": the build


Emit = Callable[[Event], None]


def quiet(_: Event) -> None:
    """An Emit that shows nothing."""


def status_of(result: LessonResult, *, compared: bool = True) -> Status:
    """The status that follows from what was found, the one rule of it (settle sets it).

    A run that timed out or died of a signal says so first, then a sanitizer
    pass that timed out (TIMEOUT too: its reason names the pass); then any
    reason fails the lesson; then, where the workflow compares with evidence,
    a lesson without evidence for its GPU (offline: for any GPU) has none;
    evidence that no longer describes the course (a source, the flags or
    the rules it was recorded under changed: `stale`) is STALE; a declared
    sanitizer pass that neither ran nor was re-judged from its recorded
    report (`not_run`, --no-sanitize included) leaves it INCOMPLETE; a
    lesson that would pass after attempts that crashed or timed out
    (--retries) is FLAKY.
    """
    run = result.run
    if run is not None and run.timed_out:
        return Status.TIMEOUT
    if run is not None and run.signal:
        return Status.CRASH
    if any(p.timed_out for p in result.sanitizers):
        return Status.TIMEOUT
    if result.reasons:
        return Status.FAIL
    if compared and (result.evidence is None or (result.gpu is not None and result.evidence != result.gpu)):
        return Status.NO_EVIDENCE
    if result.stale:
        return Status.STALE
    if any(p.not_run for p in result.sanitizers):
        return Status.INCOMPLETE
    return Status.FLAKY if result.retried else Status.PASS


RETRIED = (Status.CRASH, Status.TIMEOUT)   # what --retries runs again: a run that may not fail the same way twice


def settle(result: LessonResult, *, compared: bool = True) -> LessonResult:
    """Set a judged lesson's status (status_of) and return it: once a lesson, after its workflow's last stage."""
    result.status = status_of(result, compared=compared)
    result.unverified = _unverified(result) if result.status is Status.NO_EVIDENCE else None
    result.covered = coverage(result)
    return result


def why(result: LessonResult) -> str:
    """The one line that says why a lesson is not PASS (empty for a PASS)."""
    if result.status is Status.PASS:
        return ""
    if result.status is Status.FLAKY:
        return f"passed on retry {len(result.retried)}, after {'; '.join(result.retried)}".splitlines()[0]
    if result.status is Status.INCOMPLETE:
        missing = [f"{p.tool}: {p.not_run}" for p in result.sanitizers if p.not_run]
        return f"declared sanitizer pass not run: {'; '.join(missing)}".splitlines()[0]
    text = result.reasons[0] if result.reasons else (result.unverified or (result.stale[0] if result.stale else ""))
    return text.splitlines()[0] if text else ""


def _unverified(result: LessonResult) -> str:
    if result.gpu is None:
        return (f"never recorded on a GPU: the build and what needs no transcript were checked, the output was not; "
                f"run `{command_line('coursectl', 'record', result.lesson)}` on a GPU")
    return (f"no evidence for {result.gpu} yet: its output was parsed and its claims checked, but there was "
            f"nothing to compare it with; run `{command_line('coursectl', 'record', result.lesson)}` on this GPU")


def stopped(lesson: str, status: Status, reason: str, gpu: str | None = None,
            arch: str | None = None, builds: list[BuildResult] | None = None) -> LessonResult:
    """A lesson that ended before it could be judged, with the one reason why."""
    return LessonResult(lesson=lesson, status=status, reasons=[reason], gpu=gpu, arch=arch,
                        builds=builds or [])


TALLY_WORDS = (
    (Status.PASS, "passed"), (Status.FLAKY, "flaky"), (Status.STALE, "stale"), (Status.INCOMPLETE, "incomplete"),
    (Status.NO_EVIDENCE, "without evidence"), (Status.UNSUPPORTED, "unsupported"),
    (Status.SKIPPED, "skipped"),
)


def is_unverified(status: Status) -> bool:
    """Neither a pass nor a failure: what --strict turns into failures."""
    return status in (Status.NO_EVIDENCE, Status.UNSUPPORTED, Status.SKIPPED, Status.STALE, Status.INCOMPLETE)


@dataclass(frozen=True)
class Verdict:
    """Whether a run failed, from `run_verdict`: what the tally, the exit status and JUnit all say."""

    failed: bool                     # the command exits 1
    strict: bool
    unverified: int = 0              # with strict: the lessons neither passed nor failed, counted as failed
    flaky: int = 0                   # with strict: the lessons that passed only on a retry, counted as failed
    run_reasons: tuple[str, ...] = ()   # with strict: what fails the run as a whole (an empty selection, ...)

    @property
    def reasons(self) -> list[str]:
        """Why --strict failed the run, in words: `1 not verified, counted as failed`; none without strict."""
        counted = [f"{self.unverified} not verified, counted as failed"] if self.unverified else []
        counted += [f"{self.flaky} flaky, counted as failed"] if self.flaky else []
        return [*counted, *self.run_reasons]

    def counts_as_failed(self, result: LessonResult) -> bool:
        """This lesson fails the run: it failed, or it is not verified or FLAKY and the run is strict."""
        return result.status.is_failure or (self.strict and (is_unverified(result.status) or
                                                             result.status is Status.FLAKY))


def run_verdict(results: list[LessonResult], *, strict: bool, partial: str = "") -> Verdict:
    """Did this run fail? The one answer, for the tally, the exit status and the JUnit report.

    Any failed lesson fails the run. With strict, so does every lesson neither
    passed nor failed (NO_EVIDENCE, UNSUPPORTED, SKIPPED), every FLAKY one (it
    passed only on a retry), an empty selection,
    and a partial merge; `partial` says what such a merge lacks (`shard 2 of 2
    missing`), empty for a whole run.
    """
    unverified = sum(is_unverified(r.status) for r in results) if strict else 0
    flaky = sum(r.status is Status.FLAKY for r in results) if strict else 0
    run_reasons = []
    if strict and not results:
        run_reasons.append("an empty selection, counted as failed")
    if strict and partial:
        run_reasons.append(f"a partial merge ({partial}), counted as failed")
    failed = any(r.status.is_failure for r in results) or bool(unverified or flaky or run_reasons)
    return Verdict(failed=failed, strict=strict, unverified=unverified, flaky=flaky, run_reasons=tuple(run_reasons))


def ran(result: LessonResult) -> bool:
    """Whether a lesson's program or a sanitizer pass ran now: a PASS of verify --offline ran nothing, it
    re-judged recorded evidence."""
    return result.run is not None or any(p.command for p in result.sanitizers)


def covered_words(covered: dict) -> str:
    """`ran; 5 gates held; fields compared: 12 exact, 3 tolerance ±25%; passes run: memcheck; re-judged: racecheck`."""
    if not covered:
        return "not recorded"
    fields = ", ".join(f"{n} {rule}" for rule, n in covered.get("fields_compared", {}).items()) or "none"
    parts = ["ran" if covered.get("ran") else "as last judged, nothing it is judged from changed" if covered.get("reused")
             else "re-judged, nothing ran", f"{covered.get('gates_held', 0)} gates held",
             f"fields compared: {fields}"]
    parts += [f"passes run: {', '.join(covered['passes_run'])}"] if covered.get("passes_run") else []
    parts += [f"re-judged: {', '.join(covered['passes_rejudged'])}"] if covered.get("passes_rejudged") else []
    return "; ".join(parts)


def coverage(result: LessonResult) -> dict:
    """What a result's verdict covered: the gates held, the fields compared by each rule, the passes run now and
    those re-judged from a recorded report (or the cache); shown by `-v`, the JSON report and JUnit."""
    fields: dict[str, int] = {}
    for f in result.fields:
        if f.status.value in ("same", "within"):
            fields[f.rule] = fields.get(f.rule, 0) + 1
    return {"ran": ran(result), "reused": result.reused,
            "gates_held": sum(c.kind == "gate" and c.held for c in result.claims),
            "fields_compared": fields,
            "passes_run": [p.tool for p in result.sanitizers if p.command and not p.cached and not p.not_run],
            "passes_rejudged": [p.tool for p in result.sanitizers if (p.recorded or p.cached) and not p.not_run]}


def tally(results: list[LessonResult], seconds: float) -> str:
    """`4 passed, 1 without evidence, 0 failed in 17.9 s`, in pytest's manner.

    Passed and failed are always named; the rest only when there are some. A
    PASS that ran nothing (verify --offline re-judged its evidence) is
    counted as `re-judged`, not passed: `0 passed, 4 re-judged, 0 failed`; those whose result is the one their
    last judging gave (nothing they are judged from changed) are counted within it: `0 passed, 4 re-judged, 0
    failed in 0.1 s; 3 unchanged since last judged`.
    Failures say how they failed when any timed out or crashed.
    """
    parts = []
    rejudged = sum(r.status is Status.PASS and not ran(r) for r in results)
    for status, words in TALLY_WORDS:
        count = sum(r.status is status for r in results) - (rejudged if status is Status.PASS else 0)
        if count or status is Status.PASS:
            parts.append(f"{count} {words}")
        if status is Status.PASS and rejudged:
            parts.append(f"{rejudged} re-judged")
    failed = [r for r in results if r.status.is_failure]
    kinds = [f"{sum(r.status is s for r in failed)} {w}" for s, w in
             ((Status.TIMEOUT, "timed out"), (Status.CRASH, "crashed")) if any(r.status is s for r in failed)]
    parts.append(f"{len(failed)} failed" + (f" ({', '.join(kinds)})" if kinds else ""))
    reused = sum(r.status is Status.PASS and r.reused for r in results)
    return f"{', '.join(parts)} in {seconds:.1f} s" + (f"; {reused} unchanged since last judged" if reused else "")
