"""orchestrator.manifest.shorthand and the short forms of the output schema: what each says in the long form, and
the errors they raise, at the line they were written on.

Each short course below is the same lesson as its LONG form; loading both must
give the same models (compared as dumps).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.errors import ManifestError
from orchestrator.manifest.load import load_manifest
from orchestrator.transcript.schema import LineItem, SectionItem, TableItem
from orchestrator.manifest.shorthand import claim_order, long_entry, written_out
from orchestrator.transcript.forms import split_rules

LONG = """\
version: 1
lessons:
  - id: day7-hello
    day: 7
    title: Hello
    source: lessons/day7-hello/hello.cu
    prose: lessons/day7-hello/prose.md
    output:
      items:
        - line: "GPU: {gpu} (compute capability {cc:word})"
          fields: {gpu: {compare: device}, cc: {compare: device}}
        - line: "n = {n:int}"
        - table: sizes
          header: "size GB/s"
          key: size
          keys: ["1024", "2048"]
          columns: {size: int, gbps: float}
        - table: failures
          anywhere: true
          row: "FAILED {kernel:word} at {index:int}"
          columns: {kernel: word, index: int}
    claims:
      - id: n-positive
        gate: n > 0
        says: n is positive
      - id: no-kernel-spills
        gate: all(k.spill_stores == 0 for k in resources)
        says: no spills
      - id: is-fast
        expect: sizes['2048'].gbps > 1
        says: fast
"""

SHORT = """\
version: 1
defaults:
  output:
    - line: "GPU: {gpu:device} (compute capability {cc:word:device})"
  claims:
    - no-kernel-spills: no spills
      gate: all(k.spill_stores == 0 for k in resources)
lessons:
  - day7-hello: Hello
    output:
      - line: "n = {n:int}"
      - table: sizes
        header: "size GB/s"
        keys: ["1024", "2048"]
        columns: {size: int, gbps: float}
      - table: failures
        anywhere: true
        row: "FAILED {kernel:word} at {index:int}"
    claims:
      - n-positive: n is positive
        gate: n > 0
      - is-fast: fast
        expect: sizes['2048'].gbps > 1
