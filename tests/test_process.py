"""orchestrator.process.run_command against stand-in lessons that exit, fail, hang, crash and flood."""

from __future__ import annotations

import _thread
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SEEDS, is_gone
from orchestrator.process import (CHILD_GRACE, DEFAULT_OUTPUT_LIMIT, LEFT_A_CHILD, LINE_LIMIT, CommandResult,
                                  clip_line, interrupts_held, run_command, tail_lines)

GPU_LINE = b"GPU: NVIDIA H200 (compute capability 9.0)\n"
CUDA_ERROR = (b"CUDA error at shared_memory.cu:142: cudaMalloc(&d_in, bytes): "
              b"out of memory (cudaErrorMemoryAllocation)\n")
HANG_OUTPUT = b"GPU: NVIDIA H200 (compute capability 9.0)\nMatrix: 2003 x 3001 floats, 22.9 MiB"


def test_exit_status_and_stdout(standin):
    seed = SEEDS / "syncthreads.txt"
    result = run_command([standin["replay"], seed, "3"], timeout=30)
    assert result.argv == [str(standin["replay"]), str(seed), "3"]
    assert (result.returncode, result.signal, result.timed_out, result.ok) == (3, None, False, False)
    assert result.stdout == seed.read_bytes()
    assert result.stderr == b""
    assert (result.stdout_truncated, result.stderr_truncated) == (False, False)


def test_exit_zero_is_ok(standin):
    seed = SEEDS / "shared_memory.txt"
    result = run_command([standin["replay"], seed], timeout=30)
    assert (result.returncode, result.signal, result.timed_out, result.ok) == (0, None, False, True)
    assert result.stdout == seed.read_bytes()


def test_stdout_and_stderr_are_kept_apart(standin):
    result = run_command([standin["fail"]], timeout=30)
    assert (result.returncode, result.ok) == (1, False)
    assert result.stdout == GPU_LINE
    assert result.stderr == CUDA_ERROR


def test_environment_is_added_to_the_callers(monkeypatch):
    monkeypatch.setenv("COURSECTL_TEST_INHERITED", "kept")
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['COURSECTL_TEST_INHERITED'])"
    result = run_command([sys.executable, "-c", code], timeout=30,
                         env={"CUDA_VISIBLE_DEVICES": "GPU-00000000-test"})
    assert result.stdout == b"GPU-00000000-test kept\n"


def test_cwd(tmp_path):
    result = run_command([sys.executable, "-c", "import os; print(os.getcwd())"], timeout=30, cwd=tmp_path)
    assert result.stdout == f"{tmp_path.resolve()}\n".encode()


def test_no_shell_arguments_arrive_intact(standin, tmp_path):
    """Spaces, quotes and `$(...)` reach the program as they are; nothing is run by a shell."""
    awkward = tmp_path / "a b $(touch X) 'single' \"double\" `touch Y`; | & *.txt"
    awkward.write_bytes(b"replayed\n")
    result = run_command([standin["replay"], awkward], timeout=30, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"replayed\n", b"")

    args = ["$(touch X)", "a b", "it's \"quoted\"", "`touch Y`", ";", "|", "*"]
    echo = [sys.executable, "-c", "import sys; print(repr(sys.argv[1:]))"]
    result = run_command([*echo, *args], timeout=30, cwd=tmp_path)
    assert result.stdout.decode() == repr(args) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [awkward.name]


def test_command_is_shell_quoted_for_pasting():
    argv = ["nvcc", '-DGREETING="a b $(touch X)"', "-o", "out dir/bin", "x.cu"]
    result = CommandResult(argv=argv, returncode=0)
    assert result.command == """nvcc '-DGREETING="a b $(touch X)"' -o 'out dir/bin' x.cu"""
    assert shlex.split(result.command) == argv


