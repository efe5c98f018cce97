"""What lives as long as a command, kept out of Python's cycle collector while it runs.

A command loads its manifest, then builds, runs and judges its lessons. What
the load built (and the modules, the toolchain) lives until the command ends,
yet each full pass of the cycle collector went through all of it again: in a
verify of 400 stand-in lessons (bench/scheduler_cpu.py) the collector took
about 1 s of coursectl's CPU, most of it in those passes. gc.freeze() moves
every object that exists into a generation the collector never scans (each
is still freed when nothing refers to it); `long_lived` freezes as it begins,
`freeze_more` after more that will last has been made (the manifest, once
loaded), and the outermost `long_lived` hands them back to the collector as
it ends, so that a process that runs many commands (the tests) keeps none
frozen after them.

What a command makes as it goes (each lesson's results, kept to the end) is
scanned less often too: while `long_lived` lasts the collector runs after
THRESHOLDS' allocations rather than Python's (700, 10, 10). In that 400-lesson
verify the collector took 0.22 s at Python's thresholds (395 young passes,
33 middle, 2 full of 60 ms each) and 0.08 s at these (54, 1, none).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_thresholds: tuple[int, ...] = ()
THRESHOLDS = (5000, 20, 20)


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Everything that exists now frozen out of the collector's scans until the outermost of these ends."""
    global _depth, _thresholds
    with _lock:
        _depth += 1
        if _depth == 1:
            _thresholds = gc.get_threshold()
            gc.set_threshold(*(max(mine, theirs) for mine, theirs in zip(THRESHOLDS, _thresholds)))
        gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()
                gc.set_threshold(*_thresholds)


def freeze_more() -> None:
    """Inside long_lived, freeze what has been made since (what will last as long): outside it, nothing."""
    with _lock:
        if _depth:
            gc.freeze()
