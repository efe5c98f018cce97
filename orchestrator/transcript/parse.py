"""Parse a lesson's stdout with its output schema into a pydantic model."""

from __future__ import annotations

import re
from typing import Iterator, Union

from pydantic import BaseModel, Field

from ..errors import TranscriptError
from ..process import clip_line
from ..words import quoted, shown
from .schema import LineItem, OutputSchema, SectionItem, TableItem
from .patterns import MatchBudget, PatternTimeout
from .matchers import Matcher
from .lines import Lines, line_at
from .plan import LinePlan, SectionPlan, Stops, TablePlan, TextPlan, plan_of
from .fields import FieldSpec, NumberTooLong

Value = Union[int, float, str, list[float], None]
# A separator rule: only these characters, and three dashes in a row somewhere. Said as one regex,
# `^[\s\-=+|:]*-{3,}[\s\-=+|:]*$`, it backtracked cubically: 4,000 dashes and an `x` took 42 s.
_RULE_CHARS = re.compile(r"[\s\-=+|:]*")


def _is_rule(line: str) -> bool:
    return "---" in line and _RULE_CHARS.fullmatch(line) is not None


class Row(BaseModel):
    key: str
    line: int
    values: dict[str, Value]


# Row(**fields), without BaseModel.__init__ in between: a table's rows are made by the dozen each parse.
_row = Row.__pydantic_validator__.validate_python


class Block(BaseModel):
    key: str
    line: int
    scope: "Scope"


class Scope(BaseModel):
    values: dict[str, Value] = Field(default_factory=dict)
    lines: dict[str, int] = Field(default_factory=dict)
    tables: dict[str, list[Row]] = Field(default_factory=dict)
    sections: dict[str, list[Block]] = Field(default_factory=dict)


Block.model_rebuild()


class Transcript(BaseModel):
    """A parsed transcript: the root scope and how many lines the text had."""

    scope: Scope
    line_count: int


class Flat(BaseModel):
    """One field of a parsed transcript with its path, rule and line."""

    path: str
    value: Value
    spec: FieldSpec
    line: int | None


