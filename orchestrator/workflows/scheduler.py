"""What runs when: the builds, each lesson's turn on a GPU, and a workflow's stages in that turn.

A workflow (pipeline.py) is a tuple of stages, each a function of one
lesson's turn and its result so far that returns its result from then on.
`Scheduler` walks one on the GPUs: every build goes to a thread pool
(through build.SharedBuilds, so lessons with the same build share it); once
a lesson's builds are done it asks `GpuShare` for a GPU, and once it has
one its turn starts in a thread of its own, runs the stages in order on a `Turn`, and the result
of the last stage is settled (results.settle), once. The runs of a lesson
with claims across runs meet in a `Gathering` (gathering.py) on the way, so
that those claims are judged before any of them is stored or settled. Each turn's result is
a future, which the main thread joins in order. A turn that raises ends
that lesson as CRASH (or FAIL, for an error coursectl reports) and the
others stand; Ctrl-C stops every child and raises Interrupted carrying the
lessons that had finished, the others SKIPPED.

`walk_offline` does the same without a GPU: every build first
(`build_many`), then each lesson's stages, one lesson after the other, each
settled after its stages (the runs of a lesson with claims across runs
after the last of them, once those claims are judged).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from ..cuda.build import BuildResult, SharedBuilds, build_detail
from ..cuda.sanitizer_cache import Footprint
from ..cuda.toolchain import Toolchain, select_gpus
from ..errors import CoursectlError, Interrupted, describe_os_error
from ..files import relative
from ..judge.results import Emit, Event, LessonResult, Options, Status, quiet, settle, stopped
from ..manifest.model import Lesson, Manifest
from ..process import Runner, interrupts_held, kill_all, resume, run_command
from ..trace import span
from ..judge.across import gathered, judge_across_runs
from .gathering import gatherings
from .paused import Paused, WaitingStage
from .judged import Judged
from .sharing import Claim, GpuShare
from ..collector import freeze_more, long_lived
from .turn import OfflineTurn, Turn, Waited, expected_passes, passes_of
from .waiting import completed, first_done


INTERRUPTED = "interrupted: running programs were stopped; nothing was recorded"
NOT_FINISHED = "interrupted before it finished"
NOT_RUN = "not run: an earlier lesson failed, and --exitfirst stops at the first failure"

# How long a thread runs Python before one waiting for the interpreter gets it, while lessons run (Python's
# default: 0.005 s). The threads mostly wait for programs; each time several want the interpreter at once,
# they switch at every system call. 400 stand-in lessons on an H200 (bench/scheduler_cpu.py): 6.3-6.9 s
# of coursectl's CPU at 0.005 s, 5.9-6.4 s at 0.02. What may wait the longer is coursectl's own work (a
# program's end may be seen up to that much later), never a program: its kernels are timed by the program.
SWITCH_INTERVAL = 0.02

# LONG_LIVED: while lessons run, what exists as they start (the manifest, the toolchain, the modules) is kept
# out of the cycle collector's scans (collector.py). 400 stand-in lessons on a 2-core machine: 9.1-10.2 s of
# coursectl's CPU with it scanned, 7.6-7.7 s without (7.2-8.1 s with the collector off altogether).

# Threads that walk the rest of each lesson's stages once its passes are done (paused.py).
FINISHING = 2

Stage = Callable[[Turn, LessonResult], LessonResult]
OfflineStage = Callable[[OfflineTurn, LessonResult], LessonResult]


class Scheduler:
    """One workflow's stages walked for every lesson, each in its turn on a GPU (see the module).

    `compared` is what settle is told (whether the workflow compares with
    evidence); `notes` are those each lesson's result begins with, by lesson.
    After `run`, `turns` holds the turn of each lesson that had one.
    """

    def __init__(self, manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
                 stages: tuple[Stage, ...], emit: Emit = quiet, runner: Runner = run_command, *, compared: bool,
                 notes: dict[str, list[str]] | None = None):
        self.manifest, self.lessons, self.toolchain, self.options = manifest, lessons, toolchain, options
        self.stages, self.compared, self.notes = stages, compared, notes or {}
        self.shown, self.runner = emit, runner
        self.nvcc = toolchain.require_nvcc()
        gpus = select_gpus(toolchain, options.gpus)
        self.archs = [options.arch] if options.arch else sorted({g.arch for g in gpus})
        self.share = GpuShare(gpus, per_gpu=options.sanitizer_jobs, coming=[lesson.id for lesson in lessons],
                              start_gap=options.start_gap, on_choice=self._chosen)
        self.futures: dict[str, Future] = {lesson.id: Future() for lesson in lessons}
        self.builds: dict[str, dict[str, BuildResult]] = {lesson.id: {} for lesson in lessons}
        self.errors: dict[str, str] = {}
        self.pending = {lesson.id: len(builds_needed(manifest, lesson, self.archs, options)) for lesson in lessons}
        self.turns: dict[str, Turn] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()   # Ctrl-C: stop everything, show nothing more
        self.halted = threading.Event()     # --exitfirst after a failure: run nothing more
        self.threads: list[threading.Thread] = []
        # Where the walks paused for their passes go on (paused.py): a few threads, not one a lesson.
        self.finishing = ThreadPoolExecutor(max_workers=FINISHING, thread_name_prefix="coursectl-finish")
        self.paused = 0                               # walks paused, not yet finished
        self.unpaused = threading.Condition(self.lock)
        self.gatherings = gatherings(manifest, lessons, self.stopping)   # lessons with claims across runs

    @long_lived()   # see LONG_LIVED
    def run(self) -> list[LessonResult]:
        """Submit every lesson's builds, then join each lesson's result, in the order of the lessons."""
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs))
        shared = SharedBuilds(pool, self.nvcc, self.toolchain.nvcc_version, self.runner)
        results: dict[str, LessonResult] = {}
        interval = sys.getswitchinterval()
        sys.setswitchinterval(max(interval, SWITCH_INTERVAL))
        try:
            with interrupts_held():   # every worker thread the pool starts is one that a stop waits for
                for lesson in self.lessons:
                    self._submit(shared, lesson)
            for lesson in self.lessons:
                # first_done, not next(completed(...)): a generator left suspended in its wait would close
                # its pipe as it is collected, where a Ctrl-C that came meanwhile is lost (unraisable)
                first_done({self.futures[lesson.id]})
                results[lesson.id] = _joined(lesson.id, self.futures[lesson.id])
        except KeyboardInterrupt:
            raise self._interrupted(pool, results)
        finally:
            self._wind_down(pool)
            sys.setswitchinterval(interval)
        freeze_more()   # the results too last as long as the command that reports them
        return [results[lesson.id] for lesson in self.lessons]

    def _emit(self, event: Event) -> None:
        """Show an event, unless interrupted: once interrupted, stopped turns have nothing to show."""
        if not self.stopping.is_set():
            self.shown(event)

    def _chosen(self, line: str) -> None:
        """How many sanitizer passes run at once, and why: the run's own line (no lesson's)."""
        self._emit(Event(lesson="", stage="note", detail=line))

    def _submit(self, shared: SharedBuilds, lesson: Lesson) -> None:
        self._emit(Event(lesson=lesson.id, stage="building"))
        for arch, variant in builds_needed(self.manifest, lesson, self.archs, self.options):
            future = shared.submit(self.manifest, lesson, arch, variant)
            future.add_done_callback(functools.partial(self._built, lesson, f"{arch}/{variant}"))

    def _built(self, lesson: Lesson, key: str, future: Future) -> None:
        """One build is done; the lesson's last starts its turn, in a thread of its own."""
        try:
            build = future.result()
            self.builds[lesson.id][key] = build
            with self.lock:   # verify names the file an edit rebuilt the lesson for, once for its builds
                notes = self.notes.setdefault(lesson.id, [])
                notes += rebuilt_for(build, notes)
            self._emit(Event(lesson=lesson.id, stage="built", detail=build_detail(build), build=build))
        except CoursectlError as exc:
            self.errors.setdefault(lesson.id, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported as the lesson's failure
            self.errors.setdefault(lesson.id, f"build crashed: {exc!r}")
        with self.lock:
            self.pending[lesson.id] -= 1
            ready = self.pending[lesson.id] == 0 and not self.stopping.is_set()
        if ready:
            self._ask_for_a_gpu(lesson)

    def _ask_for_a_gpu(self, lesson: Lesson) -> None:
        """A lesson built asks for a GPU; its turn's thread starts once it has one (none waits meanwhile)."""
        footprints: list[Footprint] = []   # what its passes used when they last ran: how many run at once
        expected = expected_passes(self.manifest, self.options, lesson, footprints)   # the longest pass's goes first
        self.share.learn(footprints)
        waited = Waited("waiting for a GPU", lesson.id)

        def start(claim: Claim) -> None:
            waited.end()
            if self.stopping.is_set():
                claim.decline()
                if (gathering := self.gatherings.get(lesson.group or "")) is not None:
                    gathering.leave(lesson.id)   # a run that will never reach it: its other runs go on
                return
            thread = threading.Thread(target=self._turn_of, args=(lesson, claim, expected), daemon=True)
            with self.lock:
                self.threads.append(thread)
            thread.start()

        self.share.claim_later(lesson.id, max(expected.values(), default=0.0), start)

    def _turn_of(self, lesson: Lesson, claim: Claim, expected: dict[str, float]) -> None:
        """A lesson's turn, in a thread of its own once it has a GPU: walk the stages, set its future.

        The GPU goes back when its timed runs are done (Turn.release), at the
        latest when the turn ends. A walk paused for its passes (paused.py) goes on
        in `finishing` once they are done, and sets the future there.
        """
        future = self.futures[lesson.id]
        gathering = self.gatherings.get(lesson.group or "")
        paused = None
        try:
            with claim:
                if self.stopping.is_set() or not future.set_running_or_notify_cancel():
                    return
                try:
                    outcome = (stopped(lesson.id, Status.SKIPPED, NOT_RUN) if self.halted.is_set()
                               else self._take_turn(lesson, claim, expected))
                    if isinstance(outcome, Paused):
                        paused = outcome
                    else:
                        future.set_result(outcome)
                except BaseException as exc:  # noqa: BLE001 - becomes this lesson's result in the main thread
                    future.set_exception(exc)
                finally:
                    if paused is None:
                        self.share.withdraw(lesson_id=lesson.id)   # passes it queued and never ran leave the queue
        finally:
            if gathering is not None:   # a run that never reached the gathering: its other runs go on
                gathering.leave(lesson.id)
        if paused is not None:
            self._pause(lesson, paused)
            return
        self._done(lesson, future)

    def _done(self, lesson: Lesson, future: Future) -> None:
        result = _joined(lesson.id, future)
        if self.options.exitfirst and result.status.is_failure:
            self.halted.set()
        self._emit(Event(lesson=lesson.id, stage="done", detail=result.status.value, result=result))

    def _pause(self, lesson: Lesson, paused: Paused) -> None:
        """The rest of a paused walk, in `finishing` once its futures are done (here, if it is shut down)."""
        with self.lock:
            self.paused += 1

        def resume() -> None:
            try:
                self.finishing.submit(self._resume, lesson, paused)
            except RuntimeError:   # shut down: an interrupted run winds down
                self._resume(lesson, paused)

        paused.when_done(resume)

    def _resume(self, lesson: Lesson, paused: Paused) -> None:
        future, turn = self.futures[lesson.id], self.turns[lesson.id]
        again = None
        try:
            with span("turn", lesson.id, gpu=turn.gpu.index):
                stage = self.stages[paused.index]
                outcome = self._walk(turn, paused.index + 1, stage.finish(turn, paused.result, paused.pending))
            if isinstance(outcome, Paused):
                outcome.done, again = paused.done, outcome
            else:
                future.set_result(paused.done(outcome))
        except BaseException as exc:  # noqa: BLE001 - becomes this lesson's result in the main thread
            future.set_exception(exc)
        finally:
            if again is None:
                self.share.withdraw(lesson_id=lesson.id)
            with self.lock:
                self.paused -= 1
                self.unpaused.notify_all()
        if again is not None:
            self._pause(lesson, again)
            return
        self._done(lesson, future)

    def _take_turn(self, lesson: Lesson, claim: Claim, expected: dict[str, float]) -> LessonResult | Paused:
        """The lesson on its GPU: unsupported there, failed to build, or its stages walked (or paused, to go on
        once its passes are done)."""
        started = time.monotonic()
        gpu = claim.gpu
        arch = self.options.arch or gpu.arch
        if lesson.min_compute_capability and \
                _cc_tuple(gpu.compute_capability) < _cc_tuple(lesson.min_compute_capability):
            return stopped(lesson.id, Status.UNSUPPORTED, f"needs compute capability {lesson.min_compute_capability}; "
                                                          f"{gpu.name} has {gpu.compute_capability}", gpu.slug, arch)
        builds = self.builds[lesson.id]
        if lesson.id in self.errors:
            return settle(LessonResult(lesson=lesson.id, gpu=gpu.slug, arch=arch, reasons=[self.errors[lesson.id]],
                                       builds=list(builds.values())))
        with span("turn", lesson.id, gpu=gpu.index):
            turn = self.turns[lesson.id] = Turn(self.manifest, self.toolchain, self.options, lesson, builds,
                                                self._emit, self.runner, self.stopping, claim, expected)
            turn.gathering = self.gatherings.get(lesson.group or "")
            outcome = self._walk(turn)

        def done(result: LessonResult) -> LessonResult:
            result.builds = list(builds.values())
            result.seconds = time.monotonic() - started - turn.waited   # its own time, not its other runs'
            return result

        if isinstance(outcome, Paused):
            outcome.done = done
            return outcome
        return done(outcome)

    def _walk(self, turn: Turn, start: int = 0, result: LessonResult | None = None) -> LessonResult | Paused:
        """The stages in order from `start`, each handed the result of the one before; the last one's result
        settled. At a WaitingStage whose work is not all done the walk pauses (paused.py), unless the lesson
        is a run that meets its other runs at a gathering, which waits in the thread that walks it."""
        if result is None:
            result = LessonResult(lesson=turn.lesson.id, gpu=turn.gpu.slug, arch=turn.arch,
                                  notes=list(self.notes.get(turn.lesson.id, [])))
        for index in range(start, len(self.stages)):
            stage = self.stages[index]
            if isinstance(stage, WaitingStage) and turn.gathering is None:
                pending = stage.start(turn, result)
                if not all(future.done() for future in pending):
                    return Paused(index, result, pending)
                result = stage.finish(turn, result, pending)
            else:
                result = stage(turn, result)
        return settle(result, compared=self.compared)

    def _interrupted(self, pool: ThreadPoolExecutor, results: dict[str, LessonResult]) -> Interrupted:
        """Ctrl-C: stop every child; the lessons that had finished keep their results, the others SKIPPED."""
        self.stopping.set()
        self.share.close()
        finished = [lesson_id for lesson_id, future in self.futures.items() if future.done()]
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        results.update((lesson_id, _joined(lesson_id, self.futures[lesson_id])) for lesson_id in finished)
        return Interrupted(INTERRUPTED, [results.get(lesson.id) or stopped(lesson.id, Status.SKIPPED, NOT_FINISHED)
                                         for lesson in self.lessons])

    def _wind_down(self, pool: ThreadPoolExecutor) -> None:
        """However the run ended: no lesson waits for a GPU, no build is left, no turn is left writing."""
        self.share.close()
        pool.shutdown(wait=True, cancel_futures=True)
        with self.lock:
            begun = list(self.threads)
        for thread in begun:  # a turn that was stopped ends quickly; never leave one writing
            thread.join(timeout=30)
        with self.lock:   # nor a walk paused for its passes, which a stop also ends quickly
            self.unpaused.wait_for(lambda: self.paused == 0, timeout=30)
        self.finishing.shutdown(wait=True)
        resume()


def builds_needed(manifest: Manifest, lesson: Lesson, archs: list[str], options: Options) -> list[tuple[str, str]]:
    """(arch, variant) pairs one lesson needs: plain builds, and -lineinfo ones for its sanitizer passes."""
    plain = list(archs)
    if options.all_archs:
        plain += [a for a in manifest.architectures if a not in plain]
    needed = [(arch, "plain") for arch in plain]
    if options.sanitize and passes_of(manifest, options, lesson):
        needed += [(arch, "lineinfo") for arch in archs]
    return needed


def _cc_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


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


# -- without a GPU ---------------------------------------------------------------------------------
def walk_offline(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
                 stages: tuple[OfflineStage, ...], emit: Emit = quiet, runner: Runner = run_command) -> list[LessonResult]:
    """Build each lesson for every listed architecture (or options.arch), then walk its stages, lesson by lesson."""
    archs = [options.arch] if options.arch else list(manifest.architectures)
    try:
        built = build_many(manifest, [(lesson, arch) for lesson in lessons for arch in archs], toolchain,
                           options.jobs, runner, emit)
    except Interrupted as exc:
        raise Interrupted(str(exc), [stopped(lesson.id, Status.SKIPPED, NOT_FINISHED) for lesson in lessons])
    groups = gathered(manifest, lessons)
    across = {run_id for ids in groups.values() for run_id in ids}   # judged every time (judged.py)
    judged = Judged(manifest, toolchain, options)
    results: dict[str, LessonResult] = {}
    walked: set[str] = set()   # walked, not settled yet: the runs of a lesson in `groups` wait for the last
    for lesson in lessons:
        if options.exitfirst and any(r.status.is_failure for r in results.values() if r.lesson not in walked):
            results[lesson.id] = stopped(lesson.id, Status.SKIPPED, NOT_RUN)
        else:
            builds = [build for built_lesson, _, build in built if built_lesson is lesson]
            results[lesson.id] = _judged_offline(judged, OfflineTurn(manifest, toolchain, lesson), builds, stages,
                                                 emit, keep=lesson.id not in across)
            walked.add(lesson.id)
        ids = groups.get(lesson.group or "", [lesson.id])
        if not all(run_id in results for run_id in ids):
            continue   # a run of this lesson is still to be walked
        if lesson.group in groups and all(run_id in walked for run_id in ids):   # before any of them settles
            judge_across_runs(manifest, lesson.group, [results[run_id] for run_id in ids])
        for run_id in [run_id for run_id in ids if run_id in walked]:
            walked.discard(run_id)
            emit(Event(lesson=run_id, stage="done", detail=settle(results[run_id]).status.value,
                       result=results[run_id]))
    return [results[lesson.id] for lesson in lessons]


def _judged_offline(judged: Judged, turn: OfflineTurn, builds: list[BuildResult | CoursectlError],
                    stages: tuple[OfflineStage, ...], emit: Emit, *, keep: bool) -> LessonResult:
    """One lesson's result: as its last judging gave it where nothing it is judged from changed since
    (judged.Judged), else its stages walked, and the result kept for the next run where it came out clean."""
    done = [build for build in builds if not isinstance(build, CoursectlError)]
    if keep and len(done) == len(builds):
        started = time.monotonic()
        taken = judged.take(turn.lesson, done)
        if taken is not None:
            emit(Event(lesson=turn.lesson.id, stage="comparing"))
            taken.reused = True
            taken.seconds = sum(b.seconds for b in done if not b.cached) + time.monotonic() - started
            return taken
    result = _walk_offline_turn(turn, builds, stages, emit)
    if keep and len(done) == len(builds):
        read = [relative(path, turn.manifest.root) for path in turn.manifest.source_paths(turn.lesson)]
        read += [name for evidence in turn.recorded.loaded() for name in evidence.meta.sources]
        judged.keep(turn.lesson, done, result, read)
    return result


def _walk_offline_turn(turn: OfflineTurn, builds: list[BuildResult | CoursectlError],
                       stages: tuple[OfflineStage, ...], emit: Emit) -> LessonResult:
    """One lesson's stages, its builds done; an error coursectl reports in one ends the walk as a reason. Not
    settled: walk_offline settles it (a run of a lesson with claims across runs once all its runs are walked)."""
    result = LessonResult(lesson=turn.lesson.id)
    started = time.monotonic()
    for build in builds:
        if isinstance(build, CoursectlError):
            result.reasons.append(str(build))
        else:
            result.builds.append(build)
            result.notes += rebuilt_for(build, result.notes)
    emit(Event(lesson=turn.lesson.id, stage="comparing"))
    try:
        for stage in stages:
            result = stage(turn, result)
    except CoursectlError as exc:   # a file of this lesson that cannot be read: its fault, not the run's
        result.reasons.append(str(exc))
    # Its time: its builds' (cached ones take none) and its judging's.
    result.seconds = sum(b.seconds for b in result.builds if not b.cached) + time.monotonic() - started
    return result


def rebuilt_for(build: BuildResult, known: list[str]) -> list[str]:
    """What a build says changed since the lesson's last build or cached one (`... changed since the last
    build; rebuilt`) and is not among the lesson's notes (`known`) yet: verify and record name it once."""
    return [note for note in build.notes if note.endswith("; rebuilt") and note not in known]


def build_many(manifest: Manifest, jobs: list[tuple[Lesson, str]], toolchain: Toolchain, parallel: int,
               runner: Runner = run_command, emit: Emit = quiet) -> list[tuple[Lesson, str, BuildResult | CoursectlError]]:
    """Build (lesson, arch) pairs in parallel; on Ctrl-C stop every nvcc and keep no partial entry."""
    nvcc = toolchain.require_nvcc()
    for lesson_id in dict.fromkeys(lesson.id for lesson, _ in jobs):
        emit(Event(lesson=lesson_id, stage="building"))
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    shared = SharedBuilds(pool, nvcc, toolchain.nvcc_version, runner)
    done: dict[Future, BuildResult | CoursectlError] = {}
    try:
        with interrupts_held():   # see Scheduler.run
            futures = {shared.submit(manifest, lesson, arch): (lesson, arch) for lesson, arch in jobs}
        for future in completed(futures):
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
