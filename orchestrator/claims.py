"""Claims: expressions over parsed fields, checked statically and evaluated safely.

Expressions are Python-shaped (``tiled_ms < naive_ms``, ``all(r.mismatches == 0
for r in blocks)``) but are evaluated by simpleeval, which allows no imports,
no dunder access and no calls but the functions listed in FUNCTIONS.
"""

from __future__ import annotations

import ast
import math
from typing import Any, Iterator

from pydantic import BaseModel
from simpleeval import EvalWithCompoundTypes, InvalidExpression, NameNotDefined

from .schema import LineItem, NoteItem, OutputSchema, SectionItem, TableItem, scope_names
from .transcript import Row, Scope, Transcript

FUNCTIONS = {
    "all": all, "any": any, "len": len, "min": min, "max": max, "abs": abs,
    "sum": sum, "round": round, "sqrt": math.sqrt, "ceil": math.ceil,
    "floor": math.floor, "log2": math.log2, "isclose": math.isclose,
    "dims": lambda text: tuple(int(part) for part in str(text).split("x")),
}


class ClaimResult(BaseModel):
    id: str
    kind: str            # gate | expect
    says: str
    expression: str
    held: bool
    checked: int = 0     # elements checked (1 for a claim without 'each')
    failures: list[str] = []


# -- views: what an expression sees -------------------------------------------
class RowView:
    """A table row: its fields as attributes."""

    def __init__(self, row: Row):
        self._row = row
        for name, value in row.values.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v}" for k, v in self._row.values.items())
        return f"[{self._row.key}] {body}"


class TableView:
    """A table: iterate its rows, index them by key, take its len."""

    def __init__(self, name: str, rows: list[Row]):
        self._name = name
        self._rows = rows

    def __iter__(self):
        return (RowView(r) for r in self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, key: Any) -> RowView:
        if isinstance(key, tuple):
            key = "/".join(str(k) for k in key)
        if isinstance(key, int) and not any(r.key == str(key) for r in self._rows):
            return RowView(self._rows[key])
        for row in self._rows:
            if row.key == str(key):
                return RowView(row)
        raise KeyError(f"table {self._name!r} has no row {key!r}")

    def __repr__(self) -> str:
        if not self._rows:
            return "(no rows)"
        shown = "; ".join(repr(RowView(r)) for r in self._rows[:3])
        more = f"; and {len(self._rows) - 3} more" if len(self._rows) > 3 else ""
        return shown + more


class BlockView:
    """One repetition of a section: its fields, tables and sub-sections as attributes."""

    def __init__(self, key: str, names: dict[str, Any]):
        self._key = key
        for name, value in names.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"[{self._key}]"


class SectionView(TableView):
    def __init__(self, name: str, blocks: list):
        self._name = name
        self._blocks = blocks

    def __iter__(self):
        return iter(self._blocks)

    def __len__(self) -> int:
        return len(self._blocks)

    def __getitem__(self, key: Any) -> Any:
        for block in self._blocks:
            if block._key == str(key):
                return block
        raise KeyError(f"section {self._name!r} has no block {key!r}")

    def __repr__(self) -> str:
        return ", ".join(b._key for b in self._blocks)


def _names(items: list, scope: Scope) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for item in items:
        if isinstance(item, LineItem):
            for field in item.names:
                names[field] = scope.values.get(field)
        elif isinstance(item, TableItem):
            names[item.table] = TableView(item.table, scope.tables.get(item.table, []))
            for note in item.notes:
                names[note.name] = TableView(note.name, scope.tables.get(note.name, []))
        elif isinstance(item, SectionItem):
            blocks = [BlockView(b.key, _names(item.items, b.scope)) for b in scope.sections.get(item.section, [])]
            names[item.section] = SectionView(item.section, blocks)
    return names


