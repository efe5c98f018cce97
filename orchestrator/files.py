"""Reading and writing the course's files.

Writes are atomic: a temp file beside the target, then os.replace. Reads are
bounded: every file coursectl reads goes through read_file, which opens it
without blocking, reads only a regular file, and only up to a limit, so that a
FIFO, /dev/zero or a file of gigabytes is one error naming it, never a hang or
a process eating the machine's memory.

The course's boundary is kept here too: `link_out` is the one test of whether a
path named inside the course root leaves it through a link, which read_file
applies to every input it is given a root for; `report_refusal` and
`write_report` are the one judge and the one writer of a report path that a
command line gives (`--json`, `--junit`, `--report`).
"""

from __future__ import annotations

import errno
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


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never half.

    `durable`: on the disk before it replaces the old file (fsync). A cache's entry, which its reader checks
    and takes for a miss when it is not whole, is written without (durable=False): what a crash loses of it
    is one slower run."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:   # the folder first (made only where it is missing: most writes find it there)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            mode = os.stat(path).st_mode & 0o777   # the file replaced keeps its mode
        except FileNotFoundError:
            mode = 0o644
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, mode)
            handle.write(payload)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not exc.filename:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def overwrite_entry(path: Path, data: bytes | str) -> None:
    """Write a cache entry whose reader checks that it is whole (a checksum) and takes one that is not for a
    miss: in place, over the old one where there is one (a regular file of one name, not a link, no other
    link to it) and made where it goes where there is none, else as atomic_write writes it (durable=False).

    A reader may meet it half-written, or one crash (or two writers at once) may leave it so: a miss, one
    slower run. What in place spares is the replacing: a file renamed over one whose blocks are on the disk
    frees them, which on this machine's ext4 (discard) cost 0.1-0.3 ms of system CPU a write, a sanitizer
    pass run again most of its storing. One open finds the old entry or makes the new one, and an entry
    written over with as many bytes (a pass run again, as it ran before) is not truncated too.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = _open_or_create(path)
    except OSError:   # a link, a FIFO without a reader, a folder, ...
        atomic_write(path, payload, durable=False)
        return
    try:
        seen = os.fstat(fd)
        if stat.S_ISREG(seen.st_mode) and seen.st_nlink == 1:
            _write_all(fd, payload)
            if seen.st_size > len(payload):
                os.ftruncate(fd, len(payload))
            return
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)
    atomic_write(path, payload, durable=False)


def _open_or_create(path: Path) -> int:
    """The file at `path` open to write, made (and its folder) where there is none; never through a link."""
    return open_making_folder(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)


def open_making_folder(path: str | Path, flags: int, mode: int) -> int:
    """os.open(path, flags, mode), with O_CREAT among the flags: its folder made first where it is missing."""
    try:
        return os.open(path, flags, mode)
    except FileNotFoundError:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, mode)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


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
    lexical_root = Path(os.path.normpath(Path(root).absolute()))
    if named.is_relative_to(lexical_root):   # the common case: where the root leads need not be looked up
        return named.relative_to(lexical_root).as_posix()
    resolved_root = Path(root).resolve()
    if named.is_relative_to(resolved_root):
        return named.relative_to(resolved_root).as_posix()
    try:
        return path.resolve().relative_to(resolved_root).as_posix()
    except ValueError:
        return path.as_posix()


# -- the course's boundary ---------------------------------------------------------------------
def _real(path: Path | str) -> str | None:
    """Where `path` leads, links followed, as a string; None where it cannot be told (a loop of links, a name
    too long, a NUL in it)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:   # Python 3.13's realpath returns a loop's path as it is, not an error
            return None
    except ValueError:
        return None
    try:
        return os.path.realpath(path)
    except (OSError, RuntimeError, ValueError):
        return None


def _resolved(path: Path) -> Path | None:
    """Where `path` leads, links followed; None where it cannot be told (a loop of links, a name too long)."""
    real = _real(path)
    return None if real is None else Path(real)


class _Resolving:
    """_real of many paths, each folder on the way looked up once: where a path's last name is no link, it
    leads where its folder leads, that name added (as realpath walks it). A course's owned files are hundreds
    of paths in a few folders, and realpath looks up every folder of every path again (a report path checked
    against 808 of them: 65-114 ms). A path with a '..' in it, or one whose last name is a link or cannot be
    looked up, is _real's to resolve."""

    def __init__(self):
        self.known: dict[str, str | None] = {}

    def __call__(self, path: Path | str) -> str | None:
        text = os.fspath(path)
        if os.pardir in text.split(os.sep):
            return _real(text)
        text = os.path.abspath(text)   # lexical, and the same as realpath's walk where there is no '..'
        if text in self.known:
            return self.known[text]
        folder, name = os.path.split(text)
        real = None
        if name:
            try:
                link = stat.S_ISLNK(os.lstat(text).st_mode)
            except FileNotFoundError:   # realpath keeps a missing name as it is
                link = False
            except (OSError, ValueError):
                link = True
            if not link:
                above = self(folder)
                real = None if above is None else os.path.join(above, name)
        self.known[text] = real = _real(text) if real is None else real
        return real


def _within(real: str, real_root: str) -> bool:
    """Whether the resolved path `real` is `real_root` or lies in it (both as realpath gives them)."""
    return real == real_root or real.startswith(real_root if real_root.endswith(os.sep) else real_root + os.sep)


def may_lead_inside(path: Path, root: Path) -> bool:
    """Whether `path` leads inside the course `root`, links followed; True where either cannot be told."""
    real_root, real = _real(root), _real(path)
    return real_root is None or real is None or _within(real, real_root)


