"""orchestrator.manifest.model and orchestrator.manifest.yamlfile: lessons.yaml, and every error it can raise.

Each broken manifest is the minimal valid one below with one edit; every error
is asserted whole, `path:line: lesson 'id': field.path: message`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import COURSE, FIRST_LESSONS, first_lessons_only
from orchestrator.errors import ManifestError, TemplateError, UsageError
from orchestrator.manifest.model import Manifest
from orchestrator.manifest.selection import select_lessons
from orchestrator.manifest import load as load_module
from orchestrator.manifest.load import load_manifest
from orchestrator.names import ARCH, GPU_SLUG, IDENTIFIER, LESSON_ID, SNIPPET_NAME
from orchestrator.transcript.claims import ClaimError
from orchestrator.transcript.fields import Compare

REPO = Path(__file__).resolve().parent.parent

# Line numbers of this text are what the tests below assert.
MINIMAL = """\
version: 1
lessons:
  - id: hello
    day: 1
    title: Hello
    source: hello.cu
    output:
      items:
        - line: "n = {n:int}"
        - table: rows
          key: name
          columns:
            name: word
            gbps: {type: float, compare: tolerance, rel: 0.25}
    claims:
      - id: n-positive
        gate: n > 0
"""

SECOND_LESSON = """\
  - id: world
    day: 2
    title: World
    source: hello.cu
    output:
      items:
        - line: "m = {m:int}"
"""


def edited(old: str, new: str, text: str = MINIMAL) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "hello.cu").write_text("__global__ void hello() {}\n", encoding="utf-8")
    path = tmp_path / "lessons.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def manifest_error(tmp_path: Path, text: str) -> tuple[Path, ManifestError]:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    return path, info.value


# --- a valid manifest -----------------------------------------------------------


def test_minimal_manifest_loads_with_the_defaults(tmp_path):
    path = write(tmp_path, MINIMAL)
    manifest = load_manifest(path)
    lesson = manifest.lesson("hello")
    assert manifest.root == tmp_path.resolve()
    assert manifest.path == path
    assert manifest.architectures == ["sm_90"]
    assert manifest.flags(lesson) == ["-std=c++17", "-O3"]
    assert manifest.timeout(lesson) == 60.0
    assert list(manifest.sanitizers(lesson)) == ["memcheck"]
    assert manifest.source_path(lesson) == tmp_path.resolve() / "hello.cu"
    assert lesson.binary_name == "hello"
    assert [c.id for c in lesson.claims] == ["n-positive"]
    assert lesson.claims[0].kind == "gate"
    assert lesson.claims[0].expression == "n > 0"
    gbps = lesson.output.items[1].columns["gbps"]
    assert (gbps.type, gbps.compare, gbps.rel, gbps.abs) == ("float", Compare.tolerance, 0.25, None)


def test_the_course_manifest_loads():
    manifest = load_manifest(COURSE / "lessons.yaml")
    days = [lesson.day for lesson in manifest.lessons]
    assert days == sorted(days)
    first = [manifest.lesson(lesson_id) for lesson_id in FIRST_LESSONS]
    assert manifest.root == COURSE
    assert manifest.architectures == ["sm_90", "sm_75"]
    assert [lesson.day for lesson in first] == [13, 14, 16, 71]
    assert [lesson.binary_name for lesson in first] == ["shared_memory", "syncthreads", "tiled_matmul", "matmul_fp16"]
    assert [manifest.timeout(lesson) for lesson in first] == [30.0, 30.0, 30.0, 60.0]
    assert [list(manifest.sanitizers(lesson)) for lesson in first] == [
        ["memcheck"], ["memcheck", "racecheck"], ["memcheck"], ["memcheck"]]
    assert [len(lesson.claims) for lesson in first] == [8, 6, 6, 5]
    racecheck = manifest.sanitizers(manifest.lesson("day14-syncthreads"))["racecheck"]
    assert [finding.kernel for finding in racecheck.findings] == ["reverseTileRacy"]


def test_manifest_error_exits_2_and_says_where_the_reference_is():
    assert ManifestError.exit_status == 2
    assert ManifestError.hint == "fix lessons.yaml; docs/schema.md describes every key"


# --- unknown keys ---------------------------------------------------------------


def test_unknown_top_level_key(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: 1\ncolour: red\n"))
    assert str(error) == f"{path}:2: colour: unknown key 'colour'"
    assert error.line == 2
    assert error.path == str(path)


def test_unknown_key_in_a_lesson(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "    day: 1\n    colour: red\n"))
    assert str(error) == f"{path}:5: lesson 'hello': colour: unknown key 'colour'"


def test_unknown_key_in_an_output_item(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        '        - line: "n = {n:int}"\n', '        - line: "n = {n:int}"\n          colour: red\n'))
    assert str(error) == f"{path}:10: lesson 'hello': output.items[0].colour: unknown key 'colour'"


def test_unknown_key_in_a_column(tmp_path):
    path, error = manifest_error(tmp_path, edited("rel: 0.25}", "rel: 0.25, units: GB/s}"))
    assert str(error) == f"{path}:14: lesson 'hello': output.items[1].columns.gbps.units: unknown key 'units'"


def test_an_output_item_without_a_kind(tmp_path):
    path, error = manifest_error(tmp_path, edited('        - line: "n', '        - lines: "n'))
    assert str(error) == (f"{path}:9: lesson 'hello': output.items[0]: "
                          "an output item needs one of the keys line, table, section or text")


@pytest.mark.parametrize("key", ["root", "path"])
def test_root_and_path_are_not_manifest_keys(tmp_path, key):
    path, error = manifest_error(tmp_path, edited("version: 1\n", f"version: 1\n{key}: /etc\n"))
    assert str(error) == f"{path}:2: {key}: unknown key {key!r}"


# --- wrong values ---------------------------------------------------------------


def test_wrong_type(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "    day: one\n"))
    assert str(error) == (f"{path}:4: lesson 'hello': day: Input should be a valid integer, "
                          "unable to parse string as an integer (got 'one')")


def test_a_string_where_a_list_belongs(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "    day: 1\n    flags: -O3\n"))
    assert str(error) == f"{path}:5: lesson 'hello': flags: Input should be a valid list (got '-O3')"


def test_first_error_by_line_is_named_and_the_rest_counted(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "    day: 1\n", "    day: one\n    timeout: fast\n    args: 3\n"))
    assert str(error) == (f"{path}:4: lesson 'hello': day: Input should be a valid integer, "
                          "unable to parse string as an integer (got 'one') (and 2 more errors)")


def test_missing_key_points_at_the_lesson(tmp_path):
    path, error = manifest_error(tmp_path, edited("    title: Hello\n", ""))
    assert str(error) == f"{path}:3: lesson 'hello': title: missing key 'title'"


def test_lesson_id_must_be_lower_case(tmp_path):
    path, error = manifest_error(tmp_path, edited("  - id: hello\n", "  - id: Hello_1\n"))
    assert str(error) == (f"{path}:3: lesson 'Hello_1': id: "
                          "lesson id 'Hello_1' must be lower-case letters, digits and dashes")


def test_unsupported_version(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: 2\n"))
    assert str(error) == f"{path}:1: version: unknown value 2; expected 1"


def test_version_true_is_not_version_1(tmp_path):
    """pydantic's Literal[1] takes `true`, which equals 1 in Python."""
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: true\n"))
    assert str(error) == f"{path}:1: version: unknown value True; expected 1"