class _Parser:
    """One parse: the schema's plan (plan.py) walked over the transcript's lines.

    `at` is the line matched last, set before each match: a pattern that runs
    out of time is named with it.
    """

    def __init__(self, schema: OutputSchema, text: str, source: str):
        self.schema = schema
        self.source = source
        self.plan = plan_of(schema)
        self.anywhere_rows: dict[str, list[tuple[int, dict]]] = {t.table: [] for _, t in self.plan.anywhere}
        self.output = text
        self.budget = MatchBudget()
        self.at: tuple[int, str] | None = None   # the line matched last; None: the blank lines tried first
        # A line's values by a pattern, found looking ahead (the line that ends free text, a block's first line),
        # for the item it starts: (its entry, the matcher, the values). The same match made again would take
        # the line the same way, or fail the same way before it got here.
        self.known: tuple[tuple[int, str], Matcher, dict] | None = None
        self.lines: Lines

    def timed_out(self, exc: PatternTimeout) -> TranscriptError:
        """The parse, stopped by a pattern out of time: which pattern, where lessons.yaml has it, and which line."""
        pattern, budget = exc.culprit(), exc.budget
        where = "output" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in pattern.at)
        named = (f"the pattern of {pattern.origin} ({where} {pattern.source!r})" if pattern.origin
                 else f"the pattern {where} {pattern.source!r}")
        on = "this line" if self.at is not None else "a blank line, on which it is tried before the transcript"
        if exc.whole:
            message = (f"matching the transcript took longer than {budget.total:g} s in all, so it was not parsed "
                       f"past {on}; {named} took {budget.taken[pattern]:.1f} s of it")
        else:
            message = f"{named} took longer than {budget.line:g} s on {on}, so the transcript was not parsed further"
        if pattern.written:
            message += ("; a regex that can match a text in very many ways, as (a|aa)+$ can, backtracks without "
                        "end: write it so that it cannot")
        else:
            message += ("; a template whose fields of type str can split a line in very many ways is slow on a "
                        "long one: give them narrower types (int, float, word)")
        if self.at is not None:
            message += f"; found {clip_line(self.at[1].strip(), quote=True)}"
        error = TranscriptError(message, path=self.source, line=self.at[0] if self.at is not None else None)
        error.item = (pattern.at, "the pattern that ran out of time")
        return error

    # -- helpers ---------------------------------------------------------
    def error(self, pos: int, message: str) -> TranscriptError:
        if self.lines.has(pos):
            no, line = self.lines[pos]
            return TranscriptError(f"{message}; found {clip_line(line.strip(), quote=True)}",
                                   path=self.source, line=no)
        total = self.lines.total()
        return TranscriptError(f"{message}; the transcript ends at line {total}", path=self.source,
                               line=total or None)

    def skip_blank(self, pos: int) -> int:
        lines = self.lines
        taken = lines.taken
        while (pos < len(taken) or lines.has(pos)) and not taken[pos][1].strip():
            pos += 1
        return pos

    def _match(self, match: Matcher, entry: tuple[int, str]) -> dict | None:
        """`match` of the entry's line (the line matched now), or the values found for it looking ahead."""
        self.at = entry
        known = self.known
        if known is not None and known[0] is entry and known[1] is match:
            self.known = None
            return known[2]
        return match(entry[1], self.budget)

    # -- items -----------------------------------------------------------
    def items(self, planned: tuple, pos: int, scope: Scope, at: tuple = ("items",)) -> int:
        for index, node, ends in planned:
            try:
                kind = type(node)
                if kind is LinePlan:
                    pos = self.line(node, pos, scope)
                elif kind is TablePlan:
                    if not node.anywhere:
                        pos = self.table(node, pos, scope)
                elif kind is TextPlan:
                    pos = self.text(node, pos, ends)
                else:
                    pos = self.section(node, pos, scope)
            except TranscriptError as exc:
                exc.item = exc.item or (at + (index,), "the item it expected")
                raise
        return pos

    def line(self, node: LinePlan, pos: int, scope: Scope) -> int:
        lines = self.lines
        taken = lines.taken
        p = pos
        while (p < len(taken) or lines.has(p)) and not taken[p][1].strip():   # skip_blank, where most lines are
            p += 1
        values = None
        if p < len(taken):   # read up to p: past the end, the transcript ends before it
            self.at = entry = taken[p]
            known = self.known
            if known is not None and known[0] is entry and known[1] is node.match:
                values, self.known = known[2], None
            else:
                values = node.match(entry[1], self.budget)
        if values is not None:
            if node.flag is not None:
                values[node.flag] = True
            scope.values.update(values)
            scope.lines.update(dict.fromkeys(values, entry[0]))
            return p + 1
        if node.optional:
            scope.values.update(node.absent)
            if node.flag is not None:
                scope.values[node.flag] = False
            return pos
        raise self.error(p, node.expected)

    def text(self, node: TextPlan, pos: int, ends: Stops) -> int:
        lines, budget, most = self.lines, self.budget, node.max_lines
        taken = lines.taken
        count = 0
        while pos < len(taken) or lines.has(pos):
            self.at = entry = taken[pos]
            line = entry[1]
            for needle, match in ends:   # a line that starts a later item, or ends the list, ends the text
                if needle is None or needle in line:
                    values = match(line, budget)
                    if values is not None:
                        self.known = (entry, match, values)
                        return pos
            if line.strip():
                count += 1
                if most is not None and count > most:
                    raise self.error(pos, f"free text {node.text!r} runs past its {most} lines")
            pos += 1
        return pos

    def table(self, node: TablePlan, pos: int, scope: Scope) -> int:
        rows: list[Row] = []
        scope.tables[node.table] = rows
        for name, _ in node.notes:
            scope.tables[name] = []
        p = self.skip_blank(pos)
        lines, budget, match_row = self.lines, self.budget, node.match_row
        taken = lines.taken
        first = None   # the first row's entry and values, where the table has no header
        if node.header is not None:
            if p < len(taken) and self._match(node.header, taken[p]) is not None:   # skip_blank read up to p
                p += 1
            elif node.optional:
                return pos
            else:
                raise self.error(p, f"expected the header of table {node.table!r} matching {node.header_line!r}")
        else:
            first = (taken[p], self._match(match_row, taken[p])) if p < len(taken) else (None, None)
            if first[1] is None:
                if node.optional or node.min == 0:
                    return pos
                raise self.error(p, f"expected a row of table {node.table!r}: {node.item.describe_row()}")
        most, rules, key = node.max, node.rules, node.key
        while p < len(taken) or lines.has(p):
            self.at = entry = taken[p]
            no, line = entry
            if not line.strip():
                break
            if rules and _is_rule(line):
                p += 1
                continue
            if first is not None and first[0] is entry:
                values, first = first[1], None
            else:
                values = match_row(line, budget)
            if values is not None:
                if most is not None and len(rows) >= most:
                    raise self.error(p, f"table {node.table!r} has more than {most} rows")
                rows.append(_row({"key": key(values, len(rows)), "line": no, "values": values}))
                p += 1
                continue
            for name, match in node.notes:
                note_values = match(line, budget)
                if note_values is not None:
                    anchor = rows[-1].values[node.key_columns[0]] if rows and node.key_columns else len(rows)
                    scope.tables[name].append(Row(key=str(anchor), line=no, values=note_values))
                    p += 1
                    break
            else:
                break
        return self._table_ends(node, rows, p)

    def _table_ends(self, node: TablePlan, rows: list[Row], p: int) -> int:
        """`p`, after a table's rows, once they are as many as it needs, each key once, and the keys it lists."""
        if len(rows) < node.min:
            if self.lines.has(p) and self.lines[p][1].strip():
                raise self.error(p, f"table {node.table!r} has {len(rows)} of its {node.min} rows and this "
                                    f"line is not a row ({node.item.describe_row()})")
            end = self.lines[p - 1][0] if p else 0
            raise TranscriptError(f"table {node.table!r} ends after {len(rows)} row{'' if len(rows) == 1 else 's'}; "
                                  f"it needs {node.min}", path=self.source, line=end)
        seen: dict[str, int] = {}
        for row in rows:
            if row.key in seen:
                raise TranscriptError(f"table {node.table!r} repeats key {quoted(row.key)} "
                                      f"(first at line {seen[row.key]})", path=self.source, line=row.line)
            seen[row.key] = row.line
        if node.keys is not None and seen.keys() != node.key_set:   # the same keys, in any order: no more to say
            missing = [k for k in node.keys if k not in seen]
            extra = [k for k in seen if k not in node.keys]
            if missing or extra:
                detail = "; ".join(filter(None, [
                    f"missing {', '.join(map(shown, missing))}" if missing else "",
                    f"unexpected {', '.join(map(shown, extra))}" if extra else ""]))
                line_no = seen[extra[0]] if extra else (rows[-1].line if rows else None)
                raise TranscriptError(f"table {node.table!r}: {detail}", path=self.source, line=line_no)
        return p

    def section(self, node: SectionPlan, pos: int, scope: Scope) -> int:
        first, budget = node.first, self.budget
        taken = self.lines.taken
        blocks: list[Block] = []
        scope.sections[node.section] = blocks
        while True:
            p = self.skip_blank(pos)
            if p >= len(taken):   # skip_blank has read up to p
                break
            self.at = entry = taken[p]
            values = first(entry[1], budget)
            if values is None:
                break
            self.known = (entry, first, values)   # the block's first line, matched again by its first item
            if node.max is not None and len(blocks) >= node.max:
                raise self.error(p, f"section {node.section!r} repeats more than {node.max} times")
            inner = Scope()
            pos = self.items(node.items, p, inner, node.at)
            key = "/".join(str(inner.values.get(k)) for k in node.key_columns)
            if any(b.key == key for b in blocks):
                raise TranscriptError(f"section {node.section!r} repeats key {key!r}",
                                      path=self.source, line=entry[0])
            blocks.append(Block(key=key, line=entry[0], scope=inner))
        if len(blocks) < node.min:
            raise self.error(self.skip_blank(pos), f"expected section {node.section!r} "
                             f"({len(blocks)} of at least {node.min}) starting with {node.first_line!r}")
        return pos

    def parse(self) -> Transcript:
        self.lines = Lines(self, self.output)
        scope = Scope()
        pos = self.items(self.plan.items, 0, scope)
        pos = self.skip_blank(pos)
        if self.lines.has(pos):
            error = self.error(pos, "unexpected line after the last item of the schema")
            error.item = (("items", self.plan.last), "the last item of the schema, where the transcript should end")
            raise error
        for index, table in self.plan.anywhere:
            found = self.anywhere_rows[table.table]
            if len(found) < table.min:
                error = TranscriptError(f"table {table.table!r} needs {table.min} rows, found {len(found)}",
                                        path=self.source)
                error.item = (("items", index), "the item it expected")
                raise error
            scope.tables[table.table] = [Row(key=table.key(values, i), line=no, values=values)
                                         for i, (no, values) in enumerate(found)]
        return Transcript(scope=scope, line_count=self.lines.total())


