"""compute-sanitizer: the command line, its XML and text output, and the judging.

One sanitizer pass runs the lesson binary under one tool with
`sanitizer_command`, which asks for both outputs: the XML file holds the
findings (its format is the stable one) and the text log holds the summary
lines, which the XML lacks. `build_report` reads both into a `Report`, and
`judge` compares it with what the lesson is meant to produce.
"""

from __future__ import annotations

import functools
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import EvidenceError
from .process import Runner, run_command

__all__ = [
    "DEFAULT_ERROR_EXITCODE",
    "Access",
    "Expectation",
    "ExpectedFinding",
    "Finding",
    "Report",
    "Severity",
    "Summary",
    "Tool",
    "build_report",
    "default_expectation",
    "demangle",
    "has_program_failed",
    "judge",
    "parse_log",
    "parse_version",
    "parse_xml",
    "sanitizer_command",
    "split_kernel_name",
    "strip_sanitizer_lines",
]

# Never used as an exit status by a lesson, so it can only mean "the sanitizer found something".
DEFAULT_ERROR_EXITCODE = 86

PREFIX = "========="

Severity = Literal["error", "warning", "info"]


class Tool(str, Enum):
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    SYNCCHECK = "synccheck"
    INITCHECK = "initcheck"


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
    findings: list[Finding] = []
    program_failed: bool = False


class ExpectedFinding(BaseModel):
    """A finding a lesson is meant to produce; the fields left out match anything.

    `kind` is compared without case, and `race` matches every race; `line`
    matches either end of a race; `text` is a substring of the finding's
    text (for API errors, which name no kernel); `snippet` names a snippet of
    the lesson's source that the finding must fall in (resolved to
    `line_range` before judging).
    """

    model_config = ConfigDict(extra="forbid")

    kernel: str | None = None
    kind: str | None = None
    severity: Literal["error", "warning"] | None = None
    file: str | None = None
    line: int | None = Field(default=None, ge=1)
    text: str | None = None
    snippet: str | None = None
    line_range: tuple[int, int] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _something(self) -> "ExpectedFinding":
        if self.kernel is None and self.kind is None and self.text is None:
            raise ValueError("an expected finding names a kernel, a kind or a text")
        return self

    def describe(self) -> str:
        where = f"in {self.kernel}" if self.kernel else f"of kind {self.kind}" if self.kind else ""
        if self.text:
            where += f" saying {self.text!r}"
        if self.snippet:
            span = f" (lines {self.line_range[0]}-{self.line_range[1]})" if self.line_range else ""
            where += f" inside snippet {self.snippet!r}{span}"
        return where.strip()


class Expectation(BaseModel):
    """What one tool must report on a lesson: these findings, and no other unless allowed."""

    model_config = ConfigDict(extra="forbid")

    tool: Tool
    findings: list[ExpectedFinding] = []
    allow_other: bool = False


def default_expectation(tool: Tool) -> Expectation:
    """A lesson that says nothing about a tool must be clean under it."""
    return Expectation(tool=tool)


# --- the command ------------------------------------------------------------


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


# --- names ------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def demangle(name: str, runner: Runner = run_command) -> str:
    """`_Z2wrPfi` -> `wr(float*, int)` with c++filt; the name unchanged without it."""
    cxxfilt = shutil.which("c++filt")
    if not name.startswith("_Z") or cxxfilt is None:
        return name
    try:
        result = runner([cxxfilt, name], timeout=10)
    except OSError:
        return name
    demangled = result.stdout.decode(errors="replace").strip()
    return demangled if result.ok and demangled else name


def _matching_open(text: str, close_at: int) -> int:
    """Index of the bracket that opens the one at `close_at`, or -1."""
    pairs = {")": "(", ">": "<"}
    depth = 0
    for index in range(close_at, -1, -1):
        char = text[index]
        if char in pairs:
            depth += 1
        elif char in pairs.values():
            depth -= 1
            if depth == 0:
                return index
    return -1


