#!/usr/bin/env python3
"""Time coursectl on a course of N lessons made from this course's own, and its floor; sweep the passes' concurrency.

For each N of --n, writes a course of N lessons into a temp dir: lessons.yaml
with each real lesson's entry copied under a new id (dayNNNN-name) and its
own anchors, the lesson's folder and page template copied, and every source
made distinct (a line naming its copy appended, so each has its own build
key and sanitizer key). No evidence is copied. On a GPU it then
  - records the evidence for the copies (`coursectl record --all`, its own
    cache: setup, timed but not a figure of verify);
  - times `verify --all` cold (an empty build and sanitizer cache) and warm
    (the same cache again), each traced (COURSECTL_TRACE);
  - computes the floor from the cold trace: the timed runs one after another
    plus the passes summed over the passes' concurrency (the most that ran
    at once), and never less than the longest pass; and the ratios cold/floor
    and warm/timed runs.
With --sweep K1,K2,... it times the sanitizer passes alone at each
concurrency on a course of --sweep-n lessons: one `verify --all` to build and
run (untimed), then `verify --all --rerun-sanitizers --sanitizer-jobs K` per
K, the passes' span (first pass started to last pass ended) read from the
trace, with the CPU seconds the command's children used.

With --offline (no GPU needed) it times `verify --all --offline` cold and
warm instead (after `coursectl render`): no evidence is recorded, so the
lessons are NO_EVIDENCE; the figures are coursectl's and nvcc's work.

Writes one JSON ("format": 1) with the machine (CPU cores, memory, GPUs,
nvcc, compute-sanitizer, coursectl), to --out and standard output. It needs
only an installed coursectl (on PATH, or --coursectl), nvcc and, on a GPU,
compute-sanitizer: nothing of this repository is imported.

    python3 bench/scale.py --n 100 --out bench/results/nvidia-h200/scale-100.json
    python3 bench/scale.py --n 0 --sweep 1,2,4,6,8,12,16 --sweep-n 16 --out ...
    python3 bench/scale.py --n 4 --offline

GPU time on an H200: N=100 is about 200 s of record, 195 s cold and 67 s
warm; the sweep at --sweep-n 16 (20 passes) about 4 minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY = re.compile(r"^  - (day(\d+)-([a-z0-9-]+)):", re.MULTILINE)
ANCHOR = re.compile(r"&([A-Za-z0-9_]+)")


def write_course(root: Path, count: int, *, distinct: bool = True, source: Path = ROOT) -> list[str]:
    """A course of `count` lessons cycling through the real ones, each source distinct (unless not
    `distinct`: then each is its original's, and so is its evidence, copied); the new ids. `source` is
    the course copied (this one)."""
    text = (source / "lessons.yaml").read_text(encoding="utf-8")
    starts = [m.start() for m in ENTRY.finditer(text)]
    head, blocks = text[:starts[0]], [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]
    out, ids = [head], []
    templates = source / "templates"
    if templates.is_dir():
        shutil.copytree(templates, root / "templates", ignore=shutil.ignore_patterns("lessons"))
    for day in range(1, count + 1):
        block = blocks[(day - 1) % len(blocks)]
        match = ENTRY.match(block)
        old, name = match.group(1), match.group(3)
        new = f"day{day:04d}-{name}"
        ids.append(new)
        shutil.copytree(source / "lessons" / old, root / "lessons" / new)
        if not distinct:
            copy_evidence(source, root, old, new)
        for path in (root / "lessons" / new).rglob("*") if distinct else ():
            if path.suffix in (".cu", ".cuh"):   # its own build key and sanitizer key
                with path.open("a", encoding="utf-8") as f:
                    f.write(f"\n// scale copy {day} of {count}, from {old}\n")
        page = templates / "lessons" / f"{old}.md.j2"
        if page.is_file():
            (root / "templates" / "lessons").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, root / "templates" / "lessons" / f"{new}.md.j2")
        block = block.replace(f"- {old}:", f"- {new}:", 1)
        for anchor in ANCHOR.findall(block):   # an anchor of a lesson's own, one per copy
            block = re.sub(rf"([&*]){anchor}\b", rf"\g<1>{anchor}_{day}", block)
        out.append(block)
    (root / "lessons.yaml").write_text("".join(out), encoding="utf-8")
    (root / "README.md").write_text(f"# A course of {count} lessons\n\n## Lessons\n\n<!-- lessons:begin -->\n"
                                    "<!-- lessons:end -->\n", encoding="utf-8")
    return ids


def copy_evidence(source: Path, root: Path, old: str, new: str) -> None:
    """The real lesson's evidence as the copy's (for a copy whose source is its original's): its files
    JSON re-keyed, the lesson's id and folder the copy's wherever it names them (the files meta.json
    hashes kept as they are)."""
    recorded = source / "evidence" / old
    if not recorded.is_dir():
        return
    shutil.copytree(recorded, root / "evidence" / new)
    for path in (root / "evidence" / new).rglob("*.json"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            path.write_text(text.replace(old, new), encoding="utf-8", errors="surrogateescape")


def run(coursectl: list[str], args: list[str], course: Path, cache: Path, trace: Path | None) -> dict:
    """One coursectl command in the course: its wall seconds, children's CPU seconds, exit status and tally."""
    env = dict(os.environ, COURSECTL_CACHE=str(cache))
    env.pop("COURSECTL_TRACE", None)
    if trace:
        env["COURSECTL_TRACE"] = str(trace)
    report = course.parent / f"report-{time.monotonic_ns()}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    reporting = ["--json", str(report), "-q"] if args[0] in ("verify", "record") else []
    done = subprocess.run([*coursectl, *args, *reporting], cwd=course, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tally: dict[str, int] = {}
    failed: dict[str, list[str]] = {}   # each lesson that did not pass: its status and first reasons
    try:
        for lesson in json.loads(report.read_text()).get("results", []):
            status = str(lesson.get("status"))
            tally[status] = tally.get(status, 0) + 1
            if not status.startswith("PASS"):
                why = [*lesson.get("reasons", []), *lesson.get("stale", []), lesson.get("unverified") or ""]
                failed[str(lesson.get("lesson"))] = [status, *[str(r)[:500] for r in why if r][:3]]
    except (OSError, ValueError):
        pass
    out = {"command": " ".join(["coursectl", *args]), "wall_s": round(wall, 2),
           "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
           "exit": done.returncode, "tally": tally}
    if failed:
        out["not_passed"] = failed
    if done.returncode not in (0, 1):
        out["output_tail"] = done.stdout[-2000:]
    if trace and trace.is_file():
        out["trace"] = summarise(json.loads(trace.read_text()))
    return out


def summarise(trace: dict) -> dict:
    """The GPU work in a trace: timed runs summed, passes summed, the longest, the most at once, their span."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    gpu_work = [e for e in events if e.get("args", {}).get("gpu") is not None and e["name"] != "turn"]
    runs = [e for e in gpu_work if e["name"] == "timed runs"]
    passes = [e for e in gpu_work if e["name"] != "timed runs"]
    most, now = 0, 0
    for _, step in sorted([(e["ts"], 1) for e in passes] + [(e["ts"] + e["dur"], -1) for e in passes]):
        now += step
        most = max(most, now)
    seconds = lambda us: round(us / 1e6, 2)  # noqa: E731
    return {"timed_runs": len(runs), "timed_runs_s": seconds(sum(e["dur"] for e in runs)),
            "passes": len(passes), "passes_summed_s": seconds(sum(e["dur"] for e in passes)),
            "longest_pass_s": seconds(max((e["dur"] for e in passes), default=0)),
            "passes_at_once": most,
            "passes_span_s": seconds(max(e["ts"] + e["dur"] for e in passes) - min(e["ts"] for e in passes))
            if passes else 0.0,
            "builds": sum(1 for e in events if e["name"].startswith("nvcc "))}


def floor(cold: dict) -> dict:
    """The floor of a cold verify: timed runs one after another, then the passes at their concurrency."""
    t = cold.get("trace")
    if not t:
        return {}
    at_once = max(t["passes_at_once"], 1)
    passes = max(t["passes_summed_s"] / at_once, t["longest_pass_s"])
    value = t["timed_runs_s"] + passes
    return {"floor_s": round(value, 2), "timed_runs_s": t["timed_runs_s"], "passes_at_concurrency_s": round(passes, 2),
            "concurrency": at_once, "ratio_cold_to_floor": round(cold["wall_s"] / value, 3) if value else None}


def machine(coursectl: list[str]) -> dict:
    """What the figures were measured on."""
    def first_line(cmd: list[str]) -> str | None:
        try:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        return lines[-1].strip() if lines and done.returncode == 0 else None
    memory = None
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    gpus = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            done = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
            gpus = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"host": platform.node(), "cpu_cores": os.cpu_count(), "memory_gib": memory, "gpus": gpus,
            "python": platform.python_version(), "nvcc": first_line(["nvcc", "--version"]),
            "compute_sanitizer": first_line(["compute-sanitizer", "--version"]),
            "coursectl": first_line([*coursectl, "--version"])}


def scale(coursectl: list[str], count: int, tmp: Path, *, offline: bool, jobs: int | None) -> dict:
    course = tmp / f"course-{count}"
    course.mkdir()
    write_course(course, count)
    extra = ["--sanitizer-jobs", str(jobs)] if jobs else []
    result: dict = {"lessons": count}
    if offline:
        cache = tmp / f"cache-{count}"
        result["render"] = run(coursectl, ["render"], course, cache, None)   # the sources' header lines
        result["cold"] = run(coursectl, ["verify", "--all", "--offline"], course, cache, tmp / f"cold-{count}.json")
        result["warm"] = run(coursectl, ["verify", "--all", "--offline"], course, cache, tmp / f"warm-{count}.json")
        return result
    result["record"] = run(coursectl, ["record", "--all", *extra], course, tmp / f"record-cache-{count}",
                           tmp / f"record-{count}.json")
    result["render"] = run(coursectl, ["render"], course, tmp / f"record-cache-{count}", None)
    cache = tmp / f"cache-{count}"
    result["cold"] = run(coursectl, ["verify", "--all", *extra], course, cache, tmp / f"cold-{count}.json")
    result["warm"] = run(coursectl, ["verify", "--all", *extra], course, cache, tmp / f"warm-{count}.json")
    result["floor"] = floor(result["cold"])
    timed = result["warm"].get("trace", {}).get("timed_runs_s")
    if timed:
        result["ratio_warm_to_timed_runs"] = round(result["warm"]["wall_s"] / timed, 3)
    return result


def sweep(coursectl: list[str], count: int, levels: list[int], tmp: Path) -> dict:
    course = tmp / f"sweep-{count}"
    course.mkdir()
    write_course(course, count)
    cache = tmp / "sweep-cache"
    out: dict = {"lessons": count, "setup": run(coursectl, ["verify", "--all"], course, cache, None), "levels": []}
    for level in levels:
        done = run(coursectl, ["verify", "--all", "--rerun-sanitizers", "--sanitizer-jobs", str(level)],
                   course, cache, tmp / f"sweep-{level}.json")
        t = done.get("trace", {})
        out["levels"].append({"sanitizer_jobs": level, "passes": t.get("passes"), "passes_span_s": t.get("passes_span_s"),
                              "passes_summed_s": t.get("passes_summed_s"), "longest_pass_s": t.get("longest_pass_s"),
                              "passes_at_once": t.get("passes_at_once"), "wall_s": done["wall_s"],
                              "cpu_s": done["cpu_s"], "exit": done["exit"]})
    return out


def numbers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of whole numbers") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: a negative number")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=numbers, default=[4, 25, 100], help="course sizes, comma-separated (0: none)")
    parser.add_argument("--sweep", type=numbers, default=[], help="sanitizer passes at once to time, comma-separated")
    parser.add_argument("--sweep-n", type=int, default=16, help="lessons of the sweep's course (default 16: 20 passes)")
    parser.add_argument("--sanitizer-jobs", type=int, default=None, help="passed to record and verify (default: theirs)")
    parser.add_argument("--offline", action="store_true", help="time verify --offline (no GPU needed)")
    parser.add_argument("--coursectl", default=None, help="the coursectl command (default: coursectl on PATH)")
    parser.add_argument("--keep", type=Path, default=None, help="build the courses in this folder and keep them")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    found = args.coursectl or shutil.which("coursectl")
    if not found:
        sys.exit("bench/scale.py: coursectl is not on PATH (install the wheel, or give --coursectl)")
    coursectl = found.split()
    if not args.offline and (not shutil.which("nvcc") or not shutil.which("compute-sanitizer")
                             or not shutil.which("nvidia-smi")):
        print("bench/scale.py: nvcc, compute-sanitizer and nvidia-smi are needed on a GPU (or give --offline)",
              file=sys.stderr)
        sys.exit(3)
    if args.offline and args.sweep:
        sys.exit("bench/scale.py: --sweep times sanitizer passes, which need a GPU; not with --offline")
    result: dict = {"format": 1, "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                    "offline": args.offline, "machine": machine(coursectl), "sizes": []}
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="coursectl-scale-", dir=args.keep) as name:
        tmp = Path(name)
        for count in [c for c in args.n if c > 0]:
            result["sizes"].append(scale(coursectl, count, tmp, offline=args.offline, jobs=args.sanitizer_jobs))
            print(f"N={count}: " + json.dumps({k: v for k, v in result["sizes"][-1].items() if k != "record"}),
                  file=sys.stderr, flush=True)
        if args.sweep:
            result["sweep"] = sweep(coursectl, args.sweep_n, args.sweep, tmp)
        if args.keep:
            shutil.copytree(tmp, args.keep / "kept", dirs_exist_ok=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
