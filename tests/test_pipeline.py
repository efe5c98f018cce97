"""The pipeline: several GPUs on one host, builds overlapping runs, a lesson's turn that raises,
Ctrl-C in the middle, progress output, shards.

The stood-in nvidia-smi reports two H200s with FAKE_GPU_COUNT=2 (the two_gpus
fixture); the replaying stand-in logs each run's start, end and
CUDA_VISIBLE_DEVICES to $STANDIN_LOG and takes $STANDIN_SLEEP seconds, so
the tests can see which GPU ran what, and when.
"""

from __future__ import annotations

import json
import os
import signal
import re
import shlex
import itertools
import shutil
import threading
from pathlib import Path
import time

import pytest

from conftest import (GPU_SLUG, GPU_UUID, QUIET, SECOND_GPU_UUID, H, after, coursectl, edit, lines, overlap,
                      sanitizer_runs, standin_runs, statuses, table, tally_line, unverified, wait_for, write_course)
from orchestrator.manifest.selection import shard_lessons
from orchestrator.workflows.pipeline import verify
from orchestrator.workflows.sharing import PASS_MEMORY_MIB, GpuShare, pass_slots
from orchestrator.judge.results import LessonResult, Options, Status, quiet
from orchestrator.process import CommandResult, run_command
from orchestrator.cuda.toolchain import Gpu, Toolchain, free_memory_mib

FOUR = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"]
CLOCK = re.compile(r"^\[ *\d+\.\d s\] ")


def progress(text: str) -> list[str]:
    """The progress lines of a run without a terminal, their clock left out."""
    return [CLOCK.sub("", line) for line in lines(text) if CLOCK.match(line)]


def stages(text: str, lesson: str) -> list[str]:
    return [line[len(lesson) + 2:] for line in progress(text) if line.startswith(f"{lesson}: ")]


# -- several GPUs --------------------------------------------------------------------------------
@pytest.mark.slow
def test_four_lessons_share_two_gpus_one_run_per_gpu_at_a_time(course, two_gpus, prebuilt, monkeypatch, tmp_path):
    course(FOUR)
    log = tmp_path / "runs.log"
    monkeypatch.setenv("STANDIN_LOG", str(log))
    monkeypatch.setenv("STANDIN_SLEEP", "0.4")
    result = coursectl("verify", "--all", "--gpus", "0,1", "-v")
    assert (result.exit_code, result.stderr) == (0, "")
    assert statuses(result.stdout) == dict.fromkeys(FOUR, "NO_EVIDENCE")
    runs = standin_runs(log)
    assert len(runs) == 4
    assert {run.order for run in runs} == {"PCI_BUS_ID"}   # so that an index means the same GPU to CUDA
    assert {run.visible for run in runs} == set(two_gpus)
    for uuid in two_gpus:
        mine = [run for run in runs if run.visible == uuid]
        assert all(a.end <= b.start for a, b in zip(mine, mine[1:])), f"two runs at once on {uuid}"
    first, second = ([run for run in runs if run.visible == uuid] for uuid in two_gpus)
    assert any(a.start < b.end and b.start < a.end for a in first for b in second), "the GPUs never ran together"
    running = {line.split(": ", 1)[1] for line in progress(result.stdout) if ": running (" in line}
    assert running == {"running (GPU 0)", "running (GPU 1)"}


@pytest.mark.parametrize("choice", ["1", SECOND_GPU_UUID], ids=["index", "uuid"])
def test_gpus_picks_the_second_gpu_only(course, two_gpus, prebuilt, monkeypatch, tmp_path, choice):
    course(["day13-shared-memory", "day16-tiled-matmul"])
    log = tmp_path / "runs.log"
    monkeypatch.setenv("STANDIN_LOG", str(log))
    result = coursectl("verify", "--all", "--gpus", choice, "-v")
    assert (result.exit_code, result.stderr) == (0, "")
    assert [run.visible for run in standin_runs(log)] == [SECOND_GPU_UUID, SECOND_GPU_UUID]
    assert sorted(line for line in progress(result.stdout) if ": running (" in line) == [
        "day13-shared-memory: running (GPU 1)", "day16-tiled-matmul: running (GPU 1)"]


