"""Code snippets marked in lesson sources: `// snippet: NAME` ... `// end snippet[: NAME]`.

An unnamed end closes the innermost open snippet; a named end must close the
snippet of that name, which must be the innermost. Marker lines themselves are
not part of any snippet, and markers nested inside a snippet are dropped from
its text.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from ..errors import TemplateError
from ..files import TEXT_LIMIT, read_text, source_lines

_OPEN = re.compile(r"^\s*//\s*snippet:\s*(?P<name>[A-Za-z0-9_.-]+)\s*$")
_CLOSE = re.compile(r"^\s*//\s*end snippet(?::\s*(?P<name>[A-Za-z0-9_.-]+))?\s*$")
_ANY = re.compile(r"^\s*//\s*(end )?snippet\b")
# What every marker error says besides its line: the fault is in the source, not in lessons.yaml.
MARKER_HINT = ("fix the marker in the source: '// snippet: NAME' opens a snippet, '// end snippet' or "
               "'// end snippet: NAME' closes the innermost one open")


class Snippet(BaseModel):
    name: str
    path: str
    first_line: int   # first line of code, after the opening marker
    last_line: int    # last line of code, before the closing marker
    text: str


def extract_snippets(path: Path, display: str | None = None, text: str | None = None) -> dict[str, Snippet]:
    """Every snippet of a source file; TemplateError names file:line of a bad marker.

    The file is read as files.read_text reads it: one that is not UTF-8, too
    big or no regular file raises CoursectlError naming it.

    `text`, when given, is read instead of the file: render passes the source
    as it will be once its header lines are rewritten, so line numbers agree.
    """
    shown = display or str(path)
    if text is None:
        text = read_text(Path(path), TEXT_LIMIT, "a lesson's source", shown=shown, required=True)
    lines = source_lines(text)

    def error(message: str, line: int) -> TemplateError:
        return TemplateError(message, path=shown, line=line, hint=MARKER_HINT)

    open_: list[tuple[str, int]] = []
    found: dict[str, Snippet] = {}
    for number, line in enumerate(lines, 1):
        opened = _OPEN.match(line)
        closed = _CLOSE.match(line)
        if opened:
            name = opened.group("name")
            if name in found or any(n == name for n, _ in open_):
                raise error(f"snippet {name!r} is defined twice", number)
            open_.append((name, number))
        elif closed:
            if not open_:
                raise error("'end snippet' with no snippet open", number)
            name, start = open_.pop()
            wanted = closed.group("name")
            if wanted is not None and wanted != name:
                raise error(f"'end snippet: {wanted}' closes {name!r} (opened at line {start})", number)
            body = [l for l in lines[start:number - 1] if not _ANY.match(l)]
            found[name] = Snippet(name=name, path=shown, first_line=start + 1, last_line=number - 1,
                                  text="\n".join(body).rstrip() + "\n")
        elif _ANY.match(line):
            raise error(f"malformed snippet marker {line.strip()!r}; write '// snippet: NAME' or "
                        f"'// end snippet[: NAME]'", number)
    if open_:
        name, start = open_[-1]
        raise error(f"snippet {name!r} is never closed", start)
    return found


def lesson_snippets(paths: list[Path], names: list, texts: list[str | None] | None = None) -> dict[str, Snippet]:
    """The snippets of every file of a lesson's program (`paths`, shown as `names`), in order; a name marked in
    two of its files is a TemplateError naming the second."""
    found: dict[str, Snippet] = {}
    for index, (path, name) in enumerate(zip(paths, names)):
        text = texts[index] if texts is not None else None
        for key, snippet in extract_snippets(path, str(name), text=text).items():
            if key in found:
                raise TemplateError(f"snippet {key!r} is also marked in {found[key].path}", path=snippet.path,
                                    line=snippet.first_line - 1, hint="give each snippet of a program its own name")
            found[key] = snippet
    return found
