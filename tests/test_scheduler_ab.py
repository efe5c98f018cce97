"""bench/scheduler_ab.py: the two checkouts in turns, each side's runs kept apart, and a run that measured
no verify refused."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import scheduler_ab  # noqa: E402  (bench/scheduler_ab.py)


def _result(*cpu: float, exit: int = 0) -> dict:
    return {"runs": [{"cpu_s": seconds, "exit": exit} for seconds in cpu]}


def test_the_sides_take_turns_base_first_and_keep_their_own_runs():
    given = {"base": iter([_result(4.0, 4.2), _result(3.0, 3.1)]), "this": iter([_result(3.5, 3.6), _result(2.5, 2.4)])}
    asked: list[str] = []

    def turn(side: str) -> dict:
        asked.append(side)
        return next(given[side])

    order, runs = scheduler_ab.alternate(2, turn)
    assert order == asked == ["base", "this", "base", "this"]
    assert [run["cpu_s"] for run in runs["base"]] == [4.0, 4.2, 3.0, 3.1]
    assert [run["cpu_s"] for run in runs["this"]] == [3.5, 3.6, 2.5, 2.4]
    told = scheduler_ab.summary(runs)
    assert told["base"]["median_cpu_s"] == 3.55 and told["base"]["fastest_cpu_s"] == 3.0
    assert told["this"]["median_cpu_s"] == 3.0 and told["this"]["fastest_cpu_s"] == 2.4
    assert told["median_difference_s"] == -0.55


@pytest.mark.parametrize("exit", [2, 124, None])
def test_a_run_that_measured_no_verify_is_refused(exit):
    runs = {"base": _result(3.0)["runs"], "this": [*_result(3.0)["runs"], *_result(1.0, exit=exit)["runs"]]}
    with pytest.raises(SystemExit, match=f"a this run exited {exit}"):
        scheduler_ab.summary(runs)


@pytest.mark.slow
def test_two_checkouts_measured_in_turns(tmp_path):
    """The whole script over two lessons, the base a copy of this checkout's code (an export: no git)."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not on PATH")
    base = tmp_path / "base"
    ignore = shutil.ignore_patterns("__pycache__", "results")
    for folder in ("bench", "orchestrator", "tests/data"):
        shutil.copytree(ROOT / folder, base / folder, ignore=ignore)
    out = tmp_path / "ab.json"
    command = [sys.executable, str(ROOT / "bench" / "scheduler_ab.py"), "--base", str(base), "--lessons", "2",
               "--rounds", "1", "--runs", "1", "--out", str(out), "--md", str(tmp_path / "ab.md")]
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode != 0 and "name its commit with --base-commit" in refused.stderr
    done = subprocess.run([*command, "--base-commit", "copy"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["order"] == ["base", "this"] and result["commits"]["base"] == "copy"
    for side in ("base", "this"):
        [run] = result["runs"][side]
        assert run["exit"] == 0 and run["passes"] == 4 and run["cpu_s"] > 0   # 2 lessons: memcheck, racecheck
    assert "| base | copy |" in (tmp_path / "ab.md").read_text()