@pytest.mark.parametrize("old, new, message", [
    ("    day: 1\n", "    day: 1\n    timeout: true\n", "5: lesson 'hello': timeout: true is a truth value, not a number"),
    ("rel: 0.25}", "rel: true}",
     "14: lesson 'hello': output.items[1].columns.gbps.rel: true is a truth value, not a number"),
    ("rel: 0.25}", "rel: 0.25, abs: false}",
     "14: lesson 'hello': output.items[1].columns.gbps.abs: false is a truth value, not a number"),
    ("    day: 1\n", "    day: true\n", "4: lesson 'hello': day: true is a truth value, not a number"),
    ("    title: Hello\n", "    title: true\n",
     "5: lesson 'hello': title: true is a truth value, not what this key takes"),
    ("version: 1\n", "version: 1\ndefaults:\n  timeout: false\n",
     "3: defaults.timeout: false is a truth value, not a number"),
])
def test_a_truth_value_where_a_number_goes_is_refused(tmp_path, old, new, message):
    """pydantic takes `true` for 1 in a number: `timeout: true` ran with a one-second timeout, `rel: true` was a
    tolerance of 100%."""
    path, error = manifest_error(tmp_path, edited(old, new))
    assert str(error) == f"{path}:{message}"


def test_a_truth_value_where_one_goes_is_taken(tmp_path):
    manifest = load_manifest(write(tmp_path, edited("    title: Hello\n", "    title: Hello\n    source_header: false\n")))
    assert manifest.lessons[0].source_header is False


def test_duplicate_lesson_id(tmp_path):
    path, error = manifest_error(tmp_path, MINIMAL + edited("id: world", "id: hello", SECOND_LESSON))
    assert str(error) == f"{path}:18: lesson 'hello': id: duplicate lesson id (also lessons[0])"


# --- files ----------------------------------------------------------------------


def test_source_that_does_not_exist(tmp_path):
    path, error = manifest_error(tmp_path, edited("source: hello.cu", "source: missing.cu"))
    assert str(error) == f"{path}:6: lesson 'hello': source: missing.cu does not exist"


def test_prose_that_does_not_exist(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "    source: hello.cu\n", "    source: hello.cu\n    prose: prose.md\n"))
    assert str(error) == f"{path}:7: lesson 'hello': prose: prose.md does not exist"


def test_source_escaping_the_root_upwards(tmp_path):
    path, error = manifest_error(tmp_path, edited("source: hello.cu", "source: ../x.cu"))
    root = tmp_path.resolve()
    assert str(error) == f"{path}:6: lesson 'hello': source: ../x.cu lies outside the course root {root}"


def test_absolute_source_outside_the_root(tmp_path):
    outside = tmp_path.resolve().parent / "x.cu"
    path, error = manifest_error(tmp_path, edited("source: hello.cu", f"source: {outside}"))
    root = tmp_path.resolve()
    assert str(error) == f"{path}:6: lesson 'hello': source: {outside} lies outside the course root {root}"


def test_absolute_source_inside_the_root_is_refused_for_being_absolute(tmp_path):
    inside = tmp_path.resolve() / "hello.cu"
    path, error = manifest_error(tmp_path, edited("source: hello.cu", f"source: {inside}"))
    root = tmp_path.resolve()
    assert str(error) == (f"{path}:6: lesson 'hello': source: {inside} is absolute; "
                          f"give it relative to the course root {root}")


def test_a_source_or_prose_that_is_a_folder(tmp_path):
    (tmp_path / "lessons" / "day1-hello").mkdir(parents=True)
    (tmp_path / "lessons" / "day1-hello" / "hello.cu").write_text("int main() {}\n")
    (tmp_path / "empty").mkdir()
    path, error = manifest_error(tmp_path, edited("source: hello.cu", "source: lessons/day1-hello"))
    assert str(error) == (f"{path}:6: lesson 'hello': source: lessons/day1-hello is a folder; give the lesson's .cu "
                          "file in it (hello.cu)")
    path, error = manifest_error(tmp_path, edited("source: hello.cu", "source: empty"))
    assert str(error) == f"{path}:6: lesson 'hello': source: empty is a folder; give the lesson's .cu file"
    path, error = manifest_error(tmp_path, edited("    source: hello.cu\n", "    source: hello.cu\n    prose: empty\n"))
    assert str(error) == f"{path}:7: lesson 'hello': prose: empty is a folder; give its prose, a Markdown file"


@pytest.mark.parametrize("key, line", [("source", 6), ("prose", 7)])
def test_an_empty_source_or_prose_is_not_the_course_root(tmp_path, key, line):
    """Path("") is ".": an empty source was refused as '. does not exist'."""
    text = edited("    source: hello.cu\n", "    source: hello.cu\n    prose: prose.md\n")
    path, error = manifest_error(tmp_path, edited(f"{key}: ", f'{key}: ""  # was ', text))
    what = "the lesson's .cu file" if key == "source" else "its prose, a Markdown file"
    assert str(error) == (f"{path}:{line}: lesson 'hello': {key}: an empty path; give {what}, relative to the "
                          "course root")


def test_manifest_that_does_not_exist(tmp_path):
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "lessons.yaml")
    assert str(info.value) == f"{tmp_path / 'lessons.yaml'}: no such file"
    assert info.value.hint == "run coursectl from the course's root or pass --manifest"


# --- output schemas -------------------------------------------------------------


def test_invalid_line_regex(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        '        - line: "n = {n:int}"\n', '        - line: "n = (?P<n>[0-9+"\n          regex: true\n'))
    assert str(error) == (f"{path}:9: lesson 'hello': output.items[0]: invalid regex 'n = (?P<n>[0-9+': "
                          "unterminated character set at position 10")


