"""orchestrator.collector: what a command keeps is out of the cycle collector's scans while it runs, and only then."""

from __future__ import annotations

import gc

from orchestrator.collector import freeze_more, long_lived


def test_what_exists_is_frozen_while_the_outermost_runs_and_handed_back_as_it_ends():
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with long_lived():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        kept = [[index] for index in range(1000)]   # made inside: scanned, until freeze_more
        with long_lived():
            assert gc.get_freeze_count() >= frozen
        assert gc.get_freeze_count() >= frozen, "the inner one ending handed back the outer one's"
        freeze_more()
        assert gc.get_freeze_count() >= frozen + len(kept)
    assert gc.get_freeze_count() == 0


def test_freeze_more_outside_a_command_freezes_nothing():
    gc.unfreeze()
    freeze_more()
    assert gc.get_freeze_count() == 0


def test_the_collector_runs_less_often_while_the_outermost_runs_and_as_it_did_after():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with long_lived():
            raised = gc.get_threshold()
            assert all(now > python for now, python in zip(raised, (700, 10, 10)))
            with long_lived():
                assert gc.get_threshold() == raised
            assert gc.get_threshold() == raised, "the inner one ending put the thresholds back"
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(100_000, 50, 50)   # set higher than ours: left as they are
        with long_lived():
            assert gc.get_threshold() == (100_000, 50, 50)
        assert gc.get_threshold() == (100_000, 50, 50)
    finally:
        gc.set_threshold(*before)
