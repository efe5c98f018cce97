"""One lesson's turn on its GPU: what the stages of a workflow (pipeline.py) run and write.

A Turn runs the lesson's timed runs (its GPU to itself), its sanitizer passes
(from the sanitizer cache when nothing they depend on changed), and, for
record, stores what was judged; it keeps what they gave (`runs`, `chosen`,
`files`) for the stages after. It runs programs and writes files; every
verdict on what they did comes from judging.py. An OfflineTurn is the same
for verify --offline, which runs nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import functools
import itertools
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..cuda.build import BuildResult, cache_root, mangled_kernels
from ..errors import EvidenceError, describe_os_error
from ..files import relative
from ..judge.evidence import (EvidenceMeta, Recorded, build_evidence_path, evidence_dir, lesson_digest, read_evidence_file, source_changes, write_build_evidence, write_evidence)
from ..judge.judging import build_evidence_of, compare_with_previous, describe_environment, judge_sanitizer_run, sources_now
from ..manifest.model import Lesson, Manifest, SanitizerPass
from ..process import CommandResult, Runner
from ..judge.rules import rules_of
from ..judge.results import Emit, Event, LessonResult, Options, PassResult, RunEnvironment, status_of
from ..cuda.gpu_memory import watching
from ..cuda.sanitizer import program_output_name, sanitizer_command
from ..manifest.passes import Tool
from ..manifest.snippets import Snippet
from ..cuda.sanitizer_cache import Footprint, is_cacheable, last_run, load_pass, pass_key, store_pass
from .gathering import Gathering
from .sharing import Claim, Ticket
from ..cuda.toolchain import Gpu, Toolchain, gpu_state
from ..trace import current as current_trace, span


class Turn:
    """One lesson on one GPU, its builds ready and the GPU claimed: what its stages run.

    The claim lasts until its timed runs are done (or until its sanitizer
    passes start, or the turn ends, whichever comes first).
    """

    def __init__(self, manifest: Manifest, toolchain: Toolchain, options: Options, lesson: Lesson,
                 builds: dict[str, BuildResult], emit: Emit, runner: Runner, stopping: threading.Event, claim: Claim,
                 expected: dict[str, float]):
        self.manifest, self.toolchain, self.options = manifest, toolchain, options
        self.lesson, self.gpu, self.builds = lesson, claim.gpu, builds
        self.emit, self.runner, self.stopping = emit, runner, stopping
        self.claim, self.share = claim, claim.share
        self.arch = options.arch or self.gpu.arch
        self.env = {"CUDA_VISIBLE_DEVICES": self.gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        self.environment = RunEnvironment()
        self.expected = expected                         # its passes' expected seconds (expected_passes)
        self.tickets: dict[str, Ticket] | None = None   # this lesson's passes in the GPU share's queue
        self.runs: list[CommandResult] = []            # the timed runs, once run_program is done
        self.chosen = 0                                # the run judged as the lesson's (judging.judge_runs)
        self.files: dict[str, bytes] = {}              # the passes' logs and XML reports, named as stored
        self.gathering: Gathering | None = None          # a run of a lesson with claims across runs: where they meet
        self.waited = 0.0                                # seconds it waited there for the other runs
        # This GPU's evidence and build evidence, read and parsed once for the stages that judge against them;
        # store, the last stage of record, reads the set it replaces through it too, then writes.
        self.recorded = Recorded(manifest.root, lesson.id)

    @property
    def build(self) -> BuildResult:
        return self.builds[f"{self.arch}/plain"]

    @functools.cached_property
    def folder(self) -> Path:
        """Where the lesson runs: its source's folder, so relative `args` mean what the page's run command means."""
        return self.manifest.source_path(self.lesson).parent

    def _event(self, stage: str, detail: str = "") -> None:
        self.emit(Event(lesson=self.lesson.id, stage=stage, detail=detail))

    def release(self) -> None:
        """Let the next lesson have this GPU for its timed runs, this lesson's passes queued first."""
        if self.tickets is None:
            will_run = f"{self.arch}/lineinfo" in self.builds   # self.expected is empty without options.sanitize
            self.tickets = self.share.queue_passes(self.lesson.id, self.gpu, self.expected if will_run else {})
        self.claim.release()

    def run_program(self) -> list[CommandResult]:
        """The timed runs (options.repeat of them), with the GPU's state before and after, the GPU to themselves.

        Kept as `runs` too.
        """
        runs: list[CommandResult] = []
        with contextlib.ExitStack() as alone:
            with span("waiting for its GPU to itself", self.lesson.id):
                alone.enter_context(self.share.timed(self.gpu, lambda message: self._event("waiting", message)))
            alone.enter_context(span("timed runs", self.lesson.id, gpu=self.gpu.index))
            before = _state_of(self.gpu)
            repeat = max(1, self.options.repeat)
            for index in range(repeat):
                self._event("running", f"GPU {self.gpu.index}" + (f", run {index + 1}/{repeat}" if repeat > 1 else ""))
                with self.share.starts.start():
                    runs.append(self.runner([str(self.build.binary), *self.lesson.args],
                                            timeout=self.manifest.timeout(self.lesson), env=self.env,
                                            cwd=self.folder))
                if runs[-1].timed_out or runs[-1].signal:
                    break
            self.environment = describe_environment(before, _state_of(self.gpu))
        self.release()
        self._event("comparing")
        self.runs = runs
        return runs

    def passes(self) -> dict[str, SanitizerPass]:
        return passes_of(self.manifest, self.options, self.lesson)

    def sanitize(self, result: LessonResult) -> dict[str, bytes]:
        """Each sanitizer pass on the -lineinfo build, taken from the cache or run, all at once; judged.

        Their problems become the lesson's reasons. Returns the logs and XML
        reports, named as record stores them, and keeps them as `files`.
        """
        pending = self.start_sanitizing(result)
        wait_for_futures(pending)
        return self.take_the_passes(result, pending)

    def start_sanitizing(self, result: LessonResult) -> list[Future]:
        """sanitize's first half: each pass taken from the cache, or handed to the GPU share, which runs it on a
        thread of its own when its turn comes; their futures, for take_the_passes once all are done (none
        waits for a place meanwhile, and the turn need not wait for them in a thread of its own: Scheduler)."""
        self.release()
        if not self.options.sanitize:
            result.sanitizers += [PassResult(tool=tool, not_run="--no-sanitize") for tool in self.passes()]
            return []
        build = self.builds.get(f"{self.arch}/lineinfo")
        passes = self.passes()
        if not passes or build is None:
            return []
        sanitizer = self.toolchain.require_sanitizer()
        return [self._sanitize_one(sanitizer, build, tool, spec) for tool, spec in passes.items()]

    def take_the_passes(self, result: LessonResult, pending: list[Future]) -> dict[str, bytes]:
        """sanitize's second half, once every pass of start_sanitizing is done: their outcomes in the result."""
        done = [future.result() for future in pending]
        files: dict[str, bytes] = {}
        for outcome, log, xml, stdout, note in done:
            result.sanitizers.append(outcome)
            result.reasons += outcome.problems
            if note:
                result.notes.append(note)
            files[f"{outcome.tool}.log"] = log
            if xml:
                files[f"{outcome.tool}.xml"] = xml
            files[program_output_name(outcome.tool)] = stdout
        if pending:
            self.files = files
        return files

    def _sanitize_one(self, sanitizer: str, build: BuildResult, tool: str, spec: SanitizerPass) -> Future:
        """One pass: its stored result where its key is unchanged (unless options.rerun_sanitizers), else run
        when the GPU share says (GpuShare.run_pass).

        Judged either way by judge_sanitizer_run, so a changed expectation is
        judged without running anything. The future's result is the outcome,
        the log, the XML, the program's stdout under the tool, and a note (why the result could not be
        stored) or "".
        """
        ticket = self.tickets[tool]   # queued as the turn let its GPU go (release)
        try:
            timeout = spec.timeout or self.manifest.timeout(self.lesson) * 10
            program_args = [*self.lesson.args, *spec.program_args]
            key = pass_key(build.binary, tool, spec.args, program_args, self.toolchain.sanitizer_version,
                           self.toolchain.driver_version, self.gpu.name, self.env, self.folder)
            root = cache_root(self.manifest)
            stored = None if self.options.rerun_sanitizers else load_pass(root, self.lesson.id, key)
            if stored is not None and stored.seconds > timeout:
                # The timeout is not in the key (raising it changes nothing), but a pass that took longer than
                # it allows now would be killed if it ran: it runs, and is judged on what happens.
                stored = None
        except BaseException as exc:   # this turn's failure; its ticket holds back no other pass
            self.share.withdraw(ticket)
            return _failed(exc)
        if stored is None:
            waiting = Waited(f"waiting to run {tool}", f"{self.lesson.id} {tool}")
            return self.share.run_pass(ticket, lambda gpu: self._run_pass(
                sanitizer, build, tool, spec, program_args, timeout, gpu, waiting),
                lambda said: self._event("waiting", said),
                then=lambda ran: self._judge_pass(build, tool, spec, key, root, timeout, *ran))
        self.share.withdraw(ticket)
        self._event("sanitizing", f"{tool}, cached")
        done: Future = Future()
        try:
            ran = stored.command_result()
            outcome = judge_sanitizer_run(self.manifest, self.lesson, tool, spec, ran,
                                          stored.log_bytes, stored.xml_bytes, self.toolchain.sanitizer_version,
                                          timeout, mangled_kernels([build]))
        except BaseException as exc:  # noqa: BLE001 - the turn's failure, raised where it waits
            return _failed(exc)
        outcome.cached = True
        done.set_result((outcome, stored.log_bytes, stored.xml_bytes, ran.stdout or b"", ""))
        return done

    def _run_pass(self, sanitizer: str, build: BuildResult, tool: str, spec: SanitizerPass, program_args: list[str],
                  timeout: float, gpu: Gpu, waiting: Waited) -> tuple[CommandResult, bytes, bytes | None, float | None]:
        """One pass run now on `gpu`, in the GPU share's thread: what it ran, its log, its XML, the most GPU memory
        its processes held (None: not known). _judge_pass takes them from there."""
        waiting.end()
        with span(tool, f"{self.lesson.id} {tool}", gpu=gpu.index):
            self._event("sanitizing", f"{tool}, GPU {gpu.index}")
            log_path, xml_path = SCRATCH.paths(tool)
            try:
                command = sanitizer_command(sanitizer, Tool(tool), [str(build.binary), *program_args],
                                            log_path, xml_path, extra=spec.args)
                with watching(gpu) as watch:   # its processes' GPU memory, where NVML can tell
                    ran = self.runner(command, timeout=timeout, cwd=self.folder,
                                      env={**self.env, "CUDA_VISIBLE_DEVICES": gpu.uuid, **watch.env})
                # Read as evidence files are, up to their limit: both may become evidence.
                log = read_evidence_file(log_path) or b""
                xml = read_evidence_file(xml_path) or None
            finally:
                SCRATCH.remove(log_path, xml_path)
        return ran, log, xml, watch.most_mib

    def _judge_pass(self, build: BuildResult, tool: str, spec: SanitizerPass, key, root: Path, timeout: float,
                    ran: CommandResult, log: bytes, xml: bytes | None,
                    gpu_mib: float | None) -> tuple[PassResult, bytes, bytes | None, bytes, str]:
        """A pass just run, on the GPU share's judging thread: stored in the sanitizer cache, and judged."""
        note = ""
        if is_cacheable(ran, log) and not self.stopping.is_set():
            try:
                store_pass(root, self.lesson.id, key, ran, log, xml, gpu_mib=gpu_mib)
            except OSError as exc:   # only the next verify is slower
                note = f"{tool}: not stored in the sanitizer cache: {describe_os_error(exc)}"
        outcome = judge_sanitizer_run(self.manifest, self.lesson, tool, spec, ran, log, xml,
                                      self.toolchain.sanitizer_version, timeout, mangled_kernels([build]))
        outcome.cached = False
        return outcome, log, xml, ran.stdout or b"", note

    def store(self, result: LessonResult) -> LessonResult:
        """Write the evidence (the chosen run, the passes' files) and the build evidence of a lesson that held
        every gate; say what moved.

        A dry run writes nothing and says in a note what it would have written.
        """
        if _would_fail(result) or self.stopping.is_set():
            result.reasons.insert(0, self._not_recorded())
            return result
        manifest, lesson, gpu, toolchain = self.manifest, self.lesson, self.gpu, self.toolchain
        command = self.runs[self.chosen]
        compare_with_previous(manifest, lesson, result, gpu.slug, self.recorded)
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
                     if digest is not None},
            rules=rules_of(manifest, lesson))
        files, meta.stale_passes = self._kept_reports(result, self.files)
        archs = manifest.architectures   # builds finish in any order; say them in the manifest's
        built = sorted((build_evidence_of(manifest, lesson, build, toolchain.nvcc_version)
                        for key, build in self.builds.items() if key.endswith("/plain")),
                       key=lambda b: archs.index(b.arch) if b.arch in archs else len(archs))
        if self.options.dry_run:
            result.notes.append(would_write(manifest.root, meta, files, built))
            return result
        write_evidence(manifest.root, meta, result.transcript or "", files)
        for build in built:
            write_build_evidence(manifest.root, build)
        result.recorded = True
        result.evidence = gpu.slug
        return result


    def _not_recorded(self) -> str:
        """Why nothing was written; for a run whose lesson's gate across runs failed, that no run of it was."""
        if self.gathering is not None and self.gathering.failed:
            group = self.gathering.group
            gates = ", ".join(repr(gate) for gate in self.gathering.failed)
            return (f"not recorded: gate {gates} failed across the runs of {group}, so no run of {group} was "
                    f"recorded; the previous evidence is untouched")
        return "not recorded: the previous evidence is untouched"

    def _kept_reports(self, result: LessonResult, files: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
        """The new files, plus the recorded reports of declared passes that did not run this time.

        record never drops evidence it did not replace. A kept report is
        stale when the lesson's build has changed since it was recorded
        (source, flags, nvcc or architecture); the page and verify say so.
        """
        ran = {p.tool for p in result.sanitizers if not p.not_run}
        missing = [tool for tool in self.manifest.sanitizers(self.lesson) if tool not in ran]
        try:
            previous = self.recorded.load(self.gpu.slug) if missing else None
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
            names = [name for name in (f"{tool}.log", f"{tool}.xml", program_output_name(tool)) if name in old.files]
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


@dataclass
class OfflineTurn:
    """One lesson of verify --offline, its builds done: what its stages judge. No GPU, nothing run.

    `recorded` is the lesson's evidence, each GPU's set read and parsed once for all its stages; `snippets` its
    source's snippets, once judge_source has read them."""

    manifest: Manifest
    toolchain: Toolchain
    lesson: Lesson
    recorded: Recorded = field(init=False)
    snippets: dict[str, Snippet] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.recorded = Recorded(self.manifest.root, self.lesson.id)


def _would_fail(result: LessonResult) -> bool:
    """Whether the lesson fails as it stands (results.status_of); the scheduler settles it after its last stage."""
    return status_of(result, compared=False).is_failure


def passes_of(manifest: Manifest, options: Options, lesson: Lesson) -> dict[str, SanitizerPass]:
    """The lesson's passes this run: options.sanitize_tools if given, else the declared ones."""
    declared = manifest.sanitizers(lesson)
    if options.sanitize_tools is not None:
        return {tool: declared.get(tool) or SanitizerPass() for tool in options.sanitize_tools}
    return declared


def expected_passes(manifest: Manifest, options: Options, lesson: Lesson,
                    footprints: list[Footprint] | None = None) -> dict[str, float]:
    """Each pass the lesson will run, with the seconds it took when it last ran here (0.0: never); none unless
    options.sanitize. Read once per turn, before its lesson asks for a GPU; what those runs used of the
    machine is added to `footprints` (where measured)."""
    if not options.sanitize:
        return {}
    root = cache_root(manifest)
    expected = {}
    for tool in passes_of(manifest, options, lesson):
        expected[tool], footprint = last_run(root, lesson.id, tool)
        if footprint is not None and footprints is not None:
            footprints.append(footprint)
    return expected


def would_write(root: Path, meta: EvidenceMeta, files: dict[str, bytes], built: list) -> str:
    """What a dry run of record leaves unwritten, as one note."""
    folder = relative(evidence_dir(root, meta.lesson, meta.gpu_slug), root)
    names = ["transcript.txt", "meta.json", *files]
    builds = ", ".join(relative(build_evidence_path(root, meta.lesson, b.arch), root) for b in built)
    return (f"dry run: would write {folder}/ ({', '.join(names)})" + (f" and {builds}" if builds else "")
            + "; nothing was written")


def _state_of(gpu: Gpu):
    try:
        with span("GPU state", f"GPU {gpu.index} state"):
            return gpu_state(gpu)
    except Exception:  # noqa: BLE001 - the environment is a remark, never a failure
        return None


class _Scratch:
    """Where the passes' tools write their logs and XML reports: one folder a process, made at its first pass
    (again if it is gone) and removed as the process ends, each pass's files named apart and removed once
    read. A folder made and removed for each pass cost a quarter of a millisecond of CPU, more than reading
    both files."""

    def __init__(self):
        self.lock = threading.Lock()
        self.folder: str | None = None
        self.count = itertools.count(1)

    def paths(self, tool: str) -> tuple[Path, Path]:
        with self.lock:
            if self.folder is None or not os.path.isdir(self.folder):
                self.folder = tempfile.mkdtemp(prefix="coursectl-passes-")
                atexit.register(shutil.rmtree, self.folder, ignore_errors=True)
            stem = os.path.join(self.folder, f"{next(self.count)}-{tool}")
        return Path(stem + ".log"), Path(stem + ".xml")

    @staticmethod
    def remove(*paths: Path) -> None:
        for path in paths:
            try:
                os.unlink(path)
            except OSError:   # never written, or not a file the tool left (removed with the folder)
                pass


SCRATCH = _Scratch()


def _failed(exc: BaseException) -> Future:
    """A future that raises `exc` where its turn waits for it."""
    failed: Future = Future()
    failed.set_exception(exc)
    return failed


class Waited:
    """The trace's span of a wait that no thread sits in (a lesson's for a GPU, a pass's for a place): begun as it
    is asked for, ended as it is given, in another thread."""

    def __init__(self, name: str, track: str):
        self.name, self.track, self.trace = name, track, current_trace()
        self.start = time.monotonic()

    def end(self) -> None:
        if self.trace is not None:
            self.trace.add(self.name, self.track, self.start - self.trace.zero, time.monotonic() - self.trace.zero, {})