def _last_top_level(text: str, separator: str) -> str:
    """What follows the last `separator` outside brackets."""
    depth = 0
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char in "(<":
            depth += 1
        elif char in ")>":
            depth -= 1
        elif depth == 0 and text.startswith(separator, index):
            start = index + len(separator)
            index = start
            continue
        index += 1
    return text[start:]


def split_kernel_name(function: str) -> tuple[str, str]:
    """(short name, signature): `rev(float *)` -> `rev`; `void ns::t<16>(float*)` -> `t`.

    A mangled name is demangled first where c++filt is on PATH.
    """
    signature = demangle(function.strip())
    name = signature
    if name.endswith(")"):
        opening = _matching_open(name, len(name) - 1)
        if opening > 0:
            name = name[:opening].rstrip()
    name = _last_top_level(name, " ")  # the return type of a template instance
    if name.endswith(">"):
        opening = _matching_open(name, len(name) - 1)
        if opening > 0:
            name = name[:opening]
    name = _last_top_level(name, "::")
    return (name or signature), signature


# --- XML --------------------------------------------------------------------

_POSITION_SUFFIX = re.compile(r": line \d+, column \d+$")


def _record_lines(text: str) -> list[int]:
    """The line of each <record> start tag, in order (ElementTree keeps no lines)."""
    lines = []
    line = 1
    last = 0
    for match in re.finditer(r"<record[\s>]", text):
        line += text.count("\n", last, match.start())
        last = match.start()
        lines.append(line)
    return lines


class _RecordReader:
    """Reads one <record>, raising with the record's line on anything unreadable."""

    def __init__(self, tool: Tool, path: str, line: int):
        self.tool = tool
        self.path = path
        self.line = line

    def fail(self, message: str) -> EvidenceError:
        return EvidenceError(message, path=self.path, line=self.line)

    def integer(self, parent: ET.Element, tag: str) -> int | None:
        text = parent.findtext(tag)
        if text is None:
            return None
        try:
            return int(text.strip(), 0)
        except ValueError:
            raise self.fail(f"<{tag}> is {text!r}, not a whole number") from None

    def dim3(self, parent: ET.Element | None, tag: str) -> tuple[int, int, int] | None:
        element = parent.find(tag) if parent is not None else None
        if element is None:
            return None
        values = [self.integer(element, axis) for axis in "xyz"]
        if None in values:
            raise self.fail(f"<{tag}> lacks one of <x>, <y>, <z>")
        return values[0], values[1], values[2]  # type: ignore[return-value]

    def where(self, parent: ET.Element | None) -> dict:
        where = parent.find("where") if parent is not None else None
        if where is None:
            return {}
        function = (where.findtext("func") or "").strip()
        kernel, signature = split_kernel_name(function) if function else (None, None)
        return {
            "kernel": kernel,
            "signature": signature,
            "file": (where.findtext("file") or where.findtext("path") or "").strip() or None,
            "line": self.integer(where, "line"),
            "pc": (where.findtext("pc") or "").strip() or None,
        }

    def access(self, element: ET.Element | None) -> Access | None:
        if element is None:
            return None
        place = self.where(element)
        place.pop("signature", None)
        return Access(direction=(element.findtext("direction") or "").strip(), **place)

    def severity(self, level: str | None) -> Severity:
        if level is None:  # API error records carry no level
            return "error"
        word = level.strip().lower()
        if word in ("error", "warning", "info"):
            return word  # type: ignore[return-value]
        if word == "warn":
            return "warning"
        raise self.fail(f"unknown <level> {level!r}")

    def finding(self, record: ET.Element) -> Finding:
        kind = (record.findtext("kind") or "").strip()
        if not kind:
            raise self.fail("record without a <kind>")
        what = record.find("what")
        source = self.access(what.find("source") if what is not None else None)
        destination = self.access(what.find("destination") if what is not None else None)
        place = self.where(record)
        if not place and what is not None:
            place = self.where(what.find("source"))
        hazards = None
        if what is not None:
            for holder in (what.find("destination"), what.find("source"), what):
                if holder is not None and holder.find("count") is not None:
                    hazards = self.integer(holder, "count")
                    break
        who = record.find("who")
        text = (what.findtext("text") if what is not None else None) or kind
        return Finding(tool=self.tool, kind=kind, severity=self.severity(record.findtext("level")),
                       text=text.strip(), thread=self.dim3(who, "threadIdx"),
                       block=self.dim3(who, "blockIdx"), hazards=hazards,
                       source=source, destination=destination, **place)


