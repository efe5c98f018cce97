"""GitHub Actions: annotations at the lines they are about, and the step summary."""

from __future__ import annotations

import re

import pytest

from conftest import COURSE
from conftest import GPU_SLUG, ROOT, coursectl, edit, lines, unverified
from orchestrator.cli.annotations import SUMMARY_LIMIT, command, commands_stopped, step_summary, workflow_commands
from orchestrator.transcript.claims import ClaimResult
from orchestrator.judge.comparison import FieldResult, FieldStatus
from orchestrator.manifest.load import load_manifest
from orchestrator.judge.results import LessonResult, PassResult, Status
from orchestrator.cuda.sanitizer import Finding, Report, Summary
from orchestrator.manifest.passes import Tool


def test_values_are_escaped_as_workflow_commands_require():
    assert command("error", "50% done\r\nnext", "a,b.cu", 3, "x: y, z") == (
        "::error file=a%2Cb.cu,line=3,title=x%3A y%2C z::50%25 done%0D%0Anext")
    assert command("warning", "plain") == "::warning::plain"


@pytest.fixture(scope="module")
def manifest():
    return load_manifest(COURSE / "lessons.yaml")


def line_of(text: str, needle: str, after: int = 0) -> int:
    """The 1-based number of the first line of lessons.yaml holding `needle`, after line `after`."""
    rows = (COURSE / "lessons.yaml").read_text().splitlines()
    return next(n for n, row in enumerate(rows, 1) if n > after and needle in row)


def test_each_failure_is_annotated_at_its_line(manifest):
    day16 = line_of("", "- day16-tiled-matmul:")
    gate = ClaimResult(id="shared-memory-is-two-tiles", kind="gate", says="two tiles", expression="e", held=False,
                       failures=["smem_bytes == 2048 is false (smem_bytes = 2112)"])
    expect = ClaimResult(id="tiled-is-faster", kind="expect", says="", expression="tiled < naive", held=False,
                         failures=["[256x256x256]: tiled < naive is false"])
    moved = FieldResult(path="cases[256x256x256/naive].ms", rule="tolerance ±25%", old=0.025, new=0.1, ratio=4.0,
                        status=FieldStatus.moved)
    race = Finding(tool=Tool.RACECHECK, kind="Race", severity="error", text="Race between write and read",
                   kernel="matmulTiled", file="/build/lessons/day16-tiled-matmul/tiled_matmul.cu", line=97)
    report = Report(tool=Tool.RACECHECK, exit_status=86, summary=Summary(tool=Tool.RACECHECK, errors=1),
                    findings=[race])
    results = [
        LessonResult(lesson="day16-tiled-matmul", status=Status.FAIL, gpu=GPU_SLUG, claims=[gate, expect],
                     fields=[moved], sanitizers=[PassResult(tool="racecheck", problems=["racecheck: unexpected"],
                                                            report=report)]),
        LessonResult(lesson="day71-matmul-fp16", status=Status.NO_EVIDENCE, gpu=GPU_SLUG,
                     unverified="no evidence for nvidia-h200 yet"),
    ]
    claims = line_of("", "claims:", day16)
    assert workflow_commands(manifest, results) == [
        f"::error file=lessons.yaml,line={line_of('', '- shared-memory-is-two-tiles:', claims)},"
        "title=day16-tiled-matmul%3A gate shared-memory-is-two-tiles failed::"
        "two tiles: smem_bytes == 2048 is false (smem_bytes = 2112)",
        f"::warning file=lessons.yaml,line={line_of('', '- tiled-is-faster:', claims)},"
        "title=day16-tiled-matmul%3A prediction tiled-is-faster failed::[256x256x256]: tiled < naive is false",
        f"::error file=lessons.yaml,line={line_of('', 'table: cases', day16)},"
        "title=day16-tiled-matmul%3A cases[256x256x256/naive].ms moved::"
        "moved [tolerance ±25%25]: evidence 0.025, now 0.1",
        "::error file=lessons/day16-tiled-matmul/tiled_matmul.cu,line=97,"
        "title=day16-tiled-matmul%3A racecheck%3A unexpected Race in matmulTiled::Race between write and read",
        f"::warning file=lessons.yaml,line={line_of('', '- day71-matmul-fp16:')},"
        "title=day71-matmul-fp16%3A no evidence::no evidence for nvidia-h200 yet",
    ]


