"""Claims across runs: `runs.shared.ms < runs.basic.ms`, each run's fields under `runs.NAME`."""

from __future__ import annotations

from typing import Any

from .claims import BlockView, ClaimResult, evaluate_claim, names_in_scope
from .expressions import FieldView
from .parse import Transcript
from .schema import OutputSchema


class RunsView(FieldView):
    """`runs`: what `.NAME` reads is that run's fields, as a section's block."""

    def __init__(self, runs: dict[str, BlockView]):
        self.fields = runs

    def describe(self) -> str:
        return "runs"

    def __repr__(self) -> str:
        return f"runs[{', '.join(self.fields)}]"


def evaluate_across(schema: OutputSchema, transcripts: dict[str, Transcript], claims: list) -> list[ClaimResult]:
    """The claims over every run's transcript, by run name; the lesson's own names are those of the first run."""
    view: dict[str, Any] = {"runs": RunsView({name: BlockView("runs", name, names_in_scope(schema.items, t.scope))
                                              for name, t in transcripts.items()})}
    first = next(iter(transcripts.values()))
    return [evaluate_claim(schema, first, claim, view) for claim in claims]
