"""Atomic writes: a temp file beside the target, then os.replace."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def relative(path: Path, root: Path) -> str:
    """A path as the course names it: relative to `root` where it lies inside, else as it is."""
    path = Path(path)
    try:
        return path.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path.as_posix()


# A line of a source as compilers, editors and GitHub count lines: ended by \n, \r\n or \r, as Python's universal
# newlines end them. str.splitlines() also ends one at \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which would
# put a snippet's or a header's line number off by one for each of them above it.
_SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of a source's text, numbered as its compiler and its page on GitHub number them."""
    rows = _SOURCE_LINE.findall(text)
    return rows if keepends else [row.rstrip("\r\n") for row in rows]
