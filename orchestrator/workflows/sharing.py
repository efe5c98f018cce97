"""Who has each GPU: one lesson's timed runs at a time, sanitizer passes together but never beside them."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .concurrency import Concurrency, choose, cores, host_available_mib
from .locks import gpu_lock
from .starts import START_GAP, StartGap
from ..cuda.sanitizer_cache import Footprint
from ..cuda.toolchain import Gpu, free_memory_mib
from ..words import plural


# What one compute-sanitizer pass is taken to need of the GPU's memory, to
# bound how many run at once, until NVML has measured one (concurrency.py):
# the tools keep shadow state beside the program's own allocations, and the
# lessons allocate well under 1 GiB.
PASS_MEMORY_MIB = 4096

# Passes at once on one GPU until one has been measured (concurrency.py),
# unless --sanitizer-jobs says otherwise. On an
# H200 the course's 20 passes took 22.8 s four at a time, 19.8 s eight at a
# time and 20.4 s all at once (commit 4f1b086's message): past
# a handful, more at once only makes each slower. Fewer at once also leaves
# passes waiting that another GPU, once its timed runs are done, can take.
PASSES_PER_GPU = 6




def pass_slots(free_mib: int | None, jobs: int, pass_mib: int = PASS_MEMORY_MIB) -> int:
    """How many passes may run at once on a GPU with `free_mib` free (None: unknown), at most `jobs`, each
    taken to need `pass_mib` of it."""
    if free_mib is None:
        return max(1, jobs)
    return max(1, min(jobs, free_mib // max(1, pass_mib)))


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
    were queued; a pass queued whose turn has not yet come to wait for its
    place holds back those behind it.

    At most `jobs` passes run at once in all, on each GPU at most `per_gpu`
    and no more than its free memory holds (asked once, before the first
    pass). Given neither, both are chosen before the first pass starts
    (concurrency.choose) from the machine and the footprints the turns
    `learn` from the sanitizer cache, and `on_choice` is told the line that
    says so; given (--sanitizer-jobs is `per_gpu`), `jobs` defaults to the
    CPU cores, or `per_gpu` if more, and `per_gpu` to `jobs`. Across
    processes locks.gpu_lock holds the same for each GPU: exclusively for
    timed runs, shared for passes.

    Nothing polls and no change wakes every waiter: the lessons waiting are a
    heap (`waiting`), the passes waiting a heap for each GPU model
    (`queues`), and each waiter has an Event of its own. Every change of
    who holds or runs what ends in `_dispatch`, under `lock`, which hands a
    GPU (or a place for a pass) to exactly the waiters whose turn it is, and
    sets their Events. A turn's passes wait in no thread at all: they are
    handed over (`run_pass`) and started, when their turn comes, on a pool
    of as many threads as passes run at once; a pass is judged after it, its
    place given back, on one thread (`then`): Python runs one thread at a
    time, and sixteen passes judged at once each waited for the others at
    every system call, the switches costing more CPU than the judging.
    """

    def __init__(self, gpus: list[Gpu], jobs: int | None = None, free_memory=free_memory_mib,
                 per_gpu: int | None = None, coming: Iterable[str] = (), start_gap: float | None = None, *,
                 host_memory: Callable[[], int | None] = host_available_mib,
                 on_choice: Callable[[str], None] | None = None):
        self.gpus = gpus
        self.starts = StartGap(START_GAP if start_gap is None else start_gap)
        self.coming = set(coming)   # lessons that will ask for a GPU (being built), until they do
        self.explicit = per_gpu or jobs
        self.jobs = jobs or max(cores(), per_gpu or PASSES_PER_GPU)
        self.per_gpu = per_gpu or jobs or PASSES_PER_GPU
        self.free_memory, self.host_memory, self.on_choice = free_memory, host_memory, on_choice
        self.footprints: list[Footprint] = []   # what the run's passes used when they last ran
        self.chosen: Concurrency | None = None
        self.lock = threading.Lock()
        self.holder: dict[str, str | None] = {gpu.uuid: None for gpu in gpus}   # the lesson that claimed it
        self.running: dict[str, int] = {gpu.uuid: 0 for gpu in gpus}           # passes running on it
        self.waiting: list[tuple[float, int, str, _Waiter]] = []                # heap: (-priority, order, id, waiter)
        self.queues: dict[tuple[str, str], list[Ticket]] = {}                   # heaps of passes, by GPU model
        self.tickets: dict[str, list[Ticket]] = {}                              # each lesson's, for withdraw
        self.timed_waiting: list[_Waiter] = []                                  # timed runs waiting for passes to end
        self.order = itertools.count()
        self.free: dict[str, int | None] = {}   # each GPU's free memory (MiB), asked before the first pass
        self.slots: dict[str, int] = {}         # passes at once on each GPU, once chosen
        self.slots_lock = threading.Lock()      # held while free memory is asked
        self.closed = False
        self.pool: ThreadPoolExecutor | None = None   # the threads passes handed over by run_pass run in
        self.judging: ThreadPoolExecutor | None = None   # the one thread their `then` runs in

    @property
    def passes_waiting(self) -> list[Ticket]:
        """The passes queued that have not started nor been withdrawn, first to start first."""
        with self.lock:
            return sorted(ticket for queue in self.queues.values() for ticket in queue if ticket.queued)

    def claim(self, lesson_id: str, priority: float = 0.0) -> Claim | None:
        """Wait for a GPU for this lesson's timed runs (see the class); None once closed."""
        waiter = _Waiter()
        with self.lock:
            self.coming.discard(lesson_id)
            if self.closed:
                return None
            heapq.heappush(self.waiting, (-priority, next(self.order), lesson_id, waiter))
            self._dispatch()
        waiter.event.wait()
        return None if waiter.gpu is None else Claim(self, waiter.gpu)

    def claim_later(self, lesson_id: str, priority: float, then: Callable[[Claim], None]) -> None:
        """As claim, but waiting in no thread: `then(claim)` is called (under the share's lock: it should only
        start what runs with the claim) once the lesson has a GPU; never once closed."""
        with self.lock:
            self.coming.discard(lesson_id)
            if self.closed:
                return
            heapq.heappush(self.waiting, (-priority, next(self.order), lesson_id, _Waiter(then=lambda gpu: then(
                Claim(self, gpu)) if gpu is not None else None)))
            self._dispatch()

    def close(self) -> None:
        """Stop: lessons waiting for a GPU get none; passes and timed runs waiting start (to be stopped at once)."""
        with self.lock:
            self.closed = True
            self.coming.clear()
            self._dispatch()
            pools, self.pool, self.judging = (self.pool, self.judging), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=False)   # what it was given still runs; its threads end once idle
        self.starts.close()

    @contextlib.contextmanager
    def timed(self, gpu: Gpu, on_wait: Callable[[str], None]) -> Iterator[None]:
        """The claimed GPU to one lesson's timed runs alone: once no pass runs on any GPU, and locked."""
        waiter = None
        with self.lock:
            passes = sum(self.running.values())
            if passes and not self.closed:
                waiter = _Waiter()
                self.timed_waiting.append(waiter)
        if waiter is not None:
            on_wait(f"waiting for GPU {gpu.index}: {plural(passes, 'sanitizer pass', 'sanitizer passes')} running")
            waiter.event.wait()
        with gpu_lock(gpu.uuid, on_wait):
            yield

    def queue_passes(self, lesson_id: str, gpu: Gpu, expected: dict[str, float]) -> dict[str, Ticket]:
        """Put a lesson's passes (tool: expected seconds) in the queue: a ticket each, for `sanitizing`.

        A lesson queues them as it lets its GPU go, so that they start in the
        order of their expected length, not in the order their lessons ended.
        """
        with self.lock:
            tickets = {tool: Ticket(-seconds, next(self.order), gpu, lesson_id) for tool, seconds in expected.items()}
            queue = self.queues.setdefault((gpu.name, gpu.arch), [])
            for ticket in tickets.values():
                heapq.heappush(queue, ticket)
            self.tickets.setdefault(lesson_id, []).extend(tickets.values())
            self._dispatch()
            return tickets

    def withdraw(self, ticket: Ticket | None = None, lesson_id: str | None = None) -> None:
        """Take a ticket, or every ticket of a lesson, out of the queue: a pass from the cache, or a turn that ended."""
        with self.lock:
            for gone in [ticket] if ticket is not None else []:
                gone.queued = False
            for gone in self.tickets.pop(lesson_id, []) if lesson_id is not None else []:
                gone.queued = False
            self._dispatch()   # a withdrawn head of its queue holds back no other pass

    @contextlib.contextmanager
    def sanitizing(self, ticket: Ticket, on_wait: Callable[[str], None]) -> Iterator[Gpu]:
        """A place for the ticket's pass on its GPU or another of that model, beside passes, never a timed run.

        The ticket comes from queue_passes, and leaves the queue here. Yields
        the GPU it runs on. Passes waiting start longest first.
        """
        gpu = ticket.gpu
        candidates = [other for other in self.gpus if (other.name, other.arch) == (gpu.name, gpu.arch)]
        self._ask_free_memory()   # before taking the lock that every turn waits on
        waiter = _Waiter()
        with self.lock:
            ticket.candidates, ticket.waiter = candidates, waiter
            if not ticket.queued:   # withdrawn, yet asked for: queued again
                ticket.queued = True
                heapq.heappush(self.queues.setdefault((gpu.name, gpu.arch), []), ticket)
            self._dispatch()
        waiter.event.wait()
        chosen = waiter.gpu or gpu
        try:
            with gpu_lock(chosen.uuid, on_wait, shared=True):
                yield chosen
        finally:
            with self.lock:
                self.running[chosen.uuid] -= 1
                self._dispatch()

    def run_pass(self, ticket: Ticket, job: Callable[[Gpu], object], on_wait: Callable[[str], None],
                 then: Callable[[object], object] | None = None) -> Future:
        """The ticket's pass as `job(gpu)`, once its turn comes (as `sanitizing` would let it in), on a thread of
        the share's pool, the GPU's lock held shared: no thread waits for a place meanwhile. With `then`, its
        place given back, `then(what job returned)` runs on the share's one judging thread. The future has what
        the last of them returned, or raised."""
        gpu = ticket.gpu
        self._ask_free_memory()   # before taking the lock that every turn waits on
        future: Future = Future()
        with self.lock:
            ticket.candidates = [other for other in self.gpus if (other.name, other.arch) == (gpu.name, gpu.arch)]
            ticket.job = job, then, future, on_wait
            if not ticket.queued:   # withdrawn, yet asked for: queued again
                ticket.queued = True
                heapq.heappush(self.queues.setdefault((gpu.name, gpu.arch), []), ticket)
            self._dispatch()
        return future

    def _run_job(self, ticket: Ticket, gpu: Gpu) -> None:
        """A pass started by `_start`, in the pool: its job run, its place given back, then its future set."""
        job, then, future, on_wait = ticket.job
        outcome, failure = None, None
        try:
            if not future.set_running_or_notify_cancel():
                return
            with gpu_lock(gpu.uuid, on_wait, shared=True):
                outcome = job(gpu)
        except BaseException as exc:  # noqa: BLE001 - raised where the turn waits for it
            failure = exc
        finally:
            with self.lock:
                self.running[gpu.uuid] -= 1
                self._dispatch()
        if failure is None and then is not None and future.running():
            self._then(future, then, outcome)
        elif failure is not None:
            future.set_exception(failure)
        elif future.running():
            future.set_result(outcome)

    def _then(self, future: Future, then: Callable[[object], object], outcome: object) -> None:
        """`then(outcome)` on the judging thread, or in this one once the share is closed."""
        judging = self.judging
        if judging is not None:
            try:
                judging.submit(_settle, future, then, outcome)
                return
            except RuntimeError:   # shut down meanwhile (close)
                pass
        _settle(future, then, outcome)

    def _dispatch(self) -> None:
        """Under `lock`, after any change: hand out what is free to the waiters whose turn it is, and wake them."""
        if self.closed:
            self._release_everyone()
            return
        while self.waiting:   # each GPU no lesson holds to the first lesson waiting
            free = [gpu for gpu in self.gpus if self.holder[gpu.uuid] is None]
            if not free:
                break
            *_, lesson_id, waiter = heapq.heappop(self.waiting)
            gpu = min(free, key=lambda g: self.running[g.uuid])   # the first, unless passes run there
            self.holder[gpu.uuid] = lesson_id
            waiter.wake(gpu)
        if self.timed_waiting and sum(self.running.values()) == 0:
            for waiter in self.timed_waiting:   # one a GPU at most: each holds a claim
                waiter.wake(None)
            self.timed_waiting.clear()
        if self.coming or self.waiting or any(holder is not None for holder in self.holder.values()):
            return   # timed runs go first, and never beside a pass
        while sum(self.running.values()) < self.jobs:
            best: tuple[Ticket, Gpu] | None = None
            for queue in self.queues.values():
                while queue and not queue[0].queued:   # withdrawn, or started: dropped as they reach the head
                    heapq.heappop(queue)
                head = queue[0] if queue else None
                if head is None or (head.waiter is None and head.job is None):   # its turn has not come to ask
                    continue   # for a place yet: the rest wait for it
                if self.chosen is None:   # the first pass that may start: every lesson has had its timed runs
                    self._choose()
                open_ = [gpu for gpu in head.candidates if self.running[gpu.uuid] < self.slots[gpu.uuid]]
                if open_ and (best is None or head < best[0]):
                    best = head, min(open_, key=lambda gpu: self.running[gpu.uuid])
            if best is None:
                return
            self._start(*best)

    def _start(self, ticket: Ticket, gpu: Gpu) -> None:
        ticket.queued = False
        self.running[gpu.uuid] += 1
        if ticket.job is None:
            ticket.waiter.wake(gpu)
            return
        if self.pool is None:   # as many threads as passes run at once, and one to judge them, made as first needed
            self.pool = ThreadPoolExecutor(max_workers=max(1, self.jobs), thread_name_prefix="coursectl-pass")
            self.judging = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coursectl-judge")
        self.pool.submit(self._run_job, ticket, gpu)

    def _release_everyone(self) -> None:
        """Closed: lessons waiting get no GPU, passes waiting start where they are, timed runs waiting go."""
        for *_, waiter in self.waiting:
            waiter.wake(None)
        self.waiting.clear()
        for waiter in self.timed_waiting:
            waiter.wake(None)
        self.timed_waiting.clear()
        for queue in self.queues.values():
            for ticket in queue:
                if ticket.queued and (ticket.waiter is not None or ticket.job is not None):
                    self._start(ticket, ticket.gpu)
            queue[:] = [ticket for ticket in queue if ticket.queued]
            heapq.heapify(queue)

    def learn(self, footprints: Iterable[Footprint]) -> None:
        """What a lesson's passes used when they last ran: for the choice of how many run at once."""
        with self.lock:
            self.footprints += footprints

    def _slots(self, gpu: Gpu) -> int:
        """The passes that may run at once on `gpu` (see the class); chosen now if they were not."""
        self._ask_free_memory()
        with self.lock:
            if self.chosen is None:
                self._choose()
            return self.slots[gpu.uuid]

    def _ask_free_memory(self) -> None:
        """Each GPU's free memory, asked once (nvidia-smi may take a while: never under `lock`)."""
        with self.slots_lock:
            for gpu in self.gpus:
                if gpu.uuid not in self.free:
                    self.free[gpu.uuid] = self.free_memory(gpu)

    def _choose(self) -> None:
        """Under `lock`, as the first pass may start (every lesson has asked for a GPU, and learned its
        passes' footprints): how many passes run at once, in all and on each GPU; `on_choice` is told."""
        known = [mib for mib in self.free.values() if mib is not None]
        chosen = self.chosen = choose(self.footprints, cores=cores(), gpus=len(self.gpus),
                                      free_gpu_mib=min(known, default=None),
                                      host_free_mib=None if self.explicit else self.host_memory(),
                                      explicit=self.explicit, default_per_gpu=PASSES_PER_GPU,
                                      default_gpu_mib=PASS_MEMORY_MIB)
        if not self.explicit:
            self.jobs, self.per_gpu = chosen.in_all, chosen.per_gpu
        for gpu in self.gpus:
            self.slots[gpu.uuid] = pass_slots(self.free.get(gpu.uuid), self.per_gpu, int(chosen.gpu_pass_mib))
        if self.on_choice is not None:
            self.on_choice(chosen.line(min(self.jobs, sum(self.slots.values()))))


