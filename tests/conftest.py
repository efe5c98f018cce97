"""Shared fixtures: the GPU tools stood in for, a build cache shared by the session,
the stand-in lessons built once (in the background, while the first tests run),
a factory for course trees, and the helpers that run coursectl and read what it
prints.

Everything a test needs a GPU for is stood in for: nvidia-smi and
compute-sanitizer by the scripts in tests/data/fakes/, the lessons by the host
programs in tests/data/standins/ (nvcc builds them for real, as C++, and the CPU
runs them), printing transcripts recorded on an H200 (tests/data/seeds/).

The suite runs on every core (pytest-xdist, `-n auto`), each worker with its
own session cache and GPU locks: `make test` leaves out the tests marked slow
(real lessons built with nvcc, waits, Chromium), `make test-slow` runs them,
`make test-all` runs every test. Its nvcc is a compile memo
kept for the run (tests/nvcc_memo.py, first on PATH from the session's start):
a compile it has seen, of the same files and flags in another folder, is
replayed instead of run again, by every worker, coursectl and the background
builds alike; a failed compile always runs nvcc. The tests that watch nvcc's
process, signal it or read its diagnostics take the `real_nvcc` fixture;
COURSECTL_TEST_NVCC_MEMO=0 turns the memo off for a whole run.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
STANDINS = DATA / "standins"
FAKES = DATA / "fakes"
SEEDS = DATA / "seeds"
SANITIZER_DATA = DATA / "sanitizer"
MULTI = DATA / "multi"
# The course the tool's tests stand on: a copy of this repository's course as it was (lessons.yaml,
# lessons/, templates/, evidence/, README.md), so that a lesson added, removed, reordered or renamed
# in lessons.yaml, or a default changed, fails no test but those that check the course itself.
COURSE = DATA / "course"

# How long a test watches for something that must not happen (a pass starting beside a timed run, a
# holder let in beside another): a thread let through wrongly is through within milliseconds.
QUIET = 0.1

# libyaml's emitter where PyYAML has it: a test course's lessons.yaml is written some 200 times a run.
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

GPU_UUID = "GPU-00000000-test"
SECOND_GPU_UUID = "GPU-00000001-test"   # with FAKE_GPU_COUNT=2
GPU_SLUG = "nvidia-h200"
FLAGS = ["-std=c++17", "-O3"]

# The lessons a test course can hold: which stand-in plays the lesson, whose
# output schema and claims (from the real lessons.yaml) it is judged by, and
# which recorded transcript the replaying stand-in prints.
LESSONS = {
    "day13-shared-memory": dict(day=13, standin="replay", schema="day13-shared-memory",
                                transcript="shared_memory.txt"),
    "day14-syncthreads": dict(day=14, standin="replay", schema="day14-syncthreads",
                              transcript="syncthreads.txt"),
    "day16-tiled-matmul": dict(day=16, standin="replay", schema="day16-tiled-matmul",
                               transcript="tiled_matmul.txt"),
    "day71-matmul-fp16": dict(day=71, standin="replay", schema="day71-matmul-fp16",
                              transcript="matmul_fp16.txt"),
    "hang": dict(day=91, standin="hang", schema="day13-shared-memory", timeout=0.5),
    "crash": dict(day=92, standin="crash", schema="day13-shared-memory"),
    "garbage": dict(day=93, standin="garbage", schema="day13-shared-memory"),
    "fail": dict(day=94, standin="fail", schema="day13-shared-memory"),
    "flood": dict(day=95, standin="flood", schema="day13-shared-memory"),
}

# The lessons that the replaying stand-in plays.
REPLAYING = [lesson_id for lesson_id, spec in LESSONS.items() if spec["standin"] == "replay"]

# (lesson, arch, variant) built once per session into the session's cache,
# which every course tree shares: the cache key holds the source and the
# headers it reads, the flags, arch, variant and nvcc version, neither the
# course's folder nor the lesson. Every lesson plain for
# sm_90; the replaying and crashing ones also with -lineinfo (for sanitizer
# passes); the replaying and hanging ones for sm_75 (record builds every
# listed architecture).
PREBUILT = ([(lesson_id, "sm_90", "plain") for lesson_id in LESSONS]
            + [(lesson_id, "sm_90", "lineinfo") for lesson_id in [*REPLAYING, "crash"]]
            + [(lesson_id, "sm_75", "plain") for lesson_id in [*REPLAYING, "hang"]])


def is_gone(pid: int, within: float = 5.0) -> bool:
    """Whether `pid` has ended (a zombie waiting for init to reap it counts as ended)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU; skipped where there is none")


