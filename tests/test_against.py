"""Field rules tried without a GPU: `check LESSON T --against T0`, and the tolerances `record --repeat N` suggests.

Both stand on a test course of their own (conftest's `course`), day 16's
schema played by the replaying stand-in.
"""

from __future__ import annotations

from conftest import coursectl, table
from orchestrator.judge.tolerances import round_up, suggest_tolerances
from orchestrator.transcript.fields import Compare, FieldSpec
from orchestrator.transcript.parse import Flat

LESSON = "day16-tiled-matmul"
REFERENCE = f"transcripts/{LESSON}.txt"
TILED = "611x613x617      tiled         0.070      6589.1            78"


def edited(made, name: str, old: str, new: str):
    text = made.transcript(LESSON).read_text()
    assert old in text
    path = made.root / name
    path.write_text(text.replace(old, new))
    return path


def field_row(stdout: str, path: str) -> list[str]:
    title = next(line for line in stdout.splitlines() if " fields of " in line)
    return next(row for row in table(stdout, title.strip()) if row[0] == path)


def test_a_field_outside_its_tolerance_against_the_reference_fails_the_check(course):
    made = course([LESSON])
    edited(made, "moved.txt", TILED, TILED.replace("6589.1", "9000.0"))
    result = coursectl("check", LESSON, "moved.txt", "--against", REFERENCE)
    assert result.exit_code == 1, result.output
    assert field_row(result.stdout, "cases[611x613x617/tiled].gflops")[-2:] == ["1.366", "moved"]
    assert "31 fields of moved.txt against transcripts/day16-tiled-matmul.txt (30 same, 1 moved)" in result.stdout
    assert result.stdout.rstrip().endswith("1 of 31 fields outside its rule")
    # without --against the same transcript passes: its gates hold, and nothing judged its fields
    assert coursectl("check", LESSON, "moved.txt").exit_code == 0


def test_a_field_within_its_tolerance_passes_and_an_exact_one_that_changed_fails(course):
    made = course([LESSON])
    edited(made, "within.txt", TILED, TILED.replace("6589.1", "7000.0"))
    result = coursectl("check", LESSON, "within.txt", "--against", REFERENCE)
    assert result.exit_code == 0, result.output
    assert field_row(result.stdout, "cases[611x613x617/tiled].gflops")[-1] == "within"
    assert result.stdout.rstrip().endswith("every field within its rule")
    # the loads per thread are an exact field: any change is outside its rule, as verify would judge it
    edited(made, "exact.txt", TILED, TILED.replace(" 78", " 79"))
    result = coursectl("check", LESSON, "exact.txt", "--against", REFERENCE)
    assert result.exit_code == 1
    assert field_row(result.stdout, "cases[611x613x617/tiled].loads")[1:] == ["exact", "78", "79", "1.013", "moved"]


def test_the_reference_can_come_from_standard_input(course):
    from click.testing import CliRunner
    from conftest import _command

    made = course([LESSON])
    edited(made, "moved.txt", TILED, TILED.replace("6589.1", "9000.0"))
    result = CliRunner().invoke(_command(), ["check", LESSON, "moved.txt", "--against", "-"],
                                input=made.transcript(LESSON).read_text(), env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "against <stdin>" in result.stdout


def test_a_reference_that_does_not_match_the_schema_is_exit_2_naming_it(course):
    made = course([LESSON])
    broken = made.root / "broken.txt"
    broken.write_text("GPU: NVIDIA H200 (compute capability 9.0)\nnothing else\n")
    result = coursectl("check", LESSON, REFERENCE, "--against", "broken.txt")
    assert result.exit_code == 2
    assert "broken.txt" in result.stderr
    missing = coursectl("check", LESSON, REFERENCE, "--against", "nowhere.txt")
    assert missing.exit_code == 2
    assert "nowhere.txt" in missing.stderr
    both = coursectl("check", LESSON, "-", "--against", "-")
    assert both.exit_code == 2
    assert "cannot both read standard input" in both.stderr


def flat(path: str, value, **spec) -> Flat:
    return Flat(path=path, value=value, spec=FieldSpec(**spec), line=None)


def test_suggested_tolerances_hold_every_run_with_room_and_name_exact_fields_that_moved():
    timing = dict(type="float", compare=Compare.tolerance, rel=0.01)
    runs = [[flat("ms", v, **timing), flat("n", 5, type="int"), flat("gbps", g, type="float"),
             flat("zero", z, type="float", compare=Compare.tolerance, abs=0.001)]
            for v, g, z in ((1.0, 100.0, 0.0), (1.1, 101.0, 0.002), (0.95, 100.0, 0.0))]
    by_path = {s.path: s for s in suggest_tolerances(runs)}
    assert set(by_path) == {"ms", "gbps", "zero"}     # n never moved and is exact: nothing to say
    ms = by_path["ms"]
    assert (ms.low, ms.high, ms.median, ms.runs) == (0.95, 1.1, 1.0, 3)
    assert round(ms.deviation, 6) == 0.1 and not ms.holds and ms.suggested == "rel: 0.2"
    assert by_path["gbps"].suggested == "compare: tolerance, rel: 0.02"
    assert by_path["zero"].suggested == "abs: 0.004" and not by_path["zero"].holds
    assert [round_up(x) for x in (0.0734, 0.147, 0.2, 0.0)] == [0.074, 0.15, 0.2, 0.0]


def test_record_repeat_suggests_tolerances_from_the_spread_and_leaves_the_manifest_alone(
        course, fake_gpu, prebuilt, monkeypatch, tmp_path):
    made = course([LESSON], sanitizers={})
    for k, value in enumerate(("6589.1", "6300.0", "6900.0")):
        edited(made, f"transcripts/{LESSON}.txt.{k}", TILED, TILED.replace("6589.1", value))
    monkeypatch.setenv("STANDIN_ROTATE", str(tmp_path / "counter"))
    manifest = made.manifest.read_text()
    result = coursectl("record", LESSON, "--repeat", "3", "--no-sanitize")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "counter").read_text().strip() == "3"
    assert (f"{LESSON}: tolerances suggested by the spread of 3 runs (lessons.yaml is not changed; "
            "docs/authoring.md, Tolerances):") in result.stdout
    assert ("  cases[611x613x617/tiled].gflops: 6300 to 6900, median 6589.1, furthest run 4.7% from it; "
            "now tolerance ±25% (holds every run); suggest rel: 0.095") in result.stdout
    assert made.manifest.read_text() == manifest
    # one run measures no spread, so it suggests nothing
    monkeypatch.delenv("STANDIN_ROTATE")
    assert "tolerances suggested" not in coursectl("record", LESSON, "--no-sanitize").stdout
