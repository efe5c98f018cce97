"""What a false `and` or list `==` of a claim notes: the part that is false, the first element to differ.

A mixin of the claims' evaluator (transcript/expressions.py), which holds
`notes` (why an expression was false, outermost first), `_inside` (how many
explained all/any/increasing calls are under way: there the element that
broke it is named instead) and `expr` (the expression's text).
"""

from __future__ import annotations

import ast


class Explaining:
    notes: list[str]
    _inside: int
    expr: str

    def _eval_boolop(self, node):
        """`and` notes the first of its parts that is false, by its text."""
        if not isinstance(node.op, ast.And):
            return super()._eval_boolop(node)  # type: ignore[misc]
        value = True
        for part in node.values:
            mark, value = len(self.notes), self._eval(part)  # type: ignore[attr-defined]
            if not value:
                if not self._inside:
                    self.notes.insert(mark, false_part(ast.get_source_segment(self.expr.strip(), part)))
                return value
        return value

    def _eval_compare(self, node):
        """`==` between two lists (a `floats` field, a list of values) notes the first element that differs."""
        result = super()._eval_compare(node)  # type: ignore[misc]
        if not result and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            note = difference(self._eval(node.left), self._eval(node.comparators[0]))  # type: ignore[attr-defined]
            if note is not None:
                self.notes.append(note)
        return result


def false_part(text: str | None) -> str:
    """The note of an `and` that is false, naming the part that is."""
    return f"the part of 'and' that is false: {text}"


def difference(a, b) -> str | None:
    """The note of a false `==` between two lists or tuples: where they first differ (None for other values)."""
    if not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))):
        return None
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return (f"the lists differ in length: {len(a)} and {len(b)}" if i is None
            else f"first element to differ: [{i}] {a[i]!r} != {b[i]!r}")


def first_break(values: list, holds) -> int | None:
    """The index of the first value that does not follow its predecessor as `holds` says."""
    for index in range(1, len(values)):
        if not holds(values[index - 1], values[index]):
            return index
    return None
