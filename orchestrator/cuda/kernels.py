"""Kernel names: demangling with c++filt and cutting a signature down to its short name.

Both ptxas (build evidence) and compute-sanitizer (findings) name kernels;
both go through here, so a kernel has one short name everywhere.
"""

from __future__ import annotations

import functools
import shutil

from ..process import run_command


def demangle_all(names: list[str]) -> dict[str, str]:
    """Each name -> its demangled signature (`_Z2wrPfi` -> `wr(float*, int)`), in one c++filt call.

    Names that are not mangled, or all of them where c++filt is missing, map to themselves.
    """
    out = {name: name for name in names}
    mangled = [name for name in dict.fromkeys(names) if name.startswith("_Z")]
    cxxfilt = shutil.which("c++filt")
    if not mangled or cxxfilt is None:
        return out
    try:
        result = run_command([cxxfilt, *mangled], timeout=30)
    except OSError:
        return out
    lines = result.stdout.decode(errors="replace").splitlines()
    if result.ok and len(lines) == len(mangled):
        out.update((name, line.strip() or name) for name, line in zip(mangled, lines))
    return out


@functools.lru_cache(maxsize=None)
def demangle(name: str) -> str:
    """One name's demangled signature; the name unchanged when it cannot be demangled."""
    return demangle_all([name])[name]


def _matching_open(text: str, close_at: int) -> int:
    """Index of the bracket that opens the one at `close_at`, or -1."""
    pairs = {")": "(", ">": "<"}
    depth = 0
    for index in range(close_at, -1, -1):
        char = text[index]
        if char in pairs:
            depth += 1
        elif char in pairs.values():
            depth -= 1
            if depth == 0:
                return index
    return -1


def _last_top_level(text: str, separator: str) -> str:
    """What follows the last `separator` outside brackets."""
    depth = 0
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char in "(<":
            depth += 1
        elif char in ")>":
            depth -= 1
        elif depth == 0 and text.startswith(separator, index):
            start = index + len(separator)
            index = start
            continue
        index += 1
    return text[start:]


def split_kernel_name(function: str) -> tuple[str, str]:
    """(short name, signature): `rev(float *)` -> `rev`; `void ns::t<16>(float*)` -> `t`.

    A mangled name is demangled first where c++filt is on PATH.
    """
    signature = demangle(function.strip())
    return short_name(signature), signature


def short_name(signature: str) -> str:
    """The kernel's name alone from a demangled signature."""
    name = signature
    if name.endswith(")"):
        opening = _matching_open(name, len(name) - 1)
        if opening > 0:
            name = name[:opening].rstrip()
    name = _last_top_level(name, " ")  # the return type of a template instance
    if name.endswith(">"):
        opening = _matching_open(name, len(name) - 1)
        if opening > 0:
            name = name[:opening]
    name = _last_top_level(name, "::")
    return name or signature