def test_invalid_ignore_regex(tmp_path):
    path, error = manifest_error(tmp_path, edited("    output:\n", '    output:\n      ignore: ["^(unclosed"]\n'))
    assert str(error) == (f"{path}:7: lesson 'hello': output: invalid ignore regex '^(unclosed': "
                          "missing ), unterminated subpattern at position 1")


def test_unknown_comparison(tmp_path):
    path, error = manifest_error(tmp_path, edited("compare: tolerance, rel: 0.25", "compare: aprox"))
    assert str(error) == (f"{path}:14: lesson 'hello': output.items[1].columns.gbps.compare: "
                          "unknown comparison 'aprox'; expected 'exact', 'tolerance', 'device' or 'volatile'")


def test_unknown_comparison_inside_a_section(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        '        - line: "n = {n:int}"\n',
        "        - section: cases\n"
        "          key: n\n"
        "          items:\n"
        '            - line: "n = {n:int}"\n'
        "            - table: t\n"
        "              columns: {ms: {type: float, compare: aprox}}\n"))
    assert str(error) == (f"{path}:14: lesson 'hello': output.items[0].items[1].columns.ms.compare: "
                          "unknown comparison 'aprox'; expected 'exact', 'tolerance', 'device' or 'volatile'")


# A count, a range, keys, a timeout and a bound that loaded, then crashed the parser with a pydantic
# traceback (rows: -1), blamed the evidence for what the manifest said (min above max, a key twice)
# or took away a limit (.inf).
TABLE_KEY = "          key: name\n"
SECTION = """\
        - section: cases
          repeat: 3
          items:
            - line: "case {case:word}"
"""


def with_section(repeat: str) -> str:
    """MINIMAL with a section after its table, repeated as `repeat` says, at line 15."""
    return edited("    claims:\n", SECTION.replace("repeat: 3", f"repeat: {repeat}") + "    claims:\n")


REFUSED_VALUES = {
    "rows-negative": (edited(TABLE_KEY, TABLE_KEY + "          rows: -1\n"), 12,
                      "output.items[1].rows: -1 is negative; a count is 0 or more"),
    "rows-min-negative": (edited(TABLE_KEY, TABLE_KEY + "          rows: {min: -3}\n"), 12,
                          "output.items[1].rows.min: -3 is negative; a count is 0 or more"),
    "rows-max-negative": (edited(TABLE_KEY, TABLE_KEY + "          rows: {min: 0, max: -3}\n"), 12,
                          "output.items[1].rows.max: -3 is negative; a count is 0 or more"),
    "rows-min-above-max": (edited(TABLE_KEY, TABLE_KEY + "          rows: {min: 10, max: 2}\n"), 12,
                           "output.items[1].rows: min 10 is more than max 2, so no count would do; give a min of "
                           "at most the max"),
    "rows-true": (edited(TABLE_KEY, TABLE_KEY + "          rows: true\n"), 12,
                  "output.items[1].rows: true is a truth value, not a number"),
    "rows-unknown-key": (edited(TABLE_KEY, TABLE_KEY + "          rows: {least: 2}\n"), 12,
                         "output.items[1].rows.least: unknown key 'least'"),
    "keys-twice": (edited(TABLE_KEY, TABLE_KEY + "          keys: [copyRowMajor, copyRowMajor]\n"), 12,
                   "output.items[1].keys: key 'copyRowMajor' is listed twice; a table has one row of each key"),
    "keys-and-rows-disagree": (edited(TABLE_KEY, TABLE_KEY + "          keys: [a, b]\n          rows: 3\n"), 10,
                               "output.items[1]: keys lists 2 rows but rows says 3; leave rows out (keys says how "
                               "many) or make the two agree"),
    "keys-above-rows-max": (edited(TABLE_KEY, TABLE_KEY + "          keys: [a, b]\n          rows: {max: 1}\n"), 10,
                            "output.items[1]: keys lists 2 rows but rows says {min: 0, max: 1}; leave rows out "
                            "(keys says how many) or make the two agree"),
    "repeat-negative": (with_section("-1"), 16, "output.items[2].repeat: -1 is negative; a count is 0 or more"),
    "repeat-min-above-max": (with_section("{min: 5, max: 1}"), 16,
                             "output.items[2].repeat: min 5 is more than max 1, so no count would do; give a min "
                             "of at most the max"),
    "timeout-inf": (edited("    source: hello.cu\n", "    source: hello.cu\n    timeout: .inf\n"), 7,
                    "timeout: inf s would never stop a hung run; give at most 86400 s (a day)"),
    "timeout-past-a-day": (edited("    source: hello.cu\n", "    source: hello.cu\n    timeout: 1e9\n"), 7,
                           "timeout: 1e+09 s would never stop a hung run; give at most 86400 s (a day)"),
    "timeout-nan": (edited("    source: hello.cu\n", "    source: hello.cu\n    timeout: .nan\n"), 7,
                    "timeout: nan is not a number of seconds above 0; give the seconds after which a hung run is "
                    "killed"),
    "timeout-zero": (edited("    source: hello.cu\n", "    source: hello.cu\n    timeout: 0\n"), 7,
                     "timeout: 0 is not a number of seconds above 0; give the seconds after which a hung run is "
                     "killed"),
    "sanitizer-timeout-inf": (edited("    source: hello.cu\n",
                                     "    source: hello.cu\n    sanitizers: {memcheck: {timeout: .inf}}\n"), 7,
                              "sanitizers.memcheck.timeout: inf s would never stop a hung run; give at most "
                              "86400 s (a day)"),
    "rel-inf": (edited("rel: 0.25", "rel: .inf"), 14,
                "output.items[1].columns.gbps.rel: inf would let any value pass; give a finite bound (rel: 0.25 "
                "lets a value move by 25%)"),
    "abs-nan": (edited("rel: 0.25", "abs: .nan"), 14,
                "output.items[1].columns.gbps.abs: nan is not a bound of 0 or more; give how far a value may move "
                "(abs: 0.003 lets it move by 0.003)"),
    "rel-negative": (edited("rel: 0.25", "rel: -0.25"), 14,
                     "output.items[1].columns.gbps.rel: -0.25 is not a bound of 0 or more; give how far a value "
                     "may move (rel: 0.25 lets a value move by 25%)"),
}


@pytest.mark.parametrize("name", list(REFUSED_VALUES))
def test_a_value_that_loaded_but_cannot_be_right_is_refused_where_it_is_written(tmp_path, name):
    text, line, message = REFUSED_VALUES[name]
    path, error = manifest_error(tmp_path, text)
    assert str(error) == f"{path}:{line}: lesson 'hello': {message}"


