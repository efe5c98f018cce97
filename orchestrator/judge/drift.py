"""What changed since the evidence: underneath a run (provenance), in its claims and sanitizer
findings, and the Markdown drift report a pull request that carries new evidence shows.

`describe_drift` is the one place these are computed; it fills a LessonResult's
`provenance`, `claim_changes` and `finding_changes`, which the terminal, the
JSON report and `drift_report` all show. The fields that moved come from
judging (`compare_with_evidence`, `compare_with_previous`), as everywhere.
Nothing here runs a program; only `write_drift_report` writes a file.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from pydantic import BaseModel

from .. import __version__
from ..transcript.claims import ClaimResult
from .comparison import FieldResult, FieldStatus
from ..errors import EvidenceError, TranscriptError
from ..cuda.build import BuildResult
from .evidence import EvidenceMeta, Recorded, lesson_digest, load_evidence, source_changes
from ..files import write_report
from .judging import claims_on_evidence, judge_recorded_pass, parse_evidence, sources_now
from ..manifest.model import Lesson, Manifest, SanitizerPass
from .results import ClaimChange, FindingChange, LessonResult, ProvenanceChange, shown
from ..cuda.sanitizer import Finding, Report
from ..cuda.toolchain import Gpu, Toolchain
from ..markdown import cell, code, fence, md
from ..words import format_value

MAX_FAILURES = 3      # failures kept with a claim that changed
ROWS_SHOWN = 10       # rows of a report table before the rest folds into <details>


# -- provenance -------------------------------------------------------------------------------
class Provenance(BaseModel):
    """What a lesson's figures stand on: GPU, driver, toolchain, source, flags, clocks."""

    gpu: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    nvcc: str | None = None
    sanitizer: str | None = None
    coursectl: str | None = None
    source: str | None = None
    flags: list[str] | None = None
    arch: str | None = None
    max_sm_clock_mhz: int | None = None
    peak_gbps: float | None = None
    peak_fp32_gflops: float | None = None
    # Every local file the build reads, by its path in the course: the source (as `source`) and its
    # headers; None where unknown (evidence recorded before meta.json kept them).
    sources: dict[str, str | None] | None = None

    def items(self) -> list[tuple[str, str | None]]:
        """(what, value as shown) in a fixed order, the names people use."""
        def unit(value, suffix: str) -> str | None:
            return None if value is None else f"{value} {suffix}"
        return [
            ("GPU", self.gpu), ("compute capability", self.compute_capability),
            ("driver", self.driver), ("CUDA", self.cuda), ("nvcc", self.nvcc),
            ("compute-sanitizer", self.sanitizer), ("coursectl", self.coursectl),
            ("source sha256", self.source), ("flags", None if self.flags is None else shlex.join(self.flags)),
            ("arch", self.arch), ("max SM clock", unit(self.max_sm_clock_mhz, "MHz")),
            ("peak DRAM bandwidth", unit(self.peak_gbps, "GB/s")),
            ("peak FP32", unit(self.peak_fp32_gflops, "GFLOP/s")),
        ]


def provenance_of(meta: EvidenceMeta) -> Provenance:
    """What recorded evidence stands on, from its meta.json."""
    return Provenance(gpu=meta.gpu_name, compute_capability=meta.compute_capability,
                      driver=meta.driver_version, cuda=meta.cuda_version, nvcc=meta.nvcc_version,
                      sanitizer=meta.sanitizer_version, coursectl=meta.coursectl_version,
                      source=meta.source_sha256, flags=meta.flags, arch=meta.arch,
                      max_sm_clock_mhz=meta.max_sm_clock_mhz, peak_gbps=meta.peak_gbps,
                      peak_fp32_gflops=meta.peak_fp32_gflops, sources=dict(meta.sources) or None)


def provenance_now(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, gpu: Gpu, arch: str,
                   build: BuildResult | None = None) -> Provenance:
    """What a run now stands on: the values `record` would write into meta.json.

    The local files are those `build` read; without it, the source alone.
    """
    return Provenance(gpu=gpu.name, compute_capability=gpu.compute_capability,
                      driver=toolchain.driver_version, cuda=toolchain.cuda_version, nvcc=toolchain.nvcc_version,
                      sanitizer=toolchain.sanitizer_version, coursectl=__version__,
                      source=lesson_digest(manifest.source_path(lesson)), flags=manifest.flags(lesson),
                      arch=arch, max_sm_clock_mhz=gpu.max_sm_clock_mhz, peak_gbps=gpu.peak_gbps,
                      peak_fp32_gflops=gpu.peak_fp32_gflops,
                      sources=sources_now(manifest, lesson, [build] if build is not None else []))


