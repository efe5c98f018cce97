"""Green means the evidence still describes the course: stale evidence, skipped passes and weakened rules are never
PASS (issue 31). Each test records a stand-in course of its own on the stand-in GPU, then changes one thing."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from conftest import GPU_SLUG, SANITIZER_DATA, coursectl, lines, statuses

DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
DAY14_SANITIZERS = {DAY14: {"memcheck": {}, "racecheck": {"findings": [{"kernel": "reverseTileRacy"}]}}}
OFFLINE = ("verify", "--all", "--offline", "--arch", "sm_90", "-q")


def recorded(course, lesson: str = DAY16, **kwargs):
    made = course([lesson], architectures=["sm_90"], **kwargs)
    result = coursectl("record", "--all", "-q")
    assert result.exit_code == 0, result.stdout
    return made


def offline(*extra: str):
    result = coursectl(*OFFLINE, *extra)
    return result, statuses(result.stdout, "verify --offline")


def edit_manifest(made, change) -> None:
    manifest = yaml.safe_load(made.manifest.read_text())
    change(manifest["lessons"][0])
    made.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False, width=1000))


def edit_meta(made, lesson: str, **update) -> None:
    path = made.evidence(lesson) / "meta.json"
    meta = json.loads(path.read_text())
    meta.update(update)
    path.write_text(json.dumps(meta, indent=2))


# -- 1. stale evidence ------------------------------------------------------------------------------
def test_a_source_edited_after_record_is_stale_offline_and_fails_strict(course, fake_gpu, prebuilt):
    made = recorded(course)
    source = made.root / "standins" / "replay.cpp"
    source.write_text(source.read_text() + "// a planted bug\n")
    result, status = offline()
    assert (result.exit_code, status) == (0, {DAY16: "STALE"})
    assert any(line.startswith(f"{DAY16}: stale: {GPU_SLUG}: standins/replay.cpp changed since the evidence")
               and line.endswith(f"run `coursectl record {DAY16}` on a GPU") for line in lines(result.stdout))
    assert lines(result.stdout)[-1].startswith("0 passed, 1 stale, 0 failed")
    junit = made.root.parent / "stale.xml"
    strict, _ = offline("--strict", "--junit", junit)
    assert strict.exit_code == 1
    assert "1 not verified, counted as failed" in lines(strict.stdout)[-1]
    assert '<failure type="STALE" message="--strict: not verified, counted as failed: nvidia-h200: ' \
           'standins/replay.cpp changed since the evidence' in junit.read_text()


def test_on_a_gpu_a_changed_source_is_built_run_and_judged(course, fake_gpu, prebuilt):
    made = recorded(course)
    source = made.root / "standins" / "replay.cpp"
    source.write_text(source.read_text() + "// a comment\n")
    result = coursectl("verify", "--all", "--strict", "-q")
    assert (result.exit_code, statuses(result.stdout)) == (0, {DAY16: "PASS"}), result.stdout


def test_flags_changed_since_record_are_stale(course, fake_gpu, prebuilt):
    made = recorded(course)
    edit_meta(made, DAY16, flags=["-O0", "-G"])
    result, status = offline()
    assert status == {DAY16: "STALE"}
    assert any("flags changed since the evidence: -O0 -G -> -std=c++17 -O3" in line for line in lines(result.stdout))


# -- 2. every declared pass -----------------------------------------------------------------------------
def test_a_recorded_pass_deleted_is_incomplete_and_fails_strict(course, fake_sanitizer, prebuilt, monkeypatch):
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    made = recorded(course, DAY14, sanitizers=DAY14_SANITIZERS)
    evidence = made.evidence(DAY14)
    meta = json.loads((evidence / "meta.json").read_text())
    for name in ("racecheck.log", "racecheck.xml"):
        meta["files"].pop(name, None)
        (evidence / name).unlink(missing_ok=True)
    (evidence / "meta.json").write_text(json.dumps(meta))
    result, status = offline()
    assert status == {DAY14: "INCOMPLETE"}
    assert offline("--strict")[0].exit_code == 1


def test_no_sanitize_never_passes_strict(course, fake_sanitizer, prebuilt, monkeypatch):
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    recorded(course, DAY14, sanitizers=DAY14_SANITIZERS)
    plain = coursectl("verify", "--all", "--no-sanitize", "-q")
    assert (plain.exit_code, statuses(plain.stdout)) == (0, {DAY14: "INCOMPLETE"})
    assert coursectl("verify", "--all", "--no-sanitize", "--strict", "-q").exit_code == 1
    assert coursectl("verify", "--all", "--strict", "-q").exit_code == 0


# -- 3. the rules kept with the evidence -------------------------------------------------------------------
def _table(lesson: dict, name: str) -> dict:
    return next(item for item in lesson["output"]["items"] if item.get("table") == name)


def _line(lesson: dict, start: str) -> dict:
    return next(item for item in lesson["output"]["items"] if str(item.get("line", "")).startswith(start))


def _wider(lesson):
    _table(lesson, "cases")["columns"]["ms"]["rel"] = 10.0


def _volatile(lesson):
    _table(lesson, "cases")["columns"]["loads"] = {"type": "int", "compare": "volatile"}


def _optional(lesson):
    _line(lesson, "tile ")["optional"] = True


def _rows(lesson):
    table = _table(lesson, "cases")
    table.pop("keys")
    table["key"] = ["case", "kernel"]
    table["rows"] = {"min": 0}


def _ignore(lesson):
    lesson["output"]["ignore"] = ["^========= ", "^FAILED"]


def _text(lesson):
    lesson["output"]["items"].insert(2, {"text": ""})


def _gate(lesson):
    lesson["claims"] = [c for c in lesson["claims"] if c["id"] != "every-case-matches"]


WEAKENINGS = {"field cases.ms": _wider, "field cases.loads": _volatile, "line tile ": _optional,
              "table cases": _rows, "ignore": _ignore, "text ": _text, "gate every-case-matches": _gate}


@pytest.mark.parametrize("name", list(WEAKENINGS))
def test_a_rule_that_checks_less_is_stale_until_acknowledged(course, fake_gpu, prebuilt, name):
    made = recorded(course)
    edit_manifest(made, WEAKENINGS[name])
    result, status = offline("--strict")
    assert (result.exit_code, status) == (1, {DAY16: "STALE"}), result.stdout
    stale = [line for line in lines(result.stdout) if line.startswith(f"{DAY16}: stale: {GPU_SLUG}: {name}")]
    assert stale and "checks less than when the evidence was recorded" in stale[0] and "->" in stale[0]
    gpu = coursectl("verify", "--all", "--strict", "-q")
    assert gpu.exit_code == 1 and f"{DAY16}: stale: {GPU_SLUG}: {name}" in gpu.stdout
    full = next(line for line in lines(result.stdout) if f": {name}" in line).split(": ", 3)[3].split(" checks less")[0]
    edit_manifest(made, lambda lesson: lesson.update(weakened={full: "the cases vary on this GPU"}))
    acknowledged, status = offline("--strict")
    assert (acknowledged.exit_code, status) == (0, {DAY16: "PASS"}), acknowledged.stdout
    assert "acknowledged in lessons.yaml: the cases vary on this GPU" in acknowledged.stdout


def test_a_pass_deleted_is_a_weakening(course, fake_sanitizer, prebuilt, monkeypatch):
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_LOG", str(SANITIZER_DATA / "syncthreads.racecheck.txt"))
    made = recorded(course, DAY14, sanitizers=DAY14_SANITIZERS)
    edit_manifest(made, lambda lesson: lesson["sanitizers"].pop("racecheck"))
    result, status = offline("--strict")
    assert (result.exit_code, status) == (1, {DAY14: "STALE"})
    assert f"{DAY14}: stale: {GPU_SLUG}: pass racecheck checks less" in result.stdout


def test_checking_more_is_fine_and_old_evidence_has_rules_unknown(course, fake_gpu, prebuilt):
    made = recorded(course)
    edit_manifest(made, lambda lesson: _table(lesson, "cases")["columns"]["ms"].update(rel=0.1))
    result, status = offline("--strict")
    assert (result.exit_code, status) == (0, {DAY16: "PASS"}), result.stdout
    edit_meta(made, DAY16, rules=None)
    result, status = offline("--strict")
    assert (result.exit_code, status) == (0, {DAY16: "PASS"})
    assert f"{DAY16}: note: {GPU_SLUG}: rules unknown" in result.stdout


# -- 5. meta.json against the transcript and the course ----------------------------------------------------
@pytest.mark.parametrize("update, words", [
    ({"exit_status": 1}, "meta.json exit_status is 1"),
    ({"arch": "sm_75"}, "meta.json arch sm_75 is not the architecture of compute capability"),
    ({"gpu_name": "Tesla T4"}, "meta.json gpu_name 'Tesla T4' is not the GPU of its folder"),
])
def test_meta_json_contradicting_itself_refuses_the_evidence(course, fake_gpu, prebuilt, update, words):
    made = recorded(course)
    edit_meta(made, DAY16, **update)
    result, status = offline()
    assert (result.exit_code, status) == (1, {DAY16: "FAIL"})
    assert f"{DAY16}: evidence for {GPU_SLUG} refused: {words}" in result.stdout


def test_a_transcript_of_another_gpu_is_refused(course, fake_gpu, prebuilt):
    made = recorded(course)
    path = made.evidence(DAY16) / "transcript.txt"
    first, rest = path.read_text().split("\n", 1)
    text = "GPU: Tesla T4 (compute capability 7.5)\n" + rest
    path.write_text(text)
    edit_meta(made, DAY16, transcript_sha256=hashlib.sha256(text.encode()).hexdigest())
    result, _ = offline()
    assert result.exit_code == 1
    assert "the transcript names GPU 'Tesla T4', but meta.json gpu_slug is nvidia-h200" in result.stdout


# -- 4. table keys ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("old, new, row", [
    ("    64  reverseTileRacy           98307", "    65  reverseTileRacy            5000", "blocks[65/reverseTileRacy]"),
    ("   256  reverseTileRacy ", "   256  reverseTileRenamed", "blocks[256/reverseTileRenamed]"),
])
def test_table_keys_are_compared_exactly_whatever_the_columns_rules(course, fake_gpu, prebuilt, old, new, row):
    made = recorded(course, DAY14)
    transcript = made.transcript(DAY14)
    text = transcript.read_text()
    assert text.count(old) == 1
    transcript.write_text(text.replace(old, new))
    result = coursectl("verify", "--all", "-q")
    assert (result.exit_code, statuses(result.stdout)) == (1, {DAY14: "FAIL"}), result.stdout
    assert f"  {row} [row key]: new: evidence None, now '{row}'" in lines(result.stdout)


# -- 7. the selection --------------------------------------------------------------------------------------
def test_the_tally_and_the_json_report_say_what_the_selection_left_out(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory", DAY14, DAY16], architectures=["sm_90"])
    assert coursectl("record", "--all", "-q").exit_code == 0
    report = tmp_path / "report.json"
    result = coursectl(*OFFLINE, "-k", "day1", "--shard", "1/2", "--json", report)
    selection = json.loads(report.read_text())["selection"]
    assert (selection["ids"], selection["keyword"], selection["shard"]) == ([], "day1", "1/2")
    assert len(selection["lessons"]) + selection["deselected"] == 3 and selection["deselected"] >= 1
    assert lines(result.stdout)[-1].endswith(f"; {selection['deselected']} deselected by -k 'day1' and --shard 1/2")
    every = coursectl(*OFFLINE, "--json", report)
    assert "deselected" not in lines(every.stdout)[-1]
    assert json.loads(report.read_text())["selection"]["deselected"] == 0


# -- 10. report merge re-derives each status --------------------------------------------------------------
def test_merge_refuses_a_report_whose_status_does_not_follow_from_its_contents(course, fake_gpu, prebuilt, tmp_path):
    made = recorded(course)
    transcript = made.transcript(DAY16)
    transcript.write_text(transcript.read_text().replace("all 3 cases match", "all 2 cases match"))
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    assert coursectl("verify", "--all", "-q", "--shard", "1/2", "--json", first).exit_code == 1
    assert coursectl("verify", "--all", "-q", "--shard", "2/2", "--json", second).exit_code == 0
    assert coursectl("report", "merge", first, second).exit_code == 1
    report = json.loads(first.read_text())
    [lesson] = report["results"]
    assert lesson["status"] == "FAIL"
    lesson.update(status="PASS", reasons=[])
    first.write_text(json.dumps(report))
    merged = coursectl("report", "merge", first, second)
    assert merged.exit_code == 1
    assert (f"report 1: lesson '{DAY16}' on {GPU_SLUG} says PASS, but what it holds says FAIL "
            f"(gate 'every-case-matches' failed)") in merged.stderr + merged.stdout


# -- 9. compare's exit status ------------------------------------------------------------------------------
def _copy_as(made, slug: str, old: str = "", new: str = "") -> None:
    import shutil
    target = made.root / "evidence" / DAY16 / slug
    shutil.copytree(made.evidence(DAY16), target)
    text = (target / "transcript.txt").read_text()
    assert not old or text.count(old) == 1
    text = text.replace(old, new) if old else text
    (target / "transcript.txt").write_text(text)
    meta = json.loads((target / "meta.json").read_text())
    meta.update(gpu_slug=slug, gpu_name=slug, transcript_sha256=hashlib.sha256(text.encode()).hexdigest())
    (target / "meta.json").write_text(json.dumps(meta))


def test_compare_exits_1_when_a_field_moved_beyond_its_rule(course, fake_gpu, prebuilt):
    made = recorded(course)
    _copy_as(made, "same-gpu")
    assert coursectl("compare", GPU_SLUG, "same-gpu").exit_code == 0
    _copy_as(made, "other-gpu", "tile 16 x 16", "tile 32 x 16")
    moved = coursectl("compare", GPU_SLUG, "other-gpu")
    assert moved.exit_code == 1
    assert lines(moved.stdout)[-1].startswith(f"1 field beyond its rule: {DAY16}: tile")


# -- 6. what a PASS covered --------------------------------------------------------------------------------
def test_what_a_pass_covered_is_in_v_the_json_report_and_junit(course, fake_gpu, prebuilt, tmp_path):
    recorded(course)
    report, junit = tmp_path / "report.json", tmp_path / "report.xml"
    gpu = coursectl("verify", "--all", "-v", "--json", report, "--junit", junit)
    [line] = [line for line in lines(gpu.stdout) if line.startswith(f"{DAY16}: covered: ")]
    assert line.startswith(f"{DAY16}: covered: ran; 3 gates held; fields compared: ") and "tolerance" in line
    covered = json.loads(report.read_text())["results"][0]["covered"]
    assert covered["ran"] and covered["gates_held"] == 3 and covered["fields_compared"]["exact"] > 0
    assert f'name="covered.{DAY16}" value="ran; 3 gates held' in junit.read_text()
    result = coursectl("verify", "--all", "--offline", "--arch", "sm_90", "-v")
    assert f"{DAY16}: covered: re-judged, nothing ran; 3 gates held; fields compared: none" in result.stdout
    assert lines(result.stdout)[-1].startswith("0 passed, 1 re-judged, 0 failed")


def test_the_drift_report_names_a_weakened_rule_before_and_after(course, fake_gpu, prebuilt, tmp_path):
    made = recorded(course)
    edit_manifest(made, _wider)
    drift = tmp_path / "drift.md"
    result = coursectl("verify", "--all", "--strict", "-q", "--report", drift)
    assert result.exit_code == 1
    text = drift.read_text()
    assert "No field moved; nothing changed underneath" not in text
    assert "field cases.ms checks less than when the evidence was recorded" in text and '"rel": 10.0' in text


def test_a_gpu_verify_reads_and_parses_the_evidence_once(course, fake_gpu, prebuilt, monkeypatch):
    """Comparing the fields, the drift, the rules and meta.json all judge one read and one parse of the set."""
    from orchestrator.judge import evidence, judging
    recorded(course)
    loads, parses = [], []
    real_load, real_parse = evidence.load_evidence, judging.parse_transcript

    def load(*args, **kwargs):
        loads.append(args)
        return real_load(*args, **kwargs)

    def parse(schema, text, name="<transcript>", *args, **kwargs):
        if str(name).endswith("transcript.txt"):
            parses.append(name)
        return real_parse(schema, text, name, *args, **kwargs)

    monkeypatch.setattr(evidence, "load_evidence", load)
    monkeypatch.setattr(judging, "parse_transcript", parse)
    result = coursectl("verify", "--all", "--strict", "-q")
    assert (result.exit_code, statuses(result.stdout)) == (0, {DAY16: "PASS"}), result.stdout
    assert (len(loads), len(parses)) == (1, 1), (loads, parses)
