"""Counts and values in words, as every message, table and page writes them."""

from __future__ import annotations

import shlex


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 hazard`, `2 hazards`; `many` for nouns whose plural is not noun + s."""
    return f"{count} {noun}" if count == 1 else f"{count} {many or noun + 's'}"


def format_value(value) -> str:
    """A field's value with every digit that tells it apart from its neighbour (18011780, not 1.80118e+07)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)   # the shortest text that reads back as the same number
    return str(value)


def command_line(*words: str) -> str:
    """A command line as a message or a page prints it for the user to paste into a shell: each word quoted
    for it (`coursectl record 'day01-heat[basic]'`: a run's id holds [], a shell glob)."""
    return shlex.join(str(word) for word in words)


_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(name) -> str:
    """A name (a lesson id, a kernel, a field, a table key) as a message shows it: every character but
    printable ASCII escaped, as Python writes it (`copyRow\\u200bMajor`), so an invisible character or a
    letter of another script that looks like a Latin one is seen, and two names that differ look different.
    A backslash is doubled, so an escape shown is never mistaken for one typed."""
    out = []
    for char in str(name):
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def quoted(name) -> str:
    """`shown(name)` in single quotes: what `{name!r}` wrote in a message, with every hidden character seen
    (a name that is not text, a row's index, as repr writes it)."""
    return "'" + shown(name).replace("'", "\\'") + "'" if isinstance(name, str) else repr(name)


# What str.splitlines takes for the end of a line, and a C++ compiler for some of them.
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def one_line(text: str) -> str:
    """`text` with each line break and other control character as a space: what may go into one line of a
    source comment or a page, whatever it was handed."""
    return "".join(" " if char in _LINE_BREAKS or ord(char) < 0x20 or ord(char) == 0x7F else char
                   for char in text)
