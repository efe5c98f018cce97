"""The output schema language: what a lesson prints, typed, and how each field is judged.

A schema is an ordered list of items matched against the transcript's lines:

- ``line``: one line, a template such as ``Matrix: {rows:int} x {cols:int} floats``;
- ``table``: an optional header, separator rules, typed rows, note rows;
- ``section``: a block of items repeated once per case;
- ``text``: free text, allowed and ignored.

docs/schema.md is the reference; this module turns it into compiled regexes.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Iterator, Union

from pydantic import (AfterValidator, BaseModel, Discriminator, Field, PrivateAttr, Tag, field_validator,
                      model_validator)

from ..names import is_identifier
from ..words import quoted
from .fields import TYPE_REGEX, FieldSpec, Strict, shorthand_schema, check_field_name
from .forms import first_field, key_of_keys, line_long_form, table_long_form
from .matchers import Matcher, cells_matcher, pattern_matcher
from .patterns import BoundedRegex, MatchBudget, compile_regex


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z]+))?\}")
_ANY_PLACEHOLDER = re.compile(r"\{([^{}:]*)(?::[^{}]*)?\}")   # what a placeholder of any name looks like


class Pattern:
    """A compiled line template, or a raw regex with named groups."""

    def __init__(self, source: str, fields: dict[str, FieldSpec], *, is_regex: bool = False):
        self.source = source
        self.fields = fields
        self.is_regex = is_regex
        self.needle: str | None = None   # a template's longest run of literal text, which any line it takes holds
        self.regex = self._compile()
        self._matcher: Matcher | None = None

    def _compile(self) -> BoundedRegex:
        if self.is_regex:
            regex = compile_regex(self.source)
            unknown = set(regex.groupindex) - set(self.fields)
            for name in unknown:
                self.fields[name] = FieldSpec()
            for name, spec in self.fields.items():
                spec.check_type(name)
            return regex
        if self.fields:   # refined under `fields:`; else the same wherever it is written, and made once
            return BoundedRegex(self.source, self._template(), written=False)
        if (made := _TEMPLATES.get(self.source)) is None:
            made = _TEMPLATES[self.source] = (self._template(), dict(self.fields), self.needle)
        text, fields, self.needle = made
        self.fields.update(fields)
        return BoundedRegex(self.source, text, written=False)

    def _template(self) -> str:
        # A braced name that is no identifier is no brace amiss. The item is named only for a name that fails:
        # quoting every template of a 1,000-lesson course took an eighth of its load.
        for m in _ANY_PLACEHOLDER.finditer(self.source):
            if not is_identifier(m.group(1)):
                check_field_name(m.group(1), f"in {quoted(self.source)}")
        for name in self.fields:
            if not is_identifier(name):
                check_field_name(name, f"(under fields) in {quoted(self.source)}")
        out: list[str] = []
        pos = 0
        names: set[str] = set()
        for m in _PLACEHOLDER.finditer(self.source):
            out.append(_literal(self.source[pos:m.start()], first=pos == 0))
            name, type_ = m.group(1), m.group(2)
            if name in names:
                raise ValueError(f"field {name!r} appears twice in {self.source!r}")
            names.add(name)
            spec = self.fields.get(name)
            if type_ is not None:
                if type_ not in TYPE_REGEX:
                    raise ValueError(f"unknown type {type_!r} in {self.source!r}; "
                                     f"use one of {', '.join(TYPE_REGEX)}")
                if spec is None:
                    spec = FieldSpec(type=type_)
                elif spec.type != type_ and "type" in spec.model_fields_set:
                    raise ValueError(f"field {name!r} is {type_!r} in the pattern "
                                     f"but {spec.type!r} in fields")
                else:
                    spec = spec.model_copy(update={"type": type_})
            elif spec is None:
                spec = FieldSpec()
            self.fields[name] = spec.check_type(name)
            out.append(f"(?P<{name}>{spec.value_regex()})")
            pos = m.end()
        tail = self.source[pos:]
        if "{" in tail or "}" in tail:
            raise ValueError(f"unbalanced brace in {self.source!r}")
        out.append(_literal(tail, first=pos == 0, last=True))
        # What lies between the placeholders, less its runs of spaces (which match any whitespace), is matched
        # as it is written: a line without the longest of it is no match, found without running the regex.
        literal = [part for text in _PLACEHOLDER.split(self.source)[::3] for part in text.split(" ") if part]
        self.needle = max(literal, key=len, default=None)
        extra = set(self.fields) - names
        if extra:
            raise ValueError(f"fields {sorted(extra)} are declared but not in {self.source!r}")
        return "".join(out)

    def match(self, line: str, budget: MatchBudget | None = None) -> dict[str, Any] | None:
        """The line's values, each converted by its field; None for a line the template does not take whole
        (trailing whitespace aside) or a value that does not convert (matchers.pattern_matcher)."""
        return self.matcher()(line, budget or MatchBudget())

    def matcher(self) -> Matcher:
        """match as one function of the line and the budget, made when first asked for: the fields are settled."""
        if self._matcher is None:
            self._matcher = pattern_matcher(self.needle, self.regex, self.fields)
        return self._matcher


_TEMPLATES: dict[str, tuple[str, dict[str, FieldSpec], str | None]] = {}   # lessons repeat their lines


@functools.lru_cache(maxsize=4096)
def _literal(text: str, *, first: bool = False, last: bool = False) -> str:
    """Escape template text; a run of spaces matches any run of whitespace. Made once a process for each text:
    a course's lessons repeat their templates."""
    if "{" in text or "}" in text:
        raise ValueError(f"unbalanced brace near {text!r}")
    parts = re.split(r"( +)", text)
    out = []
    for i, part in enumerate(parts):
        if part.startswith(" ") and part.strip() == "":
            leading = first and i == 0
            out.append(r"\s*" if leading or (last and i == len(parts) - 1) else r"\s+")
        else:
            out.append(re.escape(part))
    result = "".join(out)
    if first and not text.startswith(" "):
        result = r"\s*" + result
    return result


