"""lessons.yaml's short forms and course-wide defaults, written out in the long form the models hold.

- An entry with an id may give it as its first key, a key holding a dash,
  with the entry's text as its value: the lesson
  ``- day13-shared-memory: Shared memory and tiling`` is
  ``{id: day13-shared-memory, title: Shared memory and tiling}``, and the
  claim ``- no-kernel-spills: ptxas keeps every kernel in registers`` is
  ``{id: no-kernel-spills, says: ...}``. No key of the manifest holds a dash,
  so a misspelt key is still an unknown key.
- A lesson's `day` is the NN of an id ``dayNN-name`` unless it gives one.
- ``output: [...]`` is ``output: {items: [...]}`` (manifest.OutputOrItems).
- ``defaults.output`` items start every lesson's output; ``defaults.claims``
  join every lesson's claims, the gates before its first prediction and the
  predictions after its last claim, except those it names in `skip_claims`;
  a lesson with ``skip_output: true`` starts its output with its own items only.
- A lesson's `source` is the one ``.cu`` file of ``lessons/<id>/`` and its
  `prose` ``lessons/<id>/prose.md`` where that exists, unless it gives them.
- The output schema's own short forms (``{name:type:rule}``, a table's
  ``row`` template) are transcript/forms.py's.

The models call these as they validate, so a manifest, its JSON Schema and a
model built in code agree; `relocate_lines` gives each long-form key path the
line it was written on, so an error names the line of the short form or of
the default.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from ..names import LESSON_ID

DAY_OF_ID = re.compile(r"day(\d+)-")
LESSON_FOLDER = "lessons"
PROSE = "prose.md"


def is_id_key(key: Any) -> bool:
    """A key holding a dash names an entry (`day13-shared-memory`, `no-kernel-spills`), never a key."""
    return isinstance(key, str) and "-" in key


def long_entry(entry: Any, text_key: str) -> Any:
    """``{ID: TEXT, ...}`` as ``{id: ID, <text_key>: TEXT, ...}``; anything else as it is."""
    if not isinstance(entry, dict) or "id" in entry:
        return entry
    keys = [key for key in entry if is_id_key(key)]
    if not keys:
        return entry
    if len(keys) > 1:
        raise ValueError(f"{keys[0]!r} and {keys[1]!r} both hold a dash, so both read as the id; "
                         f"give the id with 'id'")
    key = keys[0]
    if text_key in entry:
        raise ValueError(f"{text_key!r} is given twice: as the value of {key!r} and as {text_key!r}")
    out = {"id": key, text_key: entry[key]}
    out.update((name, value) for name, value in entry.items() if name != key)
    return out


def entry_id(entry: Any) -> Any:
    """The id of an entry in either form (the first, where a short form gives several), or None."""
    if not isinstance(entry, dict):
        return None
    if "id" in entry:
        return entry["id"]
    return next((key for key in entry if is_id_key(key)), None)


def lesson_long_form(entry: Any, root: Path | None) -> Any:
    """A lesson in the long form; `source` and `prose` come from its folder where `root` is known."""
    entry = long_entry(entry, "title")
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    ident = entry.get("id")
    if "day" not in entry and isinstance(ident, str):
        match = DAY_OF_ID.match(ident)
        if match:
            entry["day"] = int(match.group(1))
    if root is not None and isinstance(ident, str) and LESSON_ID.fullmatch(ident):
        folder = Path(LESSON_FOLDER) / ident
        if "source" not in entry:
            entry["source"] = _source_in(Path(root), folder)
        if "prose" not in entry and (Path(root) / folder / PROSE).is_file():
            entry["prose"] = (folder / PROSE).as_posix()
    return entry


def _source_in(root: Path, folder: Path) -> str:
    """The one .cu file of a lesson's folder, relative to the course root."""
    full = root / folder
    found = sorted(p.name for p in full.glob("*.cu") if p.is_file()) if full.is_dir() else []
    if len(found) == 1:
        return (folder / found[0]).as_posix()
    if not found:
        raise ValueError(f"missing key 'source', and {folder.as_posix()}/ holds no .cu file to take as it")
    raise ValueError(f"missing key 'source', and {folder.as_posix()}/ holds {len(found)} .cu files "
                     f"({', '.join(found)}); name the lesson's with 'source'")





