"""The command line: parse arguments, pick a workflow, print, map errors to exit statuses.

The workflows, the toolchain probe, the renderer and the reports are imported
inside the commands that use them: `coursectl --help` then starts in about
0.35 s instead of 0.5 s.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
import types
from enum import Enum
from pathlib import Path
from typing import Callable, List, Optional

import typer
import typer.core
from rich.console import Console
from rich.table import Table

from .. import __version__
from . import display
from ..errors import INTERRUPTED, CoursectlError, Interrupted, UsageError, describe_os_error
from ..manifest.model import Manifest
from ..manifest.load import load_manifest
from ..manifest.selection import choose_lessons
from ..trace import recording, span
from ..judge.results import Options
from ..manifest.passes import Tool

class Command(typer.core.TyperCommand):
    """A command whose --help names values by their metavar (FILE, N, sm_NN), never by a Python type."""

    def get_help(self, ctx) -> str:
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None   # the metavar says it: LESSON...
        return super().get_help(ctx)


class Group(typer.core.TyperGroup):
    """The root command. A Ctrl-C that lands outside a command's own handling (handle_errors), as the
    command starts or ends, ends as one inside does: one line and exit 130, where typer and click would
    end it, by their versions, with `Aborted!` and exit 1 or with exit 130 and not a word."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            err_console.print(INTERRUPTED, markup=False)
            raise typer.Exit(130)


app = typer.Typer(cls=Group, no_args_is_help=True, rich_markup_mode=None,
                  help="Build, run, sanitize, verify, record and render the lessons of a CUDA course.")
report_app = typer.Typer(no_args_is_help=True, help="Work with JSON reports.")
schema_app = typer.Typer(no_args_is_help=True, help="Print the JSON Schemas of coursectl's files.")
app.add_typer(report_app, name="report", help="Work with JSON reports (merge shards).")
app.add_typer(schema_app, name="schema", help="Print the JSON Schema of the report or of lessons.yaml.")


