"""orchestrator.workflows.locks: a GPU's lock, held exclusively by timed runs and shared by sanitizer passes."""

from __future__ import annotations

import os
import threading

import pytest

from conftest import QUIET
from orchestrator.workflows.locks import gpu_lock


def test_shared_holders_hold_together():
    with gpu_lock("GPU-locks-test", shared=True):
        said: list[str] = []
        with gpu_lock("GPU-locks-test", said.append, shared=True):   # a second pass: no wait
            pass
        assert said == []


@pytest.mark.parametrize("held_shared, named", [(True, " (sanitizer passes)"), (False, "")],
                         ids=["an exclusive one waits for a shared one", "a shared one waits for an exclusive one"])
def test_a_holder_of_the_other_kind_waits_and_is_told_who_holds_it(held_shared, named):
    said: list[str] = []
    inside = threading.Event()
    with gpu_lock("GPU-locks-test", shared=held_shared):
        def other():
            with gpu_lock("GPU-locks-test", said.append, shared=not held_shared):
                inside.set()

        thread = threading.Thread(target=other, daemon=True)
        thread.start()
        assert not inside.wait(QUIET), "a holder came in beside one of the other kind"
        assert said == [f"waiting for GPU GPU-locks-test: held by coursectl pid {os.getpid()}{named}"]
    assert inside.wait(5)
    thread.join(5)


def test_the_passes_of_one_process_hold_the_lock_through_one_descriptor_until_the_last_lets_go(monkeypatch):
    from orchestrator.workflows import locks

    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(locks.os, "open", lambda path, *a: opened.append(path) or real_open(path, *a))
    first, second = gpu_lock("GPU-locks-test", shared=True), gpu_lock("GPU-locks-test", shared=True)
    first.__enter__()
    second.__enter__()
    assert len(opened) == 1, "the second pass opened the file again"
    first.__exit__(None, None, None)
    said: list[str] = []
    inside = threading.Event()

    def timed_run():
        with gpu_lock("GPU-locks-test", said.append):
            inside.set()

    thread = threading.Thread(target=timed_run, daemon=True)
    thread.start()
    assert not inside.wait(QUIET), "a timed run came in beside the pass still running"
    second.__exit__(None, None, None)   # the last pass: the lock let go
    assert inside.wait(5)
    thread.join(5)
    assert said == [f"waiting for GPU GPU-locks-test: held by coursectl pid {os.getpid()} (sanitizer passes)"]
    assert locks._SHARED == {}
