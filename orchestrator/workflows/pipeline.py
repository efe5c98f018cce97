"""The workflows (verify, record, sanitize, run, verify offline), each a tuple of stages.

A stage is what one lesson goes through once its builds are ready and it
has a GPU: a function of the lesson's turn (turn.Turn; offline, an
OfflineTurn) and its result so far, which returns its result from then on
(the same one, or for a judging stage the judged one, which keeps the notes
the lesson began with). The scheduler (scheduler.py) walks a workflow's
stages for each lesson and settles the result after the last; it also
decides what runs when: builds on a thread pool, each lesson's turn on a
GPU as soon as its builds are ready, sanitizer passes once every lesson's
timed runs are done, several at once, never beside a timed run on any GPU.
Passes whose inputs did not change are taken from the sanitizer cache.
Every verdict comes from judging.py; nothing here decides a status itself.
"""

from __future__ import annotations


from ..cuda.build import BuildResult
from ..cuda.toolchain import Toolchain
from ..errors import CoursectlError, EvidenceError, TranscriptError
from ..judge.drift import describe_drift
from ..judge.evidence import recover_evidence
from ..judge.freshness import judge_currency
from ..judge.judging import compare_build_evidence, judge_evidence, judge_run, judge_runs, judge_source
from ..judge.results import RETRIED, Emit, Event, LessonResult, Options, quiet, status_of
from ..manifest.model import Lesson, Manifest
from ..process import CommandResult, Runner, run_command, signal_name
# Not render.course: the whole page (and jinja2) is not needed to check a source's header lines.
from ..render.source_header import stale_source_header
from . import scheduler
from .scheduler import Scheduler, WaitingStage, walk_offline
from .turn import OfflineTurn, Turn


# -- the stages on a GPU -----------------------------------------------------------------------------
def run_program(turn: Turn, result: LessonResult) -> LessonResult:
    """The timed runs, the GPU to themselves (Turn.run_program); the next stage judges them."""
    turn.run_program()
    return result


def judge_the_runs(turn: Turn, result: LessonResult) -> LessonResult:
    """The runs judged, against this GPU's evidence; with --retries, runs that crashed or timed out run again."""
    return _retried(turn, result, _judged(turn, result, compare=True))


def _retried(turn: Turn, result: LessonResult, judged: LessonResult) -> LessonResult:
    """While the judged runs crashed or timed out (status_of) and retries are left, the timed runs again
    (Turn.run_program: the GPU to themselves again) and their judging; each attempt that failed so is kept in
    `retried`, which makes a lesson that then passes FLAKY (settle). The first attempt let its GPU go as its
    timed runs ended (Turn.release); each attempt after it waits, as any timed run does, until no sanitizer pass
    runs and the GPU's lock is its alone (GpuShare.timed), so it never runs beside another lesson's runs."""
    attempts: list[str] = []
    while len(attempts) < turn.options.retries and not turn.stopping.is_set():
        status = status_of(judged, compared=False)
        if status not in RETRIED:
            break
        attempts.append(f"attempt {len(attempts) + 1}: {status.value}: {_how_it_ended(judged)}")
        turn.emit(Event(lesson=turn.lesson.id, stage="retrying",
                        detail=f"retry {len(attempts)}/{turn.options.retries} after {status.value}"))
        turn.run_program()
        judged = _judged(turn, result, compare=True)
    judged.retried = attempts
    judged.notes += [f"{attempt}; run again (--retries {turn.options.retries})" for attempt in attempts]
    return judged


def _how_it_ended(judged: LessonResult) -> str:
    """`killed by signal 6 (SIGABRT)`, `timed out after 30.0 s`: an attempt in words, naming no path (the report's)."""
    run = judged.run
    if run is not None and run.timed_out:
        return f"timed out after {run.seconds:.1f} s"
    if run is not None and run.signal:
        return f"killed by signal {run.signal} ({signal_name(run.signal)})"
    return "ended without a transcript"


def judge_the_runs_alone(turn: Turn, result: LessonResult) -> LessonResult:
    """The runs judged on their own (record replaces the evidence); the chosen run is the one stored."""
    return _judged(turn, result, compare=False)


