"""The local headers a lesson's source includes, found the way nvcc's preprocessor finds them.

render needs them without building (the Compiler Explorer link carries them);
a build takes its inputs from nvcc's own dependency list instead (build.py),
which also sees what a scan cannot: an include chosen by a macro, `-include`.
What a dependency list cannot say, where the preprocessor looked and found
nothing, a build takes from a scan (`places_looked`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from ..errors import BuildError, CoursectlError
from ..files import TEXT_LIMIT, check_inside, read_text

# `#include "x.cuh"` and `#include <x.cuh>` at the start of a line; commented-out lines do not match.
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"(?P<quoted>[^"\n]+)"|<(?P<angled>[^>\n]+)>)', re.MULTILINE)
# `__has_include("x.cuh")` looks where `#include "x.cuh"` would, and finds nothing or a header.
_HAS_INCLUDE = re.compile(r'__has_include[ \t]*\([ \t]*(?:"(?P<quoted>[^"\n]+)"|<(?P<angled>[^>\n]+)>)[ \t]*\)')


def include_dirs(flags: list[str], folder: Path) -> list[Path]:
    """The `-I` folders of nvcc's flags, in order, relative ones taken from `folder` (where nvcc runs)."""
    dirs: list[Path] = []
    flags = list(flags)
    for index, flag in enumerate(flags):
        if flag in ("-I", "--include-path") and index + 1 < len(flags):
            value = flags[index + 1]
        elif flag.startswith("--include-path="):
            value = flag.split("=", 1)[1]
        elif flag.startswith("-I") and len(flag) > 2:
            value = flag[2:]
        else:
            continue
        dirs.append(Path(os.path.normpath(Path(folder) / value)))
    return dirs


def local_headers(source: Path, flags: list[str], root: Path) -> list[Path]:
    """Every header inside the course root that `source` includes, directly or through another, in order found.

    Each include is looked for where the preprocessor would (`_searches`).
    Headers outside the course (the system's, CUDA's) are not followed; one
    named inside the course that is a link leading out of it is refused
    (BuildError naming the link and its target), never read or published.
    """
    source = Path(os.path.normpath(source))
    given, root = Path(root), Path(root).resolve()
    dirs = include_dirs(flags, source.parent)
    found: list[Path] = []
    seen = {source}
    queue = [source]
    while queue:
        for searched in _searches(queue.pop(0), dirs, (_INCLUDE,)):
            path = next((path for path in searched if path.is_file()), None)
            if path is not None and path not in seen:
                check_inside(path, given, BuildError)   # a header of the course that is a link out of it
            if path is not None and path not in seen and path.resolve().is_relative_to(root):
                seen.add(path)
                found.append(path)
                queue.append(path)
    return found


def places_looked(source: Path, headers: list[Path], flags: list[str], root: Path) -> list[Path]:
    """The paths inside the course root where the preprocessor looks for a header that `source` and `headers`
    include, and finds none.

    For each include of each file, every place searched before the one that
    holds the header (every place, when none does: the system's header). A
    file that appears at one of them is read instead by the next build: a
    `check.cuh` added beside the source shadows the one `-Icommon` gave, and
    one that `__has_include` asked for and did not find changes what the
    preprocessor keeps. The scan also takes includes the preprocessor skips
    (`#if 0`, comments), which only makes the list longer.
    """
    source = Path(os.path.normpath(source))
    lexical_root, resolved_root = Path(os.path.normpath(Path(root).absolute())), Path(root).resolve()
    dirs = include_dirs(flags, source.parent)
    places: list[Path] = []
    seen: set[Path] = set()
    for current in [source, *(Path(os.path.normpath(header)) for header in headers)]:
        for searched in _searches(current, dirs, (_INCLUDE, _HAS_INCLUDE)):
            for path in searched:
                if path.is_file():
                    break
                if path not in seen and (path.is_relative_to(lexical_root)
                                         or path.parent.resolve().is_relative_to(resolved_root)):
                    seen.add(path)
                    places.append(path)
    return places


def _searches(current: Path, dirs: list[Path], patterns: tuple[re.Pattern, ...]) -> Iterator[list[Path]]:
    """For each include of `current` that `patterns` find, the paths the preprocessor tries, in order.

    A quoted include is looked for beside the file that includes it, then in
    each `-I` folder; an angled one in the `-I` folders only. A file that
    cannot be read has none: the build, or the page's own read of the source,
    says what is wrong with it.
    """
    try:
        text = read_text(current, TEXT_LIMIT, "a header", errors="replace") or ""
    except CoursectlError:
        return
    for pattern in patterns:
        for match in pattern.finditer(text):
            name = match["quoted"] or match["angled"]
            places = ([current.parent] if match["quoted"] else []) + dirs
            yield [Path(os.path.normpath(place / name)) for place in places]
