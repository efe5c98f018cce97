#!/usr/bin/env python3
"""verify on one GPU and on both with --start-gap 0, 0.3, 0.45 (bench/gpus.py's course, every pass run).

With PASS_GAP=1 in the environment (the tree patched with passgap.patch), also COURSECTL_PASS_GAP runs.
"""
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, "bench")
from gpus import scratch_course, timed
from timeline import summarise

out = Path(os.environ.get("OUT", "/tmp/out")); (out / "traces").mkdir(parents=True, exist_ok=True)
log = open(out / "log.txt", "a")
def say(*a):
    print(*a, flush=True); print(*a, file=log, flush=True)
plan = [x.split(":") for x in sys.argv[1].split(",")]   # name:gpus:gap[:passgap]
results = []
with tempfile.TemporaryDirectory() as tmp:
    course = scratch_course(4, Path(tmp))
    verify = ["verify", "--all", "-q", "--rerun-sanitizers"]
    say("warm-up", round(timed(verify + ["--gpus", "0"], course), 2))
    for i, step in enumerate(plan):
        name, gpus, gap = step[:3]
        if len(step) > 3:
            os.environ["COURSECTL_PASS_GAP"] = step[3]
        else:
            os.environ.pop("COURSECTL_PASS_GAP", None)
        args = verify + (["--gpus", gpus] if gpus != "all" else []) + ["--start-gap", gap]
        trace = out / "traces" / f"{i:02d}-{name}.json"
        t = timed(args, course, trace)
        s = summarise(json.loads(trace.read_text()))
        per = {k: {n: round(x) for n, x in v.items() if n.endswith("_ms")} for k, v in s["gpus"].items()}
        say(f"{i:02d} {name} gpus={gpus} start-gap={gap} pass-gap={step[3] if len(step) > 3 else '-'}: {t:.2f} s  timeline {per}")
        results.append({"step": i, "name": name, "gpus": gpus, "start_gap": float(gap),
                        "pass_gap": float(step[3]) if len(step) > 3 else None, "seconds": round(t, 3)})
        (out / "sweep.json").write_text(json.dumps(results, indent=1))
