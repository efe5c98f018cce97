"""Machine-readable reports: JSON (which shards merge) and JUnit XML."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

from . import __version__
from .errors import UsageError
from .files import atomic_write
from .pipeline import LessonResult, Status
from .toolchain import Toolchain


class VerifyReport(BaseModel):
    """What one `coursectl verify` (or record) did, for CI."""

    command: str
    coursectl_version: str = __version__
    date: str
    offline: bool = False
    shard: str | None = None
    toolchain: Toolchain | None = None
    results: list[LessonResult]

    @property
    def failed(self) -> bool:
        return any(r.status.is_failure for r in self.results)


def make_report(command: str, results: list[LessonResult], toolchain: Toolchain | None,
                offline: bool = False, shard: str | None = None) -> VerifyReport:
    return VerifyReport(command=command, date=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                        offline=offline, shard=shard, toolchain=toolchain, results=results)


def write_json(report: VerifyReport, path: Path) -> None:
    atomic_write(path, report.model_dump_json(indent=2) + "\n")


def read_json(path: Path) -> VerifyReport:
    try:
        return VerifyReport.model_validate_json(Path(path).read_bytes())
    except FileNotFoundError:
        raise UsageError("no such report", path=path)
    except ValueError as exc:
        raise UsageError(f"not a coursectl JSON report: {str(exc).splitlines()[0]}", path=path)


# XML 1.0 allows tab, newline, carriage return and these ranges; nothing else may appear,
# not even as a character reference, so a byte a lesson prints must become visible text.
_NOT_XML = re.compile(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """`text` with every character XML 1.0 forbids written out as \\xNN (or \\uNNNN)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def _junit_properties(report: VerifyReport) -> list[tuple[str, str]]:
    """Where the report was made: coursectl, the GPUs and the versions of the CUDA tools."""
    tc = report.toolchain
    missing = "not found" if tc is not None else "unknown"
    props = [("coursectl", report.coursectl_version), ("command", f"coursectl {report.command}"),
             ("offline", "true" if report.offline else "false")]
    if report.shard:
        props.append(("shard", report.shard))
    gpus = tc.gpus if tc is not None else []
    props += [(f"gpu.{g.index}", f"{g.name}, compute capability {g.compute_capability}, {g.uuid}") for g in gpus]
    if not gpus:
        props.append(("gpu", "none" if tc is not None else "unknown"))
    props += [("driver", (tc and tc.driver_version) or missing),
              ("cuda", (tc and tc.cuda_version) or missing),
              ("nvcc", (tc and tc.nvcc_version) or missing),
              ("compute-sanitizer", (tc and tc.sanitizer_version) or missing)]
    return props


def _skip_reason(result: LessonResult, offline: bool) -> str | None:
    """Why a lesson counts as skipped in JUnit, or None if it passed or failed."""
    if result.status in (Status.SKIPPED, Status.UNSUPPORTED):
        return "; ".join(result.reasons) or result.status.value
    if result.status is Status.NO_EVIDENCE:
        if offline or result.gpu is None:
            return ("no recorded evidence to re-judge: the lesson was built, nothing was run or compared; "
                    "record it on a GPU")
        return (f"no evidence recorded on {result.gpu} yet: the lesson ran and its output schema and gates "
                f"were checked, its fields were not compared; record it on this GPU")
    return None


# The note judge_recorded_passes leaves for a declared pass with no recorded report (offline).
_NO_RECORDED_PASS = re.compile(r"^(?P<gpu>\S+): no recorded (?P<tool>\S+) report;")


def junit_xml(report: VerifyReport) -> str:
    """One testsuite: a testcase per lesson and one per sanitizer pass, valid against junit-10.xsd.

    Failures are <failure>; UNSUPPORTED, SKIPPED and NO_EVIDENCE lessons, and
    sanitizer passes that neither ran nor had a recorded report, are
    <skipped> with the reason. A pass re-judged from its recorded report
    (offline: no command) is a real check and is named "... (recorded)". A
    lesson's time is its own seconds less its sanitizer passes', which have
    their own testcases, so the times add up to the suite's.
    """
    suite = ET.Element("testsuite", name=f"coursectl {report.command}")
    properties = ET.SubElement(suite, "properties")
    for name, value in _junit_properties(report):
        ET.SubElement(properties, "property", name=name, value=value)
    cases = failures = skipped = 0
    total = 0.0
    gpu = "offline" if report.offline else None
    for result in report.results:
        classname = f"coursectl.{result.gpu or gpu or 'nogpu'}"
        ran_passes = sum(p["seconds"] for p in result.sanitizers if p["command"])
        case = ET.SubElement(suite, "testcase", classname=classname, name=result.lesson,
                             time=f"{max(0.0, result.seconds - ran_passes):.3f}")
        cases += 1
        total += result.seconds
        skip = _skip_reason(result, report.offline)
        if result.status.is_failure:
            failures += 1
            failure = ET.SubElement(case, "failure", type=result.status.value,
                                    message=_first_line(result.reasons[0]) if result.reasons else result.status.value)
            failure.text = "\n\n".join(result.reasons)
        elif skip is not None:
            skipped += 1
            ET.SubElement(case, "skipped", type=result.status.value, message=skip)
        if result.transcript:
            ET.SubElement(case, "system-out").text = result.transcript
        if result.run and result.run.stderr_tail:
            ET.SubElement(case, "system-err").text = result.run.stderr_tail
        for p in result.sanitizers:
            recorded = not p["command"]
            sub = ET.SubElement(suite, "testcase", classname=classname,
                                name=f"{result.lesson} [{p['tool']}]" + (" (recorded)" if recorded else ""),
                                time=f"{p['seconds']:.3f}")
            cases += 1
            if p["problems"]:
                failures += 1
                failure = ET.SubElement(sub, "failure", type="SANITIZER", message=_first_line(p["problems"][0]))
                failure.text = "\n".join(p["problems"])
        for note in result.notes:
            m = _NO_RECORDED_PASS.match(note)
            if m is None:
                continue
            sub = ET.SubElement(suite, "testcase", classname=classname,
                                name=f"{result.lesson} [{m['tool']}]", time="0.000")
            cases += 1
            skipped += 1
            ET.SubElement(sub, "skipped", type="NOT_RUN",
                          message=f"not run: no GPU here and no {m['tool']} report recorded on {m['gpu']}; "
                                  "record it on a GPU")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total:.3f}")
    suite.set("timestamp", report.date)
    for element in suite.iter():
        if element.text:
            element.text = _xml_text(element.text)
        for key, value in element.attrib.items():
            element.set(key, _xml_text(value))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def write_junit(report: VerifyReport, path: Path) -> None:
    atomic_write(path, junit_xml(report))


def merge_reports(reports: list[VerifyReport]) -> VerifyReport:
    """Shards' reports into one: each lesson once per GPU; a lesson in two shards is an error."""
    seen: dict[tuple[str, str | None], int] = {}
    results: list[LessonResult] = []
    for index, report in enumerate(reports):
        for result in report.results:
            key = (result.lesson, result.gpu)
            if key in seen:
                raise UsageError(f"lesson {result.lesson!r} on {result.gpu or 'no GPU'} appears in "
                                 f"reports {seen[key] + 1} and {index + 1}")
            seen[key] = index
            results.append(result)
    return VerifyReport(command="report merge", date=max((r.date for r in reports), default=""),
                        offline=all(r.offline for r in reports), results=results)