def parse_xml(text: str, tool: Tool, path: str | Path = "<xml>") -> list[Finding]:
    """The findings of a `--xml --save` file, one per <record>."""
    path = str(path)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, _column = exc.position
        reason = _POSITION_SUFFIX.sub("", str(exc))
        raise EvidenceError(f"malformed sanitizer XML: {reason}", path=path, line=line) from None
    if root.tag != "ComputeSanitizerOutput":
        raise EvidenceError(f"root element is <{root.tag}>, not <ComputeSanitizerOutput>",
                            path=path, line=1)
    records = root.findall("record")
    lines = _record_lines(text)
    if len(lines) != len(records):  # a "<record" inside a comment or CDATA: lose the lines only
        lines = [None] * len(records)  # type: ignore[list-item]
    return [_RecordReader(Tool(tool), path, line).finding(record)
            for record, line in zip(records, lines)]


# --- the text log -----------------------------------------------------------

_RACECHECK_SUMMARY = re.compile(
    r"^RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
_ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (\d+) errors?\b")
_LEAK_SUMMARY = re.compile(r"^LEAK SUMMARY: (\d+) bytes? leaked in (\d+) allocations?\b")
_ANY_SUMMARY = re.compile(r"^[A-Z]+ SUMMARY:")

_LEVEL = re.compile(r"^(Error|Warning|Info): ")
_RACE = re.compile(r"^(?P<level>Error|Warning|Info): Race reported between "
                   r"(?P<direction>\w+) access at (?P<place>.+)$")
_RACE_OTHER_END = re.compile(r"^and (?P<direction>\w+) access at (?P<place>.+)$")
_HAZARDS = re.compile(r"\s*\[(\d+) hazards?\]$")
_PLACE = re.compile(r"^(?P<function>.+?)(?:\+(?P<pc>0x[0-9a-fA-F]+))?"
                    r"(?: in (?P<file>.+):(?P<line>\d+))?$")
_AT = re.compile(r"^at (?P<place>.+)$")
_BY_THREAD = re.compile(r"^by thread \((\d+),\s*(\d+),\s*(\d+)\) in block \((\d+),\s*(\d+),\s*(\d+)\)")
_API = re.compile(r"^Program hit ")
_LEAK = re.compile(r"^Leaked \d+ bytes? ")
_PROGRAM_FAILED = "Target application returned an error"


def _sanitizer_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text after the prefix) of each sanitizer line, indentation kept."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith(PREFIX):
            body = raw[len(PREFIX):]
            lines.append((number, (body[1:] if body.startswith(" ") else body).rstrip()))
    return lines


