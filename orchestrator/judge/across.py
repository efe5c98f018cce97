"""A lesson with `runs`: its claims across runs judged once every run it has was judged (manifest/runs.py).

Each run's transcript is the one it printed now, or where it did not run (verify --offline) the one
recorded for the GPU it was judged against. A failed gate across runs is a reason of every run of the
lesson, so each fails; a failed expect a note of each.
"""

from __future__ import annotations

from ..errors import CoursectlError
from ..files import relative
from ..manifest.model import Manifest
from ..manifest.runs import runs_of
from ..transcript.across import evaluate_across
from ..transcript.parse import Transcript, parse_transcript
from .evidence import list_gpus, load_evidence
from .judging import claim_reason
from .results import LessonResult, settle


def _transcript(manifest: Manifest, lesson, result: LessonResult) -> Transcript | None:
    if result.transcript is not None:
        return parse_transcript(lesson.output, result.transcript, lesson.id)
    for slug in ([result.evidence] if result.evidence else list_gpus(manifest.root, lesson.id)):
        evidence = load_evidence(manifest.root, lesson.id, slug)
        if evidence is not None:
            path = relative(evidence.directory / "transcript.txt", manifest.root)
            return parse_transcript(lesson.output, evidence.transcript, path)
    return None


def judge_across_runs(manifest: Manifest, results: list[LessonResult], *, compared: bool = True) -> None:
    """Judge each lesson's claims across runs where all its runs are among `results`, and settle them again."""
    by_id = {result.lesson: result for result in results}
    for group, claims in manifest.run_claims.items():
        runs = runs_of(manifest, group)
        if not runs or not all(run.id in by_id for run in runs):
            continue
        transcripts: dict[str, Transcript] = {}
        for run in runs:
            try:
                parsed = _transcript(manifest, run, by_id[run.id])
            except CoursectlError:
                parsed = None
            if parsed is None:
                break
            transcripts[run.run] = parsed
        else:
            outcomes = evaluate_across(runs[0].output, transcripts, claims)
            for run in runs:
                out = by_id[run.id]
                for claim in outcomes:
                    out.claims.append(claim)
                    if not claim.held:
                        (out.reasons if claim.kind == "gate" else out.notes).append(
                            claim_reason(claim, context=f" across the runs of {group}"))
                settle(out, compared=compared)
