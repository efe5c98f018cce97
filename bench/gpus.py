#!/usr/bin/env python3
"""Throughput of `coursectl verify` on one GPU against all of a host's GPUs.

In a scratch copy of the course whose lessons are each listed COPIES times
(new ids, the same programs, schemas and claims, so there is enough work to
share), with every build warm and every sanitizer pass run (--rerun-sanitizers):

  t1  verify --all --gpus 0
  tn  verify --all (every GPU)

With --no-sanitize, the lessons' timed runs alone (no sanitizer pass).
--rounds N times the two N times, one after the other (t1, tn, t1, tn, ...),
since two runs of the same work on one machine can differ by seconds; t1 and
tn are then the medians, and each round is kept.

It writes {"format": 3, "gpus": N, "t1": ..., "tn": ..., "speedup": t1 / tn,
"rounds": [[t1, tn], ...], "timelines": {...}}, the timelines being
bench/timeline.py's summary of the last round's traces (COURSECTL_TRACE): its
fixed parts and how busy each GPU was.

    python3 bench/gpus.py [--copies 3] [--rounds 1] [--no-sanitize] [--out bench/results/NAME-gpus.json] [--traces DIR]

--traces keeps the last round's two traces (one-gpu.json, every-gpu.json) for Perfetto.

It needs at least two GPUs; with fewer it says so in one line and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.manifest.shorthand import written_out  # noqa: E402
from orchestrator.cuda.toolchain import discover  # noqa: E402
from output import emit, now  # noqa: E402  (bench/output.py, beside this script)
from timeline import summarise  # noqa: E402  (bench/timeline.py, beside this script)


def scratch_course(copies: int, into: Path) -> Path:
    """The course with each lesson listed `copies` times, written out in the long form."""
    shutil.copytree(ROOT / "lessons", into / "lessons")
    data = written_out(yaml.safe_load((ROOT / "lessons.yaml").read_text(encoding="utf-8")), ROOT)
    lessons = []
    for copy in range(copies):
        for lesson in data["lessons"]:
            twin = dict(lesson)
            if copy:
                twin["id"] = f"{lesson['id']}-copy{copy}"
                twin["day"] = lesson["day"] * 100 + copy   # one lesson a day
                twin.pop("prose", None)
            lessons.append(twin)
    data["lessons"] = sorted(lessons, key=lambda lesson: lesson["day"])
    (into / "lessons.yaml").write_text(yaml.safe_dump(data, sort_keys=False, width=1000), encoding="utf-8")
    return into


def timed(args: list[str], cwd: Path, trace: Path | None = None) -> float:
    env = dict(os.environ, **({"COURSECTL_TRACE": str(trace)} if trace else {}))
    started = time.monotonic()
    done = subprocess.run(["coursectl", *args], cwd=cwd, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):   # a lesson without evidence for its copy's id is fine; an error is not
        sys.exit(f"bench/gpus.py: coursectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--no-sanitize", action="store_true", help="time the runs alone, without sanitizer passes")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--traces", type=Path, default=None, help="keep the last round's traces in this folder")
    parser.add_argument("--rounds", type=int, default=1, help="time t1 and tn this many times; report the medians")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    toolchain = discover()
    if len(toolchain.gpus) < 2:
        print(f"bench/gpus.py: needs two GPUs or more; found {len(toolchain.gpus)}", file=sys.stderr)
        sys.exit(3)
    with tempfile.TemporaryDirectory(prefix="coursectl-gpus-") as tmp:
        course = scratch_course(args.copies, Path(tmp))
        verify = ["verify", "--all", "-q", *(["--no-sanitize"] if args.no_sanitize else ["--rerun-sanitizers"])]
        traces = args.traces or Path(tmp) / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        timed(verify + ["--gpus", "0"], course)   # warms the build cache; the passes run again below
        rounds = []
        for _ in range(args.rounds):
            rounds.append([round(timed(verify + ["--gpus", "0"], course, traces / "one-gpu.json"), 2),
                           round(timed(verify, course, traces / "every-gpu.json"), 2)])
        t1 = statistics.median(one for one, _ in rounds)
        tn = statistics.median(every for _, every in rounds)
        lessons = len(yaml.safe_load((course / "lessons.yaml").read_text())["lessons"])
        timelines = {name: summarise(json.loads((traces / f"{name}.json").read_text()))
                     for name in ("one-gpu", "every-gpu")}
    result = {"format": 3, "date": now(),
              "gpu": toolchain.gpus[0].name, "gpus": len(toolchain.gpus), "lessons": lessons,
              "sanitizer_passes": not args.no_sanitize,
              "t1": round(t1, 2), "tn": round(tn, 2), "speedup": round(t1 / tn, 3), "rounds": rounds,
              "timelines": timelines}
    emit(result, args.out)


if __name__ == "__main__":
    main()
