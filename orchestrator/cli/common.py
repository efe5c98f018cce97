"""What every command shares: the typer app, its options, the consoles, `handle_errors` and `load`.

Commands print through `common.console` and `common.err_console`, which
`handle_errors` makes anew as each command starts (so COLUMNS, NO_COLOR and
--color are read then, not at import).
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
from enum import Enum
from pathlib import Path
from typing import Callable, NoReturn, Optional

import typer
import typer.core
import yaml
from rich.console import Console

from .. import __version__
from ..errors import INTERRUPTED, CoursectlError, RunFailed, UsageError, describe_os_error
from ..judge.evidence import evidence_of_no_lesson
from ..manifest.load import load_manifest
from ..manifest.model import Manifest
from ..manifest.shorthand import entry_id
from ..collector import long_lived
from ..trace import recording, span


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
        except KeyboardInterrupt as exc:
            stop(exc)


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


# The narrowest a message is folded to, whatever COLUMNS says: rich given 0 columns printed nothing at all.
MIN_WIDTH = 40
LOG_WIDTH = 160


def _width() -> int:
    """The width messages and tables are laid out in: COLUMNS where it is a whole number of columns (at
    least MIN_WIDTH), else the terminal's, else (a CI log, no terminal) LOG_WIDTH. COLUMNS=0, -5 or abc
    count as unset; TERM plays no part in the width."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    if sys.stdout.isatty():
        try:
            return max(os.get_terminal_size(sys.stdout.fileno()).columns, MIN_WIDTH)
        except (OSError, ValueError):
            pass
    return LOG_WIDTH


def _consoles() -> tuple[Console, Console]:
    """Consoles for this command, made when it starts (not at import).

    In a CI log (no terminal, no COLUMNS) rich would assume 80 columns and
    fold the tables; logs have room (see `_width`). --color always/never win over the
    environment; with auto, NO_COLOR turns every escape off and FORCE_COLOR
    turns colour on without a terminal.
    """
    width = _width()
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


COMPLETION_LIMIT = 1 << 20   # a lessons.yaml larger than this offers nothing to complete