def test_a_defaults_timeout_of_inf_is_refused(tmp_path):
    path, error = manifest_error(tmp_path, edited("lessons:\n", "defaults: {timeout: .inf}\nlessons:\n"))
    assert str(error) == f"{path}:2: defaults.timeout: inf s would never stop a hung run; give at most 86400 s (a day)"


def test_counts_ranges_and_bounds_that_can_be_right_load(tmp_path):
    text = edited(TABLE_KEY, TABLE_KEY + "          keys: [a, b]\n          rows: {min: 1, max: 2}\n",
                  with_section("{min: 0, max: 0}"))
    text = edited("    source: hello.cu\n", "    source: hello.cu\n    timeout: 86400\n", text)
    lesson = load_manifest(write(tmp_path, edited("rel: 0.25", "rel: 0, abs: 1e9", text))).lesson("hello")
    table, section = lesson.output.items[1], lesson.output.items[2]
    assert (table.row_count.min, table.row_count.max, table.keys) == (1, 2, ["a", "b"])
    assert (section.repeat_count.min, section.repeat_count.max, lesson.timeout) == (0, 0, 86400)
    assert (table.columns["gbps"].rel, table.columns["gbps"].abs) == (0, 1e9)


def test_tolerance_without_bounds(tmp_path):
    path, error = manifest_error(tmp_path, edited("compare: tolerance, rel: 0.25", "compare: tolerance"))
    assert str(error) == (f"{path}:14: lesson 'hello': output.items[1].columns.gbps: "
                          "compare 'tolerance' needs rel, abs or both")


def test_a_refinement_keeps_the_type_its_template_declares(tmp_path):
    """`{gflops:float}` in the line and a rule under `fields:` that sets no type: the field stays a float."""
    text = edited('        - line: "n = {n:int}"\n',
                  '        - line: "n = {n:int}, {gflops:float} GFLOP/s"\n'
                  '          fields: {gflops: {compare: tolerance, rel: 0.3}, n: {label: count}}\n')
    lesson = load_manifest(write(tmp_path, text)).lesson("hello")
    fields = lesson.output.items[0].names
    assert (fields["gflops"].type, fields["gflops"].compare, fields["gflops"].rel) == ("float", Compare.tolerance, 0.3)
    assert (fields["n"].type, fields["n"].label) == ("int", "count")
    assert lesson.output.items[0].pattern.match("n = 3, 1.5 GFLOP/s") == {"n": 3, "gflops": 1.5}


def test_a_tolerance_on_a_field_without_a_number_type_names_the_field(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        '        - line: "n = {n:int}"\n',
        '        - line: "n = {n:int} on {gpu}"\n'
        '          fields: {gpu: {compare: tolerance, rel: 0.3}}\n'))
    assert str(error) == (f"{path}:9: lesson 'hello': output.items[0]: field 'gpu': "
                          "compare 'tolerance' needs a number, not type 'str'")


def test_a_refinement_setting_another_type_than_the_template_is_refused(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        '        - line: "n = {n:int}"\n',
        '        - line: "n = {n:int}"\n'
        '          fields: {n: {type: float}}\n'))
    assert str(error) == (f"{path}:9: lesson 'hello': output.items[0]: field 'n' is 'int' in the pattern "
                          "but 'float' in fields")


# --- claims ---------------------------------------------------------------------


def test_claim_naming_a_field_that_does_not_exist(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: m > 0"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].gate: "
                          "'m > 0' names unknown name 'm': not a field of this lesson and not an allowed function "
                          "(fields here: n, resources, rows)")


def test_claim_where_naming_a_field_that_does_not_exist(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "        gate: n > 0", "        each: rows\n        where: nme == 'a'\n        gate: gbps > 0"))
    assert str(error) == (f"{path}:18: lesson 'hello': claims[0].where: "
                          "\"nme == 'a'\" names unknown name 'nme': not a field of this lesson and not an allowed "
                          "function (fields here: gbps, n, name, resources, rows)")


def test_a_claim_error_is_placed_by_the_key_it_names_not_by_its_words(tmp_path, monkeypatch):
    """A reason about the gate that starts like a message about `each` points at the gate, and is said whole."""
    def check_claims(schema, claim, known=None):
        raise ClaimError(("gate",), "each: words that read like a message about 'each'")
    monkeypatch.setattr(load_module, "check_claims", check_claims)
    path, error = manifest_error(tmp_path, edited("        gate: n > 0", "        each: rows\n        gate: gbps > 0"))
    assert str(error) == (f"{path}:18: lesson 'hello': claims[0].gate: "
                          "each: words that read like a message about 'each'")


def test_claim_with_a_syntax_error(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: n >"))
    assert str(error) == f"{path}:17: lesson 'hello': claims[0].gate: invalid expression 'n >': invalid syntax"


def test_claim_with_both_gate_and_expect(tmp_path):
    path, error = manifest_error(tmp_path, edited("        gate: n > 0", "        gate: n > 0\n        expect: n > 1"))
    assert str(error) == f"{path}:16: lesson 'hello': claims[0]: a claim has exactly one of 'gate' or 'expect'"


def test_claim_with_neither_gate_nor_expect(tmp_path):
    path, error = manifest_error(tmp_path, edited("        gate: n > 0", "        says: nothing"))
    assert str(error) == f"{path}:16: lesson 'hello': claims[0]: a claim has exactly one of 'gate' or 'expect'"


def test_claim_each_naming_a_field(tmp_path):
    path, error = manifest_error(tmp_path, edited("        gate: n > 0", "        each: n\n        gate: n > 0"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].each: "
                          "'n' is not a table or section of the output (known: rows)")


def test_claim_each_going_through_a_table(tmp_path):
    path, error = manifest_error(tmp_path, edited("        gate: n > 0", "        each: rows.name\n        gate: n > 0"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].each: "
                          "'rows' is a table; only the last part of 'each' can be one")


def test_duplicate_claim_id(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "        gate: n > 0", "        gate: n > 0\n      - id: n-positive\n        expect: n > 1"))
    assert str(error) == f"{path}:18: lesson 'hello': claims[1].id: duplicate claim id 'n-positive'"


# --- YAML -----------------------------------------------------------------------


def test_yaml_syntax_error(tmp_path):
    path, error = manifest_error(tmp_path, edited("    title: Hello\n", "    title: Hello: world\n"))
    assert str(error) == f"{path}:5: YAML syntax: mapping values are not allowed here"


def test_tab_indented_line(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "\tday: 1\n"))
    assert str(error) == f"{path}:4: YAML syntax: a tab character indents this line; YAML indents with spaces only"