class _TemplatedLine(Strict):
    """A line template (or regex) and its fields, compiled once."""

    line: str
    regex: bool = False
    fields: dict[str, FieldSpec] = Field(default={}, json_schema_extra=shorthand_schema)

    _pattern: Pattern | None = None

    @model_validator(mode="before")
    @classmethod
    def _long_form(cls, data: Any) -> Any:
        return line_long_form(data)   # `name: float` and `{name:type:rule}` written out

    @model_validator(mode="after")
    def _compile_line(self):
        self._pattern = Pattern(self.line, dict(self.fields), is_regex=self.regex)
        return self

    @property
    def pattern(self) -> Pattern:
        # Read from the private attributes' dict itself: `self._pattern` goes through BaseModel.__getattr__,
        # a fifth of a transcript's parse when every line asks each item whether it starts there.
        pattern = self.__pydantic_private__["_pattern"]
        assert pattern is not None
        return pattern


class LineItem(_TemplatedLine):
    """One line with named, typed fields."""

    optional: bool = False
    flag: str | None = None   # a bool field: true when the (optional) line is present

    _names: dict[str, FieldSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_flag(self) -> "LineItem":
        names = dict(self.pattern.fields)
        if self.flag is not None:
            if not is_identifier(self.flag):
                raise ValueError(f"flag {quoted(self.flag)} is not an identifier")
            if self.flag in names:
                raise ValueError(f"flag {self.flag!r} is also a field of the line")
            names[self.flag] = FieldSpec(type="bool")
        self._names = names
        return self

    @property
    def names(self) -> dict[str, FieldSpec]:
        """The fields this line sets, its flag included (worked out once: loading a course asks often)."""
        return self.__pydantic_private__["_names"]   # not through __getattr__ (see pattern)


def _not_negative(value: int) -> int:
    if value < 0:
        raise ValueError(f"{value} is negative; a count is 0 or more")
    return value


# A count as lessons.yaml writes it: an integer (not `true`), 0 or more.
Count = Annotated[int, Field(strict=True, json_schema_extra={"minimum": 0}), AfterValidator(_not_negative)]


class RowCount(Strict):
    """How many rows a table has, or how many times a section repeats: from `min` to `max` (None: no end)."""

    min: Count = 0
    max: Count | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "RowCount":
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is more than max {self.max}, so no count would do; "
                             f"give a min of at most the max")
        return self


def _count_form(value: Any) -> str:
    return "range" if isinstance(value, (dict, RowCount)) else "count"


# `rows` and `repeat`: `3`, or `{min: 1, max: 5}`. The tag keeps pydantic from reporting a
# `{min: -3}` as "not a valid integer" beside what is wrong with it; manifest.py drops it from paths.
CountOrRange = Annotated[Union[Annotated[Count, Tag("count")], Annotated[RowCount, Tag("range")]],
                         Discriminator(_count_form)]
COUNT_TAGS = ("count", "range")


