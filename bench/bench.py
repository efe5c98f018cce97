#!/usr/bin/env python3
"""Benchmark coursectl against a plain build script, on a GPU machine.

Measures, in one run:
  (a) a plain shell script doing the same work lesson by lesson: nvcc, the
      -lineinfo build, the run, the sanitizer passes, one after another;
  (b) `coursectl verify --all` cold: empty build and sanitizer caches;
  (c) `coursectl verify --all` warm, nothing changed: builds and sanitizer
      passes come from the caches;
  (e) `coursectl verify --all --rerun-sanitizers` warm: builds cached, every
      pass run (the passes of all lessons together, after the timed runs);
  (d) the floor of (a): the lesson binaries' own run times plus their
      sanitizer passes, one after another;
  (f) the timed runs alone: the lesson binaries' own run times;
  and how long parsing, claims and comparison take per lesson.
Prints the seconds and ratios (c/f and b/f: verify against the timed runs
alone; e/d: the passes together against one after another) and writes JSON
("format": 2; format 1 had no e, f or cached counts).

    python3 bench/bench.py [--out bench/results/NAME.json] [--traces DIR]

--traces keeps the three verifies' traces (COURSECTL_TRACE) as DIR/cold.json,
DIR/warm.json and DIR/rerun.json, for bench/timeline.py or Perfetto.

Without a GPU (or nvcc, or compute-sanitizer) it says so in one line and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.cuda.build import variant_flags  # noqa: E402
from orchestrator.transcript.claims import evaluate_claims  # noqa: E402
from orchestrator.judge.comparison import compare_fields  # noqa: E402
from orchestrator.errors import ToolchainError  # noqa: E402
from orchestrator.judge.evidence import list_gpus, load_evidence  # noqa: E402
from orchestrator.manifest.load import load_manifest  # noqa: E402
from orchestrator.cuda.toolchain import discover  # noqa: E402
from orchestrator.transcript.parse import flatten, parse_transcript  # noqa: E402
from output import emit, now  # noqa: E402  (bench/output.py, beside this script)


def plain_script(manifest, arch: str, nvcc: str, sanitizer: str, workdir: Path) -> str:
    """The shell script a course would write by hand: one step after another, timed."""
    lines = ["#!/usr/bin/env bash", "set -u", 'stamp() { date +%s.%N; }']
    for lesson in manifest.lessons:
        src = manifest.source_path(lesson)
        flags = manifest.flags(lesson)
        plain = workdir / lesson.binary_name
        debug = workdir / f"{lesson.binary_name}-lineinfo"
        steps = [
            ("build", [nvcc, *flags, f"-arch={arch}", "-o", str(plain), str(src)]),
            ("build", [nvcc, *flags, *variant_flags("lineinfo"), f"-arch={arch}", "-o", str(debug), str(src)]),
            ("run", [str(plain), *lesson.args]),
        ]
        for tool, spec in manifest.sanitizers(lesson).items():
            steps.append(("sanitize", [sanitizer, "--tool", tool, "--error-exitcode", "86", *spec.args,
                                       str(debug), *lesson.args, *spec.program_args]))
        for kind, argv in steps:
            lines.append(f"t0=$(stamp); {shlex.join(argv)} >/dev/null 2>&1; "
                         f'echo "STEP {lesson.id} {kind} $t0 $(stamp)"')
    return "\n".join(lines) + "\n"


FORMAT = 2
COURSECTL = [sys.executable, "-m", "orchestrator"]   # this checkout's, installed or not


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.monotonic() - start, proc


def judge_cost_ms(manifest) -> dict[str, float]:
    """Parse, claims and comparison of each lesson's evidence against itself, in ms (best of 5)."""
    costs = {}
    for lesson in manifest.lessons:
        slugs = list_gpus(manifest.root, lesson.id)
        if not slugs:
            continue
        evidence = load_evidence(manifest.root, lesson.id, slugs[0])
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            transcript = parse_transcript(lesson.output, evidence.transcript)
            evaluate_claims(lesson.output, transcript, lesson.claims)
            flats = list(flatten(lesson.output.items, transcript.scope))
            compare_fields(flats, flats, same_gpu=True)
            best = min(best, time.perf_counter() - start)
        costs[lesson.id] = round(best * 1000, 2)
    return costs