# -- the compile memo ------------------------------------------------------------------
# The real nvcc, found before the memo's nvcc goes first on PATH (a run's processes
# inherit it through COURSECTL_TEST_REAL_NVCC).
REAL_NVCC = os.environ.get("COURSECTL_TEST_REAL_NVCC") or shutil.which("nvcc")
_BEFORE_MEMO: dict[str, str | None] = {}


def _is_xdist_controller(config) -> bool:
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def run_dir(config) -> Path:
    """The run's base temporary folder: each xdist worker's session is a folder in it (popen-gwN)."""
    basetemp = config._tmp_path_factory.getbasetemp()
    return basetemp.parent if hasattr(config, "workerinput") else basetemp


@contextlib.contextmanager
def run_lock(path: Path):
    """A lock file that one process of the run (one xdist worker) holds at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """nvcc through the run's compile memo (tests/nvcc_memo.py), first on PATH before any test file is read.

    One memo for the whole run, shared by the xdist workers (in the run's base
    temporary folder, so never kept for another run): the same compile in
    another folder is replayed, not run again. COURSECTL_TEST_NVCC_MEMO=0
    leaves it out (the wrapper then runs nvcc itself); the `real_nvcc` fixture
    does so for one test.
    """
    config = session.config
    if REAL_NVCC is None or os.environ.get("COURSECTL_TEST_NVCC_MEMO") == "0" or _is_xdist_controller(config):
        return
    from nvcc_memo import write_wrapper

    basetemp = config._tmp_path_factory.getbasetemp()
    wrapper = write_wrapper(basetemp / "nvcc-memo-bin" / "nvcc", REAL_NVCC, run_dir(config) / "nvcc-memo")
    for name in ("PATH", "COURSECTL_TEST_REAL_NVCC"):
        _BEFORE_MEMO[name] = os.environ.get(name)
    os.environ["COURSECTL_TEST_REAL_NVCC"] = REAL_NVCC
    os.environ["PATH"] = os.pathsep.join([str(wrapper.parent), os.environ.get("PATH", "")])


def pytest_unconfigure(config):
    for name, value in _BEFORE_MEMO.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _BEFORE_MEMO.clear()


@pytest.fixture
def real_nvcc(monkeypatch) -> str:
    """nvcc itself for this test, not the run's compile memo: for the tests that watch nvcc's
    process, signal it as it runs or read its diagnostics. The real nvcc's path."""
    monkeypatch.setenv("COURSECTL_TEST_NVCC_MEMO", "0")
    return REAL_NVCC


def has_gpu() -> bool:
    """Whether the real `nvidia-smi -L` lists a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and any(line.startswith("GPU ") for line in listed.stdout.splitlines())


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if "gpu" in item.keywords]
    if marked and not has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU: `nvidia-smi -L` lists none")
        for item in marked:
            item.add_marker(skip)
    # The tests that wait for the background builds go last, in their order:
    # the others run meanwhile.
    items.sort(key=lambda item: "built_in_background" in item.fixturenames)


# -- the environment -------------------------------------------------------------------
@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("session")


@pytest.fixture(scope="session", autouse=True)
def isolated_env(session_dir):
    """The session's own build cache and GPU locks; NVML never asked (nvidia-smi answers)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSECTL_CACHE", str(session_dir / "cache"))
        mp.setenv("COURSECTL_LOCK_DIR", str(session_dir / "locks"))
        mp.setenv("COURSECTL_NO_NVML", "1")
        for name in list(os.environ):
            if name.startswith(("FAKE_SANITIZER_", "FAKE_GPU_", "STANDIN_")):
                mp.delenv(name)
        yield