def provenance_changes(old: Provenance, new: Provenance) -> list[ProvenanceChange]:
    """Every item whose value differs between the two, in Provenance's order.

    Where both sides know the local files a build read, each file that
    changed is an item of its own, named by its path, in place of the
    source's sha256 (`lessons/ext/common/check.cuh changed since the evidence`).
    """
    by_file = old.sources is not None and new.sources is not None
    changes = []
    for (what, before), (_, after) in zip(old.items(), new.items()):
        if by_file and what == "source sha256":
            changes += [ProvenanceChange(what=name, old=was, new=now, file=True)
                        for name, was, now in source_changes(old.sources, new.sources)]
        elif before != after:
            changes.append(ProvenanceChange(what=what, old=before, new=after))
    return changes


# -- claims and sanitizer findings ---------------------------------------------------------------
def claim_changes(old: list[ClaimResult], new: list[ClaimResult]) -> list[ClaimChange]:
    """Claims judged on both sides whose outcome differs, in the order of `new`."""
    before = {claim.id: claim for claim in old}
    changes = []
    for claim in new:
        was = before.get(claim.id)
        if was is None or was.held == claim.held:
            continue
        failed = claim if not claim.held else was
        changes.append(ClaimChange(id=claim.id, kind=claim.kind, says=claim.says, was=was.held, now=claim.held,
                                   failures=failed.failures[:MAX_FAILURES]))
    return changes


def _file_line(file: str | None, line: int | None) -> str:
    name = Path(file.replace("\\", "/")).name if file else "?"
    return f"{name}:{line}" if line is not None else name


def finding_place(finding: Finding) -> str:
    """Where a finding lies, by file name (the folders differ between machines): a race as write → read."""
    if finding.source is not None and finding.destination is not None:
        return " → ".join(f"{end.direction.lower()} {_file_line(end.file, end.line)}"
                           for end in (finding.source, finding.destination))
    if finding.file or finding.line:
        return _file_line(finding.file, finding.line)
    return "-"


def _grouped(report: Report) -> dict[tuple, tuple[int, Finding]]:
    groups: dict[tuple, tuple[int, Finding]] = {}
    for finding in report.findings:
        place = finding_place(finding)
        key = (finding.kernel, finding.kind, place if place != "-" else finding.text.splitlines()[0])
        count, first = groups.get(key, (0, finding))
        groups[key] = (count + 1, first)
    return groups


def finding_changes(tool: str, old: Report, new: Report) -> list[FindingChange]:
    """Findings, by kernel, kind and place, in one pass's report and not the other's."""
    before, after = _grouped(old), _grouped(new)
    changes = []
    for change, here, there in (("appeared", after, before), ("went away", before, after)):
        for key, (count, finding) in here.items():
            if key not in there:
                changes.append(FindingChange(tool=tool, change=change, kernel=finding.kernel, kind=finding.kind,
                                             at=finding_place(finding), reports=count,
                                             text=finding.text.splitlines()[0] if finding.text else ""))
    return changes


# -- the stage ----------------------------------------------------------------------------------
def describe_drift(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, gpu: Gpu, arch: str,
                   result: LessonResult, build: BuildResult | None = None, recorded: Recorded | None = None) -> None:
    """What changed since this GPU's evidence: provenance, claims' outcomes, sanitizer findings.

    Call it after the run is judged and sanitized and before record replaces
    the evidence, with the build that ran (its local files are provenance).
    Evidence that cannot be read is left to judging to report.
    """
    try:
        parsed = parse_evidence(manifest, lesson, gpu.slug, recorded=recorded)
        evidence = parsed.evidence if parsed is not None else None
    except TranscriptError:
        parsed = None
        try:
            evidence = (recorded.load(gpu.slug) if recorded is not None
                        else load_evidence(manifest.root, lesson.id, gpu.slug))
        except EvidenceError:
            return
    except EvidenceError:
        return
    if evidence is None:
        return
    result.evidence_date = evidence.meta.date
    result.provenance = provenance_changes(provenance_of(evidence.meta),
                                           provenance_now(manifest, lesson, toolchain, gpu, arch, build))
    if parsed is not None and result.claims:
        old, _ = claims_on_evidence(manifest, lesson, parsed, [build] if build is not None else [])
        result.claim_changes = claim_changes(old, result.claims)
    declared = manifest.sanitizers(lesson)
    for outcome in result.sanitizers:
        if outcome.report is None or outcome.recorded:
            continue
        judged = judge_recorded_pass(manifest, lesson, evidence, outcome.tool,
                                     declared.get(outcome.tool) or SanitizerPass())
        if judged is not None and judged[1] is not None:
            result.finding_changes += finding_changes(outcome.tool, judged[1], outcome.report)


