#!/usr/bin/env python3
"""Benchmark coursectl against a plain build script, on a GPU machine.

Measures, in one run:
  (a) a plain shell script doing the same work lesson by lesson: nvcc, the
      -lineinfo build, the run, the sanitizer passes, one after another;
  (b) `coursectl verify --all` with an empty build cache;
  (c) `coursectl verify --all` again, warm;
  (d) the floor: the lesson binaries' own run times plus their sanitizer passes;
  and how long parsing, claims and comparison take per lesson.
Prints b/a, c/d, b/d and coursectl's overhead per lesson, and writes JSON.

    python3 bench/bench.py [--out bench/results/NAME.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
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

from orchestrator.build import variant_flags  # noqa: E402
from orchestrator.claims import evaluate_claims  # noqa: E402
from orchestrator.comparison import compare_fields  # noqa: E402
from orchestrator.evidence import list_gpus, load_evidence  # noqa: E402
from orchestrator.manifest import load_manifest  # noqa: E402
from orchestrator.toolchain import discover  # noqa: E402
from orchestrator.transcript import flatten, parse_transcript  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    manifest = load_manifest(ROOT / "lessons.yaml")
    tc = discover()
    gpus = tc.require_gpu()
    nvcc, sanitizer = tc.require_nvcc(), tc.require_sanitizer()
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

        cache = dict(env, COURSECTL_CACHE=str(tmp / "cache"))
        b, cold = timed(["coursectl", "verify", "--all", "-q", "--json", str(tmp / "cold.json")], cache)
        c, warm = timed(["coursectl", "verify", "--all", "-q", "--json", str(tmp / "warm.json")], cache)
        reports = {name: json.loads((tmp / f"{name}.json").read_text()) for name in ("cold", "warm")}

    rebuilt = [f"{r['lesson']}:{b_['arch']}/{b_['variant']}" for r in reports["warm"]["results"]
               for b_ in r["builds"] if not b_["cached"]]
    statuses = {r["lesson"]: r["status"] for r in reports["warm"]["results"]}
    lessons = len(manifest.lessons)
    gpu = gpus[0]
    result = {
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "machine": {"gpu": gpu.name, "compute_capability": gpu.compute_capability, "gpus": len(gpus),
                    "driver": tc.driver_version, "cuda": tc.cuda_version, "nvcc": tc.nvcc_version,
                    "compute_sanitizer": tc.sanitizer_version, "cpus": os.cpu_count()},
        "lessons": lessons,
        "seconds": {"a_plain_script": round(a, 2), "b_verify_cold": round(b, 2),
                    "c_verify_warm": round(c, 2), "d_floor_runs_and_sanitizers": round(floor, 2)},
        "ratios": {"b_over_a": round(b / a, 3), "c_over_d": round(c / floor, 3), "b_over_d": round(b / floor, 3)},
        "overhead_per_lesson_s": round((c - floor) / lessons, 3),
        "judge_ms_per_lesson": judge_cost_ms(manifest),
        "warm_rebuilds": rebuilt,
        "verify_exit": {"cold": cold.returncode, "warm": warm.returncode},
        "statuses": statuses,
        "plain_steps": [{"lesson": l, "step": k, "seconds": round(float(e) - float(s), 3)}
                        for _, l, k, s, e in steps],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
