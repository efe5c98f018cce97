"""The course index: the table of lessons in the top README.md, between its two markers, all else kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from ..errors import TemplateError
from ..files import TEXT_LIMIT, read_text, relative
from ..manifest.model import Manifest
from .markup import TEMPLATES, banner, render_template, with_banner
from .navigation import INDEX_FILE

INDEX_TEMPLATE = "index.md.j2"
INDEX_BEGIN = "<!-- lessons:begin -->"
INDEX_END = "<!-- lessons:end -->"


def index_region(manifest: Manifest, env: jinja2.Environment, templates: Path,
                 rows: list[dict[str, Any]]) -> tuple[str, str]:
    """README.md's text as it is, and with the region between its markers rendered from `rows` (the index
    template's `lessons`). A README without one marker of each, in that order, is a TemplateError naming it."""
    root = manifest.root
    path = root / INDEX_FILE
    old = read_text(path, TEXT_LIMIT, "a README", shown=INDEX_FILE)
    if old is None:
        raise TemplateError(f"no {INDEX_FILE} to hold the lessons table", path=INDEX_FILE,
                            hint=f"add a '## Lessons' section holding {INDEX_BEGIN} and {INDEX_END}")
    lines = old.splitlines(keepends=True)
    begins = [n for n, line in enumerate(lines) if line.strip() == INDEX_BEGIN]
    ends = [n for n, line in enumerate(lines) if line.strip() == INDEX_END]
    hint = f"{INDEX_FILE} needs one {INDEX_BEGIN} line and, after it, one {INDEX_END} line"
    if len(begins) != 1 or len(ends) != 1:
        marker, found = (INDEX_BEGIN, begins) if len(begins) != 1 else (INDEX_END, ends)
        what = "is missing" if not found else f"appears {len(found)} times"
        raise TemplateError(f"the marker {marker} {what}", path=INDEX_FILE,
                            line=found[1] + 1 if len(found) > 1 else None, hint=hint)
    if ends[0] < begins[0]:
        raise TemplateError(f"{INDEX_END} comes before {INDEX_BEGIN}", path=INDEX_FILE,
                            line=ends[0] + 1, hint=hint)
    context = {"course": manifest.course, "lessons": rows}
    text = render_template(env, templates, root, INDEX_TEMPLATE, context)
    inputs = [f"{TEMPLATES}/{INDEX_TEMPLATE}", relative(manifest.path, root), "evidence/"]
    region = with_banner(banner(inputs, "this table"), text)
    return old, "".join(lines[:begins[0] + 1]) + region + "".join(lines[ends[0]:])