def _elements(items: list, scope: Scope, path: list[str], label: str,
              outer: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (label, names) for every element an `each` path reaches."""
    here = {**outer, **_names(items, scope)}
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
                    yield from _elements(item.items, block.scope, rest, block_label + ".", here)
                else:
                    yield block_label, {**here, **_names(item.items, block.scope)}


# -- static check ---------------------------------------------------------------
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
                raise ValueError(f"each: {part!r} is a table; only the last part of 'each' can be one")
            return names | set(found.columns)
        if isinstance(found, NoteItem):
            if index != len(parts) - 1:
                raise ValueError(f"each: {part!r} is a note table; only the last part of 'each' can be one")
            return names | set(found.pattern.fields)
        if isinstance(found, SectionItem):
            items = found.items
            names |= set(scope_names(items))
            continue
        raise ValueError(f"each: {part!r} is not a table or section of the output "
                         f"(known: {', '.join(sorted(k for k, v in scope_names(items).items() if not isinstance(v, type(None)) and not hasattr(v, 'type')))})")
    return names


def _free_names(expression: str) -> set[str]:
    tree = ast.parse(expression, mode="eval")
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    bound.add(target.id)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - bound


# Names every claim may use beside the schema's: the build evidence.
EXTRA_NAMES = ("resources",)


def uses_resources(claim: Any) -> bool:
    texts = [claim.expression] + ([claim.where] if claim.where else [])
    return any("resources" in _free_names(text) for text in texts)


def check_claims(schema: OutputSchema, claim: Any) -> None:
    """Raise ValueError if a claim's expression is malformed or names a missing field."""
    known = _static_names(schema, claim.each) | set(FUNCTIONS) | set(EXTRA_NAMES)
    for label, text in (("", claim.expression), ("where: ", claim.where)):
        if text is None:
            continue
        try:
            free = _free_names(text)
        except SyntaxError as exc:
            raise ValueError(f"{label}invalid expression {text!r}: {exc.msg}") from None
        unknown = sorted(free - known)
        if unknown:
            raise ValueError(f"{label}{text!r} names unknown field {unknown[0]!r}; "
                             f"known here: {', '.join(sorted(known - set(FUNCTIONS)))}")


# -- evaluation -----------------------------------------------------------------
def _evaluate(expression: str, names: dict[str, Any]) -> Any:
    evaluator = EvalWithCompoundTypes(names=names, functions=FUNCTIONS)
    return evaluator.eval(expression)


def _detail(expression: str, names: dict[str, Any]) -> str:
    shown = []
    for name in sorted(_free_names(expression)):
        if name in names and name not in FUNCTIONS:
            shown.append(f"{name} = {names[name]!r}")
    return ", ".join(shown)


def resources_view(resources: dict) -> TableView:
    """ptxas' per-kernel report as a table: resources['copyRowMajor'].registers."""
    rows = [Row(key=name, line=0, values={"kernel": name, **r.model_dump(exclude={"kernel", "mangled"})})
            for name, r in sorted(resources.items())]
    return TableView("resources", rows)


def evaluate_claim(schema: OutputSchema, transcript: Transcript, claim: Any,
                   extra: dict[str, Any] | None = None) -> ClaimResult:
    """Evaluate one claim over a parsed transcript; failures name the element."""
    outer = dict(extra or {})
    if claim.each:
        elements = list(_elements(schema.items, transcript.scope, claim.each.split("."), "", outer))
    else:
        elements = [("", {**outer, **_names(schema.items, transcript.scope)})]
    failures: list[str] = []
    checked = 0
    for label, names in elements:
        where = f"{label}: " if label else ""
        try:
            if claim.where is not None and not _evaluate(claim.where, names):
                continue
            checked += 1
            if not _evaluate(claim.expression, names):
                failures.append(f"{where}{claim.expression} is false ({_detail(claim.expression, names)})")
        except (InvalidExpression, NameNotDefined, TypeError, KeyError, ValueError,
                ArithmeticError, AttributeError, IndexError) as exc:
            failures.append(f"{where}cannot evaluate {claim.expression!r}: {exc}")
    if claim.each and checked == 0 and not failures:
        failures.append(f"no element of {claim.each!r} matched; the claim checked nothing")
    return ClaimResult(id=claim.id, kind=claim.kind, says=claim.says, expression=claim.expression,
                       held=not failures, checked=checked, failures=failures)


def evaluate_claims(schema: OutputSchema, transcript: Transcript, claims: list,
                    resources: dict | None = None) -> list[ClaimResult]:
    """Every claim; those over the build evidence only where a build's report is at hand."""
    extra = {"resources": resources_view(resources)} if resources is not None else {}
    return [evaluate_claim(schema, transcript, c, extra) for c in claims
            if resources is not None or not uses_resources(c)]


def transcript_names(claim: Any) -> set[str]:
    """The names a claim takes from a transcript: empty for a claim over the build evidence alone."""
    texts = [claim.expression] + ([claim.where] if claim.where else [])
    names = set().union(*(_free_names(text) for text in texts)) - set(FUNCTIONS) - set(EXTRA_NAMES)
    return names | ({claim.each} if claim.each else set())
