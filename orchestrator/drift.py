"""What changed since the evidence: underneath a run (provenance), in its claims and sanitizer findings.

`describe_drift` is the one place these are computed; it fills a LessonResult's
`provenance`, `claim_changes` and `finding_changes`, which the terminal and the
JSON report show. The fields that moved come from judging
(`compare_with_evidence`, `compare_with_previous`), as everywhere. Nothing
here runs a program or writes a file.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import BaseModel

from . import __version__
from .claims import ClaimResult, evaluate_claims
from .errors import EvidenceError, TranscriptError
from .evidence import EvidenceMeta, lesson_digest, load_build_evidence, load_evidence
from .judging import judge_recorded_pass, parse_evidence
from .manifest import Lesson, Manifest, SanitizerPass
from .results import ClaimChange, FindingChange, LessonResult, ProvenanceChange
from .sanitizer import Finding, Report
from .toolchain import Gpu, Toolchain

MAX_FAILURES = 3      # failures kept with a claim that changed


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
                      peak_fp32_gflops=meta.peak_fp32_gflops)


def provenance_now(manifest: Manifest, lesson: Lesson, toolchain: Toolchain, gpu: Gpu, arch: str) -> Provenance:
    """What a run now stands on: the values `record` would write into meta.json."""
    return Provenance(gpu=gpu.name, compute_capability=gpu.compute_capability,
                      driver=toolchain.driver_version, cuda=toolchain.cuda_version, nvcc=toolchain.nvcc_version,
                      sanitizer=toolchain.sanitizer_version, coursectl=__version__,
                      source=lesson_digest(manifest.source_path(lesson)), flags=manifest.flags(lesson),
                      arch=arch, max_sm_clock_mhz=gpu.max_sm_clock_mhz, peak_gbps=gpu.peak_gbps,
                      peak_fp32_gflops=gpu.peak_fp32_gflops)


def provenance_changes(old: Provenance, new: Provenance) -> list[ProvenanceChange]:
    """Every item whose value differs between the two, in Provenance's order."""
    return [ProvenanceChange(what=what, old=before, new=after)
            for (what, before), (_, after) in zip(old.items(), new.items()) if before != after]


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
                   result: LessonResult) -> None:
    """What changed since this GPU's evidence: provenance, claims' outcomes, sanitizer findings.

    Call it after the run is judged and sanitized and before record replaces
    the evidence. Evidence that cannot be read is left to judging to report.
    """
    try:
        parsed = parse_evidence(manifest, lesson, gpu.slug)
        evidence = parsed.evidence if parsed is not None else None
    except TranscriptError:
        parsed = None
        try:
            evidence = load_evidence(manifest.root, lesson.id, gpu.slug)
        except EvidenceError:
            return
    except EvidenceError:
        return
    if evidence is None:
        return
    result.evidence_date = evidence.meta.date
    result.provenance = provenance_changes(provenance_of(evidence.meta),
                                           provenance_now(manifest, lesson, toolchain, gpu, arch))
    if parsed is not None and result.claims:
        try:
            built = load_build_evidence(manifest.root, lesson.id, evidence.meta.arch)
        except EvidenceError:
            built = None
        old = evaluate_claims(lesson.output, parsed.transcript, lesson.claims,
                              built.kernels if built is not None else None)
        result.claim_changes = claim_changes(old, result.claims)
    declared = manifest.sanitizers(lesson)
    for outcome in result.sanitizers:
        if outcome.report is None or outcome.recorded:
            continue
        judged = judge_recorded_pass(manifest, lesson, evidence, outcome.tool,
                                     declared.get(outcome.tool) or SanitizerPass())
        if judged is not None and judged[1] is not None:
            result.finding_changes += finding_changes(outcome.tool, judged[1], outcome.report)
