"""The workflows (verify, record, sanitize, run, verify offline) and the threads that run them.

Each workflow is one short function whose inner `stages` lists, in order,
what one lesson goes through once its builds are ready and its GPU is held.
`on_gpus` does the scheduling for all of them: builds go to a thread pool,
each lesson joins the GPU queue as soon as its builds are ready, and one
worker per GPU takes lessons one at a time, so no two runs ever share a GPU.
Every verdict comes from judging.py; nothing here decides a status itself.
"""

from __future__ import annotations

import datetime as dt
import queue
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from pathlib import Path
from typing import Callable, Iterator

from . import __version__
from .build import BuildResult, SharedBuilds
from .errors import CoursectlError, EvidenceError, Interrupted, describe_os_error
from .evidence import (EvidenceMeta, lesson_digest, load_evidence, recover_evidence, source_changes,
                       write_build_evidence, write_evidence)
from .judging import (build_evidence_of, compare_build_evidence, compare_with_previous, describe_environment,
                      judge_evidence, judge_run, judge_runs, judge_sanitizer_run, judge_source, sources_now)
from .locks import gpu_lock
from .manifest import Lesson, Manifest, SanitizerPass
from .process import CommandResult, kill_all, resume, run_command
from .results import Emit, Event, LessonResult, Options, PassResult, RunEnvironment, Status, quiet, settle, stopped
from .sanitizer import Tool, sanitizer_command
from .toolchain import Gpu, Toolchain, gpu_state, select_gpus

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
        return settle(result)
    return on_gpus(manifest, lessons, toolchain, options, stages, emit, runner)


