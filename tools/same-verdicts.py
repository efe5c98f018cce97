#!/usr/bin/env python3
"""Whether two `coursectl verify --json` reports give the same verdicts, whatever the timings.

    python3 tools/same-verdicts.py BEFORE.json AFTER.json

Compares the report's keys, and for each lesson its status, reasons, the
paths, rules and statuses of its fields, its claims' ids and outcomes, its
sanitizer passes' tools and outcomes, and the keys of every result: what a
change of coursectl's code must not change. Values measured on the GPU (times,
rates, clocks) are left out, for no two runs give the same. Exit 0 when the
same, 1 with each difference listed.
"""

from __future__ import annotations

import json
import sys


def verdicts(report: dict) -> dict:
    out = {"keys": sorted(report), "lessons": {}}
    for result in report["results"]:
        out["lessons"][result["lesson"]] = {
            "keys": sorted(result),
            "status": result["status"],
            "reasons": result["reasons"],
            # A measured value equal to its evidence or within its tolerance holds either way: which one is
            # the run's luck, not the code's.
            "fields": [(f["path"], f["rule"], "held" if f["status"] in ("same", "within") else f["status"])
                       for f in result.get("fields") or []],
            "claims": [(c.get("id"), c.get("kind"), c.get("held")) for c in result.get("claims") or []],
            "sanitizers": [(s.get("tool"), s.get("exit_status"), s.get("errors"), s.get("findings"), s.get("problems"))
                           for s in result.get("sanitizers") or []],
        }
    return out


def differences(before, after, where="") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after), key=str):
            if key not in before or key not in after:
                found.append(f"{where}/{key}: only in {'after' if key not in before else 'before'}")
            else:
                found += differences(before[key], after[key], f"{where}/{key}")
        return found
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


def main() -> int:
    with open(sys.argv[1]) as a, open(sys.argv[2]) as b:
        found = differences(verdicts(json.load(a)), verdicts(json.load(b)))
    for line in found:
        print(line)
    lessons = len(json.load(open(sys.argv[2]))["results"])
    print(f"{len(found)} differences in the verdicts of {lessons} lessons" if found
          else f"the same verdicts: {lessons} lessons, every status, field rule and status, claim and pass")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
