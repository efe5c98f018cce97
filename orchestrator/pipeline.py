"""The workflows (verify, record, sanitize, run, verify offline) and the threads that run them.

Each workflow is one short function whose inner `stages` lists, in order,
what one lesson goes through once its builds are ready and it has a GPU.
`on_gpus` does the scheduling for all of them: builds go to a thread pool,
each lesson claims a GPU as soon as its builds are ready, and `GpuShare`
keeps each GPU to one lesson's timed runs at a time; sanitizer passes run
after them, several at once, but never beside a timed run on their GPU.
Passes whose inputs did not change are taken from the sanitizer cache.
Every verdict comes from judging.py; nothing here decides a status itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from pathlib import Path
from typing import Callable, Iterator

from . import __version__
from .build import BuildResult, SharedBuilds, cache_root
from .drift import describe_drift
from .errors import CoursectlError, EvidenceError, Interrupted, describe_os_error
from .evidence import (EvidenceMeta, build_evidence_path, evidence_dir, lesson_digest, load_evidence,
                       recover_evidence, source_changes, write_build_evidence, write_evidence)
from .judging import (build_evidence_of, compare_build_evidence, compare_with_previous, describe_environment,
                      judge_evidence, judge_run, judge_runs, judge_sanitizer_run, judge_source, sources_now)
from .locks import gpu_lock
from .manifest import Lesson, Manifest, SanitizerPass
from .process import CommandResult, kill_all, resume, run_command
from .results import Emit, Event, LessonResult, Options, PassResult, RunEnvironment, Status, quiet, settle, stopped
from .sanitizer import Tool, sanitizer_command
from .sanitizer_cache import is_cacheable, load_pass, pass_key, store_pass
from .toolchain import Gpu, Toolchain, free_memory_mib, gpu_state, select_gpus
from .words import plural

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
    """One lesson on one GPU, its builds ready and the GPU claimed: what its stages run.

    The claim lasts until its timed runs are done (or until its sanitizer
    passes start, or the turn ends, whichever comes first).
    """

    def __init__(self, manifest: Manifest, toolchain: Toolchain, options: Options, lesson: Lesson,
                 builds: dict[str, BuildResult], emit: Emit, runner, stopping: threading.Event, claim: Claim):
        self.manifest, self.toolchain, self.options = manifest, toolchain, options
        self.lesson, self.gpu, self.builds = lesson, claim.gpu, builds
        self.emit, self.runner, self.stopping = emit, runner, stopping
        self.claim, self.share = claim, claim.share
        self.arch = options.arch or self.gpu.arch
        self.env = {"CUDA_VISIBLE_DEVICES": self.gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
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

    def release(self) -> None:
        """Let the next lesson have this GPU for its timed runs."""
        self.claim.release()

    def run_program(self) -> list[CommandResult]:
        """The timed runs (options.repeat of them), with the GPU's state before and after, the GPU to themselves."""
        runs: list[CommandResult] = []
        with self.share.timed(self.gpu, lambda message: self._event("waiting", message)):
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
        self.release()
        self._event("comparing")
        return runs

    def passes(self) -> dict[str, SanitizerPass]:
        declared = self.manifest.sanitizers(self.lesson)
        if self.options.sanitize_tools is not None:
            return {tool: declared.get(tool) or SanitizerPass() for tool in self.options.sanitize_tools}
        return declared

    def sanitize(self, result: LessonResult) -> dict[str, bytes]:
        """Each sanitizer pass on the -lineinfo build, taken from the cache or run, all at once; judged.

        Their problems become the lesson's reasons. Returns the logs and XML
        reports, named as record stores them.
        """
        self.release()
        build = self.builds.get(f"{self.arch}/lineinfo")
        passes = self.passes()
        if not self.options.sanitize:
            result.sanitizers += [PassResult(tool=tool, not_run="--no-sanitize") for tool in passes]
            return {}
        if not passes or build is None:
            return {}
        sanitizer = self.toolchain.require_sanitizer()
        with ThreadPoolExecutor(max_workers=len(passes)) as pool:
            done = list(pool.map(lambda item: self._sanitize_one(sanitizer, build, *item), passes.items()))
        files: dict[str, bytes] = {}
        for outcome, log, xml, note in done:
            result.sanitizers.append(outcome)
            result.reasons += outcome.problems
            if note:
                result.notes.append(note)
            files[f"{outcome.tool}.log"] = log
            if xml:
                files[f"{outcome.tool}.xml"] = xml
        return files

    def _sanitize_one(self, sanitizer: str, build: BuildResult, tool: str,
                      spec: SanitizerPass) -> tuple[PassResult, bytes, bytes | None, str]:
        """One pass: its stored result where its key is unchanged (unless options.rerun_sanitizers), else run now.

        Judged either way by judge_sanitizer_run, so a changed expectation is
        judged without running anything. Returns the outcome, the log, the XML
        and a note (why the result could not be stored) or "".
        """
        timeout = spec.timeout or self.manifest.timeout(self.lesson) * 10
        program_args = [*self.lesson.args, *spec.program_args]
        key = pass_key(build.binary, tool, spec.args, program_args, self.toolchain.sanitizer_version,
                       self.toolchain.driver_version, self.gpu.name, self.env)
        root = cache_root(self.manifest)
        stored = None if self.options.rerun_sanitizers else load_pass(root, self.lesson.id, key)
        note = ""
        if stored is not None:
            self._event("sanitizing", f"{tool}, cached")
            ran, log, xml = stored.command_result(), stored.log_bytes, stored.xml_bytes
        else:
            with self.share.sanitizing(self.gpu, lambda message: self._event("waiting", message)):
                self._event("sanitizing", tool)
                with tempfile.TemporaryDirectory(prefix="coursectl-") as tmp:
                    log_path, xml_path = Path(tmp) / f"{tool}.log", Path(tmp) / f"{tool}.xml"
                    command = sanitizer_command(sanitizer, Tool(tool), [str(build.binary), *program_args],
                                                log_path, xml_path, extra=spec.args)
                    ran = self.runner(command, timeout=timeout, env=self.env, cwd=self.folder)
                    log = log_path.read_bytes() if log_path.exists() else b""
                    xml = xml_path.read_bytes() if xml_path.exists() and xml_path.stat().st_size else None
            if is_cacheable(ran, log) and not self.stopping.is_set():
                try:
                    store_pass(root, self.lesson.id, key, ran, log, xml)
                except OSError as exc:   # only the next verify is slower
                    note = f"{tool}: not stored in the sanitizer cache: {describe_os_error(exc)}"
        outcome = judge_sanitizer_run(self.manifest, self.lesson, tool, spec, ran, log, xml,
                                      self.toolchain.sanitizer_version, timeout)
        outcome.cached = stored is not None
        return outcome, log, xml, note

    def store(self, result: LessonResult, command: CommandResult, files: dict[str, bytes]) -> LessonResult:
        """Write the evidence and the build evidence of a lesson that held every gate; say what moved.

        A dry run writes nothing and says in a note what it would have written.
        """
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
        archs = manifest.architectures   # builds finish in any order; say them in the manifest's
        built = sorted((build_evidence_of(manifest, lesson, build, toolchain.nvcc_version)
                        for key, build in self.builds.items() if key.endswith("/plain")),
                       key=lambda b: archs.index(b.arch) if b.arch in archs else len(archs))
        if self.options.dry_run:
            result.notes.append(would_write(manifest.root, meta, files, built))
            return settle(result, compared=False)
        write_evidence(manifest.root, meta, result.transcript or "", files)
        for build in built:
            write_build_evidence(manifest.root, build)
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


