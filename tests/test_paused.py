"""orchestrator.workflows.paused: a walk paused at a stage that waits goes on once, when its last future is done."""

from __future__ import annotations

from concurrent.futures import Future

from orchestrator.workflows.paused import Paused, WaitingStage


def test_a_paused_walk_goes_on_once_and_only_when_every_future_is_done():
    futures = [Future(), Future(), Future()]
    went_on = []
    Paused(0, "result", futures).when_done(lambda: went_on.append(True))
    futures[1].set_result(1)
    futures[0].set_exception(ValueError("a pass that failed is done too"))
    assert went_on == []
    futures[2].set_result(2)
    assert went_on == [True]


def test_a_waiting_stage_called_as_a_stage_waits_for_its_work_where_it_is():
    work: Future = Future()

    def start(turn, result):
        work.set_result(f"{result} judged")
        return [work]

    stage = WaitingStage("judging", start, lambda turn, result, done: [f.result() for f in done])
    assert stage(None, "run") == ["run judged"]
    assert stage.__name__ == "judging"