class Color(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


_color = Color.auto


def _consoles() -> tuple[Console, Console]:
    """Consoles for this command, made when it starts (not at import).

    In a CI log (no terminal, no COLUMNS) rich would assume 80 columns and
    fold the tables; logs have room. --color always/never win over the
    environment; with auto, NO_COLOR turns every escape off and FORCE_COLOR
    turns colour on without a terminal.
    """
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    color = _color
    if color is Color.auto and os.environ.get("NO_COLOR"):
        color = Color.never
    elif color is Color.auto and os.environ.get("FORCE_COLOR"):
        color = Color.always
    style: dict = {Color.always: {"force_terminal": True}, Color.never: {"color_system": None, "no_color": True},
                   Color.auto: {}}[color]
    return (Console(highlight=False, width=width, **style),
            Console(stderr=True, highlight=False, width=width, **style))


console, err_console = _consoles()

# readable=False: click's own check turned an unreadable lessons.yaml into a `Usage:` block, and doctor then
# printed nothing; coursectl's reader says what is wrong with the file, as for every other file it reads.
ManifestOpt = typer.Option(Path("lessons.yaml"), "--manifest", "-m", metavar="FILE", readable=False,
                           help="The course manifest.")
LessonsArg = typer.Argument(None, metavar="LESSON", show_default=False,
                            help="Lesson ids (see lessons.yaml); none with --all or -k.")
AllOpt = typer.Option(False, "--all", help="Every lesson in the manifest.")
KeywordOpt = typer.Option(None, "-k", metavar="PATTERN",
                          help="Only lessons whose id or title contains PATTERN, or matches it as a glob (day1*).")
JobsOpt = typer.Option(None, "--jobs", "-j", min=1, metavar="N", help="Parallel builds (default: all cores).")
ArchOpt = typer.Option(None, "--arch", metavar="sm_NN", help="Build for this architecture instead of the GPU's.")
GpusOpt = typer.Option(None, "--gpus", metavar="IDS", help="GPUs to use: indices or UUIDs, comma-separated.")
RepeatOpt = typer.Option(1, "--repeat", min=1, metavar="N",
                         help="Run each lesson N times; judge timings by their median.")
JsonOpt = typer.Option(None, "--json", metavar="FILE", help="Write the JSON report here; - for standard output.")
JunitOpt = typer.Option(None, "--junit", metavar="FILE", help="Write a JUnit XML report here.")
StrictOpt = typer.Option(False, "--strict", help="Count NO_EVIDENCE, UNSUPPORTED, SKIPPED and an empty "
                                                 "selection as failures (exit 1).")
ExitFirstOpt = typer.Option(False, "--exitfirst", "-x", help="Stop at the first failing lesson; the rest are SKIPPED.")
QuietOpt = typer.Option(False, "--quiet", "-q", help="Only the summary table, the reasons and notes under it, and the tally.")
SanitizerJobsOpt = typer.Option(None, "--sanitizer-jobs", min=1, metavar="N",
                                help="Sanitizer passes at once on each GPU (default: 6, and the CPU cores in "
                                     "all; fewer where the GPU's free memory holds fewer).")
StartGapOpt = typer.Option(None, "--start-gap", min=0.0, max=10.0, metavar="SECONDS",
                           help="Start timed runs on different GPUs at least this far apart, as CUDA programs "
                                "start one at a time on a host (default: 0.3; 0: together).")
VerboseOpt = typer.Option(0, "--verbose", "-v", count=True, show_default=False,
                          help="-v: also every stage and each lesson's claims; -vv: also every field and command.")
DriftOpt = typer.Option(None, "--report", metavar="FILE.md",
                        help="Write a Markdown drift report here (for the pull request): what changed underneath, "
                             "the fields that moved, the claims and sanitizer findings that changed.")


def _version(value: bool) -> None:
    if value:
        console.print(f"coursectl {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
         color: Color = typer.Option(Color.auto, "--color", help="Colour: auto (honours NO_COLOR and FORCE_COLOR), "
                                                                  "always or never.")) -> None:
    """coursectl keeps a CUDA course honest."""
    global _color
    _color = color


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def handle_errors(func: Callable) -> Callable:
    """The one place where exceptions become messages and exit statuses."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        global console, err_console
        console, err_console = _consoles()
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            with recording():
                return func(*args, **kwargs)
        except KeyboardInterrupt:
            err_console.print(INTERRUPTED, markup=False)
            raise typer.Exit(130)
        except CoursectlError as exc:
            err_console.print(f"coursectl: error: {exc}", markup=False, soft_wrap=True)
            if exc.hint:
                err_console.print(f"hint: {exc.hint}", markup=False, soft_wrap=True)
            raise typer.Exit(exc.exit_status)
        except OSError as exc:
            # A full disk or a read-only folder: one line naming the file, never a traceback.
            err_console.print(f"coursectl: error: {describe_os_error(exc)}", markup=False, soft_wrap=True)
            raise typer.Exit(1)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


def load(manifest_path: Path) -> Manifest:
    """load_manifest, then each of its warnings on standard error: `coursectl: warning: lessons.yaml:N: ...`."""
    with span("load the manifest", "coursectl"):
        manifest = load_manifest(manifest_path)
    from ..judge.evidence import evidence_of_no_lesson

    stray = [f"evidence/{name}/: no lesson '{name}' in {manifest.path.name}, so nothing checks this evidence "
             "(a lesson renamed or removed?): move it to the lesson's id, or delete it"
             for name in evidence_of_no_lesson(manifest.root, (lesson.id for lesson in manifest.lessons))]
    for warning in [*manifest.warnings, *stray]:
        err_console.print(f"coursectl: warning: {warning}", markup=False, soft_wrap=True)
    return manifest


def _jobs(jobs: Optional[int]) -> int:
    return jobs if jobs and jobs > 0 else (os.cpu_count() or 1)


def _discover():
    from ..cuda.toolchain import discover
    with span("find the tools", "coursectl"):
        return discover()


def json_to_stdout(json_path: Optional[Path]) -> None:
    """With `--json -` the report owns standard output; everything else goes to standard error."""
    global console
    if json_path is not None and str(json_path) == "-":
        console = err_console


@app.command(cls=Command)
@handle_errors
def doctor(manifest_path: Path = ManifestOpt) -> None:
    """Show nvcc, the host compiler, the GPUs, driver, CUDA, compute-sanitizer, and which lessons have evidence.

    Exits 0 when nvcc is usable, even without a GPU (verify --offline needs
    none); 3 when nvcc, which every build needs, is missing.
    """
    from ..cuda.build import describe_host_compiler
    from ..judge.evidence import list_gpus

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
    display.print_table(console, table)
    manifest = None
    try:
        manifest = load(manifest_path)
    except CoursectlError as exc:
        err_console.print(f"coursectl: {exc}", markup=False, soft_wrap=True)
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
        display.print_table(console, ev)
    tc.require_nvcc()


@app.command(cls=Command)
@handle_errors
def build(lesson_ids: Optional[List[str]] = LessonsArg, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
          jobs: Optional[int] = JobsOpt, arch: Optional[str] = ArchOpt, manifest_path: Path = ManifestOpt,
          verbose: int = typer.Option(0, "--verbose", "-v", count=True, show_default=False,
                                      help="Also each nvcc command and ptxas' report of every kernel.")) -> None:
    """Build lessons with nvcc, in parallel, reusing cached binaries; a line per build as it finishes.

    With -v, also each nvcc command and ptxas' report of every kernel, as claims read it:
    `resources['saxpy']: registers 16, spill_stores 0, ...`.
    """
    import shlex

    from ..cuda.build import check_arch
    from ..workflows.pipeline import build_many
    from ..cuda.resources import RESOURCE_FIELDS

    if arch is not None:
        check_arch(arch)
    manifest = load(manifest_path)
    lessons = choose_lessons(manifest, lesson_ids, all_, keyword=keyword)
    tc = _discover()
    tc.require_nvcc()
    archs = [arch] if arch else (sorted({g.arch for g in tc.gpus}) or list(manifest.architectures))

    def show(event) -> None:
        result = event.build
        if result is None:
            return
        state = "cached" if result.cached else f"built in {result.seconds:.1f} s"
        console.print(f"{event.lesson} ({result.arch}): {state}: {result.binary}", markup=False, soft_wrap=True)
        for note in result.notes:
            err_console.print(f"{event.lesson} ({result.arch}): {note}", markup=False, soft_wrap=True)
        if verbose:
            console.print(f"  $ {shlex.join(result.command)}", markup=False, soft_wrap=True)
            for name, kernel in result.resources.items():   # what a claim over `resources` reads, as it reads it
                console.print(f"  resources[{name!r}]: " + ", ".join(
                    f"{key} {getattr(kernel, key)}" for key in RESOURCE_FIELDS), markup=False, soft_wrap=True)
        if result.diagnostics.strip() and not result.cached:
            err_console.print(result.diagnostics.rstrip(), markup=False, soft_wrap=True)

    if not lessons:   # a -k that matches nothing: say so, as verify does, rather than print nothing
        console.print("no lesson was selected, nothing was built", markup=False)
        return
    built = build_many(manifest, [(l, a) for l in lessons for a in archs], tc, _jobs(jobs), emit=show)
    failed = [result for _, _, result in built if isinstance(result, CoursectlError)]
    for error in failed:
        err_console.print(f"coursectl: error: {error}", markup=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


@app.command(cls=Command)
@handle_errors
def run(lesson_id: str = typer.Argument(..., metavar="LESSON", help="The lesson to run."),
        arch: Optional[str] = ArchOpt,
        gpu: Optional[str] = typer.Option(None, "--gpu", metavar="ID", help="GPU index or UUID (default: the first)."),
        manifest_path: Path = ManifestOpt) -> None:
    """Build and run one lesson on a GPU and print its transcript."""
    from ..cuda.build import check_arch
    from ..workflows.pipeline import run as run_workflow

    if arch is not None:
        check_arch(arch)
    manifest = load(manifest_path)
    lesson = choose_lessons(manifest, [lesson_id], False)[0]
    tc = _discover()
    gpus = tc.require_gpu()
    result, command = run_workflow(manifest, lesson, tc, Options(jobs=1, arch=arch, gpus=gpu or str(gpus[0].index)))
    if command is not None:
        sys.stdout.write(command.stdout.decode("utf-8", "replace"))
        if command.stderr:
            sys.stderr.write(command.stderr.decode("utf-8", "replace"))
    for reason in result.reasons:
        err_console.print(f"{lesson.id}: {reason}", markup=False, soft_wrap=True)
    if result.status.is_failure:
        raise typer.Exit(1)


@contextlib.contextmanager
def _reported(title: str, manifest: Manifest, tc, json_path, junit_path, quiet: bool, verbosity: int,
              offline: bool = False, shard: Optional[str] = None, strict: bool = False,
              drift_path: Optional[Path] = None):
    """Run a workflow inside; then print its results and write its reports, also when it was interrupted.

    Exits 1 if any lesson failed (with strict: or was not verified); an
    interrupt still exits 130 once the reports are written.
    """
    from . import annotations

    def print_line(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

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
            from .report import make_report

            if verbosity >= 2:
                display.print_commands(console, results)
            if not quiet:
                display.print_details(console, results, verbosity)
            display.print_summary(console, results, title)
            tally = display.print_tally(console, results, time.monotonic() - started, strict)
            stopped.close()   # workflow commands again, for coursectl's own annotations
            annotations.publish(manifest, results, title, tally, print_line)
            if drift_path:
                from ..judge.drift import write_drift_report
                write_drift_report(drift_path, title, results, tc)
            report = make_report(title, results, tc, manifest, offline=offline, shard=shard, strict=strict)
            write_reports(report, json_path, junit_path, raise_on_failure=interrupted is None)
    if interrupted is not None:
        raise interrupted


def write_reports(report, json_path, junit_path, raise_on_failure: bool = True) -> None:
    """Write the reports asked for; exit 1 if the run failed."""
    from .report import write_json, write_junit

    if json_path:
        write_json(report, json_path)
    if junit_path:
        write_junit(report, junit_path)
    if report.has_failed() and raise_on_failure:
        raise typer.Exit(1)


@app.command(cls=Command)
@handle_errors
def verify(lesson_ids: Optional[List[str]] = LessonsArg, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
           offline: bool = typer.Option(False, "--offline", help="No GPU: build for the manifest's "
                                        "architectures and re-judge the recorded evidence."),
           jobs: Optional[int] = JobsOpt, arch: Optional[str] = ArchOpt, gpus: Optional[str] = GpusOpt,
           shard: Optional[str] = typer.Option(None, "--shard", metavar="K/N",
                                               help="Take a deterministic share of the lessons."),
           no_sanitize: bool = typer.Option(False, "--no-sanitize", help="Skip the compute-sanitizer passes."),
           repeat: int = RepeatOpt, exitfirst: bool = ExitFirstOpt, strict: bool = StrictOpt,
           rerun_sanitizers: bool = typer.Option(False, "--rerun-sanitizers",
                                                 help="Run every compute-sanitizer pass, also those whose result "
                                                      "the sanitizer cache holds."),
           sanitizer_jobs: Optional[int] = SanitizerJobsOpt, start_gap: Optional[float] = StartGapOpt,
           json_path: Optional[Path] = JsonOpt, junit_path: Optional[Path] = JunitOpt,
           drift_path: Optional[Path] = DriftOpt,
           quiet: bool = QuietOpt, verbose: int = VerboseOpt, manifest_path: Path = ManifestOpt) -> None:
    """Build, run, sanitize, parse, check claims and compare with this GPU's evidence."""
    from ..cuda.build import check_arch
    from ..workflows.pipeline import verify as verify_workflow, verify_offline

    if arch is not None:
        check_arch(arch)
    json_to_stdout(json_path)
    if offline and drift_path:
        raise UsageError("--report compares a run on a GPU with the evidence; --offline runs nothing")
    if offline:   # options for runs that --offline never makes: said, not silently dropped
        given = [name for name, used in (("--gpus", gpus is not None), ("--repeat", repeat != 1),
                                         ("--rerun-sanitizers", rerun_sanitizers),
                                         ("--sanitizer-jobs", sanitizer_jobs is not None),
                                         ("--start-gap", start_gap is not None)) if used]
        if given:
            raise UsageError(f"{', '.join(given)}: for runs on a GPU; --offline runs nothing on one")
    manifest = load(manifest_path)
    lessons = choose_lessons(manifest, lesson_ids, all_, shard, keyword)
    tc = _discover()
    options = Options(jobs=_jobs(jobs), arch=arch, gpus=gpus, sanitize=not no_sanitize and not offline,
                      repeat=repeat, exitfirst=exitfirst, rerun_sanitizers=rerun_sanitizers,
                      sanitizer_jobs=sanitizer_jobs, start_gap=start_gap)
    title = "verify --offline" if offline else "verify"
    if offline:
        tc.require_nvcc()   # before the note below, which would promise checks that never come
        if any(manifest.sanitizers(l) for l in lessons) and not quiet:   # -q: the summary, not this note
            console.print("offline: compute-sanitizer passes skipped (they need a GPU); "
                          "recorded sanitizer reports are checked with the evidence", highlight=False)
        workflow = verify_offline
    else:
        tc.require_nvcc()
        tc.require_gpu(hint="on a machine without a GPU use --offline")
        if options.sanitize and any(manifest.sanitizers(l) for l in lessons):
            tc.require_sanitizer()
        workflow = verify_workflow
    with _reported(title, manifest, tc, json_path, junit_path, quiet, verbose, offline, shard, strict,
                   drift_path) as outcome:
        with display.Progress(console, [l.id for l in lessons], quiet, stages=verbose >= 1) as progress:
            outcome.results = workflow(manifest, lessons, tc, options, progress) if lessons else []


@app.command(cls=Command)
@handle_errors
def record(lesson_ids: Optional[List[str]] = LessonsArg, all_: bool = AllOpt, keyword: Optional[str] = KeywordOpt,
           jobs: Optional[int] = JobsOpt, gpus: Optional[str] = GpusOpt,
           no_sanitize: bool = typer.Option(False, "--no-sanitize", help="Skip the compute-sanitizer passes; the "
                                            "recorded sanitizer reports are kept."),
           repeat: int = typer.Option(1, "--repeat", min=1, metavar="N",
                                      help="Run each lesson N times; store the run closest to the medians."),
           dry_run: bool = typer.Option(False, "--dry-run", help="Run, judge and show what would be written "
                                        "and what moved; write nothing."),
           sanitizer_jobs: Optional[int] = SanitizerJobsOpt, start_gap: Optional[float] = StartGapOpt,
           json_path: Optional[Path] = JsonOpt, drift_path: Optional[Path] = DriftOpt,
           quiet: bool = QuietOpt, verbose: int = VerboseOpt,
           manifest_path: Path = ManifestOpt) -> None:
    """Run lessons and store their evidence for this GPU, if every gate passes; show what moved."""
    from ..workflows.pipeline import record as record_workflow

    json_to_stdout(json_path)
    manifest = load(manifest_path)
    lessons = choose_lessons(manifest, lesson_ids, all_, keyword=keyword)
    tc = _discover()
    tc.require_nvcc()
    tc.require_gpu()
    options = Options(jobs=_jobs(jobs), gpus=gpus, sanitize=not no_sanitize, repeat=repeat, dry_run=dry_run,
                      sanitizer_jobs=sanitizer_jobs, start_gap=start_gap)
    if options.sanitize and any(manifest.sanitizers(l) for l in lessons):
        tc.require_sanitizer()
    title = "record --dry-run" if dry_run else "record"
    with _reported(title, manifest, tc, json_path, None, True, verbose, drift_path=drift_path) as outcome:
        with display.Progress(console, [l.id for l in lessons], quiet, stages=verbose >= 1) as progress:
            outcome.results = record_workflow(manifest, lessons, tc, options, progress) if lessons else []
        if not quiet:
            for result in outcome.results:
                display.print_provenance(console, result)
                if result.recorded or dry_run:
                    display.print_fields(console, result, [f for f in result.fields if verbose >= 2 or
                                                           f.status.value not in ("same", "volatile", "other-gpu")])


@app.command(cls=Command)
@handle_errors
def sanitize(lesson_id: str = typer.Argument(..., metavar="LESSON", help="The lesson to run under compute-sanitizer."),
             tool: Optional[List[str]] = typer.Option(None, "--tool", "-t", metavar="TOOL",
                                                      help="memcheck, racecheck, synccheck or initcheck "
                                                           "(default: the lesson's declared passes)."),
             gpu: Optional[str] = typer.Option(None, "--gpu", metavar="ID", help="GPU index or UUID."),
             json_path: Optional[Path] = JsonOpt, verbose: int = VerboseOpt,
             manifest_path: Path = ManifestOpt) -> None:
    """Run compute-sanitizer passes on one lesson and judge them against its expectations."""
    from ..workflows.pipeline import sanitize as sanitize_workflow

    json_to_stdout(json_path)
    tools = [t.value for t in Tool]
    for t in tool or []:
        if t not in tools:
            raise UsageError(f"--tool {t!r}: use one of {', '.join(tools)}")
    manifest = load(manifest_path)
    lesson = choose_lessons(manifest, [lesson_id], False)[0]
    tc = _discover()
    tc.require_nvcc()
    tc.require_gpu()
    options = Options(jobs=2, gpus=gpu, sanitize_tools=list(tool) if tool else None)
    with _reported("sanitize", manifest, tc, json_path, None, True, verbose) as outcome:
        with display.Progress(console, [lesson.id], False, stages=verbose >= 1) as progress:
            outcome.results = [sanitize_workflow(manifest, lesson, tc, options, progress)]
        for p in outcome.results[0].sanitizers:
            console.print(f"{lesson.id} {p.tool}: {p.findings} finding(s) in "
                          f"{', '.join(p.kernels) or 'no kernel'}, errors {p.errors}, "
                          f"{p.seconds:.1f} s: {p.verdict}", markup=False)


@app.command(cls=Command)
@handle_errors
def render(check: bool = typer.Option(False, "--check", help="Write nothing; print a diff of every file that "
                                      "would change and exit 1 if any would (for CI)."),
           manifest_path: Path = ManifestOpt) -> None:
    """Regenerate the lesson pages, the README's lessons table and the sources' Build/Run/Verified lines."""
    from ..render.course import diff_pages, render_all, write_pages

    pages = render_all(load(manifest_path))
    if check:
        diff = diff_pages(pages)
        if diff:
            typer.echo(diff, nl=False)
            err_console.print(f"coursectl: {sum(p.changed for p in pages)} page(s) are stale; "
                              f"run `coursectl render`", markup=False)
            raise typer.Exit(1)
        console.print("every page is up to date")
        return
    written = write_pages(pages)
    for page in written:
        console.print(f"wrote {page.name}", markup=False, soft_wrap=True)
    if not written:
        console.print("every page is up to date")


# The commands that run no lesson register themselves on `app` (cli_course imports this module).
from . import course as cli_course  # noqa: E402,F401


if __name__ == "__main__":
    app()
