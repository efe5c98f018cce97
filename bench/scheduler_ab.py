#!/usr/bin/env python3
"""coursectl's own CPU in bench/scheduler_cpu.py's 400-lesson verify, two checkouts taking turns.

A gain of a few percent is smaller than how much a shared machine's speed
moves within minutes (on the 2-core development machine one side's runs
ranged over 3.2-5.0 s). So the two sides are measured in turns, base then
this checkout, round after round: a slow spell slows both alike. Each turn
is one `scheduler_cpu.py --runs R` of that side's own checkout (its own
course, cache and coursectl), and this script writes both sides' runs,
each side's median and fastest, and the difference of the medians.

    python3 bench/scheduler_ab.py --base DIR [--base-commit C] [--rounds 2] [--runs 2]
                                  [--lessons 400] [--gpu] [--out F.json] [--md F.md]

DIR is a checkout of the other commit, e.g. `git archive C --prefix=base/ | tar x`
(then --base-commit C, as an export has no .git). Needs what scheduler_cpu.py
needs (nvcc on PATH, coursectl's dependencies in this Python); with --gpu, on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from output import emit, now  # noqa: E402  (bench/output.py, beside this script)

SIDES = ("base", "this")


def commit_of(checkout: Path) -> str | None:
    """The short commit of a git checkout; None for a folder without git (an export)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def one_turn(checkout: Path, commit: str, lessons: int, runs: int, gpu: bool) -> dict:
    """One scheduler_cpu.py of `checkout`: its JSON result (its runs, each with cpu_s and exit)."""
    with tempfile.TemporaryDirectory(prefix="coursectl-scheduler-ab-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, str(checkout / "bench" / "scheduler_cpu.py"), "--lessons", str(lessons),
                   "--runs", str(runs), "--commit", commit, "--out", str(out), *(["--gpu"] if gpu else [])]
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0 or not out.is_file():
            raise SystemExit(f"bench/scheduler_ab.py: {' '.join(command)} exited {done.returncode}: "
                             f"{done.stderr[-2000:]}")
        return json.loads(out.read_text())


def alternate(rounds: int, turn: Callable[[str], dict]) -> tuple[list[str], dict[str, list[dict]]]:
    """`rounds` rounds of a turn of each side, base first: the order they ran in and each side's runs, in it."""
    order: list[str] = []
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for _ in range(rounds):
        for side in SIDES:
            order.append(side)
            runs[side] += turn(side)["runs"]
    return order, runs


def summary(runs: dict[str, list[dict]]) -> dict:
    """Each side's CPU seconds, median and fastest, and this side's median less the base's (negative: less CPU).
    A run that did not exit 0 or 1 (verify's own statuses) measured no verify: the summary refuses it."""
    out: dict = {}
    for side in SIDES:
        bad = [run for run in runs[side] if run.get("exit") not in (0, 1)]
        if bad:
            raise SystemExit(f"bench/scheduler_ab.py: a {side} run exited {bad[0].get('exit')}: "
                             f"{bad[0].get('output_tail', '')}")
        cpu = [run["cpu_s"] for run in runs[side]]
        out[side] = {"cpu_s": cpu, "median_cpu_s": round(statistics.median(cpu), 3), "fastest_cpu_s": min(cpu)}
    out["median_difference_s"] = round(out["this"]["median_cpu_s"] - out["base"]["median_cpu_s"], 3)
    return out


def markdown(result: dict) -> str:
    rows = ["| side | commit | CPU s of each run, in turn order | median | fastest |", "| --- | --- | --- | --- | --- |"]
    for side in SIDES:
        told = result["summary"][side]
        rows.append(f"| {side} | {result['commits'][side]} | {', '.join(map(str, told['cpu_s']))} "
                    f"| {told['median_cpu_s']} | {told['fastest_cpu_s']} |")
    return (f"# coursectl's own CPU, {result['lessons']} stand-in lessons, two checkouts in turns\n\n"
            f"`python3 bench/scheduler_ab.py --lessons {result['lessons']}{' --gpu' if result['gpu'] else ''}` on "
            f"{result['machine']['cpu_cores']} cores, {result['date']}: {result['rounds']} rounds of "
            f"{result['runs_a_turn']} runs a side. Median of this less the base's: "
            f"{result['summary']['median_difference_s']} s.\n\n" + "\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout (or export) of the other commit")
    parser.add_argument("--base-commit", default=None, help="its commit (default: its git HEAD)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2, help="scheduler_cpu.py's --runs, each turn")
    parser.add_argument("--lessons", type=int, default=400)
    parser.add_argument("--gpu", action="store_true", help="passed to scheduler_cpu.py: this machine's GPU answers")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    args = parser.parse_args()
    base = args.base.resolve()
    if not (base / "bench" / "scheduler_cpu.py").is_file():
        sys.exit(f"bench/scheduler_ab.py: {base} has no bench/scheduler_cpu.py: give a checkout of coursectl")
    commits = {"base": args.base_commit or commit_of(base), "this": commit_of(ROOT) or "this checkout"}
    if commits["base"] is None:
        sys.exit(f"bench/scheduler_ab.py: {base} is no git checkout: name its commit with --base-commit")
    checkouts = {"base": base, "this": ROOT}

    def turn(side: str) -> dict:
        result = one_turn(checkouts[side], commits[side], args.lessons, args.runs, args.gpu)
        print(f"{side} ({commits[side]}): " + ", ".join(f"{run['cpu_s']} s" for run in result["runs"]),
              file=sys.stderr, flush=True)
        return result

    order, runs = alternate(args.rounds, turn)
    result = {"format": 1, "date": now(), "lessons": args.lessons, "gpu": args.gpu, "rounds": args.rounds,
              "runs_a_turn": args.runs, "commits": commits, "order": order,
              "machine": {"cpu_cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                          "host": platform.node()},
              "runs": runs, "summary": summary(runs)}
    emit(result, args.out)
    if args.md:
        args.md.write_text(markdown(result), encoding="utf-8")


if __name__ == "__main__":
    main()