# -- the defaults --------------------------------------------------------------------------
def _defaults(data: dict) -> tuple[list, list]:
    defaults = data.get("defaults")
    if not isinstance(defaults, dict):
        return [], []
    items, claims = defaults.get("output"), defaults.get("claims")
    return (items if isinstance(items, list) else [], claims if isinstance(claims, list) else [])


def _is_prediction(claim: Any) -> bool:
    return isinstance(claim, dict) and "expect" in claim


def claim_order(own: list, defaults: list, skip: Any) -> list[tuple[str, int]]:
    """A lesson's claims with the defaults': ("own", k) and ("defaults", j), in order.

    Default gates go before the lesson's first prediction and default
    predictions after its last claim, so gates still come first on its page.
    """
    skipped = set(skip) if isinstance(skip, list) and all(isinstance(s, str) for s in skip) else set()
    kept = [j for j, claim in enumerate(defaults) if entry_id(claim) not in skipped]
    first = next((k for k, claim in enumerate(own) if _is_prediction(claim)), len(own))
    return ([("own", k) for k in range(first)]
            + [("defaults", j) for j in kept if not _is_prediction(defaults[j])]
            + [("own", k) for k in range(first, len(own))]
            + [("defaults", j) for j in kept if _is_prediction(defaults[j])])


def with_defaults(data: Any) -> Any:
    """The manifest with `defaults.output` and `defaults.claims` joined into every lesson."""
    if not isinstance(data, dict) or not isinstance(data.get("lessons"), list):
        return data
    items, claims = _defaults(data)
    if not items and not claims:
        return data
    lessons = []
    for entry in data["lessons"]:
        if isinstance(entry, dict):
            entry = dict(entry)
            if items and not _skips_output(entry):
                entry["output"] = _with_items(entry.get("output"), items)
            own = entry.get("claims", [])
            if claims and isinstance(own, list):
                entry["claims"] = [copy.deepcopy(claims[k]) if source == "defaults" else own[k]
                                   for source, k in claim_order(own, claims, entry.get("skip_claims"))]
        lessons.append(entry)
    return {**data, "lessons": lessons}


def _skips_output(entry: Any) -> bool:
    """`skip_output: true`: the lesson's output does not start with `defaults.output`."""
    return isinstance(entry, dict) and entry.get("skip_output") is True


def _with_items(output: Any, items: list) -> Any:
    first = copy.deepcopy(items)
    if output is None:
        return {"items": first}
    if isinstance(output, list):
        return first + output
    if isinstance(output, dict) and isinstance(output.get("items"), list):
        return {**output, "items": first + output["items"]}
    return output


# -- lines -----------------------------------------------------------------------------------
def relocate_lines(data: Any, lines: dict[tuple, int]) -> dict[tuple, int]:
    """`lines` (key path -> line) with the long form's paths added: each short-form id's `id` and its
    text, each lesson's output items and claims at their places after the defaults are joined in."""
    if not isinstance(data, dict) or not isinstance(data.get("lessons"), list):
        return lines
    out = dict(lines)
    default_items, claims = _defaults(data)
    for j, claim in enumerate(claims):
        _alias_id(out, ("defaults", "claims", j), claim, "says")
    for i, entry in enumerate(data["lessons"]):
        _alias_id(out, ("lessons", i), entry, "title")
        for k, claim in enumerate(entry.get("claims", []) if isinstance(entry, dict) else []):
            _alias_id(out, ("lessons", i, "claims", k), claim, "says")
    index, under = _index(out)
    for i, entry in enumerate(data["lessons"]):
        if not isinstance(entry, dict):
            continue
        lesson = ("lessons", i)
        items = [] if _skips_output(entry) else default_items
        output = entry.get("output")
        own_items = output if isinstance(output, list) else (output or {}).get("items") if isinstance(
            output, (dict, type(None))) else None
        if isinstance(output, list) or (items and isinstance(own_items, (list, type(None)))):
            written = lesson + (("output",) if isinstance(output, list) else ("output", "items"))
            moves = [(("defaults", "output", j), j) for j in range(len(items))]
            moves += [(written + (k,), len(items) + k) for k in range(len(own_items or []))]
            _move(out, index, under, lesson + ("output", "items"), moves)
            if lesson + ("output",) in out:
                out.setdefault(lesson + ("output", "items"), out[lesson + ("output",)])
        own = entry.get("claims", [])
        if claims and isinstance(own, list):
            order = claim_order(own, claims, entry.get("skip_claims"))
            sources = {"own": lesson + ("claims",), "defaults": ("defaults", "claims")}
            _move(out, index, under, lesson + ("claims",),
                  [(sources[source] + (k,), n) for n, (source, k) in enumerate(order)])
            if ("defaults", "claims") in out:
                out.setdefault(lesson + ("claims",), out[("defaults", "claims")])
    return out


