"""The workflows (verify, record, sanitize, run, verify offline) and the threads that run them.

Each workflow is one short function whose inner `stages` lists, in order,
what one lesson goes through once its builds are ready and it has a GPU.
`on_gpus` does the scheduling for all of them: builds go to a thread pool,
each lesson claims a GPU as soon as its builds are ready, and `GpuShare`
keeps each GPU to one lesson's timed runs at a time; sanitizer passes run
once every lesson's timed runs are done (those of lessons still building
too), several at once, and never beside a timed run on any GPU.
Passes whose inputs did not change are taken from the sanitizer cache.
Every verdict comes from judging.py; nothing here decides a status itself.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from typing import Callable, Iterator

from ..cuda.build import BuildResult, SharedBuilds, build_detail
from ..judge.drift import describe_drift
from ..errors import CoursectlError, EvidenceError, Interrupted, TranscriptError, describe_os_error
from ..judge.evidence import recover_evidence
from ..judge.judging import compare_build_evidence, judge_evidence, judge_run, judge_runs, judge_source
from ..manifest.model import Lesson, Manifest
from ..render.course import stale_source_header
from ..process import CommandResult, interrupts_held, kill_all, resume, run_command
from ..judge.results import Emit, Event, LessonResult, Options, Status, quiet, settle, stopped
from .sharing import Claim, GpuShare
from ..cuda.toolchain import Toolchain, select_gpus
from ..trace import span
from .turn import Turn, expected_passes, passes_of


INTERRUPTED = "interrupted: running programs were stopped; nothing was recorded"
NOT_FINISHED = "interrupted before it finished"
NOT_RUN = "not run: an earlier lesson failed, and --exitfirst stops at the first failure"


# -- the workflows ------------------------------------------------------------------------------
def verify(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """Build, run, judge against this GPU's evidence, check the build evidence, sanitize."""
    def stages(turn: Turn) -> LessonResult:
        runs = turn.run_program()
        result, _ = judge_runs(manifest, turn.lesson, runs, turn.gpu, turn.arch, True, turn.build.resources,
                               turn.environment)
        compare_build_evidence(manifest, turn.lesson, turn.build, toolchain.nvcc_version, result)
        turn.sanitize(result)
        describe_drift(manifest, turn.lesson, toolchain, turn.gpu, turn.arch, result, turn.build)
        return settle(result)
    return on_gpus(manifest, lessons, toolchain, options, stages, emit, runner)


