#!/usr/bin/env python3
"""Time how coursectl takes apart 16 MiB of hostile program output.

What a lesson prints is captured up to 16 MiB per stream (process.py), then
decoded, parsed with the lesson's output schema (transcript.py) and, when the
run failed, described with the tails of its output (CommandResult.describe).
This script feeds each of those steps the worst inputs found so far, each in a
fresh process so that its peak memory can be read, and prints per input the
seconds, the growth of the peak resident memory and the longest line of what
coursectl would print (the reason and the described command).

    python3 bench/hostile_output.py [--size MIB] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEED = ROOT / "tests" / "data" / "seeds" / "shared_memory.txt"
LESSON = "day13-shared-memory"


def make_input(case: str, size: int) -> bytes:
    """The output a hostile or broken lesson prints, `size` bytes of it."""
    seed = SEED.read_bytes()
    if case == "newlines":
        return b"\n" * size
    if case == "carriage-returns":
        return b"\r" * size
    if case == "one-line":
        return b"x" * size
    if case == "short-lines":
        return b"x\n" * (size // 2)
    if case == "flood":                       # tests/data/standins/flood.cpp
        return (b"x" * 63 + b"\n") * (size // 64)
    if case == "valid-then-blank":
        return seed + b"\n" * (size - len(seed))
    if case == "valid-then-lines":
        return seed + b"x\n" * ((size - len(seed)) // 2)
    if case == "long-last-line":
        return seed + b"y" * (size - len(seed))
    if case == "failure-rows":                # rows of an `anywhere` table: every line is parsed
        row = b"FAILED copy: first wrong element at 1: got 2, want 3\n"
        return seed + row * ((size - len(seed)) // len(row))
    raise SystemExit(f"unknown case {case!r}")


CASES = ["newlines", "carriage-returns", "one-line", "short-lines", "flood", "valid-then-blank",
         "valid-then-lines", "long-last-line", "failure-rows"]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(case: str, size: int) -> dict:
    """One case, in this process: decode, parse, describe, as judging a failed run does."""
    from orchestrator.errors import TranscriptError
    from orchestrator.manifest.load import load_manifest
    from orchestrator.process import CommandResult, tail_lines
    from orchestrator.transcript.parse import decode_output, parse_transcript

    schema = load_manifest(ROOT / "lessons.yaml").lesson(LESSON).output
    data = make_input(case, size)
    baseline = peak_mib()
    started = time.perf_counter()
    result = CommandResult(argv=["./lesson"], returncode=1, stdout=data, stderr=data)
    text = decode_output(result.stdout)
    try:
        parse_transcript(schema, text, f"{LESSON} stdout")
        reason = ""
    except TranscriptError as exc:
        reason = str(exc)
    parsed = time.perf_counter()
    printed = "\n".join([reason, result.describe(), tail_lines(result.stdout, 5)])
    finished = time.perf_counter()
    return {"case": case, "bytes": len(data), "parse_s": round(parsed - started, 3),
            "describe_s": round(finished - parsed, 3), "total_s": round(finished - started, 3),
            "peak_growth_mib": round(peak_mib() - baseline, 1), "reason_chars": len(reason),
            "longest_printed_line": max(len(line) for line in printed.splitlines() or [""]),
            "reason": reason[:160]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=float, default=16, help="MiB of output per case (default 16)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--case", help=argparse.SUPPRESS)   # run one case in this process
    args = parser.parse_args()
    size = int(args.size * 1024 * 1024)
    if args.case:
        print(json.dumps(measure(args.case, size)))
        return 0
    rows = []
    print(f"{'case':<18} {'total s':>8} {'parse s':>8} {'peak MiB':>9} {'reason chars':>13} {'longest line':>13}")
    for case in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", case, "--size", str(args.size)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{case:<18} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout)
        rows.append(row)
        print(f"{case:<18} {row['total_s']:>8.2f} {row['parse_s']:>8.2f} {row['peak_growth_mib']:>9.1f} "
              f"{row['reason_chars']:>13,} {row['longest_printed_line']:>13,}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
