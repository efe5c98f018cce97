"""GpuShare with several GPUs: passes go where no timed run is, on cores of their own; longest first."""

from __future__ import annotations

import os
import threading

import pytest
from conftest import GPU_UUID, SECOND_GPU_UUID, coursectl, overlap, sanitizer_runs, standin_runs

from orchestrator import sharing
from orchestrator.sharing import GpuShare, cpu_split
from orchestrator.toolchain import Gpu

G0 = Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")
G1 = Gpu(index=1, name="NVIDIA H200", uuid=SECOND_GPU_UUID, compute_capability="9.0")
T4 = Gpu(index=1, name="Tesla T4", uuid="GPU-t4", compute_capability="7.5")


class Pass:
    """One pass in a thread of its own: `ran_on` once it has a place, held until `leave` is set."""

    def __init__(self, share: GpuShare, gpu: Gpu, priority: float = 0.0, ticket=None):
        self.started, self.leave = threading.Event(), threading.Event()
        self.ran_on: Gpu | None = None
        ticket = ticket or share.queue_passes(f"lesson-{id(self)}", gpu, {"memcheck": priority})["memcheck"]

        def body():
            with share.sanitizing(ticket, lambda message: None) as place:
                self.ran_on = place
                self.started.set()
                self.leave.wait(10)

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.leave.set()
        self.thread.join(5)


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


def test_with_two_gpus_one_is_kept_for_passes_while_the_other_serves_the_timed_runs():
    share = share_of(G0, G1)
    first, second = share.claim("day13"), share.claim("day14")
    assert (first.gpu, second.gpu) == (G0, G1)     # no pass waits yet: both GPUs take timed runs
    ticket = share.queue_passes("day13", G0, {"memcheck": 2.0})["memcheck"]
    first.release()
    day16 = Waiter(share, "day16")
    assert not day16.claimed.wait(0.3), "a lesson took the last GPU free while a pass waited for it"
    memcheck = Pass(share, G0, ticket=ticket)
    assert memcheck.started.wait(5) and memcheck.ran_on == G0   # beside day14's timed runs on GPU 1
    second.release()
    assert day16.claimed.wait(5) and day16.claim.gpu == G1
    another = Pass(share, G1)
    assert another.started.wait(5) and another.ran_on == G0, "a pass went to the GPU a lesson holds"
    day16.claim.release()
    for running in (memcheck, another):
        running.end()


def test_once_no_lesson_waits_the_passes_take_every_gpu_no_lesson_holds():
    share = share_of(G0, G1)
    held = share.claim("day13")
    passes = [Pass(share, G0) for _ in range(2)]
    assert all(p.started.wait(5) for p in passes)
    assert [p.ran_on.index for p in passes] == [1, 1], "a pass went to the GPU a lesson holds"
    held.release()
    later = [Pass(share, G0) for _ in range(2)]
    assert all(p.started.wait(5) for p in later)
    assert sorted(p.ran_on.index for p in later) == [0, 0]   # the GPU with the fewest passes
    for running in passes + later:
        running.end()


def test_a_timed_run_waits_for_the_passes_on_its_own_gpu_only():
    share = share_of(G0, G1)
    elsewhere = Pass(share, G0)
    assert elsewhere.started.wait(5)
    claim = share.claim("day13")
    assert claim.gpu != elsewhere.ran_on     # a GPU without passes, when there is one
    said: list[str] = []
    with share.timed(claim.gpu, said.append):
        assert said == [], "a timed run waited for a pass on another GPU"
    claim.release()
    elsewhere.end()

    alone = share_of(G0)
    running = Pass(alone, G0)
    assert running.started.wait(5)
    claim = alone.claim("day14")
    said.clear()
    inside = threading.Event()

    def timed():
        with alone.timed(claim.gpu, said.append):
            inside.set()

    thread = threading.Thread(target=timed, daemon=True)
    thread.start()
    assert not inside.wait(0.3), "a timed run started beside a pass on its GPU"
    assert said == ["waiting for GPU 0: 1 sanitizer pass running"]
    late = Pass(alone, G0)
    assert not late.started.wait(0.2), "a pass started on a GPU a lesson held"
    running.end()
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
    assert not second.started.wait(0.3), "an H200 build's pass ran on the T4"
    first.end()
    assert second.started.wait(5) and second.ran_on == G0
    second.end()


