#!/usr/bin/env python3
"""Time warm `coursectl verify --all --offline` on courses of N lessons, on a machine without a GPU.

For each N of --lessons, bench/scale.py's write_course makes a course of N
lessons cycling through this course's own, each source and evidence its
original's (the evidence re-keyed to the copy's id), so that every lesson is
judged as the real ones are. `coursectl render` writes the sources' header
lines, one `verify --all --offline` fills the build cache, then --runs warm
ones are timed, the sizes taking turns; prints each size's median and fastest
wall time and the lessons' tally, and writes the JSON with --out.

With --workdir DIR the courses and their caches are kept in DIR
(course-N, cache-N) instead of a temporary folder: a size whose course is
already there is not made, rendered or filled again, and its JSON says so
(`"reused": true`, the fill a warm run then), so that a change can be timed
again without the cold builds (800 nvcc runs at 400 lessons).

    python3 bench/offline_scale.py [--lessons 100 400] [--runs 3] [--out bench/results/offline-scale.json]
                                   [--workdir DIR] [--rejudge]

A warm run takes each lesson's result from its last judging (nothing changed); --rejudge also times the
same runs with `verify --offline --rejudge`, every lesson judged again, as after an upgrade of coursectl.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import run, write_course  # noqa: E402  (bench/scale.py, beside this script)
from output import emit, now  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--coursectl", default=None, help="the coursectl command (default: coursectl on PATH)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rejudge", action="store_true",
                        help="also time warm runs with --rejudge: every lesson judged again, none taken as last judged")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the courses and caches here, and reuse those already there")
    args = parser.parse_args()
    found = args.coursectl or shutil.which("coursectl")
    if not found:
        sys.exit("bench/offline_scale.py: coursectl is not on PATH (or give --coursectl)")
    coursectl = found.split()
    result: dict = {"format": 1, "date": now(), "machine": {"cpu_cores": os.cpu_count(), "python": platform.python_version(),
                                                            "host": platform.node()}, "sizes": {}}
    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            tmp = args.workdir.resolve()
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="coursectl-offline-scale-")))
        setup = {}
        for count in args.lessons:
            course, cache = tmp / f"course-{count}", tmp / f"cache-{count}"
            if (course / "lessons.yaml").is_file() and cache.is_dir():
                fill = run(coursectl, ["verify", "--all", "--offline"], course, cache, None)
                setup[count] = {"reused": True, "fill_s": fill["wall_s"], "fill_exit": fill["exit"]}
                continue
            shutil.rmtree(course, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
            course.mkdir()
            write_course(course, count, distinct=False)
            rendered = run(coursectl, ["render"], course, cache, None)
            cold = run(coursectl, ["verify", "--all", "--offline"], course, cache, None)
            setup[count] = {"render_s": rendered["wall_s"], "cold_s": cold["wall_s"], "cold_exit": cold["exit"]}
        walls: dict[int, list[float]] = {count: [] for count in args.lessons}
        cpus: dict[int, list[float]] = {count: [] for count in args.lessons}
        last: dict[int, dict] = {}
        for _ in range(args.runs):
            for count in args.lessons:
                done = run(coursectl, ["verify", "--all", "--offline"], tmp / f"course-{count}", tmp / f"cache-{count}",
                           None)
                walls[count].append(done["wall_s"])
                cpus[count].append(done["cpu_s"])
                last[count] = done
        rejudged: dict[int, list[float]] = {count: [] for count in args.lessons}
        for _ in range(args.runs if args.rejudge else 0):
            for count in args.lessons:
                done = run(coursectl, ["verify", "--all", "--offline", "--rejudge"], tmp / f"course-{count}",
                           tmp / f"cache-{count}", None)
                rejudged[count].append(done["wall_s"])
        for count in args.lessons:
            if rejudged[count]:
                result.setdefault("rejudge", {})[str(count)] = {"median_s": statistics.median(rejudged[count]),
                                                                "fastest_s": min(rejudged[count]),
                                                                "runs_s": rejudged[count]}
                print(f"verify --all --offline --rejudge, {count} lessons: median "
                      f"{statistics.median(rejudged[count]):.2f} s", file=sys.stderr, flush=True)
            result["sizes"][str(count)] = {**setup[count], "warm_median_s": statistics.median(walls[count]),
                                           "warm_fastest_s": min(walls[count]), "warm_s": walls[count],
                                           "warm_cpu_median_s": statistics.median(cpus[count]),
                                           "exit": last[count]["exit"], "tally": last[count]["tally"]}
            print(f"verify --all --offline, warm, {count} lessons: median {statistics.median(walls[count]):.2f} s, "
                  f"fastest {min(walls[count]):.2f} s over {args.runs} runs; {last[count]['tally']}",
                  file=sys.stderr, flush=True)
    emit(result, args.out)


if __name__ == "__main__":
    main()
