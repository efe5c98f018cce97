"""Which lessons a command takes: -k in pytest's grammar, --collect-only, an empty -k (exit 5), --last-failed,
--failed-from, and the shell completion of lesson ids."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from click.testing import CliRunner

from conftest import _command, coursectl, lines, statuses, tally_line

THREE = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"]


def collected(*args) -> tuple[int, list[str]]:
    result = coursectl("verify", "--collect-only", *args)
    return result.exit_code, lines(result.stdout)


@pytest.mark.parametrize("expression, chosen", [
    ("not day13", ["day14-syncthreads", "day16-tiled-matmul"]),
    ("day13 or day14", ["day13-shared-memory", "day14-syncthreads"]),
    ("(day13 or day16) and not tiled", ["day13-shared-memory"]),
    ("not (day13 or day14)", ["day16-tiled-matmul"]),
    ("SYNC", ["day14-syncthreads"]),                          # case-insensitive, as pytest
    ("stand-in and not not shared", ["day13-shared-memory"]),  # titles too: "<id> (stand-in)"
    ("day1[36]*", ["day13-shared-memory", "day16-tiled-matmul"]),   # the glob form -k always took
    ("day1* and not day16", ["day13-shared-memory", "day14-syncthreads"]),
])
def test_k_takes_pytests_grammar(course, expression, chosen):
    """`-k 'not day13'` and `-k 'day13 or day14'` were substrings of no lesson: nothing was selected, exit 0."""
    course(THREE)
    status, out = collected("-k", expression)
    assert status == 0
    assert out == [*chosen, f"{len(chosen)} lesson{'s' if len(chosen) > 1 else ''} selected, "
                            f"{3 - len(chosen)} deselected"]


@pytest.mark.parametrize("expression, column, what", [
    ("day13 and", 10, "expected not, ( or a word, found the end"),
    ("(day13 or day14", 16, "expected ')', found the end"),
    ("day13 day14", 7, "expected and, or or the end, found 'day14'"),
    ("day13 or $", 10, "unexpected character '$'"),
    (")", 1, "expected not, ( or a word, found ')'"),
])
def test_a_malformed_k_is_a_usage_error_naming_it(course, expression, column, what):
    course(THREE)
    result = coursectl("verify", "--collect-only", "-k", expression)
    assert (result.exit_code, result.stdout) == (2, "")
    assert lines(result.stderr)[0] == f"coursectl: error: -k {expression!r}: at column {column}: {what}"
    assert lines(result.stderr)[1].startswith("hint: -k takes pytest's grammar")


def test_collect_only_builds_and_runs_nothing(course, tmp_path, monkeypatch):
    """No nvcc, no GPU: --collect-only still lists what the selection takes, and the shard's share of it."""
    course(THREE)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    assert collected("--all") == (0, [*THREE, "3 lessons selected, 0 deselected"])
    assert collected("--all", "--shard", "1/2") == (0, ["day13-shared-memory", "day16-tiled-matmul",
                                                        "2 lessons selected, 1 deselected"])
    built = coursectl("build", "--collect-only", "day14-syncthreads")
    assert (built.exit_code, lines(built.stdout)) == (0, ["day14-syncthreads", "1 lesson selected, 2 deselected"])
    assert not (tmp_path / "cache").exists()


def test_a_k_that_selects_nothing_exits_5_as_pytest_does(course, fake_gpu, prebuilt, tmp_path):
    """Also under --strict (5, not 1); the reports are written all the same."""
    course(THREE)
    assert collected("-k", "zzz") == (5, ["0 lessons selected, 3 deselected"])
    report = tmp_path / "empty.json"
    for strict in ([], ["--strict"]):
        result = coursectl("verify", "-k", "zzz", "--json", report, *strict)
        assert result.exit_code == 5, strict
        assert tally_line(result.stdout).startswith("0 passed, 0 failed in T s; no lesson was selected")
        assert result.stderr == "coursectl: error: -k 'zzz' selected none of the 3 lessons\n"
        assert json.loads(report.read_text())["results"] == []
    # an empty shard is no usage mistake: it still exits 0, or 1 with --strict (test_cli.py)
    assert coursectl("verify", "--all", "--shard", "4/4").exit_code == 0


def test_last_failed_runs_what_failed_in_the_last_verify_or_all_when_none_did(course, fake_gpu, prebuilt):
    made = course(["day13-shared-memory", "day14-syncthreads", "fail"])
    assert coursectl("record", "day13-shared-memory", "day14-syncthreads", "-q").exit_code == 0
    first = coursectl("verify", "--all", "-q")
    assert first.exit_code == 1
    kept = made.root / os.environ["COURSECTL_CACHE"] / "last-report.json"
    assert [r["status"] for r in json.loads(kept.read_text())["results"]] == ["PASS", "PASS", "FAIL"]

    again = coursectl("verify", "--last-failed", "-q")
    assert again.exit_code == 1
    assert list(statuses(again.stdout)) == ["fail"]
    assert again.stderr == f"coursectl: --last-failed: running the 1 of 3 selected lessons that failed in {kept}\n"
    assert collected("--lf", "-k", "not fail") == (0, ["day13-shared-memory", "day14-syncthreads",
                                                       "2 lessons selected, 1 deselected"])

    passing = coursectl("verify", "day13-shared-memory", "-q")   # the last report now holds no failure
    assert passing.exit_code == 0
    everything = coursectl("verify", "--last-failed", "-k", "day1", "-q")
    assert list(statuses(everything.stdout)) == ["day13-shared-memory", "day14-syncthreads"]
    assert everything.stderr == f"coursectl: --last-failed: no lesson of the selection failed in {kept}: running all 2\n"


