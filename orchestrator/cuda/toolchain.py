"""Find nvcc, the GPUs, the driver and CUDA versions, and compute-sanitizer."""

from __future__ import annotations

import atexit
import errno
import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from ..errors import ToolchainError
from ..process import Runner, run_command
from .sanitizer_output import parse_version

SMI_FIELDS = ("index,name,uuid,driver_version,compute_cap,pci.bus_id,memory.total,"
              "clocks.max.sm")


class Gpu(BaseModel):
    index: int
    name: str
    uuid: str
    compute_capability: str          # "9.0"
    pci_bus_id: str = ""
    memory_mib: int | None = None
    max_sm_clock_mhz: int | None = None
    sm_count: int | None = None
    peak_gbps: float | None = None          # DRAM bandwidth: 2 x memory clock x bus width
    peak_fp32_gflops: float | None = None   # SMs x FP32 lanes per SM x 2 (FMA) x max SM clock

    @property
    def slug(self) -> str:
        return gpu_slug(self.name)

    @property
    def arch(self) -> str:
        return arch_of(self.compute_capability)


def arch_of(compute_capability: str) -> str:
    """The architecture nvcc builds for a compute capability: '9.0' -> 'sm_90'."""
    return "sm_" + compute_capability.replace(".", "")


def gpu_slug(name: str) -> str:
    """Evidence folder name for a GPU model: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


# What a command that needs a GPU says where there is none (verify says "use --offline").
NO_GPU_HINT = ("without a GPU, `coursectl verify --offline` checks what needs none; build, check, new, compare and "
               "render work too")


class Toolchain(BaseModel):
    nvcc: str | None = None
    nvcc_version: str | None = None      # "13.0.88"
    driver_version: str | None = None    # "580.159.04"
    cuda_version: str | None = None      # the driver's CUDA, "13.0"
    gpus: list[Gpu] = Field(default_factory=list)
    gpu_source: str | None = None        # "nvml" or "nvidia-smi"
    sanitizer: str | None = None
    sanitizer_version: str | None = None
    notes: list[str] = Field(default_factory=list)
    broken: dict[str, str] = Field(default_factory=dict)   # tool -> why it was found but cannot start

    def describe(self, tool: str) -> str:
        """What doctor says of nvcc or compute-sanitizer: where and which version, or what is wrong."""
        path, version = (self.nvcc, self.nvcc_version) if tool == "nvcc" else (self.sanitizer,
                                                                               self.sanitizer_version)
        if tool in self.broken:
            return f"{path}: CANNOT RUN: {self.broken[tool]}"
        if not path:
            return "NOT FOUND" if tool == "nvcc" else "NOT FOUND: verify and record need --no-sanitize"
        return f"{path} ({version})"

    def _cannot_run(self, tool: str, path: str | None) -> ToolchainError | None:
        if tool not in self.broken:
            return None
        hint = ("repair the CUDA toolkit, or put a working nvcc first on PATH" if tool == "nvcc" else
                "repair the CUDA toolkit's compute-sanitizer, or use --no-sanitize")
        return ToolchainError(f"{tool} at {path} cannot run: {self.broken[tool]}", hint=hint)

    def require_nvcc(self) -> str:
        if error := self._cannot_run("nvcc", self.nvcc):
            raise error
        if not self.nvcc:
            raise ToolchainError("nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin",
                                 hint="install the CUDA toolkit or set CUDA_HOME")
        return self.nvcc

    def require_gpu(self, hint: str = NO_GPU_HINT) -> list[Gpu]:
        if not self.gpus:
            detail = "; ".join(self.notes) or "neither NVML nor nvidia-smi reported one"
            raise ToolchainError(f"no NVIDIA GPU found ({detail})", hint=hint)
        return self.gpus

    def require_sanitizer(self) -> str:
        if error := self._cannot_run("compute-sanitizer", self.sanitizer):
            raise error
        if not self.sanitizer:
            raise ToolchainError("compute-sanitizer not found on PATH, beside nvcc or in $CUDA_HOME/bin",
                                 hint="install the CUDA toolkit's compute-sanitizer, or use --no-sanitize")
        return self.sanitizer


def _cuda_dirs() -> list[Path]:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    return dirs


def find_tool(name: str, beside: str | None = None) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = ([Path(beside).parent] if beside else []) + _cuda_dirs()
    for directory in candidates:
        path = directory / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def nvcc_version(nvcc: str, runner: Runner = run_command) -> str | None:
    result = runner([nvcc, "--version"], timeout=30)
    m = re.search(r"release \S+, V(\S+)", result.stdout.decode(errors="replace"))
    return m.group(1) if m else None


def sanitizer_version(sanitizer: str, runner: Runner = run_command) -> str | None:

    return parse_version(runner([sanitizer, "--version"], timeout=30).stdout.decode(errors="replace"))


# FP32 lanes per SM by compute capability (the CUDA programming guide's throughput table).
FP32_LANES = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128,
              "10.0": 128, "10.3": 128, "11.0": 128, "12.0": 128, "12.1": 128}


def peak_fp32(compute_capability: str, sm_count: int | None, max_sm_clock_mhz: int | None) -> float | None:
    lanes = FP32_LANES.get(compute_capability)
    if not lanes or not sm_count or not max_sm_clock_mhz:
        return None
    return round(sm_count * lanes * 2 * max_sm_clock_mhz / 1000.0, 1)


class NvmlSession:
    """pynvml, started once for the process and shut down at its exit; its first error, raised again after.

    Every nvmlInit asks the driver about each GPU: 25 ms on an H200, up to
    130 ms while a CUDA program starts on another GPU of the host, and the
    state of a lesson's GPU is read before and after its timed runs
    (bench/results/HISTORY.md, 2026-11-30-nvidia-h200-x2-start-gap, sweep-2).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.module = None
        self.error: Exception | None = None
        self.handles: dict[tuple[object, str], object] = {}   # each GPU's, by NVML and UUID, while it is open

    def get(self):
        with self.lock:
            if self.error is not None:
                raise self.error
            if self.module is None:
                try:
                    import pynvml  # noqa: PLC0415 - optional: the nvml extra

                    pynvml.nvmlInit()
                except Exception as exc:
                    self.error = exc
                    raise
                self.module = pynvml
                atexit.register(self.close)
            return self.module

    def handle(self, nvml, uuid: str):
        """The GPU's handle, asked of `nvml` once while it stays open (before and after each timed run, and for
        each pass, it was asked again)."""
        known = (nvml, uuid)
        if known not in self.handles:
            self.handles[known] = nvml.nvmlDeviceGetHandleByUUID(uuid)
        return self.handles[known]

    def close(self) -> None:
        with self.lock:
            module, self.module = self.module, None
            self.handles.clear()
        if module is not None:
            try:
                module.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - the process is ending
                pass


