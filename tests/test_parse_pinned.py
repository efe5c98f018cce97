"""parse_transcript pinned over the real transcripts and 2,000 edits of them, parses and errors alike.

tests/data/parsed/seeds.json holds, for each text, a digest of what parsing
it gave: the whole Transcript as model_dump() writes it (value types
included: a flag's True is not a row's 1), or the TranscriptError's message,
line and item. A change to the parser that changes any of them fails here,
naming the texts. When a change is meant, run this file
(`python tests/test_parse_pinned.py`) to write the digests again.

The functions the parser matches lines with (transcript/matchers.py) and the
fields' converters are checked here too, against the plain definitions they
stand for: the regex and each field's convert, line by line.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import interleaved
from orchestrator.errors import TranscriptError
from orchestrator.manifest.load import load_manifest
from orchestrator.transcript import plan as plan_module
from orchestrator.transcript.fields import FieldSpec, NumberTooLong
from orchestrator.transcript.matchers import cells_matcher
from orchestrator.transcript.parse import Block, Row, Scope, parse_transcript
from orchestrator.transcript.patterns import MatchBudget
from orchestrator.transcript.schema import LineItem, OutputSchema, SectionItem, TableItem

HERE = Path(__file__).parent
COURSE = HERE / "data" / "course"
SEEDS = HERE / "data" / "seeds"
PINNED = HERE / "data" / "parsed" / "seeds.json"

LESSONS = {"shared_memory": "day13-shared-memory", "syncthreads": "day14-syncthreads",
           "tiled_matmul": "day16-tiled-matmul", "matmul_fp16": "day71-matmul-fp16"}
# A failure line as day 13 prints one: a row of its `anywhere` table, a line the others' schemas have no place for.
FAILURE = "FAILED transposeNaive: first wrong element at (7, 3): got 1.5, want 2.5"


def _schemas() -> dict:
    manifest = load_manifest(COURSE / "lessons.yaml")
    return {lesson.id: lesson.output for lesson in manifest.lessons}


def _edits(lines: list[str]):
    """Each text made of the seed's lines with one edit: (what the edit is, the text)."""
    def text(edited: list[str]) -> str:
        return "".join(line + "\n" for line in edited)

    yield "as recorded", text(lines)
    yield "with CRLF line ends", "".join(line + "\r\n" for line in lines)
    yield "with blanks after each line", text([line + " \t" for line in lines])
    for i, line in enumerate(lines):
        yield f"without line {i + 1}", text(lines[:i] + lines[i + 1:])
        yield f"with line {i + 1} twice", text(lines[:i + 1] + lines[i:])
        yield f"with a blank line before line {i + 1}", text(lines[:i] + ["  "] + lines[i:])
        yield f"with line {i + 1} swapped with the next", text(lines[:i] + lines[i + 1:i + 2] + [line] + lines[i + 2:])
        yield f"cut after line {i + 1}", text(lines[:i + 1])
        yield f"with a failure line before line {i + 1}", text(lines[:i] + [FAILURE] + lines[i:])
        if re.search(r"\d", line):
            yield f"with line {i + 1}'s first digit an x", text(lines[:i] + [re.sub(r"\d", "x", line, count=1)]
                                                               + lines[i + 1:])
            yield (f"with line {i + 1}'s first number 5,000 digits long",
                   text(lines[:i] + [re.sub(r"\d+", "7" * 5000, line, count=1)] + lines[i + 1:]))


def _outcome(schema, text: str, name: str) -> str:
    try:
        return repr(parse_transcript(schema, text, name).model_dump())
    except TranscriptError as exc:
        return repr((str(exc), exc.line, exc.item))


def outcomes() -> dict[str, dict[str, str]]:
    """A digest of each text's parse, by seed and schema, then by edit: every seed with its lesson's schema,
    and the two run under compute-sanitizer also with one that ignores the tool's lines."""
    schemas = _schemas()
    found: dict[str, dict[str, str]] = {}
    for path in sorted(SEEDS.glob("*.txt")):
        schema = schemas[LESSONS[path.name.split(".")[0]]]
        kinds = [("", schema)] + ([(" ignoring the tool's lines", interleaved(schema))]
                                  if path.name.endswith("check.txt") else [])
        lines = path.read_text(encoding="utf-8").splitlines()
        for said, kept in kinds:
            found[path.name + said] = {edit: hashlib.sha256(_outcome(kept, text, path.name).encode()).hexdigest()[:16]
                                       for edit, text in _edits(lines)}
    return found