def test_gpus_naming_a_gpu_that_is_not_there_exits_3_naming_the_choices(course, two_gpus, prebuilt):
    course(["day13-shared-memory"])
    result = coursectl("verify", "--all", "--gpus", "7")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == ("coursectl: error: --gpus names '7', which is not one of 0, 1\n"
                             "hint: run `coursectl doctor` to see what was found\n")


def test_doctor_lists_both_gpus(course, two_gpus, fake_sanitizer, prebuilt):
    course(["day13-shared-memory"])
    result = coursectl("doctor")
    assert (result.exit_code, result.stderr) == (0, "")
    rows = [line for line in lines(result.stdout) if line.startswith(" GPU ")]
    assert rows == [
        f" GPU 0             {H} NVIDIA H200, compute capability 9.0, 143771 MiB, 00000000:19:00.0, {GPU_UUID}",
        f" GPU 1             {H} NVIDIA H200, compute capability 9.0, 143771 MiB, 00000000:3B:00.0, {SECOND_GPU_UUID}"]


# -- sanitizer passes beside each other, never beside a timed run ----------------------------------
H200 = Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")


def ticket(share: GpuShare, gpu: Gpu):
    """A place in the share's queue for one pass of a lesson whose timed runs were on `gpu`."""
    return share.queue_passes("a-lesson", gpu, {"memcheck": 0.0})["memcheck"]


def in_thread(body) -> tuple[threading.Thread, threading.Event]:
    """Start `body(inside)` in a thread; `inside` is set once it got what it waited for."""
    inside = threading.Event()
    thread = threading.Thread(target=body, args=(inside,), daemon=True)
    thread.start()
    return thread, inside


def test_a_pass_waits_while_a_lesson_holds_its_gpu():
    share = GpuShare([H200], jobs=2, free_memory=lambda gpu: None)
    claim = share.claim("day13-shared-memory")

    def one_pass(inside):
        with share.sanitizing(ticket(share, claim.gpu), lambda message: None):
            inside.set()

    thread, inside = in_thread(one_pass)
    assert not inside.wait(QUIET), "a pass started while a lesson held the GPU"
    claim.release()
    assert inside.wait(5)
    thread.join(5)


@pytest.mark.slow
def test_timed_runs_wait_for_the_passes_running_and_hold_back_new_ones():
    share = GpuShare([H200], jobs=4, free_memory=lambda gpu: None)
    done_with_first, done_with_timed = threading.Event(), threading.Event()

    def first_pass(inside):
        with share.sanitizing(ticket(share, H200), lambda message: None):
            inside.set()
            done_with_first.wait(10)

    first, first_in = in_thread(first_pass)
    assert first_in.wait(5)
    claim = share.claim("day14-syncthreads")   # claiming waits for no pass; running does
    gpu = claim.gpu
    said: list[str] = []

    def timed(inside):
        with share.timed(gpu, said.append):
            inside.set()
            done_with_timed.wait(10)

    def second_pass(inside):
        with share.sanitizing(ticket(share, gpu), lambda message: None):
            inside.set()

    timed_thread, timed_in = in_thread(timed)
    second, second_in = in_thread(second_pass)
    assert not timed_in.wait(QUIET), "a timed run started beside a pass"
    assert said == ["waiting for GPU 0: 1 sanitizer pass running"]
    done_with_first.set()
    assert timed_in.wait(5)
    assert not second_in.wait(QUIET), "a pass started beside a timed run"
    done_with_timed.set()
    timed_thread.join(5)
    assert not second_in.wait(QUIET), "a pass started while a lesson still held the GPU"
    claim.release()
    assert second_in.wait(5)
    for thread in (first, second):
        thread.join(5)