def test_duplicate_yaml_key(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "    day: 1\n    day: 2\n"))
    assert str(error) == f"{path}:5: duplicate key 'day' (first at line 4)"


def test_unhashable_yaml_key(tmp_path):
    path = write(tmp_path, edited("version: 1\n", "version: 1\n? [a, b]\n: 1\n"))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}:2: YAML syntax: found unhashable key"


@pytest.mark.parametrize("text", ["", "- a\n- b\n"], ids=["empty", "list"])
def test_manifest_that_is_not_a_mapping(tmp_path, text):
    path, error = manifest_error(tmp_path, text)
    assert str(error) == f"{path}:1: the manifest must be a mapping with a 'lessons' list"


# --- architectures --------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_9x", "compute_90"])
def test_unknown_architecture(tmp_path, arch):
    path, error = manifest_error(tmp_path, edited("version: 1\n", f"version: 1\narchitectures: [sm_90, {arch}]\n"))
    assert str(error) == (f"{path}:2: architectures: architecture {arch!r} is not a GPU architecture; "
                          "write one like sm_90")


def test_no_architecture(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: 1\narchitectures: []\n"))
    assert str(error) == f"{path}:2: architectures: list at least one architecture"


def test_an_architecture_listed_twice(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: 1\narchitectures: [sm_89, sm_89, sm_89]\n"))
    assert str(error) == f"{path}:2: architectures: architecture 'sm_89' is listed twice"


def test_architecture_suffixes(tmp_path):
    path = write(tmp_path, edited("version: 1\n", "version: 1\narchitectures: [sm_75, sm_90a, sm_100f]\n"))
    assert load_manifest(path).architectures == ["sm_75", "sm_90a", "sm_100f"]


# --- select_lessons -------------------------------------------------------------


@pytest.fixture
def two_lessons(tmp_path) -> Manifest:
    return load_manifest(write(tmp_path, MINIMAL + SECOND_LESSON))


def test_select_lessons_keeps_manifest_order(two_lessons):
    assert [lesson.id for lesson in select_lessons(two_lessons, ["world", "hello"], all_=False)] == ["hello", "world"]
    assert [lesson.id for lesson in select_lessons(two_lessons, ["world"], all_=False)] == ["world"]
    assert [lesson.id for lesson in select_lessons(two_lessons, [], all_=True)] == ["hello", "world"]


def test_select_lessons_unknown_lesson(two_lessons):
    with pytest.raises(UsageError) as info:
        select_lessons(two_lessons, ["hello", "day99"], all_=False)
    assert str(info.value) == f"no lesson 'day99' in {two_lessons.path}"
    assert info.value.hint == "lessons: hello, world"
    assert info.value.exit_status == 2


def test_select_lessons_needs_a_lesson_or_all(two_lessons):
    with pytest.raises(UsageError) as info:
        select_lessons(two_lessons, [], all_=False)
    assert str(info.value) == "name at least one lesson or pass --all"
    assert info.value.hint == "lessons: hello, world"


# --- page: what a lesson's page shows -------------------------------------------

PAGE = """\
    page:
      figures:
        - gbps
        - {field: n, label: elements}
      charts:
        - {field: gbps, label: bandwidth, unit: GB/s, per: [], better: higher}
"""


def with_page(page: str) -> str:
    return edited("    claims:\n", page + "    claims:\n")


def test_a_page_key_loads(tmp_path):
    lesson = load_manifest(write(tmp_path, with_page(PAGE))).lesson("hello")
    assert [(c.field, c.label, c.unit) for c in lesson.page.figures] == [("gbps", None, None), ("n", "elements", None)]
    chart = lesson.page.charts[0]
    assert (chart.field, chart.label, chart.unit, chart.per, chart.against, chart.better) == (
        "gbps", "bandwidth", "GB/s", [], None, "higher")
    assert load_manifest(write(tmp_path, MINIMAL)).lesson("hello").page is None


@pytest.mark.parametrize("old, new, message", [
    ("        - gbps\n", "        - gbsp\n", "17: lesson 'hello': page.figures[0].field: no field 'gbsp' in the output schema"),
    ("        - gbps\n", "        - {field: gbps, colour: red}\n",
     "17: lesson 'hello': page.figures[0].colour: unknown key 'colour'"),
    ("      charts:\n", "      colour: red\n      charts:\n", "19: lesson 'hello': page.colour: unknown key 'colour'"),
    ("per: []", "per: kernel", "20: lesson 'hello': page.charts[0].per: 'kernel' is not a key of rows.gbps (its keys: name)"),
    ("better: higher", "better: faster",
     "20: lesson 'hello': page.charts[0].better: unknown value 'faster'; expected 'lower' or 'higher'"),
    ("per: []", "per: [], against: n",
     "20: lesson 'hello': page.charts[0].against: n does not stand beside rows.gbps: the bars of a chart are "
     "named by a field of the same line, row or block"),
    ("{field: gbps, label: bandwidth", "{field: name, label: bandwidth",
     "20: lesson 'hello': page.charts[0].field: no field 'name' in the output schema"),
])
def test_a_bad_page_key(tmp_path, old, new, message):
    path, error = manifest_error(tmp_path, with_page(edited(old, new, PAGE)))
    assert str(error) == f"{path}:{message}"
    assert error.exit_status == 2


def test_a_page_figure_must_be_a_number(tmp_path):
    text = edited('        - line: "n = {n:int}"\n', '        - line: "n = {n:int} {unit:word}"\n', with_page(PAGE))
    path, error = manifest_error(tmp_path, edited("        - gbps\n", "        - unit\n", text))
    assert str(error) == f"{path}:17: lesson 'hello': page.figures[0].field: unit is of type word, not a number"


def test_a_page_lies_beside_its_source_unless_page_path_says_otherwise(tmp_path):
    text = edited("    source: hello.cu\n", "    source: hello.cu\n    page: {path: pages/hello.md}\n")
    text += SECOND_LESSON
    manifest = load_manifest(write(tmp_path, text))
    assert [lesson.page_path for lesson in manifest.lessons] == [Path("pages/hello.md"), Path("README.md")]


@pytest.mark.parametrize("page, message", [
    ("/tmp/hello.md", "/tmp/hello.md is absolute; give it relative to the course root ROOT"),
    ("../hello.md", "../hello.md lies outside the course root ROOT"),
    ("hello.html", "hello.html is not a Markdown file: a page's name ends in .md"),
    ("README.md", "README.md is the course's README.md, which holds the lessons table"),
    ("./x/../README.md", "x/../README.md is the course's README.md, which holds the lessons table"),
])
def test_a_page_path_render_may_not_own_is_refused(tmp_path, page, message):
    path, error = manifest_error(tmp_path, edited("    source: hello.cu\n", f"    source: hello.cu\n    page: {{path: {page}}}\n"))
    assert str(error) == f"{path}:7: lesson 'hello': page.path: {message.replace('ROOT', str(tmp_path.resolve()))}"


# --- names are matched whole: a trailing newline is not part of a name ------------


def test_lesson_id_with_a_trailing_newline(tmp_path):
    path, error = manifest_error(tmp_path, edited("  - id: hello\n", '  - id: "hello\\n"\n'))
    assert str(error) == (f"{path}:3: lesson 'hello\\n': id: "
                          "lesson id 'hello\\n' must be lower-case letters, digits and dashes")


def test_architecture_with_a_trailing_newline(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", 'version: 1\narchitectures: ["sm_90\\n"]\n'))
    assert str(error) == (f"{path}:2: architectures: architecture 'sm_90\\n' is not a GPU architecture; "
                          "write one like sm_90")


def test_compute_capability_with_a_trailing_newline(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", '    day: 1\n    min_compute_capability: "8.0\\n"\n'))
    assert str(error) == (f"{path}:5: lesson 'hello': min_compute_capability: "
                          "compute capability '8.0\\n' must look like 8.0")


def test_table_name_with_a_trailing_newline(tmp_path):
    path, error = manifest_error(tmp_path, edited("        - table: rows\n", '        - table: "rows\\n"\n'))
    assert str(error) == f"{path}:10: lesson 'hello': output.items[1]: table name 'rows\\n' is not an identifier"


def test_snippet_name_with_a_trailing_newline(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "    source: hello.cu\n",
        "    source: hello.cu\n"
        "    sanitizers:\n"
        "      racecheck:\n"
        "        findings:\n"
        '          - {kernel: hello, snippet: "racy\\n"}\n'))
    assert str(error) == (f"{path}:10: lesson 'hello': sanitizers.racecheck.findings[0].snippet: "
                          "snippet name 'racy\\n' must be letters, digits, '_', '.' and '-'")


def test_a_bad_snippet_marker_is_named_in_the_source_first(tmp_path):
    """The fault is in the source: its file and line come first, the hint is about markers, not lessons.yaml."""
    path = write(tmp_path, edited(
        "    source: hello.cu\n",
        "    source: hello.cu\n"
        "    sanitizers:\n"
        "      racecheck:\n"
        "        findings:\n"
        "          - {kernel: hello, snippet: racy}\n"))
    (tmp_path / "hello.cu").write_text("// snippet: racy\n__global__ void hello() {}\n// end snippet: racey\n")
    with pytest.raises(TemplateError) as info:
        load_manifest(path)
    assert str(info.value) == ("hello.cu:3: 'end snippet: racey' closes 'racy' (opened at line 1); lesson 'hello' "
                               f"reads the snippets of this file ({path}:10, sanitizers.racecheck.findings[0].snippet)")
    assert info.value.hint == ("fix the marker in the source: '// snippet: NAME' opens a snippet, '// end snippet' or "
                               "'// end snippet: NAME' closes the innermost one open")
    assert info.value.exit_status == 2


@pytest.mark.parametrize("pattern, name", [
    (LESSON_ID, "day16-tiled-matmul\n"), (ARCH, "sm_90\n"), (GPU_SLUG, "nvidia-h200\n"),
    (SNIPPET_NAME, "racy\n"), (IDENTIFIER, "rows\n")])
def test_every_name_pattern_refuses_a_trailing_newline(pattern, name):
    assert pattern.fullmatch(name.strip()) is not None
    assert pattern.fullmatch(name) is None


# --- claims the manifest refuses when it loads ----------------------------------


def test_a_claim_calling_a_method_is_refused_when_the_manifest_loads(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: n.bit_length() > 0"))
    assert str(error).startswith(f"{path}:17: lesson 'hello': claims[0].gate: 'n.bit_length() > 0': calls the "
                                 "method .bit_length(); a claim calls only the allowed functions (abs, all, any, ")


def test_a_where_reading_a_private_attribute_is_refused_when_the_manifest_loads(tmp_path):
    path, error = manifest_error(tmp_path, edited(
        "        gate: n > 0", "        each: rows\n        where: name.__class__ is None\n        gate: gbps > 0"))
    assert str(error) == (f"{path}:18: lesson 'hello': claims[0].where: 'name.__class__ is None': the attribute "
                          "'__class__' starts with '_', which a claim may not read")


def test_a_claim_of_5000_terms_is_refused_in_one_line(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: " + " + ".join(["n"] * 5000) + " > 0"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].gate: 'n + n + n + n + n + n + n + n + n + n + "
                          "n + n + n + n + n + '... (20001 characters): is 20001 characters long; a claim's expression "
                          "has at most 1000")


def test_a_claim_of_3000_nots_is_refused_in_one_line(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: " + "not " * 3000 + "n"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].gate: 'not not not not not not not not not not not "
                          "not not not not '... (12001 characters): is 12001 characters long; a claim's expression "
                          "has at most 1000")


def test_a_claim_of_500_terms_is_refused_for_its_depth(tmp_path):
    path, error = manifest_error(tmp_path, edited("gate: n > 0", "gate: " + "+".join(["n"] * 300) + " > 0"))
    assert str(error) == (f"{path}:17: lesson 'hello': claims[0].gate: 'n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+"
                          "n+n+n+n+n+n+n+n+n+n+'... (603 characters): nests more than 50 levels deep (each operator "
                          "of a chain such as a + b + c is a level)")


# --- hostile files: refused at once, in one line ----------------------------------

LAUGHS = """\
version: 1
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
course: *h
"""


def test_a_billion_laughs_is_refused_at_once(tmp_path):
    path, error = manifest_error(tmp_path, LAUGHS)
    # 9 + 81 + ... values are walked before the cap; the one past it lies in the first fragment
    assert str(error) == f"{path}:2: aliases expand the manifest past 200000 values; coursectl stops there"


def test_the_alias_cap_counts_expanded_values(tmp_path, monkeypatch):
    import orchestrator.manifest.yamlfile as yamlfile

    text = "version: 1\nx: &x [1, 2, 3]\ny: [*x, *x]\n"   # the root, 1, x, y and y's two x: 1 + 1 + 4 + 1 + 2 * 4
    path = write(tmp_path, text)
    monkeypatch.setattr(yamlfile, "MAX_NODES", 15)
    assert yamlfile.load_yaml(path)[0] == {"version": 1, "x": [1, 2, 3], "y": [[1, 2, 3], [1, 2, 3]]}
    monkeypatch.setattr(yamlfile, "MAX_NODES", 14)
    with pytest.raises(ManifestError) as info:
        yamlfile.load_yaml(path)
    assert str(info.value) == f"{path}:2: aliases expand the manifest past 14 values; coursectl stops there"


@pytest.mark.parametrize("text, line, anchor_line", [
    ("version: 1\ncourse: &x [*x]\n", 2, 2),
    ("version: 1\nx: &x\n  items:\n    - line: a\n    - *x\n", 5, 2),
    ("version: 1\nx: &x\n  a: 1\n  <<: *x\n", 4, 2),
], ids=["flow", "block", "merge"])
def test_a_recursive_alias_names_its_line(tmp_path, text, line, anchor_line):
    path, error = manifest_error(tmp_path, text)
    assert str(error) == f"{path}:{line}: recursive alias: *x lies inside the value anchored &x at line {anchor_line}"


def test_a_huge_manifest_is_refused_without_reading_it_all():
    with pytest.raises(ManifestError) as info:
        load_manifest(Path("/dev/zero"))
    assert str(info.value) == "/dev/zero: a device where a file should be"


def test_a_manifest_that_is_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path, fifo):
    path = fifo(tmp_path / "lessons.yaml")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}: a named pipe where a file should be"


def test_the_size_cap_is_4_mib(tmp_path):
    path = write(tmp_path, MINIMAL + "#" * (4 * 2**20 - len(MINIMAL) - 1) + "\n")
    assert path.stat().st_size == 4 * 2**20
    assert [lesson.id for lesson in load_manifest(path).lessons] == ["hello"]
    path.write_text(MINIMAL + "#" * (4 * 2**20 - len(MINIMAL)) + "\n", encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}: larger than 4 MiB, the most a manifest may hold"


def test_a_manifest_that_is_a_directory(tmp_path):
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a manifest file"


def test_a_manifest_that_is_not_utf8(tmp_path):
    path = write(tmp_path, "")
    path.write_bytes(MINIMAL.replace("title: Hello", "title: Caf\xe9").encode("latin-1"))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}:5: is not UTF-8 text: byte 0xe9 cannot be decoded"


def test_a_control_character(tmp_path):
    path, error = manifest_error(tmp_path, edited("title: Hello", "title: Hel\x00lo"))
    assert str(error) == f"{path}:5: YAML syntax: unacceptable character #x0000: special characters are not allowed"


def test_yaml_nested_too_deeply(tmp_path):
    path, error = manifest_error(tmp_path, "version: 1\ncourse: " + "[" * 200 + "]" * 200 + "\n" + MINIMAL[11:])
    assert str(error) == f"{path}:2: values nest deeper than 64 levels"


def test_yaml_nested_past_what_the_parser_takes(tmp_path):
    path, error = manifest_error(tmp_path, "version: 1\ncourse: " + "[" * 3000 + "]" * 3000 + "\n")
    # libyaml 0.2.5 and later stop at 1000 levels; an older one parses on, and the walk stops at 64
    assert str(error) in (f"{path}:2: YAML syntax: exceeded maximum nesting depth",
                          f"{path}:2: values nest deeper than 64 levels",
                          f"{path}: YAML syntax: the document nests too deeply")


def test_two_documents(tmp_path):
    path, error = manifest_error(tmp_path, MINIMAL + "---\nversion: 1\n")
    assert str(error) == f"{path}:18: YAML syntax: but found another document"


# --- day order --------------------------------------------------------------------


def test_lessons_out_of_day_order_load_with_a_warning(tmp_path):
    path = write(tmp_path, edited("    day: 1\n", "    day: 3\n") + SECOND_LESSON)
    manifest = load_manifest(path)
    assert [lesson.id for lesson in manifest.lessons] == ["hello", "world"]
    assert manifest.warnings == [
        f"{path}:19: lesson 'world': day: day 2 comes after day 3 (lesson 'hello'); the pages and the index list "
        "lessons in day order, but commands take them in lessons.yaml's order"]


def test_two_lessons_on_one_day_load_with_a_warning(tmp_path):
    path = write(tmp_path, MINIMAL + edited("    day: 2\n", "    day: 1\n", SECOND_LESSON))
    assert load_manifest(path).warnings == [
        f"{path}:19: lesson 'world': day: day 1 is also the day of lesson 'hello'; a mention of 'day 1' in prose "
        "links to the first of them"]


def test_days_may_skip(tmp_path):
    manifest = load_manifest(write(tmp_path, MINIMAL + edited("    day: 2\n", "    day: 71\n", SECOND_LESSON)))
    assert ([lesson.day for lesson in manifest.lessons], manifest.warnings) == ([1, 71], [])
    assert load_manifest(COURSE / "lessons.yaml").warnings == []


# --- fragments: x- keys, anchors, aliases and merge keys ----------------------------

FRAGMENTS = """\
version: 1
x-gpu-line: &gpu-line
  line: "GPU: {gpu} (compute capability {cc:word})"
  fields: {gpu: {compare: device}}
x-lesson: &lesson
  title: Shared
  source: hello.cu
  timeout: 30
lessons:
  - id: hello
    day: 1
    <<: *lesson
    output:
      items:
        - *gpu-line
        - line: "n = {n:int}"
  - id: world
    day: 2
    <<: *lesson
    title: World
    output:
      items: [*gpu-line]
"""


def test_fragments_are_shared_through_anchors_and_merge_keys(tmp_path):
    manifest = load_manifest(write(tmp_path, FRAGMENTS))
    hello, world = manifest.lessons
    assert (hello.title, hello.timeout, world.title, world.timeout) == ("Shared", 30.0, "World", 30.0)
    assert hello.output.items[0].model_dump() == world.output.items[0].model_dump()
    assert hello.output.items[0] is not world.output.items[0]
    assert list(hello.output.items[0].pattern.fields) == ["gpu", "cc"]


def test_an_error_inside_an_aliased_fragment_names_the_fragments_line(tmp_path):
    path, error = manifest_error(tmp_path, edited("{compare: device}", "{compare: devise}", FRAGMENTS))
    assert str(error) == (f"{path}:4: lesson 'hello': output.items[0].fields.gpu.compare: unknown comparison "
                          "'devise'; expected 'exact', 'tolerance', 'device' or 'volatile' (and 1 more error)")


def test_an_error_inside_a_merged_fragment_names_the_fragments_line(tmp_path):
    path, error = manifest_error(tmp_path, edited("  timeout: 30\n", "  timeout: soon\n", FRAGMENTS))
    assert str(error) == (f"{path}:8: lesson 'hello': timeout: Input should be a valid number, unable to parse "
                          "string as a number (got 'soon') (and 1 more error)")


def test_a_key_beside_a_merge_key_wins(tmp_path):
    manifest = load_manifest(write(tmp_path, FRAGMENTS))
    assert manifest.lesson("world").title == "World"


def test_x_keys_are_only_fragments_at_the_top_level(tmp_path):
    path, error = manifest_error(tmp_path, edited("    day: 1\n", "    day: 1\n    x-note: hi\n"))
    assert str(error) == f"{path}:5: lesson 'hello': x-note: unknown key 'x-note'"
    assert load_manifest(write(tmp_path, "x-anything: [1, {a: b}]\n" + MINIMAL)).lesson("hello").day == 1


def test_first_lessons_only_drops_every_line_of_an_added_lesson_and_nothing_else():
    text = (COURSE / "lessons.yaml").read_text(encoding="utf-8")
    assert first_lessons_only(text) == text
    added = text.replace("\n  - day16-tiled-matmul:", "\n  - day15-added: Added\n    timeout: 5\n  - day16-tiled-matmul:")
    added += "  - id: day99-last\n    title: Last\n"
    assert added != text and first_lessons_only(added) == text


def test_the_course_manifest_says_what_it_said_before_its_fragments(tmp_path):
    """lessons.yaml, with its repeated parts in x- fragments, defaults and short forms, loads to the very same models
    (its first lessons: those it had then)."""
    import shutil

    shutil.copytree(COURSE / "lessons", tmp_path / "lessons")
    shutil.copyfile(REPO / "tests" / "data" / "manifest" / "lessons.before.yaml", tmp_path / "lessons.yaml")
    before = load_manifest(tmp_path / "lessons.yaml")
    (tmp_path / "after.yaml").write_text(first_lessons_only((COURSE / "lessons.yaml").read_text(encoding="utf-8")),
                                         encoding="utf-8")
    after = load_manifest(tmp_path / "after.yaml")
    assert after.model_dump(mode="json") == before.model_dump(mode="json")
    assert [lesson.output.items[0].model_dump() for lesson in after.lessons] == [
        {"line": "GPU: {gpu} (compute capability {cc:word})", "regex": False, "optional": False, "flag": None,
         "fields": {name: {"type": "str", "compare": Compare.device, "rel": None, "abs": None, "missing": None,
                           "suffix": None, "unit": None, "label": None} for name in ("gpu", "cc")}}] * 4
    text = first_lessons_only((COURSE / "lessons.yaml").read_text(encoding="utf-8"))
    rows = [row.strip() for row in text.splitlines()]
    # Written once, under defaults: the GPU line and the claim day 14 skips.
    assert (text.count("GPU: {gpu"), text.count("no-kernel-spills"), rows.count("- <<: *failures")) == (1, 2, 4)
    assert [len(lesson.claims) for lesson in after.lessons] == [8, 6, 6, 5]


def test_the_course_manifest_is_30_percent_shorter_than_before_its_fragments():
    before = (REPO / "tests" / "data" / "manifest" / "lessons.before.yaml").read_text(encoding="utf-8")
    after = first_lessons_only((COURSE / "lessons.yaml").read_text(encoding="utf-8"))
    assert len(before.splitlines()) == 306
    assert len(after.splitlines()) <= 0.7 * 306


# --- load_yaml builds what PyYAML builds ------------------------------------------

SAME_AS_PYYAML = [
    "a: [1, [2, [3, {b: [4]}]]]\nc: ~\nd: ''\ne: 0x1F\nf: 1_000\ng: .inf\nh: 0o17\ni: 1:30\nj: 2024-01-02\n",
    "2: two\n2.5: x\nnull: n\n=: eq\nyes: y\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\n",
    "x: &x {a: 1, b: {c: 2}}\ny: &y {<<: *x, d: 4}\nm: {<<: [*y, {e: 5}], b: 3}\nn: [*x, *y]\n",
    "- a\n- [b, {c: d}]\n",
    "just a string\n",
]


@pytest.mark.parametrize("text", SAME_AS_PYYAML + ["tests/data/course/lessons.yaml", "tests/data/manifest/lessons.before.yaml"])
def test_load_yaml_builds_what_pyyaml_builds(tmp_path, text):
    import yaml

    from orchestrator.manifest.yamlfile import load_yaml

    if text.endswith(".yaml"):
        text = (REPO / text).read_text(encoding="utf-8")
    path = write(tmp_path, text)
    data, _ = load_yaml(path)
    expected = yaml.safe_load(text)
    assert data == expected
    if "<<" not in text:   # PyYAML orders merged keys differently from version to version
        assert repr(data) == repr(expected)


def test_merge_keys_follow_the_spec(tmp_path):
    """Own keys win and keep the merged key's place; in a list the first mapping wins (PyYAML 6.0.2+
    lets the last win for some keys, so the keys here are long enough to show the difference)."""
    from orchestrator.manifest.yamlfile import load_yaml

    path = write(tmp_path, "first: &first {shared_key: 1, only_first: 2}\n"
                           "second: &second {shared_key: 3, only_second: 4}\n"
                           "both: {<<: [*first, *second], own_key: 0, only_first: 9}\n")
    data, lines = load_yaml(path)
    assert list(data["both"].items()) == [("shared_key", 1), ("only_first", 9), ("only_second", 4), ("own_key", 0)]
    assert (lines[("both", "shared_key")], lines[("both", "only_first")], lines[("both", "only_second")]) == (1, 3, 2)


def test_a_merge_of_something_not_a_mapping(tmp_path):
    path, error = manifest_error(tmp_path, "version: 1\nx: {<<: [1, 2]}\n")
    assert str(error) == f"{path}:2: YAML syntax: expected a mapping for merging, but found scalar"


def test_defaults_refuse_an_unknown_sanitizer_tool(tmp_path):
    path, error = manifest_error(tmp_path, edited("version: 1\n", "version: 1\ndefaults:\n  sanitizers: {memchek: {}}\n"))
    assert str(error) == (f"{path}:3: defaults.sanitizers: unknown sanitizer tool 'memchek'; "
                          "use memcheck, racecheck, synccheck, initcheck")


@pytest.mark.parametrize("key", ["lines", "warnings"])
def test_what_load_manifest_sets_is_no_manifest_key(tmp_path, key):
    path, error = manifest_error(tmp_path, edited("version: 1\n", f"version: 1\n{key}: {{}}\n"))
    assert str(error) == f"{path}:2: {key}: unknown key {key!r}"
