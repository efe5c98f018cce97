"""How many sanitizer passes run at once: chosen from the machine and from what the passes used when they last ran.

The sanitizer cache keeps each pass's footprint (cuda/sanitizer_cache.py's
`Footprint`): the CPU cores it needs (its user-space CPU seconds over its
wall seconds; Footprint.cores says why not the kernel's), its peak host memory and, where NVML could tell, its GPU memory.
From those of the run's passes (each lesson's last run of each of its
passes), `choose`:

    at once = min(cores / mean cores a pass,
                  GPU free memory / (most GPU memory of a pass + GPU_MARGIN_MIB), on each GPU,
                  host available memory / most host memory of a pass,
                  PASSES_CAP on each GPU)

The cores are those this process may run on (os.sched_getaffinity). A
term that cannot be known is left out; GPU memory not measured is taken as
sharing.PASS_MEMORY_MIB a pass, as before. Nothing measured yet (a first
run, or a cache of entries stored before footprints were): the default,
sharing.PASSES_PER_GPU on each GPU and the cores in all. --sanitizer-jobs N
wins: N on each GPU (the cores in all, or N if more), still no more than a
GPU's free memory holds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from statistics import fmean

from ..cuda.sanitizer_cache import Footprint

# The most passes at once on one GPU, however little they use: bench/scale.py's sweep on an H200 (HISTORY.md,
# 2026-12-01) found the passes' span flat from 4 at once to 16, the GPU under compute-sanitizer saturated.
PASSES_CAP = 16
# Added to the most GPU memory a pass was seen to use: the program's allocations vary with its input and timing.
GPU_MARGIN_MIB = 512
# A pass that waits on the GPU nearly all the time is counted as keeping this much of a core busy.
LEAST_CORES = 0.05


@dataclass(frozen=True)
class Concurrency:
    """Passes at once: in all, and on each GPU at most (before its free memory bounds it), and why."""

    in_all: int
    per_gpu: int
    gpu_pass_mib: float   # what one pass is taken to need of a GPU's memory
    why: str

    def line(self, at_once: int | None = None) -> str:
        """`sanitizer passes: 12 at once (16 cores, 1.3 cores a pass; 139 GiB free, 0.9 GiB a pass)`."""
        return f"sanitizer passes: {self.in_all if at_once is None else at_once} at once ({self.why})"


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def host_available_mib() -> int | None:
    """The host memory available to new programs (MemAvailable), or None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def choose(footprints: list[Footprint], *, cores: int, gpus: int, free_gpu_mib: int | None,
           host_free_mib: int | None, explicit: int | None = None, default_per_gpu: int = 6,
           default_gpu_mib: int = 4096) -> Concurrency:
    """The passes at once (see the module), from the passes' footprints and the machine.

    `free_gpu_mib` is the least free memory among the GPUs the passes run on
    (None: unknown), `explicit` --sanitizer-jobs.
    """
    measured = [footprint for footprint in footprints if footprint.wall_s > 0]
    on_gpu = [footprint.gpu_mib for footprint in measured if footprint.gpu_mib is not None]
    gpu_pass_mib = max(on_gpu) + GPU_MARGIN_MIB if on_gpu else default_gpu_mib
    memory = "" if free_gpu_mib is None else f"; {_gib(free_gpu_mib)} free, {_gib(gpu_pass_mib, 1)} a pass"
    if explicit is not None:
        return Concurrency(max(cores, explicit), explicit, gpu_pass_mib, f"--sanitizer-jobs {explicit}{memory}")
    if not measured:
        return Concurrency(max(cores, default_per_gpu), default_per_gpu, gpu_pass_mib,
                           f"the default: {default_per_gpu} a GPU, no pass measured yet{memory}")
    share = max(LEAST_CORES, fmean(footprint.cores for footprint in measured))
    terms = [math.floor(cores / share), PASSES_CAP * gpus]
    why = [f"{cores} {'core' if cores == 1 else 'cores'}, {share:.1f} cores a pass"]
    per_gpu = PASSES_CAP
    if free_gpu_mib is not None:
        per_gpu = min(per_gpu, free_gpu_mib // gpu_pass_mib)
        terms.append(per_gpu * gpus)
        why.append(f"{_gib(free_gpu_mib)} free, {_gib(gpu_pass_mib, 1)} a pass")
    rss = max(footprint.max_rss_mib for footprint in measured)
    if host_free_mib is not None and rss > 0:
        terms.append(math.floor(host_free_mib / rss))
        why.append(f"host {_gib(host_free_mib)} available, {_gib(rss, 1)} a pass")
    in_all = max(1, min(terms))
    if in_all == PASSES_CAP * gpus and in_all < min(terms[:1] + terms[2:]):
        why.append(f"at most {PASSES_CAP} a GPU")
    return Concurrency(in_all, max(1, min(per_gpu, in_all)), gpu_pass_mib, "; ".join(why))


def _gib(mib: float, places: int = 0) -> str:
    return f"{mib / 1024:.{places}f} GiB"
