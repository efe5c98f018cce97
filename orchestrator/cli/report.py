"""Machine-readable reports: JSON (which shards merge) and JUnit XML."""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from .. import __version__
from ..cuda.build import cache_root
from ..errors import CoursectlError, ManifestError, UsageError
from ..cuda.includes import local_headers
from ..judge.evidence import first_error
from ..files import may_lead_inside, parse_json, read_file, report_refusal, sha256_bytes, write_report
from ..manifest.jsonschema import EmptyDefaults
from ..manifest.model import Manifest
from ..process import escape_char
from ..judge.results import LessonResult, Status, Verdict, covered_words, run_verdict, why
from ..cuda.toolchain import Toolchain
from ..manifest.yamlfile import MAX_BYTES


REPORT_FORMAT = 1
# The most `report merge` reads of one report: the course's report of its 4 lessons is 32 KiB.
REPORT_LIMIT = 64 * 2**20
# The most of a lesson's transcript a report keeps, in characters: the course's longest is 2 KiB. A flood
# kept whole (16 MiB, the capture limit) made a JUnit <system-out> that libxml2's readers refuse (10 MB
# a text node) and, as NUL bytes written \u0000, a JSON report larger than `report merge` reads.
TRANSCRIPT_LIMIT = 256 * 1024

_SHARD = r"([1-9][0-9]*)/([1-9][0-9]*)"


def _shard(value: str) -> str:
    """K/N with 1 <= K <= N, as `verify --shard` takes it: `report merge` counts the shards of a split by it."""
    match = re.fullmatch(_SHARD, value)
    if match is None or int(match[1]) > int(match[2]):
        raise ValueError(f"{value!r} is not a shard K/N of a split, with 1 <= K <= N")
    return value


# The pattern is for the JSON Schema; _shard checks it, and K <= N, with a message of its own.
Shard = Annotated[str, AfterValidator(_shard), Field(json_schema_extra={"pattern": f"^{_SHARD}$"})]


class Selection(BaseModel):
    """Which lessons the run took, of how many: the ids given, -k, --shard, and the lessons left out."""

    ids: list[str] = Field(default_factory=list)   # the ids given on the command line (none: --all or -k)
    keyword: str | None = None           # -k
    shard: Shard | None = None           # --shard K/N
    lessons: list[str] = Field(default_factory=list)   # the lessons selected, in order
    deselected: int = 0                  # lessons of the manifest left out by the selection


class ModelRun(BaseModel):
    """What a merged report holds of one GPU model (its slug; `a+b` for a machine of two): the shards of
    its split, and the toolchain its first report ran with."""

    shards: list[Shard] = Field(default_factory=list)
    toolchain: Toolchain | None = None


class VerifyReport(BaseModel):
    """What one `coursectl verify` (or record, sanitize, report merge) did, for CI.

    `format` changes whenever a field changes meaning or goes away;
    `coursectl schema report` prints the JSON Schema of this format.
    Paths of the machine that ran it are not kept: files in the course are
    relative to its root, cache entries start with `$COURSECTL_CACHE`, and
    tools and temporary files are named by their file name alone.
    """

    format: Literal[1] = REPORT_FORMAT
    command: str
    coursectl_version: str = __version__
    date: str
    offline: bool = False
    strict: bool = False
    manifest_sha256: str | None = None   # lessons.yaml's bytes: shards of one run share it
    shard: Shard | None = None           # K/N of a sharded verify
    # a merged report: the shards it holds, of every model (models: whose)
    shards: list[Shard] = Field(default_factory=list)
    partial: bool = False                # merged with --allow-partial while shards were missing
    toolchain: Toolchain | None = None   # a merged report: only when every report ran on one GPU model
    # a merged report: each GPU model's shards and toolchain, by its slug
    models: dict[str, ModelRun] = Field(default_factory=dict)
    selection: Selection | None = None   # verify: which lessons it took, of how many
    results: list[LessonResult]

    def verdict(self) -> Verdict:
        """Whether the run failed (run_verdict): any failure; with strict, also anything not verified, an empty
        run, or a partial merge."""
        missing = ""
        if self.partial:
            missing = "; ".join(f"{model}: {lacking}" for model, run in self.models.items()
                                if (lacking := missing_shards(run.shards)))
            missing = missing or missing_shards(self.shards) or "shards missing"
        return run_verdict(self.results, strict=self.strict, partial=missing)


