"""An output schema as the transcript parser reads it, worked out once a schema rather than once a parse.

Each parse asked every item again for what does not change between parses:
its patterns, counts and key columns (properties that build their answer),
the functions that tell whether a line starts a later item, each field's
converter. A 400-lesson verify parses 1,333 transcripts of a few dozen lines
each, so these asked-again answers were most of a parse's time. Here each item
is one plain object holding its answers, made on a schema's first parse and
kept while the schema lives. A schema is not changed once loaded.
"""

from __future__ import annotations

import weakref
from typing import Any

from .matchers import Matcher, cells_matcher
from .patterns import BoundedRegex
from .schema import LineItem, OutputSchema, SectionItem, TableItem, TextItem

# What a schema's ignore patterns and anywhere rows are tried on before a transcript: one that takes a blank
# line must see each blank line, where the others see a run of them as one.
BLANK_PROBES = ("", " ", "\t", "  ")

# What a line is tried against to know whether it ends free text or starts a section's next block: the later
# items' first lines, in the order the parser tries them (the enclosing section's restart first), each with
# the needle that a line it takes holds (None: no such needle).
Stops = tuple[tuple[str | None, Matcher], ...]


class LinePlan:
    """A line item: its matcher, whether it may be left out, its flag, and what an absent one sets."""

    __slots__ = ("match", "optional", "flag", "absent", "expected")

    def __init__(self, item: LineItem):
        self.match = item.pattern.matcher()
        self.optional = item.optional
        self.flag = item.flag
        self.absent = dict.fromkeys(item.pattern.fields)   # the values of an optional line that is not there
        self.expected = f"expected a line matching {item.line!r}"


class TablePlan:
    """A table: its header's and rows' matchers, its notes', its counts and keys (TableItem's, worked out)."""

    __slots__ = ("item", "table", "header", "header_line", "match_row", "needle", "rules", "notes", "key_columns",
                 "min", "max", "keys", "key_set", "optional", "anywhere")

    def __init__(self, item: TableItem):
        self.item = item
        self.table = item.table
        header = item.header_pattern
        self.header = header.matcher() if header is not None else None
        self.header_line = item.header
        row = item.__pydantic_private__["_row"]
        self.match_row = row.matcher() if row is not None else cells_matcher(item.columns)
        self.needle = row.needle if row is not None else None
        self.rules = item.rules
        self.notes = tuple((note.name, note.pattern.matcher()) for note in item.notes)
        self.key_columns = tuple(item.key_columns)
        count = item.row_count
        self.min, self.max = count.min, count.max
        self.keys = item.keys
        self.key_set = frozenset(item.keys or ())
        self.optional = item.optional
        self.anywhere = item.anywhere

    def key(self, values: dict[str, Any], index: int) -> str:
        """A row's key: its key columns' values joined by `/`, or its index for a table without key columns."""
        columns = self.key_columns
        if len(columns) == 1:   # most tables: the one value is the whole key
            return str(values[columns[0]])
        if not columns:
            return str(index)
        return "/".join([str(values[c]) for c in columns])


class TextPlan:
    """Free text and the most lines it may have."""

    __slots__ = ("text", "max_lines")

    def __init__(self, item: TextItem):
        self.text = item.text
        self.max_lines = item.max_lines


class SectionPlan:
    """A section: its first line's matcher, its counts and key columns, and its own items planned."""

    __slots__ = ("section", "first", "first_line", "key_columns", "min", "max", "items", "at")

    def __init__(self, item: SectionItem, outer: Stops, at: tuple):
        first = item.items[0]
        self.section = item.section
        self.first = first.pattern.matcher()
        self.first_line = first.line
        self.key_columns = tuple(item.key_columns)
        count = item.repeat_count
        self.min, self.max = count.min, count.max
        # Within a block, a line that starts the next block ends it, and so does one that ends the section.
        self.items = items_plan(item.items, ((first.pattern.needle, self.first),) + outer, at)
        self.at = at   # the path of its items in the schema


Node = LinePlan | TablePlan | TextPlan | SectionPlan


def _starter(item: Any, node: Node | None) -> tuple[str | None, Matcher] | None:
    """What tells a line that starts `item` apart, with its needle; None for an item that no line starts."""
    if isinstance(item, LineItem):
        return item.pattern.needle, node.match
    if isinstance(item, TableItem):
        if item.anywhere:
            return None
        if node.header is not None:
            return item.header_pattern.needle, node.header
        return node.needle, node.match_row
    if isinstance(item, SectionItem):   # made before its section's node, which needs the later items' starters
        first = item.items[0].pattern
        return first.needle, first.matcher()
    return None


def items_plan(items: list, outer: Stops, at: tuple) -> tuple[tuple[int, Node, Stops], ...]:
    """Each item of a list, with its index and what ends it (for free text and sections: `outer`, what ends the
    list, then each later item's first line); `at` is the list's path in the schema."""
    nodes: list[Node | None] = [LinePlan(item) if isinstance(item, LineItem) else TablePlan(item)
                                if isinstance(item, TableItem) else TextPlan(item) if isinstance(item, TextItem)
                                else None for item in items]
    starters = [_starter(item, node) for item, node in zip(items, nodes)]
    planned = []
    for index, (item, node) in enumerate(zip(items, nodes)):
        ends = outer + tuple(s for s in starters[index + 1:] if s is not None)
        planned.append((index, node or SectionPlan(item, ends, at + (index, "items")), ends))
    return tuple(planned)


class Plan:
    """A schema's items planned, its ignore patterns and its `anywhere` tables, with each one's index."""

    __slots__ = ("items", "ignore", "anywhere", "rows", "pure", "no_blank_row", "last")

    def __init__(self, schema: OutputSchema):
        self.items = items_plan(schema.items, (), ("items",))
        self.ignore: list[BoundedRegex] = schema.ignore_patterns
        self.anywhere = [(index, node) for index, node, _ in self.items
                         if isinstance(node, TablePlan) and node.anywhere]
        # Each anywhere table's row, with its needle (Pattern.needle): a line without it is no row, known without
        # a call.
        self.rows = tuple((node.table, node.match_row, node.needle) for _, node in self.anywhere)
        # Where nothing is ignored and each anywhere row has a needle, a line that holds none is taken as it is.
        self.pure = None if self.ignore or any(needle is None for _, _, needle in self.rows) else tuple(
            needle for _, _, needle in self.rows)
        # Whether no anywhere row takes a blank line, known without running a pattern: each a row of columns
        # (a blank line has no cells) or a template whose needle no blank line holds.
        self.no_blank_row = all(node.item.row is None or node.needle is not None and not any(
            node.needle in probe for probe in BLANK_PROBES) for _, node in self.anywhere)
        # The last item a line can be, where a transcript that goes on after the schema's items is said to end.
        self.last = max((index for index, node, _ in self.items if not (isinstance(node, TablePlan) and node.anywhere)),
                        default=len(self.items) - 1)


_PLANS: dict[int, tuple[weakref.ref, Plan]] = {}


def plan_of(schema: OutputSchema) -> Plan:
    """The schema's plan, made on its first parse and dropped with the schema (kept by its id, which a schema
    made later takes again only once this one is gone: its entry goes as it does)."""
    found = _PLANS.get(id(schema))
    if found is not None and found[0]() is schema:
        return found[1]
    plan = Plan(schema)
    key = id(schema)
    _PLANS[key] = (weakref.ref(schema, lambda _, key=key: _PLANS.pop(key, None)), plan)
    return plan