def decode_output(data: bytes) -> str:
    """Program output as text; bytes that are not UTF-8 become U+FFFD."""
    return data.decode("utf-8", errors="replace")


def parse_transcript(schema: OutputSchema, text: str, source: str = "<transcript>") -> Transcript:
    """Parse `text`; raise TranscriptError naming the line, the text and the expected pattern."""
    if "\x00" in text:
        no = text[: text.index("\x00")].count("\n") + 1
        raise TranscriptError("binary output (a NUL byte) where text was expected", path=source, line=no)
    parser = _Parser(schema, text, source)
    try:
        return parser.parse()
    except PatternTimeout as exc:
        raise parser.timed_out(exc) from None
    except NumberTooLong as exc:
        # Wherever the parser met it (a line it expected, a row, a look ahead for the next item), the
        # line holding the number is the one to name: the first that holds it.
        found = re.search(rf"(?<!\d){re.escape(exc.text)}(?!\d)", text)
        no, line = line_at(text, found.start() if found else 0)
        raise TranscriptError(f"{exc}; found {clip_line(line.strip(), quote=True)}", path=source, line=no) from None
    finally:
        # The parser and its lines refer to each other: parted, both go as the parse ends, not at the cycle
        # collector's next full pass (which found 45,000 objects of 1,333 parses in a 400-lesson verify).
        parser.__dict__.pop("lines", None)