def _alias_id(lines: dict[tuple, int], at: tuple, entry: Any, text_key: str) -> None:
    if not isinstance(entry, dict) or "id" in entry:
        return
    keys = [key for key in entry if is_id_key(key)]
    if len(keys) == 1 and at + (keys[0],) in lines:
        lines[at + ("id",)] = lines[at + (text_key,)] = lines[at + (keys[0],)]


def _index(lines: dict[tuple, int]) -> tuple[dict[tuple, list[tuple[tuple, int]]], dict[tuple, list[tuple]]]:
    """In one pass over the lines: every path under an output item or a claim, grouped by that item's path;
    and every path under a lesson's `claims` or `output.items` (or `output`, written as a list), by that
    prefix: what `_move` replaces, found without a scan of every line for every lesson."""
    index: dict[tuple, list[tuple[tuple, int]]] = {}
    under: dict[tuple, list[tuple]] = {}
    for path, line in lines.items():
        # An item: (defaults, output|claims, j), (lessons, i, claims|output, k), (lessons, i, output, items, k).
        size = len(path)
        if size > 3 and path[0] == "lessons":
            kind = path[2]
            if kind == "claims":
                under.setdefault(path[:3], []).append(path)
                if isinstance(path[3], int):
                    index.setdefault(path[:4], []).append((path[4:], line))
            elif kind == "output":
                if isinstance(path[3], int):
                    index.setdefault(path[:4], []).append((path[4:], line))
                elif path[3] == "items" and size > 4:
                    under.setdefault(path[:4], []).append(path)
                    if isinstance(path[4], int):
                        index.setdefault(path[:5], []).append((path[5:], line))
        elif size >= 3 and path[0] == "defaults" and path[1] in ("output", "claims") and isinstance(path[2], int):
            index.setdefault(path[:3], []).append((path[3:], line))
    return index, under


def _move(lines: dict[tuple, int], index: dict, under: dict, target: tuple, moves: list[tuple[tuple, int]]) -> None:
    """Replace what `lines` holds under the items of `target` with the items `moves` places there.

    `under` (from `_index`, before any move) names the paths under `target`; each target is
    moved into once, so none it names was written by another move.
    """
    for path in under.get(target, ()):
        lines.pop(path, None)
    for source, place in moves:
        for rest, line in index.get(source, []):
            lines[target + (place,) + rest] = line


def written_out(data: dict, root: Path) -> dict:
    """The manifest's data as a course without these short forms and defaults would write it.

    For whatever reads lessons.yaml as plain YAML (tools, the test suite's
    course trees). The short forms of the output schema language, such as
    `{gpu:device}`, stay: every manifest may hold them.
    """
    data = with_defaults(data)
    defaults = data.get("defaults")
    if isinstance(defaults, dict):
        data = {**data, "defaults": {k: v for k, v in defaults.items() if k not in ("output", "claims")}}
    lessons = []
    for entry in data.get("lessons") or []:
        entry = lesson_long_form(entry, root)
        if isinstance(entry, dict):
            entry = {key: value for key, value in entry.items() if key not in ("skip_claims", "skip_output")}
            if isinstance(entry.get("output"), list):
                entry["output"] = {"items": entry["output"]}
            entry["claims"] = [long_entry(claim, "says") for claim in entry.get("claims", [])]
        lessons.append(entry)
    return {**data, "lessons": lessons}