class _Waiter:
    """One thread waiting in GpuShare: woken once, with what it was given (a GPU, or None)."""

    __slots__ = ("event", "gpu", "then")

    def __init__(self, then: Callable[[Gpu | None], None] | None = None):
        self.event = threading.Event()
        self.gpu: Gpu | None = None
        self.then = then   # called instead, where no thread waits (claim_later)

    def wake(self, gpu: Gpu | None) -> None:
        self.gpu = gpu
        if self.then is not None:
            self.then(gpu)
        self.event.set()


def _settle(future: Future, then: Callable[[object], object], outcome: object) -> None:
    """A pass's future, set to what `then(outcome)` returns or raises."""
    try:
        future.set_result(then(outcome))
    except BaseException as exc:  # noqa: BLE001 - raised where the turn waits for it
        future.set_exception(exc)


@dataclass(eq=False)
class Ticket:
    """A pass's place in the queue: the longest expected (lowest `key`) first, then the first queued."""

    key: float        # minus the seconds the pass is expected to take
    order: int
    gpu: Gpu          # where its lesson's timed runs were: the pass runs on a GPU of that model
    lesson: str
    queued: bool = True                       # in its queue: neither started nor withdrawn
    waiter: _Waiter | None = None             # once its pass waits for a place (sanitizing)
    job: tuple | None = None                  # or once handed over (run_pass): job, then, its future, on_wait
    candidates: list[Gpu] = field(default_factory=list)   # the GPUs it may run on

    def __lt__(self, other: Ticket) -> bool:
        return (self.key, self.order) < (other.key, other.order)


class Claim:
    """One lesson's hold on a GPU for its timed runs: released once, by the first to let it go."""

    def __init__(self, share: GpuShare, gpu: Gpu):
        self.share, self.gpu = share, gpu
        self.held = True

    def release(self) -> None:
        with self.share.lock:
            if self.held:
                self.held = False
                self.share.holder[self.gpu.uuid] = None
                self.share._dispatch()

    def decline(self) -> None:
        """Give the GPU back unused, from the `then` of claim_later (under the share's lock, in its dispatch,
        which goes on to hand the GPU to the next lesson waiting)."""
        self.held = False
        self.share.holder[self.gpu.uuid] = None

    def __enter__(self) -> Gpu:
        return self.gpu

    def __exit__(self, *exc) -> None:
        self.release()
