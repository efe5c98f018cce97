"""YAML loading that remembers the line of every key, and refuses duplicates."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from .errors import ManifestError



class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):
            continue  # PyYAML's own construct_mapping reports it, with its line
        if key in seen:
            raise ManifestError(
                f"duplicate key {key!r} (first at line {seen[key]})",
                line=key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _collect_lines(node: yaml.Node, path: tuple, lines: dict[tuple, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[path + (key,)] = key_node.start_mark.line + 1
            _collect_lines(value_node, path + (key,), lines)
            lines[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect_lines(item, path + (index,), lines)


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Return the document and a map from key path to line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError("no such file", path=path,
                            hint="run coursectl from the course's root or pass --manifest")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read: {exc}", path=path)
    try:
        node = yaml.compose(text, Loader=_LineLoader)
        data = _LineLoader(text).get_single_data() if node is not None else None
    except ManifestError as exc:
        exc.path = str(path)
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        if "\t" in text and "tab" in problem.lower() or (mark and _is_tab_at(text, mark)):
            problem = "a tab character indents this line; YAML indents with spaces only"
        raise ManifestError(f"YAML syntax: {problem}", path=path,
                            line=mark.line + 1 if mark else None)
    except yaml.YAMLError as exc:
        raise ManifestError(f"YAML syntax: {exc}", path=path)
    lines: dict[tuple, int] = {}
    if node is not None:
        _collect_lines(node, (), lines)
    return data, lines


def _is_tab_at(text: str, mark) -> bool:
    rows = text.splitlines()
    if mark.line < len(rows):
        row = rows[mark.line]
        return row[: len(row) - len(row.lstrip())].find("\t") >= 0
    return False


def line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of `path`, or of its nearest ancestor that has one."""
    path = tuple(path)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())
