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