def _judged(turn: Turn, result: LessonResult, *, compare: bool) -> LessonResult:
    judged, turn.chosen = judge_runs(turn.manifest, turn.lesson, turn.runs, turn.gpu, turn.arch, compare=compare,
                                     resources=turn.build.resources, environment=turn.environment,
                                     recorded=turn.recorded)
    judged.notes += result.notes
    return judged


def judge_the_first_run(turn: Turn, result: LessonResult) -> LessonResult:
    """run: the one run judged on its own, with no evidence."""
    judged = judge_run(turn.manifest, turn.lesson, turn.runs[0], turn.gpu.slug, turn.arch, compare=False,
                       resources=turn.build.resources, environment=turn.environment)
    judged.notes += result.notes
    return judged


def compare_the_build_evidence(turn: Turn, result: LessonResult) -> LessonResult:
    """ptxas' report of this GPU's build against the build evidence."""
    compare_build_evidence(turn.manifest, turn.lesson, turn.build, turn.toolchain.nvcc_version, result,
                           turn.recorded)
    return result


def _start_the_sanitizers(turn: Turn, result: LessonResult) -> list:
    return turn.start_sanitizing(result)


def _take_the_sanitizers(turn: Turn, result: LessonResult, done: list) -> LessonResult:
    turn.take_the_passes(result, done)
    return result


# The compute-sanitizer passes, from the cache or run now, judged (Turn.sanitize): a stage that waits for them,
# which the scheduler walks without a thread waiting meanwhile.
run_the_sanitizers = WaitingStage("run_the_sanitizers", _start_the_sanitizers, _take_the_sanitizers)


def describe_the_drift(turn: Turn, result: LessonResult) -> LessonResult:
    """What changed since the evidence: provenance, claims, sanitizer findings (notes)."""
    describe_drift(turn.manifest, turn.lesson, turn.toolchain, turn.gpu, turn.arch, result, turn.build,
                   turn.recorded)
    return result


def check_the_rules(turn: Turn, result: LessonResult) -> LessonResult:
    """This GPU's evidence: its meta.json against the transcript, and rules that check less than it was
    recorded under (freshness.judge_currency); a changed source was built and judged as it is today."""
    judge_currency(turn.manifest, turn.lesson, result, offline=False, recorded=turn.recorded)
    return result


def judge_the_claims_across_runs(turn: Turn, result: LessonResult) -> LessonResult:
    """A run of a lesson with claims across runs: they are judged once every run of it is judged, before any
    settles or is stored (gathering.Gathering); a failed gate across runs is a reason of each run."""
    if turn.gathering is not None:
        turn.waited += turn.gathering.arrive(turn.lesson.id, result, lambda said: turn.emit(
            Event(lesson=turn.lesson.id, stage="waiting", detail=said)))
    return result


def store_the_evidence(turn: Turn, result: LessonResult) -> LessonResult:
    """The evidence written, if every gate held (Turn.store)."""
    return turn.store(result)


VERIFY = (run_program, judge_the_runs, compare_the_build_evidence, run_the_sanitizers, describe_the_drift,
          check_the_rules, judge_the_claims_across_runs)
RECORD = (run_program, judge_the_runs_alone, run_the_sanitizers, describe_the_drift, judge_the_claims_across_runs,
          store_the_evidence)
SANITIZE = (run_the_sanitizers,)
RUN = (run_program, judge_the_first_run)


# -- the stages without a GPU --------------------------------------------------------------------------
def judge_the_source(turn: OfflineTurn, result: LessonResult) -> LessonResult:
    """What needs no run: the source and what it declares (judging.judge_source)."""
    turn.snippets = judge_source(turn.manifest, turn.lesson, result)
    return result


def check_the_source_header(turn: OfflineTurn, result: LessonResult) -> LessonResult:
    """A source header that says other than the evidence: a reason, once."""
    try:
        stale = stale_source_header(turn.manifest, turn.lesson, turn.recorded)
    except (EvidenceError, TranscriptError):
        stale = None   # evidence that cannot be read: judge_evidence says why, once
    except CoursectlError as exc:
        stale = str(exc)
    if stale and stale not in result.reasons:   # a source that cannot be read: judge_source said so
        result.reasons.append(stale)
    return result