def link_out(path: Path, root: Path) -> tuple[Path, Path] | None:
    """The link by which `path`, named inside the course `root`, leads out of it, and where: (link, target).

    None where it stays inside (links within the course are the course's own)
    or is not named inside the root at all (a system header, `../other.txt`:
    the caller's own checks judge those). The link named is the first on
    the way from the root down that leads out: `templates/` itself, where the
    whole folder is a link, not each template in it. A link that cannot be
    followed (a loop) counts as leading out, to itself.
    """
    root_text = _real(root)
    if root_text is None:
        return None
    real_text = _real(path)
    if real_text is not None and _within(real_text, root_text):   # the common case, told from two strings
        return None
    real_root, real = Path(root_text), (None if real_text is None else Path(real_text))
    named = Path(os.path.normpath(Path(path).absolute()))
    for base in (Path(os.path.normpath(Path(root).absolute())), real_root):
        if named.is_relative_to(base):
            step = base
            for part in named.relative_to(base).parts:
                step = step / part
                if os.path.islink(step):
                    target = _resolved(step)
                    if target is None or not target.is_relative_to(real_root):
                        return step, target if target is not None else step
            return named, real if real is not None else named
    return None


def check_inside(path: Path, root: Path, error: type[CoursectlError] = CoursectlError) -> None:
    """Raise `error` naming the link and its target where `path` leaves the course `root` through a link."""
    out = link_out(path, root)
    if out is not None:
        link, target = out
        raise error(f"a link to {target}, outside the course; coursectl reads nothing of the course through "
                    f"a link that leads out of it", path=relative(link, root),
                    hint=f"put what {relative(link, root)} leads to in its place, inside the course")


# -- report paths ------------------------------------------------------------------------------
def _writable_kind(mode: int) -> bool:
    """Whether a report is written through into a file of this kind (a named pipe, a device) as it is."""
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def report_refusal(path: Path, owned: list[tuple[Path, str]], root: Path | None) -> str | None:
    """Why a report may not be written to `path`; None where it may.

    `owned` is every file and folder of the course that coursectl reads or
    writes (lessons.yaml, lessons/, evidence/, templates/, the pages, the
    cache), each with its name in words; a report that is one of them, or
    lies in one, by its name or by where a link leads, is refused, as is a
    folder, a socket, and a link that leads to anything but a regular file
    outside the course (`root`), a named pipe or a device. Anything else is
    written: a regular file atomically, a named pipe or a device through
    (write_report).
    """
    path = Path(path)
    named = os.path.abspath(path)
    real = _real(path)
    resolved = _Resolving()
    for file, what in owned:
        file_real = resolved(file)
        hit = _within(named, os.path.abspath(file)) or (
            real is not None and file_real is not None and _within(real, file_real))
        if hit:
            return f"is {what}, which coursectl reads or writes; a report there would replace it"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"cannot be written: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISLNK(mode):
        try:
            target_mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return f"is a link to {os.readlink(path)}, which is no file; a report goes to a file"
        if _writable_kind(target_mode):
            return None
        if not stat.S_ISREG(target_mode):
            return f"is a link to {real}, {kind_of(target_mode)}; a report goes to a file"
        if root is not None and real is not None and (real_root := _real(root)) is not None \
                and _within(real, real_root):
            return f"is a link to {real}, a file of the course; a report goes to a file of its own"
        return None
    if stat.S_ISREG(mode) or _writable_kind(mode):
        return None
    return f"is {kind_of(mode)}; a report goes to a file"


def write_report(path: Path, data: bytes | str) -> None:
    """Write a report to `path`: a regular file (or the one a link leads to) atomically; a named pipe or a
    device through, as it is, never replaced (a named pipe that nothing reads is an error, not a hang)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is None or stat.S_ISREG(mode):
        atomic_write(Path(os.path.realpath(path)) if os.path.islink(path) else path, payload)
        return
    if not _writable_kind(mode):
        raise CoursectlError(f"is {kind_of(mode)}; a report goes to a file", path=path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise CoursectlError("a named pipe that nothing reads; start its reader first", path=path) from None
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)


# -- bounded reads -----------------------------------------------------------------------------
def read_file(path: Path, limit: int, what: str, error: type[CoursectlError] = CoursectlError,
              shown: str | Path | None = None, *, required: bool = False, root: Path | None = None) -> bytes | None:
    """The bytes of one file, read up to `limit`; None if there is none (FileNotFoundError if `required`).

    Only a regular file is read (opened without blocking, so a FIFO is no
    hang), and only up to `limit` bytes: a folder, a device, a FIFO, a socket
    or a bigger file raises `error` naming it (as `shown`, where given), as
    does a file that cannot be read. `what` names the kind of file in the
    message for one that is too big: `larger than 16 MiB, the most a
    transcript may hold`.
    """
    name = Path(path) if shown is None else shown
    if root is not None:
        check_inside(Path(path), root, error)
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
              shown: str | Path | None = None, *, required: bool = False, errors: str = "strict",
              root: Path | None = None) -> str | None:
    """read_file, as UTF-8 text; bytes that are not UTF-8 raise `error` naming the file, the line and the byte,
    unless `errors` says otherwise ("replace": a file only looked into, whose own reader says what is wrong)."""
    data = read_file(path, limit, what, error, shown, required=required, root=root)
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
        return stat.S_ISREG(os.stat(path).st_mode)
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
_OTHER_BREAKS = re.compile("[\f\v\x1c-\x1e\x85\u2028\u2029]")


def source_lines(text: str, *, keepends: bool = False) -> list[str]:
    """The lines of a source's text, numbered as its compiler and its page on GitHub number them."""
    if not _OTHER_BREAKS.search(text):   # then str.splitlines() ends lines where they end, and is quicker
        return text.splitlines(keepends=keepends)
    rows = _SOURCE_LINE.findall(text)
    return rows if keepends else [row.rstrip("\r\n") for row in rows]