def test_passes_at_once_are_bounded_by_jobs_and_by_the_gpus_free_memory():
    assert [pass_slots(free, 16) for free in (None, 143000, 3 * PASS_MEMORY_MIB + 1, 100)] == [16, 16, 3, 1]
    share = GpuShare([H200], jobs=3, free_memory=lambda gpu: 2 * PASS_MEMORY_MIB)
    leave = threading.Event()

    def one_pass(inside):
        with share.sanitizing(ticket(share, H200), lambda message: None):
            inside.set()
            leave.wait(10)

    started = [in_thread(one_pass) for _ in range(3)]
    deadline = time.monotonic() + 5
    while sum(inside.is_set() for _, inside in started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)   # time for a third to come in, were it let
    assert sum(inside.is_set() for _, inside in started) == 2
    leave.set()
    assert all(inside.wait(5) for _, inside in started)
    for thread, _ in started:
        thread.join(5)


def test_free_memory_comes_from_nvidia_smi_without_nvml(fake_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_GPU_FREE_MIB", "81920")
    assert free_memory_mib(H200) == 81920
    monkeypatch.setenv("PATH", "/nonexistent")
    assert free_memory_mib(H200) is None


def h200_with_sanitizer(nvcc_version: str, sanitizer_bin: Path) -> Toolchain:
    """The real nvcc, the stood-in compute-sanitizer and one H200, for calling verify() directly."""
    return Toolchain(nvcc=shutil.which("nvcc"), nvcc_version=nvcc_version, driver_version="580.159.04",
                     sanitizer=str(sanitizer_bin / "compute-sanitizer"), sanitizer_version="2025.3.1.0", gpus=[H200])


def test_passes_wait_for_every_lessons_timed_runs_even_one_still_building_then_run_together(
        make_course, prebuilt, nvcc_version, sanitizer_bin, monkeypatch, tmp_path):
    """Days 13, 14 and 16 run while day 71 is still building; no pass starts until day 71 has run too,
    then the three lessons' memcheck passes run together.

    Day 71's build (its own copy of the stand-in, so not in the cache) is
    held by the runner until the other three have run and half a second
    more, then handed in instead of nvcc. A pass started meanwhile would hold
    back day 71's timed run for as long as it takes (a 6 s racecheck on the
    H200). The passes hold until all three have started.
    """
    late = "day71-matmul-fp16"

    def own_source(manifest: dict) -> None:
        manifest["lessons"][3]["source"] = "standins/replay_late.cpp"

    sanitized = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"]
    made = make_course([*sanitized, late], sanitizers={lesson: {"memcheck": {}} for lesson in sanitized},
                       edit=own_source)
    copy = made.root / "standins" / "replay_late.cpp"
    copy.write_text((made.root / "standins" / "replay.cpp").read_text() + "// built late, by the test's runner\n")
    timed_log, pass_log, gate = tmp_path / "timed.log", tmp_path / "passes.log", tmp_path / "gate"
    monkeypatch.setenv("STANDIN_LOG", str(timed_log))
    monkeypatch.setenv("FAKE_SANITIZER_RUNS", str(pass_log))
    monkeypatch.setenv("FAKE_SANITIZER_GATE", str(gate))
    manifest = made.load()
    toolchain = h200_with_sanitizer(nvcc_version, sanitizer_bin)
    opener = threading.Timer(30, gate.touch)   # should the passes never all start, they still end
    opener.start()
    seen_while_building: list[str] = []

    def count(word: str, log: Path) -> int:
        return len(re.findall(f" {word} ", log.read_text() if log.exists() else ""))

    def open_gate_once_all_started():
        wait_for(lambda: count("start", pass_log) >= 3, "the three passes to start")
        gate.touch()

    def runner(argv, **kwargs):
        if "--resource-usage" in argv and argv[-1] == str(copy):
            wait_for(lambda: count("end", timed_log) >= 3, "the three built lessons to run")
            time.sleep(0.5)   # time enough for a pass to start, were it allowed to
            seen_while_building.append(pass_log.read_text() if pass_log.exists() else "")
            shutil.copy(prebuilt["day13-shared-memory"], argv[argv.index("-o") + 1])
            Path(argv[argv.index("-MF") + 1]).write_text(f"{argv[argv.index('-o') + 1]}: {copy}\n")  # as nvcc -MD
            return CommandResult(argv=[str(a) for a in argv], returncode=0, seconds=0.0)
        return run_command(argv, **kwargs)

    gates = threading.Thread(target=open_gate_once_all_started, daemon=True)
    gates.start()
    try:
        results = verify(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitizer_jobs=4), quiet, runner)
    finally:
        opener.cancel()
        gates.join(5)
    assert [(r.lesson, r.status, [p.tool for p in r.sanitizers], r.reasons) for r in results] == [
        *((lesson, Status.NO_EVIDENCE, ["memcheck"], []) for lesson in sanitized), (late, Status.NO_EVIDENCE, [], [])]
    assert seen_while_building == [""], "a pass started while day 71 was still building"
    timed, passes = standin_runs(timed_log), sanitizer_runs(pass_log)
    assert len(timed) == 4 and len(passes) == 3
    assert {run.visible for run in [*timed, *passes]} == {GPU_UUID}
    # (a) every timed run, day 71's last, came before the first pass
    assert min(p.start for p in passes) >= max(r.end for r in timed)
    # (b) the passes of the three lessons ran together
    assert sorted(run.argument for run in passes) == sorted(str(made.transcript(lesson)) for lesson in sanitized)
    assert all(overlap(a, b) for a, b in itertools.combinations(passes, 2)), passes


