"""Machine-readable reports: JSON (which shards merge) and JUnit XML."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

from . import __version__
from .errors import UsageError
from .files import atomic_write
from .results import LessonResult, Status
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


def junit_xml(report: VerifyReport) -> str:
    """One testsuite; a testcase per lesson and one per sanitizer pass."""
    suite = ET.Element("testsuite", name=f"coursectl {report.command}")
    cases = failures = skipped = 0
    total = 0.0
    gpu = "offline" if report.offline else None
    for result in report.results:
        classname = f"coursectl.{result.gpu or gpu or 'nogpu'}"
        case = ET.SubElement(suite, "testcase", classname=classname, name=result.lesson,
                             time=f"{result.seconds:.3f}")
        cases += 1
        total += result.seconds
        if result.status.is_failure:
            failures += 1
            failure = ET.SubElement(case, "failure", type=result.status.value,
                                    message=(result.reasons[0].splitlines()[0] if result.reasons else result.status.value))
            failure.text = "\n\n".join(result.reasons)
        elif result.status in (Status.SKIPPED, Status.UNSUPPORTED):
            skipped += 1
            ET.SubElement(case, "skipped", message="; ".join(result.reasons) or result.status.value)
        if result.transcript:
            ET.SubElement(case, "system-out").text = result.transcript
        for p in result.sanitizers:
            sub = ET.SubElement(suite, "testcase", classname=classname,
                                name=f"{result.lesson} [{p.tool}]", time=f"{p.seconds:.3f}")
            cases += 1
            if p.problems:
                failures += 1
                failure = ET.SubElement(sub, "failure", type="SANITIZER", message=p.problems[0])
                failure.text = "\n".join(p.problems)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total:.3f}")
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