def passes_cached(report: dict) -> dict[str, int]:
    """How many of a verify report's sanitizer passes came from the sanitizer cache."""
    passes = [p for r in report["results"] for p in r["sanitizers"]]
    return {"cached": sum(bool(p.get("cached")) for p in passes), "passes": len(passes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the JSON it prints to this file too")
    parser.add_argument("--traces", type=Path, default=None, help="keep the verifies' traces in this folder")
    args = parser.parse_args()
    manifest = load_manifest(ROOT / "lessons.yaml")
    tc = discover()
    try:
        gpus = tc.require_gpu()
        nvcc, sanitizer = tc.require_nvcc(), tc.require_sanitizer()
    except ToolchainError as exc:
        print(f"bench: {exc}: the benchmark times lessons on a GPU; run it on the GPU machine", file=sys.stderr)
        return 3
    arch = gpus[0].arch
    env = dict(os.environ, COLUMNS="200")

    with tempfile.TemporaryDirectory(prefix="coursectl-bench-") as tmp:
        tmp = Path(tmp)
        script = tmp / "plain.sh"
        (tmp / "bin").mkdir()
        script.write_text(plain_script(manifest, arch, nvcc, sanitizer, tmp / "bin"))
        a, proc = timed(["bash", str(script)], env)
        steps = [line.split() for line in proc.stdout.splitlines() if line.startswith("STEP ")]
        floor = sum(float(end) - float(start) for _, _, kind, start, end in steps if kind in ("run", "sanitize"))
        runs_alone = sum(float(end) - float(start) for _, _, kind, start, end in steps if kind == "run")

        cache = dict(env, COURSECTL_CACHE=str(tmp / "cache"))   # the build cache and the sanitizer cache
        if args.traces:
            args.traces.mkdir(parents=True, exist_ok=True)
        traced = lambda name: dict(cache, COURSECTL_TRACE=str(args.traces / f"{name}.json")) if args.traces \
            else cache  # noqa: E731
        verify = [*COURSECTL, "verify", "--all", "-q", "--json"]
        b, cold = timed([*verify, str(tmp / "cold.json")], traced("cold"))
        c, warm = timed([*verify, str(tmp / "warm.json")], traced("warm"))
        e, rerun = timed([*verify, str(tmp / "rerun.json"), "--rerun-sanitizers"], traced("rerun"))
        reports = {name: json.loads((tmp / f"{name}.json").read_text()) for name in ("cold", "warm", "rerun")}

    rebuilt = [f"{r['lesson']}:{b_['arch']}/{b_['variant']}" for r in reports["warm"]["results"]
               for b_ in r["builds"] if not b_["cached"]]
    statuses = {r["lesson"]: r["status"] for r in reports["warm"]["results"]}
    lessons = len(manifest.lessons)
    gpu = gpus[0]
    result = {
        "format": FORMAT,
        "date": now(),
        "machine": {"gpu": gpu.name, "compute_capability": gpu.compute_capability, "gpus": len(gpus),
                    "driver": tc.driver_version, "cuda": tc.cuda_version, "nvcc": tc.nvcc_version,
                    "compute_sanitizer": tc.sanitizer_version, "cpus": os.cpu_count()},
        "lessons": lessons,
        "seconds": {"a_plain_script": round(a, 2), "b_verify_cold": round(b, 2),
                    "c_verify_warm": round(c, 2), "d_floor_runs_and_sanitizers": round(floor, 2),
                    "e_verify_warm_rerun_sanitizers": round(e, 2), "f_timed_runs_alone": round(runs_alone, 2)},
        "ratios": {"b_over_a": round(b / a, 3), "c_over_d": round(c / floor, 3), "b_over_d": round(b / floor, 3),
                   "c_over_f": round(c / runs_alone, 3), "b_over_f": round(b / runs_alone, 3),
                   "e_over_d": round(e / floor, 3)},
        "overhead_per_lesson_s": round((c - runs_alone) / lessons, 3),
        "judge_ms_per_lesson": judge_cost_ms(manifest),
        "warm_rebuilds": rebuilt,
        "sanitizer_passes": {name: passes_cached(report) for name, report in reports.items()},
        "verify_exit": {"cold": cold.returncode, "warm": warm.returncode, "rerun": rerun.returncode},
        "statuses": statuses,
        "plain_steps": [{"lesson": l, "step": k, "seconds": round(float(e_) - float(s), 3)}
                        for _, l, k, s, e_ in steps],
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
