#!/usr/bin/env python3
"""coursectl's own CPU seconds in a verify of N stand-in lessons on the stand-in GPU, every pass run again.

A machine without a GPU plays one, as the tests do: the fake nvidia-smi and
compute-sanitizer of tests/data/fakes/ (first on PATH), and for each lesson
the replaying stand-in of tests/data/standins/ (host code nvcc builds as
C++), printing the transcript recorded on an H200 and judged by day 13's
output schema. Every lesson has a memcheck and a racecheck pass, every third
an initcheck too (2.33 passes a lesson, as the course's scale runs had).

`verify --all --no-sanitize` fills the build cache (untimed) and writes
coursectl's .pyc (PYTHONDONTWRITEBYTECODE is taken out of the environment,
so the timed runs load them as an installed coursectl does); then --runs
times `verify --all --rerun-sanitizers`: nothing is built, every pass runs,
as in a verify after the sanitizer's version changed (the first run's
passes have never run here, those of the runs after it have, and the
sanitizer cache holds what they took). Each is
coursectl in a process of its own that reports its own
resource.getrusage(RUSAGE_SELF) as it ends (its children's CPU, the lessons'
and passes', apart), with its voluntary context switches (a thread woken
that finds nothing to do is one) and its wall seconds. Writes the JSON to
standard output and, with --out, to a file; --md writes a short table too.

    python3 bench/scheduler_cpu.py [--lessons 400] [--runs 1] [--out F.json] [--md F.md] [--gpu]

With --gpu, on a GPU machine, that machine's GPU answers what coursectl asks
of one, as in a real run (NVML for its state before and after each timed run
and for each pass's GPU memory, nvidia-smi where NVML cannot); the passes are
still the fake compute-sanitizer's and the lessons the stand-in's.

coursectl is imported from the checkout the script is in (PYTHONPATH): to
measure another commit, run the script from an export of it (`git archive`),
with --commit naming it. Needs pydantic and the rest of coursectl's
dependencies (its .venv's Python), and nvcc on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FAKES = TESTS / "data" / "fakes"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from output import emit, now  # noqa: E402  (bench/output.py, beside this script)

# coursectl run in-process by a Python of its own, which writes its own rusage as it ends.
CHILD = r"""
import json, resource, sys, time
started = time.perf_counter()
out = sys.argv.pop(1)
try:
    from orchestrator.__main__ import main
    main()
finally:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        json.dump({"user_s": own.ru_utime, "system_s": own.ru_stime, "voluntary_switches": own.ru_nvcsw,
                   "involuntary_switches": own.ru_nivcsw, "max_rss_mib": own.ru_maxrss / 1024,
                   "children_cpu_s": children.ru_utime + children.ru_stime,
                   "wall_s": time.perf_counter() - started}, f)
