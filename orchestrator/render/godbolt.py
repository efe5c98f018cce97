"""Compiler Explorer links: a lesson's whole source, its compiler and flags, in one URL.

Compiler Explorer reads its state from the URL fragment the way its own Share
button writes it (compiler-explorer's shared/url-serialization.ts,
`serialiseState`): a GoldenLayout configuration, minified, written in rison,
compressed by lz-string's `compressToBase64` and wrapped as `z:<base64>`. That
is several times shorter than the base64 JSON its /clientstate/ endpoint takes.

A source that includes headers of its own opens as a tree (Compiler
Explorer's multi-file mode, static/panes/tree.ts and multifile-service.ts):
the tree holds every file, the main one named `example` plus the language's
first extension (`example.cu`, how Compiler Explorer finds it), the headers
under their paths relative to the source; the compiler compiles the tree
(`tree: 1`) in a folder holding them all, so `-Icommon` means what it means
beside the source.
"""

from __future__ import annotations

import functools
import re
from typing import Any
from pathlib import Path
from urllib.parse import quote as _percent

from ..files import TEXT_LIMIT, read_text, relative
from ..markdown import code

GODBOLT_URL = "https://godbolt.org/#"
# What a lesson page's link asks Compiler Explorer for.
GODBOLT_LANGUAGE = "cuda"
GODBOLT_COMPILER = "nvcc130"
GODBOLT_ARCH = "sm_90"

# GoldenLayout's ConfigMinifier tables: position i stands for base-36 digit i.
_MIN_KEYS = ["settings", "hasHeaders", "constrainDragToContainer", "selectionEnabled", "dimensions",
             "borderWidth", "minItemHeight", "minItemWidth", "headerHeight", "dragProxyWidth",
             "dragProxyHeight", "labels", "close", "maximise", "minimise", "popout", "content",
             "componentName", "componentState", "id", "width", "type", "height", "isClosable", "title",
             "popoutWholeStack", "openPopouts", "parentId", "activeItemIndex", "reorderEnabled",
             "borderGrabWidth"]
_MIN_VALUES: list[Any] = [True, False, "row", "column", "stack", "component", "close", "maximise",
                          "minimise", "open in new window"]
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


# The main file of a tree, by language: `example` and the language's first extension in Compiler Explorer.
MAIN_FILE = {"cuda": "example.cu"}


def godbolt_state(source: str, language: str, compiler: str, options: str,
                  headers: dict[str, str] | None = None) -> dict:
    """The layout Compiler Explorer opens: an editor holding `source` beside one compiler.

    With `headers` (path relative to the source -> text), a tree of every
    file, the source open in the editor, and a compiler of the tree.
    """
    if not headers:
        return {"version": 4, "content": [{"type": "row", "content": [
            {"type": "component", "componentName": "codeEditor",
             "componentState": {"id": 1, "lang": language, "source": source}},
            {"type": "component", "componentName": "compiler",
             "componentState": {"source": 1, "lang": language, "compiler": compiler, "options": options}},
        ]}]}
    files = [{"fileId": 1, "isIncluded": True, "isOpen": True, "isMainSource": True, "filename": MAIN_FILE[language],
              "content": source, "editorId": 1, "langId": language}]
    files += [{"fileId": number, "isIncluded": True, "isOpen": False, "isMainSource": False, "filename": name,
               "content": text, "editorId": -1, "langId": language}
              for number, (name, text) in enumerate(headers.items(), start=2)]
    tree = {"id": 1, "cmakeArgs": "", "customOutputFilename": "", "isCMakeProject": False,
            "compilerLanguageId": language, "files": files, "newFileId": len(files) + 1}
    return {"version": 4, "content": [{"type": "row", "content": [
        {"type": "component", "componentName": "tree", "componentState": tree},
        {"type": "component", "componentName": "codeEditor",
         "componentState": {"id": 1, "lang": language, "source": source}},
        {"type": "component", "componentName": "compiler",
         "componentState": {"tree": 1, "lang": language, "compiler": compiler, "options": options}},
    ]}]}


def godbolt_url(source: str, language: str, compiler: str, options: str,
                headers: dict[str, str] | None = None) -> str:
    """A Compiler Explorer URL that opens `source` (and its `headers`) compiled by `compiler` with `options`."""
    state = godbolt_state(source, language, compiler, options, headers)
    config = minify({"content": state["content"]})
    config["version"] = state["version"]
    packed = compress_to_base64(risonify(config))
    return GODBOLT_URL + risonify({"z": packed})


# -- GoldenLayout's minifier -------------------------------------------------------------------
def minify(value: Any) -> Any:
    """Keys and frequent values replaced by one base-36 digit; one-character strings escaped."""
    if isinstance(value, dict):
        return {_min(key, _MIN_KEYS): minify(item) for key, item in value.items()}
    if isinstance(value, list):
        return [minify(item) for item in value]
    return _min(value, _MIN_VALUES)


def _min(value: Any, table: list) -> Any:
    if isinstance(value, str) and len(value) == 1:
        return "___" + value
    for index, known in enumerate(table):
        # `True == 1` in Python; the JavaScript original compares with ===.
        if type(known) is type(value) and known == value:
            return _DIGITS[index]
    return value