def test_last_failed_without_a_last_report_runs_everything_and_says_so(course, tmp_path, monkeypatch):
    course(THREE)
    cache = tmp_path / "fresh-cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    result = coursectl("verify", "--collect-only", "--last-failed")
    assert (result.exit_code, lines(result.stdout)[-1]) == (0, "3 lessons selected, 0 deselected")
    assert result.stderr == (f"coursectl: --last-failed: no last report ({cache / 'last-report.json'}): "
                             "running every selected lesson\n")
    (cache).mkdir()
    (cache / "last-report.json").write_text("{ half a report")
    damaged = coursectl("verify", "--collect-only", "--last-failed")
    assert damaged.exit_code == 0
    assert "last-report.json: not a coursectl JSON report" in lines(damaged.stderr)[0]


def test_failed_from_takes_a_report_of_its_own(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory", "fail"])
    report = tmp_path / "ci.json"
    assert coursectl("verify", "--all", "-q", "--json", report).exit_code == 1
    assert collected("--failed-from", report) == (0, ["fail", "1 lesson selected, 1 deselected"])
    missing = coursectl("verify", "--failed-from", tmp_path / "none.json")
    assert missing.exit_code == 2 and "none.json: no such report" in missing.stderr
    both = coursectl("verify", "--failed-from", report, "--last-failed")
    assert both.exit_code == 2 and "give one" in both.stderr


def test_the_json_report_and_the_last_report_are_one_dump_written_twice(course, fake_gpu, prebuilt, tmp_path,
                                                                        monkeypatch):
    from orchestrator.cli.report import VerifyReport

    made = course(["day13-shared-memory", "fail"])
    dumps = []
    dump = VerifyReport.model_dump_json
    monkeypatch.setattr(VerifyReport, "model_dump_json", lambda self, **kw: dumps.append(kw) or dump(self, **kw))
    report = tmp_path / "ci.json"
    assert coursectl("verify", "--all", "-q", "--json", report).exit_code == 1
    kept = made.root / os.environ["COURSECTL_CACHE"] / "last-report.json"
    assert report.read_bytes() == kept.read_bytes()
    assert [r["status"] for r in json.loads(kept.read_text())["results"]] == ["NO_EVIDENCE", "FAIL"]
    assert len(dumps) == 1
    assert coursectl("verify", "--all", "-q").exit_code == 1   # no --json: the last report alone, dumped once
    assert len(dumps) == 2

def test_a_strict_reports_unverified_lessons_count_as_failed_for_last_failed(course, fake_gpu, prebuilt, tmp_path):
    """--last-failed takes the report's own verdict (run_verdict): under --strict a lesson without evidence failed."""
    course(["day13-shared-memory", "day14-syncthreads"])
    assert coursectl("record", "day13-shared-memory", "-q").exit_code == 0
    assert coursectl("verify", "--all", "-q").exit_code == 0
    assert collected("--lf")[1][-1] == "2 lessons selected, 0 deselected"   # nothing failed: all
    assert coursectl("verify", "--all", "-q", "--strict").exit_code == 1
    assert collected("--lf") == (0, ["day14-syncthreads", "1 lesson selected, 1 deselected"])


def complete(words: str, env: dict | None = None) -> list[str]:
    """What the shell's completion offers for COMP_WORDS (the last word being completed), through click's own."""
    result = CliRunner().invoke(_command(), [], prog_name="coursectl",
                                env={"_COURSECTL_COMPLETE": "complete_bash", "COMP_WORDS": words,
                                     "COMP_CWORD": str(len(words.split(" ")) - 1), **(env or {})})
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_lesson_ids_complete_from_the_manifest(course, tmp_path, monkeypatch):
    course(THREE)
    assert complete("coursectl verify day1") == THREE
    assert complete("coursectl verify -k day14") == ["day14-syncthreads"]
    assert complete("coursectl run day16") == ["day16-tiled-matmul"]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"version": 1, "lessons": [{"id": "day99-elsewhere"}]}))
    assert complete(f"coursectl verify -m {other} day") == ["day99-elsewhere"]
    short = tmp_path / "short.yaml"   # the short form: the id as the entry's first key, its title the value
    short.write_text("version: 1\nlessons:\n  - day21-scan: Prefix sums\n    timeout: 30\n  - day22-sort: Sorting\n")
    assert complete(f"coursectl build -m {short} day2") == ["day21-scan", "day22-sort"]


@pytest.mark.parametrize("manifest", ["missing.yaml", "broken.yaml", "list.yaml"])
def test_completion_is_silent_on_a_manifest_it_cannot_read(course, tmp_path, manifest):
    course(THREE)
    (tmp_path / "broken.yaml").write_text("lessons: [\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    result = CliRunner().invoke(_command(), [], prog_name="coursectl",
                                env={"_COURSECTL_COMPLETE": "complete_bash",
                                     "COMP_WORDS": f"coursectl verify -m {tmp_path / manifest} day", "COMP_CWORD": "4"})
    assert (result.exit_code, result.output.strip()) == (0, "")
