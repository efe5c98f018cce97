"""The rules a lesson's evidence was recorded under, and whether today's manifest checks less than they did.

record keeps `rules_of(manifest, lesson)` in the evidence's meta.json
(`rules`): each field's rule and tolerance, each output item's optional,
rows and max_lines, the schema's ignore patterns, the gates, and the
sanitizer passes with what they expect. `weakenings` compares those with
today's: a rule that checks less (a wider tolerance, exact -> volatile, an
item made optional, fewer rows, a new ignore pattern or text item, a gate
or a pass gone, a finding newly expected) is named with its rule before
and after. Checking more is never reported. A weakening the lesson
acknowledges in lessons.yaml (`weakened: {NAME: why}`) is a note; any
other makes its evidence STALE until the lesson is recorded again.
`check_rules` is the one judge of it, offline and on a GPU.
"""

from __future__ import annotations

import json

from ..manifest.model import Lesson, Manifest
from ..transcript.fields import Compare, FieldSpec
from ..transcript.schema import LineItem, SectionItem, TableItem, TextItem
from .results import LessonResult
from ..words import command_line

RANK = {Compare.exact.value: 3, Compare.device.value: 2, Compare.tolerance.value: 1, Compare.volatile.value: 0}
INF = float("inf")


def _field(spec: FieldSpec) -> dict:
    rule: dict = {"compare": spec.compare.value}
    if spec.rel is not None:
        rule["rel"] = spec.rel
    if spec.abs is not None:
        rule["abs"] = spec.abs
    return rule


def _count(count) -> list:
    return [count, count] if isinstance(count, int) else [count.min, count.max]


def _items(items: list, prefix: str, out: dict) -> None:
    for item in items:
        if isinstance(item, LineItem):
            out[f"line {prefix}{item.line}"] = {"optional": item.optional}
            for name, spec in item.names.items():
                out[f"field {prefix}{name}"] = _field(spec)
        elif isinstance(item, TableItem):
            out[f"table {prefix}{item.table}"] = {"optional": item.optional, "rows": _count(item.row_count)}
            for name, spec in item.columns.items():
                out[f"field {prefix}{item.table}.{name}"] = _field(spec)
            for note in item.notes:
                for name, spec in note.pattern.fields.items():
                    out[f"field {prefix}{note.name}.{name}"] = _field(spec)
        elif isinstance(item, SectionItem):
            out[f"section {prefix}{item.section}"] = {"repeat": _count(item.repeat)}
            _items(item.items, f"{prefix}{item.section}.", out)
        elif isinstance(item, TextItem):
            out[f"text {prefix}{item.text}"] = {"max_lines": item.max_lines}


def rules_of(manifest: Manifest, lesson: Lesson) -> dict:
    """What a lesson checks today, by name (`field kernels.ms`, `gate nothing-failed`, `pass racecheck`)."""
    out: dict = {"ignore": sorted(lesson.output.ignore)}
    _items(lesson.output.items, "", out)
    for claim in lesson.claims:
        if claim.gate is not None:
            out[f"gate {claim.id}"] = {"gate": claim.gate, "each": claim.each, "where": claim.where}
    for tool, spec in manifest.sanitizers(lesson).items():
        out[f"pass {tool}"] = {"findings": sorted(json.dumps(f.model_dump(mode="json", exclude_none=True),
                                                             sort_keys=True) for f in spec.findings),
                               "allow_other": spec.allow_other, "args": spec.args,
                               "program_args": [*lesson.args, *spec.program_args]}
    return json.loads(json.dumps(out))   # as meta.json keeps it: tuples as lists


def _shown(rule) -> str:
    return json.dumps(rule, sort_keys=True) if isinstance(rule, (dict, list)) else str(rule)


def _upper(value) -> float:
    return INF if value is None else value


def _checks_less(name: str, old, new) -> bool:
    kind = name.split(" ", 1)[0]
    if name == "ignore":
        return bool(set(new) - set(old))
    if kind == "field":
        if RANK[new["compare"]] != RANK[old["compare"]]:
            return RANK[new["compare"]] < RANK[old["compare"]]
        return new.get("rel", 0) > old.get("rel", 0) or new.get("abs", 0) > old.get("abs", 0)
    if kind in ("line", "table") and new.get("optional") and not old.get("optional"):
        return True
    for key in ("rows", "repeat"):
        if key in old:
            return new[key][0] < old[key][0] or _upper(new[key][1]) > _upper(old[key][1])
    if kind == "text":
        return _upper(new["max_lines"]) > _upper(old["max_lines"])
    if kind == "gate":
        return new != old
    if kind == "pass":
        return (bool(set(new["findings"]) - set(old["findings"])) or (new["allow_other"] and not old["allow_other"])
                or new["args"] != old["args"] or new["program_args"] != old["program_args"])
    return False


def weakenings(recorded: dict, today: dict) -> list[tuple[str, str, str]]:
    """(name, rule when recorded, rule today) of each rule that checks less today; `removed`/`added` for one
    that is gone or new (only a new text item or ignore pattern checks less by being there)."""
    out = []
    for name, old in recorded.items():
        new = today.get(name)
        if new is None:
            out.append((name, _shown(old), "removed"))
        elif _checks_less(name, old, new):
            out.append((name, _shown(old), _shown(new)))
    for name, new in today.items():
        if name not in recorded and name.startswith("text "):
            out.append((name, "absent", _shown(new)))
    return out


def check_rules(manifest: Manifest, lesson: Lesson, slug: str, recorded: dict | None, out: LessonResult) -> None:
    """Today's rules against those `slug`'s evidence was recorded under: an unacknowledged weakening makes it
    STALE (`out.stale`), an acknowledged one is a note; evidence recorded without its rules gets a note."""
    if recorded is None:
        out.notes.append(f"{slug}: rules unknown: this evidence was recorded before coursectl kept the rules it "
                         f"was judged by; `{command_line('coursectl', 'record', lesson.id)}` on that GPU keeps them")
        return
    acknowledged = lesson.weakened
    for name, before, after in weakenings(recorded, rules_of(manifest, lesson)):
        text = f"{slug}: {name} checks less than when the evidence was recorded: {before} -> {after}"
        if name in acknowledged:
            out.notes.append(f"{text} (acknowledged in lessons.yaml: {acknowledged[name]})")
        elif text not in out.stale:
            out.stale.append(f"{text}; acknowledge it under `weakened:` in lessons.yaml, or run "
                             f"`{command_line('coursectl', 'record', lesson.id)}` on a GPU")
