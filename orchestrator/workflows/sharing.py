"""Who has each GPU: one lesson's timed runs at a time, sanitizer passes together but never beside them."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from .locks import gpu_lock
from ..cuda.toolchain import Gpu, free_memory_mib
from ..words import plural


# What one compute-sanitizer pass is taken to need of the GPU's memory, to
# bound how many run at once: the tools keep shadow state beside the
# program's own allocations, and the lessons allocate well under 1 GiB.
PASS_MEMORY_MIB = 4096

# Passes at once on one GPU, unless --sanitizer-jobs says otherwise. On an
# H200 the course's 20 passes took 22.8 s four at a time, 19.8 s eight at a
# time and 20.4 s all at once (commit 4f1b086's message): past
# a handful, more at once only makes each slower. Fewer at once also leaves
# passes waiting that another GPU, once its timed runs are done, can take.
PASSES_PER_GPU = 6


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


def pass_slots(free_mib: int | None, jobs: int) -> int:
    """How many passes may run at once on a GPU with `free_mib` free (None: unknown), at most `jobs`."""
    if free_mib is None:
        return max(1, jobs)
    return max(1, min(jobs, free_mib // PASS_MEMORY_MIB))


class GpuShare:
    """Who uses the GPUs: lessons' timed runs, one at a time on each, or sanitizer passes; never both at once.

    A lesson whose builds are ready asks for a GPU; among the lessons waiting,
    the one with the highest priority (its longest sanitizer pass, expected)
    goes first, then the first to ask. It takes a GPU that no lesson holds,
    one without passes if there is one, and holds it until its timed runs are
    done. Those wait until no pass runs on any GPU. On two H200s of one host,
    passes on the other GPU once slowed a 10 µs kernel to 240 µs
    (bench/results/HISTORY.md, 2026-11-30-nvidia-h200-x2-early); in 20 runs meant to
    catch it, the kernels kept their times, but the lessons' runs took about
    1.5 times as long (18.5 s against 12.6 s for 16), and letting passes use
    the other GPU meanwhile lowered the throughput of two GPUs from 1.65× to
    1.39× (bench/results/HISTORY.md, 2026-11-30-nvidia-h200-x2-interference and -overlap).
    So a timed run has the host's GPUs to the timed runs alone. Timed runs on
    different GPUs start `start_gap` seconds apart (`starts`: see START_GAP).

    Passes start only while no lesson holds or waits for any GPU, and no
    lesson named in `coming` (those still building) has yet asked for one:
    every timed run of the run goes first. Otherwise a pass started while a
    lesson was still building holds back that lesson's timed runs for as long
    as the pass takes: in a cold verify on an H200, day 14's racecheck (6 s)
    began 0.13 s before day 71's build was done, day 71's timed runs waited
    5.9 s for it, and the run took 14.8 s; with every timed run first, 11.8 s
    and 11.5 s on the next machine (bench/results/HISTORY.md, 2026-11-30-nvidia-h200-cold).

    A pass is not tied to its lesson's GPU: it runs on any GPU of the same
    model and architecture, the one with the fewest passes. Passes waiting
    start longest first (their expected seconds), then in the order they
    were queued.

    At most `jobs` passes run at once in all (default: the CPU cores, or
    `per_gpu` if more), on each GPU at most `per_gpu` (--sanitizer-jobs;
    default: `jobs` if given, else PASSES_PER_GPU)
    and no more than its free memory holds at PASS_MEMORY_MIB each (asked
    once, before its first pass). Across processes locks.gpu_lock holds the
    same for each GPU: exclusively for timed runs, shared for passes.
    """

    def __init__(self, gpus: list[Gpu], jobs: int | None = None, free_memory=free_memory_mib,
                 per_gpu: int | None = None, coming: Iterable[str] = (), start_gap: float | None = None):
        self.gpus = gpus
        self.starts = StartGap(START_GAP if start_gap is None else start_gap)
        self.coming = set(coming)   # lessons that will ask for a GPU (being built), until they do
        self.jobs = jobs or max(os.cpu_count() or 1, per_gpu or 1)
        self.per_gpu = per_gpu or jobs or PASSES_PER_GPU
        self.free_memory = free_memory
        self.cond = threading.Condition()
        self.holder: dict[str, str | None] = {gpu.uuid: None for gpu in gpus}   # the lesson that claimed it
        self.running: dict[str, int] = {gpu.uuid: 0 for gpu in gpus}           # passes running on it
        self.waiting: list[tuple[float, int, str]] = []                         # lessons: (-priority, order, id)
        self.passes_waiting: list[Ticket] = []                                  # passes queued
        self.order = itertools.count()
        self.slots: dict[str, int] = {}
        self.slots_lock = threading.Lock()
        self.closed = False

    def claim(self, lesson_id: str, priority: float = 0.0) -> Claim | None:
        """Wait for a GPU for this lesson's timed runs (see the class); None once closed."""
        me = (-priority, next(self.order), lesson_id)
        with self.cond:
            self.coming.discard(lesson_id)
            self.waiting.append(me)
            try:
                while not self.closed:
                    free = [gpu for gpu in self.gpus if self.holder[gpu.uuid] is None]
                    if free and min(self.waiting) == me:
                        gpu = min(free, key=lambda g: self.running[g.uuid])   # the first, unless passes run there
                        self.holder[gpu.uuid] = lesson_id
                        return Claim(self, gpu)
                    self.cond.wait()
                return None
            finally:
                self.waiting.remove(me)
                self.cond.notify_all()

    def close(self) -> None:
        """Stop: lessons waiting for a GPU get none; passes and timed runs waiting start (to be stopped at once)."""
        with self.cond:
            self.closed = True
            self.coming.clear()
            self.cond.notify_all()
        self.starts.close()

    @contextlib.contextmanager
    def timed(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """The claimed GPU to one lesson's timed runs alone: once no pass runs on any GPU, and locked."""
        with self.cond:
            if sum(self.running.values()):
                on_wait(f"waiting for GPU {gpu.index}: "
                        f"{plural(sum(self.running.values()), 'sanitizer pass', 'sanitizer passes')} running")
            self.cond.wait_for(lambda: sum(self.running.values()) == 0 or self.closed)
        with gpu_lock(gpu.uuid, on_wait):
            yield

    def queue_passes(self, lesson_id: str, gpu: Gpu, expected: dict[str, float]) -> dict[str, Ticket]:
        """Put a lesson's passes (tool: expected seconds) in the queue: a ticket each, for `sanitizing`.

        A lesson queues them as it lets its GPU go, so that they start in the
        order of their expected length, not in the order their lessons ended.
        """
        with self.cond:
            tickets = {tool: Ticket(-seconds, next(self.order), gpu, lesson_id) for tool, seconds in expected.items()}
            self.passes_waiting += tickets.values()
            self.cond.notify_all()
            return tickets

    def withdraw(self, ticket: Ticket | None = None, lesson_id: str | None = None) -> None:
        """Take a ticket, or every ticket of a lesson, out of the queue: a pass from the cache, or a turn that ended."""
        with self.cond:
            self.passes_waiting = [waiting for waiting in self.passes_waiting
                                   if waiting is not ticket and waiting.lesson != lesson_id]
            self.cond.notify_all()

    @contextlib.contextmanager
    def sanitizing(self, ticket: Ticket, on_wait: Callable[[str], None]) -> Iterator[Gpu]:
        """A place for the ticket's pass on its GPU or another of that model, beside passes, never a timed run.

        The ticket comes from queue_passes, and leaves the queue here. Yields
        the GPU it runs on. Passes waiting start longest first.
        """
        gpu = ticket.gpu
        candidates = [other for other in self.gpus if (other.name, other.arch) == (gpu.name, gpu.arch)]
        for other in candidates:   # their free memory, asked before taking the lock that every turn waits on
            self._slots(other)
        with self.cond:
            try:
                chosen = None
                while chosen is None and not self.closed:
                    first = min(waiting for waiting in self.passes_waiting if waiting.gpu.name == gpu.name)
                    chosen = self._gpu_for_pass(candidates) if first is ticket else None
                    if chosen is None:
                        self.cond.wait()
                chosen = chosen or gpu
                self.running[chosen.uuid] += 1
            finally:
                self.passes_waiting.remove(ticket)
                self.cond.notify_all()
        try:
            with gpu_lock(chosen.uuid, on_wait, shared=True):
                yield chosen
        finally:
            with self.cond:
                self.running[chosen.uuid] -= 1
                self.cond.notify_all()

    def _gpu_for_pass(self, candidates: list[Gpu]) -> Gpu | None:
        if sum(self.running.values()) >= self.jobs:
            return None
        if self.coming or self.waiting or any(holder is not None for holder in self.holder.values()):
            return None   # timed runs go first, and never beside a pass
        open_ = [gpu for gpu in candidates if self.running[gpu.uuid] < self._slots(gpu)]
        return min(open_, key=lambda gpu: self.running[gpu.uuid], default=None)

    def _slots(self, gpu: Gpu) -> int:
        with self.slots_lock:
            if gpu.uuid not in self.slots:
                self.slots[gpu.uuid] = pass_slots(self.free_memory(gpu), self.per_gpu)
            return self.slots[gpu.uuid]


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


@dataclass(eq=False)
class Ticket:
    """A pass's place in the queue: the longest expected (lowest `key`) first, then the first queued."""

    key: float        # minus the seconds the pass is expected to take
    order: int
    gpu: Gpu          # where its lesson's timed runs were: the pass runs on a GPU of that model
    lesson: str

    def __lt__(self, other: Ticket) -> bool:
        return (self.key, self.order) < (other.key, other.order)


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
