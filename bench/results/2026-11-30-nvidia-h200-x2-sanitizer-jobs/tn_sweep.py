#!/usr/bin/env python3
"""Sweep --sanitizer-jobs for verify on every GPU against one GPU (bench/gpus.py's course)."""
import json, os, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "bench")
from gpus import scratch_course, timed
from timeline import summarise

out = Path(os.environ.get("OUT", "/tmp/out"))
copies = int(sys.argv[1]) if len(sys.argv) > 1 else 4
settings = [s for s in sys.argv[2:]] or ["6", "3", "4", "5", "8"]
results = []
with tempfile.TemporaryDirectory() as tmp:
    course = scratch_course(copies, Path(tmp))
    verify = ["verify", "--all", "-q", "--rerun-sanitizers"]
    t = timed(verify + ["--gpus", "0"], course); print("warm-up", round(t, 2), flush=True)
    t1 = timed(verify + ["--gpus", "0"], course, out / "t1.json"); print("t1 default", round(t1, 2), flush=True)
    results.append(["t1", "6", t1])
    for s in settings:
        tn = timed(verify + ["--sanitizer-jobs", s], course, out / f"tn-{s}.json")
        print(f"tn sanitizer-jobs {s}: {tn:.2f}  speedup {t1 / tn:.3f}", flush=True)
        results.append(["tn", s, tn])
    for s in settings[:2]:
        t1b = timed(verify + ["--gpus", "0", "--sanitizer-jobs", s], course, out / f"t1-{s}.json")
        print(f"t1 sanitizer-jobs {s}: {t1b:.2f}", flush=True)
        results.append(["t1", s, t1b])
(out / "sweep.json").write_text(json.dumps(results, indent=1))
for f in sorted(out.glob("*.json")):
    if f.name != "sweep.json":
        s = summarise(json.loads(f.read_text()))
        print(f.name, "wall", round(s["wall_ms"]), {k: (round(v["timed_runs_ms"]), round(v["sanitizer_passes_ms"])) for k, v in s["gpus"].items()})