def _blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, heading, indented lines under it) for each report in the log.

    A report is a heading line followed by indented lines; the program's own
    lines may fall between them and are skipped.
    """
    blocks: list[tuple[int, str, list[str]]] = []
    current: list[str] | None = None
    for number, body in _sanitizer_lines(text):
        if not body:
            current = None
        elif body[0].isspace():
            if current is not None:
                current.append(body.strip())
        else:
            current = []
            blocks.append((number, body, current))
    return blocks


def _place(text: str) -> dict:
    match = _PLACE.match(text.strip())
    assert match is not None  # the function part matches anything
    kernel, signature = split_kernel_name(match["function"])
    return {"kernel": kernel, "signature": signature, "file": match["file"],
            "line": int(match["line"]) if match["line"] else None, "pc": match["pc"]}


def _race_finding(tool: Tool, match: re.Match, details: list[str]) -> Finding:
    hazards = None
    first = match["place"]
    if counted := _HAZARDS.search(first):
        hazards, first = int(counted[1]), first[:counted.start()]
    source_place = _place(first)
    destination = None
    for detail in details:
        if other := _RACE_OTHER_END.match(detail):
            second = other["place"]
            if counted := _HAZARDS.search(second):
                hazards, second = int(counted[1]), second[:counted.start()]
            place = _place(second)
            place.pop("signature")
            destination = Access(direction=other["direction"], **place)
            break
    source = Access(direction=match["direction"],
                    **{k: v for k, v in source_place.items() if k != "signature"})
    text = f"Race reported between {match['direction']} access at {first.strip()}"
    if destination is not None:
        text += f" and {destination.direction} access at {second.strip()}"
    return Finding(tool=tool, kind="Race", severity=match["level"].lower(), text=text,
                   hazards=hazards, source=source, destination=destination, **source_place)


def _kernel_finding(tool: Tool, heading: str, details: list[str]) -> Finding | None:
    place: dict = {}
    thread = block = None
    for detail in details:
        if not place and (at := _AT.match(detail)):
            place = _place(at["place"])
        elif thread is None and (by := _BY_THREAD.match(detail)):
            numbers = [int(n) for n in by.groups()]
            thread, block = (numbers[0], numbers[1], numbers[2]), (numbers[3], numbers[4], numbers[5])
    if not place and thread is None:
        return None  # a notice of the tool's own, not a report about the program
    severity = "error"
    if level := _LEVEL.match(heading):
        severity, heading = level[1].lower(), heading[level.end():]
    return Finding(tool=tool, kind="Precise" if thread is not None else "Imprecise",
                   severity=severity, text=heading, thread=thread, block=block, **place)


def parse_log(text: str, tool: Tool, path: str | Path = "<log>") -> tuple[Summary, list[Finding]]:
    """The summary counts and the findings of a text log (or of an interleaved stdout)."""
    tool = Tool(tool)
    summary = Summary(tool=tool)
    findings: list[Finding] = []
    for number, heading, details in _blocks(text):
        if match := _RACECHECK_SUMMARY.match(heading):
            summary.hazards_displayed, summary.errors, summary.warnings = map(int, match.groups())
        elif match := _ERROR_SUMMARY.match(heading):
            summary.errors = int(match[1])
        elif match := _LEAK_SUMMARY.match(heading):
            summary.leaked_bytes, summary.leaked_allocations = map(int, match.groups())
        elif _ANY_SUMMARY.match(heading):
            raise EvidenceError(f"unrecognised sanitizer summary line {heading!r}",
                                path=str(path), line=number)
        elif match := _RACE.match(heading):
            findings.append(_race_finding(tool, match, details))
        elif _API.match(heading):
            findings.append(Finding(tool=tool, kind="Api", severity="error", text=heading))
        elif _LEAK.match(heading):
            findings.append(Finding(tool=tool, kind="Leak", severity="error", text=heading))
        elif finding := _kernel_finding(tool, heading, details):
            findings.append(finding)
    return summary, findings


def has_program_failed(log_text: str) -> bool:
    """Whether the sanitizer says the program itself exited with an error."""
    return any(body == _PROGRAM_FAILED for _, body in _sanitizer_lines(log_text))


def strip_sanitizer_lines(stdout: str) -> str:
    """The program's own output from a transcript the sanitizer wrote into."""
    return "".join(line for line in stdout.splitlines(keepends=True)
                   if not line.startswith(PREFIX))


_VERSION = re.compile(r"\bVersion\s+(\d+(?:\.\d+)+)")


