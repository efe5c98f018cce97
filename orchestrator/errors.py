"""The one exception family. Each error knows the file and line it is about.

Each class carries its exit status; the CLI's one handler (cli/common.py's
handle_errors) prints the message and the hint and exits with it; the core only raises.
"""

from __future__ import annotations

from pathlib import Path


# What Ctrl-C or SIGTERM prints when it stops a command outside a workflow's own handling, whenever it comes:
# while the command starts (imports included), reads lessons.yaml or looks for the tools.
INTERRUPTED = "coursectl: interrupted; children stopped, nothing half-written"


class CoursectlError(Exception):
    """An error a user can act on: `path:line: message`, plus a hint."""

    exit_status = 1
    hint = ""

    def __init__(self, message: str, path: str | Path | None = None,
                 line: int | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        return f"{where}{self.message}"


class ManifestError(CoursectlError):
    """lessons.yaml (or a schema in it) is wrong."""

    exit_status = 2
    hint = "fix lessons.yaml; docs/schema.md describes every key"


class UsageError(CoursectlError):
    """The command line asks for something that does not exist."""

    exit_status = 2


class NothingSelected(CoursectlError):
    """-k deselected every lesson: nothing ran, as pytest's `no tests ran` (exit 5)."""

    exit_status = 5


class ToolchainError(CoursectlError):
    """A tool or a GPU the command needs is missing."""

    exit_status = 3
    hint = "run `coursectl doctor` to see what was found"


class BuildError(CoursectlError):
    """nvcc failed on a lesson."""

    exit_status = 1


class TranscriptError(CoursectlError):
    """A transcript does not match its lesson's output schema.

    `item`, where the parser knows it: the path of the schema item the error
    is about inside the lesson's `output` (("items", 3)), and what that item is
    to the error ("the item it expected").
    """

    exit_status = 1
    item: tuple[tuple, str] | None = None


class SchemaMismatch(TranscriptError):
    """`coursectl check`: a transcript that does not match its lesson's output schema, the error being checked for."""

    exit_status = 2
    hint = "fix the program's output or the lesson's output schema in lessons.yaml; docs/schema.md describes it"


class EvidenceError(CoursectlError):
    """Recorded evidence is missing, corrupt or inconsistent."""

    exit_status = 1
    hint = "re-record it on the GPU it names with `coursectl record LESSON`"


class TemplateError(CoursectlError):
    """A page template or a snippet marker is wrong."""

    exit_status = 2


class ReportError(CoursectlError):
    """Reports that cannot be merged into one honest report."""

    exit_status = 1


class RunFailed(CoursectlError):
    """The run failed, and the command has already said why (its tally, each build's error, the stale pages).

    The CLI exits 1 and prints nothing more.
    """

    exit_status = 1

    def __init__(self, message: str = "the run failed; the command's output says why"):
        super().__init__(message)


class Interrupted(CoursectlError):
    """Ctrl-C or SIGTERM: children were stopped and nothing was half-written.

    `results` holds what a workflow finished before it was stopped, the rest
    marked SKIPPED, so that the reports of a stopped run can still be written.
    """

    exit_status = 130

    def __init__(self, message: str, results: list | None = None):
        super().__init__(message)
        self.results = results or []


def describe_os_error(exc: OSError) -> str:
    """A failed read or write in one line, naming the file (never a traceback).

    A failed os.replace names its temp file first and the file being written second.
    """
    path = exc.filename2 or exc.filename
    where = f" {path}" if path else ""
    return f"cannot write/read{where}: {exc.strerror or exc}"
