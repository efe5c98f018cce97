#!/usr/bin/env python3
"""Time the test suite the way the Makefile runs it, on this machine.

For each selection, ROUNDS times, one after another:

  test       pytest -n auto -m "not slow"   (make test)
  test-slow  pytest -n auto -m slow         (make test-slow)
  test-all   pytest -n auto                 (make test-all)

each a fresh pytest process (so a fresh compile memo) run by this Python, with
the wall seconds, the CPU seconds of pytest and everything it started, and
pytest's last line. Prints JSON ({"format": 1, "cores": ..., "runs": [...],
"median": {selection: seconds}}) and writes it where --out says.

    .venv/bin/python bench/suite.py [--rounds 3] [--only test] [--out bench/results/NAME.json]

A selection that fails (pytest exits non-zero) ends the benchmark with its
output and pytest's exit status: a time is only worth keeping for a green suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from output import emit, now  # bench/output.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
SELECTIONS = {"test": ["-m", "not slow"], "test-slow": ["-m", "slow"], "test-all": []}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "unknown") + (" (with local changes)" if dirty else "")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(selection: str) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "-p", "no:cacheprovider", *SELECTIONS[selection]]
    cpu, started = children_cpu(), time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-6000:] + done.stderr[-2000:])
        print(f"bench/suite.py: {selection} failed (pytest exit {done.returncode}); no time kept", file=sys.stderr)
        sys.exit(done.returncode)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return {"selection": selection, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "pytest": last.strip("= ")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each selection (default 3)")
    parser.add_argument("--only", choices=sorted(SELECTIONS), action="append",
                        help="time this selection only (may be given more than once)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    selections = args.only or list(SELECTIONS)
    runs = []
    for _ in range(args.rounds):
        for selection in selections:
            runs.append(run(selection))
            print(f"{selection}: {runs[-1]['wall_s']} s ({runs[-1]['pytest']})", file=sys.stderr)
    result = {"format": 1, "date": now(),
              "commit": commit(), "cores": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
              "bytecode_written": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
              "runs": runs,
              "median": {s: statistics.median(r["wall_s"] for r in runs if r["selection"] == s) for s in selections}}
    emit(result, args.out)


if __name__ == "__main__":
    main()