def missing_shards(shards: list[str]) -> str:
    """`shard 2 of 2 missing`, `shards 2, 3 of 3 missing`: what shards K/N of one split lack; empty for none."""
    if not shards:
        return ""
    total = max(int(s.split("/")[1]) for s in shards)
    missing = sorted(set(range(1, total + 1)) - {int(s.split("/")[0]) for s in shards})
    if not missing:
        return ""
    return f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {total} missing"


def manifest_digest(manifest: Manifest) -> str:
    """sha256 of lessons.yaml as it is now: the shards of one run share it."""
    path = manifest.root / manifest.path.name
    data = read_file(path, MAX_BYTES, "a manifest", ManifestError)
    if data is None:
        raise ManifestError("no such file", path=path)
    return sha256_bytes(data)


def make_report(command: str, results: list[LessonResult], toolchain: Toolchain | None, manifest: Manifest,
                *, offline: bool = False, shard: str | None = None, strict: bool = False,
                selection: Selection | None = None) -> VerifyReport:
    paths = _Portable(manifest.root, cache_root(manifest))
    return VerifyReport(command=command, date=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                        offline=offline, strict=strict, manifest_sha256=manifest_digest(manifest), shard=shard,
                        shards=[shard] if shard else [], toolchain=paths.toolchain(toolchain), selection=selection,
                        results=[_kept(paths.result(r)) for r in results])


def _kept(result: LessonResult) -> LessonResult:
    """The result with its transcript cut to TRANSCRIPT_LIMIT characters, saying so where it was cut."""
    text = result.transcript
    if text is None or len(text) <= TRANSCRIPT_LIMIT:
        return result
    return result.model_copy(update={"transcript": f"{text[:TRANSCRIPT_LIMIT]}\n… cut: the transcript holds "
                                                   f"{len(text):,} characters; the report keeps the first "
                                                   f"{TRANSCRIPT_LIMIT:,}\n"})


class _Portable:
    """Paths of the machine that ran coursectl, rewritten so a report says nothing about that machine."""

    def __init__(self, root: Path, cache: Path):
        self.prefixes = [(str(Path(cache).resolve()), "$COURSECTL_CACHE"), (str(Path(cache)), "$COURSECTL_CACHE"),
                         (str(Path(root).resolve()), "."), (str(Path(root)), ".")]

    def path(self, text: str) -> str:
        if os.sep not in text:   # a flag or a word (most of a command): no path of this machine's in it
            return next((name for prefix, name in self.prefixes if text == prefix), text)
        for prefix, name in self.prefixes:
            if text == prefix or text.startswith(prefix + os.sep):
                return name + text[len(prefix):]
        return os.path.basename(text) if os.path.isabs(text) else text

    def result(self, result: LessonResult) -> LessonResult:
        return result.model_copy(update={
            "builds": [b.model_copy(update={"binary": Path(self.path(str(b.binary))),
                                            "command": [self.path(a) for a in b.command]}) for b in result.builds],
            "run": result.run.model_copy(update={"command": [self.path(a) for a in result.run.command]})
            if result.run else None,
            "sanitizers": [p.model_copy(update={"command": [self.path(a) for a in p.command]})
                           for p in result.sanitizers]})

    def toolchain(self, toolchain: Toolchain | None) -> Toolchain | None:
        if toolchain is None:
            return None
        return toolchain.model_copy(update={"nvcc": toolchain.nvcc and self.path(toolchain.nvcc),
                                            "sanitizer": toolchain.sanitizer and self.path(toolchain.sanitizer)})


def report_json(report: VerifyReport) -> str:
    """The report as write_json writes it."""
    return report.model_dump_json(indent=2) + "\n"


