"""The stages in order: build, run, parse, judge, compare, and (for record) store.

verify() reads in a few lines: builds go to a thread pool, each lesson joins
its GPU's queue as soon as its builds are ready, and one worker per GPU runs
lessons one at a time, so no two runs ever share a GPU.
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, Field

from . import __version__
from .build import BuildResult, build_lesson
from .claims import ClaimResult, evaluate_claims
from .comparison import FieldResult, FieldStatus, check_plausibility, compare_fields
from .errors import CoursectlError, EvidenceError, Interrupted, TranscriptError
from .evidence import (EvidenceMeta, lesson_digest, list_gpus, load_build_evidence, load_evidence,
                       write_build_evidence, write_evidence)
from .resources import BuildEvidence, compare_resources
from .locks import gpu_lock
from .manifest import Lesson, Manifest, SanitizerPass
from .process import CommandResult, kill_all, resume, run_command, tail_lines
from .toolchain import Gpu, Toolchain, select_gpus
from .transcript import Flat, decode_output, flatten, parse_transcript


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


def _quiet(_: Event) -> None:
    pass


class RunInfo(BaseModel):
    command: list[str]
    exit_status: int | None
    signal: int | None = None
    timed_out: bool = False
    seconds: float
    stdout_truncated: bool = False
    stderr_tail: str = ""


class LessonResult(BaseModel):
    lesson: str
    status: Status
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
    sanitizers: list[dict] = []      # one entry per sanitizer pass (see sanitizer.Report)
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
    timeout_scale: float = 1.0
    repeat: int = 1
    plain_run: bool = True                    # False: only the sanitizer passes run (coursectl sanitize)


def _cc_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


# -- judging a run ------------------------------------------------------------------
def judge_run(manifest: Manifest, lesson: Lesson, result: CommandResult, gpu_slug: str | None,
              arch: str | None, compare: bool = True, resources: dict | None = None,
              peaks: tuple | None = None, environment: dict | None = None) -> LessonResult:
    """Turn one run of a lesson into a result: parse, claims, evidence."""
    text = decode_output(result.stdout)
    info = RunInfo(command=result.argv, exit_status=result.returncode, signal=result.signal,
                   timed_out=result.timed_out, seconds=result.seconds,
                   stdout_truncated=result.stdout_truncated, stderr_tail=tail_lines(result.stderr))
    out = LessonResult(lesson=lesson.id, status=Status.PASS, run=info, transcript=text, arch=arch,
                       gpu=gpu_slug, environment=environment or {})
    if out.environment.get("untrusted"):
        out.notes.append(f"timings not trusted: {out.environment['untrusted']}")
    if result.timed_out:
        out.status = Status.TIMEOUT
        tail = tail_lines(result.stdout, 5) or "(no output)"
        out.reasons.append(f"killed after {result.seconds:.1f} s (timeout "
                           f"{manifest.timeout(lesson):g} s) with its process group; last output:\n{tail}")
        return out
    if result.signal:
        out.status = Status.CRASH
        out.reasons.append(result.describe())
        return out
    if result.stdout_truncated:
        out.reasons.append("output exceeded the capture limit and was cut; "
                           "the transcript is incomplete")
    source = f"{lesson.id} stdout"
    try:
        transcript = parse_transcript(lesson.output, text, source)
    except TranscriptError as exc:
        transcript = None
        out.reasons.append(str(exc))
    if transcript is not None:
        out.claims = evaluate_claims(lesson.output, transcript, lesson.claims, resources)
        for claim in out.claims:
            if claim.held:
                continue
            lines = [f"{claim.kind} {claim.id!r} failed" + (f" ({claim.says})" if claim.says else "")]
            lines += [f"  {f}" for f in claim.failures[:5]]
            if len(claim.failures) > 5:
                lines.append(f"  ... and {len(claim.failures) - 5} more")
            (out.reasons if claim.kind == "gate" else out.notes).append("\n".join(lines))
    if result.returncode != 0:
        out.reasons.append(result.describe())
    if transcript is not None:
        flats = out.flats = list(flatten(lesson.output.items, transcript.scope))
        if peaks:
            out.reasons += check_plausibility(flats, *peaks)
        if compare:
            compare_with_evidence(manifest, lesson, flats, gpu_slug, out)
    if out.reasons:
        out.status = Status.FAIL
    elif out.evidence is None or out.evidence != gpu_slug:
        out.status = Status.NO_EVIDENCE
    return out


def compare_with_evidence(manifest: Manifest, lesson: Lesson, new: list[Flat],
                          gpu_slug: str | None, out: LessonResult, ambiguous: set[str] = frozenset()) -> None:
    slugs = list_gpus(manifest.root, lesson.id)
    slug = gpu_slug if gpu_slug in slugs else (slugs[0] if slugs else None)
    if slug is None:
        return
    try:
        evidence = load_evidence(manifest.root, lesson.id, slug)
        assert evidence is not None
        old_transcript = parse_transcript(lesson.output, evidence.transcript,
                                          str(evidence.directory / "transcript.txt"))
    except (EvidenceError, TranscriptError) as exc:
        out.reasons.append(f"evidence: {exc}")
        return
    old = list(flatten(lesson.output.items, old_transcript.scope))
    out.evidence = slug
    out.fields = compare_fields(new, old, same_gpu=slug == gpu_slug)
    for field in out.fields:
        if field.path in ambiguous and field.status in (FieldStatus.within, FieldStatus.moved, FieldStatus.same):
            field.status = FieldStatus.ambiguous
    if out.environment.get("untrusted"):
        for field in out.fields:
            if field.status is FieldStatus.moved and field.rule.startswith("tolerance"):
                field.status = FieldStatus.untrusted
    moved = [f for f in out.fields if f.status.is_failure]
    if moved:
        lines = [f"{len(moved)} field(s) differ from the {slug} evidence:"]
        for f in moved[:8]:
            lines.append(f"  {f.path} [{f.rule}]: {f.status.value}: evidence {f.old!r}, now {f.new!r}")
        if len(moved) > 8:
            lines.append(f"  ... and {len(moved) - 8} more")
        out.reasons.append("\n".join(lines))


# -- repeated runs ---------------------------------------------------------------------
def judge_runs(manifest: Manifest, lesson: Lesson, runs: list[CommandResult], gpu: Gpu, arch: str,
               compare: bool, resources: dict | None, environment: dict) -> tuple[LessonResult, int]:
    """Judge one or more runs; tolerance fields by their median; returns (result, chosen run).

    Every run must pass its gates. With several runs, each tolerance field is
    judged by its median and its spread is reported; a spread wider than the
    field's own tolerance makes the field AMBIGUOUS instead of PASS or FAIL.
    The chosen run is the one closest to the medians (what record stores).
    """
    peaks = (gpu.peak_gbps, gpu.peak_fp32_gflops)
    judged = [judge_run(manifest, lesson, run, gpu.slug, arch, compare=False, resources=resources,
                        peaks=peaks, environment=environment) for run in runs]
    parsed = [(index, result.flats) for index, result in enumerate(judged) if result.flats is not None]
    chosen, medians, spread, ambiguous = 0, {}, {}, set()
    if len(parsed) > 1:
        import statistics
        values: dict[str, list[float]] = {}
        specs = {}
        for _, flats in parsed:
            for flat in flats:
                if flat.spec.compare.value == "tolerance" and isinstance(flat.value, (int, float)):
                    values.setdefault(flat.path, []).append(float(flat.value))
                    specs[flat.path] = flat.spec
        for path, series in values.items():
            median = statistics.median(series)
            medians[path] = median
            width = max(series) - min(series)
            spread[path] = round(width / abs(median), 4) if median else 0.0
            spec = specs[path]
            if width > (spec.abs or 0.0) + (spec.rel or 0.0) * abs(median):
                ambiguous.add(path)

        def distance(flats: list[Flat]) -> float:
            return sum(abs(float(f.value) - medians[f.path]) / (abs(medians[f.path]) or 1.0)
                       for f in flats if f.path in medians and isinstance(f.value, (int, float)))
        chosen = min(parsed, key=lambda item: distance(item[1]))[0]
    result = judged[chosen]
    for index, other in enumerate(judged):
        if index != chosen and other.status.is_failure:
            result.reasons += [f"run {index + 1} of {len(runs)}: {r}" for r in other.reasons]
    result.runs = len(runs)
    result.spread = spread
    if compare and parsed:
        flats = dict(parsed).get(chosen) or parsed[0][1]
        if medians:
            flats = [f.model_copy(update={"value": medians[f.path]}) if f.path in medians else f for f in flats]
        compare_with_evidence(manifest, lesson, flats, gpu.slug, result, ambiguous)
    if result.reasons and not result.status.is_failure:
        result.status = Status.FAIL
    elif not result.reasons and result.status is Status.PASS and result.evidence != gpu.slug:
        result.status = Status.NO_EVIDENCE
    if result.status is Status.NO_EVIDENCE and result.evidence == gpu.slug:
        result.status = Status.PASS
    return result, chosen


def state_of(gpu: Gpu):
    from .toolchain import gpu_state
    try:
        return gpu_state(gpu)
    except Exception:  # noqa: BLE001 - the environment is a remark, never a failure
        return None


def describe_environment(before, after) -> dict:
    """Clocks and throttling around the runs; 'untrusted' says why timings cannot be trusted."""
    env: dict = {}
    if before is not None:
        env["before"] = before.model_dump()
    if after is not None:
        env["after"] = after.model_dump()
    problems = []
    for label, state in (("before", before), ("after", after)):
        if state is not None and state.throttled:
            problems.append(f"GPU throttled {label} the run (clocks event reasons {state.throttle_reasons:#x})")
    if before is not None and before.processes:
        problems.append(f"other processes on the GPU: {', '.join(map(str, before.processes))}")
    if problems:
        env["untrusted"] = "; ".join(problems)
    return env


# -- the GPU stage -------------------------------------------------------------------
class _Work(BaseModel):
    lesson: str
    builds: dict[str, BuildResult] = {}   # "arch/variant" -> build
    error: str | None = None


def _run_on_gpu(manifest: Manifest, lesson: Lesson, work: _Work, gpu: Gpu, toolchain: Toolchain,
                options: Options, emit: Emit, runner, after_run) -> LessonResult:
    started = time.monotonic()
    arch = options.arch or gpu.arch
    if lesson.min_compute_capability and _cc_tuple(gpu.compute_capability) < _cc_tuple(lesson.min_compute_capability):
        return LessonResult(lesson=lesson.id, status=Status.UNSUPPORTED, gpu=gpu.slug, arch=arch,
                            reasons=[f"needs compute capability {lesson.min_compute_capability}; "
                                     f"{gpu.name} has {gpu.compute_capability}"])
    if work.error:
        return LessonResult(lesson=lesson.id, status=Status.FAIL, gpu=gpu.slug, arch=arch,
                            reasons=[work.error], builds=list(work.builds.values()))
    build = work.builds[f"{arch}/plain"]
    env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with gpu_lock(gpu.uuid, lambda msg: emit(Event(lesson=lesson.id, stage="waiting", detail=msg))):
        runs: list[CommandResult] = []
        before = state_of(gpu)
        for index in range(max(1, options.repeat) if options.plain_run else 0):
            emit(Event(lesson=lesson.id, stage="running",
                       detail=f"GPU {gpu.index}" + (f", run {index + 1}/{options.repeat}" if options.repeat > 1 else "")))
            runs.append(runner([str(build.binary), *lesson.args],
                               timeout=manifest.timeout(lesson) * options.timeout_scale, env=env,
                               cwd=build.binary.parent))
            if runs[-1].timed_out or runs[-1].signal:
                break
        after = state_of(gpu)
        environment = describe_environment(before, after)
        result = after_run(lesson, runs, gpu, build, work, env, environment)
    result.builds = list(work.builds.values())
    result.seconds = time.monotonic() - started
    return result


def _builds_needed(manifest: Manifest, lesson: Lesson, archs: list[str], options: Options) -> list[tuple[str, str]]:
    plain = list(archs)
    if options.all_archs:
        plain += [a for a in manifest.architectures if a not in plain]
    needed = [(arch, "plain") for arch in plain]
    if options.sanitize and (options.sanitize_tools or manifest.sanitizers(lesson)):
        needed += [(arch, "lineinfo") for arch in archs]
    return needed


def execute(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
            after_run, emit: Emit = _quiet, runner=run_command) -> list[LessonResult]:
    """Build every lesson in parallel and run each on a GPU as soon as it is built."""
    nvcc = toolchain.require_nvcc()
    gpus = select_gpus(toolchain, options.gpus)
    archs = [options.arch] if options.arch else sorted({g.arch for g in gpus})
    ready: queue.Queue = queue.Queue()
    results: dict[str, LessonResult] = {}
    works = {lesson.id: _Work(lesson=lesson.id) for lesson in lessons}
    lock = threading.Lock()
    pending = {lesson.id: len(_builds_needed(manifest, lesson, archs, options)) for lesson in lessons}

    def built(lesson: Lesson, key: str, future: Future) -> None:
        work = works[lesson.id]
        try:
            build = future.result()
            work.builds[key] = build
            emit(Event(lesson=lesson.id, stage="built", detail="cached" if build.cached else f"{build.seconds:.1f} s"))
        except CoursectlError as exc:
            work.error = work.error or str(exc)
        except Exception as exc:  # noqa: BLE001 - reported as the lesson's failure
            work.error = work.error or f"build crashed: {exc!r}"
        with lock:
            pending[lesson.id] -= 1
            if pending[lesson.id] == 0:
                ready.put(lesson)

    def gpu_worker(gpu: Gpu) -> None:
        while True:
            lesson = ready.get()
            if lesson is None:
                return
            try:
                result = _run_on_gpu(manifest, lesson, works[lesson.id], gpu, toolchain, options,
                                     emit, runner, after_run)
            except CoursectlError as exc:
                result = LessonResult(lesson=lesson.id, status=Status.FAIL, gpu=gpu.slug, reasons=[str(exc)])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                with lock:
                    crashed.append(exc)
                return
            with lock:
                results[lesson.id] = result
            emit(Event(lesson=lesson.id, stage="done", detail=result.status.value))

    by_id = {lesson.id: lesson for lesson in lessons}
    crashed: list[BaseException] = []
    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    workers = [threading.Thread(target=gpu_worker, args=(gpu,), daemon=True) for gpu in gpus]
    try:
        for worker in workers:
            worker.start()
        for lesson in lessons:
            emit(Event(lesson=lesson.id, stage="building"))
            for arch, variant in _builds_needed(manifest, lesson, archs, options):
                future = pool.submit(build_lesson, manifest, lesson, arch, nvcc, toolchain.nvcc_version,
                                     variant, runner)
                future.add_done_callback(lambda f, lesson=lesson, key=f"{arch}/{variant}": built(lesson, key, f))
        while True:
            with lock:
                if crashed:
                    raise crashed[0]
                if len(results) == len(lessons):
                    break
            time.sleep(0.02)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        raise Interrupted("interrupted: running programs were stopped; nothing was recorded")
    finally:
        for _ in workers:
            ready.put(None)
        pool.shutdown(wait=True, cancel_futures=True)
        resume()
    return [results[lesson_id] for lesson_id in by_id]


# -- verify and record ---------------------------------------------------------------
def verify(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = _quiet, runner=run_command, sanitize_step=None) -> list[LessonResult]:
    def after_run(lesson, runs, gpu, build, work, env, environment):
        emit(Event(lesson=lesson.id, stage="comparing"))
        result, _ = judge_runs(manifest, lesson, runs, gpu, build.arch, True, build.resources, environment)
        compare_build_evidence(manifest, lesson, build, toolchain, result)
        if sanitize_step is not None and options.sanitize:
            sanitize_step(lesson, gpu, work, env, result)
        return result
    return execute(manifest, lessons, toolchain, options, after_run, emit, runner)


def record(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
           emit: Emit = _quiet, runner=run_command, sanitize_step=None) -> list[LessonResult]:
    """Run each lesson and store its evidence only if it passed every gate."""
    options = options.model_copy(update={"all_archs": True})

    def after_run(lesson, runs, gpu, build, work, env, environment):
        result, chosen = judge_runs(manifest, lesson, runs, gpu, build.arch, False, build.resources, environment)
        command = runs[chosen]
        extra: dict[str, bytes] = {}
        if sanitize_step is not None and options.sanitize:
            extra = sanitize_step(lesson, gpu, work, env, result) or {}
        if result.status.is_failure:
            result.reasons.insert(0, "not recorded: the previous evidence is untouched")
            return result
        previous = None
        try:
            previous = load_evidence(manifest.root, lesson.id, gpu.slug)
        except EvidenceError as exc:
            result.notes.append(f"previous evidence was unreadable and is replaced: {exc}")
        if previous is not None:
            try:
                old = parse_transcript(lesson.output, previous.transcript)
                result.fields = compare_fields(result.flats or [], list(flatten(lesson.output.items, old.scope)),
                                               same_gpu=True)
                result.evidence = gpu.slug
            except TranscriptError as exc:
                result.notes.append(f"previous evidence no longer parses ({exc}); nothing to compare")
        meta = EvidenceMeta(
            lesson=lesson.id, date=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            gpu_name=gpu.name, gpu_slug=gpu.slug, compute_capability=gpu.compute_capability,
            driver_version=toolchain.driver_version, cuda_version=toolchain.cuda_version,
            nvcc_version=toolchain.nvcc_version, arch=build.arch, flags=manifest.flags(lesson),
            source_sha256=lesson_digest(manifest.source_path(lesson)), transcript_sha256="",
            wall_seconds=round(command.seconds, 3), exit_status=command.returncode or 0,
            coursectl_version=__version__, sanitizer_version=toolchain.sanitizer_version,
            peak_gbps=gpu.peak_gbps, peak_fp32_gflops=gpu.peak_fp32_gflops, sm_count=gpu.sm_count,
            max_sm_clock_mhz=gpu.max_sm_clock_mhz, environment=result.environment,
            repeat={"runs": len(runs), "spread": result.spread} if len(runs) > 1 else {})
        write_evidence(manifest.root, meta, result.transcript or "", extra)
        for key, built in work.builds.items():
            if key.endswith("/plain"):
                write_build_evidence(manifest.root, BuildEvidence(
                    lesson=lesson.id, arch=built.arch, nvcc_version=toolchain.nvcc_version,
                    flags=manifest.flags(lesson), kernels=built.resources))
        result.recorded = True
        result.status = Status.PASS
        return result
    return execute(manifest, lessons, toolchain, options, after_run, emit, runner)


def verify_offline(manifest: Manifest, lessons: list[Lesson], toolchain: Toolchain, options: Options,
                   emit: Emit = _quiet, runner=run_command) -> list[LessonResult]:
    """No GPU: build for every listed architecture and re-judge the recorded evidence."""
    toolchain.require_nvcc()
    archs = [options.arch] if options.arch else list(manifest.architectures)
    for lesson in lessons:
        emit(Event(lesson=lesson.id, stage="building"))
    built: dict[str, list] = {lesson.id: [] for lesson in lessons}
    for lesson, _arch, build in build_many(manifest, [(l, a) for l in lessons for a in archs], toolchain,
                                          options.jobs, runner):
        built[lesson.id].append(build)
    results = []
    for lesson in lessons:
        out = LessonResult(lesson=lesson.id, status=Status.PASS)
        for build in built[lesson.id]:
            if isinstance(build, CoursectlError):
                out.reasons.append(str(build))
            else:
                out.builds.append(build)
        emit(Event(lesson=lesson.id, stage="comparing"))
        _judge_evidence(manifest, lesson, out)
        for build in out.builds:
            compare_build_evidence(manifest, lesson, build, toolchain, out)
        if out.reasons:
            out.status = Status.FAIL
        elif out.evidence is None:
            out.status = Status.NO_EVIDENCE
        results.append(out)
        emit(Event(lesson=lesson.id, stage="done", detail=out.status.value))
    return results


def build_many(manifest: Manifest, jobs: list[tuple[Lesson, str]], toolchain: Toolchain, parallel: int,
               runner=run_command) -> list[tuple[Lesson, str, BuildResult | CoursectlError]]:
    """Build (lesson, arch) pairs in parallel; on Ctrl-C stop every nvcc and keep no partial entry."""
    nvcc = toolchain.require_nvcc()
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    out = []
    try:
        futures = [(lesson, arch, pool.submit(build_lesson, manifest, lesson, arch, nvcc,
                                              toolchain.nvcc_version, "plain", runner))
                   for lesson, arch in jobs]
        for lesson, arch, future in futures:
            try:
                out.append((lesson, arch, future.result()))
            except CoursectlError as exc:
                out.append((lesson, arch, exc))
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all()
        raise Interrupted("interrupted: builds were stopped; no cache entry is half-written")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        resume()
    return out


def compare_build_evidence(manifest: Manifest, lesson: Lesson, build: BuildResult, toolchain: Toolchain,
                           out: LessonResult) -> None:
    """A kernel that now spills, or whose shared memory moved, fails before any GPU is involved."""
    try:
        old = load_build_evidence(manifest.root, lesson.id, build.arch)
    except EvidenceError as exc:
        out.reasons.append(str(exc))
        return
    if old is None:
        return
    new = BuildEvidence(lesson=lesson.id, arch=build.arch, nvcc_version=toolchain.nvcc_version,
                        flags=manifest.flags(lesson), kernels=build.resources)
    if old.flags != new.flags:
        out.notes.append(f"{build.arch}: flags changed since the build evidence; resources not compared")
        return
    failures, notes = compare_resources(old, new)
    if failures:
        out.reasons.append("build evidence: " + "; ".join(failures))
    if notes:
        out.notes.append(f"build evidence (nvcc {old.nvcc_version} -> {new.nvcc_version}): " + "; ".join(notes))


def judge_recorded_passes(manifest: Manifest, lesson: Lesson, evidence, out: LessonResult) -> list[dict]:
    """Re-judge the sanitizer reports recorded with the evidence against today's expectations."""
    from .sanitizer import Expectation, Tool, build_report

    passes = []
    slug = evidence.meta.gpu_slug
    for tool, spec in manifest.sanitizers(lesson).items():
        log = evidence.directory / f"{tool}.log"
        if not log.exists():
            out.notes.append(f"{slug}: no recorded {tool} report; record on a GPU to add one")
            continue
        xml = evidence.directory / f"{tool}.xml"
        outcome = PassResult(tool=tool, command=[], seconds=0.0, exit_status=None)
        try:
            report = build_report(Tool(tool), 0, log.read_text(errors="replace"),
                                  xml.read_text(errors="replace") if xml.exists() else None,
                                  version=evidence.meta.sanitizer_version, log_path=log, xml_path=xml)
            expectation = Expectation(tool=Tool(tool), findings=resolve_snippets(manifest, lesson, spec.findings),
                                      allow_other=spec.allow_other)
            judge_pass(outcome, report, expectation)
        except CoursectlError as exc:
            outcome.problems = [str(exc)]
        out.reasons += [f"{slug}: recorded {p}" for p in outcome.problems]
        passes.append(outcome.model_dump(mode="json"))
    return passes


