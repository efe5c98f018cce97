"""`runs:`: one lesson's program run several ways, each run a lesson of its own, `id[run]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import coursectl, edit_lessons, fixture_course

from orchestrator.errors import ManifestError
from orchestrator.manifest.load import load_manifest
from orchestrator.manifest.model import Manifest
from orchestrator.manifest.selection import choose_lessons

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "runs"

# The fixture's program in two modes, as a host program that runs without a GPU (the stand-in's
# nvidia-smi is all the machine has): the same lines, "shared" a little faster.
HOST = r'''#include <cstdio>
#include <cstring>
int main(int argc, char** argv) {
    bool shared = argc > 1 && std::strcmp(argv[1], "shared") == 0;
    std::printf("mode = %s\nheat = 204800.000\ncentre = 99.5000\nms = %.4f\n", shared ? "shared" : "basic",
                shared ? 1.5 : 2.5);
}
'''


@pytest.fixture
def runs_course(tmp_path, monkeypatch) -> Path:
    return fixture_course(FIXTURE, tmp_path, monkeypatch)


def _host(root: Path) -> None:
    """The lesson's program made the host program above, with no sanitizer pass."""
    (root / "lessons/day01-heat/heat.cpp").write_text(HOST)

    def change(data):
        data["lessons"][0].update(source="lessons/day01-heat/heat.cpp", sanitizers={})
    edit_lessons(root, change)


def test_runs_are_lessons_of_their_own(runs_course):
    manifest = load_manifest(runs_course / "lessons.yaml")
    assert [lesson.id for lesson in manifest.lessons] == ["day01-heat[basic]", "day01-heat[shared]"]
    basic, shared = manifest.lessons
    assert (basic.args, shared.args) == ([], ["shared"])
    assert basic.source == shared.source and basic.group == shared.group == "day01-heat"
    assert [claim.id for claim in shared.claims] == ["heat-is-kept"]
    assert [claim.id for claim in manifest.run_claims["day01-heat"]] == ["same-temperatures", "shared-is-faster"]
    assert manifest.warnings == []   # one lesson, one day: no duplicate-day warning
    # A key of a run is found at its line in lessons.yaml.
    assert manifest.line_of("lessons", 1, "claims", 0) == manifest.line_of("lessons", 0, "claims", 0) is not None


def test_k_and_ids_name_a_run_or_all_runs(runs_course):
    manifest = load_manifest(runs_course / "lessons.yaml")

    def chosen(ids=None, keyword=None) -> list[str]:
        return [lesson.id for lesson in choose_lessons(manifest, ids, all_=False, keyword=keyword)]
    assert chosen(keyword="day01-heat[shared]") == ["day01-heat[shared]"]
    assert chosen(keyword="[shared]") == ["day01-heat[shared]"]
    assert chosen(keyword="not [shared]") == ["day01-heat[basic]"]
    assert chosen(ids=["day01-heat"]) == ["day01-heat[basic]", "day01-heat[shared]"]
    assert chosen(ids=["day01-heat[basic]"]) == ["day01-heat[basic]"]


@pytest.mark.parametrize("change, words", [
    (lambda lesson: lesson.update(runs={}), "an empty mapping"),
    (lambda lesson: lesson.update(runs={"Shared!": []}), "run name 'Shared!'"),
    (lambda lesson: lesson["claims"].append({"id": "x", "gate": "runs.tiled.ms < 1"}), "names run 'tiled'"),
    (lambda lesson: lesson.pop("runs"), "but the lesson has no 'runs'"),
    (lambda lesson: lesson.update(run="basic"), "unknown key 'run'"),
])
def test_bad_runs_are_named(runs_course, change, words):
    edit_lessons(runs_course, lambda data: change(data["lessons"][0]))
    with pytest.raises(ManifestError) as caught:
        load_manifest(runs_course / "lessons.yaml")
    assert words in str(caught.value) and "lessons.yaml:" in str(caught.value)


def test_manifest_without_runs_is_unchanged():
    assert Manifest.model_fields["run_claims"].exclude


@pytest.mark.slow
def test_record_then_verify_each_run_with_its_own_evidence(runs_course, monkeypatch, fake_gpu):
    _host(runs_course)
    monkeypatch.chdir(runs_course)
    recorded = coursectl("record", "--all")
    assert recorded.exit_code == 0, recorded.stdout + recorded.stderr
    for run, mode in (("basic", "basic"), ("shared", "shared")):
        folders = list((runs_course / "evidence" / f"day01-heat[{run}]").glob("*/transcript.txt"))
        assert folders and f"mode = {mode}" in folders[0].read_text()
    verified = coursectl("verify", "--all", "--offline")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    assert "day01-heat[basic]" in verified.stdout and "day01-heat[shared]" in verified.stdout