@pytest.fixture(autouse=True)
def real_gpu_env(request, monkeypatch):
    """Tests marked gpu ask the machine's NVML as a user's coursectl would."""
    if request.node.get_closest_marker("gpu") is not None:
        monkeypatch.delenv("COURSECTL_NO_NVML", raising=False)


def _install(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source.read_text())
    target.chmod(0o755)
    return target


@pytest.fixture(scope="session")
def gpu_bin(session_dir) -> Path:
    """A folder holding only the fake nvidia-smi."""
    folder = session_dir / "bin-gpu"
    _install(FAKES / "nvidia-smi", folder / "nvidia-smi")
    return folder


@pytest.fixture(scope="session")
def sanitizer_bin(session_dir) -> Path:
    """A folder holding only the fake compute-sanitizer.

    It is tests/data/fakes/compute_sanitizer.py, behind a few lines of sh that
    print its `--version` (which every coursectl command asks) without
    starting Python.
    """
    script = FAKES / "compute_sanitizer.py"
    version = subprocess.run([sys.executable, "-S", str(script), "--version"], capture_output=True, text=True,
                             check=True).stdout
    folder = session_dir / "bin-sanitizer"
    folder.mkdir(parents=True)
    fake = folder / "compute-sanitizer"
    fake.write_text("#!/bin/sh\n"
                    f"# The fake compute-sanitizer: {script}\n"
                    'if [ "$#" = 1 ] && [ "$1" = --version ]; then\n'
                    f"    printf '%s' {shlex.quote(version)}\n"
                    "    exit 0\n"
                    "fi\n"
                    f'exec {shlex.quote(sys.executable)} -S {shlex.quote(str(script))} "$@"\n')
    fake.chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def nvcc_bin(session_dir) -> Path:
    """A folder holding only nvcc (a link to the real one, not the memo) and the host programs it runs (gcc,
    g++, as, ld: links to this machine's), for a PATH without any GPU tool."""
    assert REAL_NVCC is not None, "nvcc must be on PATH to run the tests"
    folder = session_dir / "bin-nvcc"
    folder.mkdir()
    (folder / "nvcc").symlink_to(REAL_NVCC)
    for name in ("gcc", "g++", "as", "ld"):
        (folder / name).symlink_to(shutil.which(name))
    return folder


def prepend_path(monkeypatch, *folders: Path) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, folders), os.environ["PATH"]]))


@pytest.fixture
def fake_gpu(monkeypatch, gpu_bin) -> Path:
    """The fake nvidia-smi first on PATH: one NVIDIA H200, GPU-00000000-test."""
    prepend_path(monkeypatch, gpu_bin)
    return gpu_bin


@pytest.fixture
def two_gpus(monkeypatch, fake_gpu) -> list[str]:
    """The fake nvidia-smi reporting two H200s; their UUIDs, by index."""
    monkeypatch.setenv("FAKE_GPU_COUNT", "2")
    return [GPU_UUID, SECOND_GPU_UUID]


@pytest.fixture
def fake_sanitizer(monkeypatch, fake_gpu, sanitizer_bin) -> Path:
    """The fake compute-sanitizer first on PATH too, writing clean logs unless told otherwise."""
    prepend_path(monkeypatch, sanitizer_bin)
    return sanitizer_bin


# The lessons of the fixture course, COURSE, in its order. first_lessons_only keeps a manifest's text to
# these, for the tests of a text with lessons added after them.
FIRST_LESSONS = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"]


