"""The GPU memory one sanitizer pass's processes hold, at most, as NVML sees it while the pass runs.

NVML tells each process's GPU memory now (nvmlDeviceGetComputeRunningProcesses),
not its peak once it has ended (that needs accounting mode, which only root
turns on). So while a pass runs, a thread of its own asks every
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
    done = threading.Event()

    def sample() -> None:
        while True:
            held = _held(nvml, device, f"{MARKER}={token}".encode())
            if held is not None:
                watch.most_mib = max(watch.most_mib or 0.0, held)
            if done.wait(SAMPLE_SECONDS):
                return

    thread = threading.Thread(target=sample, name=f"gpu memory of pass {token}", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        done.set()
        thread.join(timeout=5)


def _handle(gpu: Gpu):
    """(pynvml, the GPU's handle), or None where NVML is turned off, missing or fails."""
    if os.environ.get("COURSECTL_NO_NVML"):
        return None
    try:
        nvml = NVML.get()
        return nvml, nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    except Exception:  # noqa: BLE001 - without NVML the memory is not known
        return None


def _held(nvml, device, marker: bytes) -> float | None:
    """The MiB the processes carrying `marker` hold on the GPU now; None if NVML did not answer."""
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(device)
    except Exception:  # noqa: BLE001
        return None
    total = 0
    for process in processes:
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as environ:
                mine = marker in environ.read().split(b"\0")
        except OSError:   # ended, or another user's
            continue
        if mine and isinstance(process.usedGpuMemory, int):   # None where the driver does not say
            total += process.usedGpuMemory
    return total / 2**20