def _judge_evidence(manifest: Manifest, lesson: Lesson, out: LessonResult) -> None:
    """Parse each GPU's evidence, check its gates, and check exact fields agree across GPUs."""
    parsed: dict[str, list] = {}
    for slug in list_gpus(manifest.root, lesson.id):
        try:
            evidence = load_evidence(manifest.root, lesson.id, slug)
            assert evidence is not None
            path = str(evidence.directory / "transcript.txt")
            transcript = parse_transcript(lesson.output, evidence.transcript, path)
        except (EvidenceError, TranscriptError) as exc:
            out.reasons.append(f"evidence for {slug}: {exc}")
            continue
        out.evidence = out.evidence or slug
        if evidence.meta.source_sha256 != lesson_digest(manifest.source_path(lesson)):
            out.notes.append(f"{slug}: the source changed since this evidence was recorded "
                             f"({evidence.meta.date}); re-record it on that GPU")
        claims = evaluate_claims(lesson.output, transcript, lesson.claims)
        for build in out.builds:  # claims over the build evidence, once per architecture
            claims += [c.model_copy(update={"id": f"{c.id} [{build.arch}]"}) for c in
                       evaluate_claims(lesson.output, transcript, lesson.claims, build.resources)
                       if c.id not in {x.id for x in claims}]
        out.claims = out.claims or claims
        for claim in claims:
            if not claim.held:
                text = f"{slug}: {claim.kind} {claim.id!r} failed: " + "; ".join(claim.failures[:3])
                (out.reasons if claim.kind == "gate" else out.notes).append(text)
        parsed[slug] = list(flatten(lesson.output.items, transcript.scope))
        out.sanitizers += judge_recorded_passes(manifest, lesson, evidence, out)
        out.reasons += [f"{slug}: {problem}" for problem in check_plausibility(
            parsed[slug], evidence.meta.peak_gbps, evidence.meta.peak_fp32_gflops)]
    slugs = list(parsed)
    for other in slugs[1:]:
        fields = compare_fields(parsed[other], parsed[slugs[0]], same_gpu=False)
        for field in fields:
            if field.status.is_failure:
                out.reasons.append(f"exact field {field.path} differs between GPUs: "
                                   f"{slugs[0]} {field.old!r}, {other} {field.new!r}")