def record(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """Build (every listed architecture too), run, judge, sanitize, and store only if every gate held."""
    recovered = {lesson.id: recover_evidence(manifest.root, lesson.id) for lesson in lessons}

    def stages(turn: Turn) -> LessonResult:
        runs = turn.run_program()
        result, chosen = judge_runs(manifest, turn.lesson, runs, turn.gpu, turn.arch, False, turn.build.resources,
                                    turn.environment)
        result.notes += recovered[turn.lesson.id]
        files = turn.sanitize(result)
        return turn.store(settle(result, compared=False), runs[chosen], files)
    options = options.model_copy(update={"all_archs": True})
    return on_gpus(manifest, lessons, toolchain, options, stages, emit, runner)


def sanitize(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, options: Options,
             emit: Emit = quiet, runner=run_command) -> LessonResult:
    """Only the compute-sanitizer passes (options.sanitize_tools, else the declared ones), judged."""
    def stages(turn: Turn) -> LessonResult:
        result = LessonResult(lesson=lesson.id, gpu=turn.gpu.slug, arch=turn.arch)
        turn.sanitize(result)
        return settle(result, compared=False)
    toolchain.require_sanitizer()
    options = options.model_copy(update={"sanitize": True})
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
        for _, _, build in (item for item in built if item[0] is lesson):
            if isinstance(build, CoursectlError):
                out.reasons.append(str(build))
            else:
                out.builds.append(build)
        emit(Event(lesson=lesson.id, stage="comparing"))
        judge_source(manifest, lesson, out)
        judge_evidence(manifest, lesson, out)
        for build in out.builds:
            compare_build_evidence(manifest, lesson, build, toolchain.nvcc_version, out)
        results.append(settle(out))
        emit(Event(lesson=lesson.id, stage="done", detail=out.status.value, result=out))
    return results


# -- one lesson's turn on its GPU -------------------------------------------------------------------
class Turn:
    """One lesson on one GPU, its builds ready and the GPU held: what its stages run."""

    def __init__(self, manifest: Manifest, toolchain: Toolchain, options: Options, lesson: Lesson, gpu: Gpu,
                 builds: dict[str, BuildResult], emit: Emit, runner, stopping: threading.Event):
        self.manifest, self.toolchain, self.options = manifest, toolchain, options
        self.lesson, self.gpu, self.builds = lesson, gpu, builds
        self.emit, self.runner, self.stopping = emit, runner, stopping
        self.arch = options.arch or gpu.arch
        self.env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        self.environment = RunEnvironment()

    @property
    def build(self) -> BuildResult:
        return self.builds[f"{self.arch}/plain"]

    @property
    def folder(self) -> Path:
        """Where the lesson runs: its source's folder, so relative `args` mean what the page's run command means."""
        return self.manifest.source_path(self.lesson).parent

    def _event(self, stage: str, detail: str = "") -> None:
        self.emit(Event(lesson=self.lesson.id, stage=stage, detail=detail))

    def run_program(self) -> list[CommandResult]:
        """The timed runs (options.repeat of them), with the GPU's state before and after."""
        runs: list[CommandResult] = []
        before = _state_of(self.gpu)
        repeat = max(1, self.options.repeat)
        for index in range(repeat):
            self._event("running", f"GPU {self.gpu.index}" + (f", run {index + 1}/{repeat}" if repeat > 1 else ""))
            runs.append(self.runner([str(self.build.binary), *self.lesson.args],
                                    timeout=self.manifest.timeout(self.lesson), env=self.env,
                                    cwd=self.folder))
            if runs[-1].timed_out or runs[-1].signal:
                break
        self.environment = describe_environment(before, _state_of(self.gpu))
        self._event("comparing")
        return runs

    def passes(self) -> dict[str, SanitizerPass]:
        declared = self.manifest.sanitizers(self.lesson)
        if self.options.sanitize_tools is not None:
            return {tool: declared.get(tool) or SanitizerPass() for tool in self.options.sanitize_tools}
        return declared

    def sanitize(self, result: LessonResult) -> dict[str, bytes]:
        """Run each sanitizer pass on the -lineinfo build; its problems become the lesson's reasons.

        Returns the logs and XML reports, named as record stores them.
        """
        build = self.builds.get(f"{self.arch}/lineinfo")
        passes = self.passes()
        if not self.options.sanitize:
            result.sanitizers += [PassResult(tool=tool, not_run="--no-sanitize") for tool in passes]
            return {}
        if not passes or build is None:
            return {}
        sanitizer = self.toolchain.require_sanitizer()
        files: dict[str, bytes] = {}
        for tool, spec in passes.items():
            self._event("sanitizing", tool)
            timeout = spec.timeout or self.manifest.timeout(self.lesson) * 10
            with tempfile.TemporaryDirectory(prefix="coursectl-") as tmp:
                log_path, xml_path = Path(tmp) / f"{tool}.log", Path(tmp) / f"{tool}.xml"
                command = sanitizer_command(sanitizer, Tool(tool),
                                            [str(build.binary), *self.lesson.args, *spec.program_args],
                                            log_path, xml_path, extra=spec.args)
                ran = self.runner(command, timeout=timeout, env=self.env, cwd=self.folder)
                log = log_path.read_bytes() if log_path.exists() else b""
                xml = xml_path.read_bytes() if xml_path.exists() and xml_path.stat().st_size else None
            outcome = judge_sanitizer_run(self.manifest, self.lesson, tool, spec, ran, log, xml,
                                          self.toolchain.sanitizer_version, timeout)
            result.sanitizers.append(outcome)
            result.reasons += outcome.problems
            files[f"{tool}.log"] = log
            if xml:
                files[f"{tool}.xml"] = xml
        return files

    def store(self, result: LessonResult, command: CommandResult, files: dict[str, bytes]) -> LessonResult:
        """Write the evidence and the build evidence of a lesson that held every gate; say what moved."""
        if result.status.is_failure or self.stopping.is_set():
            result.reasons.insert(0, "not recorded: the previous evidence is untouched")
            return settle(result, compared=False)
        manifest, lesson, gpu, toolchain = self.manifest, self.lesson, self.gpu, self.toolchain
        compare_with_previous(manifest, lesson, result, gpu.slug)
        meta = EvidenceMeta(
            lesson=lesson.id, date=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            gpu_name=gpu.name, gpu_slug=gpu.slug, compute_capability=gpu.compute_capability,
            driver_version=toolchain.driver_version, cuda_version=toolchain.cuda_version,
            nvcc_version=toolchain.nvcc_version, arch=self.arch, flags=manifest.flags(lesson),
            source_sha256=lesson_digest(manifest.source_path(lesson)), transcript_sha256="",
            wall_seconds=round(command.seconds, 3), exit_status=command.returncode or 0,
            coursectl_version=__version__, sanitizer_version=toolchain.sanitizer_version,
            peak_gbps=gpu.peak_gbps, peak_fp32_gflops=gpu.peak_fp32_gflops, sm_count=gpu.sm_count,
            max_sm_clock_mhz=gpu.max_sm_clock_mhz, environment=result.environment.model_dump(exclude_none=True),
            repeat={"runs": result.runs, "spread": result.spread} if result.runs > 1 else {},
            sources={name: digest for name, digest in sources_now(manifest, lesson, [self.build]).items()
                     if digest is not None})
        files, meta.stale_passes = self._kept_reports(result, files)
        write_evidence(manifest.root, meta, result.transcript or "", files)
        for key, built in self.builds.items():
            if key.endswith("/plain"):
                write_build_evidence(manifest.root, build_evidence_of(manifest, lesson, built, toolchain.nvcc_version))
        result.recorded = True
        result.evidence = gpu.slug
        return settle(result, compared=False)


    def _kept_reports(self, result: LessonResult, files: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
        """The new files, plus the recorded reports of declared passes that did not run this time.

        record never drops evidence it did not replace. A kept report is
        stale when the lesson's build has changed since it was recorded
        (source, flags, nvcc or architecture); the page and verify say so.
        """
        ran = {p.tool for p in result.sanitizers if not p.not_run}
        missing = [tool for tool in self.manifest.sanitizers(self.lesson) if tool not in ran]
        try:
            previous = load_evidence(self.manifest.root, self.lesson.id, self.gpu.slug) if missing else None
        except EvidenceError:
            previous = None   # compare_with_previous has said why; there is nothing to keep
        if previous is None:
            return files, []
        old = previous.meta
        same_build = (old.source_sha256, old.flags, old.nvcc_version, old.arch) == (
            lesson_digest(self.manifest.source_path(self.lesson)), self.manifest.flags(self.lesson),
            self.toolchain.nvcc_version, self.arch) and not source_changes(
            old.sources, sources_now(self.manifest, self.lesson, [self.build], old.sources))
        kept, stale = dict(files), []
        for tool in missing:
            names = [name for name in (f"{tool}.log", f"{tool}.xml") if name in old.files]
            if not names:
                continue
            kept.update((name, previous.read_bytes(name)) for name in names)
            if not same_build or tool in old.stale_passes:
                stale.append(tool)
                result.notes.append(f"{tool}: kept the report recorded {old.date[:10]}, but the build changed "
                                    f"since: it is stale until record runs {tool} again")
            else:
                result.notes.append(f"{tool}: not run; kept the report recorded {old.date[:10]} (same build)")
        return kept, sorted(stale)


def _state_of(gpu: Gpu):
    try:
        return gpu_state(gpu)
    except Exception:  # noqa: BLE001 - the environment is a remark, never a failure
        return None


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
    if options.sanitize and (options.sanitize_tools or manifest.sanitizers(lesson)):
        needed += [(arch, "lineinfo") for arch in archs]
    return needed


def on_gpus(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
            stages: Callable[[Turn], LessonResult], emit: Emit = quiet, runner=run_command) -> list[LessonResult]:
    """Build every lesson in parallel and give each a turn on a GPU as soon as it is built.

    Each lesson's turn is a future, joined in order. A turn that raises ends
    that lesson as CRASH (or FAIL, for an error coursectl reports) and the
    others stand. Ctrl-C stops every child and raises Interrupted carrying the
    lessons that had finished, the others SKIPPED.
    """
    nvcc = toolchain.require_nvcc()
    gpus = select_gpus(toolchain, options.gpus)
    archs = [options.arch] if options.arch else sorted({g.arch for g in gpus})
    ready: queue.Queue = queue.Queue()
    turns: dict[str, Future] = {lesson.id: Future() for lesson in lessons}
    builds: dict[str, dict[str, BuildResult]] = {lesson.id: {} for lesson in lessons}
    errors: dict[str, str] = {}
    pending = {lesson.id: len(builds_needed(manifest, lesson, archs, options)) for lesson in lessons}
    lock = threading.Lock()
    stopping = threading.Event()   # Ctrl-C: stop everything, show nothing more
    halted = threading.Event()     # --exitfirst after a failure: run nothing more
    shown = emit

    def emit(event: Event) -> None:  # once interrupted, stopped turns have nothing to show
        if not stopping.is_set():
            shown(event)

    def built(lesson: Lesson, key: str, future: Future) -> None:
        try:
            build = future.result()
            builds[lesson.id][key] = build
            emit(Event(lesson=lesson.id, stage="built", detail="cached" if build.cached else f"{build.seconds:.1f} s",
                       build=build))
        except CoursectlError as exc:
            errors.setdefault(lesson.id, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported as the lesson's failure
            errors.setdefault(lesson.id, f"build crashed: {exc!r}")
        with lock:
            pending[lesson.id] -= 1
            if pending[lesson.id] == 0:
                ready.put(lesson)

    def take_turn(lesson: Lesson, gpu: Gpu) -> LessonResult:
        started = time.monotonic()
        arch = options.arch or gpu.arch
        if lesson.min_compute_capability and \
                _cc_tuple(gpu.compute_capability) < _cc_tuple(lesson.min_compute_capability):
            return stopped(lesson.id, Status.UNSUPPORTED, f"needs compute capability {lesson.min_compute_capability}; "
                                                          f"{gpu.name} has {gpu.compute_capability}", gpu.slug, arch)
        if lesson.id in errors:
            return settle(LessonResult(lesson=lesson.id, gpu=gpu.slug, arch=arch, reasons=[errors[lesson.id]],
                                       builds=list(builds[lesson.id].values())))
        turn = Turn(manifest, toolchain, options, lesson, gpu, builds[lesson.id], emit, runner, stopping)
        with gpu_lock(gpu.uuid, lambda msg: emit(Event(lesson=lesson.id, stage="waiting", detail=msg))):
            result = stages(turn)
        result.builds = list(builds[lesson.id].values())
        result.seconds = time.monotonic() - started
        return result

    def gpu_worker(gpu: Gpu) -> None:
        while (lesson := ready.get()) is not None:
            future = turns[lesson.id]
            if stopping.is_set() or not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(stopped(lesson.id, Status.SKIPPED, NOT_RUN) if halted.is_set()
                                  else take_turn(lesson, gpu))
            except BaseException as exc:  # noqa: BLE001 - becomes this lesson's result in the main thread
                future.set_exception(exc)
            result = _joined(lesson.id, future)
            if options.exitfirst and result.status.is_failure:
                halted.set()
            emit(Event(lesson=lesson.id, stage="done", detail=result.status.value, result=result))

    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    shared = SharedBuilds(pool, nvcc, toolchain.nvcc_version, runner)
    workers = [threading.Thread(target=gpu_worker, args=(gpu,), daemon=True) for gpu in gpus]
    results: dict[str, LessonResult] = {}
    try:
        for worker in workers:
            worker.start()
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
        finished = [lesson_id for lesson_id, future in turns.items() if future.done()]
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        results.update((lesson_id, _joined(lesson_id, turns[lesson_id])) for lesson_id in finished)
        raise Interrupted(INTERRUPTED, [results.get(lesson.id) or stopped(lesson.id, Status.SKIPPED, NOT_FINISHED)
                                        for lesson in lessons])
    finally:
        for _ in workers:
            ready.put(None)
        for worker in workers:  # a turn that was stopped ends quickly; never leave one writing
            worker.join(timeout=30)
        pool.shutdown(wait=True, cancel_futures=True)
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
        futures = {shared.submit(manifest, lesson, arch): (lesson, arch) for lesson, arch in jobs}
        for future in _completed(futures):
            lesson, _ = futures[future]
            try:
                done[future] = future.result()
                emit(Event(lesson=lesson.id, stage="built", build=done[future],
                           detail="cached" if done[future].cached else f"{done[future].seconds:.1f} s"))
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