# -- rison ------------------------------------------------------------------------------------
_NOT_IDCHAR = " '!:(),*@$"
_ID = re.compile("^[^" + re.escape("-0123456789" + _NOT_IDCHAR) + "][^" + re.escape(_NOT_IDCHAR) + "]*$")
_URI_OK = re.compile(r"^[-A-Za-z0-9~!*()_.',:@$/]*$")


def rison(value: Any) -> str:
    """`value` in rison, object keys sorted, as compiler-explorer's shared/rison.ts writes it."""
    if value is True:
        return "!t"
    if value is False:
        return "!f"
    if value is None:
        return "!n"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if value == "":
            return "''"
        if _ID.match(value):
            return value
        return "'" + re.sub(r"(['!])", r"!\1", value) + "'"
    if isinstance(value, list):
        return "!(" + ",".join(rison(item) for item in value) + ")"
    if isinstance(value, dict):
        return "(" + ",".join(f"{rison(key)}:{rison(value[key])}" for key in sorted(value)) + ")"
    raise TypeError(f"rison cannot encode {type(value).__name__}")


def risonify(value: dict) -> str:
    """An object in rison without its parentheses, made safe for a URL (rison's `quote`)."""
    text = rison(value)[1:-1]
    if _URI_OK.match(text):
        return text
    # encodeURIComponent, then rison's quote lets , : @ $ / through and writes a space as +.
    encoded = _percent(text, safe="-_.!~*'()")
    for escaped, char in (("%2C", ","), ("%3A", ":"), ("%40", "@"), ("%24", "$"), ("%2F", "/"), ("%20", "+")):
        encoded = encoded.replace(escaped, char)
    return encoded


# -- lz-string --------------------------------------------------------------------------------
_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


@functools.lru_cache(maxsize=64)
def compress_to_base64(text: str) -> str:
    """lz-string's compressToBase64, over UTF-16 code units as JavaScript strings hold them.

    Remembered for the process: pure, and slow in Python (a lesson's link is
    tens of milliseconds), while `render` and `render --check` in one process
    pack the same source again.
    """
    units = text.encode("utf-16-le", "surrogatepass")
    chars = "".join(chr(units[i] | units[i + 1] << 8) for i in range(0, len(units), 2))
    out = _compress(chars, 6, _BASE64.__getitem__)
    return out + "=" * (-len(out) % 4)


class _Bits:
    """The output bit stream: `width` bits a character, most significant first."""

    def __init__(self, width: int, char_of):
        self.width, self.char_of = width, char_of
        self.out: list[str] = []
        self.value = 0
        self.position = 0

    def put(self, value: int, count: int) -> None:
        """Write the low `count` bits of `value`, least significant first (lz-string's order)."""
        for _ in range(count):
            self.value = (self.value << 1) | (value & 1)
            if self.position == self.width - 1:
                self.position = 0
                self.out.append(self.char_of(self.value))
                self.value = 0
            else:
                self.position += 1
            value >>= 1

    def flush(self) -> str:
        while True:
            self.value <<= 1
            if self.position == self.width - 1:
                self.out.append(self.char_of(self.value))
                return "".join(self.out)
            self.position += 1


def _compress(text: str, width: int, char_of) -> str:
    dictionary: dict[str, int] = {}
    to_create: set[str] = set()
    bits = _Bits(width, char_of)
    enlarge_in, size, num_bits = 2, 3, 2
    w = ""

    def emit(w: str) -> None:
        nonlocal enlarge_in, num_bits
        if w in to_create:
            code = ord(w[0])
            if code < 256:
                bits.put(0, num_bits)
                bits.put(code, 8)
            else:
                bits.put(1, num_bits)
                bits.put(code, 16)
            enlarge_in -= 1
            if enlarge_in == 0:
                enlarge_in, num_bits = 2 ** num_bits, num_bits + 1
            to_create.discard(w)
        else:
            bits.put(dictionary[w], num_bits)
        enlarge_in -= 1
        if enlarge_in == 0:
            enlarge_in, num_bits = 2 ** num_bits, num_bits + 1

    for c in text:
        if c not in dictionary:
            dictionary[c] = size
            size += 1
            to_create.add(c)
        wc = w + c
        if wc in dictionary:
            w = wc
            continue
        emit(w)
        dictionary[wc] = size
        size += 1
        w = c
    if w:
        emit(w)
    bits.put(2, num_bits)
    return bits.flush()


def godbolt_link(source: str, options: str, headers: dict[str, str] | None = None) -> str:
    """A Compiler Explorer link whose editor holds `source` (beside its `headers`), compiled by nvcc with `options`."""
    return godbolt_url(source, GODBOLT_LANGUAGE, GODBOLT_COMPILER, options, headers)


def page_link(source_path: Path, source: str, options: str, headers: list[Path],
             root: Path) -> tuple[str, str | None, list[str]]:
    """(link, None, header names) or, when Compiler Explorer cannot hold the files, ("", why, [])."""
    folder = source_path.parent
    outside = [header for header in headers if not header.is_relative_to(folder)]
    if outside:
        names = ", ".join(code(relative(header, root)) for header in outside)
        return "", (f"No Compiler Explorer link: {code(source_path.name)} includes {names}, outside its own "
                    f"folder, and Compiler Explorer holds only files that lie beside the source or below it."), []
    files = {header.relative_to(folder).as_posix():
             read_text(header, TEXT_LIMIT, "a header", shown=relative(header, root), errors="replace") or ""
             for header in headers}
    return godbolt_link(source, options, files), None, list(files)