def record(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """Build (every listed architecture too), run, judge, sanitize, and store only if every gate held.

    Its sanitizer passes always run, and refresh the sanitizer cache. With options.dry_run nothing is
    stored, not even an interrupted record's sets put back: the result says what would have been written.
    """
    recovered = {} if options.dry_run else {lesson.id: recover_evidence(manifest.root, lesson.id)
                                            for lesson in lessons}

    def stages(turn: Turn) -> LessonResult:
        runs = turn.run_program()
        result, chosen = judge_runs(manifest, turn.lesson, runs, turn.gpu, turn.arch, False, turn.build.resources,
                                    turn.environment)
        result.notes += recovered.get(turn.lesson.id, [])
        files = turn.sanitize(result)
        describe_drift(manifest, turn.lesson, toolchain, turn.gpu, turn.arch, result, turn.build)
        return turn.store(settle(result, compared=False), runs[chosen], files)
    options = options.model_copy(update={"all_archs": True, "rerun_sanitizers": True})
    return on_gpus(manifest, lessons, toolchain, options, stages, emit, runner)


def sanitize(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, options: Options,
             emit: Emit = quiet, runner=run_command) -> LessonResult:
    """Only the compute-sanitizer passes (options.sanitize_tools, else the declared ones), run now and judged."""
    def stages(turn: Turn) -> LessonResult:
        result = LessonResult(lesson=lesson.id, gpu=turn.gpu.slug, arch=turn.arch)
        turn.sanitize(result)
        return settle(result, compared=False)
    toolchain.require_sanitizer()
    options = options.model_copy(update={"sanitize": True, "rerun_sanitizers": True})
    [result] = on_gpus(manifest, [lesson], toolchain, options, stages, emit, runner)
    return result


def run(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, options: Options,
        emit: Emit = quiet, runner=run_command) -> tuple[LessonResult, CommandResult | None]:
    """Build and run one lesson once and judge it on its own (no evidence); also returns the raw run."""
    ran: list[CommandResult] = []

    def stages(turn: Turn) -> LessonResult:
        ran.extend(turn.run_program())
        return judge_run(manifest, lesson, ran[0], turn.gpu.slug, turn.arch, compare=False,
                         resources=turn.build.resources, environment=turn.environment)
    options = options.model_copy(update={"sanitize": False, "repeat": 1})
    [result] = on_gpus(manifest, [lesson], toolchain, options, stages, emit, runner)
    return result, (ran[0] if ran else None)


def verify_offline(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
                   emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """No GPU: build for every listed architecture, check the build evidence, re-judge the recorded evidence."""
    archs = [options.arch] if options.arch else list(manifest.architectures)
    try:
        built = build_many(manifest, [(lesson, arch) for lesson in lessons for arch in archs], toolchain,
                           options.jobs, runner, emit)
    except Interrupted as exc:
        raise Interrupted(str(exc), [stopped(lesson.id, Status.SKIPPED, NOT_FINISHED) for lesson in lessons])
    results: list[LessonResult] = []
    for lesson in lessons:
        if options.exitfirst and any(r.status.is_failure for r in results):
            results.append(stopped(lesson.id, Status.SKIPPED, NOT_RUN))
            continue
        out = LessonResult(lesson=lesson.id)
        started = time.monotonic()
        for _, _, build in (item for item in built if item[0] is lesson):
            if isinstance(build, CoursectlError):
                out.reasons.append(str(build))
            else:
                out.builds.append(build)
        emit(Event(lesson=lesson.id, stage="comparing"))
        try:
            judge_source(manifest, lesson, out)
            try:
                stale = stale_source_header(manifest, lesson)
            except (EvidenceError, TranscriptError):
                stale = None   # evidence that cannot be read: judge_evidence says why, once
            except CoursectlError as exc:
                stale = str(exc)
            if stale and stale not in out.reasons:   # a source that cannot be read: judge_source said so
                out.reasons.append(stale)
            judge_evidence(manifest, lesson, out)
            for build in out.builds:
                compare_build_evidence(manifest, lesson, build, toolchain.nvcc_version, out)
        except CoursectlError as exc:   # a file of this lesson that cannot be read: its fault, not the run's
            out.reasons.append(str(exc))
        # Its time: its builds' (cached ones take none) and its judging's.
        out.seconds = sum(b.seconds for b in out.builds if not b.cached) + time.monotonic() - started
        results.append(settle(out))
        emit(Event(lesson=lesson.id, stage="done", detail=out.status.value, result=out))
    return results


def _cc_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


# -- scheduling ------------------------------------------------------------------------------------
def builds_needed(manifest: Manifest, lesson: Lesson, archs: list[str], options: Options) -> list[tuple[str, str]]:
    """(arch, variant) pairs one lesson needs: plain builds, and -lineinfo ones for its sanitizer passes."""
    plain = list(archs)
    if options.all_archs:
        plain += [a for a in manifest.architectures if a not in plain]
    needed = [(arch, "plain") for arch in plain]
    if options.sanitize and passes_of(manifest, options, lesson):
        needed += [(arch, "lineinfo") for arch in archs]
    return needed


def on_gpus(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
            stages: Callable[[Turn], LessonResult], emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """Build every lesson in parallel and give each a turn on a GPU as soon as it is built.

    Each lesson's turn runs in a thread of its own, which claims a GPU from
    `GpuShare` for its timed runs; its result is a future, joined in order.
    A turn that raises ends that lesson as CRASH (or FAIL, for an error coursectl reports) and the
    others stand. Ctrl-C stops every child and raises Interrupted carrying the
    lessons that had finished, the others SKIPPED.
    """
    nvcc = toolchain.require_nvcc()
    gpus = select_gpus(toolchain, options.gpus)
    archs = [options.arch] if options.arch else sorted({g.arch for g in gpus})
    share = GpuShare(gpus, per_gpu=options.sanitizer_jobs, coming=[lesson.id for lesson in lessons],
                     start_gap=options.start_gap)
    turns: dict[str, Future] = {lesson.id: Future() for lesson in lessons}
    builds: dict[str, dict[str, BuildResult]] = {lesson.id: {} for lesson in lessons}
    errors: dict[str, str] = {}
    pending = {lesson.id: len(builds_needed(manifest, lesson, archs, options)) for lesson in lessons}
    lock = threading.Lock()
    stopping = threading.Event()   # Ctrl-C: stop everything, show nothing more
    halted = threading.Event()     # --exitfirst after a failure: run nothing more
    threads: list[threading.Thread] = []
    shown = emit

    def emit(event: Event) -> None:  # once interrupted, stopped turns have nothing to show
        if not stopping.is_set():
            shown(event)

    def built(lesson: Lesson, key: str, future: Future) -> None:
        try:
            build = future.result()
            builds[lesson.id][key] = build
            emit(Event(lesson=lesson.id, stage="built", detail=build_detail(build), build=build))
        except CoursectlError as exc:
            errors.setdefault(lesson.id, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported as the lesson's failure
            errors.setdefault(lesson.id, f"build crashed: {exc!r}")
        with lock:
            pending[lesson.id] -= 1
            if pending[lesson.id] == 0 and not stopping.is_set():
                thread = threading.Thread(target=turn_of, args=(lesson,), daemon=True)
                threads.append(thread)
                thread.start()

    def take_turn(lesson: Lesson, claim: Claim, expected: dict[str, float]) -> LessonResult:
        started = time.monotonic()
        gpu = claim.gpu
        arch = options.arch or gpu.arch
        if lesson.min_compute_capability and \
                _cc_tuple(gpu.compute_capability) < _cc_tuple(lesson.min_compute_capability):
            return stopped(lesson.id, Status.UNSUPPORTED, f"needs compute capability {lesson.min_compute_capability}; "
                                                          f"{gpu.name} has {gpu.compute_capability}", gpu.slug, arch)
        if lesson.id in errors:
            return settle(LessonResult(lesson=lesson.id, gpu=gpu.slug, arch=arch, reasons=[errors[lesson.id]],
                                       builds=list(builds[lesson.id].values())))
        with span("turn", lesson.id, gpu=gpu.index):
            result = stages(Turn(manifest, toolchain, options, lesson, builds[lesson.id], emit, runner, stopping,
                                 claim, expected))
        result.builds = list(builds[lesson.id].values())
        result.seconds = time.monotonic() - started
        return result

    def turn_of(lesson: Lesson) -> None:
        """A lesson's turn, in a thread of its own: claim a GPU, run its stages, set its future.

        The GPU goes back when its timed runs are done (Turn.release), at the
        latest when the turn ends.
        """
        future = turns[lesson.id]
        expected = expected_passes(manifest, options, lesson)   # the longest pass's lesson goes first
        with span("waiting for a GPU", lesson.id):
            claim = share.claim(lesson.id, max(expected.values(), default=0.0))
        if claim is None:
            return
        with claim:
            if stopping.is_set() or not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(stopped(lesson.id, Status.SKIPPED, NOT_RUN) if halted.is_set()
                                  else take_turn(lesson, claim, expected))
            except BaseException as exc:  # noqa: BLE001 - becomes this lesson's result in the main thread
                future.set_exception(exc)
            finally:
                share.withdraw(lesson_id=lesson.id)   # passes it queued and never ran leave the queue
        result = _joined(lesson.id, future)
        if options.exitfirst and result.status.is_failure:
            halted.set()
        emit(Event(lesson=lesson.id, stage="done", detail=result.status.value, result=result))

    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    shared = SharedBuilds(pool, nvcc, toolchain.nvcc_version, runner)
    results: dict[str, LessonResult] = {}
    try:
        with interrupts_held():   # every worker thread the pool starts is one that a stop waits for
            for lesson in lessons:
                emit(Event(lesson=lesson.id, stage="building"))
                for arch, variant in builds_needed(manifest, lesson, archs, options):
                    future = shared.submit(manifest, lesson, arch, variant)
                    future.add_done_callback(lambda f, lesson=lesson, key=f"{arch}/{variant}": built(lesson, key, f))
        for lesson in lessons:
            next(_completed([turns[lesson.id]]))
            results[lesson.id] = _joined(lesson.id, turns[lesson.id])
    except KeyboardInterrupt:
        stopping.set()
        share.close()
        finished = [lesson_id for lesson_id, future in turns.items() if future.done()]
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        results.update((lesson_id, _joined(lesson_id, turns[lesson_id])) for lesson_id in finished)
        raise Interrupted(INTERRUPTED, [results.get(lesson.id) or stopped(lesson.id, Status.SKIPPED, NOT_FINISHED)
                                        for lesson in lessons])
    finally:
        share.close()
        pool.shutdown(wait=True, cancel_futures=True)
        with lock:
            begun = list(threads)
        for thread in begun:  # a turn that was stopped ends quickly; never leave one writing
            thread.join(timeout=30)
        resume()
    return [results[lesson.id] for lesson in lessons]


def _completed(futures) -> Iterator[Future]:
    """as_completed, waking the main thread every 0.1 s.

    The kernel may hand Ctrl-C or SIGTERM to any thread, and Python runs the
    handler only once the main thread runs again: a wait without end would
    keep it from stopping the children until a lesson or a build ended.
    """
    pending = set(futures)
    while pending:
        done, pending = wait_for_futures(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        yield from done


def _joined(lesson_id: str, future: Future) -> LessonResult:
    """A finished turn's result; an exception in it becomes that lesson's result."""
    try:
        return future.result()
    except CoursectlError as exc:
        return settle(LessonResult(lesson=lesson_id, reasons=[str(exc)]), compared=False)
    except OSError as exc:
        return stopped(lesson_id, Status.CRASH, describe_os_error(exc))
    except Exception as exc:  # noqa: BLE001 - a bug in coursectl ends one lesson, not the run
        return stopped(lesson_id, Status.CRASH, f"coursectl failed on this lesson: {exc!r}")


def build_many(manifest: Manifest, jobs: list[tuple[Lesson, str]], toolchain: Toolchain, parallel: int,
               runner=run_command, emit: Emit = quiet) -> list[tuple[Lesson, str, BuildResult | CoursectlError]]:
    """Build (lesson, arch) pairs in parallel; on Ctrl-C stop every nvcc and keep no partial entry."""
    nvcc = toolchain.require_nvcc()
    for lesson_id in dict.fromkeys(lesson.id for lesson, _ in jobs):
        emit(Event(lesson=lesson_id, stage="building"))
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    shared = SharedBuilds(pool, nvcc, toolchain.nvcc_version, runner)
    done: dict[Future, BuildResult | CoursectlError] = {}
    try:
        with interrupts_held():   # see on_gpus
            futures = {shared.submit(manifest, lesson, arch): (lesson, arch) for lesson, arch in jobs}
        for future in _completed(futures):
            lesson, _ = futures[future]
            try:
                done[future] = future.result()
                emit(Event(lesson=lesson.id, stage="built", build=done[future], detail=build_detail(done[future])))
            except CoursectlError as exc:
                done[future] = exc
                emit(Event(lesson=lesson.id, stage="failed", detail=str(exc).splitlines()[0]))
        out = [(lesson, arch, done[future]) for future, (lesson, arch) in futures.items()]
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        raise Interrupted("interrupted: builds were stopped; no cache entry is half-written")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        resume()
    return out
