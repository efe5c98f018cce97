"""YAML loading that remembers the line of every key, refuses duplicates, and stays bounded.

The file is read once, at most MAX_BYTES of it, and parsed once, by libyaml
when PyYAML has it. Anchors, aliases and merge keys (`<<: *fragment`) work;
what they expand to is walked before anything is built from it, so a
recursive alias or a "billion laughs" file is refused at once, naming a line.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from .errors import ManifestError


MAX_BYTES = 4 * 2**20      # a manifest of 100 lessons is about 0.3 MiB
MAX_NODES = 200_000        # values after expanding aliases; 100 lessons are about 21,000

_FastLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_REWORD_BYTES = 2**20      # up to this size a broken file is parsed again in Python, for its wording


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Return the document and a map from key path to line number."""
    text = _read(Path(path))
    loader = _FastLoader(text)
    try:
        node = loader.get_single_node()
        lines = _Walk(loader, text).lines_of(node) if node is not None else {}
        data = loader.construct_document(node) if node is not None else None
    except ManifestError as exc:
        exc.path = str(path)
        raise
    except (yaml.YAMLError, RecursionError) as exc:
        raise _syntax_error(text, exc, path) from None
    finally:
        loader.dispose()
    return data, lines


def _read(path: Path) -> str:
    """The file as text: refused when missing, a folder, too big or not UTF-8."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError("no such file", path=path,
                            hint="run coursectl from the course's root or pass --manifest") from None
    except IsADirectoryError:
        raise ManifestError("is a directory, not a manifest file", path=path) from None
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if len(data) > MAX_BYTES:
        raise ManifestError(f"is larger than {MAX_BYTES // 2**20} MiB, too large for a manifest", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ManifestError(f"is not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded",
                            path=path, line=line) from None


def _syntax_error(text: str, exc: BaseException, path: Path) -> ManifestError:
    """One line for a YAML error, worded as PyYAML's own parser words it.

    libyaml words some errors differently; parsing again in Python (only on
    this path, and only a file of a sensible size, since Python's parser is
    slow) keeps the messages the same wherever libyaml is missing.
    """
    if _FastLoader is not yaml.SafeLoader and len(text) <= _REWORD_BYTES:
        try:
            yaml.SafeLoader(text).get_single_data()
        except yaml.YAMLError as python_exc:
            exc = python_exc
        except RecursionError:
            pass
    if isinstance(exc, RecursionError):
        return ManifestError("YAML syntax: the document nests too deeply", path=path)
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        return ManifestError(f"YAML syntax: unacceptable character #x{code:04x}: {exc.reason}",
                             path=path, line=line)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or "invalid YAML").replace("\n", " ")
        if "\t" in text and "tab" in problem.lower() or (mark and _is_tab_at(text, mark)):
            problem = "a tab character indents this line; YAML indents with spaces only"
        return ManifestError(f"YAML syntax: {problem}", path=path, line=mark.line + 1 if mark else None)
    return ManifestError(f"YAML syntax: {str(exc).splitlines()[0]}", path=path)


def _is_tab_at(text: str, mark) -> bool:
    rows = text.splitlines()
    if mark.line < len(rows):
        row = rows[mark.line]
        return row[: len(row) - len(row.lstrip())].find("\t") >= 0
    return False


class _Walk:
    """The node graph walked as the tree its aliases expand to, before anything is built.

    Counts the nodes (MAX_NODES), refuses recursive aliases and duplicate keys,
    and records each key path's line. A path inside an aliased or merged
    fragment gets the fragment's line.
    """

    def __init__(self, loader, text: str):
        self.loader = loader
        self.text = text
        self.count = 0
        self.pairs: dict[int, list[tuple[yaml.Node, yaml.Node]]] = {}

    def lines_of(self, root: yaml.Node) -> dict[tuple, int]:
        lines: dict[tuple, int] = {(): root.start_mark.line + 1}
        active: set[int] = set()           # the nodes on the path from the root: a repeat is a cycle
        stack: list[tuple[yaml.Node | None, tuple, int]] = [(root, (), id(root))]
        while stack:
            node, path, ident = stack.pop()
            if node is None:               # every child of `ident` is done
                active.discard(ident)
                continue
            if ident in active:
                raise self._recursive(node)
            self.count += 1
            if self.count > MAX_NODES:
                raise ManifestError(f"aliases expand the manifest past {MAX_NODES} values; "
                                    "coursectl stops there", line=node.start_mark.line + 1)
            if isinstance(node, yaml.ScalarNode):
                continue
            active.add(ident)
            stack.append((None, path, ident))
            if isinstance(node, yaml.MappingNode):
                children = []
                for key_node, value_node in self._pairs(node, active):
                    if not isinstance(key_node, yaml.ScalarNode):
                        continue   # PyYAML's constructor reports an unhashable key, with its line
                    key = key_node.value
                    lines[path + (key,)] = key_node.start_mark.line + 1
                    children.append((value_node, path + (key,), id(value_node)))
            else:
                children = [(item, path + (index,), id(item)) for index, item in enumerate(node.value)]
                for item, child_path, _ in children:
                    lines.setdefault(child_path, item.start_mark.line + 1)
            stack.extend(reversed(children))
        return lines

    def _pairs(self, node: yaml.MappingNode, active: set[int]) -> list[tuple[yaml.Node, yaml.Node]]:
        """A mapping's key/value nodes with its merge keys applied (its own keys win)."""
        found = self.pairs.get(id(node))
        if found is not None:
            return found
        own: list[tuple[yaml.Node, yaml.Node]] = []
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        continue   # PyYAML's constructor reports it, with its line
                    if id(source) in active:
                        raise self._recursive(source)
                    active.add(id(source))
                    try:
                        merged.extend(self._pairs(source, active))
                    finally:
                        active.discard(id(source))
                continue
            key = self._key(key_node)
            if key is not None:
                if key in seen:
                    raise ManifestError(f"duplicate key {key!r} (first at line {seen[key]})",
                                        line=key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
            own.append((key_node, value_node))
        # The first source of a merge list wins over the later ones, as in PyYAML.
        taken = set(seen)
        result = list(own)
        for key_node, value_node in merged:
            key = self._key(key_node)
            if key is None or key not in taken:
                result.append((key_node, value_node))
                if key is not None:
                    taken.add(key)
        self.pairs[id(node)] = result
        return result

    def _key(self, key_node: yaml.Node) -> Any:
        if not isinstance(key_node, yaml.ScalarNode):
            return None    # PyYAML's construct_mapping reports an unhashable key, with its line
        key = self.loader.construct_object(key_node)
        return key if isinstance(key, Hashable) else None

    def _recursive(self, node: yaml.Node) -> ManifestError:
        """Name the alias that refers to a node it lies inside."""
        open_: list[tuple[str | None, int]] = []
        for event in yaml.parse(self.text, Loader=_FastLoader):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                open_.append((event.anchor, event.start_mark.line + 1))
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                open_.pop()
            elif isinstance(event, yaml.AliasEvent):
                for anchor, line in open_:
                    if anchor == event.anchor:
                        return ManifestError(f"recursive alias: *{anchor} lies inside the value anchored "
                                             f"&{anchor} at line {line}", line=event.start_mark.line + 1)
        return ManifestError("recursive alias: a value contains itself", line=node.start_mark.line + 1)


def line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of `path`, or of its nearest ancestor that has one."""
    path = tuple(path)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())