def judge_the_evidence(turn: OfflineTurn, result: LessonResult) -> LessonResult:
    """The recorded evidence re-judged (judging.judge_evidence)."""
    judge_evidence(turn.manifest, turn.lesson, result, turn.recorded, turn.snippets)
    return result


def check_the_evidence_is_current(turn: OfflineTurn, result: LessonResult) -> LessonResult:
    """Evidence whose sources, flags or rules changed since it was recorded: STALE (freshness.judge_currency)."""
    judge_currency(turn.manifest, turn.lesson, result, offline=True, recorded=turn.recorded)
    return result


def compare_each_build_evidence(turn: OfflineTurn, result: LessonResult) -> LessonResult:
    """ptxas' report of each architecture's build against its build evidence."""
    for build in result.builds:
        compare_build_evidence(turn.manifest, turn.lesson, build, turn.toolchain.nvcc_version, result, turn.recorded)
    return result


VERIFY_OFFLINE = (judge_the_source, check_the_source_header, judge_the_evidence, check_the_evidence_is_current,
                  compare_each_build_evidence)


# -- the workflows -------------------------------------------------------------------------------------
def verify(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = quiet, runner: Runner = run_command) -> list[LessonResult]:
    """Build, run, judge against this GPU's evidence, check the build evidence, sanitize."""
    return Scheduler(manifest, lessons, toolchain, options, VERIFY, emit, runner, compared=True).run()


def record(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = quiet, runner: Runner = run_command) -> list[LessonResult]:
    """Build (every listed architecture too), run, judge, sanitize, and store only if every gate held.

    Its sanitizer passes always run, and refresh the sanitizer cache. With options.dry_run nothing is
    stored, not even an interrupted record's sets put back: the result says what would have been written.
    """
    recovered = {} if options.dry_run else {lesson.id: recover_evidence(manifest.root, lesson.id)
                                            for lesson in lessons}
    options = options.model_copy(update={"all_archs": True, "rerun_sanitizers": True})
    return Scheduler(manifest, lessons, toolchain, options, RECORD, emit, runner, compared=False,
                     notes=recovered).run()


def sanitize(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, options: Options,
             emit: Emit = quiet, runner: Runner = run_command) -> LessonResult:
    """Only the compute-sanitizer passes (options.sanitize_tools, else the declared ones), run now and judged."""
    toolchain.require_sanitizer()
    options = options.model_copy(update={"sanitize": True, "rerun_sanitizers": True})
    [result] = Scheduler(manifest, [lesson], toolchain, options, SANITIZE, emit, runner, compared=False).run()
    return result


def run(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, options: Options,
        emit: Emit = quiet, runner: Runner = run_command) -> tuple[LessonResult, CommandResult | None]:
    """Build and run one lesson once and judge it on its own (no evidence); also returns the raw run."""
    options = options.model_copy(update={"sanitize": False, "repeat": 1})
    walk = Scheduler(manifest, [lesson], toolchain, options, RUN, emit, runner, compared=False)
    [result] = walk.run()
    turn = walk.turns.get(lesson.id)
    return result, (turn.runs[0] if turn is not None and turn.runs else None)


def verify_offline(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
                   emit: Emit = quiet, runner: Runner = run_command) -> list[LessonResult]:
    """No GPU: build for every listed architecture, check the build evidence, re-judge the recorded evidence."""
    return walk_offline(manifest, lessons, toolchain, options, VERIFY_OFFLINE, emit, runner)


def build_many(manifest: Manifest, jobs: list[tuple[Lesson, str]], toolchain: Toolchain, parallel: int,
               runner: Runner = run_command, emit: Emit = quiet) -> list[tuple[Lesson, str, BuildResult | CoursectlError]]:
    """Build (lesson, arch) pairs in parallel; on Ctrl-C stop every nvcc and keep no partial entry."""
    return scheduler.build_many(manifest, jobs, toolchain, parallel, runner, emit)