def write_json(report: VerifyReport, path: Path, text: str | None = None) -> None:
    """Write the report to `path`, or to standard output when it is `-`; `text`: its report_json, where made."""
    text = report_json(report) if text is None else text
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_report(path, text)


def read_json(path: Path) -> VerifyReport:
    """A JSON report that `--json` wrote, to merge; anything else is a usage error naming the file.

    Only a regular file is read, and only up to REPORT_LIMIT bytes.
    """
    data = read_file(Path(path), REPORT_LIMIT, "a JSON report", UsageError)
    if data is None:
        raise UsageError("no such report", path=path)
    try:
        data = parse_json(data)
    except ValueError as exc:
        raise UsageError(f"not a coursectl JSON report: {str(exc).splitlines()[0]}", path=path)
    if isinstance(data, dict) and "results" in data and data.get("format") != REPORT_FORMAT:
        raise UsageError(f"a report of format {data.get('format', 0)!r}; this coursectl reads format "
                         f"{REPORT_FORMAT}: re-run the command that wrote it", path=path)
    try:
        return VerifyReport.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"not a coursectl JSON report: {first_error(exc)}", path=path)


def report_schema() -> dict:
    """The JSON Schema of the report format, generated from the models."""
    schema = VerifyReport.model_json_schema(schema_generator=EmptyDefaults)
    schema["required"] = ["format", *schema.get("required", [])]   # a report without it is of format 0
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://coursectl.invalid/schemas/report-{REPORT_FORMAT}.json"
    return schema


# XML 1.0 allows tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD and U+10000-U+10FFFF; nothing
# else may appear, not even as a character reference, so a byte a lesson prints must become visible text.
# Written as the characters left out: the same set (every code point checked), compiled in 0.5 ms where
# the negated ranges took 6 ms at import.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """`text` with every character XML 1.0 forbids written out as \\xNN (or \\uNNNN)."""
    return _NOT_XML.sub(escape_char, text)


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def _toolchain_properties(tc: Toolchain | None, suffix: str = "") -> list[tuple[str, str]]:
    """The GPUs and the versions of the CUDA tools of one toolchain, each name ending in `suffix`."""
    missing = "not found" if tc is not None else "unknown"
    gpus = tc.gpus if tc is not None else []
    props = [(f"gpu{suffix}.{g.index}", f"{g.name}, compute capability {g.compute_capability}, {g.uuid}")
             for g in gpus]
    if not gpus:
        props.append((f"gpu{suffix}", "none" if tc is not None else "unknown"))
    return props + [(f"driver{suffix}", (tc and tc.driver_version) or missing),
                    (f"cuda{suffix}", (tc and tc.cuda_version) or missing),
                    (f"nvcc{suffix}", (tc and tc.nvcc_version) or missing),
                    (f"compute-sanitizer{suffix}", (tc and tc.sanitizer_version) or missing)]


def _junit_properties(report: VerifyReport) -> list[tuple[str, str]]:
    """Where the report was made: coursectl, the GPUs and the versions of the CUDA tools; a merge of several
    GPU models names each model's (`gpu.nvidia-h200.0`, `driver.nvidia-h200`) and its shards."""
    props = [("coursectl", report.coursectl_version), ("command", f"coursectl {report.command}"),
             ("offline", "true" if report.offline else "false")]
    if report.shard:
        props.append(("shard", report.shard))
    if len(report.models) > 1:
        for model, run in report.models.items():
            props += [(f"shards.{model}", ", ".join(run.shards))] if run.shards else []
            props += _toolchain_properties(run.toolchain, f".{model}")
    else:
        props += _toolchain_properties(report.toolchain)
    # What each PASS covered (judge/results.py:coverage): gates held, fields by rule, passes run or re-judged.
    props += [(f"covered.{r.lesson}", covered_words(r.covered)) for r in report.results if r.status is Status.PASS]
    return props