@pytest.mark.slow
def test_a_claim_across_runs_gates_every_run(runs_course, monkeypatch, fake_gpu):
    _host(runs_course)
    monkeypatch.chdir(runs_course)
    assert coursectl("record", "--all").exit_code == 0
    verified = coursectl("verify", "--all", "--offline")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    edit_lessons(runs_course, lambda data: data["lessons"][0]["claims"].append(
        {"id": "basic-is-faster", "gate": "runs.basic.ms < runs.shared.ms"}))
    for command in (("verify", "--all", "--offline"), ("verify", "--all")):
        again = coursectl(*command)
        assert again.exit_code == 1, again.stdout + again.stderr
        assert "gate 'basic-is-faster' failed across the runs of day01-heat" in again.stdout, again.stdout
        assert "runs.basic.ms < runs.shared.ms is false" in again.stdout


def test_claims_across_runs_read_each_runs_fields():
    from orchestrator.manifest.model import Claim
    from orchestrator.transcript.across import evaluate_across
    from orchestrator.transcript.parse import parse_transcript
    from orchestrator.transcript.schema import OutputSchema
    schema = OutputSchema.model_validate({"items": [{"line": "ms = {ms:float}"}]})
    transcripts = {"basic": parse_transcript(schema, "ms = 2.0\n", "t"),
                   "shared": parse_transcript(schema, "ms = 1.0\n", "t")}
    held, failed = evaluate_across(schema, transcripts, [Claim(id="a", gate="runs.shared.ms < runs.basic.ms"),
                                                         Claim(id="b", gate="runs.basic.ms < runs.shared.ms")])
    assert held.held and not failed.held


@pytest.mark.slow
def test_one_page_shows_the_runs_side_by_side(runs_course, monkeypatch, fake_gpu):
    _host(runs_course)
    monkeypatch.chdir(runs_course)
    assert coursectl("record", "--all").exit_code == 0
    rendered = coursectl("render")
    assert rendered.exit_code == 0, rendered.stdout + rendered.stderr
    page = (runs_course / "lessons/day01-heat/README.md").read_text()
    assert "## The runs side by side" in page
    assert "| `basic` | `./heat` |" in page and "| `shared` | `./heat shared` |" in page
    assert "mode = basic" in page and "mode = shared" in page
    index = (runs_course / "README.md").read_text()
    assert "runs `basic`, `shared` | `basic`: NVIDIA H200, " in index and "<br>`shared`: NVIDIA H200, " in index
    assert coursectl("render", "--check").exit_code == 0


@pytest.mark.slow
def test_record_exits_1_for_a_failed_gate_across_runs(runs_course, monkeypatch, fake_gpu):
    _host(runs_course)
    edit_lessons(runs_course, lambda data: data["lessons"][0]["claims"].append(
        {"id": "results-differ", "gate": "runs.basic.heat != runs.shared.heat"}))
    monkeypatch.chdir(runs_course)
    recorded = coursectl("record", "--all")
    assert recorded.exit_code == 1, recorded.stdout + recorded.stderr
    assert "gate 'results-differ' failed across the runs of day01-heat" in recorded.stdout


def _evidence_bytes(root: Path, lesson_id: str) -> dict[str, bytes]:
    folder = root / "evidence" / lesson_id
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def _with_a_lesson_of_one_run(root: Path) -> None:
    """A second lesson beside day01-heat: the same program, run once, with no claim across runs."""
    def change(data):
        other = {key: value for key, value in data["lessons"][0].items() if key not in ("runs", "claims")}
        other.update(id="day02-once", title="The same program, run once", day=2,
                     claims=[{"id": "heat-is-kept", "gate": "abs(heat - 204800) < 1"}])
        data["lessons"].append(other)
    edit_lessons(root, change)