NVML = NvmlSession()


def _gpus_from_nvml() -> tuple[list[Gpu], str | None, str | None]:
    pynvml = NVML.get()

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        try:
            clock = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        except pynvml.NVMLError:
            clock = None
        gpu = Gpu(index=index, name=text(pynvml.nvmlDeviceGetName(handle)),
                  uuid=text(pynvml.nvmlDeviceGetUUID(handle)),
                  compute_capability=f"{major}.{minor}",
                  pci_bus_id=text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                  memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
                  max_sm_clock_mhz=clock)
        try:
            bus_bits = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))
            mem_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
            gpu.peak_gbps = round(2 * mem_mhz * 1e6 * bus_bits / 8 / 1e9, 1)
        except (pynvml.NVMLError, AttributeError):
            pass
        try:
            gpu.sm_count = int(pynvml.nvmlDeviceGetAttributes_v2(handle).multiprocessorCount)
        except (pynvml.NVMLError, AttributeError):
            lanes = FP32_LANES.get(gpu.compute_capability)
            try:
                cores = int(pynvml.nvmlDeviceGetNumGpuCores(handle))
                gpu.sm_count = cores // lanes if lanes else None
            except (pynvml.NVMLError, AttributeError):
                pass
        gpu.peak_fp32_gflops = peak_fp32(gpu.compute_capability, gpu.sm_count, clock)
        gpus.append(gpu)
    driver = text(pynvml.nvmlSystemGetDriverVersion())
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    return gpus, driver, f"{cuda // 1000}.{(cuda % 1000) // 10}"


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def _gpus_from_smi(smi: str, runner: Runner = run_command) -> tuple[list[Gpu], str | None, str | None]:
    result = runner([smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"], timeout=30)
    if not result.ok:
        raise RuntimeError(result.describe())
    gpus = []
    driver = None
    for line in result.stdout.decode(errors="replace").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 8:
            continue
        driver = cells[3]
        gpus.append(Gpu(index=int(cells[0]), name=cells[1], uuid=cells[2], compute_capability=cells[4],
                        pci_bus_id=cells[5], memory_mib=_int_or_none(cells[6]),
                        max_sm_clock_mhz=_int_or_none(cells[7])))
    cuda = None
    header = runner([smi], timeout=30)
    m = re.search(r"CUDA Version:\s*([\d.]+)", header.stdout.decode(errors="replace"))
    if m:
        cuda = m.group(1)
    return gpus, driver, cuda


def why_it_cannot_run(path: str, exc: OSError) -> str:
    """Why a tool that was found does not start, e.g. a script whose interpreter is missing."""
    why = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT and os.path.isfile(path):
        try:
            with open(path, "rb") as handle:
                first = handle.readline(256)
        except OSError:
            first = b""
        if first.startswith(b"#!") and first[2:].split():
            interpreter = first[2:].split()[0].decode(errors="replace")
            why += f" (its interpreter {interpreter} is missing)"
        else:
            why += " (it exists: a library or loader it needs is missing)"
    return why


def discover(runner: Runner = run_command, *, use_nvml: bool = True) -> Toolchain:
    """Look for every tool; record what is missing or cannot run instead of failing.

    nvcc's version, compute-sanitizer's and NVML's GPUs are asked at once, each
    on a thread of its own: none needs another's answer, and each takes tens of
    milliseconds that every command would otherwise wait for one after another.
    """
    tc = Toolchain()
    tc.nvcc = find_tool("nvcc")
    tc.sanitizer = find_tool("compute-sanitizer", beside=tc.nvcc)
    if os.environ.get("COURSECTL_NO_NVML"):
        use_nvml = False
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="coursectl-tools") as pool:
        asked_nvcc = pool.submit(nvcc_version, tc.nvcc, runner) if tc.nvcc else None
        asked_sanitizer = pool.submit(sanitizer_version, tc.sanitizer, runner) if tc.sanitizer else None
        asked_nvml = pool.submit(_gpus_from_nvml) if use_nvml else None
    if asked_nvcc is not None:
        try:
            tc.nvcc_version = asked_nvcc.result()
        except OSError as exc:
            tc.broken["nvcc"] = why_it_cannot_run(tc.nvcc, exc)
    if asked_sanitizer is not None:
        try:
            tc.sanitizer_version = asked_sanitizer.result()
        except OSError as exc:
            tc.broken["compute-sanitizer"] = why_it_cannot_run(tc.sanitizer, exc)
    if asked_nvml is not None:
        try:
            tc.gpus, tc.driver_version, tc.cuda_version = asked_nvml.result()
            tc.gpu_source = "nvml"
        except ImportError:
            tc.notes.append("NVML bindings (pynvml) not installed")
        except Exception as exc:  # any NVMLError: no driver, no device
            tc.notes.append(f"NVML: {exc}")
    if tc.gpu_source is None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            tc.notes.append("nvidia-smi not on PATH")
        else:
            try:
                tc.gpus, tc.driver_version, tc.cuda_version = _gpus_from_smi(smi, runner)
                tc.gpu_source = "nvidia-smi"
            except (RuntimeError, OSError) as exc:
                tc.notes.append(f"nvidia-smi failed: {str(exc).splitlines()[-1]}")
    return tc


def select_gpus(toolchain: Toolchain, spec: str | None) -> list[Gpu]:
    """`--gpus 0,2` (indices or UUIDs); all GPUs when spec is None."""
    gpus = toolchain.require_gpu()
    if not spec:
        return gpus
    chosen = []
    for part in spec.split(","):
        part = part.strip()
        match = [g for g in gpus if str(g.index) == part or g.uuid == part]
        if not match:
            raise ToolchainError(f"--gpus names {part!r}, which is not one of "
                                 f"{', '.join(str(g.index) for g in gpus)}")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _through_nvml(gpu: Gpu, read):
    """`read(pynvml, handle)` for one GPU through NVML; None where NVML is turned off, missing or fails
    (the caller then asks nvidia-smi)."""
    if os.environ.get("COURSECTL_NO_NVML"):
        return None
    try:
        nvml = NVML.get()
        return read(nvml, NVML.handle(nvml, gpu.uuid))
    except Exception:  # noqa: BLE001 - any failure of NVML falls back to nvidia-smi
        return None


def free_memory_mib(gpu: Gpu, runner: Runner = run_command) -> int | None:
    """The GPU's free memory now, in MiB, through NVML, else nvidia-smi; None if neither answers."""
    free = _through_nvml(gpu, lambda nvml, handle: int(nvml.nvmlDeviceGetMemoryInfo(handle).free) // (1024 * 1024))
    if free is not None:
        return free
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    result = runner([smi, f"--id={gpu.uuid}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                    timeout=30)
    lines = result.stdout.decode(errors="replace").split()
    return _int_or_none(lines[0]) if result.ok and lines else None


# Throttle reasons that slow a run (NVML's clocks event reasons): software power
# cap, hardware slowdown, software and hardware thermal slowdown, power brake.
# GPU idle (0x1) and application clock settings are not.
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


class GpuState(BaseModel):
    """The GPU's clocks, throttling and other users at one moment."""

    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    throttle_reasons: int | None = None
    processes: list[int] = Field(default_factory=list)

    @property
    def throttled(self) -> bool:
        return bool((self.throttle_reasons or 0) & SLOWDOWN_MASK)


def gpu_state(gpu: Gpu, runner: Runner = run_command) -> GpuState | None:
    """Read the GPU's state through NVML, else nvidia-smi; None if neither answers.

    The GPU's highest SM clock is a constant of it, known since it was found (`gpu`): NVML is asked for it
    only where it was not. On an H200 that one query took 1.6 ms of CPU, the rest of the state 15 us, and
    the state is read before and after each lesson's timed runs.
    """
    state = _through_nvml(gpu, lambda nvml, handle: GpuState(
        sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        max_sm_clock_mhz=gpu.max_sm_clock_mhz if gpu.max_sm_clock_mhz is not None else int(
            nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
        throttle_reasons=int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
        processes=[p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]))
    if state is not None:
        return state
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    result = runner([smi, f"--id={gpu.uuid}", "--query-gpu=clocks.sm,clocks.max.sm,clocks_event_reasons.active",
                     "--format=csv,noheader,nounits"], timeout=30)
    if not result.ok:
        return None
    cells = [c.strip() for c in result.stdout.decode(errors="replace").strip().split(",")]
    state = GpuState()
    if len(cells) >= 3:
        state.sm_clock_mhz = _int_or_none(cells[0])
        state.max_sm_clock_mhz = _int_or_none(cells[1])
        try:
            state.throttle_reasons = int(cells[2], 16)
        except ValueError:
            pass
    apps = runner([smi, f"--id={gpu.uuid}", "--query-compute-apps=pid", "--format=csv,noheader"], timeout=30)
    if apps.ok:
        state.processes = [int(x) for x in apps.stdout.decode(errors="replace").split() if x.isdigit()]
    return state
