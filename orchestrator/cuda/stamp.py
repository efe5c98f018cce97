"""A build cache entry's stamp (build.json): what build_lesson writes beside the binary, and whether an entry
can be trusted.

The stamp holds the command, nvcc's diagnostics, the binary's sha256 and
its stat (`binary_stat`), the local files the build read (`headers`,
`absent`) and ptxas' report of each kernel (`resources`), so that a cache
hit runs no program and reads the binary only when it is no longer the file
that was hashed. A stamp written before either was kept gets them at its
first hit. cuda/build.py makes and looks up the entries.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from pydantic import ValidationError

from ..errors import CoursectlError
from ..files import atomic_write, parse_json, read_file, sha256_file
from .resources import KernelResources, parse_resources

STAMP = "build.json"
# The most a stamp may hold: nvcc's diagnostics, captured up to 16 MiB, and the command and digests.
STAMP_LIMIT = 64 * 2**20


def dumped(resources: dict[str, KernelResources]) -> dict[str, dict]:
    return {name: kernel.model_dump() for name, kernel in resources.items()}


def stamped_resources(entry: Path, info: dict) -> dict[str, KernelResources]:
    """ptxas' report of a cached build: as its stamp keeps it, read from its diagnostics (c++filt naming the
    kernels) only where the stamp does not hold it in that form; such a stamp is then given it, so that a
    cache hit runs no program."""
    kept = info.get("resources")
    if isinstance(kept, dict):
        try:
            return {name: KernelResources.model_validate(kernel) for name, kernel in kept.items()}
        except ValidationError:
            pass
    resources = parse_resources(info["diagnostics"])
    _rewrite(entry, {**info, "resources": dumped(resources)})
    return resources


def trusted_stamp(entry: Path, binary_name: str) -> tuple[dict | None, str | None]:
    """(the stamp of a cache entry that can be trusted, None) or (None, why it cannot be, if it is there).

    A stamp that is not what build_lesson writes, or a binary whose sha256 is
    not the one in its stamp, is a cache miss, never an error: the entry is
    rebuilt and the build says so.
    """
    stamp, binary = entry / STAMP, entry / binary_name
    if not stamp.is_file() or not binary.is_file():
        return None, None
    try:
        info = parse_json((read_file(stamp, STAMP_LIMIT, "a cache stamp") or b"").decode("utf-8"))
        if not (isinstance(info, dict) and isinstance(info.get("diagnostics"), str)
                and isinstance(info.get("binary_sha256"), str) and isinstance(info.get("headers"), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in info["headers"].items())
                and isinstance(info.get("absent", []), list)
                and all(isinstance(name, str) for name in info.get("absent", []))):
            raise ValueError("not the stamp a build writes")
    except (CoursectlError, ValueError) as exc:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"cache entry {entry} had an unreadable stamp ({_first_line(exc)}); rebuilt"
    seen = binary_stat(binary)
    if seen is not None and info.get("binary_stat") == seen:
        return info, None   # the very file whose sha256 the stamp holds, untouched since
    digest = sha256_file(binary)
    if digest is None:
        return None, f"cache entry {entry} had an unreadable binary; rebuilt"
    if digest != info["binary_sha256"]:
        return None, f"cache entry {entry} held a binary that no longer matches its stamp; rebuilt"
    if seen is not None:
        info = {**info, "binary_stat": seen}
        _rewrite(entry, info)
    return info, None


def binary_stat(binary: Path) -> list[int] | None:
    """What tells one file from another and a file from itself rewritten: its device, inode, size and
    modification and change times (the change time no program can set back). A stamp keeps the binary's
    beside its sha256, so that a hit reads the binary again only once it is another file or was written to."""
    try:
        status = os.stat(binary)
    except OSError:
        return None
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def new_stamp(command: list[str], diagnostics: str, seconds: float, binary: Path, headers: dict[str, str],
              absent: list[str], resources: dict[str, KernelResources]) -> str:
    """The stamp of a build just made, its binary at `binary` (moving its folder leaves its stat as it is)."""
    return json.dumps({"command": command, "diagnostics": diagnostics, "seconds": seconds,
                       "binary_sha256": sha256_file(binary), "headers": headers, "absent": absent,
                       "resources": dumped(resources), "binary_stat": binary_stat(binary)}, indent=1)


def _rewrite(entry: Path, info: dict) -> None:
    """The stamp of a trusted entry written again with what a lookup learnt (a failure costs only the next
    lookup the same work)."""
    try:
        atomic_write(entry / STAMP, json.dumps(info, indent=1))
    except (OSError, CoursectlError):
        pass


def publish(work: Path, entry: Path, binary_name: str) -> None:
    """Make a finished build folder the cache entry, binary and stamp at once."""
    try:
        os.rename(work, entry)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if trusted_stamp(entry, binary_name)[0] is not None:
        return   # a build of the same entry, running beside this one, got there first: as good as this one
    shutil.rmtree(entry, ignore_errors=True)   # an entry that cannot be trusted
    os.rename(work, entry)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
