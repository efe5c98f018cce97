"""Claims: gates and predictions over a lesson's parsed fields (and ptxas' report), judged per element.

A claim names the fields it reads; `check_claims` makes sure, when the
manifest loads, that each exists and that the expression is one a claim may
hold (expressions.py, the language and its bounds). `evaluate_claim` runs it
over a parsed transcript, once or for each row or block of `each`, and says
which element broke it and the values it read.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any, Callable, Iterator

from pydantic import BaseModel, Field

from ..words import quoted
from .compiled import Evaluator
from .expressions import (ALLOWED, EVAL_ERRORS, FUNCTIONS, Budget, ExpressionError, FieldView, OutOfBudget,
                          explain, parse_expression, quote)
from .schema import LineItem, NoteItem, OutputSchema, SectionItem, TableItem
from .parse import Row, Scope, Transcript


class ClaimResult(BaseModel):
    id: str
    kind: str            # gate | expect
    says: str
    expression: str
    held: bool
    checked: int = 0     # elements checked (1 for a claim without 'each')
    failures: list[str] = Field(default_factory=list)

# -- views: what an expression sees -------------------------------------------
class RowView(FieldView):
    """A table row: its fields are what `.name` reads."""

    def __init__(self, row: Row, table: str = ""):
        self.row = row
        self.table = table
        self.fields = row.values

    def describe(self) -> str:
        return f"{self.table}{self!r}"

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v}" for k, v in self.row.values.items())
        return f"[{self.row.key}] {body}"


class TableView:
    """A table: iterate its rows, index them by key, take its len."""

    def __init__(self, name: str, rows: list[Row]):
        self.name = name
        self.rows = rows

    def __iter__(self):
        return (RowView(r, self.name) for r in self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: Any) -> RowView:
        if isinstance(key, tuple):
            key = "/".join(str(k) for k in key)
        wanted = str(key)
        if isinstance(key, int) and not any(r.key == wanted for r in self.rows):
            return RowView(self.rows[key], self.name)
        for row in self.rows:
            if row.key == wanted:
                return RowView(row, self.name)
        raise KeyError(f"table {self.name!r} has no row {quoted(key)}")

    def __repr__(self) -> str:
        if not self.rows:
            return "(no rows)"
        shown = "; ".join(repr(RowView(r)) for r in self.rows[:3])
        more = f"; and {len(self.rows) - 3} more" if len(self.rows) > 3 else ""
        return shown + more


class BlockView(FieldView):
    """One repetition of a section: its fields, tables and sub-sections are what `.name` reads."""

    def __init__(self, section: str, key: str, names: dict[str, Any]):
        self.section = section
        self.key = key
        self.fields = names

    def describe(self) -> str:
        return f"{self.section}[{self.key}]"

    def __repr__(self) -> str:
        return f"[{self.key}]"


class SectionView(TableView):
    def __init__(self, name: str, blocks: list[BlockView]):
        self.name = name
        self.blocks = blocks

    def __iter__(self):
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, key: Any) -> Any:
        for block in self.blocks:
            if block.key == str(key):
                return block
        raise KeyError(f"section {self.name!r} has no block {quoted(key)}")

    def __repr__(self) -> str:
        return ", ".join(b.key for b in self.blocks)


def names_in_scope(items: list, scope: Scope) -> dict[str, Any]:
    """What each name a claim reads in a parsed scope stands for: a field's value, a table, a section's blocks
    (transcript/across.py reads each run's so)."""
    names: dict[str, Any] = {}
    values, tables = scope.values, scope.tables
    for kind, what in _layout(items):
        if kind is LineItem:
            for field in what:
                names[field] = values.get(field)
        elif kind is TableItem:
            names[what] = TableView(what, tables.get(what, []))
        else:
            blocks = [BlockView(what.section, b.key, names_in_scope(what.items, b.scope))
                      for b in scope.sections.get(what.section, [])]
            names[what.section] = SectionView(what.section, blocks)
    return names


_LAYOUTS: dict[int, tuple[list, tuple]] = {}


def _layout(items: list) -> tuple[tuple[type, Any], ...]:
    """The names one level of a schema sets, in its order: a run of lines' fields, a table or a note table, a
    section. Worked out once a level, not for every transcript (the items' types and fields were a third of
    the time of a lesson's gates); kept by the list's id together with the list, so that no other list can
    take the id while the entry lasts. A loaded schema's items are never changed."""
    known = _LAYOUTS.get(id(items))
    if known is None or known[0] is not items:
        layout: list[tuple[type, Any]] = []
        for item in items:
            if isinstance(item, LineItem) and layout and layout[-1][0] is LineItem:   # one run of fields
                layout[-1] = (LineItem, (*layout[-1][1], *item.names))
            elif isinstance(item, LineItem):
                layout.append((LineItem, tuple(item.names)))
            elif isinstance(item, TableItem):
                layout += [(TableItem, item.table), *((TableItem, note.name) for note in item.notes)]
            elif isinstance(item, SectionItem):
                layout.append((SectionItem, item))
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        known = _LAYOUTS[id(items)] = (items, tuple(layout))
    return known[1]


def _elements(items: list, scope: Scope, path: list[str], label: str, outer: dict[str, Any],
              names: Callable[[list, Scope], dict[str, Any]] = names_in_scope) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (label, names) for every element an `each` path reaches; `names` makes a scope's names_in_scope."""
    here = {**outer, **names(items, scope)}
    head, rest = path[0], path[1:]
    for item in items:
        if isinstance(item, TableItem) and item.table == head:
            for row in scope.tables.get(head, []):
                yield f"{label}{head}[{row.key}]", {**here, **row.values}
        elif isinstance(item, TableItem) and any(n.name == head for n in item.notes):
            for row in scope.tables.get(head, []):
                yield f"{label}{head}[{row.key}]", {**here, **row.values}
        elif isinstance(item, SectionItem) and item.section == head:
            for block in scope.sections.get(head, []):
                block_label = f"{label}{head}[{block.key}]"
                if rest:
                    yield from _elements(item.items, block.scope, rest, block_label + ".", here, names)
                else:
                    yield block_label, {**here, **names(item.items, block.scope)}


# -- static check ---------------------------------------------------------------
class ClaimError(ValueError):
    """A claim that cannot load. `loc`: the claim's key it is about, ("gate",), ("expect",), ("each",) or
    ("where",); `reason`: what is wrong, without the key. The message names the key where it is not the
    claim's expression: `where: 'kernal == 1' names unknown name 'kernal': ...`."""

    def __init__(self, loc: tuple[str], reason: str):
        self.loc = loc
        self.reason = reason
        super().__init__(reason if loc[0] in ("gate", "expect") else f"{loc[0]}: {reason}")


def scope_names(items: list) -> dict[str, Any]:
    """Names visible at this level: fields, tables (with notes) and sections."""
    names: dict[str, Any] = {}
    for item in items:
        if isinstance(item, LineItem):
            names.update(item.names)
        elif isinstance(item, TableItem):
            names[item.table] = item
            for note in item.notes:
                names[note.name] = note
        elif isinstance(item, SectionItem):
            names[item.section] = item
    return names


def _static_names(schema: OutputSchema, each: str | None) -> set[str]:
    names = set(scope_names(schema.items))
    if not each:
        return names
    items = schema.items
    parts = each.split(".")
    for index, part in enumerate(parts):
        found = scope_names(items).get(part)
        if isinstance(found, TableItem):
            if index != len(parts) - 1:
                raise ClaimError(("each",), f"{part!r} is a table; only the last part of 'each' can be one")
            return names | set(found.columns)
        if isinstance(found, NoteItem):
            if index != len(parts) - 1:
                raise ClaimError(("each",), f"{part!r} is a note table; only the last part of 'each' can be one")
            return names | set(found.pattern.fields)
        if isinstance(found, SectionItem):
            items = found.items
            names |= set(scope_names(items))
            continue
        raise ClaimError(("each",), f"{part!r} is not a table or section of the output "
                                    f"(known: {', '.join(sorted(k for k, v in scope_names(items).items() if not isinstance(v, type(None)) and not hasattr(v, 'type')))})")
    return names


# Names every claim may use beside the schema's: the build evidence.
EXTRA_NAMES = ("resources",)


def uses_resources(claim: Any) -> bool:
    return _reads_resources(claim.expression, claim.where)


@lru_cache(maxsize=4096)
def _reads_resources(expression: str, where: str | None) -> bool:
    """Worked out once a claim's texts: every evaluation of a lesson's claims asks it of each."""
    texts = [expression] + ([where] if where else [])
    try:
        return any("resources" in parse_expression(text).free for text in texts)
    except ExpressionError:
        return False


def check_claims(schema: OutputSchema, claim: Any, known: dict[str | None, set[str]] | None = None) -> None:
    """Raise ClaimError if a claim's expression is malformed, not allowed, or names a missing field.

    `known` keeps the names each `each` sees between the claims of one lesson.
    """
    known = {} if known is None else known
    if claim.each not in known:
        known[claim.each] = _static_names(schema, claim.each) | set(EXTRA_NAMES)
    fields = known[claim.each]
    for key, text in ((claim.kind, claim.expression), ("where", claim.where)):
        if text is None:
            continue
        try:
            expression = parse_expression(text)
        except ExpressionError as exc:
            raise ClaimError((key,), str(exc)) from None
        for name in sorted(expression.free):
            if name in fields:
                if name in expression.called and name not in FUNCTIONS:
                    raise ClaimError((key,), f"{quote(text)} calls {name!r}, which is a field, not a function; "
                                     f"a claim calls only the allowed functions ({ALLOWED})")
                continue
            if name in FUNCTIONS:
                continue
            known = (f"allowed: {ALLOWED}" if name in expression.called
                     else f"fields here: {', '.join(sorted(fields))}")
            raise ClaimError((key,), f"{quote(text)} names unknown name {name!r}: not a field of this lesson "
                             f"and not an allowed function ({known})")
        _refuse_computed_fields(schema, key, text, expression.body)


def _refuse_computed_fields(schema: OutputSchema, key: str, text: str, body: ast.expr) -> None:
    """`table[0][c]` reads a row's field by a computed name, which no row allows: refused as the manifest loads."""
    subscripts = _subscripted_subscripts(body)
    if not subscripts:
        return
    tables = {item.table for item in schema.items if isinstance(item, TableItem)} | {"resources"}
    for node, inner in subscripts:
        if inner.value.id in tables:
            segment = ast.get_source_segment(text.strip(), node) or "a subscript"
            raise ClaimError((key,), f"{quote(text)}: {segment!r} reads a field of a row by a computed name, "
                             f"which claims do not support; name the field: {ast.get_source_segment(text.strip(), inner)}.NAME")


@lru_cache(maxsize=4096)
def _subscripted_subscripts(body: ast.expr) -> tuple[tuple[ast.Subscript, ast.Subscript], ...]:
    """Each `NAME[i][k]` in a parsed expression, with its `NAME[i]`: walked once an expression (parse_expression
    keeps one tree a text), not once a claim of every lesson that shares it."""
    return tuple((node, node.value) for node in ast.walk(body) if isinstance(node, ast.Subscript)
                 and isinstance(node.value, ast.Subscript) and isinstance(node.value.value, ast.Name))


def resources_view(resources: dict) -> TableView:
    """ptxas' per-kernel report as a table: resources['copyRowMajor'].registers."""
    rows = [Row(key=name, line=0, values={"kernel": name, **r.model_dump(exclude={"kernel", "mangled"})})
            for name, r in sorted(resources.items())]
    return TableView("resources", rows)


def evaluate_claim(schema: OutputSchema, transcript: Transcript, claim: Any,
                   extra: dict[str, Any] | None = None, scope: dict[str, Any] | None = None) -> ClaimResult:
    """Evaluate one claim over a parsed transcript; failures name the element. `scope`: the transcript's
    names_in_scope, where the caller has made them already (they are read, never changed)."""
    outer = dict(extra or {})
    if claim.each:
        elements = list(_elements(schema.items, transcript.scope, claim.each.split("."), "", outer))
    else:
        scope = names_in_scope(schema.items, transcript.scope) if scope is None else scope
        elements = [("", {**outer, **scope})]
    return _judged(claim, elements, Evaluator())


def _judged(claim: Any, elements: list[tuple[str, dict[str, Any]]], evaluator: Evaluator) -> ClaimResult:
    """A claim evaluated on its elements (they are read, never changed: claims of one `each` share them)."""
    expression, where_text, each = claim.expression, claim.where, claim.each
    failures: list[str] = []
    checked = 0
    evaluate = evaluator.spend(Budget()).evaluate   # every element's evaluations spend the claim's one budget
    for label, names in elements:
        try:
            if where_text is not None and not evaluate(where_text, names)[0]:
                continue
            checked += 1
            held, notes = evaluate(expression, names)
            if not held:
                failures.append(f"{_where(label)}{expression} is false{explain(expression, names, notes)}")
        except OutOfBudget as exc:
            failures.append(f"{_where(label)}cannot evaluate {expression!r}: {exc}")
            break
        except ExpressionError as exc:
            failures.append(f"{_where(label)}cannot evaluate {expression!r}: {exc.reason}")
        except EVAL_ERRORS as exc:
            failures.append(f"{_where(label)}cannot evaluate {expression!r}: {exc}")
    if each and checked == 0 and not failures:
        failures.append(f"no element of {each!r} matched; the claim checked nothing")
    return _result({"id": claim.id, "kind": claim.kind, "says": claim.says, "expression": expression,
                    "held": not failures, "checked": checked, "failures": failures})


def _result(fields: dict[str, Any]) -> ClaimResult:
    """ClaimResult(**fields): the same validation, without BaseModel.__init__ around it (0.8 us a result
    rather than 1.2 us, and a gate takes 4 us)."""
    return ClaimResult.__pydantic_validator__.validate_python(fields)


def _where(label: str) -> str:
    return f"{label}: " if label else ""


def evaluate_claims(schema: OutputSchema, transcript: Transcript, claims: list,
                    resources: dict | None = None) -> list[ClaimResult]:
    """Every claim; those over the build evidence only where a build's report is at hand.

    What the claims read is made once for all of them, not once a claim: each scope's names_in_scope
    (by the scope, which the transcript holds meanwhile) and the elements of each `each`. Shared so only
    between claims, never between the elements of one: a claim sees the views evaluate_claim makes it."""
    extra = {"resources": resources_view(resources)} if resources is not None else {}
    top = names_in_scope(schema.items, transcript.scope)
    made = {id(transcript.scope): top}

    def names(items: list, scope: Scope) -> dict[str, Any]:
        if id(scope) not in made:
            made[id(scope)] = names_in_scope(items, scope)
        return made[id(scope)]
    elements: dict[str | None, list[tuple[str, dict[str, Any]]]] = {}
    evaluator = Evaluator()
    results = []
    for claim in claims:
        if resources is None and uses_resources(claim):
            continue
        each = claim.each
        if each not in elements:
            elements[each] = (list(_elements(schema.items, transcript.scope, each.split("."), "", extra, names))
                              if each else [("", {**extra, **top} if extra else top)])
        results.append(_judged(claim, elements[each], evaluator))
    return results


def transcript_names(claim: Any) -> set[str]:
    """The names a claim takes from a transcript: empty for a claim over the build evidence alone.

    An expression that does not parse names nothing here; evaluating it says why it fails.
    """
    names: set[str] = set()
    for text in [claim.expression] + ([claim.where] if claim.where else []):
        try:
            names |= parse_expression(text).free
        except ExpressionError:
            pass
    return (names - set(FUNCTIONS) - set(EXTRA_NAMES)) | ({claim.each} if claim.each else set())