def test_a_lesson_that_fails_to_build_holds_back_no_pass(make_course, nvcc_version, sanitizer_bin, prebuilt):
    """A lesson whose build fails still takes its turn (to report the failure): the passes then start."""
    def broken(manifest: dict) -> None:
        manifest["lessons"][1]["source"] = "standins/broken.cu"

    made = make_course(["day13-shared-memory", "day16-tiled-matmul"],
                       sanitizers={"day13-shared-memory": {"memcheck": {}}}, edit=broken)
    (made.root / "standins" / "broken.cu").write_text("int main() {\n    return 0\n}\n")
    manifest = made.load()
    toolchain = h200_with_sanitizer(nvcc_version, sanitizer_bin)
    done: list = []
    worker = threading.Thread(target=lambda: done.extend(verify(manifest, manifest.lessons, toolchain,
                                                                Options(jobs=2))), daemon=True)
    worker.start()
    worker.join(60)
    assert done, "day 13's pass waited for the lesson that failed to build, which never runs"
    day13, day16 = done
    assert (day13.status, [p.tool for p in day13.sanitizers]) == (Status.NO_EVIDENCE, ["memcheck"])
    assert day16.status == Status.FAIL and "nvcc failed" in day16.reasons[0]


# -- builds overlap runs ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_lesson_runs_while_another_is_still_building(make_course, prebuilt, nvcc_version):
    """day 13 is cached; day 16's nvcc (a real one) is held back until day 13 has started to run.

    A pipeline that built everything before running anything would hold day 16's
    build for the 30 s the runner waits, and day 13 would run after it was built.
    """
    def own_source(manifest: dict) -> None:
        manifest["lessons"][0]["source"] = "standins/replay_copy.cpp"

    made = make_course(["day16-tiled-matmul", "day13-shared-memory"], edit=own_source)
    copy = made.root / "standins" / "replay_copy.cpp"
    copy.write_text((made.root / "standins" / "replay.cpp").read_text() + "// a copy, so that it is built\n")
    manifest = made.load()
    toolchain = Toolchain(nvcc=shutil.which("nvcc"), nvcc_version=nvcc_version,
                          gpus=[Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")])
    events: list[tuple[str, str, str]] = []
    day13_running = threading.Event()

    def emit(event):
        events.append((event.lesson, event.stage, event.detail))
        if (event.lesson, event.stage) == ("day13-shared-memory", "running"):
            day13_running.set()

    def runner(argv, **kwargs):
        if "--resource-usage" in argv and argv[-1] == str(copy):
            day13_running.wait(timeout=30)
        return run_command(argv, **kwargs)

    results = verify(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitize=False), emit, runner)
    assert [(r.lesson, r.status) for r in results] == [("day16-tiled-matmul", Status.NO_EVIDENCE),
                                                       ("day13-shared-memory", Status.NO_EVIDENCE)]
    day13 = [(stage, detail) for lesson, stage, detail in events if lesson == "day13-shared-memory"]
    assert day13 == [("building", ""), ("built", "sm_90, cached"), ("running", "GPU 0"), ("comparing", ""),
                     ("done", "NO_EVIDENCE")]
    [day16_built] = [e for e in events if e[:2] == ("day16-tiled-matmul", "built")]
    assert re.fullmatch(r"sm_90, \d+\.\d s", day16_built[2]), day16_built   # built now, not cached
    assert events.index(("day13-shared-memory", "running", "GPU 0")) < events.index(day16_built)


def _two_lesson_run(make_course, nvcc_version, runner_for_lesson):
    """verify day 16 and day 13 (stand-ins, cached) on two stood-in GPUs with a runner of the test's."""
    made = make_course(["day16-tiled-matmul", "day13-shared-memory"])
    manifest = made.load()
    toolchain = Toolchain(nvcc=shutil.which("nvcc"), nvcc_version=nvcc_version,
                          gpus=[Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0"),
                                Gpu(index=1, name="NVIDIA H200", uuid=SECOND_GPU_UUID, compute_capability="9.0")])
    events: list[tuple[str, str]] = []
    day16_done = threading.Event()

    def emit(event):
        events.append((event.lesson, event.stage))
        if (event.lesson, event.stage) == ("day16-tiled-matmul", "done"):
            day16_done.set()

    def runner(argv, **kwargs):
        for lesson in ("day16-tiled-matmul", "day13-shared-memory"):   # one binary: told apart by what they replay
            if any(str(arg).endswith(f"/{lesson}.txt") for arg in argv[1:]):
                return runner_for_lesson(lesson, day16_done, argv, kwargs)
        return run_command(argv, **kwargs)

    return manifest, toolchain, emit, runner, events


def test_a_turn_that_raises_ends_that_lesson_as_crash_and_the_others_stand(make_course, prebuilt, nvcc_version):
    def runner_for_lesson(lesson, day16_done, argv, kwargs):
        if lesson == "day13-shared-memory":
            raise RuntimeError("boom")
        return run_command(argv, **kwargs)

    manifest, toolchain, emit, runner, _ = _two_lesson_run(make_course, nvcc_version, runner_for_lesson)
    results = verify(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitize=False), emit, runner)
    assert [(r.lesson, r.status, r.reasons) for r in results] == [
        ("day16-tiled-matmul", Status.NO_EVIDENCE, []),
        ("day13-shared-memory", Status.CRASH, ["coursectl failed on this lesson: RuntimeError('boom')"])]


