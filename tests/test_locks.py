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
