"""The main thread's wait for futures (workflows/waiting.py): no timeout, yet Ctrl-C and SIGTERM stop it at once,
whichever thread the signal lands on."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future

import pytest

from conftest import coursectl, is_gone, wait_for
from orchestrator.workflows.waiting import completed, first_done


@pytest.fixture
def sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt here, as coursectl's handler makes it."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    yield
    signal.signal(signal.SIGTERM, previous)


def signal_later(signum: int, *, from_a_worker: bool, after: float = 0.2) -> threading.Thread:
    """Send `signum` to this process, or to a thread of its own (pthread_kill), `after` seconds from now."""
    def send():
        time.sleep(after)
        if from_a_worker:
            signal.pthread_kill(threading.get_ident(), signum)   # this thread takes it, not the main one
        else:
            os.kill(os.getpid(), signum)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("from_a_worker", [False, True], ids=["main-thread", "worker-thread"])
def test_a_signal_ends_a_wait_for_a_future_that_never_ends_at_once(signum, from_a_worker, ctrl_c, sigterm_interrupts):
    never = Future()
    started = time.monotonic()
    sender = signal_later(signum, from_a_worker=from_a_worker)
    with pytest.raises(KeyboardInterrupt):
        first_done({never})
    assert time.monotonic() - started < 2, "the wait outlived the signal"
    sender.join(5)
    assert signal.set_wakeup_fd(-1) == -1, "the wait left its wake-up pipe as the signals' wake-up fd"


def test_the_wait_wakes_for_the_first_future_to_end_and_gives_them_in_the_order_they_end():
    first, second, never = Future(), Future(), Future()

    def finish():
        time.sleep(0.1)
        second.set_result(2)
        time.sleep(0.1)
        first.set_result(1)

    threading.Thread(target=finish, daemon=True).start()
    assert first_done({first, second, never}) == {second}
    ended = completed([first, second])
    assert [future.result() for future in ended] == [2, 1]
    assert first_done({first, never}) == {first}   # done already: no wait


def test_a_future_that_ends_after_the_wait_writes_to_no_file_left_behind(tmp_path):
    """The pipe is closed once the wait is over; a later end of another future it watched writes nothing,
    into whatever file took the pipe's descriptor since."""
    soon, later = Future(), Future()
    threading.Timer(0.05, soon.set_result, args=(None,)).start()
    assert first_done({soon, later}) == {soon}     # its callback is left on `later`
    path = tmp_path / "reused"
    with open(path, "wb"):                         # likely on the descriptor the pipe had
        later.set_result(None)
    assert path.read_bytes() == b""


def test_outside_the_main_thread_the_wait_is_a_plain_one():
    future, got = Future(), []
    thread = threading.Thread(target=lambda: got.append(first_done({future})), daemon=True)
    thread.start()
    future.set_result(None)
    thread.join(5)
    assert got == [{future}]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("from_a_worker", [False, True], ids=["main-thread", "worker-thread"])
def test_verify_interrupted_while_its_main_thread_waits_stops_the_lesson_and_ends_at_once(
        course, fake_gpu, prebuilt, tmp_path, ctrl_c, signum, from_a_worker):
    """A lesson that never ends, the main thread waiting for it: the signal, taken by the main thread or a
    worker's, ends verify with 130 at once, and the lesson's process group is gone."""
    pid_file = tmp_path / "hang.pid"

    def edit(manifest: dict) -> None:
        manifest["lessons"][0].update(timeout=60, args=[str(pid_file)])

    course(["hang"], edit=edit)

    def interrupt_once_it_runs():
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith("\n") and pid_file.read_text(),
                             "the hang stand-in to start"))
        found.append(child)
        signal_later(signum, from_a_worker=from_a_worker, after=0.1).join()

    found: list[int] = []
    threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
    started = time.monotonic()
    result = coursectl("verify", "--all", "-q")
    elapsed = time.monotonic() - started
    assert result.exit_code == 130, result.output
    assert elapsed < 15, f"verify took {elapsed:.1f} s to stop"   # the lesson would have run 60 s
    assert found and is_gone(found[0])
