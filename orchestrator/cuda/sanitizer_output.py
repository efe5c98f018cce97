"""What compute-sanitizer wrote: its XML findings, its text log, its version; read into a Report.

Both outputs of one pass are read here; the text log's summary lines are the
only place the counts appear, the XML holds the findings in the stable format.
Every error names the file and line it is about.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ..errors import EvidenceError
from .kernels import split_kernel_name
from ..process import clip_line
from .sanitizer import DEFAULT_ERROR_EXITCODE, PREFIX, Access, Finding, Report, Severity, Summary
from ..manifest.passes import Tool


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
            raise EvidenceError(f"unrecognised sanitizer summary line {clip_line(heading, quote=True)}",
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
