"""A lesson with `runs`: its claims across runs (manifest/runs.py), judged once on its runs' judged results.

The workflows call `judge_across_runs` where every run of the lesson has been judged and none is settled yet
(workflows/gathering.py on the GPUs, scheduler.walk_offline without), so that each run's status is settled
once, with them. Each run's transcript is the one its judging parsed (LessonResult.transcripts): the one it
printed now, or in verify --offline each GPU's recorded one; nothing is parsed again. The claims are judged on
each GPU every run has a transcript of. A failed gate across runs is a reason of every run of the lesson, so
each fails (and record stores none of them); a failed expect a note of each.
"""

from __future__ import annotations

from ..manifest.model import Lesson, Manifest
from ..manifest.runs import runs_of
from ..transcript.across import evaluate_across
from .judging import claim_reason
from .results import LessonResult


def gathered(manifest: Manifest, lessons: list[Lesson]) -> dict[str, list[str]]:
    """Each lesson with claims across runs whose runs are all among `lessons`: its runs' ids, in its order.
    A command that selects only some runs of a lesson judges no claim across them."""
    chosen = {lesson.id for lesson in lessons}
    groups: dict[str, list[str]] = {}
    for group in manifest.run_claims:
        ids = [run.id for run in runs_of(manifest, group)]
        if ids and all(run_id in chosen for run_id in ids):
            groups[group] = ids
    return groups


def judge_across_runs(manifest: Manifest, group: str, results: list[LessonResult]) -> list[str]:
    """Judge lesson `group`'s claims across runs on its runs' results (in the order of its runs) and file each
    outcome with every run; returns the ids of the gates that failed. Where the runs have no transcript of one
    GPU in common, nothing is judged."""
    runs = runs_of(manifest, group)
    claims = manifest.run_claims.get(group, [])
    if not claims or len(results) != len(runs):
        return []
    common = [slug for slug in results[0].transcripts if all(slug in other.transcripts for other in results[1:])]
    failed: list[str] = []
    for index, slug in enumerate(common):
        transcripts = {run.run: result.transcripts[slug] for run, result in zip(runs, results)}
        outcomes = evaluate_across(runs[0].output, transcripts, claims)
        prefix = f"{slug}: " if len(common) > 1 else ""
        for out in results:
            if index == 0:
                out.claims += outcomes
            for claim in outcomes:
                if not claim.held:
                    (out.reasons if claim.kind == "gate" else out.notes).append(
                        claim_reason(claim, prefix, context=f" across the runs of {group}"))
        failed += [claim.id for claim in outcomes if claim.kind == "gate" and not claim.held
                   and claim.id not in failed]
    return failed
