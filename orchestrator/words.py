"""Counts and values in words, as every message, table and page writes them."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 hazard`, `2 hazards`; `many` for nouns whose plural is not noun + s."""
    return f"{count} {noun}" if count == 1 else f"{count} {many or noun + 's'}"


def format_value(value) -> str:
    """A field's value with every digit that tells it apart from its neighbour (18011780, not 1.80118e+07)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)   # the shortest text that reads back as the same number
    return str(value)
