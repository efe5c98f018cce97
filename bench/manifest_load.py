#!/usr/bin/env python3
"""Time load_manifest on generated courses of many lessons, and how the time grows with them.

For each size N, writes a course of N lessons into a temp dir: lessons.yaml
as this course writes its own (its defaults, anchors and short forms, each
lesson's `- dayNN-name: title` entry copied from the real ones with a new id
and day) and each lesson's folder (its source and prose, found there as the
real ones are). Loads each several times, the sizes taking turns, and prints
the median and the fastest; then the ratio of the medians of the largest and
smallest size. A
load that costs the same per lesson grows tenfold from 100 to 1,000 lessons.

    python3 bench/manifest_load.py [--lessons 100 1000] [--runs 9]
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.manifest.load import load_manifest  # noqa: E402

ENTRY = re.compile(r"^  - (day(\d+)-([a-z0-9-]+)):", re.MULTILINE)
ANCHOR = re.compile(r"&([A-Za-z0-9_]+)")


def write_course(root: Path, count: int) -> Path:
    """A course of `count` lessons cycling through the real ones, in lessons.yaml's own form; the manifest's path."""
    text = (ROOT / "lessons.yaml").read_text(encoding="utf-8")
    starts = [m.start() for m in ENTRY.finditer(text)]
    head, blocks = text[:starts[0]], [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]
    out = [head]
    for day in range(1, count + 1):
        block = blocks[(day - 1) % len(blocks)]
        match = ENTRY.match(block)
        old, name = match.group(1), match.group(3)
        new = f"day{day:04d}-{name}"
        folder = root / "lessons" / new
        folder.mkdir(parents=True)
        for path in (ROOT / "lessons" / old).iterdir():
            if path.suffix == ".cu" or path.name == "prose.md":
                shutil.copyfile(path, folder / path.name)
        block = block.replace(f"- {old}:", f"- {new}:", 1)
        for anchor in ANCHOR.findall(block):   # an anchor of a lesson's own, one per copy
            block = re.sub(rf"([&*]){anchor}\b", rf"\g<1>{anchor}_{day}", block)
        out.append(block)
    path = root / "lessons.yaml"
    path.write_text("".join(out), encoding="utf-8")
    return path


def measure(counts: list[int], runs: int) -> dict[int, tuple[float, str]]:
    """Each size's median CPU time, and a line saying it. The sizes take turns, run by run, so that a
    machine whose speed moves within minutes (a shared one) slows each of them alike."""
    with tempfile.TemporaryDirectory(prefix="manifest-load-") as tmp:
        paths = {count: write_course(Path(tmp) / str(count), count) for count in counts}
        times: dict[int, list[float]] = {count: [] for count in counts}
        cpu: dict[int, list[float]] = {count: [] for count in counts}
        for _ in range(runs):
            for count in counts:
                gc.collect()   # each run from the same heap: the last run's manifest gone, not beside this one
                start, start_cpu = time.perf_counter(), time.process_time()
                manifest = load_manifest(paths[count])
                times[count].append(time.perf_counter() - start)
                cpu[count].append(time.process_time() - start_cpu)
                assert len(manifest.lessons) == count
                del manifest
        out = {}
        for count in counts:
            lines = len(paths[count].read_text(encoding="utf-8").splitlines())
            # On a shared machine the wall clock includes waiting for a core; the CPU time does not.
            out[count] = (statistics.median(cpu[count]),
                          f"load_manifest: {count} lessons, {lines} lines: median {statistics.median(times[count]):.3f} s, "
                          f"fastest {min(times[count]):.3f} s, median CPU {statistics.median(cpu[count]):.3f} s "
                          f"over {runs} runs")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    measured = measure(args.lessons, args.runs)
    medians = {count: median for count, (median, _) in measured.items()}
    for count in args.lessons:
        print(measured[count][1], flush=True)
    small, large = min(medians), max(medians)
    if small != large:
        print(f"{large} lessons / {small} lessons: {medians[large] / medians[small]:.1f}x the CPU time "
              f"for {large / small:g}x the lessons")


if __name__ == "__main__":
    main()
