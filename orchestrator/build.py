"""nvcc builds, cached by source hash, flags, architecture and nvcc version."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel

from .errors import BuildError, UsageError
from .files import atomic_write, sha256_bytes
from .manifest import ARCH, Lesson, Manifest
from .process import run_command
from .resources import KernelResources, parse_resources

CACHE_FORMAT = 3  # 2: builds carry ptxas' resource report; 3: the stamp holds the binary's sha256
STAMP = "build.json"


class BuildResult(BaseModel):
    lesson: str
    arch: str
    variant: str = "plain"   # "plain" or "lineinfo" (sanitizer builds)
    binary: Path
    cached: bool
    seconds: float = 0.0
    command: list[str]
    diagnostics: str = ""    # nvcc's stderr, file:line warnings included, ptxas' report left out
    resources: dict[str, KernelResources] = {}   # per kernel, from ptxas
    notes: list[str] = []    # e.g. why the cache entry could not be used


def cache_root(manifest: Manifest) -> Path:
    env = os.environ.get("COURSECTL_CACHE")
    return Path(env) if env else manifest.root / ".coursectl" / "cache"


def variant_flags(variant: str) -> list[str]:
    return ["-lineinfo"] if variant == "lineinfo" else []


def nvcc_command(nvcc: str, manifest: Manifest, lesson: Lesson, arch: str, output: Path | str,
                 variant: str = "plain") -> list[str]:
    """The exact argument list coursectl runs.

    It is the reader's command plus --resource-usage, which makes ptxas report
    each kernel's registers, spills and shared memory (the build evidence)
    without changing the code it generates.
    """
    return [nvcc, *manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}",
            "--resource-usage", "-o", str(output), str(manifest.source_path(lesson))]


def display_command(manifest: Manifest, lesson: Lesson, arch: str, variant: str = "plain") -> list[str]:
    """The build command as a reader types it, in the lesson's folder."""
    return ["nvcc", *manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}",
            "-o", lesson.binary_name, lesson.source.name]


def cache_key(source: bytes, flags: list[str], arch: str, nvcc_version: str | None, variant: str) -> str:
    material = json.dumps({"format": CACHE_FORMAT, "source": sha256_bytes(source), "flags": flags,
                           "arch": arch, "nvcc": nvcc_version, "variant": variant}, sort_keys=True)
    return sha256_bytes(material.encode())[:20]


_DIAG = re.compile(r"^(?P<file>.+?\.(?:cu|cuh|h|hpp|cpp))[(:](?P<line>\d+)")


def check_arch(arch: str, what: str = "--arch") -> str:
    """`arch` if it is an architecture as lessons.yaml writes one (sm_90, sm_90a, sm_100f), whole."""
    if not ARCH.fullmatch(arch):
        raise UsageError(f"{what} {arch!r} is not a GPU architecture; write one like sm_90")
    return arch


def build_lesson(manifest: Manifest, lesson: Lesson, arch: str, nvcc: str, nvcc_version: str | None,
                 variant: str = "plain", runner=run_command) -> BuildResult:
    """Build one lesson for one architecture, or return the cached binary.

    Each build works in a folder of its own beside its cache entry: nvcc writes
    the binary there, and its temporary files too (TMPDIR), so that parallel
    builds of one entry never share a path and an interrupted nvcc leaves
    nothing in /tmp. Only a build that succeeded becomes the entry, binary and
    stamp in one rename; the folder is removed on every way out.
    """
    check_arch(arch, "architecture")
    source_path = manifest.source_path(lesson)
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read source: {exc.strerror}", path=source_path)
    flags = manifest.flags(lesson) + variant_flags(variant)
    key = cache_key(source, flags, arch, nvcc_version, variant)
    entry = cache_root(manifest) / lesson.id / f"{arch}-{variant}" / key
    binary = entry / lesson.binary_name
    info, miss = _cached(entry, lesson.binary_name)
    if info is not None:
        stderr = info["diagnostics"]
        return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=True,
                           command=nvcc_command(nvcc, manifest, lesson, arch, binary, variant),
                           diagnostics=_without_ptxas(stderr), resources=parse_resources(stderr))
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".build", dir=entry.parent))
    try:
        temporary = work / "tmp"
        temporary.mkdir()
        output = work / lesson.binary_name
        command = nvcc_command(nvcc, manifest, lesson, arch, output, variant)
        result = runner(command, timeout=600, cwd=source_path.parent, env={"TMPDIR": str(temporary)})
        diagnostics = result.stderr.decode("utf-8", errors="replace")
        if not result.ok or not output.is_file():
            first = next((m for m in map(_DIAG.match, diagnostics.splitlines()) if m), None)
            line = int(first.group("line")) if first else None
            raise BuildError(f"nvcc failed for lesson {lesson.id!r} ({arch}):\n{result.describe()}",
                             path=manifest.source_path(lesson), line=line,
                             hint="fix the diagnostics above; the lesson was not run")
        shutil.rmtree(temporary)
        display = nvcc_command(nvcc, manifest, lesson, arch, binary, variant)
        atomic_write(work / STAMP, json.dumps({"command": display, "diagnostics": diagnostics,
                                               "seconds": result.seconds,
                                               "binary_sha256": sha256_bytes(output.read_bytes())}, indent=1))
        _publish(work, entry, lesson.binary_name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=False,
                       seconds=result.seconds, command=display, diagnostics=_without_ptxas(diagnostics),
                       resources=parse_resources(diagnostics), notes=[miss] if miss else [])


def _cached(entry: Path, binary_name: str) -> tuple[dict | None, str | None]:
    """(the stamp of a cache entry that can be trusted, None) or (None, why it cannot be, if it is there).

    A stamp that is not what build_lesson writes, or a binary whose sha256 is
    not the one in its stamp, is a cache miss, never an error: the entry is
    rebuilt and the build says so.
    """
    stamp, binary = entry / STAMP, entry / binary_name
    if not stamp.is_file() or not binary.is_file():
        return None, None
    try:
        info = json.loads(stamp.read_bytes().decode("utf-8"))
        if not (isinstance(info, dict) and isinstance(info.get("diagnostics"), str)
                and isinstance(info.get("binary_sha256"), str)):
            raise ValueError("not the stamp a build writes")
    except (OSError, ValueError) as exc:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"cache entry {entry} had an unreadable stamp ({_first_line(exc)}); rebuilt"
    try:
        digest = sha256_bytes(binary.read_bytes())
    except OSError as exc:
        return None, f"cache entry {entry} had an unreadable binary ({exc.strerror}); rebuilt"
    if digest != info["binary_sha256"]:
        return None, f"cache entry {entry} held a binary that no longer matches its stamp; rebuilt"
    return info, None


def _publish(work: Path, entry: Path, binary_name: str) -> None:
    """Make a finished build folder the cache entry, binary and stamp at once."""
    try:
        os.rename(work, entry)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if _cached(entry, binary_name)[0] is not None:
        return   # a build of the same entry, running beside this one, got there first: as good as this one
    shutil.rmtree(entry, ignore_errors=True)   # an entry that cannot be trusted
    os.rename(work, entry)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _without_ptxas(stderr: str) -> str:
    """nvcc's own diagnostics: the ptxas resource report is evidence, not a warning."""
    kept = [line for line in stderr.splitlines(keepends=True)
            if not line.startswith("ptxas info") and not re.match(r"^\s+\d+ bytes stack frame", line)]
    return "".join(kept)