def flatten(items: list, scope: Scope, prefix: str = "") -> Iterator[Flat]:
    """Every field of a parsed scope with its path, in schema order: made of what the parse and the schema hold,
    of the types Flat declares, so not validated again (11,600 Flats of a 400-lesson verify each checked its
    FieldSpec again); a truth value (a flag's) is the int that validating made it."""
    def made(*, value, **fields) -> Flat:
        return Flat.model_construct(value=int(value) if value is True or value is False else value, **fields)

    for item in items:
        if isinstance(item, LineItem):
            for name, spec in item.names.items():
                yield made(path=prefix + name, value=scope.values.get(name), spec=spec,
                           line=scope.lines.get(name))
        elif isinstance(item, TableItem):
            keys = set(item.key_columns)
            for row in scope.tables.get(item.table, []):
                for name, spec in item.columns.items():
                    if name not in keys:
                        yield made(path=f"{prefix}{item.table}[{row.key}].{name}",
                                   value=row.values.get(name), spec=spec, line=row.line)
            for note in item.notes:
                for row in scope.tables.get(note.name, []):
                    for name, spec in note.pattern.fields.items():
                        yield made(path=f"{prefix}{note.name}[{row.key}].{name}",
                                   value=row.values.get(name), spec=spec, line=row.line)
        elif isinstance(item, SectionItem):
            for block in scope.sections.get(item.section, []):
                yield from flatten(item.items, block.scope, f"{prefix}{item.section}[{block.key}].")
