"""A stage that waits for work done elsewhere, and a lesson's walk paused there without a thread waiting.

A lesson's sanitizer passes run after every lesson's timed runs, on the GPU
share's threads (sharing.py), and are judged on its judging thread. A turn
that waited for them in a thread of its own kept that thread for the whole
of the passes' part of the run: in a 400-lesson verify, 400 threads. They
cost more than their memory: the `regex` package's match timeout reads the
process's CPU clock, which the kernel sums over every thread, and each line
of each transcript parsed paid for all of them.

So the walk (Scheduler._walk) starts a WaitingStage's work and, where some of
it is still to come, pauses: the turn's thread ends, and once the last future
is done, the rest of the walk runs on one of a few threads (Scheduler's
`finishing`). Called as a plain stage, a WaitingStage waits where it is.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from typing import Any, Callable


class WaitingStage:
    """A stage whose work ends in futures: `start(turn, result)` returns them (none: nothing to wait for);
    `finish(turn, result, futures)`, once all are done, returns the result from then on."""

    def __init__(self, name: str, start: Callable[[Any, Any], list[Future]],
                 finish: Callable[[Any, Any, list[Future]], Any]):
        self.__name__ = name
        self.start, self.finish = start, finish

    def __call__(self, turn, result):
        pending = self.start(turn, result)
        wait_for_futures(pending)
        return self.finish(turn, result, pending)

    def __repr__(self) -> str:
        return f"<stage {self.__name__}>"


@dataclass
class Paused:
    """A walk paused at stage `index` (a WaitingStage) until `pending` are done, its result so far."""

    index: int
    result: Any
    pending: list[Future]
    done: Callable[[Any], Any] = field(default=lambda result: result)   # what the turn adds to the walk's result

    def when_done(self, then: Callable[[], None]) -> None:
        """`then()` once every pending future is done, in the thread that finishes the last (here, if all are)."""
        left = [len(self.pending)]
        lock = threading.Lock()

        def one_done(_: Future) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                then()

        for future in self.pending:
            future.add_done_callback(one_done)
