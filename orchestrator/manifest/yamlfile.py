"""YAML loading that remembers the line of every key, refuses duplicates, and stays bounded.

The file is read once, at most MAX_BYTES of it, and parsed once, by libyaml
when PyYAML has it. Anchors, aliases and merge keys (`<<: *fragment`) work;
the data is built in one walk of what they expand to, which counts what it
builds, so a recursive alias or a "billion laughs" file is refused at once,
naming a line.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from ..errors import ManifestError
from ..files import read_text


MAX_BYTES = 4 * 2**20      # a manifest of 100 lessons is about 0.3 MiB
MAX_NODES = 200_000        # values after expanding aliases; 100 lessons are about 21,000
MAX_DEPTH = 64             # values inside values; lessons.yaml goes about 12 deep

_FastLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_VALUE_TAG = "tag:yaml.org,2002:value"   # `=` as a key, which PyYAML reads as the string "="
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_APPEND = object()
_REWORD_BYTES = 2**20      # up to this size a broken file is parsed again in Python, for its wording


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Return the document and a map from key path to line number."""
    text = manifest_text(Path(path))
    loader = _FastLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        walk = _Walk(loader, text)
        data, lines = walk.load(node)
        if walk.exotic:    # !!set, !!omap and the like: PyYAML builds what it allows
            data = loader.construct_document(node)
    except ManifestError as exc:
        exc.path = str(path)
        raise
    except (yaml.YAMLError, RecursionError) as exc:
        raise _syntax_error(text, exc, path) from None
    finally:
        loader.dispose()
    return data, lines


def manifest_text(path: Path) -> str:
    """The file as text: refused when missing, a folder, a FIFO or a device, too big or not UTF-8."""
    if path.is_dir():
        raise ManifestError("is a directory, not a manifest file", path=path)
    text = read_text(path, MAX_BYTES, "a manifest", ManifestError)
    if text is None:
        raise ManifestError("no such file", path=path,
                            hint="run coursectl from the course's root or pass --manifest")
    return text


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
    """The node graph walked once, as the tree its aliases expand to, building the data.

    Counts the values (MAX_NODES), refuses recursive aliases and duplicate
    keys, applies merge keys as their spec says, and records each key path's
    line; a path inside an aliased or merged fragment gets the fragment's
    line. Each alias gets a copy of what it names.
    """

    def __init__(self, loader, text: str):
        self.loader = loader
        self.text = text
        self.count = 0
        self.pairs: dict[int, list[tuple[Any, yaml.Node, yaml.Node]]] = {}
        self.exotic = False                # a collection with a tag of its own: PyYAML builds it

    def load(self, root: yaml.Node) -> tuple[Any, dict[tuple, int]]:
        lines: dict[tuple, int] = {(): root.start_mark.line + 1}
        top: list[Any] = []
        active: set[int] = set()           # the nodes on the path from the root: a repeat is a cycle
        # (node, its path, the container its value goes in, its key there or _APPEND)
        stack: list[tuple[yaml.Node | None, tuple, Any, Any]] = [(root, (), top, _APPEND)]
        while stack:
            node, path, parent, key = stack.pop()
            if node is None:               # every child of the node whose id is `key` is done
                active.discard(key)
                continue
            ident = id(node)
            if ident in active:
                raise self._recursive(node)
            if len(path) > MAX_DEPTH:
                raise ManifestError(f"values nest deeper than {MAX_DEPTH} levels", line=node.start_mark.line + 1)
            self.count += 1
            if self.count > MAX_NODES:
                raise ManifestError(f"aliases expand the manifest past {MAX_NODES} values; "
                                    "coursectl stops there", line=node.start_mark.line + 1)
            if isinstance(node, yaml.ScalarNode):
                value = node.value if node.tag == _STR_TAG else self.loader.construct_object(node)
                children = []
            elif isinstance(node, yaml.MappingNode):
                self.exotic = self.exotic or node.tag != _MAP_TAG
                value = {}
                children = []
                for child_key, key_node, value_node in self._pairs(node, active | {ident}):
                    lines[path + (child_key,)] = key_node.start_mark.line + 1
                    children.append((value_node, path + (child_key,), value, child_key))
            else:
                self.exotic = self.exotic or node.tag != _SEQ_TAG
                value = []
                children = [(item, path + (index,), value, _APPEND) for index, item in enumerate(node.value)]
                for item, child_path, _, _ in children:
                    lines.setdefault(child_path, item.start_mark.line + 1)
            if key is _APPEND:
                parent.append(value)
            else:
                parent[key] = value
            if children:
                active.add(ident)
                stack.append((None, path, None, ident))
                stack.extend(reversed(children))
        return top[0], lines

    def _pairs(self, node: yaml.MappingNode, active: set[int]) -> list[tuple[Any, yaml.Node, yaml.Node]]:
        """A mapping's (key, key node, value node) with its merge keys applied, as the merge-key
        spec says: merged keys first, in order; of a list of merged mappings the first one's key
        wins; a key of the mapping's own wins over a merged one and keeps the merged one's place.
        (PyYAML 6.0.2 and later let the last of a list win for some keys: coursectl keeps the spec.)"""
        found = self.pairs.get(id(node))
        if found is None:
            found = self.pairs[id(node)] = self._flatten(node, active)
        return found

    def _flatten(self, node: yaml.MappingNode, active: set[int]) -> list[tuple[Any, yaml.Node, yaml.Node]]:
        merged: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        own: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                key = self._key(node, key_node)
                if key in own:
                    raise ManifestError(f"duplicate key {key!r} (first at line {own[key][0].start_mark.line + 1})",
                                        line=key_node.start_mark.line + 1)
                own[key] = (key_node, value_node)
                continue
            if isinstance(value_node, yaml.MappingNode):
                sources = [value_node]
            elif isinstance(value_node, yaml.SequenceNode):
                sources = value_node.value
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"expected a mapping for merging, but found {source.id}", source.start_mark)
            else:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"expected a mapping or list of mappings for merging, but found {value_node.id}",
                    value_node.start_mark)
            for source in sources:
                if id(source) in active or source is node:
                    raise self._recursive(source)
                for key, key_node, value_node in self._pairs(source, active | {id(node)}):
                    merged.setdefault(key, (key_node, value_node))
        if not merged:
            return [(key, key_node, value_node) for key, (key_node, value_node) in own.items()]
        merged.update(own)
        return [(key, key_node, value_node) for key, (key_node, value_node) in merged.items()]

    def _key(self, mapping: yaml.Node, key_node: yaml.Node) -> Any:
        if isinstance(key_node, yaml.ScalarNode):
            if key_node.tag == _STR_TAG or key_node.tag == _VALUE_TAG:
                return key_node.value
            key = self.loader.construct_object(key_node)
            if isinstance(key, Hashable):
                return key
        raise yaml.constructor.ConstructorError("while constructing a mapping", mapping.start_mark,
                                                "found unhashable key", key_node.start_mark)

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
