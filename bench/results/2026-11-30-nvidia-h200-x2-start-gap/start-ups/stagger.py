"""Two GPUs' short CUDA programs at once: where is the time lost, and does staggering the starts help?"""
import os, statistics, subprocess, sys, threading, time, json, shutil
R = os.getcwd(); W = "/tmp/stagger"; os.makedirs(W, exist_ok=True)
LESSONS = ["day13-shared-memory/shared_memory", "day14-syncthreads/syncthreads",
           "day16-tiled-matmul/tiled_matmul", "day71-matmul-fp16/matmul_fp16"]
def build():
    procs = [subprocess.Popen(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-o", f"{W}/{os.path.basename(l)}", f"{R}/lessons/{l}.cu"]) for l in LESSONS]
    procs.append(subprocess.Popen(["nvcc", "-O3", "-arch=sm_90", "-o", f"{W}/trivial", f"{R}/scratch/x2/trivial.cu"]))
    assert all(p.wait() == 0 for p in procs)
def run(prog, gpu):
    s = time.time_ns()
    out = subprocess.run([f"{W}/{prog}"], env={**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    return s, time.time_ns(), out
class Gate:
    def __init__(self, gap): self.gap, self.last, self.lock = gap, 0.0, threading.Lock()
    def wait(self):
        if not self.gap: return
        with self.lock:
            d = self.last + self.gap - time.monotonic()
            if d > 0: time.sleep(d)
            self.last = time.monotonic()
def series(gpus_orders, gate=None, delay=None):
    res = {}
    def go(g, order):
        if delay and g in delay: time.sleep(delay[g])
        t = time.time_ns(); runs = []
        for p in order:
            if gate: gate.wait()
            s, e, _ = run(p, g); runs.append((p, (e - s) / 1e6))
        res[g] = ((time.time_ns() - t) / 1e6, runs)
    th = [threading.Thread(target=go, args=(g, o)) for g, o in gpus_orders.items()]
    s = time.time_ns(); [t.start() for t in th]; [t.join() for t in th]
    return (time.time_ns() - s) / 1e6, res
def phases(gpus, n):
    out = {g: [] for g in gpus}
    def go(g):
        for _ in range(n):
            s, e, o = run("trivial", g); t = [int(x) for x in o.split()[:5]]
            out[g].append([(t[0]-s)/1e6, (t[1]-t[0])/1e6, (t[2]-t[1])/1e6, (t[3]-t[2])/1e6, (t[4]-t[3])/1e6, (e-t[4])/1e6, (e-s)/1e6])
    th = [threading.Thread(target=go, args=(g,)) for g in gpus]; [t.start() for t in th]; [t.join() for t in th]
    names = ["exec-to-main", "init(cudaFree0)", "malloc+H2D", "kernel+D2H", "cudaFree", "exit", "total"]
    return {g: {k: round(statistics.median(r[i] for r in out[g]), 1) for i, k in enumerate(names)} for g in gpus}
build()
base = [os.path.basename(l) for l in LESSONS] * 3
rot = base[2:] + base[:2]
report = {}
print("nproc", os.cpu_count(), flush=True)
for g in (0, 1): run("trivial", g)  # warm
for rnd in (1, 2):
    report[f"trivial alone r{rnd}"] = phases([0], 8)
    report[f"trivial both r{rnd}"] = phases([0, 1], 8)
    for name, kw in [("lessons alone GPU0", dict(gpus_orders={0: base})),
                     ("lessons alone GPU1", dict(gpus_orders={1: base})),
                     ("both lockstep", dict(gpus_orders={0: base, 1: base})),
                     ("both GPU1 rotated", dict(gpus_orders={0: base, 1: rot})),
                     ("both GPU1 delayed 0.25s", dict(gpus_orders={0: base, 1: base}, delay={1: 0.25})),
                     ("both start gap 0.15s", dict(gpus_orders={0: base, 1: base}, gate=Gate(0.15))),
                     ("both start gap 0.3s", dict(gpus_orders={0: base, 1: base}, gate=Gate(0.3)))]:
        wall, res = series(**kw)
        report[f"{name} r{rnd}"] = {"wall_ms": round(wall), **{f"gpu{g}": {"ms": round(v[0]), "runs": [(p, round(x)) for p, x in v[1]]} for g, v in res.items()}}
        print(f"{name} r{rnd}: {wall:.0f} ms  " + "  ".join(f"gpu{g} " + " ".join(str(round(x)) for _, x in v[1]) for g, v in res.items()), flush=True)
    print(f"trivial alone r{rnd}", report[f"trivial alone r{rnd}"], flush=True)
    print(f"trivial both r{rnd}", report[f"trivial both r{rnd}"], flush=True)
if shutil.which("strace"):
    for label, gpus in (("alone", [0]), ("both", [0, 1])):
        th = [threading.Thread(target=lambda g=g: subprocess.run(["strace", "-f", "-c", "-o", f"{W}/strace-{label}-{g}.txt", f"{W}/trivial"], env={**os.environ, "CUDA_VISIBLE_DEVICES": str(g)}, stdout=subprocess.DEVNULL)) for g in gpus]
        [t.start() for t in th]; [t.join() for t in th]
        for g in gpus: print(f"== strace {label} gpu{g}\n" + "".join(open(f"{W}/strace-{label}-{g}.txt").readlines()[:14]), flush=True)
else:
    print("no strace")
json.dump(report, open(os.path.join(os.environ.get("OUT", W), "stagger.json"), "w"), indent=1)