def test_record_stores_no_run_of_a_lesson_whose_gate_across_runs_fails(runs_course, monkeypatch, fake_gpu):
    _host(runs_course)
    _with_a_lesson_of_one_run(runs_course)
    monkeypatch.chdir(runs_course)
    assert coursectl("record", "--all").exit_code == 0
    runs = ["day01-heat[basic]", "day01-heat[shared]"]
    before = {run: _evidence_bytes(runs_course, run) for run in runs}
    assert all(before.values())
    once = _evidence_bytes(runs_course, "day02-once")
    # The program changed (a record would write another transcript), and a gate across the runs now fails.
    heat = runs_course / "lessons/day01-heat/heat.cpp"
    heat.write_text(heat.read_text().replace("shared ? 1.5 : 2.5", "shared ? 1.4 : 2.6"))
    edit_lessons(runs_course, lambda data: data["lessons"][0]["claims"].append(
        {"id": "results-differ", "gate": "runs.basic.heat != runs.shared.heat"}))
    recorded = coursectl("record", "--all")
    assert recorded.exit_code == 1, recorded.stdout + recorded.stderr
    for run in runs:
        assert (f"{run}: not recorded: gate 'results-differ' failed across the runs of day01-heat, so no run of "
                f"day01-heat was recorded; the previous evidence is untouched") in recorded.stdout, recorded.stdout
        assert _evidence_bytes(runs_course, run) == before[run], run
    assert _evidence_bytes(runs_course, "day02-once") != once   # another lesson is recorded all the same
    assert "mode = basic" in next((runs_course / "evidence/day02-once").glob("*/transcript.txt")).read_text()


def _counted(monkeypatch) -> tuple[dict[str, int], list[int]]:
    """How many times each lesson's result is settled, and how many transcripts are parsed."""
    from orchestrator.judge import results
    from orchestrator.transcript import parse
    settled: dict[str, int] = {}
    parsed: list[int] = []
    coverage = results.coverage

    def counting_coverage(result):   # settle's last step, once a call whoever imported settle
        settled[result.lesson] = settled.get(result.lesson, 0) + 1
        return coverage(result)

    class Counted(parse.Transcript):
        def __init__(self, **data):
            parsed.append(1)
            super().__init__(**data)
    monkeypatch.setattr(results, "coverage", counting_coverage)
    monkeypatch.setattr(parse, "Transcript", Counted)
    return settled, parsed


@pytest.mark.parametrize("offline", [False, True])
def test_claims_across_runs_are_judged_before_each_run_settles_once(runs_course, monkeypatch, fake_gpu, offline):
    import json
    _host(runs_course)
    monkeypatch.chdir(runs_course)
    settled, parsed = _counted(monkeypatch)
    assert coursectl("record", "--all").exit_code == 0
    assert settled == {"day01-heat[basic]": 1, "day01-heat[shared]": 1}
    assert len(parsed) == 2, "each run's transcript parsed once, claims across runs included"
    settled.clear()
    verified = coursectl("verify", "--all", *(["--offline"] if offline else []), "--json", "report.json")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    assert settled == {"day01-heat[basic]": 1, "day01-heat[shared]": 1}
    report = json.loads((runs_course / "report.json").read_text())
    assert [lesson["lesson"] for lesson in report["results"]] == ["day01-heat[basic]", "day01-heat[shared]"]
    for lesson in report["results"]:
        assert lesson["status"] == "PASS"
        held = {claim["id"]: claim["held"] for claim in lesson["claims"]}
        assert held["same-temperatures"] is True and held["shared-is-faster"] is True, held


def _results_with(manifest, text: dict[str, str]):
    from orchestrator.judge.results import LessonResult
    from orchestrator.transcript.parse import parse_transcript
    return {run.id: LessonResult(lesson=run.id, transcripts={"nvidia-h200": parse_transcript(
        run.output, text[run.run], run.id)}) for run in manifest.lessons}


BASIC = "mode = basic\nheat = 204800.0\ncentre = 99.5\nms = 2.5\n"


def test_a_gathering_judges_once_when_the_last_run_arrives(runs_course):
    import threading
    from orchestrator.workflows.gathering import gatherings
    manifest = load_manifest(runs_course / "lessons.yaml")
    [gathering] = gatherings(manifest, manifest.lessons, threading.Event()).values()
    results = _results_with(manifest, {"basic": BASIC, "shared": BASIC.replace("99.5", "99.0")})
    said: list[str] = []
    first = threading.Thread(target=gathering.arrive, args=("day01-heat[basic]", results["day01-heat[basic]"],
                                                            said.append))
    first.start()
    first.join(0.3)
    assert first.is_alive() and results["day01-heat[basic]"].claims == []   # waits for the other run
    assert said == ["for day01-heat[shared]: claims across the runs of day01-heat"]
    assert gathering.arrive("day01-heat[shared]", results["day01-heat[shared]"], said.append) < 0.3   # the last
    assert len(said) == 1
    first.join(5)
    assert not first.is_alive()
    assert gathering.failed == ["same-temperatures"]
    for result in results.values():
        assert [(c.id, c.held) for c in result.claims] == [("same-temperatures", False), ("shared-is-faster", False)]
        assert result.reasons[0].startswith("gate 'same-temperatures' failed across the runs of day01-heat")
        assert result.notes[0].startswith("expect 'shared-is-faster' failed across the runs of day01-heat")


