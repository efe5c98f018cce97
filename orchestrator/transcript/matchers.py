"""A line's values by a template (Pattern.match) or a table's columns (TableItem.match_row), as one function each.

What the schema's objects would be asked again on each line (the needle, the
compiled regex, each field's converter, the columns' cell regexes) is worked out
when the function is made; the parser makes them once a schema (plan.py). A
match gets the transcript's MatchBudget, through which every regex of a
template goes (patterns.py).
"""

from __future__ import annotations

from typing import Any, Callable

from .fields import FieldSpec, NumberTooLong, check_digits
from .patterns import BoundedRegex, MatchBudget

Matcher = Callable[[str, MatchBudget], "dict[str, Any] | None"]


def pattern_matcher(needle: str | None, regex: BoundedRegex, fields: dict[str, FieldSpec]) -> Matcher:
    """The values of a line the template takes whole (trailing whitespace aside), each converted by its field,
    or None: for a line without the needle, one the regex does not take, or a value that does not convert. A
    number too long to convert is no such value: NumberTooLong says so to the parser."""
    fullmatch = regex.compiled.fullmatch
    names = tuple(fields)
    # A template's group is what its field's value regex takes (regex: true's groups may be anything).
    converters = tuple(spec.converter() if regex.written else _unspaced(spec) for spec in fields.values())
    # A group asked for by its number, not its name: `regex` looks a name up on each call, a fifth of a
    # microsecond. Where a field names no group (a regex's `fields:` may), each is asked for by name in turn,
    # so that the error of that one comes where it did, after the fields before it.
    groupindex = regex.groupindex
    numbers = tuple(groupindex[name] for name in names) if all(name in groupindex for name in names) else None
    several = len(names) > 1   # m.group(*numbers) is then a tuple of them, and one number's group a str

    def match(line: str, budget: MatchBudget) -> dict[str, Any] | None:
        if needle is not None and needle not in line:
            return None
        m = budget.match(regex, fullmatch, line.rstrip())
        if m is None:
            return None
        if not names:
            return {}
        if numbers is None:
            raws = (m.group(name) for name in names)
        else:
            raws = m.group(*numbers) if several else (m.group(numbers[0]),)
        values = {}
        try:
            for name, raw, convert in zip(names, raws, converters):
                values[name] = None if raw is None else convert(raw)
        except NumberTooLong:
            raise
        except ValueError:
            if convert is int:   # the value that did not convert, by int itself: too long, or no int
                check_digits(raw)
            return None
        return values

    return match


def cells_matcher(columns: dict[str, FieldSpec]) -> Matcher:
    """The values of a row split on whitespace into as many cells as the table has columns, each a value of its
    column (FieldSpec.takes) converted by it, or None. No regex of lessons.yaml is run: `budget` goes unused."""
    names = tuple(columns)
    # A cell of a word or str column without a missing token or suffix is its value as it is: a cell holds no
    # whitespace (str.split's, which is \s's) and is not empty, so `\S+` and `.+?` take it whole and strip keeps it.
    as_is = [spec.type in ("word", "str") and spec.missing is None and not spec.suffix for spec in columns.values()]
    takers = tuple(None if kept else spec.cell_regex().fullmatch for kept, spec in zip(as_is, columns.values()))
    converters = tuple(_unspaced(spec) for spec in columns.values())
    width = len(names)

    def match(line: str, budget: MatchBudget | None = None) -> dict[str, Any] | None:
        cells = line.split()
        if len(cells) != width:
            return None
        values = {}
        try:   # each cell taken, then converted, in turn: a number too long is found before a later cell fails
            for cell, name, takes, convert in zip(cells, names, takers, converters):
                if takes is None:
                    values[name] = cell
                elif takes(cell) is None:
                    return None
                else:
                    values[name] = convert(cell)
        except NumberTooLong:
            raise
        except ValueError:
            if convert is int:   # as in pattern_matcher
                check_digits(cell)
            return None
        return values

    return match


def _unspaced(spec: FieldSpec) -> Callable[[str], Any]:
    """spec.converter() for a text its value regex took whole (a template's group, a table's cell), which has no
    whitespace at either end and its suffix, where there is one, at its end: `float` or `int` itself for a plain
    number, with no call of Python's between. An int's text too long to convert fails int: the matcher then says
    so (check_digits), as the converter would have."""
    if spec.missing is None:
        if not spec.suffix:
            if spec.type == "float":
                return float
            if spec.type == "int":
                return int
        elif spec.type == "float":
            cut = -len(spec.suffix)
            return lambda text: float(text[:cut])
    return spec.converter()
