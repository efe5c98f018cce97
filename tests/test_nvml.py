"""NVML is started once for the process, whatever asks it; a failure to start it is not retried."""

from __future__ import annotations

import sys
import types

import pytest

from orchestrator.cuda import toolchain
from orchestrator.cuda.toolchain import Gpu, NvmlSession, discover, free_memory_mib, gpu_state

H200 = Gpu(index=0, name="NVIDIA H200", uuid="GPU-fake", compute_capability="9.0")


class NVMLError(Exception):
    pass


def fake_pynvml(calls: list[str], fail: bool = False) -> types.ModuleType:
    """A pynvml with one H200, logging nvmlInit and nvmlShutdown to `calls`."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM = 1, 2

    def init():
        calls.append("init")
        if fail:
            raise NVMLError("Driver Not Loaded")

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: calls.append("shutdown")
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: uuid
    nvml.nvmlDeviceGetHandleByIndex = lambda index: H200.uuid
    nvml.nvmlDeviceGetCount = lambda: 1
    nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: (9, 0)
    nvml.nvmlDeviceGetName = lambda handle: b"NVIDIA H200"
    nvml.nvmlDeviceGetUUID = lambda handle: H200.uuid
    nvml.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=b"00000000:00:06.0")
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=141 << 30, free=140 << 30)
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, kind: 1980 if kind == 1 else 3201
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: 1755
    nvml.nvmlDeviceGetMemoryBusWidth = lambda handle: 6144
    nvml.nvmlDeviceGetAttributes_v2 = lambda handle: types.SimpleNamespace(multiprocessorCount=132)
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [types.SimpleNamespace(pid=4242)]
    nvml.nvmlSystemGetDriverVersion = lambda: b"580.159.04"
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 13000
    return nvml


@pytest.fixture
def session(monkeypatch) -> NvmlSession:
    """A fresh NVML session for coursectl, NVML allowed."""
    monkeypatch.delenv("COURSECTL_NO_NVML", raising=False)
    fresh = NvmlSession()
    monkeypatch.setattr(toolchain, "NVML", fresh)
    return fresh


def test_discovery_and_every_reading_share_one_start_of_nvml(session, monkeypatch):
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    tc = discover()
    assert tc.gpu_source == "nvml" and [g.name for g in tc.gpus] == ["NVIDIA H200"]
    assert tc.driver_version == "580.159.04" and tc.cuda_version == "13.0"
    states = [gpu_state(H200) for _ in range(3)]
    assert [(s.sm_clock_mhz, s.max_sm_clock_mhz, s.processes) for s in states] == [(1755, 1980, [4242])] * 3
    assert free_memory_mib(H200) == 140 * 1024
    assert calls == ["init"]
    session.close()
    assert calls == ["init", "shutdown"]


def test_the_state_asks_nvml_for_the_highest_clock_only_of_a_gpu_found_without_it(session, monkeypatch):
    """nvmlDeviceGetMaxClockInfo took 1.6 ms of CPU on an H200 (the rest of the state 15 us): the clock is the
    GPU's own constant, taken from what discovery found."""
    nvml = fake_pynvml([])
    asked: list[int] = []
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, kind: asked.append(kind) or 1980
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    known = H200.model_copy(update={"max_sm_clock_mhz": 1785})
    assert gpu_state(known).max_sm_clock_mhz == 1785 and asked == []
    assert gpu_state(H200).max_sm_clock_mhz == 1980 and asked == [nvml.NVML_CLOCK_SM]


def test_nvml_that_fails_to_start_is_asked_once_and_nvidia_smi_answers(session, monkeypatch, fake_gpu):
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls, fail=True))
    tc = discover()
    assert tc.gpu_source == "nvidia-smi"
    assert any("Driver Not Loaded" in note for note in tc.notes)
    monkeypatch.setenv("FAKE_GPU_FREE_MIB", "81920")
    assert [free_memory_mib(tc.gpus[0]) for _ in range(3)] == [81920] * 3
    assert calls == ["init"]


def test_a_gpus_handle_is_asked_of_nvml_once_while_it_is_open(session, monkeypatch):
    calls: list[str] = []
    nvml = fake_pynvml(calls)
    asked: list[str] = []
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: asked.append(uuid) or uuid
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = H200.model_copy(update={"max_sm_clock_mhz": 1980})
    for _ in range(3):
        assert gpu_state(found).processes == [4242]
    assert free_memory_mib(found) == 140 * 1024
    assert asked == [H200.uuid]
    session.close()
    assert gpu_state(found).sm_clock_mhz == 1755
    assert asked == [H200.uuid, H200.uuid], "asked again of NVML started again"
