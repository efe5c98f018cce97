"""Code snippets marked in lesson sources: `// snippet: NAME` ... `// end snippet[: NAME]`.

An unnamed end closes the innermost open snippet; a named end must close the
snippet of that name, which must be the innermost. Marker lines themselves are
not part of any snippet, and markers nested inside a snippet are dropped from
its text.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, model_validator

from ..errors import TemplateError
from ..files import TEXT_LIMIT, read_text, source_lines
from ..transcript.fields import Strict

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
        if "snippet" not in line:   # no marker: each of them names a snippet
            continue
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


# -- snippets declared in lessons.yaml, for a source the course must not edit -----------------
_LINES = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_DEFINITION_TAIL = re.compile(r"\s*(?:[A-Za-z_]\w*\s*)*\{")   # `) const {`, `) noexcept {`, `) {`


class SnippetSpec(Strict):
    """`snippets: {NAME: {function: NAME} | {lines: A-B}, file: PATH}` in a lesson of lessons.yaml."""

    function: str | None = None   # a C/C++ function or kernel, its definition up to its closing brace
    lines: str | None = None      # 'A-B', both included, counted from 1
    file: Path | None = None      # a file of the lesson, relative to its source's folder; default its source

    @model_validator(mode="after")
    def _one(self) -> "SnippetSpec":
        if (self.function is None) == (self.lines is None):
            raise ValueError("give one of 'function: NAME' (a function or kernel) or 'lines: A-B'")
        if self.lines is not None:
            bounds = _LINES.match(self.lines)
            if not bounds or not 1 <= int(bounds.group(1)) <= int(bounds.group(2)):
                raise ValueError(f"lines {self.lines!r} must be A-B, 1 <= A <= B, such as 40-72")
        return self


def code_only(text: str) -> str:
    """`text` with its comments, string and character literals blanked (newlines kept), offsets unchanged."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c, pair = text[i], text[i:i + 2]
        if pair == "//":
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif pair == "/*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c in "\"'":
            end = i + 1
            while end < n and text[end] != c and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end = min(end + 1, n)
        else:
            i += 1
            continue
        for k in range(i, end):
            if out[k] != "\n":
                out[k] = " "
        i = end
    return "".join(out)


def _closing(code: str, start: int, open_: str, close: str) -> int:
    """The offset just past the bracket that closes the one at `start`, or -1."""
    depth = 0
    for k in range(start, len(code)):
        if code[k] == open_:
            depth += 1
        elif code[k] == close:
            depth -= 1
            if depth == 0:
                return k + 1
    return -1


def function_spans(text: str, name: str) -> list[tuple[int, int]]:
    """The (first, last) lines of every definition of function or kernel `name` in `text`; declarations,
    calls and launches are not definitions, nor is anything in a comment or a string."""
    code = code_only(text)
    lines = code.split("\n")
    spans = []
    for match in re.finditer(rf"(?<![\w.>:]){re.escape(name)}\s*\(", code):
        after = _closing(code, match.end() - 1, "(", ")")
        tail = _DEFINITION_TAIL.match(code, after) if after > 0 else None
        if tail is None:
            continue
        end = _closing(code, tail.end() - 1, "{", "}")
        if end < 0:
            continue
        first = code.count("\n", 0, match.start()) + 1
        # Lines before the name that are still its signature: `template <...>`, `__global__ void`.
        while first > 1:
            above = lines[first - 2].strip()
            if not above or above.startswith("#") or above[-1] in ";{}":
                break
            first -= 1
        spans.append((first, code.count("\n", 0, end - 1) + 1))
    return spans


def declared_snippet(name: str, spec: SnippetSpec, shown: str, text: str) -> Snippet:
    """The snippet `spec` names in a file (`shown`, its text `text`); TemplateError names the file when a
    function matches nothing or more than once, or the lines pass the file's end."""
    lines = source_lines(text)
    if spec.function is not None:
        spans = function_spans(text, spec.function)
        if len(spans) != 1:
            found = "no definition of" if not spans else (
                f"{len(spans)} definitions (lines {', '.join(str(a) for a, _ in spans)}) of")
            raise TemplateError(f"snippet {name!r}: {found} function {spec.function!r} in {shown}", path=shown,
                                hint="name a function or kernel defined once in that file, or give 'lines: A-B'")
        first, last = spans[0]
    else:
        bounds = _LINES.match(spec.lines or "")
        first, last = int(bounds.group(1)), int(bounds.group(2))
        if last > len(lines):
            raise TemplateError(f"snippet {name!r}: lines {spec.lines} pass the end of {shown} "
                                f"({len(lines)} lines)", path=shown)
    body = lines[first - 1:last]
    return Snippet(name=name, path=shown, first_line=first, last_line=last, text="\n".join(body).rstrip() + "\n")


def with_declared(marked: dict[str, Snippet], specs: dict[str, SnippetSpec], source: Path, shown: str,
                  text: str, root: Path) -> dict[str, Snippet]:
    """The marked snippets of a lesson's source and those its `snippets:` declares, from any file of the
    lesson (`file:` relative to the source's folder); a name given both ways is an error naming the file."""
    found = dict(marked)
    for name, spec in specs.items():
        if name in found:
            raise TemplateError(f"snippet {name!r} is both marked in {shown} and declared in lessons.yaml",
                                path=shown, line=found[name].first_line - 1)
        if spec.file is None or (source.parent / spec.file).resolve() == source.resolve():
            found[name] = declared_snippet(name, spec, shown, text)
            continue
        path = source.parent / spec.file
        other = str(Path(shown).parent / spec.file)
        found[name] = declared_snippet(name, spec, other,
                                       read_text(path, TEXT_LIMIT, "a file of a lesson", shown=other,
                                                 required=True, root=root))
    return found