"""


def course(tmp_path: Path, text: str, sources: tuple[str, ...] = ("hello.cu",), prose: bool = True) -> Path:
    folder = tmp_path / "lessons" / "day7-hello"
    folder.mkdir(parents=True, exist_ok=True)
    for name in sources:
        (folder / name).write_text("__global__ void hello() {}\n", encoding="utf-8")
    if prose:
        (folder / "prose.md").write_text("Hello.\n", encoding="utf-8")
    path = tmp_path / "lessons.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    return str(info.value)


def edited(old: str, new: str, text: str = SHORT) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_the_short_forms_say_what_the_long_form_says(tmp_path):
    long = load_manifest(course(tmp_path / "long", LONG))
    short = load_manifest(course(tmp_path / "short", SHORT))
    assert short.model_dump(mode="json") == long.model_dump(mode="json")
    lesson = short.lesson("day7-hello")
    assert (lesson.id, lesson.day, lesson.title, lesson.source.as_posix(), lesson.prose.as_posix()) == (
        "day7-hello", 7, "Hello", "lessons/day7-hello/hello.cu", "lessons/day7-hello/prose.md")
    assert [(c.id, c.kind, c.says) for c in lesson.claims] == [
        ("n-positive", "gate", "n is positive"), ("no-kernel-spills", "gate", "no spills"),
        ("is-fast", "expect", "fast")]


def test_each_long_form_key_has_the_line_it_was_written_on(tmp_path):
    manifest = load_manifest(course(tmp_path, SHORT))
    rows = SHORT.splitlines()

    def line(needle: str) -> int:
        return next(n for n, row in enumerate(rows, 1) if needle in row)

    assert [manifest.line_of("lessons", 0, *key) for key in (
        ("id",), ("title",), ("output", "items", 0), ("output", "items", 1), ("output", "items", 2, "keys"),
        ("claims", 0, "id"), ("claims", 0, "gate"), ("claims", 1, "gate"), ("claims", 2, "says"))] == [
        line("- day7-hello"), line("- day7-hello"), line('line: "GPU'), line('line: "n ='), line("keys:"),
        line("- n-positive"), line("gate: n > 0"), line("gate: all("), line("- is-fast:")]


# -- ids as keys ------------------------------------------------------------------------------
def test_the_id_as_a_key_needs_a_dash_or_it_is_an_unknown_key(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    timout: 30\n"))
    assert load_error(path) == f"{path}:10: lesson 'day7-hello': timout: unknown key 'timout'"


def test_a_short_form_claim_with_a_misspelt_key(tmp_path):
    path = course(tmp_path, edited("        gate: n > 0\n", "        gaet: n > 0\n"))
    assert load_error(path) == f"{path}:21: lesson 'day7-hello': claims[0].gaet: unknown key 'gaet'"


def test_two_ids_in_one_entry(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    day7-world: World\n"))
    assert load_error(path) == (f"{path}:9: lesson 'day7-hello': 'day7-hello' and 'day7-world' both hold a dash, so "
                                "both read as the id; give the id with 'id'")


def test_the_text_given_twice(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    title: Hi\n"))
    assert load_error(path) == (f"{path}:9: lesson 'day7-hello': 'title' is given twice: as the value of "
                                "'day7-hello' and as 'title'")


def test_an_entry_with_an_id_key_takes_no_short_form():
    assert long_entry({"id": "a", "b-c": "d"}, "says") == {"id": "a", "b-c": "d"}
    assert long_entry({"b-c": "d", "gate": "x"}, "says") == {"id": "b-c", "says": "d", "gate": "x"}


# -- day, source, prose ------------------------------------------------------------------------
def test_an_id_without_a_day_needs_day(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n",
                                   "  - hello-world: Hello\n    source: lessons/day7-hello/hello.cu\n"))
    assert load_error(path) == f"{path}:9: lesson 'hello-world': day: missing key 'day'"


def test_no_source_in_the_lesson_folder(tmp_path):
    path = course(tmp_path, SHORT, sources=())
    assert load_error(path) == (f"{path}:9: lesson 'day7-hello': missing key 'source', and lessons/day7-hello/ "
                                "holds no .cu file to take as it")


def test_two_sources_in_the_lesson_folder(tmp_path):
    path = course(tmp_path, SHORT, sources=("hello.cu", "helper.cu"))
    assert load_error(path) == (f"{path}:9: lesson 'day7-hello': missing key 'source', and lessons/day7-hello/ "
                                "holds 2 .cu files (hello.cu, helper.cu); name the lesson's with 'source'")
    named = course(tmp_path, edited("  - day7-hello: Hello\n",
                                    "  - day7-hello: Hello\n    source: lessons/day7-hello/helper.cu\n"))
    assert load_manifest(named).lesson("day7-hello").source.as_posix() == "lessons/day7-hello/helper.cu"


def test_no_prose_file_is_no_prose(tmp_path):
    assert load_manifest(course(tmp_path, SHORT, prose=False)).lesson("day7-hello").prose is None


# -- defaults --------------------------------------------------------------------------------
def test_default_gates_go_before_the_first_prediction_and_predictions_last():
    own = [{"a-gate": "", "gate": "1"}, {"b-expect": "", "expect": "1"}, {"c-gate": "", "gate": "1"}]
    defaults = [{"d-expect": "", "expect": "1"}, {"e-gate": "", "gate": "1"}]
    assert claim_order(own, defaults, []) == [("own", 0), ("defaults", 1), ("own", 1), ("own", 2), ("defaults", 0)]
    assert claim_order(own, defaults, ["e-gate"]) == [("own", 0), ("own", 1), ("own", 2), ("defaults", 0)]
    assert claim_order([], defaults, []) == [("defaults", 1), ("defaults", 0)]


def test_skip_claims_leaves_a_default_claim_out(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n",
                                   "  - day7-hello: Hello\n    skip_claims: [no-kernel-spills]\n"))
    assert [c.id for c in load_manifest(path).lesson("day7-hello").claims] == ["n-positive", "is-fast"]


def test_skip_claims_names_a_claim_the_defaults_lack(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    skip_claims: [no-spills]\n"))
    assert load_error(path) == (f"{path}:10: lesson 'day7-hello': skip_claims[0]: no claim 'no-spills' in "
                                "defaults.claims to skip (it has no-kernel-spills)")


def test_a_lesson_claim_with_a_default_claims_id(tmp_path):
    path = course(tmp_path, edited("      - is-fast: fast\n", "      - no-kernel-spills: mine\n"))
    # The lesson's own claim is a prediction; the default gate goes before it.
    assert load_error(path) == (f"{path}:22: lesson 'day7-hello': claims[2].id: duplicate claim id "
                                "'no-kernel-spills' (defaults.claims has it too: name it in skip_claims to make "
                                "only the lesson's own)")


def test_an_error_in_a_default_names_its_line_and_the_lesson(tmp_path):
    path = course(tmp_path, edited("      gate: all(k.spill_stores == 0 for k in resources)\n",
                                   "      gate: all(k.spill_stores == 0 for k in resources) and m > 0\n"))
    assert load_error(path) == (f"{path}:7: lesson 'day7-hello': claims[1].gate: 'all(k.spill_stores == 0 for k "
                                "in resources) and m > 0' names unknown name 'm': not a field of this lesson and not "
                                "an allowed function (fields here: cc, failures, gpu, n, resources, sizes)")


def test_an_error_in_a_list_output_names_its_line(tmp_path):
    path = course(tmp_path, edited('      - line: "n = {n:int}"\n',
                                   '      - line: "n = {n:int}"\n        colour: red\n'))
    assert load_error(path) == f"{path}:12: lesson 'day7-hello': output.items[1].colour: unknown key 'colour'"


def test_written_out_is_the_long_form(tmp_path):
    course(tmp_path, SHORT)
    data = written_out(yaml.safe_load(SHORT), tmp_path)
    assert data["defaults"] == {}
    assert data["lessons"][0]["id"] == "day7-hello"
    assert [c["id"] for c in data["lessons"][0]["claims"]] == ["n-positive", "no-kernel-spills", "is-fast"]
    assert data["lessons"][0]["output"]["items"][0]["line"] == "GPU: {gpu:device} (compute capability {cc:word:device})"
    path = tmp_path / "written.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    dump = load_manifest(tmp_path / "lessons.yaml").model_dump(mode="json")
    assert load_manifest(path).model_dump(mode="json") == dump


# -- the output schema's short forms ------------------------------------------------------------
def test_a_rule_in_a_placeholder_is_a_field_spec():
    short = LineItem(line="Shared memory: {smem:int:device} bytes, {note:volatile}")
    long = LineItem(line="Shared memory: {smem:int} bytes, {note}", fields={"smem": {"compare": "device"},
                                                                        "note": {"compare": "volatile"}})
    assert short.model_dump() == long.model_dump()
    assert short.pattern.match("Shared memory: 1024 bytes, hi") == {"smem": 1024, "note": "hi"}


@pytest.mark.parametrize("template, fields, message", [
    ("{ms:float:tolerance}", None, "'{ms:float:tolerance}' in '{ms:float:tolerance}': a tolerance needs its bounds; "
                                   "give it under fields, as {ms: {compare: tolerance, rel: 0.25}}"),
    ("{x:device:volatile}", None, "'{x:device:volatile}' in '{x:device:volatile}': a placeholder is {name}, "
                                  "{name:type}, {name:rule} or {name:type:rule}"),
    ("{x:int:float}", None, "'{x:int:float}' in '{x:int:float}': a placeholder is {name}, {name:type}, "
                            "{name:rule} or {name:type:rule}"),
    ("{x:int:device}", {"x": {"compare": "exact"}},
     "field 'x' is compared 'device' in '{x:int:device}' but 'exact' in its fields"),
])
def test_a_rule_in_a_placeholder_refused(template, fields, message):
    with pytest.raises(ValueError) as info:
        split_rules(template, fields)
    assert str(info.value) == message


def test_a_row_template_gives_the_columns_and_a_rule():
    table = TableItem(table="failures", anywhere=True, row="FAILED {kernel:word} at {index:int:volatile}: {what}")
    assert {name: (spec.type, spec.compare.value) for name, spec in table.columns.items()} == {
        "kernel": ("word", "exact"), "index": ("int", "volatile"), "what": ("str", "exact")}


@pytest.mark.parametrize("keys, key", [(["a", "b"], "size"), (["256x256/naive", "256x256/tiled"], ["size", "kernel"])])
def test_keys_give_the_key_columns(keys, key):
    table = TableItem(table="t", keys=keys, columns={"size": "word", "kernel": "word", "ms": "float"})
    assert table.key == key


def test_keys_of_different_shapes_need_a_key():
    with pytest.raises(ValueError) as info:
        TableItem(table="t", keys=["a", "b/c"], columns={"size": "word", "kernel": "word"})
    assert "the keys of table 't' have different numbers of '/'-separated parts; give its key columns with 'key'" \
        in str(info.value)


def test_a_section_is_keyed_by_its_first_field(tmp_path):
    text = edited('      - line: "n = {n:int}"\n', '      - line: "n = {n:int}"\n      - section: cases\n'
                  '        items:\n          - line: "case {case:word}: {ms:float}"\n')
    section = load_manifest(course(tmp_path, text)).lesson("day7-hello").output.items[2]
    assert (section.section, section.key) == ("cases", "case")
    # The first in the line, though a field with a rule is listed under fields first.
    assert SectionItem(section="s", items=[{"line": "case {case:word}: {ms:float:device}"}]).key == "case"
    assert SectionItem(section="s", items=[{"line": r"(?P<k>\w+) (?P<v>\d+)", "regex": True}]).key == "k"
    with pytest.raises(ValueError) as info:
        SectionItem(section="s", items=[{"line": "no fields"}])
    assert "a section's blocks are named by the first field of its first line, and this line has none; give the " \
           "section's key with 'key'" in str(info.value)


def test_skip_output_leaves_defaults_output_out(tmp_path):
    # A program the course does not write never prints the default GPU line: it opts out.
    text = edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    skip_output: true\n")
    lesson = load_manifest(course(tmp_path, text)).lessons[0]
    assert [getattr(item, "line", None) for item in lesson.output.items][:1] == ["n = {n:int}"]
    assert "skip_output" not in written_out(yaml.safe_load(text), tmp_path)["lessons"][0]


def test_skip_output_keeps_the_lines_of_its_own_items(tmp_path):
    text = edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    skip_output: true\n")
    text = edited('      - line: "n = {n:int}"\n', '      - line: "n = {n:int}"\n        colour: red\n', text)
    path = course(tmp_path, text)
    assert load_error(path) == f"{path}:13: lesson 'day7-hello': output.items[0].colour: unknown key 'colour'"


def test_skip_output_must_be_a_bool(tmp_path):
    path = course(tmp_path, edited("  - day7-hello: Hello\n", "  - day7-hello: Hello\n    skip_output: gpu\n"))
    assert "skip_output" in load_error(path)


@pytest.mark.parametrize("output", ["", "    output:\n", "    output: []\n"])
def test_a_lesson_needs_no_output_schema_to_build(tmp_path, output):
    # "Just build it first": no catch-all text item is needed before the schema is written.
    text = "version: 1\nlessons:\n  - day7-hello: Hello\n" + output
    lesson = load_manifest(course(tmp_path, text)).lessons[0]
    assert lesson.output.items == [] and lesson.claims == []