def parse_version(text: str) -> str | None:
    """`2025.3.1.0` from `compute-sanitizer --version`; None if no version is in it.

    Seen both as three lines (banner, copyright, `Version 2025.3.1.0 (build ...)`)
    and as one (`NVIDIA (R) Compute Sanitizer, Version 2024.3.0.0 (public-release)`).
    """
    match = _VERSION.search(text)
    return match[1] if match else None


def build_report(tool: Tool, exit_status: int, log_text: str, xml_text: str | None = None, *,
                 version: str | None = None, error_exitcode: int = DEFAULT_ERROR_EXITCODE,
                 log_path: str | Path = "<log>", xml_path: str | Path = "<xml>") -> Report:
    """One pass's report: the summary from the log, the findings from the XML if there is one."""
    tool = Tool(tool)
    summary, findings = parse_log(log_text, tool, log_path)
    if xml_text is not None:
        findings = parse_xml(xml_text, tool, xml_path)
    return Report(tool=tool, version=version, exit_status=exit_status,
                  error_exitcode=error_exitcode, summary=summary, findings=findings,
                  program_failed=has_program_failed(log_text))


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


def _location(file: str | None, line: int | None) -> str:
    if file is None:
        return f" at line {line}" if line is not None else ""
    return f" at {file}:{line}" if line is not None else f" at {file}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _describe(finding: Finding) -> tuple[str, str, str]:
    """(what, details in brackets, trailing text) of an unexpected finding."""
    if finding.kernel is None:
        what = {"Api": "API error", "Leak": "leak"}.get(finding.kind, finding.severity)
        return what, "", f": {finding.text}"
    place = f" in {finding.kernel}{_location(finding.file, finding.line)}"
    if finding.is_race:
        hazards = _plural(finding.hazards, "hazard") if finding.hazards is not None else ""
        return f"race{place}", hazards, ""
    return f"{finding.severity}{place}", "", f": {finding.text}"


def _summary_counts(summary: Summary) -> str:
    parts = []
    if summary.errors or summary.warnings:
        parts.append(_plural(summary.errors or 0, "error"))
        if summary.warnings is not None:
            parts.append(_plural(summary.warnings, "warning"))
    elif summary.hazards_displayed:
        parts.append(_plural(summary.hazards_displayed, "hazard"))
    if summary.leaked_bytes:
        parts.append(f"{_plural(summary.leaked_bytes, 'byte')} leaked")
    return ", ".join(parts)


def judge(report: Report, expectation: Expectation) -> list[str]:
    """What is wrong with a pass, one sentence each; an empty list is a pass.

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

    if not report.findings:
        if report.summary.has_problems:
            problems.append(f"{tool}: the summary counts {_summary_counts(report.summary)} "
                            "but no finding was reported")
        elif status == report.error_exitcode != 0:
            problems.append(f"{tool}: exit status {status} says the sanitizer found errors, "
                            "but no finding was reported")

    unexpected: dict[tuple[str, str, str], int] = {}
    if not expectation.allow_other:
        for finding in report.findings:
            if not any(_matches(finding, expected) for expected in expectation.findings):
                key = _describe(finding)
                unexpected[key] = unexpected.get(key, 0) + 1
    for (what, details, trailer), count in unexpected.items():
        bracket = ", ".join(part for part in (details, _plural(count, "report") if count > 1 else "")
                            if part)
        problems.append(f"{tool}: unexpected {what}{f' ({bracket})' if bracket else ''}{trailer}")

    for expected in expectation.findings:
        if not any(_matches(finding, expected) for finding in report.findings):
            wanted = [f"{name} {value}" for name, value in
                      (("kind", expected.kind if expected.kernel else None),
                       ("severity", expected.severity)) if value is not None]
            bracket = f" ({', '.join(wanted)})" if wanted else ""
            problems.append(f"{tool}: expected a finding {expected.describe()}"
                            f"{_location(expected.file, expected.line)}{bracket}, none reported")
    return problems
