"""`runs:`: one lesson's program run several ways, each run judged as a lesson of its own, `id[run]`.

A lesson with `runs: {basic: [], shared: [shared]}` is written out, when the manifest loads, into the
lessons `id[basic]` and `id[shared]`: the same source, flags and build (one build key, so one build),
each with the lesson's `args` followed by the run's own, and its own transcript, evidence
(evidence/id[run]/<gpu>/) and sanitizer passes. A claim that names `runs.NAME.FIELD` compares runs:
it is taken out of every run's claims and kept in `Manifest.run_claims` under the lesson's id, to be
evaluated once every run has a transcript (transcript/across.py).
"""

from __future__ import annotations

import re

from .model import Claim, Lesson, Manifest

RUN_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_ACROSS = re.compile(r"\bruns\.")


def run_id(lesson_id: str, run: str) -> str:
    return f"{lesson_id}[{run}]"


def across_runs(claim: Claim) -> bool:
    """Whether the claim compares runs: its expression (or `each`/`where`) names `runs.`."""
    return any(_ACROSS.search(text or "") for text in (claim.expression, claim.each, claim.where))


def split_claims(manifest: Manifest, fail) -> None:
    """Move each lesson's claims across runs into manifest.run_claims; refuse one in a lesson without runs."""
    for index, lesson in enumerate(manifest.lessons):
        across = [claim for claim in lesson.claims if across_runs(claim)]
        if not across:
            continue
        if not lesson.runs:
            at = lesson.claims.index(across[0])
            raise fail(("lessons", index, "claims", at),
                       f"claim {across[0].id!r} compares runs (runs.NAME.FIELD), but the lesson has no 'runs'")
        for claim in across:
            for name in re.findall(r"\bruns\.([A-Za-z0-9_-]+)", claim.expression):
                if name not in lesson.runs:
                    raise fail(("lessons", index, "claims", lesson.claims.index(claim)),
                               f"claim {claim.id!r} names run {name!r}; the lesson's runs are "
                               f"{', '.join(lesson.runs)}")
        manifest.run_claims[lesson.id] = across
        lesson.claims = [claim for claim in lesson.claims if not across_runs(claim)]


def expand_runs(manifest: Manifest) -> None:
    """Write each lesson with `runs` out into one lesson per run, in place, its key lines moved along."""
    if not any(lesson.runs for lesson in manifest.lessons):
        return
    lessons: list[Lesson] = []
    lines = {key: line for key, line in manifest.lines.items() if not (len(key) >= 2 and key[0] == "lessons")}
    for index, lesson in enumerate(manifest.lessons):
        variants = ([lesson.model_copy(update={"id": run_id(lesson.id, name), "args": [*lesson.args, *args],
                                               "run": name, "group": lesson.id})
                     for name, args in lesson.runs.items()] if lesson.runs else [lesson])
        for variant in variants:
            new = len(lessons)
            lessons.append(variant)
            for key, line in manifest.lines.items():
                if len(key) >= 2 and key[0] == "lessons" and key[1] == index:
                    lines[("lessons", new, *key[2:])] = line
    manifest.lessons = lessons
    manifest.lines = lines


def runs_of(manifest: Manifest, group: str) -> list[Lesson]:
    """The runs of lesson `group`, in the manifest's order."""
    return [lesson for lesson in manifest.lessons if lesson.group == group]