def lesson_ids_to_complete(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a LESSON or -k: the ids in lessons.yaml (--manifest's, else ./lessons.yaml) that start
    with what is typed. Reads only the ids, never the whole manifest; any error offers nothing, and says nothing."""
    try:
        path = Path((ctx.params or {}).get("manifest_path") or "lessons.yaml")
        with open(path, "rb") as handle:
            data = handle.read(COMPLETION_LIMIT + 1)
        if len(data) > COMPLETION_LIMIT:
            return []
        loaded = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        ids = [ident for ident in map(entry_id, loaded["lessons"]) if isinstance(ident, str)]   # either form
    except Exception:  # noqa: BLE001 - completion is silent: a broken manifest completes nothing
        return []
    return [ident for ident in ids if ident.startswith(incomplete)]


LessonsArg = typer.Argument(None, metavar="LESSON", show_default=False, autocompletion=lesson_ids_to_complete,
                            help="Lesson ids (see lessons.yaml); none with --all or -k.")


AllOpt = typer.Option(False, "--all", help="Every lesson in the manifest.")


ShardOpt = typer.Option(None, "--shard", metavar="K/N", help="Take a deterministic share of the lessons: the K-th of N.")


KeywordOpt = typer.Option(None, "-k", metavar="EXPRESSION", autocompletion=lesson_ids_to_complete,
                          help="Only lessons matching EXPRESSION, in pytest's grammar: words matched, "
                               "case-insensitively, as substrings of the id or title (or as globs: day1*), with "
                               "and, or, not and parentheses ('day13 or day14', 'not sync'); a run of a lesson "
                               "with runs: is id[run] ('day05-heat[shared]'). Selecting none exits 5.")


CollectOnlyOpt = typer.Option(False, "--collect-only", help="List the lessons the selection takes, one id a line, "
                                                            "and how many it leaves out; build and run nothing.")


JobsOpt = typer.Option(None, "--jobs", "-j", min=1, metavar="N", help="Parallel builds (default: all cores).")


ArchOpt = typer.Option(None, "--arch", metavar="sm_NN", help="Build for this architecture instead of the GPU's.")


GpusOpt = typer.Option(None, "--gpus", metavar="IDS", help="GPUs to use: indices or UUIDs, comma-separated.")


RepeatOpt = typer.Option(1, "--repeat", min=1, metavar="N",
                         help="Run each lesson N times; judge timings by their median.")


JsonOpt = typer.Option(None, "--json", metavar="FILE", help="Write the JSON report here; - for standard output.")


JunitOpt = typer.Option(None, "--junit", metavar="FILE", help="Write a JUnit XML report here.")


StrictOpt = typer.Option(False, "--strict", help="Count NO_EVIDENCE, UNSUPPORTED, SKIPPED, FLAKY and an empty "
                                                 "selection as failures (exit 1).")


LAST_REPORT = "last-report.json"   # in $COURSECTL_CACHE: every verify's JSON report, for --last-failed


LastFailedOpt = typer.Option(False, "--last-failed", "--lf",
                             help="Only the lessons that failed in the last verify (its report, kept in "
                                  "$COURSECTL_CACHE/last-report.json); all of them when none failed.")


FailedFromOpt = typer.Option(None, "--failed-from", metavar="REPORT.json",
                             help="Only the lessons that failed in this JSON report (--json's, or report merge's); "
                                  "all of them when none failed.")


def seconds_option(option: str, value: Optional[float]) -> Optional[float]:
    """An option's number of seconds, refused when NaN or infinite: typer before 0.29 lets `nan` through
    its min and max, as every comparison with NaN is false."""
    if value is not None and not math.isfinite(value):
        raise UsageError(f"Invalid value for '{option}': {value} is not a number of seconds")
    return value


RejudgeOpt = typer.Option(False, "--rejudge",
                          help="With --offline: judge every lesson's evidence again, also a lesson whose sources, "
                               "builds, evidence and entry did not change since it was last judged clean.")
RetriesOpt = typer.Option(0, "--retries", min=0, max=10, metavar="N",
                          help="Run a lesson that crashed or timed out again, and judge it again, up to N times; "
                               "one that then passes is FLAKY (a failure with --strict).")


ExitFirstOpt = typer.Option(False, "--exitfirst", "-x", help="Stop at the first failing lesson; the rest are SKIPPED.")


QuietOpt = typer.Option(False, "--quiet", "-q", help="Only the summary table, the reasons and notes under it, and the tally.")


SanitizerJobsOpt = typer.Option(None, "--sanitizer-jobs", min=1, metavar="N",
                                help="Sanitizer passes at once on each GPU (default: chosen from the cores, "
                                     "the free memory and what the passes used when they last ran; 6 until "
                                     "then; fewer where the GPU's free memory holds fewer).")


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
        stop()


@app.callback()
def main(*, version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
         color: Color = typer.Option(Color.auto, "--color", help="Colour: auto (honours NO_COLOR and FORCE_COLOR), "
                                                                  "always or never.")) -> None:
    """coursectl keeps a CUDA course honest."""
    global _color
    _color = color


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def stop(exc: BaseException | None = None) -> NoReturn:
    """End coursectl: the one place where what ended it becomes its last words and its exit status.

    Nothing (--version has printed the version): 0. Ctrl-C or SIGTERM: one line, 130. A CoursectlError:
    `coursectl: error: ...` and its hint, its exit status; RunFailed adds no line (the command said why), 1.
    An OSError (a full disk, a read-only folder): one line naming the file, never a traceback, 1.
    """
    if exc is None:
        status = 0
    elif isinstance(exc, KeyboardInterrupt):
        err_console.print(INTERRUPTED, markup=False)
        status = 130
    elif isinstance(exc, CoursectlError):
        if not isinstance(exc, RunFailed):
            err_console.print(f"coursectl: error: {exc}", markup=False, soft_wrap=True)
            if exc.hint:
                err_console.print(f"hint: {exc.hint}", markup=False, soft_wrap=True)
        status = exc.exit_status
    elif isinstance(exc, OSError):
        err_console.print(f"coursectl: error: {describe_os_error(exc)}", markup=False, soft_wrap=True)
        status = 1
    else:
        raise exc
    raise typer.Exit(status)


def handle_errors(func: Callable) -> Callable:
    """Run a command with fresh consoles; whatever stops it ends through `stop`, the one place of exit statuses."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        global console, err_console
        console, err_console = _consoles()
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            with recording(), long_lived():
                return func(*args, **kwargs)
        except (KeyboardInterrupt, CoursectlError, OSError) as exc:
            stop(exc)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


def load(manifest_path: Path) -> Manifest:
    """load_manifest, then each of its warnings on standard error: `coursectl: warning: lessons.yaml:N: ...`."""
    with span("load the manifest", "coursectl"):
        manifest = load_manifest(manifest_path)

    stray = [f"evidence/{name}/: no lesson '{name}' in {manifest.path.name}, so nothing checks this evidence "
             "(a lesson renamed or removed?): move it to the lesson's id, or delete it"
             for name in evidence_of_no_lesson(manifest.root, (lesson.id for lesson in manifest.lessons))]
    for warning in [*manifest.warnings, *stray]:
        err_console.print(f"coursectl: warning: {warning}", markup=False, soft_wrap=True)
    return manifest


def jobs_or_cores(jobs: Optional[int]) -> int:
    """--jobs as given, or where it is left out (or not positive) the CPU cores."""
    return jobs if jobs and jobs > 0 else (os.cpu_count() or 1)


def json_to_stdout(json_path: Optional[Path]) -> None:
    """With `--json -` the report owns standard output; everything else goes to standard error."""
    global console
    if json_path is not None and str(json_path) == "-":
        console = err_console


def write_reports(report, json_path, junit_path, *, raise_on_failure: bool = True,
                  json_text: str | None = None) -> None:
    """Write the reports asked for; then RunFailed (exit 1) if the run failed (its verdict). `json_text`: the
    report's JSON, where it was made already."""
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import write_json, write_junit

    if json_path:
        write_json(report, json_path, json_text)
    if junit_path:
        write_junit(report, junit_path)
    if report.verdict().failed and raise_on_failure:
        raise RunFailed()