class NoteItem(_TemplatedLine):
    """A non-data line allowed between a table's rows, such as a speed-up summary."""

    name: str

    @model_validator(mode="after")
    def _check_name(self) -> "NoteItem":
        if not is_identifier(self.name):
            raise ValueError(f"note name {quoted(self.name)} is not an identifier")
        return self


class TableItem(Strict):
    """A table: optional header, rules, rows of typed columns, note lines.

    Rows are split on runs of whitespace into the columns, in order, unless
    ``row`` gives a template (for cells holding spaces). A table without a
    header starts at its first matching row; with ``anywhere`` its rows may
    stand anywhere in the transcript (failure lines). shorthand.py has what
    ``row`` and ``keys`` say when ``columns`` or ``key`` is left out.
    """

    table: str
    header: str | None = None
    header_regex: bool = False
    rules: bool = True
    columns: dict[str, FieldSpec] = Field(default={}, json_schema_extra=shorthand_schema)
    row: str | None = None
    row_regex: bool = False
    key: list[str] | str | None = None
    rows: CountOrRange = RowCount()
    keys: list[str] | None = Field(default=None, json_schema_extra={"uniqueItems": True})
    notes: list[NoteItem] = Field(default_factory=list)
    optional: bool = False
    anywhere: bool = False

    _header: Pattern | None = None
    _row: Pattern | None = None

    @model_validator(mode="before")
    @classmethod
    def _long_form(cls, data: Any) -> Any:
        return table_long_form(data)  # `name: float`, the columns of a row template, their rules

    @field_validator("keys")
    @classmethod
    def _keys_once(cls, value: list[str] | None) -> list[str] | None:
        twice = next((key for index, key in enumerate(value or []) if key in value[:index]), None)
        if twice is not None:
            raise ValueError(f"key {quoted(twice)} is listed twice; a table has one row of each key")
        return value

    @model_validator(mode="after")
    def _compile(self) -> "TableItem":
        if not is_identifier(self.table):
            raise ValueError(f"table name {quoted(self.table)} is not an identifier")
        if not self.columns and self.row is None:
            raise ValueError("a table needs at least one column")
        if self.header is not None:
            self._header = Pattern(self.header, {}, is_regex=self.header_regex)
            if self._header.fields:
                raise ValueError("a table header cannot hold fields")
        if self.row is not None:
            pattern = Pattern(self.row, dict(self.columns), is_regex=self.row_regex)
            missing = set(self.columns) - set(pattern.fields)
            if missing:
                raise ValueError(f"row template lacks columns {sorted(missing)}")
            self._row = pattern
            self.columns = {name: pattern.fields[name] for name in self.columns or pattern.fields}
        for name, spec in self.columns.items():
            check_field_name(name, f"(a column of table {quoted(self.table)})")
            spec.check_type(name)
        if self.key is None and self.keys:
            self.key = key_of_keys(self.table, self.keys, list(self.columns))
        for name in self.key_columns:
            if name not in self.columns:
                raise ValueError(f"key column {name!r} is not one of the columns "
                                 f"({', '.join(self.columns)})")
        if self.anywhere and self.header is not None:
            raise ValueError("an 'anywhere' table has rows only, no header")
        count = self.row_count
        if self.keys is not None and not (count.min <= len(self.keys) and (count.max is None
                                                                            or len(self.keys) <= count.max)):
            rows = self.rows if isinstance(self.rows, int) else \
                "{" + ", ".join(f"{k}: {v}" for k, v in self.rows.model_dump().items() if v is not None) + "}"
            raise ValueError(f"keys lists {len(self.keys)} rows but rows says {rows}; leave rows out "
                             f"(keys says how many) or make the two agree")
        return self

    @property
    def key_columns(self) -> list[str]:
        if self.key is None:
            return []
        return [self.key] if isinstance(self.key, str) else list(self.key)

    @property
    def row_count(self) -> RowCount:
        if isinstance(self.rows, int):   # made unvalidated: an exact count is a valid range
            return RowCount.model_construct(min=self.rows, max=self.rows)
        if self.keys is not None and self.rows.min == 0 and self.rows.max is None:
            return RowCount.model_construct(min=len(self.keys), max=len(self.keys))
        return self.rows

    @property
    def header_pattern(self) -> Pattern | None:
        return self.__pydantic_private__["_header"]   # not through __getattr__ (see _TemplatedLine.pattern)

    def match_row(self, line: str, budget: MatchBudget | None = None) -> dict[str, Any] | None:
        """A row's values, or None (matchers.py). The parser makes its row's matcher once a schema (plan.py)."""
        row = self.__pydantic_private__["_row"]   # not through __getattr__ (see _TemplatedLine.pattern)
        if row is not None:
            return row.match(line, budget)
        return cells_matcher(self.columns)(line, budget)

    def describe_row(self) -> str:
        if self._row is not None:
            return self._row.source
        return " ".join(f"<{name}:{spec.type}>" for name, spec in self.columns.items())


