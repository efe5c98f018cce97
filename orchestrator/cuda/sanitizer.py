"""compute-sanitizer: what a pass reports, the command line that runs one, and the judging.

One sanitizer pass runs the lesson binary under one tool with
`sanitizer_command`, which asks for both outputs: the XML file holds the
findings (its format is the stable one) and the text log holds the summary
lines, which the XML lacks. sanitizer_output.build_report reads both into a
`Report`, and `judge` compares it with what the lesson is meant to produce.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..manifest.passes import Expectation, ExpectedFinding, Tool
from ..files import relative
from ..process import clip_line
from ..words import plural, shown

__all__ = [
    "DEFAULT_ERROR_EXITCODE",
    "Access",
    "Finding",
    "Report",
    "Severity",
    "Summary",
    "filter_problem",
    "judge",
    "kernels_checked",
    "program_output_name",
    "sanitizer_command",
    "unexpected_findings",
]

# Never used as an exit status by a lesson, so it can only mean "the sanitizer found something".
DEFAULT_ERROR_EXITCODE = 86

PREFIX = "========="

Severity = Literal["error", "warning", "info"]


class Access(BaseModel):
    """One end of a race: who accessed the shared memory, and where."""

    direction: str
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    pc: str | None = None


class Finding(BaseModel):
    """One sanitizer report: an XML <record>, or one block of the text log.

    `kind` is the XML <kind> as written (Analysis, Precise, Api, ...). The text
    log has no kind, so text findings get Race, Api, Leak, or Precise/Imprecise
    for a kernel-side report with/without the thread that made it. `kernel` is
    the short name (`reverseTileRacy`), `signature` the name as reported.
    Findings of the host API (kind Api) have no kernel. For races `file` and
    `line` are the source access's and `hazards` is the race count.
    """

    tool: Tool
    kind: str
    severity: Severity
    text: str
    kernel: str | None = None
    signature: str | None = None
    file: str | None = None
    line: int | None = None
    pc: str | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    hazards: int | None = None
    source: Access | None = None
    destination: Access | None = None

    @property
    def is_race(self) -> bool:
        return self.source is not None or self.kind in ("Race", "Analysis")


class Summary(BaseModel):
    """The counts of the text log's summary lines; None where no line gave one."""

    tool: Tool
    errors: int | None = None
    warnings: int | None = None
    hazards_displayed: int | None = None
    leaked_bytes: int | None = None
    leaked_allocations: int | None = None

    @property
    def has_problems(self) -> bool:
        return any((self.errors, self.warnings, self.hazards_displayed, self.leaked_bytes))


class Report(BaseModel):
    """Everything one sanitizer pass said."""

    tool: Tool
    version: str | None = None
    exit_status: int
    error_exitcode: int = DEFAULT_ERROR_EXITCODE
    summary: Summary
    findings: list[Finding] = Field(default_factory=list)
    program_failed: bool = False


# --- the command ------------------------------------------------------------


def bounding_hint(tool: str) -> str:
    """What a pass that timed out can do: each kernel launch costs far more under the tool than alone."""
    return (f"bound it in lessons.yaml under sanitizers.{tool}: args: [--launch-count, N] checks only the first "
            f"N launches, args: [--kernel-name, kns=NAME] only that kernel's, a smaller program_args fewer "
            f"launches, or a longer timeout (docs/authoring.md, the cost of a sanitizer pass)")


def sanitizer_command(sanitizer: str, tool: Tool, binary: Sequence[str], log_file: Path,
                      xml_file: Path, error_exitcode: int = DEFAULT_ERROR_EXITCODE,
                      extra: Sequence[str] = ()) -> list[str]:
    """The argument list that runs `binary` (program and its arguments) under `tool`."""
    if not binary:
        raise ValueError("no program to run under the sanitizer")
    if not 1 <= error_exitcode <= 255:
        raise ValueError(f"error exit code {error_exitcode} is not in 1..255")
    command = [
        sanitizer,
        "--tool", Tool(tool).value,
        "--log-file", str(log_file),
        "--xml", "--save", str(xml_file),
        "--error-exitcode", str(error_exitcode),
    ]
    if tool == Tool.RACECHECK:
        # The default today, but the text format of the other modes differs: pin it.
        command += ["--racecheck-report", "analysis"]
    return command + list(extra) + list(binary)


def program_output_name(tool: str) -> str:
    """The evidence file that keeps the program's own stdout under `tool` (the tool's text goes to its log)."""
    return f"{tool}.stdout.txt"