@pytest.mark.slow
def test_timeout_kills_the_whole_group_and_keeps_partial_output(standin, tmp_path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    result = run_command([standin["hang"], pid_file], timeout=0.5)
    elapsed = time.monotonic() - started
    child = int(pid_file.read_text())
    assert (result.timed_out, result.returncode, result.signal, result.ok) == (True, None, signal.SIGTERM, False)
    assert result.stdout == HANG_OUTPUT
    assert result.stderr == f"child {child}\n".encode()
    assert 0.5 <= result.seconds <= elapsed < 5
    assert is_gone(child), f"the forked child {child} outlived the timeout"


def interrupt_run(hang: Path, pid_file: Path) -> float:
    """Run the hang stand-in and press Ctrl-C once it has started; return the seconds it took."""
    def interrupt_when_started():
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_command([hang, pid_file], timeout=30)
    return time.monotonic() - started


def test_ctrl_c_stops_the_group_and_is_raised_again(standin, tmp_path, ctrl_c):
    pid_file = tmp_path / "child.pid"
    assert interrupt_run(standin["hang"], pid_file) < 10
    assert is_gone(int(pid_file.read_text()))


def test_ctrl_c_forgets_the_stopped_child(standin, tmp_path, ctrl_c):
    from orchestrator import process

    interrupt_run(standin["hang"], tmp_path / "child.pid")
    assert process._LIVE == set()


def test_signal_is_reported(standin):
    result = run_command([standin["crash"]], timeout=30)
    assert (result.returncode, result.signal, result.timed_out, result.ok) == (-6, signal.SIGABRT, False, False)
    assert result.stdout == GPU_LINE


@pytest.mark.parametrize("limit", [1 << 20, DEFAULT_OUTPUT_LIMIT])
def test_output_is_bounded(standin, limit):
    result = run_command([standin["flood"]], timeout=60, output_limit=limit)
    line = b"x" * 63 + b"\n"
    assert (result.returncode, result.stdout_truncated, result.stderr_truncated) == (0, True, False)
    assert len(result.stdout) == limit
    assert result.stdout == line * (limit // 64)


def test_output_under_the_limit_is_not_marked_cut(standin):
    seed = SEEDS / "shared_memory.txt"
    size = len(seed.read_bytes())
    result = run_command([standin["replay"], seed], timeout=30, output_limit=size)
    assert (result.stdout, result.stdout_truncated) == (seed.read_bytes(), False)


def test_garbage_bytes_are_kept_as_bytes(standin):
    result = run_command([standin["garbage"]], timeout=30)
    assert result.returncode == 0
    assert result.stdout == (GPU_LINE + bytes(range(256))
                             + b"\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\xbc \xff\xfe\n")


# -- describe(): the one shape of a failed command -------------------------------------
def test_describe_exit_status_with_both_tails(standin):
    result = run_command([standin["fail"]], timeout=30)
    assert result.describe() == (
        f"$ {standin['fail']}\n"
        "exit status 1\n"
        "stdout (last lines):\n"
        "GPU: NVIDIA H200 (compute capability 9.0)\n"
        "stderr (last lines):\n"
        "CUDA error at shared_memory.cu:142: cudaMalloc(&d_in, bytes): "
        "out of memory (cudaErrorMemoryAllocation)")


def test_describe_signal(standin):
    result = run_command([standin["crash"]], timeout=30)
    assert result.describe() == (f"$ {standin['crash']}\n"
                                 "killed by signal 6 (SIGABRT)\n"
                                 "stdout (last lines):\n"
                                 "GPU: NVIDIA H200 (compute capability 9.0)")


def test_describe_timeout(standin):
    result = run_command([standin["hang"]], timeout=0.3)
    child = result.stderr.decode().split()[1]
    assert result.describe() == (f"$ {standin['hang']}\n"
                                 "timed out\n"
                                 "stdout (last lines):\n"
                                 "GPU: NVIDIA H200 (compute capability 9.0)\n"
                                 "Matrix: 2003 x 3001 floats, 22.9 MiB\n"
                                 "stderr (last lines):\n"
                                 f"child {child}")


def test_describe_keeps_the_last_twelve_lines_and_quotes_the_command(standin, tmp_path):
    seed = tmp_path / "syncthreads transcript.txt"
    seed.write_bytes((SEEDS / "syncthreads.txt").read_bytes())
    result = run_command([standin["replay"], seed, "2"], timeout=30)
    lines = (SEEDS / "syncthreads.txt").read_text().rstrip("\n").splitlines()
    assert result.describe() == "\n".join([
        f"$ {standin['replay']} '{seed}' 2",
        "exit status 2",
        "stdout (last lines):",
        *lines[-12:]])


def test_describe_without_output():
    result = CommandResult(argv=["true"], returncode=0)
    assert result.describe() == "$ true\nexit status 0"


def test_tail_lines_replaces_bytes_that_are_not_utf8():
    assert tail_lines(b"one\ntwo\xff\nthree\n", count=2) == "two\ufffd\nthree"


# -- quoting a program's lines: one helper cuts them -----------------------------------
def test_clip_line_keeps_a_short_line_whole():
    assert clip_line("x" * 200) == "x" * 200
    assert clip_line("it's", quote=True) == '"it\'s"'


def test_a_programs_control_characters_are_quoted_as_escapes_not_sent_to_the_terminal():
    # A lesson printing a colour, a title or a bell: the tail of a failure shows the escapes as text.
    assert clip_line("\x1b[31mRED\x1b[0m\x07\tok\x9b") == "\\x1b[31mRED\\x1b[0m\\x07\tok\\x9b"
    assert tail_lines(b"fine\n\x1b]0;title\x07\n") == "fine\n\\x1b]0;title\\x07"


def test_clip_line_cuts_a_long_line_and_says_how_long_it_was():
    assert LINE_LIMIT == 200
    assert clip_line("x" * 16_777_216) == "x" * 200 + "… (16,777,216 characters)"
    assert clip_line("y" * 201, quote=True) == "'" + "y" * 200 + "'… (201 characters)"


def test_clip_line_keeps_a_literal_of_escapes_within_the_limit():
    quoted = clip_line("\x00" * 300, quote=True)
    assert quoted == "'" + "\\x00" * 49 + "'… (300 characters)"
    assert len(quoted.split("…")[0]) <= LINE_LIMIT + 2


@pytest.mark.parametrize("data, tail", [
    (b"\n" * (16 << 20), ""),
    (b"\r" * (16 << 20), "\n" * 11),
    (b"x" * (16 << 20), "x" * 200 + "… (16,777,216 characters)"),
    (b"first\n" + b"z" * (16 << 20) + b"\nlast\n", "first\n" + "z" * 200 + "… (16,777,216 characters)\nlast"),
], ids=["newlines", "returns", "one-line", "long-middle-line"])
def test_tail_lines_of_16_mib_are_short(data, tail):
    assert tail_lines(data) == tail


def test_tail_lines_agrees_with_splitting_the_whole_output():
    lines = [b"a" * n + sep for n, sep in zip(range(0, 40_000, 997), [b"\n", b"\r\n", b"\r", b"\x0b"] * 20)]
    data = b"".join(lines) + b"\n\n"
    whole = data.decode().rstrip("\n").splitlines()
    for count in (1, 5, 12, 40):
        assert tail_lines(data, count) == "\n".join(clip_line(line) for line in whole[-count:])


def test_a_failed_command_is_described_with_short_lines():
    result = CommandResult(argv=["./lesson"], returncode=1, stdout=b"x" * (16 << 20), stderr=b"\r" * (16 << 20))
    assert result.describe() == ("$ ./lesson\nexit status 1\nstdout (last lines):\n"
                                 + "x" * 200 + "… (16,777,216 characters)\nstderr (last lines):\n" + "\n" * 11)


# -- a program that exits and leaves a child holding its output --------------------------
LEAVES_A_CHILD = """
import subprocess, sys
late = "import time; time.sleep(0.2); print('printed by the child', flush=True); time.sleep(60)"
child = subprocess.Popen([sys.executable, "-c", late])
print(child.pid, flush=True)
"""


def test_a_child_left_holding_the_output_is_stopped_after_a_short_grace():
    """The program's own exit ends the run: its child gets CHILD_GRACE, then the group is stopped, output kept."""
    started = time.monotonic()
    result = run_command([sys.executable, "-c", LEAVES_A_CHILD], timeout=30)
    elapsed = time.monotonic() - started
    child, said = result.stdout.decode().splitlines()
    assert (result.returncode, result.ok, result.timed_out, said) == (0, True, False, "printed by the child")
    assert result.notes == [LEFT_A_CHILD] == ["left a child process running; stopped"]
    assert CHILD_GRACE == 0.5
    assert elapsed < 5, f"{elapsed:.1f} s: the run waited for the child"   # it waited 10 s before
    assert is_gone(int(child))


def test_a_child_that_let_go_of_the_output_is_not_waited_for(tmp_path):
    detached = ("import subprocess, sys; child = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, "
                "stderr=subprocess.DEVNULL); print(child.pid)")
    result = run_command([sys.executable, "-c", detached], timeout=30)
    os.kill(int(result.stdout), signal.SIGKILL)
    assert (result.returncode, result.notes) == (0, [])


def test_readers_slower_than_the_grace_are_not_taken_for_a_child(standin, monkeypatch):
    """On a busy machine the readers may finish after the grace: with no process of the group left, no note.
    Reader threads are the way without a pidfd (with one, the pipes are read in the waiting thread)."""
    from orchestrator import process

    monkeypatch.delattr(os, "pidfd_open", raising=False)

    drain = process._drain

    def slow_drain(*args):
        drain(*args)
        time.sleep(2 * process.CHILD_GRACE)   # a reader thread the scheduler leaves waiting

    monkeypatch.setattr(process, "_drain", slow_drain)
    monkeypatch.setattr(process, "CHILD_GRACE", 0.1)
    seed = SEEDS / "shared_memory.txt"
    result = run_command([standin["replay"], seed], timeout=30)
    assert (result.returncode, result.notes, result.stdout) == (0, [], seed.read_bytes())


def test_a_program_without_children_has_no_note(standin):
    result = run_command([standin["replay"], SEEDS / "shared_memory.txt"], timeout=30)
    assert (result.returncode, result.notes) == (0, [])


def recorded_waits(monkeypatch) -> list:
    """Every timeout that Popen.wait is called with, in this test."""
    waits = []
    wait = subprocess.Popen.wait

    def recording(self, timeout=None):
        waits.append(timeout)
        return wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", recording)
    return waits


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux)")
def test_the_wait_for_a_program_is_on_its_pidfd_not_a_polling_wait(standin, monkeypatch):
    """Popen.wait(timeout) sleeps up to 50 ms between looks; run_command waits on a pidfd and reaps at once."""
    waits = recorded_waits(monkeypatch)
    seed = SEEDS / "shared_memory.txt"
    result = run_command([standin["replay"], seed], timeout=30)
    assert (result.returncode, result.stdout) == (0, seed.read_bytes())
    assert waits == [None]


@pytest.mark.parametrize("pidfd", ["absent", "refused"])
def test_without_a_pidfd_the_wait_is_popens_and_a_timeout_still_kills(standin, monkeypatch, tmp_path, pidfd):
    if pidfd == "absent":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    else:
        def refuse(pid):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "pidfd_open", refuse)
    waits = recorded_waits(monkeypatch)
    seed = SEEDS / "shared_memory.txt"
    result = run_command([standin["replay"], seed], timeout=30)
    assert (result.returncode, result.stdout, waits) == (0, seed.read_bytes(), [30])
    pid_file = tmp_path / "child.pid"
    result = run_command([standin["hang"], pid_file], timeout=0.5)
    assert (result.timed_out, result.returncode, result.stdout) == (True, None, HANG_OUTPUT)
    assert is_gone(int(pid_file.read_text()))