# -- the Markdown drift report --------------------------------------------------------------------
CHANGED = (FieldStatus.within, FieldStatus.moved, FieldStatus.missing, FieldStatus.new, FieldStatus.ambiguous,
           FieldStatus.untrusted)


def move_size(field: FieldResult) -> float:
    """|log ratio| of a field's move; a move without a positive ratio (text, missing, sign) counts as infinite."""
    if field.old == field.new:
        return 0.0
    if field.ratio is None or field.ratio <= 0:
        return math.inf
    return abs(math.log(field.ratio))


def moved_fields(result: LessonResult) -> list[FieldResult]:
    """The fields whose value changed: those outside their rule first, then the largest moves first."""
    changed = [f for f in result.fields if f.status in CHANGED and (f.old != f.new or f.status.is_failure)]
    return sorted(changed, key=lambda f: (not f.status.is_failure, -move_size(f)))


def has_drift(result: LessonResult) -> bool:
    return bool(result.provenance or moved_fields(result) or result.claim_changes or result.finding_changes
                or result.stale)


def markdown_table(header: list[str], rows: list[list[str]], align: list[str] | None = None,
                   fold: str = "more") -> list[str]:
    """A GitHub table; past ROWS_SHOWN rows the rest go into a <details> block of their own."""
    align = align or ["---"] * len(header)

    def table(part: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
                *("| " + " | ".join(row) + " |" for row in part)]
    lines = table(rows[:ROWS_SHOWN])
    rest = rows[ROWS_SHOWN:]
    if rest:
        lines += ["", f"<details><summary>{len(rest)} {fold}</summary>", "", *table(rest), "", "</details>"]
    return lines