def test_every_parse_and_error_of_the_seeds_and_their_edits_is_the_one_pinned():
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    found = outcomes()
    assert sum(map(len, found.values())) > 2_000
    assert {seed: set(edits) for seed, edits in found.items()} == {seed: set(edits) for seed, edits in pinned.items()}
    moved = [f"{seed}, {edit}" for seed, edits in found.items() for edit in edits if edits[edit] != pinned[seed][edit]]
    assert not moved, f"{len(moved)} parses differ from the pinned ones, among them: {moved[:10]}"


@pytest.mark.parametrize("name", sorted(path.name for path in SEEDS.glob("*.txt") if "check" not in path.name))
def test_each_row_block_and_scope_is_what_validating_it_would_make(name):
    """The parser may build its rows and blocks without validating them: each equals the model validated from
    its own fields, value types included (a bool column's value is the int that validating made it)."""
    schema = _schemas()[LESSONS[name.split(".")[0]]]
    text = (SEEDS / name).read_text(encoding="utf-8")
    failures = {"shared_memory": FAILURE,
                "syncthreads": "FAILED reverseTileSynced block 64: 3 mismatches, first at element 5: got 1, want 2",
                "tiled_matmul": "FAILED matmulTiled case 256x256x256: first wrong element at (1, 2): got 3, want 4",
                "matmul_fp16": "FAILED matmulTiledF32 case 256x256x256: element row 1, column 2: |got-ref| = 0.5 "
                               "exceeds 0.25"}
    transcript = parse_transcript(schema, text + failures[name.split(".")[0]] + "\n", name)
    assert transcript.scope.tables["failures"], "the failure line is a row"
    seen = {Row: 0, Block: 0, Scope: 0}

    def same(made, again) -> None:
        assert again == made and again.model_fields_set == made.model_fields_set
        assert again.model_dump_json() == made.model_dump_json()

    def check(scope: Scope) -> None:
        seen[Scope] += 1   # made empty (Scope()) and filled as the parse goes: no field of it set by validating
        assert type(scope) is Scope and scope.model_fields_set == set()
        for rows in scope.tables.values():
            for row in rows:
                seen[Row] += 1
                again = Row(key=row.key, line=row.line, values=row.values)
                same(row, again)
                assert [type(v) for v in again.values.values()] == [type(v) for v in row.values.values()], row
        for blocks in scope.sections.values():
            for block in blocks:
                seen[Block] += 1
                same(block, Block(key=block.key, line=block.line, scope=block.scope))
                check(block.scope)

    check(transcript.scope)
    assert seen[Row] > 0


def test_a_schemas_plan_is_made_once_and_goes_with_it():
    """The parser's plan of a schema (plan.py) is kept by the schema's id while the schema lives, not after."""
    schema = OutputSchema.model_validate({"items": [{"line": "n = {n:int}"}]})
    first = plan_module.plan_of(schema)
    assert parse_transcript(schema, "n = 3\n").scope.values == {"n": 3} and plan_module.plan_of(schema) is first
    key = id(schema)
    assert plan_module._PLANS[key][1] is first
    del schema, first
    gc.collect()
    assert key not in plan_module._PLANS


# -- the matchers against the plain definitions they stand for ------------------------------------------
def _converted(spec: FieldSpec, text: str):
    """FieldSpec.convert as it was written before it was one function a spec: strip, missing, suffix, type."""
    text = text.strip()
    if spec.missing is not None and text == spec.missing:
        return None
    if spec.suffix and text.endswith(spec.suffix):
        text = text[: -len(spec.suffix)]
    if spec.type == "int":
        digits, limit = len(text.lstrip("+-")), getattr(sys, "get_int_max_str_digits", lambda: 0)()
        if limit and digits > limit:
            raise NumberTooLong(text, digits, limit)
        return int(text)
    if spec.type == "float":
        return float(text)
    if spec.type == "floats":
        return [float(part) for part in re.split(r"[ \t]*,[ \t]*|[ \t]+", text) if part]
    if spec.type == "bool":
        return text in ("yes", "true")
    return text


def _by_fields(fields: dict, found):
    """A line's values by name, each converted by its field; None where one does not convert."""
    values = {}
    for name, spec in fields.items():
        raw = found.group(name)
        if raw is None:
            values[name] = None
            continue
        try:
            values[name] = _converted(spec, raw)
        except NumberTooLong:
            raise
        except ValueError:
            return None
    return values


def _by_pattern(pattern, line: str):
    """Pattern.match as it was written before it was one function a pattern: the needle, the regex, each field."""
    if pattern.needle is not None and pattern.needle not in line:
        return None
    found = pattern.regex.compiled.fullmatch(line.rstrip())
    return None if found is None else _by_fields(pattern.fields, found)


