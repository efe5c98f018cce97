"""The runs of one lesson met on the GPUs, so that its claims across runs are judged before any run settles.

Each run of a lesson with `runs` walks its own turn (scheduler.py), in a thread of its own. A `Gathering`
is where those turns meet: each arrives once its runs are judged (the workflow's stage
`judge_the_claims_across_runs`, after its sanitizer passes, before record stores anything), and waits there;
the last to arrive judges the claims across the runs once (judge/across.py), on the results the others left,
and every turn goes on from there, to store (record) and settle. A turn that arrives holds no GPU: its timed
runs have let it go (Turn.release) and its passes have ended.

A run that ends without arriving (skipped by --exitfirst, unsupported on its GPU, failed to build, crashed)
leaves: the others go on at once, and nothing is judged across the runs. Ctrl-C (`stopping`) lets every
waiting turn go on too, to be stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..judge.across import gathered, judge_across_runs
from ..judge.results import LessonResult
from ..manifest.model import Lesson, Manifest


class Gathering:
    """One lesson's runs, met (see the module). `failed`: the gates across runs that failed, once judged."""

    def __init__(self, manifest: Manifest, group: str, ids: list[str], stopping: threading.Event):
        self.manifest, self.group, self.ids, self.stopping = manifest, group, ids, stopping
        self.cond = threading.Condition()
        self.results: dict[str, LessonResult] = {}
        self.missing = set(ids)
        self.done = False
        self.failed: list[str] = []

    def arrive(self, lesson_id: str, result: LessonResult, on_wait: Callable[[str], None] = lambda _: None) -> float:
        """This run is judged: wait for the others (`on_wait` says so first); the last to arrive judges the claims
        across the runs. Returns the seconds it waited."""
        started = time.monotonic()
        with self.cond:
            self.results[lesson_id] = result
            self.missing.discard(lesson_id)
            if not self.missing and not self.done:
                try:
                    self.failed = judge_across_runs(self.manifest, self.group,
                                                    [self.results[run_id] for run_id in self.ids])
                finally:
                    self.done = True
                    self.cond.notify_all()
            if not self.done:
                on_wait(f"for {', '.join(run_id for run_id in self.ids if run_id in self.missing)}: "
                        f"claims across the runs of {self.group}")
            while not self.done and not self.stopping.is_set():
                self.cond.wait(timeout=0.1)   # wakes for Ctrl-C, which sets `stopping` and notifies no one
        return time.monotonic() - started

    def leave(self, lesson_id: str) -> None:
        """This run's turn ended; if it never arrived, the others judge nothing across the runs and go on."""
        with self.cond:
            if lesson_id in self.missing:
                self.missing.discard(lesson_id)
                self.done = True
                self.cond.notify_all()


def gatherings(manifest: Manifest, lessons: list[Lesson], stopping: threading.Event) -> dict[str, Gathering]:
    """A Gathering for each lesson with claims across runs whose runs are all among `lessons`, by lesson id."""
    return {group: Gathering(manifest, group, ids, stopping) for group, ids in gathered(manifest, lessons).items()}