def first_lessons_only(text: str) -> str:
    """lessons.yaml's text less the entries of lessons added after FIRST_LESSONS."""
    kept, keep, listing = [], True, False
    for row in text.splitlines(keepends=True):
        if listing and row.startswith("  - "):
            keep = re.match(r"  - (?:id: )?([a-z0-9-]+)", row)[1] in FIRST_LESSONS
        elif row[:1] not in ("", " ", "\n", "#"):   # a top-level key
            listing, keep = row.startswith("lessons:"), True
        if keep:
            kept.append(row)
    return "".join(kept)


def fixture_course(fixture: Path, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the fixture course `fixture` in tmp_path/course, with a build cache of its own."""
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "course"
    shutil.copytree(fixture, root)
    return root


def edit_lessons(root: Path, change) -> None:
    """`change(data)` made to the course's lessons.yaml, as parsed, and the file written again."""
    data = yaml.safe_load((root / "lessons.yaml").read_text())
    change(data)
    (root / "lessons.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def interleaved(schema):
    """`schema` ignoring compute-sanitizer's lines, for the seeds' runs under the tool, which interleave its
    lines with the program's (coursectl's passes log to a file; by default every line is the program's)."""
    from orchestrator.transcript.schema import OutputSchema
    return OutputSchema.model_validate({**schema.model_dump(exclude_unset=True), "ignore": ["^========= "]})


def named(path: Path, root: Path) -> str:
    """A file as coursectl's messages and reports name it: relative to the course's root."""
    return Path(path).relative_to(root).as_posix()


# -- course trees ----------------------------------------------------------------------
def real_lessons() -> dict[str, dict]:
    """The lessons of the real lessons.yaml, written out in the long form (defaults joined in).

    Each call gets a copy of its own; the file is parsed once for each text it has had.
    """
    return copy.deepcopy(_written_out_lessons((COURSE / "lessons.yaml").read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=4)
def _written_out_lessons(text: str) -> dict[str, dict]:
    from orchestrator.manifest.shorthand import written_out

    data = written_out(yaml.safe_load(text), COURSE)
    return {lesson["id"]: lesson for lesson in data["lessons"]}


@dataclass
class Course:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "lessons.yaml"

    def transcript(self, lesson_id: str) -> Path:
        """The transcript the lesson's stand-in replays (edit it to change what the lesson prints)."""
        return self.root / "transcripts" / f"{lesson_id}.txt"

    def evidence(self, lesson_id: str, slug: str = GPU_SLUG) -> Path:
        return self.root / "evidence" / lesson_id / slug

    def load(self):
        from orchestrator.manifest.load import load_manifest
        return load_manifest(self.manifest)


def uses_build_resources(claim: dict) -> bool:
    """Whether a claim is about ptxas' report of the lesson's kernels, which the host-only stand-ins lack."""
    return any(re.search(r"\bresources\b", str(claim.get(key) or ""))
               for key in ("gate", "expect", "each", "where"))


def write_course(root: Path, lesson_ids: list[str], architectures: list[str] = ("sm_90", "sm_75"),
                 sanitizers: dict[str, dict] | None = None, edit=None, cuda: bool = False) -> Course:
    """A course tree: lessons.yaml, the stand-ins' sources and the transcripts they replay.

    Each lesson takes the output schema and claims of a real lesson, less the
    claims about ptxas' report of its kernels: the stand-ins have none.

    `sanitizers` maps a lesson id to its `sanitizers:` entry; every other lesson
    declares none (the default is none too). `edit(manifest_dict)` may change
    the manifest before it is written.

    The stand-ins are host code, kept as .cpp files: nvcc hands those to the
    host compiler, a tenth of a second where a .cu file takes nvcc's whole CUDA
    path (cudafe++, cicc, ptxas, fatbinary), most of a second. `cuda` names
    them .cu instead, for the tests that need that path: nvcc's own
    diagnostics, or a build that lasts long enough to interrupt.
    """
    real = real_lessons()
    course = Course(root)
    (root / "standins").mkdir(parents=True, exist_ok=True)
    (root / "transcripts").mkdir(exist_ok=True)
    entries = []
    for lesson_id in lesson_ids:
        spec = LESSONS[lesson_id]
        source = root / "standins" / f"{spec['standin']}{'.cu' if cuda else '.cpp'}"
        if not source.exists():
            shutil.copyfile(STANDINS / f"{spec['standin']}.cpp", source)
        # The stand-ins share a folder (and most of them one source), so each page is named.
        entry = {"id": lesson_id, "day": spec["day"], "title": f"{lesson_id} (stand-in)",
                 "source": f"standins/{source.name}", "page": {"path": f"lessons/{lesson_id}/README.md"}}
        if "transcript" in spec:
            shutil.copyfile(SEEDS / spec["transcript"], course.transcript(lesson_id))
            entry["args"] = [str(course.transcript(lesson_id))]
        if "timeout" in spec:
            entry["timeout"] = spec["timeout"]
        if sanitizers and lesson_id in sanitizers:
            entry["sanitizers"] = sanitizers[lesson_id]
        schema = real[spec["schema"]]
        entry["output"] = schema["output"]
        entry["claims"] = [claim for claim in schema.get("claims", []) if not uses_build_resources(claim)]
        entries.append(entry)
    manifest = {"version": 1, "course": "coursectl tests", "architectures": list(architectures),
                "defaults": {"flags": FLAGS, "timeout": 30, "sanitizers": {}}, "lessons": entries}
    if edit is not None:
        edit(manifest)
    course.manifest.write_text(yaml.dump(manifest, Dumper=DUMPER, sort_keys=False, width=1000), encoding="utf-8")
    return course


def copy_multi_course(root: Path) -> Course:
    """tests/data/multi, a course of two programs sharing a folder and a header, with the repository's templates."""
    shutil.copytree(MULTI, root)
    shutil.copytree(COURSE / "templates", root / "templates")
    return Course(root)


@pytest.fixture
def multi_course(tmp_path) -> Course:
    """copy_multi_course in this test's tmp_path."""
    return copy_multi_course(tmp_path / "multi")


@pytest.fixture
def make_course(tmp_path):
    """make_course(lesson ids, ...) -> Course in this test's tmp_path (see write_course)."""
    def make(lesson_ids: list[str], **kwargs) -> Course:
        return write_course(tmp_path / "course", lesson_ids, **kwargs)
    return make


@pytest.fixture
def course(make_course, monkeypatch):
    """make_course, then change into the course's root as a user would."""
    def make(lesson_ids, **kwargs):
        made = make_course(lesson_ids, **kwargs)
        monkeypatch.chdir(made.root)
        return made
    return make


@pytest.fixture
def course_copy(tmp_path, monkeypatch) -> Path:
    """The fixture course, COURSE (manifest, lessons, templates, evidence, README), in a folder of its own."""
    copy = tmp_path / "course"
    for name in ("lessons", "templates", "evidence"):
        shutil.copytree(COURSE / name, copy / name)
    for name in ("lessons.yaml", "README.md"):
        shutil.copyfile(COURSE / name, copy / name)
    monkeypatch.chdir(copy)
    return copy


# -- what the replaying stand-in logs --------------------------------------------------
@dataclass
class StandinRun:
    """One run of the replaying stand-in, as it logged itself to $STANDIN_LOG."""

    pid: int
    start: float       # time.monotonic() seconds
    end: float
    visible: str       # CUDA_VISIBLE_DEVICES
    order: str         # CUDA_DEVICE_ORDER


def standin_runs(log: Path) -> list[StandinRun]:
    """The finished runs in $STANDIN_LOG, in order of their start."""
    starts: dict[int, list[str]] = {}
    runs = []
    for line in log.read_text().splitlines():
        pid, what, seconds, visible, order = line.split(" ")
        if what == "start":
            starts[int(pid)] = [seconds, visible, order]
        else:
            started, visible, order = starts.pop(int(pid))
            runs.append(StandinRun(pid=int(pid), start=float(started), end=float(seconds),
                                   visible=visible, order=order))
    assert starts == {}, f"runs that never ended: {sorted(starts)}"
    return sorted(runs, key=lambda run: run.start)


@dataclass
class SanitizerRun:
    """One run of the fake compute-sanitizer, as it logged itself to $FAKE_SANITIZER_RUNS."""

    pid: int
    start: float       # time.monotonic() seconds
    end: float
    tool: str
    visible: str       # CUDA_VISIBLE_DEVICES
    argument: str      # the program's first argument: for the replaying stand-in, the transcript


def sanitizer_runs(log: Path) -> list[SanitizerRun]:
    """The finished runs in $FAKE_SANITIZER_RUNS, in order of their start; none if it was never written."""
    if not log.exists():
        return []
    starts: dict[int, list[str]] = {}
    runs = []
    for line in log.read_text().splitlines():
        pid, what, seconds, tool, visible, argument = line.split(" ")
        if what == "start":
            starts[int(pid)] = [seconds, tool, visible, argument]
        else:
            started = starts.pop(int(pid))[0]
            runs.append(SanitizerRun(pid=int(pid), start=float(started), end=float(seconds), tool=tool,
                                     visible=visible, argument=argument))
    assert starts == {}, f"passes that never ended: {sorted(starts)}"
    return sorted(runs, key=lambda run: run.start)


def overlap(a, b) -> bool:
    """Whether two runs (anything with start and end) were running at the same moment."""
    return a.start < b.end and b.start < a.end


def wait_for(condition, what: str, within: float = 30.0):
    """What condition() returns once it is true; fails the test after `within` seconds of looking."""
    deadline = time.monotonic() + within
    while not (found := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)
    return found


# -- the command line and what it prints -----------------------------------------------
H = "\u2502"   # the column rule of a table row
HH = "\u2503"  # the column rule of a table header


@functools.cache
def _command():
    """The click command typer makes of coursectl's app, made once (typer's CliRunner makes it for every call)."""
    import typer.main

    from orchestrator.cli.main import app

    return typer.main.get_command(app)


def coursectl(*args, columns: int = 200):
    """Run coursectl in this process through click's CliRunner, as typer's does, at a fixed terminal width."""
    from click.testing import CliRunner

    result = CliRunner().invoke(_command(), [str(a) for a in args], env={"COLUMNS": str(columns)})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def table(text: str, title: str) -> list[list[str]]:
    """The header and rows (cells stripped) of the table printed under `title`."""
    out = lines(text)
    start = out.index(title)
    rows = [[cell.strip() for cell in out[start + 1].split(HH)]]
    for line in out[start + 3:]:
        if H not in line:
            break
        rows.append([cell.strip() for cell in line.split(H)])
    return rows


TALLY = re.compile(r"^\d+ passed(, \d+ [a-z -]+)*, \d+ failed( \(.*\))? in \d+\.\d s(; .*)?$")


def after(text: str, title: str) -> list[str]:
    """The lines after the table printed under `title`: the reasons and notes, not the tally."""
    out = lines(text)
    index = out.index(title) + 3
    while index < len(out) and H in out[index]:
        index += 1
    rest = out[index:]
    return rest[:-1] if rest and TALLY.match(rest[-1]) else rest


def tally_line(text: str) -> str:
    """The last line of a verify, record or merge: `2 passed, 1 without evidence, 0 failed in T s`."""
    last = lines(text)[-1]
    assert TALLY.match(last), last
    return re.sub(r"in \d+\.\d s", "in T s", last)


def unverified(lesson: str, gpu: str | None = GPU_SLUG) -> str:
    """The line a NO_EVIDENCE lesson prints under the summary."""
    if gpu is None:
        return (f"{lesson}: never recorded on a GPU: the build and what needs no transcript were checked, the "
                f"output was not; run `coursectl record {lesson}` on a GPU")
    return (f"{lesson}: no evidence for {gpu} yet: its output was parsed and its claims checked, but there was "
            f"nothing to compare it with; run `coursectl record {lesson}` on this GPU")


def statuses(text: str, title: str = "verify") -> dict[str, str]:
    return {row[0]: row[1] for row in table(text, title)[1:]}


def seconds_masked(text: str) -> str:
    return re.sub(r"\d+\.\d+ s\b", "T s", text)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


# -- builds in the background ---------------------------------------------------------
# nvcc takes most of the suite's time. The builds that the tests ask for at
# collection (build_in_background) start with the session, one per core (the
# xdist workers share the cores), in a process of their own
# (background_builds.py), so that a test that sets COURSECTL_CACHE meanwhile
# cannot move them; the tests that need none run first, and those that wait
# for them (through `built_in_background`) last.
@dataclass
class BackgroundBuild:
    course: str                       # the folder, under the run's, its course is written in
    make: Callable[[Path], Path]      # writes the course into a folder; returns its manifest
    lesson: str
    arch: str
    variant: str
    needed_by: str                    # the fixture that waits for it: no test uses that one, no build


BACKGROUND: dict[str, BackgroundBuild] = {}


def build_in_background(name: str, course: str, make, lesson: str, needed_by: str, arch: str = "sm_90",
                        variant: str = "plain") -> None:
    """Ask, at collection, for a build into the session's cache, started with the session.

    `make(folder)` writes the course (once per `course`) and returns its
    manifest; `needed_by` names the fixture that uses it, so a selection of
    tests that never uses that fixture never builds it.
    """
    BACKGROUND[name] = BackgroundBuild(course, make, lesson, arch, variant, needed_by)


class Background(dict):
    """The background builds: build name -> BuildResult, each waited for when asked for.

    A build that failed, or a process that ended without it, fails the test that asks.
    """

    def __init__(self, process: subprocess.Popen | None, folder: Path, jobs: list[list[str]]):
        super().__init__()
        self.process, self.folder = process, folder
        self.index = {job[0]: index for index, job in enumerate(jobs)}
        self.manifests = {job[0]: Path(job[1]) for job in jobs}   # build name -> the manifest of its course

    def __missing__(self, name: str):
        from orchestrator.cuda.build import BuildResult

        if name not in self.index:
            raise KeyError(f"{name!r} was not asked for, or no selected test uses the fixture it names as "
                           "needed_by")
        result = self.folder / "results" / f"{self.index[name]}.json"
        while not result.exists():
            if self.process.poll() is not None and not result.exists():
                raise AssertionError(f"background builds ended without {name}:\n"
                                     f"{(self.folder / 'output.txt').read_text()}")
            time.sleep(0.02)
        found = json.loads(result.read_text())
        assert "error" not in found, f"background build {name}: {found['error']}"
        self[name] = BuildResult.model_validate(found)
        return self[name]


@pytest.fixture(scope="session", autouse=True)
def background_builds(request, session_dir, isolated_env):
    """Start the builds that the selected tests will need; they run while the first tests do."""
    first_use: dict[str, int] = {}   # fixture -> the index of the first test that uses it
    for index, item in enumerate(request.session.items):
        for fixture in item.fixturenames:
            first_use.setdefault(fixture, index)
    in_order = sorted(BACKGROUND.items(), key=lambda item: first_use.get(item[1].needed_by, 0))
    wanted = {name: build for name, build in in_order if build.needed_by in first_use}   # as the tests want them
    folder = session_dir / "background"
    (folder / "results").mkdir(parents=True)
    # The courses are written once per run, in one folder for every xdist worker: each worker
    # builds them into its own session cache, and the second one's nvcc is the memo's replay of
    # the first one's (a binary that holds its source's path is replayed only in that folder).
    shared = run_dir(request.config) / "background-courses"
    with run_lock(shared / ".lock"):
        made = shared / "courses.json"
        courses: dict[str, str] = json.loads(made.read_text()) if made.exists() else {}
        for build in wanted.values():
            if build.course not in courses:
                courses[build.course] = str(build.make(shared / build.course))
        made.write_text(json.dumps(courses))
    jobs = [[name, courses[build.course], build.lesson, build.arch, build.variant] for name, build in wanted.items()]
    # Under xdist the workers share the cores, and each starts at another place in the list,
    # so that they build different things at once and replay the rest from each other.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = (int(worker) % workers if worker.isdigit() else 0) * len(jobs) // workers
    jobs = jobs[start:] + jobs[:start]
    threads = max(1, (os.cpu_count() or 2) // workers)
    (folder / "jobs.json").write_text(json.dumps(jobs))
    process = None
    if jobs:
        with open(folder / "output.txt", "wb") as output:
            process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "background_builds.py"),
                                        str(folder / "jobs.json"), str(folder / "results"), str(threads)],
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    yield Background(process, folder, jobs)
    if process is not None and process.poll() is None:   # never leave nvcc running after the session
        os.killpg(process.pid, signal.SIGKILL)
    if process is not None:
        process.wait()


@pytest.fixture(scope="session")
def built_in_background(background_builds) -> Background:
    """The background builds, for the fixtures that use them (their tests run last: see above)."""
    return background_builds


def _template_course(folder: Path) -> Path:
    return write_course(folder, list(LESSONS)).manifest


# The builds of PREBUILT, once per stand-in, architecture and variant.
_PREBUILT_BY: dict[tuple[str, str, str], str] = {}
for _lesson, _arch, _variant in PREBUILT:
    _first = _PREBUILT_BY.setdefault((LESSONS[_lesson]["standin"], _arch, _variant), _lesson)
    if _first == _lesson:
        build_in_background(f"prebuilt {_lesson} {_arch} {_variant}", "template", _template_course, _lesson,
                            "prebuilt", _arch, _variant)


# -- built stand-ins -------------------------------------------------------------------
@pytest.fixture(scope="session")
def nvcc_version() -> str:
    from orchestrator.cuda.toolchain import nvcc_version as version_of
    version = version_of(shutil.which("nvcc"))
    assert version is not None
    return version


@pytest.fixture(scope="session")
def prebuilt(built_in_background) -> dict[str, Path]:
    """PREBUILT, built in the background into the session's cache: lesson id -> its plain sm_90 binary.

    The cache is content-addressed: lessons played by one stand-in share one
    entry, so each stand-in is built once per (arch, variant).
    """
    return {lesson_id: built_in_background[f"prebuilt {_PREBUILT_BY[(LESSONS[lesson_id]['standin'], 'sm_90', 'plain')]}"
                                           f" sm_90 plain"].binary
            for lesson_id in LESSONS}


@pytest.fixture(scope="session")
def standin(prebuilt) -> dict[str, Path]:
    """The stand-in programs by name: replay, hang, crash, flood, garbage, fail."""
    return {"replay": prebuilt["day13-shared-memory"], "hang": prebuilt["hang"],
            "crash": prebuilt["crash"], "flood": prebuilt["flood"],
            "garbage": prebuilt["garbage"], "fail": prebuilt["fail"]}


@pytest.fixture
def fifo():
    """fifo(path) makes a named pipe there. A reader that opens it blocking is let go after a second (a writer
    opens it and closes it at once, so the reader sees an empty file): code that would hang on it fails its test
    instead."""
    stop = threading.Event()
    threads = []

    def unblock(path: Path) -> None:
        stop.wait(1.0)
        while not stop.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:    # ENXIO: nobody is reading it now
                pass
            stop.wait(0.05)

    def make(path: Path) -> Path:
        os.mkfifo(path)
        thread = threading.Thread(target=unblock, args=(path,), daemon=True)
        thread.start()
        threads.append(thread)
        return path
    yield make
    stop.set()
    for thread in threads:
        thread.join()


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt in this process, also where the suite was started with SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