def test_a_ctrl_c_while_interrupts_are_held_is_raised_once_the_block_ends():
    handler = signal.getsignal(signal.SIGINT)
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)   # the handler runs here, and only holds the signal
            steps.append("the block went on")
    assert steps == ["the block went on"]
    assert signal.getsignal(signal.SIGINT) is handler


def test_a_sigterm_held_goes_to_the_handler_that_was_there_and_a_quiet_block_raises_nothing():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with interrupts_held():
            pass
        assert seen == []
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_interrupts_held_outside_the_main_thread_holds_nothing_and_sets_no_handler():
    found = []

    def other():
        with interrupts_held():
            found.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert found == [signal.getsignal(signal.SIGINT)]


def _counted_polls(monkeypatch) -> list[int]:
    """Each poll of a run's wait, as the number of the descriptors it found ready."""
    import select as select_module

    from orchestrator import process

    made = select_module.poll
    polls: list[int] = []

    class Counted:
        def __init__(self):
            self.poller = made()
            self.register, self.unregister = self.poller.register, self.poller.unregister

        def poll(self, *timeout):
            ready = self.poller.poll(*timeout)
            polls.append(len(ready))
            return ready

    monkeypatch.setattr(process.select, "poll", Counted)
    return polls


SLEEPER = [sys.executable, "-c", "import sys, time; print('started', flush=True); time.sleep(0.6); print('done')"]


