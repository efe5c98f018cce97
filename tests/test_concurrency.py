"""How many sanitizer passes run at once (workflows/concurrency.py): the rule's arithmetic on fabricated
footprints, GpuShare keeping to what it chose, and the footprint the sanitizer cache keeps of a pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from conftest import GPU_UUID, coursectl, lines
from orchestrator.cuda import gpu_memory
from orchestrator.cuda.sanitizer_cache import FOLDER, Footprint, last_run
from orchestrator.cuda.toolchain import Gpu
from orchestrator.process import run_command
from orchestrator.workflows.concurrency import GPU_MARGIN_MIB, PASSES_CAP, choose, cores
from orchestrator.workflows.sharing import PASS_MEMORY_MIB, PASSES_PER_GPU, GpuShare

H200 = Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")
GIB = 1024


def passes(*cores: float, rss_mib: float = 300.0, gpu_mib: float | None = None) -> list[Footprint]:
    """Footprints of passes of 10 s each keeping `cores` cores busy."""
    return [Footprint(wall_s=10.0, cpu_s=10.0 * share, max_rss_mib=rss_mib, gpu_mib=gpu_mib) for share in cores]


def test_the_cores_bound_the_passes_by_the_mean_share_of_a_core_a_pass_keeps():
    chosen = choose(passes(1.0, 1.6), cores=16, gpus=1, free_gpu_mib=139 * GIB, host_free_mib=None)
    assert chosen.in_all == 12   # 16 / 1.3
    assert chosen.line() == "sanitizer passes: 12 at once (16 cores, 1.3 cores a pass; 139 GiB free, 4.0 GiB a pass)"


def test_measured_gpu_memory_and_its_margin_bound_the_passes_on_each_gpu():
    chosen = choose(passes(0.1, 0.1, gpu_mib=1024.0), cores=16, gpus=1, free_gpu_mib=9 * GIB, host_free_mib=None)
    assert chosen.gpu_pass_mib == 1024 + GPU_MARGIN_MIB
    assert (chosen.in_all, chosen.per_gpu) == (6, 6)   # 9 GiB / 1.5 GiB
    two = choose(passes(0.1, gpu_mib=1024.0), cores=64, gpus=2, free_gpu_mib=9 * GIB, host_free_mib=None)
    assert (two.in_all, two.per_gpu) == (12, 6)       # six on each of two GPUs


def test_the_largest_pass_in_host_memory_bounds_the_passes_in_all():
    chosen = choose([*passes(0.5, rss_mib=500.0), *passes(0.5, rss_mib=2 * GIB)], cores=16, gpus=1,
                    free_gpu_mib=None, host_free_mib=10 * GIB)
    assert chosen.in_all == 5   # 10 GiB / 2 GiB, fewer than 16 / 0.5
    assert chosen.why == "16 cores, 0.5 cores a pass; host 10 GiB available, 2.0 GiB a pass"


def test_passes_that_hardly_use_a_core_stop_at_the_hard_cap():
    chosen = choose(passes(0.0, 0.01), cores=128, gpus=1, free_gpu_mib=None, host_free_mib=None)
    assert chosen.in_all == PASSES_CAP
    assert chosen.why.endswith(f"at most {PASSES_CAP} a GPU")


def test_one_core_and_a_busy_pass_still_run_one_pass():
    assert choose(passes(3.0), cores=1, gpus=1, free_gpu_mib=100, host_free_mib=10).in_all == 1


def test_nothing_measured_is_the_default_and_an_explicit_value_wins():
    default = choose([], cores=2, gpus=1, free_gpu_mib=None, host_free_mib=None, default_per_gpu=6)
    assert (default.in_all, default.per_gpu) == (6, 6)
    assert default.why == "the default: 6 a GPU, no pass measured yet"
    explicit = choose(passes(1.5), cores=16, gpus=1, free_gpu_mib=139 * GIB, host_free_mib=None, explicit=3)
    assert (explicit.in_all, explicit.per_gpu) == (16, 3)
    assert explicit.line() == "sanitizer passes: 16 at once (--sanitizer-jobs 3; 139 GiB free, 4.0 GiB a pass)"


def test_the_share_runs_as_many_passes_as_it_chose_and_says_so():
    said: list[str] = []
    share = GpuShare([H200], free_memory=lambda gpu: 139 * GIB, host_memory=lambda: None, on_choice=said.append)
    share.learn(passes(2.0, 2.0))   # with cores() of this machine: at least one at once
    expected = max(1, cores() // 2)
    leave = threading.Event()
    inside = []

    def one_pass():
        ticket = share.queue_passes(f"lesson-{threading.get_ident()}", H200, {"memcheck": 1.0})["memcheck"]
        with share.sanitizing(ticket, lambda message: None):
            inside.append(1)
            leave.wait(10)

    threads = [threading.Thread(target=one_pass, daemon=True) for _ in range(expected + 2)]
    for thread in threads:
        thread.start()
    try:
        deadline = threading.Event()
        while len(inside) < expected and not deadline.wait(0.01):
            pass
        deadline.wait(0.2)   # time for one more to come in, were it let
        assert len(inside) == expected
        assert said == [f"sanitizer passes: {expected} at once ({cores()} core{'s' if cores() > 1 else ''}, "
                        f"2.0 cores a pass; 139 GiB free, 4.0 GiB a pass)"]
    finally:
        leave.set()
        for thread in threads:
            thread.join(5)


def test_the_share_without_footprints_keeps_the_default_and_gpu_memory_bounds_it():
    assert GpuShare([H200], free_memory=lambda gpu: None)._slots(H200) == PASSES_PER_GPU
    assert GpuShare([H200], free_memory=lambda gpu: 2 * PASS_MEMORY_MIB)._slots(H200) == 2


def test_a_run_reports_its_cpu_seconds_and_peak_memory():
    ran = run_command(["python3", "-c", "x = bytearray(64 * 2**20); sum(range(3 * 10**6))"], timeout=30)
    assert ran.returncode == 0
    assert ran.cpu_seconds is not None and 0 < ran.cpu_seconds <= ran.seconds + 0.5
    assert ran.max_rss_mib is not None and ran.max_rss_mib >= 64


def test_the_sanitizer_cache_keeps_a_footprint_of_a_stand_in_pass_and_verify_v_says_the_choice(
        course, fake_sanitizer, monkeypatch, tmp_path):
    root = tmp_path / "cache"   # of its own: no pass of another test measured
    monkeypatch.setenv("COURSECTL_CACHE", str(root))
    monkeypatch.setenv("FAKE_SANITIZER_MEMCHECK_SLEEP", "0.2")
    made = course(["day13-shared-memory"], sanitizers={"day13-shared-memory": {"memcheck": {}}})
    first = coursectl("verify", "--all", "-v", "--rerun-sanitizers")
    assert first.exit_code == 0, first.output
    assert "sanitizer passes: 6 at once (the default: 6 a GPU, no pass measured yet; 140 GiB free, 4.0 GiB a pass)" \
        in lines(first.stdout)
    [entry] = (root / FOLDER / "day13-shared-memory").glob("memcheck-*.json")
    stored = json.loads(entry.read_text())["footprint"]
    assert stored["wall_s"] >= 0.2 and stored["cpu_s"] > 0 and stored["max_rss_mib"] > 0
    assert stored["gpu_mib"] is None   # no NVML here
    seconds, footprint = last_run(root, "day13-shared-memory", "memcheck")
    assert footprint == Footprint.model_validate(stored) and seconds == pytest.approx(stored["wall_s"], abs=0.01)
    again = coursectl("verify", "--all", "-v", "--rerun-sanitizers")
    assert again.exit_code == 0, again.output
    [line] = [line for line in lines(again.stdout) if line.startswith("sanitizer passes: ")]
    assert "cores a pass" in line and "no pass measured" not in line
    assert made.root.is_dir()


def nvml_answering(monkeypatch, processes, sample_seconds: float) -> None:
    """NVML allowed, and a fake of it whose GPU runs `processes()` now; the sampler asking each sample_seconds."""
    class FakeNvml:
        @staticmethod
        def nvmlDeviceGetHandleByUUID(uuid):
            assert uuid == GPU_UUID
            return "handle"

        @staticmethod
        def nvmlDeviceGetComputeRunningProcesses(handle):
            return processes()

    monkeypatch.delenv("COURSECTL_NO_NVML")
    monkeypatch.setattr(gpu_memory.NVML, "get", lambda: FakeNvml)
    monkeypatch.setattr(gpu_memory, "SAMPLE_SECONDS", sample_seconds)


def test_a_pass_s_gpu_memory_is_the_most_its_marked_processes_held_as_nvml_saw_them(monkeypatch):
    held = {"mib": 3072}
    nvml_answering(monkeypatch, lambda: [SimpleNamespace(pid=child.pid, usedGpuMemory=held["mib"] * 2**20),
                                         SimpleNamespace(pid=os.getpid(), usedGpuMemory=50 * 2**30)],   # not the pass's
                   0.02)
    with gpu_memory.watching(H200) as watch:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"],
                                 env={**os.environ, **watch.env})
        time.sleep(0.2)
        held["mib"] = 1024   # less later: the most is kept
        child.wait()
    assert watch.env.keys() == {gpu_memory.MARKER}
    assert watch.most_mib == 3072


def test_passes_watched_at_once_share_one_sampling_thread_and_each_keeps_its_own_memory(monkeypatch):
    children: list = []
    nvml_answering(monkeypatch, lambda: [SimpleNamespace(pid=child.pid, usedGpuMemory=(index + 1) * 1024 * 2**20)
                                         for index, child in enumerate(children)], 0.02)

    def samplers() -> list:
        return [t for t in threading.enumerate() if t.name == "coursectl-gpu-memory" and t.is_alive()]

    with gpu_memory.watching(H200) as first, gpu_memory.watching(H200) as second:
        for watch in (first, second):
            children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"],
                                             env={**os.environ, **watch.env}))
        assert len(samplers()) == 1   # one sampler for both
        for child in children:
            child.wait()
    assert (first.most_mib, second.most_mib) == (1024, 2048)
    deadline = time.monotonic() + 2
    while samplers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert samplers() == []   # none watched: the sampler is gone


def test_without_nvml_a_pass_runs_unmarked_and_its_gpu_memory_is_not_known():
    with gpu_memory.watching(H200) as watch:   # COURSECTL_NO_NVML, as in every test
        pass
    assert (watch.env, watch.most_mib) == ({}, None)


def test_a_pass_needs_the_cores_of_its_user_space_cpu_not_the_drivers_waits():
    # The racecheck pass of day 14 on the H200: 12.48 s user and 90.85 s system CPU in 6.29 s.
    from orchestrator.cuda.sanitizer_cache import Footprint
    racecheck = Footprint(wall_s=6.29, cpu_s=103.33, user_s=12.48, max_rss_mib=900)
    assert round(racecheck.cores, 2) == 1.98
    assert Footprint(wall_s=6.29, cpu_s=103.33, max_rss_mib=900).cores > 16   # stored before user_s was kept
    ran = run_command(["python3", "-c", "sum(range(3_000_000))"], timeout=30)
    assert ran.user_seconds is not None and 0 < ran.user_seconds <= ran.cpu_seconds


def test_a_watch_is_first_sampled_a_sample_after_it_begins_not_before_its_program_is_on_the_gpu(monkeypatch):
    asked: list[float] = []
    nvml_answering(monkeypatch, lambda: asked.append(time.monotonic()) or [], 0.3)
    began = time.monotonic()
    with gpu_memory.watching(H200), gpu_memory.watching(H200):   # two passes begin: no sample yet for either
        time.sleep(0.1)
        assert asked == []
        time.sleep(0.4)
    assert asked and asked[0] - began >= 0.3
