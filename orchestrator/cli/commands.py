"""The commands that run lessons: doctor, build, run, verify, record, sanitize, render.

Each parses its arguments, picks a workflow (workflows/pipeline.py) and prints
(cli/display.py); cli/common.py's handle_errors maps what it raises to an exit status.

The workflows and the renderer (20-45 ms each) are imported inside the commands
that use them, and so are the reports and the drift and compare workflows
(4-7 ms each, but 11 ms of `coursectl --help` together); each says the time it
defers: CPU time of the import in a fresh process after cli/main.py's, without
.pyc and with. Every other import is at the top.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
import types
from pathlib import Path
from typing import List, Optional

import typer
import typer.core
from rich.table import Table

from . import annotations, common, display
from .common import (LAST_REPORT, AllOpt, ArchOpt, CollectOnlyOpt, Command, DriftOpt, ExitFirstOpt, FailedFromOpt,
                     GpusOpt, JobsOpt, JsonOpt, JunitOpt, KeywordOpt, LastFailedOpt, LessonsArg, ManifestOpt, QuietOpt,
                     RejudgeOpt, RepeatOpt, RetriesOpt, SanitizerJobsOpt, ShardOpt, StartGapOpt, StrictOpt, VerboseOpt,
                     app, handle_errors, jobs_or_cores, json_to_stdout, lesson_ids_to_complete, load, seconds_option,
                     write_reports)
from ..names import check_arch
from ..cuda.build import cache_root
from ..cuda.buildkey import describe_host_compiler
from ..cuda.resources import RESOURCE_FIELDS
from ..cuda.toolchain import discover
from ..errors import CoursectlError, Interrupted, NothingSelected, RunFailed, UsageError, describe_os_error
from ..judge.evidence import list_gpus
from ..judge.results import Options, run_verdict
from ..manifest.model import Lesson, Manifest
from ..manifest.passes import Tool
from ..manifest.selection import choose_lessons, keep_failed, shard_lessons
from ..words import plural
from ..trace import span


def _discover():
    with span("find the tools", "coursectl"):
        return discover()


def _selected(manifest: Manifest, lesson_ids: Optional[List[str]], *, all_: bool, keyword: Optional[str],
              shard: Optional[str] = None, last_failed: bool = False,
              failed_from: Optional[Path] = None) -> tuple[list[Lesson], str]:
    """The lessons a command takes: ids, --all, -k, then --last-failed or --failed-from, then --shard.

    Also what to say when -k left none (the command then exits 5, as pytest's `no tests ran`); empty otherwise.
    """
    if last_failed and failed_from is not None:
        raise UsageError("--last-failed and --failed-from both pick the lessons that failed: give one")
    rerun = last_failed or failed_from is not None
    lessons = choose_lessons(manifest, lesson_ids, all_=all_ or (rerun and not lesson_ids), keyword=keyword)
    emptied = ""
    if keyword and not lessons:
        emptied = f"-k {keyword!r} selected none of the {plural(len(manifest.lessons), 'lesson')}"
    if rerun and lessons:
        failed, source = _failed_in(manifest, failed_from)
        lessons, said = keep_failed(lessons, failed, source)
        option = "--failed-from" if failed_from is not None else "--last-failed"
        common.err_console.print(f"coursectl: {option}: {said}", markup=False, highlight=False, soft_wrap=True)
    if shard:
        lessons = shard_lessons(lessons, shard)
    return lessons, emptied


def _failed_in(manifest: Manifest, failed_from: Optional[Path]) -> tuple[Optional[list[str]], str]:
    """The lessons that failed in a report (--failed-from's, else the last verify's), as its own verdict counts them
    (run_verdict: with a --strict report, those not verified too); None when there is no last report."""
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import read_json

    if failed_from is not None:
        report = read_json(failed_from)   # missing or no report: a usage error naming it
        source = str(failed_from)
    else:
        path = cache_root(manifest) / LAST_REPORT
        source = str(path)
        if not path.exists():
            return None, source
        try:
            report = read_json(path)
        except UsageError as exc:   # a damaged cache entry is a miss, said
            common.err_console.print(f"coursectl: warning: {exc}; it is not read", markup=False, soft_wrap=True)
            return None, source
    verdict = report.verdict()
    return [r.lesson for r in report.results if verdict.counts_as_failed(r)], source


def _collect(manifest: Manifest, lessons: list[Lesson], emptied: str) -> None:
    """--collect-only: one id a line, then `N lessons selected, M deselected`; nothing built or run."""
    for lesson in lessons:
        common.console.print(lesson.id, markup=False, highlight=False, soft_wrap=True)
    common.console.print(f"{plural(len(lessons), 'lesson')} selected, {len(manifest.lessons) - len(lessons)} "
                         "deselected", markup=False, highlight=False)
    if emptied:
        raise NothingSelected(emptied)


@app.command(cls=Command)
@handle_errors
def doctor(manifest_path: Path = ManifestOpt) -> None:
    """Show nvcc, the host compiler, the GPUs, driver, CUDA, compute-sanitizer, and which lessons have evidence.

    Exits 0 when nvcc is usable, even without a GPU (verify --offline needs
    none); 3 when nvcc, which every build needs, is missing.
    """
    tc = _discover()
    table = Table(show_header=False, show_edge=False)
    table.add_row("nvcc", tc.describe("nvcc"))
    table.add_row("host compiler", describe_host_compiler())
    table.add_row("compute-sanitizer", tc.describe("compute-sanitizer"))
    table.add_row("driver", tc.driver_version or "-")
    table.add_row("CUDA (driver)", tc.cuda_version or "-")
    table.add_row("GPUs via", tc.gpu_source or "none: verify --offline, build, check, new, compare and render work here")
    for gpu in tc.gpus:
        table.add_row(f"GPU {gpu.index}", f"{gpu.name}, compute capability {gpu.compute_capability}, "
                                          f"{gpu.memory_mib} MiB, {gpu.pci_bus_id}, {gpu.uuid}")
    for note in tc.notes:
        table.add_row("note", note)
    display.print_table(common.console, table)
    manifest = None
    try:
        manifest = load(manifest_path)
    except CoursectlError as exc:
        common.err_console.print(f"coursectl: {exc}", markup=False, soft_wrap=True)
    if manifest is not None:
        slugs = sorted({g.slug for g in tc.gpus})
        ev = Table(title="evidence", title_justify="left", show_edge=False)
        ev.add_column("lesson")
        ev.add_column("recorded on")
        for slug in slugs:
            ev.add_column(f"this {slug}")
        for lesson in manifest.lessons:
            have = list_gpus(manifest.root, lesson.id)
            ev.add_row(lesson.id, ", ".join(have) or "none", *("yes" if s in have else "NO" for s in slugs))
        display.print_table(common.console, ev)
    tc.require_nvcc()


@app.command(cls=Command)
@handle_errors
def build(lesson_ids: Optional[List[str]] = LessonsArg, *, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
          jobs: Optional[int] = JobsOpt, arch: Optional[str] = ArchOpt, collect_only: bool = CollectOnlyOpt,
          manifest_path: Path = ManifestOpt,
          verbose: int = typer.Option(0, "--verbose", "-v", count=True, show_default=False,
                                      help="Also each nvcc command and ptxas' report of every kernel.")) -> None:
    """Build lessons with nvcc, in parallel, reusing cached binaries; a line per build as it finishes.

    With -v, also each nvcc command and ptxas' report of every kernel, as claims read it:
    `resources['saxpy']: registers 16, spill_stores 0, ...`.
    """
    # deferred: 44 ms of imports (workflows, render, jinja2; 25 from .pyc) that --help and doctor never need
    from ..workflows.pipeline import build_many

    if arch is not None:
        check_arch(arch)
    manifest = load(manifest_path)
    lessons, emptied = _selected(manifest, lesson_ids, all_=all_, keyword=keyword)
    if collect_only:
        return _collect(manifest, lessons, emptied)
    tc = _discover()
    tc.require_nvcc()
    archs = [arch] if arch else (sorted({g.arch for g in tc.gpus}) or list(manifest.architectures))

    def show(event) -> None:
        result = event.build
        if result is None:
            return
        state = "cached" if result.cached else f"built in {result.seconds:.1f} s"
        common.console.print(f"{event.lesson} ({result.arch}): {state}: {result.binary}", markup=False, soft_wrap=True)
        for note in result.notes:
            common.err_console.print(f"{event.lesson} ({result.arch}): {note}", markup=False, soft_wrap=True)
        if verbose:
            common.console.print(f"  $ {shlex.join(result.command)}", markup=False, soft_wrap=True)
            for name, kernel in result.resources.items():   # what a claim over `resources` reads, as it reads it
                common.console.print(f"  resources[{name!r}]: " + ", ".join(
                    f"{key} {getattr(kernel, key)}" for key in RESOURCE_FIELDS), markup=False, soft_wrap=True)
        if result.diagnostics.strip() and not result.cached:
            common.err_console.print(result.diagnostics.rstrip(), markup=False, soft_wrap=True)

    if not lessons:   # a -k that matches nothing: say so, as verify does, rather than print nothing
        common.console.print("no lesson was selected, nothing was built", markup=False)
        if emptied:
            raise NothingSelected(emptied)
        return
    built = build_many(manifest, [(l, a) for l in lessons for a in archs], tc, jobs_or_cores(jobs), emit=show)
    failed = [result for _, _, result in built if isinstance(result, CoursectlError)]
    for error in failed:
        common.err_console.print(f"coursectl: error: {error}", markup=False, soft_wrap=True)
    if failed:
        raise RunFailed()


@app.command(cls=Command)
@handle_errors
def run(lesson_id: str = typer.Argument(..., metavar="LESSON", autocompletion=lesson_ids_to_complete, help="The lesson to run."),
        arch: Optional[str] = ArchOpt,
        gpu: Optional[str] = typer.Option(None, "--gpu", metavar="ID", help="GPU index or UUID (default: the first)."),
        manifest_path: Path = ManifestOpt) -> None:
    """Build and run one lesson on a GPU and print its transcript."""
    # deferred: 44 ms of imports (workflows, render, jinja2; 25 from .pyc) that --help and doctor never need
    from ..workflows.pipeline import run as run_workflow

    if arch is not None:
        check_arch(arch)
    manifest = load(manifest_path)
    lesson = choose_lessons(manifest, [lesson_id], all_=False)[0]
    tc = _discover()
    gpus = tc.require_gpu()
    result, command = run_workflow(manifest, lesson, tc, Options(jobs=1, arch=arch, gpus=gpu or str(gpus[0].index)))
    if command is not None:
        sys.stdout.write(command.stdout.decode("utf-8", "replace"))
        if command.stderr:
            sys.stderr.write(command.stderr.decode("utf-8", "replace"))
    for reason in result.reasons:
        common.err_console.print(f"{lesson.id}: {reason}", markup=False, soft_wrap=True)
    if result.status.is_failure:
        raise RunFailed()


def check_report_paths(manifest: Manifest, paths: dict, *, stdout: str = "") -> None:
    """cli/report.py's check of the report paths given, before anything runs (a usage error: exit 2)."""
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import check_report_paths as check

    check(manifest, paths, stdout=stdout)


@contextlib.contextmanager
def _reported(title: str, manifest: Manifest, tc, json_path, junit_path, *, quiet: bool, verbosity: int,
              offline: bool = False, shard: Optional[str] = None, strict: bool = False,
              drift_path: Optional[Path] = None, last_report: Optional[Path] = None, emptied: str = "", selection=None):
    """Run a workflow inside; then print its results and write its reports, also when it was interrupted.

    Exits 1 if any lesson failed (with strict: or was not verified); 5 when
    -k selected nothing (`emptied` says so); an interrupt still exits 130
    once the reports are written. `last_report`: where the JSON report is
    also kept, for --last-failed, unless the run was interrupted.
    """
    def print_line(line: str) -> None:
        common.console.print(line, markup=False, highlight=False, soft_wrap=True)

    outcome = types.SimpleNamespace(results=[])
    interrupted = None
    started = time.monotonic()
    # Lessons' lines are printed inside: no workflow command is taken from them (see annotations).
    stopped = contextlib.ExitStack()
    stopped.enter_context(annotations.commands_stopped(print_line))
    with stopped:
        try:
            yield outcome
        except Interrupted as exc:
            outcome.results, interrupted = exc.results, exc
        results = outcome.results
        with span("report", "coursectl"):
            # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
            from .report import make_report, report_json

            if verbosity >= 2:
                display.print_commands(common.console, results)
            if not quiet:
                display.print_details(common.console, results, verbosity)
            display.print_summary(common.console, results, title)
            tally = display.print_tally(common.console, results, time.monotonic() - started,
                                        run_verdict(results, strict=strict), display.deselected(selection))
            stopped.close()   # workflow commands again, for coursectl's own annotations
            annotations.publish(manifest, results, title, tally, print_line)
            if drift_path:
                # deferred: 4 ms (judge/drift.py; 1 from .pyc) kept off --help; the pipeline has loaded it by now
                from ..judge.drift import write_drift_report
                write_drift_report(drift_path, title, results, tc)
            report = make_report(title, results, tc, manifest, offline=offline, shard=shard, strict=strict,
                                 selection=selection)
            kept = last_report is not None and interrupted is None
            text = report_json(report) if kept and json_path else None   # one dump for --json and the cache
            write_reports(report, json_path, junit_path, raise_on_failure=False, json_text=text)
            # After the reports asked for (a full disk is said once, for those); an interrupted run leaves the
            # cache as it was, and --last-failed the last run that ended.
            if kept:
                _keep_last(report, last_report, text)
            if report.verdict().failed and interrupted is None and not emptied:
                raise RunFailed()
    if interrupted is not None:
        raise interrupted
    if emptied and not outcome.results:
        raise NothingSelected(emptied)


def _keep_last(report, path: Path, text: str | None = None) -> None:
    """The report, written whole or not at all, for --last-failed; a cache that cannot be written is said, not fatal."""
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import write_json

    try:
        write_json(report, path, text)
    except OSError as exc:
        common.err_console.print(f"coursectl: warning: {describe_os_error(exc)}: --last-failed will not see this "
                                 "run", markup=False, soft_wrap=True)


@app.command(cls=Command)
@handle_errors
def verify(lesson_ids: Optional[List[str]] = LessonsArg, *, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
           offline: bool = typer.Option(False, "--offline", help="No GPU: build for the manifest's "
                                        "architectures and re-judge the recorded evidence."),
           jobs: Optional[int] = JobsOpt, arch: Optional[str] = ArchOpt, gpus: Optional[str] = GpusOpt,
           shard: Optional[str] = ShardOpt,
           no_sanitize: bool = typer.Option(False, "--no-sanitize", help="Skip the compute-sanitizer passes."),
           repeat: int = RepeatOpt, exitfirst: bool = ExitFirstOpt, strict: bool = StrictOpt,
           rerun_sanitizers: bool = typer.Option(False, "--rerun-sanitizers",
                                                 help="Run every compute-sanitizer pass, also those whose result "
                                                      "the sanitizer cache holds."),
           sanitizer_jobs: Optional[int] = SanitizerJobsOpt, start_gap: Optional[float] = StartGapOpt,
           json_path: Optional[Path] = JsonOpt, junit_path: Optional[Path] = JunitOpt,
           drift_path: Optional[Path] = DriftOpt, last_failed: bool = LastFailedOpt,
           failed_from: Optional[Path] = FailedFromOpt, retries: int = RetriesOpt, collect_only: bool = CollectOnlyOpt,
           rejudge: bool = RejudgeOpt, quiet: bool = QuietOpt, verbose: int = VerboseOpt,
           manifest_path: Path = ManifestOpt) -> None:
    """Build, run, sanitize, parse, check claims and compare with this GPU's evidence.

    Its JSON report is also kept in $COURSECTL_CACHE/last-report.json, for --last-failed. Exits 0 when
    verified, 1 when a lesson failed (with --strict: or was not verified), 5 when -k selected nothing.
    """
    # deferred: 44 ms of imports (workflows, render, jinja2; 25 from .pyc) that --help and doctor never need
    from ..workflows.pipeline import verify as verify_workflow, verify_offline

    if arch is not None:
        check_arch(arch)
    start_gap = seconds_option("--start-gap", start_gap)
    json_to_stdout(json_path)
    if offline and drift_path:
        raise UsageError("--report compares a run on a GPU with the evidence; --offline runs nothing")
    if offline:   # options for runs that --offline never makes: said, not silently dropped
        given = [name for name, used in (("--gpus", gpus is not None), ("--repeat", repeat != 1),
                                         ("--rerun-sanitizers", rerun_sanitizers),
                                         ("--sanitizer-jobs", sanitizer_jobs is not None),
                                         ("--start-gap", start_gap is not None),
                                         ("--retries", retries != 0)) if used]
        if given:
            raise UsageError(f"{', '.join(given)}: for runs on a GPU; --offline runs nothing on one")
    elif rejudge:
        raise UsageError("--rejudge: for --offline, which re-judges the recorded evidence; a run on a GPU judges "
                         "every lesson it runs")
    manifest = load(manifest_path)
    check_report_paths(manifest, {"--json": json_path, "--junit": junit_path, "--report": drift_path}, stdout="--json")
    lessons, emptied = _selected(manifest, lesson_ids, all_=all_, keyword=keyword, shard=shard,
                                 last_failed=last_failed, failed_from=failed_from)
    if collect_only:
        return _collect(manifest, lessons, emptied)
    tc = _discover()
    options = Options(jobs=jobs_or_cores(jobs), arch=arch, gpus=gpus, sanitize=not no_sanitize and not offline,
                      repeat=repeat, exitfirst=exitfirst, rerun_sanitizers=rerun_sanitizers,
                      sanitizer_jobs=sanitizer_jobs, start_gap=start_gap, retries=retries, rejudge=rejudge)
    title = "verify --offline" if offline else "verify"
    if offline:
        tc.require_nvcc()   # before the note below, which would promise checks that never come
        if any(manifest.sanitizers(l) for l in lessons) and not quiet:   # -q: the summary, not this note
            common.console.print("offline: compute-sanitizer passes skipped (they need a GPU); "
                          "recorded sanitizer reports are checked with the evidence", highlight=False)
        workflow = verify_offline
    else:
        tc.require_nvcc()
        tc.require_gpu(hint="on a machine without a GPU use --offline")
        if options.sanitize and any(manifest.sanitizers(l) for l in lessons):
            tc.require_sanitizer()
        workflow = verify_workflow
    selection = display.selection_of(manifest, lesson_ids, keyword, shard, lessons)
    with _reported(title, manifest, tc, json_path, junit_path, quiet=quiet, verbosity=verbose, offline=offline,
                   shard=shard, strict=strict, drift_path=drift_path, last_report=cache_root(manifest) / LAST_REPORT,
                   emptied=emptied, selection=selection) as outcome:
        with display.Progress(common.console, [l.id for l in lessons], quiet=quiet, stages=verbose >= 1) as progress:
            outcome.results = workflow(manifest, lessons, tc, options, progress) if lessons else []


@app.command(cls=Command)
@handle_errors
def record(lesson_ids: Optional[List[str]] = LessonsArg, *, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
           shard: Optional[str] = ShardOpt, jobs: Optional[int] = JobsOpt, gpus: Optional[str] = GpusOpt,
           no_sanitize: bool = typer.Option(False, "--no-sanitize", help="Skip the compute-sanitizer passes; the "
                                            "recorded sanitizer reports are kept."),
           repeat: int = typer.Option(1, "--repeat", min=1, metavar="N",
                                      help="Run each lesson N times; keep the run nearest the medians; suggest tolerances."),
           dry_run: bool = typer.Option(False, "--dry-run", help="Run, judge and show what would be written "
                                        "and what moved; write nothing."),
           sanitizer_jobs: Optional[int] = SanitizerJobsOpt, start_gap: Optional[float] = StartGapOpt,
           json_path: Optional[Path] = JsonOpt, drift_path: Optional[Path] = DriftOpt,
           collect_only: bool = CollectOnlyOpt, quiet: bool = QuietOpt, verbose: int = VerboseOpt,
           manifest_path: Path = ManifestOpt) -> None:
    """Run lessons and store their evidence for this GPU, if every gate passes; show what moved."""
    # deferred: 44 ms of imports (workflows, render, jinja2; 25 from .pyc) that --help and doctor never need
    from ..workflows.pipeline import record as record_workflow

    start_gap = seconds_option("--start-gap", start_gap)
    json_to_stdout(json_path)
    manifest = load(manifest_path)
    check_report_paths(manifest, {"--json": json_path, "--report": drift_path}, stdout="--json")
    lessons, emptied = _selected(manifest, lesson_ids, all_=all_, keyword=keyword, shard=shard)
    if collect_only:
        return _collect(manifest, lessons, emptied)
    tc = _discover()
    tc.require_nvcc()
    tc.require_gpu()
    options = Options(jobs=jobs_or_cores(jobs), gpus=gpus, sanitize=not no_sanitize, repeat=repeat, dry_run=dry_run,
                      sanitizer_jobs=sanitizer_jobs, start_gap=start_gap)
    if options.sanitize and any(manifest.sanitizers(l) for l in lessons):
        tc.require_sanitizer()
    title = "record --dry-run" if dry_run else "record"
    with _reported(title, manifest, tc, json_path, None, quiet=True, verbosity=verbose, drift_path=drift_path,
                   shard=shard, emptied=emptied,
                   selection=display.selection_of(manifest, lesson_ids, keyword, shard, lessons)) as outcome:
        with display.Progress(common.console, [l.id for l in lessons], quiet=quiet, stages=verbose >= 1) as progress:
            outcome.results = record_workflow(manifest, lessons, tc, options, progress) if lessons else []
        if not quiet:
            for result in outcome.results:
                display.print_provenance(common.console, result)
                if result.recorded or dry_run:
                    display.print_fields(common.console, result, [f for f in result.fields if verbose >= 2 or
                                                           f.status.value not in ("same", "volatile", "other-gpu")])
                display.print_suggestions(common.console, result)


@app.command(cls=Command)
@handle_errors
def sanitize(lesson_id: str = typer.Argument(..., metavar="LESSON", autocompletion=lesson_ids_to_complete, help="The lesson to run under compute-sanitizer."),
             tool: Optional[List[str]] = typer.Option(None, "--tool", "-t", metavar="TOOL",
                                                      help="memcheck, racecheck, synccheck or initcheck "
                                                           "(default: the lesson's declared passes)."),
             gpu: Optional[str] = typer.Option(None, "--gpu", metavar="ID", help="GPU index or UUID."),
             json_path: Optional[Path] = JsonOpt, verbose: int = VerboseOpt,
             manifest_path: Path = ManifestOpt) -> None:
    """Run compute-sanitizer passes on one lesson and judge them against its expectations."""
    # deferred: 44 ms of imports (workflows, render, jinja2; 25 from .pyc) that --help and doctor never need
    from ..workflows.pipeline import sanitize as sanitize_workflow

    json_to_stdout(json_path)
    tools = [t.value for t in Tool]
    for t in tool or []:
        if t not in tools:
            raise UsageError(f"--tool {t!r}: use one of {', '.join(tools)}")
    manifest = load(manifest_path)
    check_report_paths(manifest, {"--json": json_path}, stdout="--json")
    lesson = choose_lessons(manifest, [lesson_id], all_=False)[0]
    tc = _discover()
    tc.require_nvcc()
    tc.require_gpu()
    options = Options(jobs=2, gpus=gpu, sanitize_tools=list(tool) if tool else None)
    with _reported("sanitize", manifest, tc, json_path, None, quiet=True, verbosity=verbose) as outcome:
        with display.Progress(common.console, [lesson.id], quiet=False, stages=verbose >= 1) as progress:
            outcome.results = [sanitize_workflow(manifest, lesson, tc, options, progress)]
        for p in outcome.results[0].sanitizers:
            common.console.print(f"{lesson.id} {p.tool}: {p.findings} finding(s) in "
                          f"{', '.join(p.kernels) or 'no kernel'}, errors {p.errors}, "
                          f"{p.seconds:.1f} s: {p.verdict}", markup=False)


@app.command(cls=Command)
@handle_errors
def render(*, check: bool = typer.Option(False, "--check", help="Write nothing; print a diff of every file that "
                                      "would change and exit 1 if any would (for CI)."),
           manifest_path: Path = ManifestOpt) -> None:
    """Regenerate the lesson pages, the README's lessons table and the sources' Build/Run/Verified lines."""
    # deferred: 35 ms of imports (render, jinja2; 21 from .pyc) that --help and doctor never need
    from ..render.course import diff_pages, render_all, write_pages

    manifest = load(manifest_path)
    before = len(manifest.warnings)
    pages = render_all(manifest)
    for warning in manifest.warnings[before:]:   # what the pages found: a day mention left as text
        common.err_console.print(f"coursectl: warning: {warning}", markup=False, soft_wrap=True)
    if check:
        diff = diff_pages(pages)
        if diff:
            typer.echo(diff, nl=False)
            common.err_console.print(f"coursectl: {sum(p.changed for p in pages)} page(s) are stale; "
                              f"run `coursectl render`", markup=False)
            raise RunFailed()
        common.console.print("every page is up to date")
        return
    written = write_pages(pages)
    for page in written:
        common.console.print(f"wrote {page.name}", markup=False, soft_wrap=True)
    if not written:
        common.console.print("every page is up to date")


if __name__ == "__main__":
    app()