def _status(result: LessonResult) -> str:
    return result.status.value + (" (recorded)" if result.recorded else "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def drift_report(command: str, results: list[LessonResult], toolchain: Toolchain | None) -> str:
    """The Markdown a reviewer reads: per lesson what changed underneath, what moved, claims and findings."""
    gpus = sorted({r.gpu for r in results if r.gpu})
    title = f"## Evidence drift: coursectl {command}" + (f" on {', '.join(gpus)}" if gpus else "")
    lines = [f"<!-- Generated by coursectl {command} --report from the run and the evidence it was "
             f"compared with. -->", title, ""]
    if toolchain is not None:
        now = [f"{what} {value}" for what, value in (("driver", toolchain.driver_version),
                                                     ("CUDA", toolchain.cuda_version),
                                                     ("nvcc", toolchain.nvcc_version),
                                                     ("compute-sanitizer", toolchain.sanitizer_version)) if value]
        lines += [f"Now: {', '.join(now)}; coursectl {__version__}.", ""]
    compared = [r for r in results if r.evidence_date is not None]
    drifted = [r for r in compared if has_drift(r)]
    steady = [r for r in compared if not has_drift(r)]
    uncompared = [r for r in results if r.evidence_date is None]
    if not compared:
        lines.append(f"Nothing to compare: {_uncompared(uncompared)}.")
    elif not drifted:
        lines.append(f"No field moved; nothing changed underneath: {_against(compared)}.")
    else:
        rows = []
        for r in drifted:
            moved = moved_fields(r)
            outside = sum(f.status.is_failure for f in moved)
            rules = "its rule" if outside == 1 else "their rules"
            rows.append([code(r.lesson), md(_status(r)), str(len(r.provenance)),
                         f"{len(moved)} of {len(r.fields)}" + (f" ({outside} outside {rules})" if outside else ""),
                         str(len(r.claim_changes)), str(len(r.finding_changes))])
        lines += markdown_table(["lesson", "status", "underneath", "fields moved", "claims changed",
                                 "sanitizer findings changed"], rows,
                                ["---", "---", "---:", "---:", "---:", "---:"], "more lessons")
    if steady and drifted:
        lines += ["", "No field moved and nothing changed underneath: " + _against(steady) + "."]
    if uncompared and compared:
        lines += ["", f"Not compared: {_uncompared(uncompared)}."]
    for r in drifted:
        lines += ["", f"### {md(r.lesson)}", "",
                  f"{md(_status(r))} against the {md(r.evidence or r.gpu or '')} evidence of "
                  f"{(r.evidence_date or '')[:10]}."]
        if r.provenance:
            lines += ["", "What changed underneath:", ""]
            lines += markdown_table(["what", "evidence", "now"],
                                    [[md(c.what), md(shown(c.old, "not recorded")),
                                      md(shown(c.new, "unknown"))] for c in r.provenance])
        moved = moved_fields(r)
        if moved:
            lines += ["", f"{len(moved)} of {_count(len(r.fields), 'field')} moved, those outside their rule "
                          "first, then the largest |log ratio| first:", ""]
            lines += markdown_table(
                ["field", "rule", "evidence", "now", "ratio", "result"],
                [[code(f.path), md(f.rule), md(format_value(f.old)), md(format_value(f.new)),
                  f"{f.ratio:.3f}" if f.ratio is not None else "-",
                  f"**{f.status.value}**" if f.status.is_failure else f.status.value] for f in moved],
                ["---", "---", "---:", "---:", "---:", "---"], "more fields")
        elif r.fields:
            lines += ["", "No field moved."]
        if r.claim_changes:
            lines += ["", "Claims whose outcome changed:", ""]
            lines += markdown_table(
                ["claim", "kind", "on the evidence", "now", "why"],
                [[f"{code(c.id)}: {md(c.says)}" if c.says else code(c.id),
                  "gate" if c.kind == "gate" else "prediction",
                  _held(c.kind, held=c.was), _held(c.kind, held=c.now),
                  cell("; ".join(code(f) for f in c.failures)) or "-"] for c in r.claim_changes])
        if r.finding_changes:
            # A finding without a place (an API error) is told apart by what it says.
            says = any(c.at == "-" for c in r.finding_changes)
            lines += ["", "Sanitizer findings that appeared or went away:", ""]
            lines += markdown_table(
                ["tool", "change", "kernel", "kind", "at", "reports", *(["says"] if says else [])],
                [[c.tool, c.change, code(c.kernel) if c.kernel else "-", md(c.kind), md(c.at), str(c.reports),
                  *([md(c.text) if c.at == "-" else ""] if says else [])] for c in r.finding_changes],
                ["---", "---", "---", "---", "---", "---:", *(["---"] if says else [])], "more findings")
        if r.stale:
            lines += ["", "What no longer matches the evidence (a rule that checks less, before -> after):", ""]
            lines += [f"- {md(change)}" for change in r.stale]
        if r.reasons:
            lines += ["", f"<details><summary>Why it is {md(r.status.value)}</summary>", "",
                      fence("\n".join(r.reasons), "text"), "", "</details>"]
    return "\n".join(lines) + "\n"


def _against(results: list[LessonResult]) -> str:
    """`day13` and `day16` against the nvidia-h200 evidence."""
    by_slug: dict[str, list[str]] = {}
    for r in results:
        by_slug.setdefault(r.evidence or r.gpu or "", []).append(code(r.lesson))
    return "; ".join(f"{', '.join(names)} against the {md(slug)} evidence" for slug, names in by_slug.items())


def _uncompared(results: list[LessonResult]) -> str:
    return ("no evidence for this GPU before this run, or the run stopped first: "
            + ", ".join(f"{code(r.lesson)} {md(_status(r))}" for r in results))


def _held(kind: str, *, held: bool) -> str:
    if held:
        return "held"
    return "**failed**" if kind == "gate" else "missed"


def write_drift_report(path: Path, command: str, results: list[LessonResult], toolchain: Toolchain | None) -> None:
    write_report(path, drift_report(command, results, toolchain))