def test_a_wait_in_a_worker_wakes_for_the_program_alone_and_in_the_main_thread_to_look_for_an_interrupt(
        monkeypatch):
    """The main thread looks every WAKE seconds (an interrupt_main is seen by no system call); a worker thread
    is woken only by what the program does: its output, the end of its pipes, its exit."""
    polls = _counted_polls(monkeypatch)
    done: list[CommandResult] = []
    worker = threading.Thread(target=lambda: done.append(run_command(SLEEPER, timeout=30)))
    worker.start()
    worker.join()
    assert done[0].stdout == b"started\ndone\n" and done[0].ok
    assert polls and 0 not in polls, polls   # before: a look every 0.1 s, 6 that found nothing
    polls.clear()
    assert run_command(SLEEPER, timeout=30).stdout == b"started\ndone\n"
    assert polls.count(0) >= 3, f"the main thread looked {polls.count(0)} times in 0.6 s: {polls}"


def test_a_pipe_is_read_on_to_its_end_in_the_wake_that_finds_its_output():
    """What is in a pipe and its end, where the writer has closed it, take one read (one wake of the wait), and the
    limit keeps only its first bytes while the rest is counted."""
    from orchestrator.process import _Pipe

    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.write(write_end, b"x" * 1000)
    pipe = _Pipe(os.fdopen(read_end, "rb", buffering=0))
    assert pipe.read(limit=300) is True, "the writer has not closed it: more may come"
    os.write(write_end, b"y" * 500)
    os.close(write_end)
    assert pipe.read(limit=300) is False, "its last output and its end, in one read"
    assert (b"".join(pipe.chunks), pipe.total) == (b"x" * 300, 1500)
    pipe.stream.close()


def test_every_program_reads_the_null_device_opened_once_for_all(monkeypatch):
    from orchestrator import process

    process.run_command([sys.executable, "-c", "pass"], timeout=30)   # opened by now, if it ever is
    opened: list = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    reads = [sys.executable, "-c", "import os, sys; print(repr(sys.stdin.read()), os.path.samefile('/dev/stdin', "
                                   "os.devnull), sys.stdin.isatty())"]
    for _ in range(3):
        assert process.run_command(reads, timeout=30).stdout == b"'' True False\n"
    assert os.devnull not in opened, f"opened again for a run: {opened}"
