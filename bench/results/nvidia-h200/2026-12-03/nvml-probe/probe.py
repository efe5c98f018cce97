import os, time, json, tempfile, sys
out = {}
def t(name, f, n=200):
    f()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n): f()
    out[name] = {"cpu_us": round((time.process_time() - c0) / n * 1e6, 1), "wall_us": round((time.perf_counter() - w0) / n * 1e6, 1)}
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    t("GetHandleByUUID", lambda: pynvml.nvmlDeviceGetHandleByUUID(uuid))
    t("GetClockInfo SM", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    t("GetMaxClockInfo SM", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
    t("GetCurrentClocksThrottleReasons", lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    t("GetComputeRunningProcesses", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    t("GetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
    for name in ("nvmlDeviceGetClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons"):
        if hasattr(pynvml, name):
            t(name, lambda: getattr(pynvml, name)(h))
except Exception as e:
    out["nvml_error"] = repr(e)
for base in ("/tmp", "/dev/shm", os.path.expanduser("~")):
    try:
        d = tempfile.mkdtemp(dir=base)
    except OSError as e:
        out[base] = repr(e); continue
    data = b"x" * 2600
    i = [0]
    def create_rename():
        i[0] += 1
        p = os.path.join(d, f"f{i[0]}.json"); tmp = p + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.write(fd, data); os.close(fd); os.rename(tmp, p)
    t(f"{base} create+rename new", create_rename)
    k = [0]
    def create_only():
        k[0] += 1
        fd = os.open(os.path.join(d, f"g{k[0]}.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.write(fd, data); os.close(fd)
    t(f"{base} create new", create_only)
    def mkdir_create():
        k[0] += 1
        sub = os.path.join(d, f"dir{k[0]}"); os.mkdir(sub)
        fd = os.open(os.path.join(sub, "g.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.write(fd, data); os.close(fd)
    t(f"{base} mkdir+create new", mkdir_create)
    j = [0]
    def overwrite():
        j[0] = (j[0] % 200) + 1
        fd = os.open(os.path.join(d, f"f{j[0]}.json"), os.O_WRONLY); os.write(fd, data); os.ftruncate(fd, len(data)); os.close(fd)
    t(f"{base} overwrite in place", overwrite)
    def rename_over():
        j[0] = (j[0] % 200) + 1
        p = os.path.join(d, f"f{j[0]}.json"); tmp = p + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.write(fd, data); os.close(fd); os.rename(tmp, p)
    t(f"{base} create+rename over", rename_over)
    def read():
        j[0] = (j[0] % 200) + 1
        fd = os.open(os.path.join(d, f"f{j[0]}.json"), os.O_RDONLY); os.read(fd, 65536); os.close(fd)
    t(f"{base} read", read)
    os.system(f"rm -rf {d}")
import subprocess
out["df"] = subprocess.run("df -T /tmp /dev/shm ~ 2>&1; mount | grep -E ' / | /tmp ' ", shell=True, capture_output=True, text=True).stdout
print(json.dumps(out, indent=1))
