"""The output schema's short forms, written out in the long form schema.py's models hold.

- ``{name:type:rule}`` in a line or a row gives the field's comparison rule
  (``{smem:int:device}`` is ``{smem:int}`` with ``fields: {smem: {compare: device}}``);
- ``name: float`` among a line's fields or a table's columns is
  ``name: {type: float}``;
- a table's ``row`` template gives its ``columns``, in order, and its
  ``keys`` its key columns;
- a section's blocks are named by the first field of its first line.

The models call these as they validate (lessons.yaml's other short forms are
manifest/shorthand.py's).
"""

from __future__ import annotations

import re
from typing import Any


# `{smem:int:device}` is short for `{smem:int}` with `fields: {smem: {compare: device}}`.
_RULED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)((?::[A-Za-z]+)+)\}")


_PLACEHOLDER_NAME = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)[:}]")


RULES = ("exact", "device", "volatile")


def _specs(value: Any) -> Any:
    """`name: float` is short for `name: {type: float}`."""
    return {k: {"type": v} if isinstance(v, str) else v for k, v in value.items()} if isinstance(value, dict) else value


def line_long_form(data: Any) -> Any:
    """A `line` (or a table's note): its fields' shorthands, and its placeholders' rules under `fields`."""
    if not isinstance(data, dict):
        return data
    data = {**data, "fields": _specs(data["fields"])} if "fields" in data else data
    if isinstance(data.get("line"), str) and not data.get("regex"):
        line, fields = split_rules(data["line"], data.get("fields"))
        if fields is not None:
            data = {**data, "line": line, "fields": fields}
    return data


def table_long_form(data: Any) -> Any:
    """A table: its columns' shorthands; a `row` template gives the `columns` (in order) and their rules."""
    if not isinstance(data, dict):
        return data
    data = {**data, "columns": _specs(data["columns"])} if "columns" in data else data
    if isinstance(data.get("row"), str) and not data.get("row_regex"):
        columns = data.get("columns")
        if columns is None:
            columns = {m.group(1): {} for m in _PLACEHOLDER_NAME.finditer(data["row"])}
        row, ruled = split_rules(data["row"], columns)
        data = {**data, "row": row, "columns": ruled if ruled is not None else columns}
    return data


def first_field(line: Any) -> str:
    """The first field of a section's first line, which names each block unless the section gives `key`."""
    names = list(re.compile(line.line).groupindex) if line.regex else _PLACEHOLDER_NAME.findall(line.line)
    if not names:
        raise ValueError("a section's blocks are named by the first field of its first line, and this line has "
                         "none; give the section's key with 'key'")
    return names[0]


def key_of_keys(table: str, keys: list[str], columns: list[str]) -> str | list[str]:
    """The key columns a table's `keys` imply: as many of its first columns as a listed key has parts."""
    parts = {len(str(key).split("/")) for key in keys}
    if len(parts) != 1:
        raise ValueError(f"the keys of table {table!r} have different numbers of '/'-separated parts; give its "
                         f"key columns with 'key'")
    count = parts.pop()
    if count > len(columns):
        raise ValueError(f"the keys of table {table!r} have {count} parts but the table has only "
                         f"{len(columns)} column{'s' if len(columns) != 1 else ''}")
    return columns[0] if count == 1 else columns[:count]


def split_rules(template: str, fields: Any) -> tuple[str, Any]:
    """`{name:type:rule}` placeholders written out: the template without the rules, and `fields` with
    `{compare: rule}` for each (None when the template holds no rule, so nothing changes).

    A rule is `exact`, `device` or `volatile`; `tolerance` needs its bounds, so it goes under fields.
    """
    rules: dict[str, str] = {}

    def plain(m: re.Match) -> str:
        words = m.group(2).split(":")[1:]
        found = [w for w in words if w in RULES or w == "tolerance"]
        if len(words) > 2 or len(words) == 2 and len(found) != 1:
            raise ValueError(f"{m.group(0)!r} in {template!r}: a placeholder is {{name}}, {{name:type}}, "
                             f"{{name:rule}} or {{name:type:rule}}")
        if not found:
            return m.group(0)
        if "tolerance" in found:
            raise ValueError(f"{m.group(0)!r} in {template!r}: a tolerance needs its bounds; give it under "
                             f"fields, as {{{m.group(1)}: {{compare: tolerance, rel: 0.25}}}}")
        rules[m.group(1)] = found[0]
        kept = [w for w in words if w not in RULES]
        return "{" + ":".join([m.group(1), *kept]) + "}"

    text = _RULED.sub(plain, template)
    if not rules:
        return template, None
    if fields is not None and not isinstance(fields, dict):
        return template, None         # not a mapping: validation says so
    out = dict(fields or {})
    for name, rule in rules.items():
        spec = out.get(name, {})
        if isinstance(spec, str):             # `name: float`
            spec = {"type": spec}
        elif hasattr(spec, "model_dump"):     # a FieldSpec built in code
            spec = spec.model_dump(exclude_unset=True)
        if not isinstance(spec, dict):
            continue                  # not a field spec: validation says so
        if spec.get("compare", rule) != rule:
            raise ValueError(f"field {name!r} is compared {rule!r} in {template!r} but {spec['compare']!r} "
                             f"in its fields")
        out[name] = {**spec, "compare": rule}
    return text, out
