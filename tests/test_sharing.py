"""GpuShare with several GPUs: passes go where no timed run is, timed runs keep one GPU, longest first."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import GPU_UUID, QUIET, SECOND_GPU_UUID, coursectl, overlap, sanitizer_runs, standin_runs
from orchestrator.workflows.sharing import START_GAP, GpuShare, StartGap
from orchestrator.cuda.toolchain import Gpu

G0 = Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")
G1 = Gpu(index=1, name="NVIDIA H200", uuid=SECOND_GPU_UUID, compute_capability="9.0")
T4 = Gpu(index=1, name="Tesla T4", uuid="GPU-t4", compute_capability="7.5")


class Inside:
    """A thread inside the context manager `enter()` from when it gets in until `leave` is set.

    `value` is what the context manager gave, `at` when it got in (time.monotonic()).
    """

    def __init__(self, enter):
        self.started, self.leave = threading.Event(), threading.Event()
        self.value, self.at = None, 0.0

        def body():
            with enter() as value:
                self.value, self.at = value, time.monotonic()
                self.started.set()
                self.leave.wait(10)

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.leave.set()
        self.thread.join(5)


class Pass(Inside):
    """One pass in a thread of its own: `ran_on` once it has a place, held until `leave` is set."""

    def __init__(self, share: GpuShare, gpu: Gpu, priority: float = 0.0, ticket=None):
        ticket = ticket or share.queue_passes(f"lesson-{id(self)}", gpu, {"memcheck": priority})["memcheck"]
        super().__init__(lambda: share.sanitizing(ticket, lambda message: None))

    @property
    def ran_on(self) -> Gpu | None:
        return self.value


class Waiter:
    """One lesson asking for a GPU in a thread of its own."""

    def __init__(self, share: GpuShare, lesson: str, priority: float = 0.0):
        self.claimed = threading.Event()
        self.claim = None

        def body():
            self.claim = share.claim(lesson, priority)
            self.claimed.set()

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()


def share_of(*gpus: Gpu, jobs: int | None = 8) -> GpuShare:
    return GpuShare(list(gpus), jobs=jobs, free_memory=lambda gpu: None)


def test_no_pass_starts_while_a_lesson_holds_or_waits_for_any_gpu():
    share = share_of(G0, G1)
    first, second = share.claim("day13"), share.claim("day14")
    assert (first.gpu, second.gpu) == (G0, G1)
    ticket = share.queue_passes("day13", G0, {"memcheck": 2.0})["memcheck"]
    first.release()                       # GPU 0 is free, but day14's timed runs go on on GPU 1
    memcheck = Pass(share, G0, ticket=ticket)
    assert not memcheck.started.wait(QUIET), "a pass started beside a timed run on the other GPU"
    day16 = Waiter(share, "day16")
    assert day16.claimed.wait(5) and day16.claim.gpu == G0
    second.release()
    assert not memcheck.started.wait(QUIET), "a pass started while a lesson held a GPU"
    day16.claim.release()
    assert memcheck.started.wait(5)
    memcheck.end()


def test_no_pass_starts_while_a_lesson_still_building_has_yet_to_ask_for_a_gpu():
    share = GpuShare([G0, G1], jobs=8, free_memory=lambda gpu: None, coming=["day13", "day71"])
    share.claim("day13").release()
    memcheck = Pass(share, G0)
    assert not memcheck.started.wait(QUIET), "a pass started while day 71 was still building"
    day71 = share.claim("day71")          # built: it asks, and gets a GPU at once
    assert day71 is not None and not memcheck.started.wait(QUIET)
    day71.release()
    assert memcheck.started.wait(5)
    memcheck.end()


def test_closing_lets_passes_go_though_a_lesson_never_asked():
    share = GpuShare([G0], jobs=8, free_memory=lambda gpu: None, coming=["day71"])
    memcheck = Pass(share, G0)
    assert not memcheck.started.wait(QUIET)
    share.close()                         # Ctrl-C: the waiting pass starts, to be stopped at once
    assert memcheck.started.wait(5)
    memcheck.end()


def test_timed_runs_wait_for_the_passes_on_every_gpu_and_hold_back_new_ones():
    share = share_of(G0, G1)
    on_one = Pass(share, G1)
    assert on_one.started.wait(5) and on_one.ran_on in (G0, G1)
    claim = share.claim("day13")
    assert claim.gpu != on_one.ran_on     # a GPU without passes, when there is one
    said: list[str] = []
    inside = threading.Event()

    def timed():
        with share.timed(claim.gpu, said.append):
            inside.set()

    thread = threading.Thread(target=timed, daemon=True)
    thread.start()
    assert not inside.wait(QUIET), "a timed run started while a pass ran on the other GPU"
    assert said == [f"waiting for GPU {claim.gpu.index}: 1 sanitizer pass running"]
    late = Pass(share, G0)
    assert not late.started.wait(QUIET), "a pass started while a lesson held a GPU"
    on_one.end()
    assert inside.wait(5)
    thread.join(5)
    claim.release()
    assert late.started.wait(5)
    late.end()


def test_passes_spread_over_the_gpus_of_their_model_whichever_gpu_their_lesson_used():
    share = share_of(G0, G1)
    passes = [Pass(share, G0) for _ in range(4)]   # all of lessons whose timed runs were on GPU 0
    assert all(p.started.wait(5) for p in passes)
    assert sorted(p.ran_on.index for p in passes) == [0, 0, 1, 1]
    for p in passes:
        p.end()


def test_a_pass_never_goes_to_a_gpu_of_another_model():
    share = GpuShare([G0, T4], jobs=1, free_memory=lambda gpu: None)
    first = Pass(share, G0)
    assert first.started.wait(5) and first.ran_on == G0
    second = Pass(share, G0)
    assert not second.started.wait(QUIET), "an H200 build's pass ran on the T4"
    first.end()
    assert second.started.wait(5) and second.ran_on == G0
    second.end()


def test_a_withdrawn_ticket_holds_back_no_other_pass():
    share = GpuShare([G0], jobs=1, free_memory=lambda gpu: None)
    ticket = share.queue_passes("day16", G0, {"memcheck": 9.0})["memcheck"]   # the head of the queue
    other = Pass(share, G0, priority=1.0)
    assert not other.started.wait(QUIET), "a shorter pass started before the longest"
    share.withdraw(ticket)                # day16's pass came from the cache
    assert other.started.wait(5)
    share.queue_passes("day71", G0, {"memcheck": 1.0, "racecheck": 2.0})
    share.withdraw(lesson_id="day71")     # its turn ended
    assert share.passes_waiting == []
    other.end()


def test_with_two_gpus_no_pass_runs_beside_any_timed_run_and_passes_use_both(
        course, two_gpus, fake_sanitizer, prebuilt, built_in_background, monkeypatch, tmp_path):
    lessons = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"]
    course(lessons, sanitizers={lesson: {"memcheck": {}} for lesson in lessons})
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "timed.log"))
    monkeypatch.setenv("STANDIN_SLEEP", "0.3")
    monkeypatch.setenv("FAKE_SANITIZER_RUNS", str(tmp_path / "passes.log"))
    result = coursectl("verify", "--all", "--rerun-sanitizers", "--sanitizer-jobs", "4")
    assert result.exit_code == 0, result.output
    timed, passes = standin_runs(tmp_path / "timed.log"), sanitizer_runs(tmp_path / "passes.log")
    assert len(timed) == len(passes) == 4
    assert not [(run, p) for run in timed for p in passes if overlap(run, p)], "a pass ran beside a timed run"
    assert {p.visible for p in passes} == set(two_gpus)
    assert {run.visible for run in timed} == set(two_gpus)


def test_with_one_gpu_the_waiting_lessons_run_before_any_pass():
    share = share_of(G0)
    held = share.claim("day13")
    day14 = Waiter(share, "day14")
    memcheck = Pass(share, G0)
    held.release()
    assert day14.claimed.wait(5)
    assert not memcheck.started.wait(QUIET), "a pass started while a lesson waited and no other GPU served it"
    day14.claim.release()
    assert memcheck.started.wait(5)
    memcheck.end()


def test_lessons_waiting_go_longest_pass_first_then_first_come():
    share = share_of(G0)
    held = share.claim("day13")
    order: list[str] = []
    waiters = []
    for lesson, priority in [("short", 1.0), ("long", 9.0), ("none", 0.0), ("also-long", 9.0)]:
        waiter = Waiter(share, lesson, priority)
        waiters.append((lesson, waiter))
        while not any(entry[2] == lesson for entry in share.waiting):
            threading.Event().wait(0.01)
    held.release()
    for _ in waiters:
        for lesson, waiter in waiters:
            if lesson not in order and waiter.claimed.wait(0.05):
                order.append(lesson)
                waiter.claim.release()
                break
    assert order == ["long", "also-long", "short", "none"]


def test_passes_waiting_start_longest_first():
    share = GpuShare([G0], jobs=1, free_memory=lambda gpu: None)
    running = Pass(share, G0)
    assert running.started.wait(5)
    short = Pass(share, G0, priority=1.0)
    while len(share.passes_waiting) < 1:
        threading.Event().wait(0.01)
    long = Pass(share, G0, priority=7.0)
    while len(share.passes_waiting) < 2:
        threading.Event().wait(0.01)
    running.end()
    assert long.started.wait(5)
    assert not short.started.wait(QUIET)
    long.end()
    assert short.started.wait(5)
    short.end()


def test_passes_per_gpu_default_to_a_handful_unless_sanitizer_jobs_says():
    from orchestrator.workflows.sharing import PASSES_PER_GPU
    assert GpuShare([G0], free_memory=lambda gpu: None)._slots(G0) == PASSES_PER_GPU
    assert GpuShare([G0], jobs=16, free_memory=lambda gpu: None)._slots(G0) == 16


def test_a_start_waits_the_gap_while_the_previous_program_runs():
    gap = StartGap(0.4)
    first = Inside(gap.start)
    assert first.started.wait(5)
    second = Inside(gap.start)
    assert second.started.wait(5)
    assert second.at - first.at >= 0.4
    first.end(), second.end()


@pytest.mark.parametrize(("seconds", "first_ends"), [(60.0, True), (0.0, False)], ids=["previous-ended", "gap-0"])
def test_a_start_goes_at_once_after_a_program_that_has_ended_or_with_a_gap_of_0(seconds, first_ends):
    gap = StartGap(seconds)
    first = Inside(gap.start)
    assert first.started.wait(5)
    if first_ends:
        first.end()
    second = Inside(gap.start)
    assert second.started.wait(5), "waited the gap"
    first.end(), second.end()


def test_a_program_that_ends_during_the_gap_lets_the_next_start_at_once():
    gap = StartGap(60.0)
    first = Inside(gap.start)
    assert first.started.wait(5)
    second = Inside(gap.start)
    assert not second.started.wait(QUIET)
    first.end()
    assert second.started.wait(5)
    second.end()


def test_closing_the_share_lets_a_start_waiting_for_the_gap_go_at_once():
    share = GpuShare([G0, G1], free_memory=lambda gpu: None, start_gap=60.0)
    first = Inside(share.starts.start)
    assert first.started.wait(5)
    second = Inside(share.starts.start)
    assert not second.started.wait(QUIET)
    share.close()   # as on Ctrl-C: the program it starts is stopped at once
    assert second.started.wait(5)
    first.end(), second.end()


@pytest.mark.slow   # waits on purpose: 12 runs of 1 s
def test_timed_runs_on_two_gpus_start_the_gap_apart_and_together_with_start_gap_0(
        course, two_gpus, prebuilt, monkeypatch, tmp_path):
    course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"])
    monkeypatch.setenv("STANDIN_SLEEP", "1.0")

    logs = iter(range(3))

    def closest_starts(*options: str) -> float:
        """Verify; how far apart the nearest starts of two runs on different GPUs at once were, in seconds."""
        log = tmp_path / f"timed-{next(logs)}.log"
        monkeypatch.setenv("STANDIN_LOG", str(log))
        result = coursectl("verify", "--all", "-q", *options)
        assert result.exit_code == 0, result.output
        runs = standin_runs(log)
        assert {run.visible for run in runs} == set(two_gpus)
        return min(abs(a.start - b.start) for a in runs for b in runs if a.visible != b.visible and overlap(a, b))

    assert closest_starts("--start-gap", "0.6") >= 0.5
    assert closest_starts() >= START_GAP - 0.1
    assert closest_starts("--start-gap", "0") < 0.1
