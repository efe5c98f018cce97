#!/usr/bin/env python3
"""Where coursectl's own CPU goes in bench/scheduler_cpu.py's verify of N stand-in lessons, function by function.

The course, the fake nvidia-smi and compute-sanitizer and the environment are
scheduler_cpu.py's; `verify --all --no-sanitize` fills the build cache
(untimed), then `verify --all --rerun-sanitizers` runs in a Python of its own
whose functions below are wrapped to add up the CPU time of the thread that
calls them (time.thread_time: what each call took of its thread, the
functions it calls included, so the figures nest and overlap). Prints the
sums in seconds, largest first, with TOTAL (getrusage of the process),
imports (coursectl's modules, before the command runs) and each kind of
thread's own CPU (`thread main`, `thread coursectl-pass`, ...: the name less
its numbers, the threads of a kind added up), and under `voluntary switches`
each kind's voluntary context switches (from /proc/thread-self/status; TOTAL
is getrusage's): how often its threads waited, for a program, a lock or the
interpreter.

    python3 bench/cpu_breakdown.py WORKDIR [--lessons 400] [--sanitizer-jobs N] [--gpu]

WORKDIR keeps the course and its cache; one already there is used again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import scheduler_cpu  # noqa: E402  (bench/scheduler_cpu.py, beside this script)

# (module, attribute): each a function, or a method as Class.name, looked up where its callers find it.
WRAPPED = [
    ("orchestrator.cli.common", "load_manifest"), ("orchestrator.judge.judging", "parse_transcript"),
    ("orchestrator.judge.passes", "parse_transcript"), ("orchestrator.judge.judging", "evaluate_claims"),
    ("orchestrator.judge.passes", "evaluate_claims"), ("orchestrator.process", "run_command"),
    ("orchestrator.cli.display", "print_summary"), ("orchestrator.cuda.toolchain", "gpu_state"),
    ("orchestrator.judge.judging", "judge_runs"), ("orchestrator.workflows.turn", "Turn.run_program"),
    ("orchestrator.workflows.turn", "Turn._run_pass"), ("orchestrator.workflows.turn", "Turn.sanitize"),
    ("orchestrator.workflows.turn", "Turn._sanitize_one"), ("orchestrator.workflows.turn", "pass_key"),
    ("orchestrator.workflows.turn", "store_pass"), ("orchestrator.workflows.turn", "judge_sanitizer_run"),
    ("orchestrator.workflows.turn", "read_evidence_file"), ("orchestrator.judge.passes", "program_under_tool"),
    ("orchestrator.workflows.scheduler", "Scheduler._walk"), ("orchestrator.workflows.scheduler", "Scheduler._submit"),
    ("orchestrator.workflows.scheduler", "expected_passes"), ("orchestrator.cli.report", "write_json"),
]

CHILD = r"""
import atexit, importlib, json, re, resource, sys, threading, time
sums, counts, lock = {}, {}, threading.Lock()
def switches():   # this thread's voluntary context switches so far (Linux), 0 where they cannot be read
    try:
        with open("/proc/thread-self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))
    except (OSError, StopIteration):
        return 0
_run = threading.Thread.run
def run(self):   # each thread's own CPU and voluntary switches, added up by its kind (its name less the numbers)
    started, switched = time.thread_time(), switches()
    try:
        _run(self)
    finally:
        kind = "thread " + re.sub(r"[-_ ]?\d+", "", self.name)
        sums[kind] = sums.get(kind, 0.0) + time.thread_time() - started
        switched = switches() - switched
        with lock:
            counts[kind] = counts.get(kind, 0) + switched
threading.Thread.run = run
def wrap(module, attribute):
    owner = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    function = getattr(owner, name)
    def wrapped(*args, **kwargs):
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            sums[attribute] = sums.get(attribute, 0.0) + time.thread_time() - started
    setattr(owner, name, wrapped)
started = time.process_time()
import orchestrator.cli.main
sums["imports"] = time.process_time() - started
out = sys.argv.pop(1)
for module, attribute in json.loads(sys.argv.pop(1)):
    wrap(module, attribute)
import orchestrator.workflows.pipeline as pipeline   # its workflows hold the stages themselves
pipeline.VERIFY = tuple(getattr(pipeline, stage.__name__) for stage in pipeline.VERIFY)
def report():
    own = resource.getrusage(resource.RUSAGE_SELF)
    sums["TOTAL"] = own.ru_utime + own.ru_stime
    sums["thread main"] = time.thread_time()
    counts["TOTAL"], counts["thread main"] = own.ru_nvcsw, switches()
    with open(out, "w") as f:
        json.dump({**{k: round(v, 3) for k, v in sorted(sums.items(), key=lambda kv: -kv[1])},
                   "voluntary switches": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}, f, indent=1)
atexit.register(report)
from orchestrator.__main__ import main
main()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--lessons", type=int, default=400)
    parser.add_argument("--sanitizer-jobs", type=int, default=None, help="passed to verify (default: its own)")
    parser.add_argument("--gpu", action="store_true", help="this machine's GPU answers, as scheduler_cpu.py --gpu")
    args = parser.parse_args()
    extra = ["--sanitizer-jobs", str(args.sanitizer_jobs)] if args.sanitizer_jobs else []
    work = args.workdir.resolve()
    if not (work / "course").exists():
        work.mkdir(parents=True, exist_ok=True)
        scheduler_cpu.write_course(work / "course", args.lessons)
        scheduler_cpu.fakes(work / "bin", gpu=args.gpu)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("FAKE_SANITIZER_", "FAKE_GPU_", "STANDIN_", "COURSECTL_"))
           and name != "PYTHONDONTWRITEBYTECODE"}   # .pyc written by the untimed run, loaded as installed
    env.update(PATH=os.pathsep.join([str(work / "bin"), env.get("PATH", "")]), COURSECTL_CACHE=str(work / "cache"),
               COURSECTL_LOCK_DIR=str(work / "locks"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    if not args.gpu:
        env["COURSECTL_NO_NVML"] = "1"
    subprocess.run([sys.executable, "-m", "orchestrator", "verify", "--all", "--no-sanitize", "-q"],
                   cwd=work / "course", env=env, stdout=subprocess.DEVNULL, check=False)
    out = work / "breakdown.json"
    out.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), json.dumps(WRAPPED), "verify", "--all", "--rerun-sanitizers",
                           *extra, "-q", "--json", str(work / "report.json")], cwd=work / "course", env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1) or not out.is_file():
        sys.exit(f"bench/cpu_breakdown.py: verify exited {done.returncode}: {done.stderr[-2000:]}")
    print(out.read_text())


if __name__ == "__main__":
    main()