def test_a_withdrawn_ticket_holds_back_no_other_pass():
    share = GpuShare([G0], jobs=1, free_memory=lambda gpu: None)
    ticket = share.queue_passes("day16", G0, {"memcheck": 9.0})["memcheck"]   # the head of the queue
    other = Pass(share, G0, priority=1.0)
    assert not other.started.wait(0.2), "a shorter pass started before the longest"
    share.withdraw(ticket)                # day16's pass came from the cache
    assert other.started.wait(5)
    share.queue_passes("day71", G0, {"memcheck": 1.0, "racecheck": 2.0})
    share.withdraw(lesson_id="day71")     # its turn ended
    assert share.passes_waiting == []
    other.end()


def test_with_two_gpus_passes_run_beside_timed_runs_on_the_other_gpu_each_on_cores_of_their_own(
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
    assert not [(run, p) for run in timed for p in passes if run.visible == p.visible and overlap(run, p)], \
        "a pass ran beside a timed run on its GPU"
    assert [(run, p) for run in timed for p in passes if run.visible != p.visible and overlap(run, p)], \
        "no pass ran while the other GPU served timed runs"
    assert {p.visible for p in passes} <= set(two_gpus)
    assert {run.visible for run in timed} == set(two_gpus)
    split = cpu_split(set(os.sched_getaffinity(0)), 2)
    assert split is not None, "the tests need two logical CPUs"
    assert {run.cpus for run in timed} == {split[0]}
    assert {p.cpus for p in passes} == {split[1]}
    assert os.sched_getaffinity(0) == set(split[0] | split[1]), "a thread kept the cores it was given"


def test_with_one_gpu_the_waiting_lessons_run_before_any_pass():
    share = share_of(G0)
    held = share.claim("day13")
    day14 = Waiter(share, "day14")
    memcheck = Pass(share, G0)
    held.release()
    assert day14.claimed.wait(5)
    assert not memcheck.started.wait(0.2), "a pass started while a lesson waited and no other GPU served it"
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
    assert not short.started.wait(0.2)
    long.end()
    assert short.started.wait(5)
    short.end()


def test_passes_per_gpu_default_to_a_handful_unless_sanitizer_jobs_says():
    from orchestrator.sharing import PASSES_PER_GPU
    assert GpuShare([G0], free_memory=lambda gpu: None)._slots(G0) == PASSES_PER_GPU
    assert GpuShare([G0], jobs=16, free_memory=lambda gpu: None)._slots(G0) == 16


def hyperthreaded(cpu: int) -> set[int]:
    """Sixteen physical cores of two threads each: CPU n and n + 16."""
    return {cpu % 16, cpu % 16 + 16}


@pytest.mark.parametrize("cpus, gpus, timed", [
    (range(32), 2, {0, 16, 1, 17}),          # 32 // 8 = 4 threads, two whole cores, for the one timed GPU
    (range(32), 4, {0, 16, 1, 17, 2, 18}),   # 2 threads for each of three GPUs
    (range(2), 2, {0}),                      # at least one for the timed runs, one for the passes
    (range(3), 8, {0, 16} & set(range(3)) | {1}),
])
def test_timed_runs_get_whole_cores_and_passes_the_rest(monkeypatch, cpus, gpus, timed):
    monkeypatch.setattr(sharing, "_siblings", hyperthreaded)
    split = cpu_split(set(cpus), gpus)
    assert split == (frozenset(timed), frozenset(set(cpus) - timed))
    assert split[1], "the passes were left no core"


def test_one_gpu_or_one_cpu_pins_nothing():
    assert cpu_split(set(range(32)), 1) is None       # passes never run beside a timed run
    assert cpu_split({5}, 2) is None                  # nothing to split
    share = GpuShare([G0], free_memory=lambda gpu: None)
    before = os.sched_getaffinity(0)
    with share.pinned(timed=True) as cores:
        assert cores is None and os.sched_getaffinity(0) == before


def test_pinned_gives_the_thread_its_cores_and_takes_them_back():
    share = GpuShare([G0, G1], free_memory=lambda gpu: None)
    assert share.split is not None, "the tests need two logical CPUs"
    before = os.sched_getaffinity(0)
    for timed, cores in [(True, share.split[0]), (False, share.split[1])]:
        with share.pinned(timed=timed) as given:
            assert given == cores and os.sched_getaffinity(0) == set(cores)
        assert os.sched_getaffinity(0) == before
