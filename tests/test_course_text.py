"""What crosses the course's boundary as text: evidence values that land in a page or a source, the terminal's width
and locale, names that hide a character, paths of the machine, and a manifest of many lessons.

Each case works in a course of its own under tmp_path and checks that nothing outside that course changed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import coursectl, snapshot

COURSECTL = Path(sys.executable).parent / "coursectl"
META = "evidence/day13-shared-memory/nvidia-h200/meta.json"
SOURCE = "lessons/day13-shared-memory/shared_memory.cu"


def outside(tmp_path: Path, root: Path) -> dict[str, bytes]:
    """Every file under tmp_path but the course's own."""
    prefix = root.relative_to(tmp_path).parts[0] + os.sep
    return {name: data for name, data in snapshot(tmp_path).items() if not name.startswith(prefix)}


def set_meta(root: Path, **fields) -> None:
    path = root / META
    meta = json.loads(path.read_text())
    meta.update(fields)
    path.write_text(json.dumps(meta, indent=2) + "\n")


# -- evidence values that land in a page or a source ------------------------------------------------
BAD_META = [
    ("gpu_name", 'NVIDIA H200\nint hijack = system("id");',
     "gpu_name: 'NVIDIA H200\\nint hijack = system(\"id\");' holds a line break or control character; "
     "it is one line of text"),
    ("gpu_name", "NVIDIA\x1b[2J H200",
     "gpu_name: 'NVIDIA\\x1b[2J H200' holds a line break or control character; it is one line of text"),
    ("driver_version", "580\u2028int x;",
     "driver_version: '580\\u2028int x;' holds a line break or control character; it is one line of text"),
    ("date", "not a date at all",
     "date: 'not a date at all' is not an ISO 8601 date or date and time (2026-11-30T11:18:15+00:00)"),
    ("date", "2026-02-30",
     "date: '2026-02-30' is not an ISO 8601 date or date and time (2026-11-30T11:18:15+00:00)"),
]


@pytest.mark.parametrize("field, value, message", BAD_META, ids=["newline", "escape", "line-separator",
                                                                   "words", "no-such-day"])
