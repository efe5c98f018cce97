"""Reading and writing the course's files.

Writes are atomic: a temp file beside the target, then os.replace. Reads are
bounded: every file coursectl reads goes through read_file, which opens it
without blocking, reads only a regular file, and only up to a limit, so that a
FIFO, /dev/zero or a file of gigabytes is one error naming it, never a hang or
a process eating the machine's memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from .errors import CoursectlError

# The most coursectl reads of a lesson's source or header, its prose, a template, README.md or a page
# render writes: the course's largest is 29 KiB.
TEXT_LIMIT = 16 * 2**20


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
    """A path as the course names it: relative to `root` where it lies inside, else as it is.

    Inside by its own name first (`..` taken out, links not followed), so that a
    file of the course that is a link to one elsewhere keeps the course's name
    for it; else by where it leads, so that a path reaching the course through a
    link is named from the root too. A path outside the root either way is named
    as it was given (`/usr/include/stdio.h`, `../t.txt`), never as a walk out
    of the root.
    """
    path = Path(path)
    named = Path(os.path.normpath(path.absolute()))
    resolved_root = Path(root).resolve()
    for base in (Path(os.path.normpath(Path(root).absolute())), resolved_root):
        if named.is_relative_to(base):
            return named.relative_to(base).as_posix()
    try:
        return path.resolve().relative_to(resolved_root).as_posix()
    except ValueError:
        return path.as_posix()


# -- bounded reads -----------------------------------------------------------------------------
def read_file(path: Path, limit: int, what: str, error: type[CoursectlError] = CoursectlError,
              shown: str | Path | None = None, *, required: bool = False) -> bytes | None:
    """The bytes of one file, read up to `limit`; None if there is none (FileNotFoundError if `required`).

    Only a regular file is read (opened without blocking, so a FIFO is no
    hang), and only up to `limit` bytes: a folder, a device, a FIFO, a socket
    or a bigger file raises `error` naming it (as `shown`, where given), as
    does a file that cannot be read. `what` names the kind of file in the
    message for one that is too big: `larger than 16 MiB, the most a
    transcript may hold`.
    """
    path = Path(path)
    name = path if shown is None else shown
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        if required:
            raise
        return None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", path=name) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{kind_of(mode)} where a file should be", path=name)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", path=name) from None
    finally:
        os.close(fd)
    if size > limit:
        raise error(too_large(limit, what), path=name)
    return b"".join(chunks)


def read_stream(stream: BinaryIO, limit: int, what: str, name: str,
                error: type[CoursectlError] = CoursectlError) -> bytes:
    """What a stream (standard input) holds up to its end, read up to `limit`; more raises `error`."""
    chunks, size = [], 0
    while size <= limit and (chunk := stream.read(min(1 << 20, limit + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise error(too_large(limit, what), path=name)
    return b"".join(chunks)


def read_text(path: Path, limit: int, what: str, error: type[CoursectlError] = CoursectlError,
              shown: str | Path | None = None, *, required: bool = False, errors: str = "strict") -> str | None:
    """read_file, as UTF-8 text; bytes that are not UTF-8 raise `error` naming the file, the line and the byte,
    unless `errors` says otherwise ("replace": a file only looked into, whose own reader says what is wrong)."""
    data = read_file(path, limit, what, error, shown, required=required)
    if data is None or errors != "strict":
        return None if data is None else data.decode("utf-8", errors=errors)
    return decode_text(data, Path(path) if shown is None else shown, error)


def decode_text(data: bytes, name: str | Path, error: type[CoursectlError] = CoursectlError) -> str:
    """`data` as UTF-8 text; else `error`: `NAME:LINE: is not UTF-8 text: byte 0xe9 cannot be decoded`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"is not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded", path=name,
                    line=line) from None


def sha256_file(path: Path) -> str | None:
    """sha256 of a regular file, read in pieces (its size costs no memory); None for anything else or none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def is_file(path: Path) -> bool:
    """Path.is_file(), where a name that cannot be a path (too long for the system, a NUL in it) names no file."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    """Path.is_dir(), where a name that cannot be a path (too long for the system, a NUL in it) names no folder."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def too_large(limit: int, what: str) -> str:
    most = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit:,} bytes"
    return f"larger than {most}, the most {what} may hold"


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words: `a folder`, `a named pipe`."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def parse_json(data: bytes | str) -> Any:
    """json.loads, where a document nested too deeply for Python's parser is a ValueError like any other.

    json.loads raises RecursionError for arrays or objects nested about 1,000
    deep (`[[[...]]]`); no file coursectl writes nests 10 deep.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply for Python's JSON parser") from None


# A line of a source as compilers, editors and GitHub count lines: ended by \n, \r\n or \r, as Python's universal
# newlines end them. str.splitlines() also ends one at \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which would
# put a snippet's or a header's line number off by one for each of them above it.
_SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(text: str, *, keepends: bool = False) -> list[str]:
    """The lines of a source's text, numbered as its compiler and its page on GitHub number them."""
    rows = _SOURCE_LINE.findall(text)
    return rows if keepends else [row.rstrip("\r\n") for row in rows]