_FILTERS = ("--kernel-name", "--kernel-name-exclude")


def _filter_values(args: Sequence[str]) -> dict[str, list[str]]:
    """The values of each kernel filter option in a pass's tool arguments (`--opt VALUE` or `--opt=VALUE`)."""
    found: dict[str, list[str]] = {option: [] for option in _FILTERS}
    words = list(args)
    for at, word in enumerate(words):
        option, equals, value = word.partition("=")
        if option in _FILTERS:
            if equals:
                found[option].append(value)
            elif at + 1 < len(words):
                found[option].append(words[at + 1])
    return found


def _filter_matches(value: str, mangled: str) -> bool:
    """Whether one filter value (`kns=Tile`, `kne=_Z3fooPf`, `regex=.*Racy`, several pairs by commas) takes
    a kernel, as compute-sanitizer matches filters: against the mangled name."""
    pairs = [value] if value.startswith("regex=") else value.split(",")
    for pair in pairs:
        key, _, wanted = pair.partition("=")
        if key in ("kernel_name", "kne") and mangled == wanted:
            return True
        if key in ("kernel_substring", "kns") and wanted in mangled:
            return True
        if key == "regex":
            try:
                if re.search(wanted, mangled):
                    return True
            except re.error:
                return False
    return False


def kernels_checked(args: Sequence[str], mangled: Sequence[str]) -> list[str] | None:
    """The kernels (mangled names) a pass with these tool arguments checks; None where they filter none.

    A kernel is checked when it matches a --kernel-name filter (or none is
    given) and no --kernel-name-exclude filter.
    """
    values = _filter_values(args)
    if not any(values.values()):
        return None
    wanted, unwanted = values["--kernel-name"], values["--kernel-name-exclude"]
    return [name for name in mangled
            if (not wanted or any(_filter_matches(value, name) for value in wanted))
            and not any(_filter_matches(value, name) for value in unwanted)]


def filter_problem(tool: str, args: Sequence[str], mangled: Sequence[str]) -> str | None:
    """Why a pass whose kernel filters take none of the program's kernels cannot be clean; None if they take one."""
    checked = kernels_checked(args, mangled)
    if checked is None or checked or not mangled:
        return None
    return (f"{tool}: its kernel filters ({' '.join(args)}) take none of the program's "
            f"{plural(len(mangled), 'kernel')} ({', '.join(sorted(mangled))}): the pass would check no launch")


# --- judging ----------------------------------------------------------------


def _same_file(reported: str | None, expected: str) -> bool:
    if reported is None:
        return False
    reported = reported.replace("\\", "/")
    return reported == expected or reported.endswith("/" + expected.lstrip("/"))


def _matches(finding: Finding, expected: ExpectedFinding) -> bool:
    if expected.kernel is not None and finding.kernel != expected.kernel \
            and finding.signature != expected.kernel:
        return False
    if expected.text is not None and expected.text not in finding.text:
        return False
    if expected.kind is not None and finding.kind.lower() != expected.kind.lower() and not (
            expected.kind.lower() == "race" and finding.is_race):  # the XML calls a race Analysis
        return False
    if expected.severity is not None and finding.severity != expected.severity:
        return False
    ends = [finding] + [end for end in (finding.source, finding.destination) if end is not None]
    if expected.file is not None and not any(_same_file(end.file, expected.file) for end in ends):
        return False
    if expected.line is not None and not any(
            end.line == expected.line and (expected.file is None or _same_file(end.file, expected.file))
            for end in ends):
        return False
    if expected.line_range is not None and not any(
            end.line is not None and expected.line_range[0] <= end.line <= expected.line_range[1]
            for end in ends):
        return False
    return True


def course_path(file: str, root: Path | None) -> str:
    """A file a sanitizer names, as the course names it: relative to `root` where it lies inside it; a path
    of another machine (a report recorded there) by its last parts that name a file of the course
    (`/home/ci/course/lessons/faults/oob.cu` is `lessons/faults/oob.cu`); else as the sanitizer wrote it."""
    if root is None or not Path(file).is_absolute():
        return file
    named = relative(Path(file), root)
    if not Path(named).is_absolute():
        return named
    parts = Path(file).parts[1:]
    for start in range(max(0, len(parts) - _TAIL_PARTS), len(parts)):
        tail = Path(*parts[start:])
        if (Path(root) / tail).is_file():
            return tail.as_posix()
    return file


