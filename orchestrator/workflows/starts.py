"""Timed runs on different GPUs of a host started apart (START_GAP): the driver starts CUDA programs one at a time."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Iterator

# Seconds between the starts of timed runs on different GPUs of a host. The
# driver starts CUDA programs (cuInit and their context) one at a time, GPUs
# or not: on two H200s of one host, a short program's start-up took 250 ms
# alone and 444-570 ms beside another program starting on the other GPU. So
# two lessons' runs started together on two GPUs each lose a start-up; started
# apart, each starts while the other runs. Twelve lesson runs on each GPU took
# 13.4 s started together, 12.8 s with starts at least 0.15 s apart and 11.3
# to 11.5 s at least 0.3 s apart, against 9.3 to 9.9 s for each GPU alone
# (bench/results/HISTORY.md, 2026-11-30-nvidia-h200-x2-start-gap). One GPU's runs never
# wait: its previous run has ended.
START_GAP = 0.3


class StartGap:
    """Timed runs' starts kept apart: each waits until the previous one has run `gap` seconds, or has ended.

    See START_GAP. A run never waits for one that has ended, so the runs of
    one GPU, one after another, never wait. Once closed, nothing waits.
    """

    def __init__(self, gap: float):
        self.gap = gap
        self.cond = threading.Condition()
        self.last: _Start | None = None
        self.closed = False

    @contextlib.contextmanager
    def start(self) -> Iterator[None]:
        """Around one program's run: it starts once the previous start is `gap` old or its program has ended."""
        with self.cond:
            while self.last is not None and self.last.running and not self.closed:
                left = self.last.at + self.gap - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            mine = self.last = _Start(time.monotonic())
        try:
            yield
        finally:
            with self.cond:
                mine.running = False
                self.cond.notify_all()

    def close(self) -> None:
        """Stop: a run waiting goes now (to be stopped at once)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()


@dataclass
class _Start:
    at: float              # when it started (time.monotonic())
    running: bool = True
