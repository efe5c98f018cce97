"""orchestrator.locks: a GPU's lock, held exclusively by timed runs and shared by sanitizer passes."""

from __future__ import annotations

import os
import threading

from orchestrator.locks import gpu_lock


def test_shared_holders_hold_together_and_an_exclusive_one_waits_for_them():
    said: list[str] = []
    with gpu_lock("GPU-locks-test", shared=True):
        with gpu_lock("GPU-locks-test", shared=True):   # a second pass: no wait
            pass
        inside = threading.Event()

        def timed():
            with gpu_lock("GPU-locks-test", said.append):
                inside.set()

        thread = threading.Thread(target=timed, daemon=True)
        thread.start()
        assert not inside.wait(0.2), "an exclusive holder came in beside a shared one"
        assert said == [f"waiting for GPU GPU-locks-test: held by coursectl pid {os.getpid()} (sanitizer passes)"]
    assert inside.wait(5)
    thread.join(5)


def test_a_shared_holder_waits_for_an_exclusive_one():
    said: list[str] = []
    inside = threading.Event()
    with gpu_lock("GPU-locks-test"):
        def one_pass():
            with gpu_lock("GPU-locks-test", said.append, shared=True):
                inside.set()

        thread = threading.Thread(target=one_pass, daemon=True)
        thread.start()
        assert not inside.wait(0.2), "a shared holder came in beside an exclusive one"
        assert said == [f"waiting for GPU GPU-locks-test: held by coursectl pid {os.getpid()}"]
    assert inside.wait(5)
    thread.join(5)