def test_a_failure_without_a_line_of_its_own_is_annotated_at_its_lesson_with_its_reason(manifest):
    edited = ("evidence for nvidia-h200: evidence/day16-tiled-matmul/nvidia-h200/transcript.txt: transcript does not "
              "match the sha256 in meta.json: it was edited after recording")
    results = [
        LessonResult(lesson="day13-shared-memory", status=Status.CRASH, gpu=GPU_SLUG,
                     reasons=["killed by SIGSEGV\nits last lines: ..."]),
        LessonResult(lesson="day16-tiled-matmul", status=Status.FAIL, reasons=[edited]),
        LessonResult(lesson="day71-matmul-fp16", status=Status.PASS, gpu=GPU_SLUG),
    ]
    assert workflow_commands(manifest, results) == [
        f"::error file=lessons.yaml,line={line_of('', '- day13-shared-memory:')},"
        "title=day13-shared-memory%3A CRASH::killed by SIGSEGV",
        f"::error file=lessons.yaml,line={line_of('', '- day16-tiled-matmul:')},"
        f"title=day16-tiled-matmul%3A FAIL::{edited}",
    ]


def test_the_step_summary_has_the_verdicts_the_moved_fields_and_the_page_links(manifest, monkeypatch):
    for name, value in (("GITHUB_SERVER_URL", "https://github.com"), ("GITHUB_REPOSITORY", "o/course"),
                        ("GITHUB_SHA", "abc123")):
        monkeypatch.setenv(name, value)
    moved = FieldResult(path="kernels[copyRowMajor].gbps", rule="tolerance ±25%", old=2961.7, new=1000.0,
                        ratio=0.34, status=FieldStatus.moved)
    results = [LessonResult(lesson="day13-shared-memory", status=Status.FAIL, gpu=GPU_SLUG, seconds=2.9,
                            fields=[moved], reasons=["1 field(s) differ from the nvidia-h200 evidence:\n  ..."]),
               LessonResult(lesson="day14-syncthreads", status=Status.PASS, gpu=GPU_SLUG, seconds=6.1)]
    text = step_summary(manifest, results, "verify", "1 passed, 1 failed in 9.0 s")
    assert text == (
        "## coursectl verify\n\n1 passed, 1 failed in 9.0 s\n\n"
        "| lesson | status | GPU | time | why |\n| --- | --- | --- | ---: | --- |\n"
        "| [day13-shared-memory](https://github.com/o/course/blob/abc123/lessons/day13-shared-memory/README.md) "
        "| FAIL | nvidia-h200 | 2.9 s | 1 field(s) differ from the nvidia-h200 evidence: |\n"
        "| [day14-syncthreads](https://github.com/o/course/blob/abc123/lessons/day14-syncthreads/README.md) "
        "| PASS | nvidia-h200 | 6.1 s |  |\n"
        "\n### day13-shared-memory: FAIL\n\n"
        "| field | rule | evidence | now | result |\n| --- | --- | ---: | ---: | --- |\n"
        "| `kernels[copyRowMajor].gbps` | tolerance ±25% | 2961.7 | 1000.0 | moved |\n")


def test_the_step_summary_stays_under_githubs_limit(manifest):
    results = [LessonResult(lesson=f"day{n:04d}", status=Status.FAIL, reasons=["x" * 3000]) for n in range(2000)]
    text = step_summary(manifest, results, "verify", "0 passed, 2000 failed in 1.0 s")
    assert len(text.encode()) <= SUMMARY_LIMIT
    assert text.endswith("the rest is cut: GitHub keeps step summaries under 1 MiB; see the JSON report.\n")


