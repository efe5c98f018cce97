"""A timeline of one coursectl run, for Perfetto or chrome://tracing: COURSECTL_TRACE=FILE.

With COURSECTL_TRACE naming a file, each command writes there, as it ends, a
Chrome trace (JSON, "X" events in microseconds) of where its time went:
start-up (the interpreter and imports, read from /proc), finding the tools,
loading the manifest, each build, each lesson's wait for a GPU, its timed
runs and each sanitizer pass, and the reports. One track per lesson and kind
of work, so passes that run together lie side by side. Open it at
https://ui.perfetto.dev, or summarise it with bench/timeline.py.

Without the variable every span is a no-op.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Iterator

ENV = "COURSECTL_TRACE"


class Trace:
    def __init__(self, path: Path):
        self.path = path
        self.zero = time.monotonic()
        self.events: list[dict] = []
        self.tracks: dict[str, int] = {}
        self.lock = threading.Lock()
        started = _process_age()
        if started is not None:
            self.add("start-up", "coursectl", -started, 0.0, {"what": "interpreter and imports"})

    def add(self, name: str, track: str, start: float, end: float, args: dict) -> None:
        with self.lock:
            tid = self.tracks.setdefault(track, len(self.tracks) + 1)
            self.events.append({"name": name, "ph": "X", "pid": 1, "tid": tid, "ts": round(start * 1e6),
                                "dur": round((end - start) * 1e6), "args": args})

    def write(self) -> None:
        with self.lock:
            names = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}}
                     for track, tid in self.tracks.items()]
            data = {"traceEvents": names + sorted(self.events, key=lambda e: e["ts"]), "displayTimeUnit": "ms",
                    "otherData": {"tool": "coursectl", "ended": round((time.monotonic() - self.zero) * 1e6)}}
        try:
            self.path.write_text(json.dumps(data) + "\n", encoding="utf-8")
        except OSError:
            pass   # a timeline is a remark about a run, never a reason for it to fail


_current: Trace | None = None


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Trace the command run inside, when COURSECTL_TRACE is set, and write the trace as it ends, however."""
    global _current
    path = os.environ.get(ENV)
    if not path or _current is not None:
        yield
        return
    _current = Trace(Path(path))
    try:
        yield
    finally:
        trace, _current = _current, None
        trace.write()


def current() -> Trace | None:
    """The trace being recorded, if any."""
    return _current


@contextlib.contextmanager
def span(name: str, track: str, **args) -> Iterator[None]:
    """Record the time the block takes as `name` on `track` (with `args`), when tracing."""
    trace = current()
    if trace is None:
        yield
        return
    start = time.monotonic() - trace.zero
    try:
        yield
    finally:
        trace.add(name, track, start, time.monotonic() - trace.zero, args)


def _process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), or None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
