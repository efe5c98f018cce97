"""The GPU memory one sanitizer pass's processes hold, at most, as NVML sees it while the pass runs.

NVML tells each process's GPU memory now (nvmlDeviceGetComputeRunningProcesses),
not its peak once it has ended (that needs accounting mode, which only root
turns on). So while a pass runs, one thread (for every pass at once) asks every
SAMPLE_SECONDS and keeps the most that the processes of that pass held: those
whose environment carries the pass's MARKER (compute-sanitizer starts the
program as a child, and both inherit it). Without NVML (pynvml not
installed, COURSECTL_NO_NVML, no driver) nothing is asked and nothing is
known: the pass's footprint has no GPU memory, and how many passes run at
once takes sharing.PASS_MEMORY_MIB a pass instead.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from typing import Iterator

from .toolchain import NVML, Gpu

MARKER = "COURSECTL_PASS"   # in the pass's environment: which processes are its own
SAMPLE_SECONDS = 0.5
_numbers = itertools.count(1)


class Watch:
    """What a watch saw: `env` to run the pass with, and the most MiB its processes held (None: not known)."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.most_mib: float | None = None


@contextlib.contextmanager
def watching(gpu: Gpu) -> Iterator[Watch]:
    """Around one pass on `gpu`: run it with `watch.env` added to its environment; `watch.most_mib` after."""
    handle = _handle(gpu)
    if handle is None:   # the pass runs as it would have: no marker
        yield Watch({})
        return
    nvml, device = handle
    token = f"{os.getpid()}-{next(_numbers)}"
    watch = Watch({MARKER: token})
    _SAMPLER.add(token, watch, gpu.uuid, nvml, device)
    try:
        yield watch
    finally:
        _SAMPLER.remove(token)


class _Sampler:
    """One thread that samples every pass being watched each SAMPLE_SECONDS, until none is left (it ends then;
    the next watch starts another). A thread a pass was 933 threads started and joined in a 400-lesson
    verify, each asking NVML for itself. A pass is first asked for at the next sample after its watch
    begins, not at once: the watch begins before its program starts, which has reached no GPU by then (a
    sample at each start was 933 samples more, each a wake of this thread, that found nothing new)."""

    def __init__(self):
        self.changed = threading.Condition()
        self.sampling = threading.Lock()    # held through a sample: a watch removed is written no more
        self.watches: dict[str, tuple[Watch, str, object, object]] = {}
        self.thread: threading.Thread | None = None

    def add(self, token: str, watch: Watch, uuid: str, nvml, device) -> None:
        with self.changed:
            self.watches[token] = (watch, uuid, nvml, device)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="coursectl-gpu-memory", daemon=True)
                self.thread.start()

    def remove(self, token: str) -> None:
        with self.changed:
            self.watches.pop(token, None)
        # A sample under way that took this watch ends before the pass reads it (a driver that hangs in NVML
        # holds the pass 5 s at most, as the thread of its own did).
        if self.sampling.acquire(timeout=5):
            self.sampling.release()

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait(SAMPLE_SECONDS)
                watched = list(self.watches.items())
                if not watched:
                    self.thread = None
                    return
                self.sampling.acquire()
            try:
                _sample(watched)
            finally:
                self.sampling.release()


def _sample(watched: list[tuple[str, tuple[Watch, str, object, object]]]) -> None:
    """Each watch's MiB now: NVML asked once a GPU, each process's environment read once."""
    by_gpu: dict[str, list] = {}
    for token, (watch, uuid, nvml, device) in watched:
        by_gpu.setdefault(uuid, []).append((token, watch, nvml, device))
    for entries in by_gpu.values():
        _, _, nvml, device = entries[0]
        held = _held(nvml, device, [f"{MARKER}={token}".encode() for token, *_ in entries])
        if held is None:
            continue
        for (_, watch, _, _), mib in zip(entries, held):
            watch.most_mib = max(watch.most_mib or 0.0, mib)


_SAMPLER = _Sampler()


def _handle(gpu: Gpu):
    """(pynvml, the GPU's handle), or None where NVML is turned off, missing or fails."""
    if os.environ.get("COURSECTL_NO_NVML"):
        return None
    try:
        nvml = NVML.get()
        return nvml, NVML.handle(nvml, gpu.uuid)
    except Exception:  # noqa: BLE001 - without NVML the memory is not known
        return None


def _held(nvml, device, markers: list[bytes]) -> list[float] | None:
    """The MiB the processes carrying each of `markers` hold on the GPU now; None if NVML did not answer."""
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(device)
    except Exception:  # noqa: BLE001
        return None
    totals = [0] * len(markers)
    for process in processes:
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as environ:
                variables = set(environ.read().split(b"\0"))
        except OSError:   # ended, or another user's
            continue
        if not isinstance(process.usedGpuMemory, int):   # None where the driver does not say
            continue
        for index, marker in enumerate(markers):
            if marker in variables:
                totals[index] += process.usedGpuMemory
    return [total / 2**20 for total in totals]