class TextItem(Strict):
    """Free text: allowed, ignored, ends where the next item matches."""

    text: str = ""
    max_lines: int | None = Field(default=None, ge=0)


class SectionItem(Strict):
    """A block of items repeated once per case; its first item must be a line (whose first field is the key)."""

    section: str
    key: str | list[str] | None = None
    items: list["Item"]
    repeat: CountOrRange = RowCount(min=1)

    @model_validator(mode="after")
    def _check(self) -> "SectionItem":
        if not is_identifier(self.section):
            raise ValueError(f"section name {self.section!r} is not an identifier")
        if not self.items or not isinstance(self.items[0], LineItem) or self.items[0].optional:
            raise ValueError("a section's first item must be a required line: it marks where each block starts")
        self.key = self.key if self.key is not None else first_field(self.items[0])
        names = set()
        for item in self.items:
            if isinstance(item, LineItem):
                names |= set(item.names)
        for k in self.key_columns:
            if k not in names:
                raise ValueError(f"section key {k!r} is not a field of the section's lines")
        return self

    @property
    def key_columns(self) -> list[str]:
        return [self.key] if isinstance(self.key, str) else list(self.key or [])

    @property
    def repeat_count(self) -> RowCount:
        return RowCount(min=self.repeat, max=self.repeat) if isinstance(self.repeat, int) else self.repeat


def _item_kind(value: Any) -> str:
    if isinstance(value, dict):
        for kind in ("line", "table", "section", "text"):
            if kind in value:
                return kind
        return "unknown"
    if isinstance(value, BaseModel):
        return {LineItem: "line", TableItem: "table", SectionItem: "section",
                TextItem: "text"}.get(type(value), "unknown")
    return "unknown"


Item = Annotated[
    Union[
        Annotated[LineItem, Tag("line")],
        Annotated[TableItem, Tag("table")],
        Annotated[SectionItem, Tag("section")],
        Annotated[TextItem, Tag("text")],
    ],
    Discriminator(_item_kind, custom_error_type="item_kind",
                  custom_error_message="an output item needs one of the keys line, table, section or text"),
]

SectionItem.model_rebuild()


class OutputSchema(Strict):
    """A lesson's whole transcript."""

    ignore: list[str] = Field(default_factory=list)
    items: list[Item]

    _ignore: list[BoundedRegex] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _compile(self) -> "OutputSchema":
        self._ignore = [compile_regex(source, "ignore regex") for source in self.ignore]
        _check_unique_names(self.items, "output")
        for at, regex in self.patterns():
            regex.at = at
        return self

    @property
    def ignore_patterns(self) -> list[BoundedRegex]:
        return self._ignore

    def patterns(self) -> Iterator[tuple[tuple, BoundedRegex]]:
        """Every pattern of this output with its path in it: ("ignore", 0), ("items", 2, "row"), ..."""
        for index, regex in enumerate(self._ignore):
            yield ("ignore", index), regex
        yield from _item_patterns(self.items, ("items",))


def _item_patterns(items: list, at: tuple) -> Iterator[tuple[tuple, BoundedRegex]]:
    for index, item in enumerate(items):
        here = at + (index,)
        if isinstance(item, LineItem):
            yield here + ("line",), item.pattern.regex
        elif isinstance(item, TableItem):
            if item.header_pattern is not None:
                yield here + ("header",), item.header_pattern.regex
            if item._row is not None:
                yield here + ("row",), item._row.regex
            for n, note in enumerate(item.notes):
                yield here + ("notes", n, "line"), note.pattern.regex
        elif isinstance(item, SectionItem):
            yield from _item_patterns(item.items, here + ("items",))


def _check_unique_names(items: list, where: str) -> None:
    seen: dict[str, str] = {}

    def claim(name: str, what: str) -> None:
        if name in seen:
            raise ValueError(f"{what} {name!r} in {where} clashes with {seen[name]} {name!r}")
        seen[name] = what

    for item in items:
        if isinstance(item, LineItem):
            for name in item.names:
                claim(name, "field")
        elif isinstance(item, TableItem):
            claim(item.table, "table")
            for note in item.notes:
                claim(note.name, "note")
        elif isinstance(item, SectionItem):
            claim(item.section, "section")
            _check_unique_names(item.items, f"section {item.section!r}")
