#!/usr/bin/env python3
"""Wall time of short coursectl commands: `--help` and a warm one-lesson offline verify.

Each command runs once untimed (so every module's .pyc is written and the
verify's build cache is warm), then N times timed; the table gives the
median and the fastest wall time of each and its median CPU time, beside the interpreter's own start
(`python -c pass`) and `pytest --help` for scale. PYTHONDONTWRITEBYTECODE is
taken out of the environment, so the timed runs load .pyc as an installed
coursectl does.

    python3 bench/cli_speed.py [--runs 15] [--lesson day13-shared-memory]

Run it from the course's virtual environment (.venv/bin/python): the commands
are the coursectl and pytest beside that interpreter.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The targets of a maintainer's expectations: no slower than pytest's own --help.
TARGETS = {"coursectl --help": 0.35, "coursectl verify {lesson} --offline": 0.5}


def _tool(name: str) -> list[str] | None:
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    return [found] if found else None


def _time(command: list[str], runs: int, env: dict[str, str]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each timed run; CPU is the process's user + system time, which other
    work on the machine slows less than the wall time."""
    def once() -> tuple[float, float]:
        with tempfile.TemporaryFile() as err:
            started = time.perf_counter()
            child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            took = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 0:
                err.seek(0)
                sys.exit(f"{' '.join(command)}: exit {child.returncode}\n{err.read().decode(errors='replace')}")
        return took, usage.ru_utime + usage.ru_stime

    once()   # writes the .pyc and warms the cache; not timed
    return [once() for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command (default 15)")
    parser.add_argument("--lesson", default="day13-shared-memory", help="the lesson the offline verify checks")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(COLUMNS="120", NO_COLOR="1")
    coursectl = _tool("coursectl") or [sys.executable, "-m", "orchestrator"]
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("coursectl --help", [*coursectl, "--help"]),
        ("coursectl verify {lesson} --offline", [*coursectl, "verify", args.lesson, "--offline"]),
    ]
    pytest = _tool("pytest")
    if pytest:
        commands.append(("pytest --help", [*pytest, "--help"]))

    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {load} before; {args.runs} timed runs each after one untimed, wall time in seconds")
    print()
    print(f"{'command':<50} {'median':>7} {'fastest':>8} {'CPU':>6} {'target':>12}")
    for name, command in commands:
        runs = _time(command, args.runs, env)
        wall = [w for w, _ in runs]
        target = TARGETS.get(name)
        verdict = "" if target is None else f"< {target}" + (" ok" if statistics.median(wall) < target else " MISSED")
        print(f"{name.format(lesson=args.lesson):<50} {statistics.median(wall):>7.3f} {min(wall):>8.3f} "
              f"{statistics.median(c for _, c in runs):>6.3f} {verdict:>12}")


if __name__ == "__main__":
    main()