# -- sanitizer passes ------------------------------------------------------------------
class PassResult(BaseModel):
    """One compute-sanitizer tool run on one lesson, judged."""

    tool: str
    command: list[str]
    seconds: float
    exit_status: int | None
    timed_out: bool = False
    errors: int | None = None
    warnings: int | None = None
    findings: int = 0
    kernels: list[str] = []
    problems: list[str] = []
    report: dict = {}

    @property
    def ok(self) -> bool:
        return not self.problems


def judge_pass(outcome: PassResult, report, expectation) -> None:
    """Fill a pass's counts from its report and judge it against what the lesson expects."""
    from .sanitizer import judge

    outcome.problems += judge(report, expectation)
    outcome.errors = report.summary.errors
    outcome.warnings = report.summary.warnings
    outcome.findings = len(report.findings)
    outcome.kernels = sorted({f.kernel for f in report.findings if f.kernel})


def resolve_snippets(manifest: Manifest, lesson: Lesson, findings: list) -> list:
    """Turn `snippet: NAME` in expected findings into the snippet's line range in the source."""
    from .snippets import extract_snippets

    if not any(f.snippet for f in findings):
        return list(findings)
    source = manifest.source_path(lesson)
    snippets = extract_snippets(source, str(lesson.source))
    resolved = []
    for finding in findings:
        if finding.snippet:
            snippet = snippets[finding.snippet]
            finding = finding.model_copy(update={
                "line_range": (snippet.first_line, snippet.last_line),
                "file": finding.file or source.name})
        resolved.append(finding)
    return resolved


