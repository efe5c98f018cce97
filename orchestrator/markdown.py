"""Markdown written safely: text shown as itself, table cells, code spans and fences, Mermaid strings.

Pages (render/), the drift report (judge/drift.py), the comparison of two GPUs
(workflows/compare.py) and the step summary (cli/annotations.py) all write
Markdown through these.
"""

from __future__ import annotations

import re
from typing import Any


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")


def md(value: Any) -> str:
    """Text shown as itself in Markdown, table cells included."""
    return _MD_SPECIAL.sub(r"\\\1", str(value))


def html(value: Any) -> str:
    """Text shown as itself inside HTML (a <summary>), where Markdown is not read."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cell(value: Any) -> str:
    """Markdown already formed, made safe for a table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def code(value: Any) -> str:
    """An inline code span holding `value` exactly, safe in a table cell."""
    text = str(value)
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


def fence(text: str, language: str = "") -> str:
    """A fenced code block holding `text`, its fence longer than any backtick run inside."""
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{ticks}{language}\n{body}{ticks}"


def mermaid_string(value: Any) -> str:
    """A double-quoted Mermaid string (Mermaid has no escape for a double quote)."""
    return '"' + str(value).replace('"', "'") + '"'