def _skip_reason(result: LessonResult) -> str | None:
    """Why a lesson counts as skipped in JUnit, or None if it passed or failed."""
    if result.status in (Status.SKIPPED, Status.UNSUPPORTED):
        return "; ".join(result.reasons) or result.status.value
    if result.status is Status.NO_EVIDENCE:
        return result.unverified or result.status.value
    if result.status in (Status.STALE, Status.INCOMPLETE):
        return why(result) or result.status.value
    return None


def junit_xml(report: VerifyReport) -> str:
    """One testsuite: a testcase per lesson and one per sanitizer pass, valid against junit-10.xsd.

    Failures are <failure>; a FLAKY lesson passes, its earlier attempts in
    <system-err> (under --strict a <failure> of type FLAKY); UNSUPPORTED, SKIPPED and NO_EVIDENCE lessons, and
    sanitizer passes that neither ran nor had a recorded report, are
    <skipped> with the reason. Under --strict the report fails as the exit
    status does (run_verdict): such a lesson is a <failure>, and an empty
    selection or a partial merge is a failing testcase `--strict` of its own. A pass re-judged from its recorded report
    (offline: no command) is a real check and is named "... (recorded)"; one
    judged from the sanitizer cache is named "... (cached)" and takes 0 s. A
    lesson's time is its own seconds less its sanitizer passes', which have
    their own testcases, so the times add up to the suite's.
    """
    suite = ET.Element("testsuite", name=f"coursectl {report.command}")
    properties = ET.SubElement(suite, "properties")
    for name, value in _junit_properties(report):
        ET.SubElement(properties, "property", name=name, value=value)
    verdict = report.verdict()
    cases = failures = skipped = 0
    total = 0.0
    gpu = "offline" if report.offline else None
    for result in report.results:
        classname = f"coursectl.{result.gpu or gpu or 'nogpu'}"
        ran_passes = sum(p.seconds for p in result.sanitizers if p.command and not p.cached)
        case = ET.SubElement(suite, "testcase", classname=classname, name=result.lesson,
                             time=f"{max(0.0, result.seconds - ran_passes):.3f}")
        cases += 1
        total += result.seconds
        skip = _skip_reason(result)
        if result.status.is_failure:
            failures += 1
            failure = ET.SubElement(case, "failure", type=result.status.value,
                                    message=_first_line(result.reasons[0]) if result.reasons else result.status.value)
            failure.text = "\n\n".join(result.reasons)
        elif result.status is Status.FLAKY and verdict.counts_as_failed(result):   # --strict: a failure
            failures += 1
            failure = ET.SubElement(case, "failure", type=result.status.value,
                                    message=f"--strict: flaky, counted as failed: {_first_line(why(result))}")
            failure.text = "\n".join(result.retried)
        elif skip is not None and verdict.counts_as_failed(result):   # --strict: as the exit status counts it
            failures += 1
            failure = ET.SubElement(case, "failure", type=result.status.value,
                                    message=f"--strict: not verified, counted as failed: {_first_line(skip)}")
            failure.text = skip
        elif skip is not None:
            skipped += 1
            ET.SubElement(case, "skipped", type=result.status.value, message=skip)
        if result.transcript:
            ET.SubElement(case, "system-out").text = result.transcript
        err = "\n".join([*(["passed on a retry, after:", *result.retried] if result.retried else []),
                         *([result.run.stderr_tail] if result.run and result.run.stderr_tail else [])])
        if err:   # a FLAKY lesson's earlier attempts, then its run's standard error
            ET.SubElement(case, "system-err").text = err
        for p in result.sanitizers:
            sub = ET.SubElement(suite, "testcase", classname=classname,
                                name=f"{result.lesson} [{p.tool}]" + (" (recorded)" if p.recorded else
                                                                      " (cached)" if p.cached else ""),
                                time=f"{0.0 if p.cached else p.seconds:.3f}")   # cached: not run now
            cases += 1
            if p.problems:
                failures += 1
                failure = ET.SubElement(sub, "failure", type="SANITIZER", message=_first_line(p.problems[0]))
                failure.text = "\n".join(p.problems)
            elif p.not_run:
                skipped += 1
                ET.SubElement(sub, "skipped", type="NOT_RUN", message=f"not run: {p.not_run}")
    if verdict.run_reasons:   # --strict fails the run itself (an empty selection, a partial merge): one case says so
        case = ET.SubElement(suite, "testcase", classname="coursectl", name="--strict", time="0.000")
        cases += 1
        failures += 1
        failure = ET.SubElement(case, "failure", type="STRICT", message="; ".join(verdict.run_reasons))
        failure.text = "\n".join(verdict.run_reasons)
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
    write_report(path, junit_xml(report))