def _row_by_cells(columns: dict, line: str):
    """TableItem.match_row of a table of columns, as it was written: each cell taken by its regex, converted."""
    cells = line.split()
    if len(cells) != len(columns):
        return None
    values = {}
    for cell, (name, spec) in zip(cells, columns.items()):
        if re.fullmatch(spec.value_regex(), cell) is None:
            return None
        try:
            values[name] = _converted(spec, cell)
        except NumberTooLong:
            raise
        except ValueError:
            return None
    return values


def _outcome_of(make, *args):
    try:
        value = make(*args)
    except NumberTooLong as exc:
        return ("too long", str(exc))
    return repr(value), [type(v) for v in (value or {}).values()]


SPECS = [FieldSpec(type=kind, **extra) for kind in ("int", "float", "str", "word", "bool", "floats")
         for extra in ({}, {"suffix": "x"}, {"missing": "-"}, {"suffix": "ms", "missing": "n/a"})]
TEXTS = ["7", " 7 ", "-7", "+7", "7x", "7.5", " 7.5x", "1e3", ".5", "inf", "nan", "-", " - ", "n/a", "yes", "no",
         "true", "1 2.5, -3e2\t4", "1_000", "\u0661\u0662", "abc", "", " ", "x", "7 x", "1" * 700, "2" * 5000,
         "\u00a07\u2009", "7ms", "1.5ms "]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: f"{spec.type}-{spec.suffix}-{spec.missing}")
def test_each_converter_converts_as_the_spec_says(spec):
    for text in TEXTS:
        for convert in (spec.convert, spec.converter()):
            try:
                made = ("value", convert(text))
            except NumberTooLong as exc:
                made = ("too long", str(exc))
            except ValueError:
                made = ("no value", None)
            try:
                expected = ("value", _converted(spec, text))
            except NumberTooLong as exc:
                expected = ("too long", str(exc))
            except ValueError:
                expected = ("no value", None)
            assert repr(made) == repr(expected) and type(made[1]) is type(expected[1]), (spec, text)


def _lines_tried() -> list[str]:
    """Every line of every seed, each also with its digits made letters, its blanks other whitespace, a number
    5,000 digits long and a trailing blank."""
    lines = set()
    for path in SEEDS.glob("*.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            lines |= {line, line + " ", re.sub(r"\d", "x", line, count=1), line.replace(" ", "\u00a0"),
                      line.replace(" ", "\t"), re.sub(r"\d+", "7" * 5000, line, count=1), FAILURE}
    return sorted(lines)


def test_each_matcher_gives_what_matching_by_the_fields_gives():
    """A pattern's matcher (numbered groups, converters made once, a plain float by float) and a table's cells'
    (word and str cells as they are) give, on each line, what the regex and each field's convert give."""
    def items(listed):
        for item in listed:
            yield item
            if isinstance(item, SectionItem):
                yield from items(item.items)

    lines = _lines_tried()
    tried = 0
    for schema in _schemas().values():
        for item in items(schema.items):
            patterns = []
            if isinstance(item, LineItem):
                patterns.append(item.pattern)
            elif isinstance(item, TableItem):
                patterns += [note.pattern for note in item.notes]
                if item.header_pattern is not None:
                    patterns.append(item.header_pattern)
                if item.row is not None:
                    patterns.append(item.__pydantic_private__["_row"])
                else:
                    cells = cells_matcher(item.columns)
                    for line in lines:
                        assert _outcome_of(cells, line) == _outcome_of(_row_by_cells, item.columns, line), line
                        tried += 1
            for pattern in patterns:
                for line in lines:
                    matched = _outcome_of(pattern.matcher(), line, MatchBudget())
                    assert matched == _outcome_of(_by_pattern, pattern, line), (pattern.source, line)
                    tried += 1
    assert tried > 10_000


def test_a_cell_split_on_whitespace_is_whole_to_word_and_str():
    """What lets a word or str cell be its value as it is: at every code point, str.split, str.strip and `re`'s
    \\s agree on what is whitespace, and `.` takes whatever is not."""
    word, text = re.compile(r"\S+"), re.compile(r".+?")
    for point in range(sys.maxunicode + 1):
        if 0xD800 <= point <= 0xDFFF:
            continue
        char = chr(point)
        blank = char.isspace()
        assert (word.fullmatch(char) is None) == blank == (("a" + char + "b").split() == ["a", "b"]), hex(point)
        assert blank or (text.fullmatch(char) is not None and char.strip() == char), hex(point)


if __name__ == "__main__":
    PINNED.parent.mkdir(exist_ok=True)
    PINNED.write_text(json.dumps(outcomes(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
