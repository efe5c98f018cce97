"""Counts in words, as every message and page writes them."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 hazard`, `2 hazards`; `many` for nouns whose plural is not noun + s."""
    return f"{count} {noun}" if count == 1 else f"{count} {many or noun + 's'}"