def test_under_github_actions_verify_annotates_and_writes_the_summary(course, fake_gpu, prebuilt, monkeypatch,
                                                                     tmp_path):
    made = course(["day13-shared-memory", "day16-tiled-matmul"])
    assert coursectl("record", "day16-tiled-matmul", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.100")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    rows = made.manifest.read_text().splitlines()
    day13 = next(n for n, row in enumerate(rows, 1) if "id: day13-shared-memory" in row)
    commands = [line for line in lines(result.stdout) if line.startswith("::")]
    assert commands[0] == f"::stop-commands::{token(commands)}" and commands[1] == f"::{token(commands)}::"
    assert commands[2:] == [
        f"::warning file=lessons.yaml,line={day13},title=day13-shared-memory%3A no evidence::"
        + unverified("day13-shared-memory").removeprefix("day13-shared-memory: "),
        f"::error file=lessons.yaml,line={next(n for n, row in enumerate(rows, 1) if 'table: cases' in row)},"
        "title=day16-tiled-matmul%3A cases[256x256x256/naive].ms moved::"
        "moved [tolerance ±25%25 + ±0.003]: evidence 0.025, now 0.1"]
    written = summary.read_text()
    assert written.startswith("earlier step\n## coursectl verify\n\n0 passed, 1 without evidence, 1 failed in ")
    assert "| [day16-tiled-matmul](lessons/day16-tiled-matmul/README.md) | FAIL |" in written


def test_a_course_in_a_folder_of_the_repository_is_annotated_at_its_path_there(make_course, fake_gpu, prebuilt,
                                                                               monkeypatch, tmp_path):
    """GitHub takes a file relative to the repository's checkout: `lessons.yaml` named a file the repository
    lacks when the course lies in course/ of it."""
    made = make_course(["day16-tiled-matmul"])
    monkeypatch.chdir(made.root)
    assert coursectl("record", "day16-tiled-matmul", "-q").exit_code == 0
    edit(made.transcript("day16-tiled-matmul"), "naive         0.025", "naive         0.100")
    monkeypatch.chdir(tmp_path)
    for name, value in (("GITHUB_ACTIONS", "true"), ("GITHUB_WORKSPACE", str(tmp_path)),
                        ("GITHUB_SERVER_URL", "https://github.com"), ("GITHUB_REPOSITORY", "o/course"),
                        ("GITHUB_SHA", "abc123"), ("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))):
        monkeypatch.setenv(name, value)
    result = coursectl("verify", "--all", "-q", "-m", "course/lessons.yaml")
    assert result.exit_code == 1
    rows = made.manifest.read_text().splitlines()
    assert [line.split(",title=")[0] for line in lines(result.stdout) if line.startswith("::")][2:] == [
        f"::error file=course/lessons.yaml,line={next(n for n, row in enumerate(rows, 1) if 'table: cases' in row)}"]
    assert ("| [day16-tiled-matmul](https://github.com/o/course/blob/abc123/course/lessons/day16-tiled-matmul/"
            "README.md) | FAIL |") in (tmp_path / "summary.md").read_text()


def token(commands: list[str]) -> str:
    """The token of the run's `::stop-commands::TOKEN`: 32 hex digits, new each run."""
    found = re.fullmatch(r"::stop-commands::([0-9a-f]{32})", commands[0])
    assert found, commands[0]
    return found[1]


def test_a_lessons_lines_quoted_in_a_failure_are_never_taken_for_workflow_commands(course, fake_gpu, prebuilt,
                                                                                  monkeypatch):
    """A lesson printing `::add-mask::...` or `::error::...`, quoted in its failure's last lines, would be
    carried out by the runner: every line of the run up to coursectl's own annotations is printed with
    workflow commands stopped."""
    course(["fail"])
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = coursectl("verify", "--all", "-q")
    assert result.exit_code == 1
    out = lines(result.stdout)
    run_token = token([line for line in out if line.startswith("::")])
    stop, resume = out.index(f"::stop-commands::{run_token}"), out.index(f"::{run_token}::")
    quoted = out.index("stdout (last lines):")
    first_annotation = next(n for n, line in enumerate(out) if line.startswith("::error "))
    assert stop < quoted < resume < first_annotation


def test_workflow_commands_resume_when_the_run_ends_in_an_error(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    printed = []
    with pytest.raises(RuntimeError):
        with commands_stopped(printed.append):
            printed.append("::error::from a lesson")
            raise RuntimeError
    assert printed == [printed[0], "::error::from a lesson", f"::{printed[0].removeprefix('::stop-commands::')}::"]
    monkeypatch.delenv("GITHUB_ACTIONS")
    with commands_stopped(printed.append):
        pass
    assert len(printed) == 3   # nothing printed off GitHub Actions


def test_without_github_actions_nothing_is_annotated(course, fake_gpu, prebuilt, monkeypatch):
    course(["day13-shared-memory"])
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    result = coursectl("verify", "--all", "-q")
    assert not [line for line in lines(result.stdout) if line.startswith("::")]


def test_the_step_summary_links_a_page_where_its_lesson_puts_it(monkeypatch):
    for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"):
        monkeypatch.delenv(name, raising=False)
    manifest = load_manifest(ROOT / "tests" / "data" / "multi" / "lessons.yaml")
    results = [LessonResult(lesson="day01-saxpy", status=Status.PASS, gpu=GPU_SLUG),
               LessonResult(lesson="day02-sum", status=Status.PASS, gpu=GPU_SLUG)]
    text = step_summary(manifest, results, "verify", "2 passed, 0 failed in 1.0 s")
    assert "| [day01-saxpy](lessons/saxpy/README.md) | PASS |" in text           # its page.path
    assert "| [day02-sum](lessons/ext/README.md) | PASS |" in text                 # beside its source


def test_annotations_stop_at_what_github_shows_and_say_how_many_more():
    """17 broken gates printed 24 `::error` lines in one step; GitHub shows 10 and dropped the rest unsaid."""
    from orchestrator.cli.annotations import capped

    errors = [command("error", f"gate {n} failed", "lessons.yaml", n) for n in range(24)]
    warnings = [command("warning", f"prediction {n} failed", "lessons.yaml", 100 + n) for n in range(3)]
    out = capped(errors[:5] + warnings + errors[5:])
    assert out[:-1] == errors[:5] + warnings + errors[5:10]
    assert out[-1] == ("::notice title=coursectl%3A more annotations in the step summary::14 more errors not "
                       "annotated: GitHub shows 10 errors and 10 warnings a step; the step summary and the log "
                       "above have every one")
    assert capped(errors[:10] + warnings) == errors[:10] + warnings   # none left out: no notice
    many = capped(errors[:11] + [command("warning", "w")] * 12)
    assert many[-1].endswith("::1 more error and 2 more warnings not annotated: GitHub shows 10 errors and 10 "
                             "warnings a step; the step summary and the log above have every one")


def test_a_run_with_more_failures_than_github_shows_prints_ten_errors_and_a_notice(make_course, monkeypatch,
                                                                                   tmp_path):
    from orchestrator.cli.annotations import publish

    made = make_course(["day13-shared-memory"])
    manifest = made.load()
    fields = [FieldResult(path=f"f{n}", rule="exact", old=1, new=2, status=FieldStatus.moved) for n in range(17)]
    results = [LessonResult(lesson="day13-shared-memory", status=Status.FAIL, gpu=GPU_SLUG, fields=fields)]
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    printed: list[str] = []
    publish(manifest, results, "verify", "0 passed, 1 failed in 1.0 s", printed.append)
    assert [line.split(" ", 1)[0] for line in printed] == ["::error"] * 10 + ["::notice"]
    assert "7 more errors not annotated" in printed[-1]
    assert all(f"f{n}" in (tmp_path / "summary.md").read_text() for n in range(17))