_TAIL_PARTS = 8   # the most parts of a foreign path tried as a path in the course


def _location(file: str | None, line: int | None, root: Path | None = None) -> str:
    if file is not None:
        file = course_path(file, root)
    if file is None:
        return f" at line {line}" if line is not None else ""
    return f" at {file}:{line}" if line is not None else f" at {file}"


def _describe(finding: Finding, root: Path | None) -> tuple[str, str, str]:
    """(what, details in brackets, trailing text) of an unexpected finding, its file named from `root`."""
    if finding.kernel is None:
        what = {"Api": "API error", "Leak": "leak"}.get(finding.kind, finding.severity)
        return what, "", f": {clip_line(finding.text)}"
    place = f" in {shown(finding.kernel)}{_location(finding.file, finding.line, root)}"
    if finding.is_race:
        hazards = plural(finding.hazards, "hazard") if finding.hazards is not None else ""
        return f"race{place}", hazards, ""
    return f"{finding.severity}{place}", "", f": {clip_line(finding.text)}"


def _summary_counts(summary: Summary) -> str:
    parts = []
    if summary.errors or summary.warnings:
        parts.append(plural(summary.errors or 0, "error"))
        if summary.warnings is not None:
            parts.append(plural(summary.warnings, "warning"))
    elif summary.hazards_displayed:
        parts.append(plural(summary.hazards_displayed, "hazard"))
    if summary.leaked_bytes:
        parts.append(f"{plural(summary.leaked_bytes, 'byte')} leaked")
    return ", ".join(parts)


def unexpected_findings(report: Report, expectation: Expectation) -> list[Finding]:
    """The findings no expected finding accounts for (none when the lesson allows others)."""
    if expectation.allow_other:
        return []
    return [finding for finding in report.findings
            if not any(_matches(finding, expected) for expected in expectation.findings)]


def judge(report: Report, expectation: Expectation, *, root: Path | None = None) -> list[str]:
    """What is wrong with a pass, one sentence each; an empty list is a pass. The files findings name are
    named from the course's `root` (`course_path`), as the JSON report names files.

    Identical unexpected findings (a race reported once per launch) make one
    sentence that says how many reports it stands for.
    """
    if report.tool != expectation.tool:
        raise ValueError(f"a {report.tool.value} report judged against a "
                         f"{expectation.tool.value} expectation")
    tool = report.tool.value
    problems: list[str] = []

    status = report.exit_status
    if status not in (0, report.error_exitcode):
        said = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        also = "; the program itself returned an error" if report.program_failed else ""
        problems.append(f"{tool}: {said}, expected 0 or {report.error_exitcode}{also}")
    elif report.program_failed:
        problems.append(f"{tool}: the program itself returned an error")

    errors = [finding for finding in report.findings if finding.severity == "error"]
    if errors and report.summary.errors == 0:
        problems.append(f"{tool}: the summary counts 0 errors but the report holds "
                        f"{plural(len(errors), 'error finding')}: the log and the XML disagree")
    if not report.findings:
        if report.summary.has_problems:
            problems.append(f"{tool}: the summary counts {_summary_counts(report.summary)} "
                            "but no finding was reported")
        elif status == report.error_exitcode != 0:
            problems.append(f"{tool}: exit status {status} says the sanitizer found errors, "
                            "but no finding was reported")

    unexpected: dict[tuple[str, str, str], int] = {}
    for finding in unexpected_findings(report, expectation):
        key = _describe(finding, root)
        unexpected[key] = unexpected.get(key, 0) + 1
    found: list[str] = []
    for (what, details, trailer), count in unexpected.items():
        bracket = ", ".join(part for part in (details, plural(count, "report") if count > 1 else "")
                            if part)
        found.append(f"{tool}: unexpected {what}{f' ({bracket})' if bracket else ''}{trailer}")
    # The most specific first: a finding names the kernel, file:line and access; the exit status only follows.
    problems[:0] = found

    for expected in expectation.findings:
        if not any(_matches(finding, expected) for finding in report.findings):
            wanted = [f"{name} {value}" for name, value in
                      (("kind", expected.kind if expected.kernel else None),
                       ("severity", expected.severity)) if value is not None]
            bracket = f" ({', '.join(wanted)})" if wanted else ""
            problems.append(f"{tool}: expected a finding {expected.describe()}"
                            f"{_location(expected.file, expected.line, root)}{bracket}, none reported")
    return problems