def test_the_scheduler_walks_the_stages_in_order_and_settles_once_after_the_last(make_course, prebuilt,
                                                                                 nvcc_version, monkeypatch):
    """Each stage is handed the result the stage before returned (the first, one with the lesson's notes);
    what the last returns is settled, once, as the workflow says (here: compared=False)."""
    from orchestrator.workflows import scheduler

    settled, walked = [], []
    settle = scheduler.settle
    monkeypatch.setattr(scheduler, "settle", lambda result, compared=True: (
        settled.append((result.lesson, list(result.reasons), compared)), settle(result, compared=compared))[1])

    def first(turn, result):
        walked.append((turn.lesson.id, "first", list(result.notes)))
        return LessonResult(lesson=result.lesson, gpu=result.gpu, arch=result.arch, notes=["replaced"])

    def last(turn, result):
        walked.append((turn.lesson.id, "last", list(result.notes)))
        result.reasons.append("found by the last stage")
        return result

    manifest, toolchain, emit, runner, _ = _two_lesson_run(make_course, nvcc_version, lambda *args: None)
    walk = scheduler.Scheduler(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitize=False), (first, last),
                               emit, runner, compared=False, notes={"day13-shared-memory": ["began with"]})
    results = walk.run()
    assert [(r.lesson, r.status, r.notes, r.reasons) for r in results] == [
        (lesson, Status.FAIL, ["replaced"], ["found by the last stage"])
        for lesson in ("day16-tiled-matmul", "day13-shared-memory")]
    assert sorted(walked) == [("day13-shared-memory", "first", ["began with"]),
                              ("day13-shared-memory", "last", ["replaced"]),
                              ("day16-tiled-matmul", "first", []), ("day16-tiled-matmul", "last", ["replaced"])]
    assert sorted(settled) == [("day13-shared-memory", ["found by the last stage"], False),
                               ("day16-tiled-matmul", ["found by the last stage"], False)]
    assert sorted(walk.turns) == ["day13-shared-memory", "day16-tiled-matmul"]


