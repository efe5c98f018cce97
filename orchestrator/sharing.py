"""Who has each GPU: one lesson's timed runs at a time, sanitizer passes together but never beside them."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterator

from .locks import gpu_lock
from .toolchain import Gpu, free_memory_mib
from .words import plural


# What one compute-sanitizer pass is taken to need of the GPU's memory, to
# bound how many run at once: the tools keep shadow state beside the
# program's own allocations, and the lessons allocate well under 1 GiB.
PASS_MEMORY_MIB = 4096


def pass_slots(free_mib: int | None, jobs: int) -> int:
    """How many passes may run at once on a GPU with `free_mib` free (None: unknown), at most `jobs`."""
    if free_mib is None:
        return max(1, jobs)
    return max(1, min(jobs, free_mib // PASS_MEMORY_MIB))


class GpuShare:
    """Who uses each GPU: one lesson's timed runs at a time, or sanitizer passes, never both at once.

    A lesson whose builds are ready claims a GPU (first come, first served)
    and holds it until its timed runs are done. Passes on a GPU start only
    while no lesson holds it and none waits for a GPU, so the timed runs of
    the lessons that are ready go first; a lesson that holds a GPU waits for
    the passes already running there to end before its timed runs start.
    At most `jobs` passes run at once (default: the CPU cores), and on each
    GPU no more than its free memory holds at PASS_MEMORY_MIB each (asked
    once, when its first pass is about to start). Across processes
    locks.gpu_lock holds the same: exclusively for timed runs, shared for passes.
    """

    def __init__(self, gpus: list[Gpu], jobs: int | None = None, free_memory=free_memory_mib):
        self.gpus = gpus
        self.jobs = jobs or os.cpu_count() or 1
        self.free_memory = free_memory
        self.cond = threading.Condition()
        self.holder: dict[str, str | None] = {gpu.uuid: None for gpu in gpus}   # the lesson that claimed it
        self.running: dict[str, int] = {gpu.uuid: 0 for gpu in gpus}           # passes running on it
        self.waiting: list[str] = []                                            # lessons waiting for a GPU
        self.slots: dict[str, int] = {}
        self.slots_lock = threading.Lock()
        self.closed = False

    def claim(self, lesson_id: str) -> Claim | None:
        """Wait for a GPU that no lesson holds, in the order lessons asked; None once closed."""
        with self.cond:
            self.waiting.append(lesson_id)
            try:
                while not self.closed:
                    free = [gpu for gpu in self.gpus if self.holder[gpu.uuid] is None]
                    if free and self.waiting[0] == lesson_id:
                        gpu = min(free, key=lambda g: self.running[g.uuid])   # the first, unless passes run there
                        self.holder[gpu.uuid] = lesson_id
                        return Claim(self, gpu)
                    self.cond.wait()
                return None
            finally:
                self.waiting.remove(lesson_id)
                self.cond.notify_all()

    def close(self) -> None:
        """Stop: lessons waiting for a GPU get none; passes waiting for one start (to be stopped at once)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    @contextlib.contextmanager
    def timed(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """The claimed GPU to one lesson's timed runs alone: once the passes running there end, and locked."""
        with self.cond:
            if self.running[gpu.uuid]:
                on_wait(f"waiting for GPU {gpu.index}: "
                        f"{plural(self.running[gpu.uuid], 'sanitizer pass', 'sanitizer passes')} running")
            self.cond.wait_for(lambda: self.running[gpu.uuid] == 0 or self.closed)
        with gpu_lock(gpu.uuid, on_wait):
            yield

    @contextlib.contextmanager
    def sanitizing(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """A place for one sanitizer pass on `gpu`, beside other passes but never beside a timed run."""
        slots = self._slots(gpu)
        with self.cond:
            self.cond.wait_for(lambda: self.closed or (
                self.holder[gpu.uuid] is None and not self.waiting and self.running[gpu.uuid] < slots
                and sum(self.running.values()) < self.jobs))
            self.running[gpu.uuid] += 1
        try:
            with gpu_lock(gpu.uuid, on_wait, shared=True):
                yield
        finally:
            with self.cond:
                self.running[gpu.uuid] -= 1
                self.cond.notify_all()

    def _slots(self, gpu: Gpu) -> int:
        with self.slots_lock:
            if gpu.uuid not in self.slots:
                self.slots[gpu.uuid] = pass_slots(self.free_memory(gpu), self.jobs)
            return self.slots[gpu.uuid]


class Claim:
    """One lesson's hold on a GPU for its timed runs: released once, by the first to let it go."""

    def __init__(self, share: GpuShare, gpu: Gpu):
        self.share, self.gpu = share, gpu
        self.held = True

    def release(self) -> None:
        with self.share.cond:
            if self.held:
                self.held = False
                self.share.holder[self.gpu.uuid] = None
                self.share.cond.notify_all()

    def __enter__(self) -> Gpu:
        return self.gpu

    def __exit__(self, *exc) -> None:
        self.release()