def would_write(root: Path, meta: EvidenceMeta, files: dict[str, bytes], built: list) -> str:
    """What a dry run of record leaves unwritten, as one note."""
    folder = evidence_dir(root, meta.lesson, meta.gpu_slug).relative_to(root).as_posix()
    names = ["transcript.txt", "meta.json", *files]
    builds = ", ".join(build_evidence_path(root, meta.lesson, b.arch).relative_to(root).as_posix() for b in built)
    return (f"dry run: would write {folder}/ ({', '.join(names)})" + (f" and {builds}" if builds else "")
            + "; nothing was written")


def _state_of(gpu: Gpu):
    try:
        return gpu_state(gpu)
    except Exception:  # noqa: BLE001 - the environment is a remark, never a failure
        return None


def _cc_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


# -- who has each GPU --------------------------------------------------------------------------------
# What one compute-sanitizer pass is taken to need of the GPU's memory, to
# bound how many run at once: the tools keep shadow state beside the
# program's own allocations, and the lessons allocate well under 1 GiB.
PASS_MEMORY_MIB = 4096


def pass_slots(free_mib: int | None, jobs: int) -> int:
    """How many passes may run at once on a GPU with `free_mib` free (None: unknown), at most `jobs`."""
    if free_mib is None:
        return max(1, jobs)
    return max(1, min(jobs, free_mib // PASS_MEMORY_MIB))


class GpuShare:
    """Who uses each GPU: one lesson's timed runs at a time, or sanitizer passes, never both at once.

    A lesson whose builds are ready claims a GPU (first come, first served)
    and holds it until its timed runs are done. Passes on a GPU start only
    while no lesson holds it and none waits for a GPU, so the timed runs of
    the lessons that are ready go first; a lesson that holds a GPU waits for
    the passes already running there to end before its timed runs start.
    At most `jobs` passes run at once (default: the CPU cores), and on each
    GPU no more than its free memory holds at PASS_MEMORY_MIB each (asked
    once, when its first pass is about to start). Across processes
    locks.gpu_lock holds the same: exclusively for timed runs, shared for passes.
    """

    def __init__(self, gpus: list[Gpu], jobs: int | None = None, free_memory=free_memory_mib):
        self.gpus = gpus
        self.jobs = jobs or os.cpu_count() or 1
        self.free_memory = free_memory
        self.cond = threading.Condition()
        self.holder: dict[str, str | None] = {gpu.uuid: None for gpu in gpus}   # the lesson that claimed it
        self.running: dict[str, int] = {gpu.uuid: 0 for gpu in gpus}           # passes running on it
        self.waiting: list[str] = []                                            # lessons waiting for a GPU
        self.slots: dict[str, int] = {}
        self.slots_lock = threading.Lock()
        self.closed = False

    def claim(self, lesson_id: str) -> Claim | None:
        """Wait for a GPU that no lesson holds, in the order lessons asked; None once closed."""
        with self.cond:
            self.waiting.append(lesson_id)
            try:
                while not self.closed:
                    free = [gpu for gpu in self.gpus if self.holder[gpu.uuid] is None]
                    if free and self.waiting[0] == lesson_id:
                        gpu = min(free, key=lambda g: self.running[g.uuid])   # the first, unless passes run there
                        self.holder[gpu.uuid] = lesson_id
                        return Claim(self, gpu)
                    self.cond.wait()
                return None
            finally:
                self.waiting.remove(lesson_id)
                self.cond.notify_all()

    def close(self) -> None:
        """Stop: lessons waiting for a GPU get none; passes waiting for one start (to be stopped at once)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    @contextlib.contextmanager
    def timed(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """The claimed GPU to one lesson's timed runs alone: once the passes running there end, and locked."""
        with self.cond:
            if self.running[gpu.uuid]:
                on_wait(f"waiting for GPU {gpu.index}: "
                        f"{plural(self.running[gpu.uuid], 'sanitizer pass', 'sanitizer passes')} running")
            self.cond.wait_for(lambda: self.running[gpu.uuid] == 0 or self.closed)
        with gpu_lock(gpu.uuid, on_wait):
            yield

    @contextlib.contextmanager
    def sanitizing(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """A place for one sanitizer pass on `gpu`, beside other passes but never beside a timed run."""
        slots = self._slots(gpu)
        with self.cond:
            self.cond.wait_for(lambda: self.closed or (
                self.holder[gpu.uuid] is None and not self.waiting and self.running[gpu.uuid] < slots
                and sum(self.running.values()) < self.jobs))
            self.running[gpu.uuid] += 1
        try:
            with gpu_lock(gpu.uuid, on_wait, shared=True):
                yield
        finally:
            with self.cond:
                self.running[gpu.uuid] -= 1
                self.cond.notify_all()

    def _slots(self, gpu: Gpu) -> int:
        with self.slots_lock:
            if gpu.uuid not in self.slots:
                self.slots[gpu.uuid] = pass_slots(self.free_memory(gpu), self.jobs)
            return self.slots[gpu.uuid]


class Claim:
    """One lesson's hold on a GPU for its timed runs: released once, by the first to let it go."""

    def __init__(self, share: GpuShare, gpu: Gpu):
        self.share, self.gpu = share, gpu
        self.held = True

    def release(self) -> None:
        with self.share.cond:
            if self.held:
                self.held = False
                self.share.holder[self.gpu.uuid] = None
                self.share.cond.notify_all()

    def __enter__(self) -> Gpu:
        return self.gpu

    def __exit__(self, *exc) -> None:
        self.release()


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

    Each lesson's turn runs in a thread of its own, which claims a GPU from
    `GpuShare` for its timed runs; its result is a future, joined in order.
    A turn that raises ends that lesson as CRASH (or FAIL, for an error coursectl reports) and the
    others stand. Ctrl-C stops every child and raises Interrupted carrying the
    lessons that had finished, the others SKIPPED.
    """
    nvcc = toolchain.require_nvcc()
    gpus = select_gpus(toolchain, options.gpus)
    archs = [options.arch] if options.arch else sorted({g.arch for g in gpus})
    share = GpuShare(gpus, options.sanitizer_jobs)
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
            emit(Event(lesson=lesson.id, stage="built", detail="cached" if build.cached else f"{build.seconds:.1f} s",
                       build=build))
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

    def take_turn(lesson: Lesson, claim: Claim) -> LessonResult:
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
        result = stages(Turn(manifest, toolchain, options, lesson, builds[lesson.id], emit, runner, stopping, claim))
        result.builds = list(builds[lesson.id].values())
        result.seconds = time.monotonic() - started
        return result

    def turn_of(lesson: Lesson) -> None:
        """A lesson's turn, in a thread of its own: claim a GPU, run its stages, set its future.

        The GPU goes back when its timed runs are done (Turn.release), at the
        latest when the turn ends.
        """
        future = turns[lesson.id]
        claim = share.claim(lesson.id)
        if claim is None:
            return
        with claim:
            if stopping.is_set() or not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(stopped(lesson.id, Status.SKIPPED, NOT_RUN) if halted.is_set()
                                  else take_turn(lesson, claim))
            except BaseException as exc:  # noqa: BLE001 - becomes this lesson's result in the main thread
                future.set_exception(exc)
        result = _joined(lesson.id, future)
        if options.exitfirst and result.status.is_failure:
            halted.set()
        emit(Event(lesson=lesson.id, stage="done", detail=result.status.value, result=result))

    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    shared = SharedBuilds(pool, nvcc, toolchain.nvcc_version, runner)
    results: dict[str, LessonResult] = {}
    try:
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