def test_lessons_run_with_the_longer_switch_interval_and_the_old_one_comes_back(make_course, prebuilt, nvcc_version):
    """While the scheduler runs lessons, a thread runs Python SWITCH_INTERVAL before another waiting gets it;
    after, the interval is the process's own again, a turn that raised or not."""
    import sys
    from orchestrator.workflows import scheduler

    seen = []

    def runner_for_lesson(lesson, day16_done, argv, kwargs):
        seen.append(sys.getswitchinterval())
        if lesson == "day13-shared-memory":
            raise RuntimeError("boom")
        return run_command(argv, **kwargs)

    before = sys.getswitchinterval()
    assert before < scheduler.SWITCH_INTERVAL   # Python's default, 0.005
    manifest, toolchain, emit, runner, _ = _two_lesson_run(make_course, nvcc_version, runner_for_lesson)
    verify(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitize=False), emit, runner)
    assert seen == [scheduler.SWITCH_INTERVAL] * 2
    assert sys.getswitchinterval() == before


def test_ctrl_c_keeps_what_finished_and_skips_the_rest(make_course, prebuilt, nvcc_version, ctrl_c):
    """Day 13 waits until day 16 is done, then Ctrl-C comes while day 13 runs."""
    from orchestrator.errors import Interrupted

    def runner_for_lesson(lesson, day16_done, argv, kwargs):
        if lesson == "day13-shared-memory":
            assert day16_done.wait(timeout=30)
            os.kill(os.getpid(), signal.SIGINT)
            return run_command(["sleep", "30"], **kwargs)
        return run_command(argv, **kwargs)

    manifest, toolchain, emit, runner, events = _two_lesson_run(make_course, nvcc_version, runner_for_lesson)
    with pytest.raises(Interrupted) as caught:
        verify(manifest, manifest.lessons, toolchain, Options(jobs=2, sanitize=False), emit, runner)
    assert [(r.lesson, r.status, r.reasons) for r in caught.value.results] == [
        ("day16-tiled-matmul", Status.NO_EVIDENCE, []),
        ("day13-shared-memory", Status.SKIPPED, ["interrupted before it finished"])]
    assert ("day13-shared-memory", "done") not in events   # a stopped turn shows nothing more


# -- progress output -------------------------------------------------------------------------------
FINISHED = re.compile(r"^(?P<status>[A-Z_]+) +(?P<lesson>[a-z0-9-]+)  (?P<gpu>[a-z0-9-]+)  \d+\.\d s(  (?P<why>.+))?$")


def finished(text: str) -> list[tuple[str, str, str, str | None]]:
    """The line each lesson prints as it finishes: (status, lesson, GPU, why)."""
    return [(m["status"], m["lesson"], m["gpu"], m["why"]) for m in map(FINISHED.match, lines(text)) if m]


