#!/usr/bin/env python3
"""Time load_manifest on a generated course of many lessons.

Writes a manifest of N lessons (copies of the real ones in lessons.yaml, with
new ids and days, their sources and prose copied beside it) into a temp dir,
then loads it several times and prints the median and the fastest.

    python3 bench/manifest_load.py [--lessons 100] [--runs 9]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.manifest.load import load_manifest  # noqa: E402
from orchestrator.manifest.shorthand import written_out  # noqa: E402


class _PlainDumper(yaml.SafeDumper):
    """Writes shared values out in full, so the file holds no anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


def write_course(root: Path, count: int) -> Path:
    """A course of `count` lessons cycling through the real ones, in the long form; the manifest's path."""
    data = written_out(yaml.safe_load((ROOT / "lessons.yaml").read_text(encoding="utf-8")), ROOT)
    real = data["lessons"]
    for lesson in real:
        for key in ("source", "prose"):
            if key in lesson:
                target = root / lesson[key]
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / lesson[key], target)
    lessons = []
    for day in range(1, count + 1):
        lesson = copy.deepcopy(real[(day - 1) % len(real)])
        name = lesson["id"].split("-", 1)[1]
        lesson["id"] = f"day{day:03d}-{name}"
        lesson["day"] = day
        lessons.append(lesson)
    manifest = {key: value for key, value in data.items() if not key.startswith("x-")}
    manifest["lessons"] = lessons
    path = root / "lessons.yaml"
    path.write_text(yaml.dump(manifest, Dumper=_PlainDumper, sort_keys=False, width=1000),
                    encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, default=100)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="manifest-load-") as tmp:
        path = write_course(Path(tmp), args.lessons)
        lines = len(path.read_text(encoding="utf-8").splitlines())
        times, cpu = [], []
        for _ in range(args.runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            manifest = load_manifest(path)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        assert len(manifest.lessons) == args.lessons
    # On a shared machine the wall clock includes waiting for a core; the CPU time does not.
    print(f"load_manifest: {args.lessons} lessons, {lines} lines: median {statistics.median(times):.3f} s, "
          f"fastest {min(times):.3f} s, median CPU {statistics.median(cpu):.3f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
