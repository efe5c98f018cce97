"""The local headers a lesson's source includes, found the way nvcc's preprocessor finds them.

render needs them without building (the Compiler Explorer link carries them);
a build takes its inputs from nvcc's own dependency list instead (build.py),
which also sees what a scan cannot: an include chosen by a macro, `-include`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import CoursectlError
from .files import TEXT_LIMIT, read_text

# `#include "x.cuh"` and `#include <x.cuh>` at the start of a line; commented-out lines do not match.
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"(?P<quoted>[^"\n]+)"|<(?P<angled>[^>\n]+)>)', re.MULTILINE)


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

    A quoted include is looked for beside the file that includes it, then in
    each `-I` folder; an angled one in the `-I` folders only. Headers outside
    the course (the system's, CUDA's) are not followed.
    """
    source = Path(os.path.normpath(source))
    root = Path(root).resolve()
    dirs = include_dirs(flags, source.parent)
    found: list[Path] = []
    seen = {source}
    queue = [source]
    while queue:
        current = queue.pop(0)
        try:
            text = read_text(current, TEXT_LIMIT, "a header", errors="replace") or ""
        except CoursectlError:   # the build, or the page's own read of the source, says what is wrong with it
            continue
        for match in _INCLUDE.finditer(text):
            name = match["quoted"] or match["angled"]
            places = ([current.parent] if match["quoted"] else []) + dirs
            for place in places:
                path = Path(os.path.normpath(place / name))
                if path.is_file():
                    if path not in seen and path.resolve().is_relative_to(root):
                        seen.add(path)
                        found.append(path)
                        queue.append(path)
                    break
    return found