"""


def fakes(folder: Path, *, gpu: bool = False) -> Path:
    """A folder of the fake nvidia-smi and compute-sanitizer (its --version answered by sh, as in the tests);
    with `gpu`, of the fake compute-sanitizer alone (the machine's own GPU answers the rest)."""
    folder.mkdir(parents=True)
    if not gpu:
        shutil.copyfile(FAKES / "nvidia-smi", folder / "nvidia-smi")
    script = FAKES / "compute_sanitizer.py"
    version = subprocess.run([sys.executable, "-S", str(script), "--version"], capture_output=True, text=True,
                             check=True).stdout
    (folder / "compute-sanitizer").write_text(
        "#!/bin/sh\n"
        'if [ "$#" = 1 ] && [ "$1" = --version ]; then\n'
        f"    printf '%s' {shlex.quote(version)}\n    exit 0\nfi\n"
        f'exec {shlex.quote(sys.executable)} -S {shlex.quote(str(script))} "$@"\n')
    for name in ("compute-sanitizer",) if gpu else ("nvidia-smi", "compute-sanitizer"):
        (folder / name).chmod(0o755)
    return folder


def write_course(root: Path, count: int) -> None:
    """lessons.yaml of `count` stand-in lessons, day 13's schema and claims (less ptxas' report's), one source."""
    import yaml
    from orchestrator.manifest.shorthand import written_out

    course = TESTS / "data" / "course"
    real = {lesson["id"]: lesson for lesson in written_out(
        yaml.safe_load((course / "lessons.yaml").read_text(encoding="utf-8")), course)["lessons"]}
    schema = real["day13-shared-memory"]
    claims = [claim for claim in schema.get("claims", [])
              if "resources" not in " ".join(str(claim.get(key) or "") for key in ("gate", "expect", "each", "where"))]
    (root / "standins").mkdir(parents=True)
    shutil.copyfile(TESTS / "data" / "standins" / "replay.cpp", root / "standins" / "replay.cpp")
    transcript = root / "transcripts" / "shared_memory.txt"
    transcript.parent.mkdir()
    shutil.copyfile(TESTS / "data" / "seeds" / "shared_memory.txt", transcript)
    lessons = []
    for day in range(1, count + 1):
        lesson_id = f"day{day:04d}-standin"
        passes = {"memcheck": {}, "racecheck": {}, **({"initcheck": {}} if day % 3 == 0 else {})}
        lessons.append({"id": lesson_id, "day": day, "title": f"{lesson_id} (stand-in)",
                        "source": "standins/replay.cpp", "page": {"path": f"lessons/{lesson_id}/README.md"},
                        "args": [str(transcript)], "sanitizers": passes,
                        "output": schema["output"], "claims": claims})
    manifest = {"version": 1, "course": f"{count} stand-in lessons", "architectures": ["sm_90"],
                "defaults": {"flags": ["-std=c++17", "-O3"], "timeout": 30, "sanitizers": {}}, "lessons": lessons}
    (root / "lessons.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False, width=1000), encoding="utf-8")


def coursectl(args: list[str], course: Path, env: dict[str, str], usage: Path) -> dict:
    """One coursectl command in its own process: its own rusage, the tally of its JSON report, its exit status."""
    report = usage.with_suffix(".report.json")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(usage), *args, "--json", str(report), "-q"],
                          cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = json.loads(usage.read_text()) if usage.is_file() else {}
    out = {name: round(value, 3) if isinstance(value, float) else value for name, value in out.items()}
    out["cpu_s"] = round(out.get("user_s", 0) + out.get("system_s", 0), 3)
    out["process_wall_s"] = round(time.perf_counter() - started, 3)
    out["exit"] = done.returncode
    tally: dict[str, int] = {}
    passes = cached = 0
    try:
        for lesson in json.loads(report.read_text()).get("results", []):
            tally[lesson["status"]] = tally.get(lesson["status"], 0) + 1
            for one in lesson.get("sanitizers", []):
                passes += 1
                cached += bool(one.get("cached"))
    except (OSError, ValueError, KeyError):
        pass
    out.update(tally=tally, passes=passes, passes_cached=cached)
    if done.returncode not in (0, 1):
        out["output_tail"] = done.stdout[-2000:]
    return out


def markdown(result: dict) -> str:
    rows = ["| lessons | passes run | coursectl CPU s (user + system) | voluntary switches | wall s | children's CPU s "
            "| exit |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in result["runs"]:
        rows.append(f"| {result['lessons']} | {run['passes'] - run['passes_cached']} | {run['cpu_s']} "
                    f"({run['user_s']} + {run['system_s']}) | {run['voluntary_switches']} | {run['wall_s']} "
                    f"| {run['children_cpu_s']} | {run['exit']} |")
    return (f"# coursectl's own CPU: verify --all --rerun-sanitizers of {result['lessons']} stand-in lessons\n\n"
            f"`python3 bench/scheduler_cpu.py --lessons {result['lessons']}"
            f"{' --gpu' if result.get('gpu', '').startswith('this') else ''}` on {result['machine']['cpu_cores']} "
            f"cores, {result['date']}, commit {result['commit']}. Median coursectl CPU "
            f"{result['median_cpu_s']} s (target: under 5 s at 400 lessons).\n\n" + "\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, default=400)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--sanitizer-jobs", type=int, default=None, help="passed to verify (default: its own)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    parser.add_argument("--commit", default=None, help="the commit measured (default: this checkout's HEAD)")
    parser.add_argument("--gpu", action="store_true",
                        help="on a GPU machine: its own GPU answers what coursectl asks of one (NVML, nvidia-smi), "
                             "as in a real run; only compute-sanitizer and the lessons are stand-ins")
    args = parser.parse_args()
    if not shutil.which("nvcc"):
        sys.exit("bench/scheduler_cpu.py: nvcc is not on PATH")
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip() or None
    result: dict = {"format": 1, "date": now(), "commit": commit, "lessons": args.lessons,
                    "gpu": "this machine's (NVML, nvidia-smi)" if args.gpu else "the fake nvidia-smi",
                    "machine": {"cpu_cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                                "host": platform.node()}, "runs": []}
    extra = ["--sanitizer-jobs", str(args.sanitizer_jobs)] if args.sanitizer_jobs else []
    with tempfile.TemporaryDirectory(prefix="coursectl-scheduler-cpu-") as name:
        tmp = Path(name)
        course = tmp / "course"
        write_course(course, args.lessons)
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("FAKE_SANITIZER_", "FAKE_GPU_", "STANDIN_", "COURSECTL_"))
               and name != "PYTHONDONTWRITEBYTECODE"}   # .pyc written by the untimed run, loaded as installed
        env.update(PATH=os.pathsep.join([str(fakes(tmp / "bin", gpu=args.gpu)), env.get("PATH", "")]),
                   COURSECTL_CACHE=str(tmp / "cache"), COURSECTL_LOCK_DIR=str(tmp / "locks"),
                   # this checkout first, then wherever its dependencies are
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
        if not args.gpu:   # the fake nvidia-smi plays the GPU: NVML, which would find none, is not asked
            env["COURSECTL_NO_NVML"] = "1"
        result["setup"] = coursectl(["verify", "--all", "--no-sanitize"], course, env, tmp / "setup.json")
        for index in range(args.runs):
            run = coursectl(["verify", "--all", "--rerun-sanitizers", *extra], course, env, tmp / f"run-{index}.json")
            result["runs"].append(run)
            print(f"{args.lessons} lessons: coursectl {run['cpu_s']} s CPU, {run['wall_s']} s wall, "
                  f"{run['passes'] - run['passes_cached']} passes run, {run['tally']}", file=sys.stderr, flush=True)
    result["median_cpu_s"] = statistics.median(run["cpu_s"] for run in result["runs"])
    emit(result, args.out)
    if args.md:
        args.md.write_text(markdown(result), encoding="utf-8")


if __name__ == "__main__":
    main()