def course_files(root: Path, manifest: Manifest | None = None, *, headers: bool = True) -> list[tuple[Path, str]]:
    """What of the course coursectl reads or writes, each with its name: no report may be written there.

    Without a manifest (`report merge`, run in a course's folder), what every
    course has; with one, also each lesson's source, prose and page, wherever
    lessons.yaml puts them, the build cache and (`headers`) the local headers
    its sources include, found by reading every source.
    """
    root = Path(root)
    owned = [(root / "lessons.yaml", "lessons.yaml, the course's manifest"),
             (root / "lessons", "in lessons/, the lessons' folder"),
             (root / "evidence", "in evidence/, the evidence store"),
             (root / "templates", "in templates/, the page templates"),
             (root / "README.md", "README.md, the course's index"),
             (root / ".coursectl", "in .coursectl/, coursectl's own folder")]
    if manifest is not None:
        owned.insert(0, (manifest.path, f"{manifest.path.name}, the course's manifest"))
        owned.append((cache_root(manifest), "in the build cache"))
        for lesson in manifest.lessons:
            units = manifest.source_paths(lesson)   # every file of a program of several (sources:)
            owned += [(unit, f"the source of lesson {lesson.id!r}") for unit in units]
            if lesson.prose is not None:
                owned.append((root / lesson.prose, f"the prose of lesson {lesson.id!r}"))
            owned.append((root / lesson.page_path, f"the page of lesson {lesson.id!r}"))
            if not headers:
                continue
            try:
                found = [header for unit in units for header in local_headers(unit, manifest.flags(lesson), root)]
            except CoursectlError:   # the build says what is wrong with them
                found = []
            owned += [(header, f"a header of lesson {lesson.id!r}") for header in found]
    return owned


def check_report_paths(manifest: Manifest | None, paths: dict[str, Path | None], *, stdout: str = "") -> None:
    """Refuse, before anything runs, a report path (`--json FILE` and the like) that a report may not replace.

    `paths` maps each option to the path given (None: not given); `stdout` is
    the option whose `-` means standard output. A path that is a file of the
    course (course_files), a folder, or a link to anything but a regular file
    outside the course, a named pipe or a device is a UsageError naming the
    option, the path and why (files.report_refusal); so is one path given to
    two options. Without a manifest the course is the one in the current
    folder, if there is one.
    """
    given = {option: path for option, path in paths.items()
             if path is not None and not (option == stdout and str(path) == "-")}
    if not given:   # nothing to check: the course's files are not even listed
        return
    root = manifest.root if manifest is not None else Path(".")
    if manifest is None and not Path("lessons.yaml").exists():
        owned: list[tuple[Path, str]] = []
    else:
        # A local header leads inside the course (local_headers takes no other): a report can be one, or lie in
        # one, only where it leads inside too, and only then is every source read to find them.
        inside = any(may_lead_inside(Path(path), root) for path in given.values())
        owned = course_files(root, manifest, headers=inside)
    seen: dict[Path, str] = {}
    for option, path in given.items():
        why = report_refusal(Path(path), owned, root)
        if why is not None:
            raise UsageError(f"{option} {path}: {why}")
        key = Path(os.path.normpath(Path(path).absolute()))
        if key in seen:
            raise UsageError(f"{option} {path}: the same file as {seen[key]}; give each report a file of its own")
        seen[key] = option