def test_by_default_each_lesson_is_one_line_as_it_finishes_then_the_summary_and_the_tally(course, fake_gpu,
                                                                                          prebuilt):
    made = course(["day13-shared-memory", "day16-tiled-matmul"])
    assert coursectl("record", "day16-tiled-matmul", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.100")
    result = coursectl("verify", "--all")
    assert (result.exit_code, result.stderr) == (1, "")
    assert "\x1b" not in result.stdout   # no colours, no cursor movement without a terminal
    assert progress(result.stdout) == []   # stages only with -v
    assert sorted(finished(result.stdout)) == [
        ("FAIL", "day16-tiled-matmul", GPU_SLUG, "1 field(s) differ from the nvidia-h200 evidence:"),
        ("NO_EVIDENCE", "day13-shared-memory", GPU_SLUG,
         "no evidence for nvidia-h200 yet: its output was parsed and its claims checked, but there was nothing to "
         "compare it with; run `coursectl record day13-shared-memory` on this GPU")]
    out = lines(result.stdout)
    # A failure shows its moved fields, and only those; a lesson that did not fail shows no table.
    title = "day16-tiled-matmul: 31 fields against nvidia-h200 evidence (30 same, 1 moved)"
    assert table(result.stdout, title) == [["field", "rule", "evidence", "now", "ratio", "result"],
                                           ["cases[256x256x256/naive].ms", "tolerance ±25% + ±0.003", "0.025", "0.1",
                                            "4.000", "moved"]]
    assert not any(line.endswith(": claims") for line in out)
    assert out.index(title) < out.index("verify")
    assert tally_line(result.stdout) == "0 passed, 1 without evidence, 1 failed in T s"


def test_v_shows_every_stage_and_the_claims(course, fake_gpu, prebuilt):
    course(["day13-shared-memory", "day16-tiled-matmul"])
    result = coursectl("verify", "--all", "-v")
    assert (result.exit_code, result.stderr) == (0, "")
    out = lines(result.stdout)
    assert re.fullmatch(r"\[   \d\.\d s\] day13-shared-memory: building", out[0]), out[0]
    for lesson in ("day13-shared-memory", "day16-tiled-matmul"):
        assert stages(result.stdout, lesson) == ["building", "built (sm_90, cached)", "running (GPU 0)", "comparing",
                                                 "done (NO_EVIDENCE)"]
    # in the order they finish: one lesson's judging overlaps the next one's run
    assert sorted(f[:2] for f in finished(result.stdout)) == [("NO_EVIDENCE", "day13-shared-memory"),
                                                              ("NO_EVIDENCE", "day16-tiled-matmul")]
    assert "day13-shared-memory: claims" in out and "day16-tiled-matmul: claims" in out
    assert not any(" fields against " in line for line in out)   # fields only with -vv


def test_a_failure_shows_only_its_failed_claims(course, fake_gpu, prebuilt):
    made = course(["day13-shared-memory"])
    edit(made.transcript("day13-shared-memory"), "cudaFuncSetAttribute:         no error",
         "cudaFuncSetAttribute:         invalid argument")
    result = coursectl("verify", "--all")
    assert result.exit_code == 1
    assert table(result.stdout, "day13-shared-memory: claims") == [["claim", "kind", "checked", "held"],
                                                                  ["optin-lifts-the-cap", "gate", "1", "NO"]]


def test_quiet_prints_no_progress(course, fake_gpu, prebuilt):
    course(["day13-shared-memory", "day16-tiled-matmul"])
    result = coursectl("verify", "--all", "--quiet")
    assert (result.exit_code, result.stderr) == (0, "")
    assert progress(result.stdout) == [] and finished(result.stdout) == []
    assert lines(result.stdout)[0] == "verify"
    assert after(result.stdout, "verify") == [unverified("day13-shared-memory"), unverified("day16-tiled-matmul")]
    assert tally_line(result.stdout) == "0 passed, 2 without evidence, 0 failed in T s"


def verbose_commands(made, prebuilt) -> list[str]:
    """What -vv prints for day 16 in a course folder whose name holds a space."""
    binary, source, transcript = (prebuilt["day16-tiled-matmul"], made.root / "standins" / "replay.cpp",
                                  made.transcript("day16-tiled-matmul"))
    return [f"day16-tiled-matmul: (cached) {shutil.which('nvcc')} -std=c++17 -O3 -arch=sm_90 --resource-usage "
            f"-MD -MF {binary}.d -o {binary} '{source}'",
            f"day16-tiled-matmul: {binary} '{transcript}'"]


def test_vv_prints_each_command_shell_quoted_and_whole_on_one_line(tmp_path, monkeypatch, fake_gpu, prebuilt):
    made = write_course(tmp_path / "my course", ["day16-tiled-matmul"])
    monkeypatch.chdir(made.root)
    result = coursectl("verify", "--all", "-vv", "--quiet")
    assert (result.exit_code, result.stderr) == (0, "")
    printed = lines(result.stdout)[:3]
    assert printed == [*verbose_commands(made, prebuilt), "verify"]
    assert [shlex.split(line.split(": ", 1)[1].removeprefix("(cached) ")) for line in printed[:2]] == [
        [shutil.which("nvcc"), "-std=c++17", "-O3", "-arch=sm_90", "--resource-usage", "-MD", "-MF",
         f"{prebuilt['day16-tiled-matmul']}.d", "-o", str(prebuilt["day16-tiled-matmul"]),
         str(made.root / "standins" / "replay.cpp")],
        [str(prebuilt["day16-tiled-matmul"]), str(made.transcript("day16-tiled-matmul"))]]


def test_the_json_report_names_no_path_of_this_machine(tmp_path, monkeypatch, fake_gpu, prebuilt):
    made = write_course(tmp_path / "my course", ["day16-tiled-matmul"])
    monkeypatch.chdir(made.root)
    report = tmp_path / "report.json"
    assert coursectl("verify", "--all", "--quiet", "--json", report).exit_code == 0
    text = report.read_text()
    assert str(tmp_path) not in text and shutil.which("nvcc") not in text
    [result] = json.loads(text)["results"]
    cached = "$COURSECTL_CACHE/" + prebuilt["day16-tiled-matmul"].relative_to(os.environ["COURSECTL_CACHE"]).as_posix()
    assert result["builds"][0]["command"] == ["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "--resource-usage",
                                              "-MD", "-MF", cached + ".d", "-o", cached, "./standins/replay.cpp"]
    assert result["run"]["command"] == [cached, "./" + made.transcript("day16-tiled-matmul").relative_to(
        made.root).as_posix()]


def test_a_summary_wider_than_the_terminal_is_laid_out_whole(course, fake_gpu, prebuilt):
    """At 60 columns (the width this test pins) the row read `day16-tiled-matmul │ NO_EVIDENCE │ n… │ - │ 0… │`:
    a table whose words do not fit is printed at its natural width, uncropped, for the terminal to fold."""
    course(["day16-tiled-matmul"])
    result = coursectl("verify", "--all", "--quiet", columns=60)
    assert result.exit_code == 0
    row = table_lines(result.stdout, "verify")[3]
    assert [cell.strip() for cell in row.split("│")][:4] == ["day16-tiled-matmul", "NO_EVIDENCE", GPU_SLUG, "-"]
    assert "…" not in result.stdout


def table_lines(text: str, title: str) -> list[str]:
    out = lines(text)
    start = out.index(title)
    end = start + 3
    while end < len(out) and "│" in out[end]:
        end += 1
    return out[start:end]


# -- shards ----------------------------------------------------------------------------------------
def test_three_shards_take_every_lesson_once(course, fake_gpu, prebuilt, tmp_path):
    made = course(FOUR)
    shards = {}
    for k in (1, 2, 3):
        report = tmp_path / f"{k}.json"
        result = coursectl("verify", "--all", "-q", "--shard", f"{k}/3", "--json", report)
        assert (result.exit_code, result.stderr) == (0, "")
        shards[k] = [r["lesson"] for r in json.loads(report.read_text())["results"]]
    # By sorted id, lesson i goes to shard i % 3 + 1.
    assert shards == {1: ["day13-shared-memory", "day71-matmul-fp16"], 2: ["day14-syncthreads"],
                      3: ["day16-tiled-matmul"]}

    # The same shares whatever the order of lessons.yaml.
    manifest = made.load()
    backwards = list(reversed(manifest.lessons))
    for k, expected in shards.items():
        assert [lesson.id for lesson in shard_lessons(backwards, f"{k}/3")] == list(reversed(expected))

    merged = coursectl("report", "merge", *(tmp_path / f"{k}.json" for k in (1, 2, 3)))
    assert (merged.exit_code, merged.stderr) == (0, "")
    assert sorted(row[0] for row in table(merged.stdout, "merged 3 reports")[1:]) == FOUR
