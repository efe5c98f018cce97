#!/usr/bin/env python3
"""Where a coursectl run's time went, from the trace COURSECTL_TRACE=FILE wrote.

    python3 bench/timeline.py TRACE.json [--json]

Prints the run's wall time from process start, its fixed parts (start-up,
finding the tools, loading the manifest, the reports), the nvcc builds, and
for each GPU how long it was busy (timed runs and sanitizer passes, counted
once where they overlap), when it first and last was, and its idle share.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

FIXED = ("start-up", "find the tools", "load the manifest", "report")


def union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def summarise(trace: dict) -> dict:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    begin = min(e["ts"] for e in events)
    end = trace.get("otherData", {}).get("ended", max(e["ts"] + e["dur"] for e in events))
    ms = lambda us: round(us / 1000, 1)  # noqa: E731
    fixed = {name: ms(sum(e["dur"] for e in events if e["name"] == name)) for name in FIXED}
    builds = [e for e in events if e["name"].startswith("nvcc ")]
    busy: dict[int, list[tuple[float, float]]] = defaultdict(list)
    kinds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        gpu = e.get("args", {}).get("gpu")
        if gpu is None or e["name"] == "turn":
            continue
        busy[gpu].append((e["ts"], e["ts"] + e["dur"]))
        kinds[gpu]["timed runs" if e["name"] == "timed runs" else "sanitizer passes"] += e["dur"]
    gpus = {}
    for gpu, spans in sorted(busy.items()):
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        gpus[str(gpu)] = {"busy_ms": ms(union(spans)), "first_ms": ms(first - begin), "last_ms": ms(last - begin),
                          "idle_share": round(1 - union(spans) / (last - first), 3) if last > first else 0.0,
                          **{f"{kind}_ms".replace(" ", "_"): ms(v) for kind, v in kinds[gpu].items()}}
    waits = [e for e in events if e["name"] == "waiting for a GPU"]
    return {"wall_ms": ms(end - begin), "fixed_ms": fixed, "builds": len(builds),
            "build_ms": ms(union([(e["ts"], e["ts"] + e["dur"]) for e in builds])),
            "waiting_for_a_gpu_ms": ms(sum(e["dur"] for e in waits)), "gpus": gpus}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    try:
        text = args.trace.read_text()
    except OSError as exc:
        sys.exit(f"bench/timeline.py: {args.trace}: cannot read it: {exc.strerror}")
    try:
        summary = summarise(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        sys.exit(f"bench/timeline.py: {args.trace}: not a coursectl trace ({exc})")
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"wall {summary['wall_ms']} ms from process start; "
          + ", ".join(f"{name} {v} ms" for name, v in summary["fixed_ms"].items()))
    print(f"builds: {summary['builds']} nvcc runs over {summary['build_ms']} ms; "
          f"lessons waited {summary['waiting_for_a_gpu_ms']} ms in all for a GPU")
    for gpu, figures in summary["gpus"].items():
        print(f"GPU {gpu}: busy {figures['busy_ms']} ms from {figures['first_ms']} to {figures['last_ms']} ms "
              f"(idle {figures['idle_share']:.0%} of that); timed runs {figures.get('timed_runs_ms', 0)} ms, "
              f"sanitizer passes {figures.get('sanitizer_passes_ms', 0)} ms summed")


if __name__ == "__main__":
    main()