def test_evidence_fields_that_would_land_as_code_or_nonsense_are_bad_evidence(course_copy, tmp_path, field,
                                                                               value, message):
    root = Path.cwd()
    set_meta(root, **{field: value})
    before, around = snapshot(root), outside(tmp_path, root)
    reason = f"{META}: corrupt metadata: {message}"
    for command in (["render", "--check"], ["render"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr.splitlines()[0] == f"coursectl: error: {reason}"
    result = coursectl("verify", "day13-shared-memory", "--offline", "-q")
    assert result.exit_code == 1
    assert f"day13-shared-memory: evidence for nvidia-h200: {reason}" in result.stdout
    assert snapshot(root) == before and outside(tmp_path, root) == around
    assert "hijack" not in (root / SOURCE).read_text()


@pytest.mark.parametrize("form", ["{day}", "{day}T11:18:15Z", "{day}T11:18:15.5+05:30"])
def test_an_iso_date_of_any_written_form_is_evidence(course_copy, form):
    # The day the evidence was recorded, which the source's Verified line names, in another written form.
    day = json.loads((Path.cwd() / META).read_text())["date"][:10]
    set_meta(Path.cwd(), date=form.format(day=day))
    result = coursectl("verify", "day13-shared-memory", "--offline", "-q")
    assert result.exit_code == 0, result.stdout


def test_the_source_header_writer_keeps_each_line_one_comment_line_whatever_it_is_handed():
    from orchestrator.render.source_header import rewrite_header

    text = "// Day 1: a lesson\n\nint main() { return 0; }\n"
    lines = ["// Build: nvcc a.cu", "// Run:   ./a",
             '// Verified 2026-11-30 on H200\nint hijack = system("id");\r\v\u2028 x. Transcript: t \\']
    out = rewrite_header(text, lines)
    code = [line for line in out.splitlines() if not line.startswith("//")]
    assert code == ["", "int main() { return 0; }"]
    assert not out.splitlines()[3].endswith("\\")
    assert len(out.splitlines()) == len(text.splitlines()) + 4   # the three lines and the `//` before them


# -- the terminal's width and locale -----------------------------------------------------------------
@pytest.mark.parametrize("columns", ["0", "-5", "abc", "1", ""])
def test_every_message_prints_whatever_columns_says(course_copy, tmp_path, columns):
    root = Path.cwd()
    before, around = snapshot(root), outside(tmp_path, root)
    result = coursectl("verify", "day99-nothing", columns=columns)
    assert result.exit_code == 2
    assert "coursectl: error: " in result.stderr and "day99-nothing" in result.stderr
    result = coursectl("verify", "day14-syncthreads", "--offline", columns=columns)
    assert result.exit_code == 0
    assert "day14-syncthreads" in result.stdout and "0 passed, 1 re-judged, 0 failed in" in result.stdout
    assert snapshot(root) == before and outside(tmp_path, root) == around


def test_messages_print_in_full_under_a_dumb_terminal_and_columns_0(course_copy, tmp_path):
    root = Path.cwd()
    around = outside(tmp_path, root)
    done = subprocess.run([str(COURSECTL), "verify", "day99-nothing"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="0", TERM="dumb"))
    assert done.returncode == 2
    assert done.stderr.startswith("coursectl: error: ") and "day99-nothing" in done.stderr
    assert outside(tmp_path, root) == around


def test_new_writes_a_non_ascii_title_as_utf8_under_the_c_locale(course_copy, tmp_path):
    root = Path.cwd()
    around = outside(tmp_path, root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONIOENCODING="", COLUMNS="200")
    day = 1 + max(int(m) for m in re.findall(r"^  - day(\d+)-", (root / "lessons.yaml").read_text(encoding="utf-8"),
                                                re.MULTILINE))   # a day the course has no lesson for
    done = subprocess.run([str(COURSECTL), "new", f"day{day}-tuiles", "--title", "Tuiles partagées \u2014 \u2603"],
                          capture_output=True, timeout=120, env=env)
    assert (done.returncode, b"Traceback" in done.stderr) == (0, False), done.stderr
    assert f"- day{day}-tuiles: Tuiles partagées \u2014 \u2603\n" in (root / "lessons.yaml").read_text(encoding="utf-8")
    assert (root / f"lessons/day{day}-tuiles/prose.md").read_text(encoding="utf-8").startswith(
        "Tuiles partagées \u2014 \u2603: ")
    bad = subprocess.run([str(COURSECTL), "new", f"day{day + 1}-bad", "--title", b"bad \xff"], capture_output=True,
                         timeout=120, env=env)
    assert (bad.returncode, bad.stdout) == (2, b"")
    assert bad.stderr == b"coursectl: error: --title is not UTF-8 text; write it in UTF-8 (lessons.yaml and the " \
                         b"lesson's files are UTF-8)\n"
    assert not (root / f"lessons/day{day + 1}-bad").exists()
    assert outside(tmp_path, root) == around


# -- a manifest of many lessons ----------------------------------------------------------------------
def _short_form_course(root: Path, count: int) -> Path:
    """`count` lessons in the short form, sharing defaults, each with its folder: what relocate_lines moves."""
    lessons = []
    for day in range(1, count + 1):
        ident = f"day{day:04d}-tiles"
        (root / "lessons" / ident).mkdir(parents=True)
        (root / "lessons" / ident / "tiles.cu").write_text("int main() { return 0; }\n")
        lessons.append(f"  - {ident}: Tiles {day}\n"
                       f"    output:\n"
                       f"      - line: \"n = {{n:int}}\"\n"
                       f"      - line: \"t = {{t:float}} ms\"\n"
                       f"    claims:\n"
                       f"      - has-n: n is positive\n"
                       f"        gate: n > 0\n"
                       f"      - is-fast: it is quick\n"
                       f"        expect: t < 100\n")
    path = root / "lessons.yaml"
    path.write_text("version: 1\ncourse: many\narchitectures: [sm_90]\n"
                    "defaults:\n  output:\n    - line: \"GPU: {gpu:device}\"\n"
                    "  claims:\n    - has-gpu: the GPU is named\n      gate: len(gpu) > 0\n"
                    "lessons:\n" + "".join(lessons), encoding="utf-8")
    return path


def test_the_lines_of_the_short_forms_relocate_in_a_course_of_many_lessons(tmp_path):
    """relocate_lines scanned every line of the manifest for each lesson: 1,000 lessons took 57 s to load. What it
    costs per lesson is bench/manifest_load.py's to measure; here, that the last of 600 lessons gets its lines."""
    from orchestrator.manifest.shorthand import relocate_lines
    from orchestrator.manifest.yamlfile import load_yaml

    data, lines = load_yaml(_short_form_course(tmp_path / "600", 600))
    out = relocate_lines(data, lines)
    last = 599
    # the default gate joins before the lesson's prediction, each claim keeping the line it was written on
    assert out[("lessons", last, "claims", 0, "gate")] == 17 + 9 * last
    assert out[("lessons", last, "claims", 1, "gate")] == 9
    assert out[("lessons", last, "claims", 2, "id")] == 18 + 9 * last


def test_a_course_of_many_lessons_loads_naming_each_line(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    path = _short_form_course(root, 300)
    around = outside(tmp_path, root)
    from orchestrator.manifest.load import load_manifest

    manifest = load_manifest(path)
    assert len(manifest.lessons) == 300
    assert manifest.line_of("lessons", 299, "claims", 2, "expect") == 19 + 9 * 299
    assert outside(tmp_path, root) == around


# -- names that hide a character, and paths of the machine -------------------------------------------
def test_sanitizer_messages_name_the_course_path_not_the_machine_path(tmp_path):
    from test_sanitizer import oob_report

    from orchestrator.cuda.sanitizer import judge
    from orchestrator.manifest.passes import Expectation, Tool

    root = tmp_path / "course"
    (root / "lessons" / "faults").mkdir(parents=True)
    (root / "lessons" / "faults" / "oob.cu").write_text("__global__ void wr() {}\n")
    around = outside(tmp_path, root)
    report = oob_report()
    wanted = "memcheck: unexpected error in wr at lessons/faults/oob.cu:2 (28 reports): " \
             "Invalid __global__ write of size 4 bytes is out of bounds"
    for file in (str(root / "lessons" / "faults" / "oob.cu"),   # built here
                 "/home/ci/work/course/lessons/faults/oob.cu"):  # recorded on another machine
        findings = [f.model_copy(update={"file": file}) if f.kernel else f for f in report.findings]
        problems = judge(report.model_copy(update={"findings": findings}), Expectation(tool=Tool.MEMCHECK), root=root)
        assert problems[0] == wanted
    findings = [f.model_copy(update={"file": "/usr/include/x.h", "kernel": "w\u200br"}) if f.kernel else f
                for f in report.findings]
    problems = judge(report.model_copy(update={"findings": findings}), Expectation(tool=Tool.MEMCHECK), root=root)
    assert problems[0].startswith("memcheck: unexpected error in w\\u200br at /usr/include/x.h:2 ")
    assert outside(tmp_path, root) == around


def test_names_with_hidden_characters_are_shown_escaped():
    from orchestrator.words import quoted, shown

    assert shown("copyRow\u200bMajor") == "copyRow\\u200bMajor"
    assert shown("c\u043epy") == "c\\u043epy"            # a Cyrillic o
    assert shown("tab\there\n") == "tab\\there\\n"
    assert shown("a\\u200b") == "a\\\\u200b"             # typed, not hidden: told apart
    assert shown("x\U0001f600") == "x\\U0001f600"
    assert quoted("it's") == "'it\\'s'" and quoted(3) == "3"


HIDDEN_KEY_OUTPUT = """\
    output:
      - table: kernels
        header: "kernel ms"
        keys: [copyRow\u200bMajor, transposeNaive]
        columns: {kernel: word, ms: float}
"""


def _one_lesson_course(root: Path, output: str) -> Path:
    (root / "lessons" / "day01-one").mkdir(parents=True)
    (root / "lessons" / "day01-one" / "one.cu").write_text("int main() { return 0; }\n")
    (root / "lessons.yaml").write_text("version: 1\ncourse: c\narchitectures: [sm_90]\nlessons:\n"
                                       "  - day01-one: One\n" + output, encoding="utf-8")
    return root


def test_a_table_key_hiding_a_character_is_told_apart_from_the_one_printed(tmp_path, monkeypatch):
    root = _one_lesson_course(tmp_path / "course", HIDDEN_KEY_OUTPUT)
    transcript = tmp_path / "course" / "t.txt"
    transcript.write_text("kernel ms\ncopyRowMajor 1.0\ntransposeNaive 2.0\n")
    monkeypatch.chdir(root)
    before, around = snapshot(root), outside(tmp_path, root)
    result = coursectl("check", "day01-one", "t.txt")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        "coursectl: error: t.txt:2: table 'kernels': missing copyRow\\u200bMajor; unexpected copyRowMajor\n")
    result = coursectl("verify", "day01\u200b-one")
    assert result.exit_code == 2
    assert result.stderr.startswith("coursectl: error: no lesson 'day01\\u200b-one' in ")
    assert snapshot(root) == before and outside(tmp_path, root) == around


@pytest.mark.parametrize("line, name", [("n = {x-y:int}", "x-y"), ("n = {caf\u00e9}", "caf\\xe9"),
                                        ("n = {n\u200b:int}", "n\\u200b"), ("n = {}", "")],
                         ids=["dash", "non-ascii", "zero-width", "empty"])
def test_a_field_name_that_is_no_identifier_says_so(tmp_path, monkeypatch, line, name):
    root = _one_lesson_course(tmp_path / "course", f'    output:\n      - line: "{line}"\n')
    monkeypatch.chdir(root)
    before, around = snapshot(root), outside(tmp_path, root)
    result = coursectl("verify", "--all", "--offline")
    assert (result.exit_code, result.stdout) == (2, "")
    shown_line = line.replace("\u00e9", "\\xe9").replace("\u200b", "\\u200b")
    assert result.stderr == (f"coursectl: error: lessons.yaml:7: lesson 'day01-one': output.items[0]: field name "
                             f"'{name}' in '{shown_line}' is not an identifier: letters, digits and _ only, not "
                             f"starting with a digit\nhint: fix lessons.yaml; docs/schema.md describes every key\n")
    assert "unbalanced brace" not in result.stderr
    assert snapshot(root) == before and outside(tmp_path, root) == around


def test_a_column_name_that_is_no_identifier_says_so(tmp_path, monkeypatch):
    root = _one_lesson_course(tmp_path / "course", '    output:\n      - table: t\n        header: "a b"\n'
                                                  '        columns: {a-b: word, c: int}\n')
    monkeypatch.chdir(root)
    result = coursectl("verify", "--all", "--offline")
    assert result.exit_code == 2
    assert "field name 'a-b' (a column of table 't') is not an identifier: letters, digits and _ only" \
        in result.stderr


def test_check_shows_a_row_key_hiding_a_character_escaped(tmp_path, monkeypatch):
    root = _one_lesson_course(tmp_path / "course", HIDDEN_KEY_OUTPUT.replace(
        "        keys: [copyRow\u200bMajor, transposeNaive]\n", "        key: kernel\n"))
    (root / "t.txt").write_text("kernel ms\ncopyRow\u200bMajor 1.0\ntransposeNaive 2.0\n", encoding="utf-8")
    monkeypatch.chdir(root)
    before, around = snapshot(root), outside(tmp_path, root)
    result = coursectl("check", "day01-one", "t.txt")
    assert result.exit_code == 0, result.output
    assert "[copyRow\\u200bMajor] ms = 1" in result.stdout
    assert "\u200b" not in result.stdout
    assert snapshot(root) == before and outside(tmp_path, root) == around