def make_sanitize_step(manifest: Manifest, toolchain: Toolchain, options: Options,
                       emit: Emit = _quiet, runner=run_command):
    """The step that runs a lesson's declared passes after its plain run, on the same GPU."""
    import tempfile

    from .sanitizer import Expectation, Tool, build_report, sanitizer_command, strip_sanitizer_lines

    def step(lesson: Lesson, gpu: Gpu, work: _Work, env: dict, result: LessonResult) -> dict[str, bytes]:
        passes = manifest.sanitizers(lesson)
        tools = options.sanitize_tools
        if tools is not None:
            passes = {tool: passes.get(tool) or SanitizerPass() for tool in tools}
        if not passes:
            return {}
        sanitizer = toolchain.require_sanitizer()
        arch = options.arch or gpu.arch
        build = work.builds.get(f"{arch}/lineinfo")
        if build is None:
            return {}
        extra: dict[str, bytes] = {}
        for tool, spec in passes.items():
            emit(Event(lesson=lesson.id, stage="sanitizing", detail=tool))
            with tempfile.TemporaryDirectory(prefix="coursectl-") as tmp:
                log_path = Path(tmp) / f"{tool}.log"
                xml_path = Path(tmp) / f"{tool}.xml"
                command = sanitizer_command(sanitizer, Tool(tool),
                                            [str(build.binary), *lesson.args, *spec.program_args],
                                            log_path, xml_path, extra=spec.args)
                timeout = spec.timeout or manifest.timeout(lesson) * 10
                run = runner(command, timeout=timeout * options.timeout_scale, env=env,
                             cwd=build.binary.parent)
                log_bytes = log_path.read_bytes() if log_path.exists() else b""
                xml_bytes = xml_path.read_bytes() if xml_path.exists() and xml_path.stat().st_size else None
            outcome = PassResult(tool=tool, command=command, seconds=round(run.seconds, 3),
                                 exit_status=run.returncode, timed_out=run.timed_out)
            if run.timed_out:
                outcome.problems.append(f"{tool}: killed after {run.seconds:.0f} s (timeout {timeout:g} s)")
            else:
                try:
                    report = build_report(Tool(tool), run.returncode if run.returncode is not None else -1,
                                          log_bytes.decode("utf-8", "replace"),
                                          xml_bytes.decode("utf-8", "replace") if xml_bytes else None,
                                          version=toolchain.sanitizer_version,
                                          log_path=f"{lesson.id} {tool}.log", xml_path=f"{lesson.id} {tool}.xml")
                    expectation = Expectation(tool=Tool(tool), findings=resolve_snippets(manifest, lesson, spec.findings),
                                              allow_other=spec.allow_other)
                    judge_pass(outcome, report, expectation)
                    outcome.report = report.model_dump(mode="json")
                except CoursectlError as exc:
                    outcome.problems.append(f"{tool}: {exc}")
                # The program's own gates still hold under the sanitizer.
                stdout = strip_sanitizer_lines(decode_output(run.stdout))
                try:
                    transcript = parse_transcript(lesson.output, stdout, f"{lesson.id} stdout under {tool}")
                    for claim in evaluate_claims(lesson.output, transcript, lesson.claims):
                        if claim.kind == "gate" and not claim.held:
                            outcome.problems.append(f"{tool}: gate {claim.id!r} failed under the sanitizer: "
                                                    + "; ".join(claim.failures[:3]))
                except TranscriptError as exc:
                    outcome.problems.append(f"{tool}: program output under the sanitizer: {exc}")
            result.sanitizers.append(outcome.model_dump(mode="json"))
            result.reasons += outcome.problems
            extra[f"{tool}.log"] = log_bytes
            if xml_bytes:
                extra[f"{tool}.xml"] = xml_bytes
        if result.reasons and not result.status.is_failure:
            result.status = Status.FAIL
        return extra

    return step