def test_a_gathering_lets_its_runs_go_when_one_never_arrives(runs_course):
    import threading
    from orchestrator.workflows.gathering import gatherings
    manifest = load_manifest(runs_course / "lessons.yaml")
    assert gatherings(manifest, manifest.lessons[:1], threading.Event()) == {}   # one run chosen: none
    stopping = threading.Event()
    for ends in ("leaves", "stopped"):
        [gathering] = gatherings(manifest, manifest.lessons, stopping).values()
        results = _results_with(manifest, {"basic": BASIC, "shared": BASIC})
        waiting = threading.Thread(target=gathering.arrive,
                                   args=("day01-heat[basic]", results["day01-heat[basic]"]))
        waiting.start()
        if ends == "leaves":   # skipped, unsupported, failed to build, crashed: its turn ends without arriving
            gathering.leave("day01-heat[shared]")
        else:
            stopping.set()     # Ctrl-C
        waiting.join(5)
        assert not waiting.is_alive(), ends
        assert results["day01-heat[basic]"].claims == [] and gathering.failed == []
        gathering.leave("day01-heat[basic]")   # a run that arrived: leaving changes nothing


def test_the_index_and_the_page_name_the_lesson_and_list_its_runs(runs_course):
    from orchestrator.render.course import render_all
    _host(runs_course)
    _with_a_lesson_of_one_run(runs_course)
    (runs_course / "lessons/day02-once").mkdir()
    edit_lessons(runs_course, lambda data: data["lessons"][1].update(page={"path": "lessons/day02-once/README.md"}))

    def rendered() -> dict[str, str]:
        return {page.name: page.new for page in render_all(load_manifest(runs_course / "lessons.yaml"))}
    pages = rendered()
    index = pages["README.md"]
    assert ("| 1 | [One heat-diffusion step, from global and from shared memory](lessons/day01-heat/README.md), "
            "runs `basic`, `shared` | `basic`: no evidence yet<br>`shared`: no evidence yet |\n") in index
    assert "| 2 | [The same program, run once](lessons/day02-once/README.md) | no evidence yet |\n" in index
    assert index.count("lessons/day01-heat/README.md") == 1
    page = pages["lessons/day01-heat/README.md"]
    assert "`coursectl record day01-heat` on a GPU records it" in page   # the lesson, every run of it
    assert "evidence/day01-heat[basic]/ and evidence/day01-heat[shared]/: edit those" in page.splitlines()[0]
    # The page's neighbours are the other lessons, never its own second run.
    assert page.splitlines()[3] == ("[All lessons](../../README.md#lessons) · Next: [Day 2: The same program, "
                                    "run once](../day02-once/README.md)")
    assert "Previous: [Day 1: One heat-diffusion step, from global and from shared memory](../day01-heat/README.md)" \
        in pages["lessons/day02-once/README.md"]
    (runs_course / "templates/index.md.j2").write_text(
        "{% for row in lessons %}{{ row.lesson.id }}:{% for r in row.runs %} {{ r.id | shell }}{% endfor %}; "
        "{% endfor %}")
    assert "day01-heat: 'day01-heat[basic]' 'day01-heat[shared]'; day02-once:; " in rendered()["README.md"]


def test_a_command_printed_for_a_run_quotes_its_id_for_the_shell(runs_course, monkeypatch):
    """`coursectl record day01-heat[basic]` pasted into a shell is a glob: the hint quotes the id."""
    import shlex
    from orchestrator.words import command_line
    assert command_line("coursectl", "record", "day01-heat[basic]") == "coursectl record 'day01-heat[basic]'"
    assert shlex.split(command_line("coursectl", "check", "a b", "it's")) == ["coursectl", "check", "a b", "it's"]
    _host(runs_course)
    monkeypatch.chdir(runs_course)
    verified = coursectl("verify", "--all", "--offline")
    for run in ("basic", "shared"):
        assert f"run `coursectl record 'day01-heat[{run}]'` on a GPU" in verified.stdout, verified.stdout
    assert "coursectl record day01-heat[" not in verified.stdout
