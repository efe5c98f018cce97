"""COURSECTL_TRACE: a timeline of one run, and bench/timeline.py's summary of it."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, coursectl

FOUR = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul", "day71-matmul-fp16"]
MEMCHECK = {lesson: {"memcheck": {}} for lesson in FOUR}


def spans(trace: dict) -> list[dict]:
    return [event for event in trace["traceEvents"] if event["ph"] == "X"]


def tracks(trace: dict) -> dict[int, str]:
    return {event["tid"]: event["args"]["name"] for event in trace["traceEvents"] if event["ph"] == "M"}


def test_a_traced_verify_shows_each_lessons_runs_and_passes_on_its_gpu(course, two_gpus, fake_sanitizer, prebuilt,
                                                                      built_in_background, monkeypatch, tmp_path):
    course(FOUR, sanitizers=MEMCHECK)
    monkeypatch.setenv("STANDIN_SLEEP", "0.2")
    monkeypatch.setenv("COURSECTL_TRACE", str(tmp_path / "trace.json"))
    result = coursectl("verify", "--all", "--gpus", "0,1")
    assert result.exit_code == 0, result.output
    trace = json.loads((tmp_path / "trace.json").read_text())
    named = tracks(trace)
    by_name: dict[str, list[dict]] = {}
    for event in spans(trace):
        by_name.setdefault(event["name"], []).append(event)
    assert {named[e["tid"]] for e in by_name["timed runs"]} == set(FOUR)
    assert {named[e["tid"]] for e in by_name["memcheck"]} == {f"{lesson} memcheck" for lesson in FOUR}
    assert {e["args"]["gpu"] for e in by_name["timed runs"]} == {0, 1}
    assert all(e["dur"] >= 200_000 for e in by_name["timed runs"])   # each stand-in sleeps 0.2 s
    for name in ("find the tools", "load the manifest", "report"):
        assert [named[e["tid"]] for e in by_name[name]] == ["coursectl"]
    # Timed runs on one GPU never overlap, nor do they overlap a pass there.
    for gpu in (0, 1):
        busy = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in spans(trace)
                      if e["args"].get("gpu") == gpu and e["name"] != "turn")
        timed = [b for b in busy if b[2] == "timed runs"]
        assert all(a[1] <= b[0] for a, b in zip(timed, timed[1:]))
        assert not any(t[0] < p[1] and p[0] < t[1] for t in timed for p in busy if p[2] == "memcheck")

    summary = subprocess.run([sys.executable, str(ROOT / "bench" / "timeline.py"), str(tmp_path / "trace.json"),
                              "--json"], capture_output=True, text=True, check=True)
    figures = json.loads(summary.stdout)
    assert set(figures["gpus"]) == {"0", "1"}
    assert sum(gpu["timed_runs_ms"] for gpu in figures["gpus"].values()) >= 4 * 200
    assert all(0 < gpu["busy_ms"] <= figures["wall_ms"] for gpu in figures["gpus"].values())


def test_a_build_is_traced_and_nothing_is_written_without_the_variable(course, fake_gpu, monkeypatch, tmp_path):
    course(["day13-shared-memory"])
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "fresh-cache"))   # a real nvcc run
    assert coursectl("build", "day13-shared-memory").exit_code == 0
    assert not list(tmp_path.glob("*.json"))
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "another-cache"))
    monkeypatch.setenv("COURSECTL_TRACE", str(tmp_path / "trace.json"))
    assert coursectl("build", "day13-shared-memory").exit_code == 0
    trace = json.loads((tmp_path / "trace.json").read_text())
    [nvcc] = [e for e in spans(trace) if e["name"].startswith("nvcc ")]
    assert (nvcc["name"], tracks(trace)[nvcc["tid"]]) == ("nvcc sm_90 plain", "day13-shared-memory build")


def test_a_trace_that_cannot_be_written_never_fails_the_run(course, fake_gpu, prebuilt, monkeypatch, tmp_path):
    course(["day13-shared-memory"])
    monkeypatch.setenv("COURSECTL_TRACE", str(tmp_path / "no-such-folder" / "trace.json"))
    result = coursectl("verify", "day13-shared-memory")
    assert (result.exit_code, result.stderr) == (0, "")


def test_timeline_refuses_a_file_that_is_not_a_trace_in_one_line(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "timeline.py"), str(tmp_path / "x.json")],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"bench/timeline.py: {tmp_path / 'x.json'}: not a coursectl trace "
                                                "('traceEvents')"]


def test_timeline_says_in_one_line_when_it_cannot_read_the_file(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "timeline.py"), str(tmp_path / "gone.json")],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"bench/timeline.py: {tmp_path / 'gone.json'}: cannot read it: "
                                                "No such file or directory"]
