"""nvcc builds, cached by source hash, flags, architecture and nvcc version."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel

from .errors import BuildError
from .files import atomic_write, sha256_bytes
from .manifest import Lesson, Manifest
from .process import run_command
from .resources import KernelResources, parse_resources

CACHE_FORMAT = 2  # 2: builds carry ptxas' resource report


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


def build_lesson(manifest: Manifest, lesson: Lesson, arch: str, nvcc: str, nvcc_version: str | None,
                 variant: str = "plain", runner=run_command) -> BuildResult:
    """Build one lesson for one architecture, or return the cached binary."""
    source_path = manifest.source_path(lesson)
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read source: {exc.strerror}", path=source_path)
    flags = manifest.flags(lesson) + variant_flags(variant)
    key = cache_key(source, flags, arch, nvcc_version, variant)
    entry = cache_root(manifest) / lesson.id / f"{arch}-{variant}" / key
    binary = entry / lesson.binary_name
    stamp = entry / "build.json"
    if stamp.is_file() and binary.is_file():
        info = json.loads(stamp.read_text())
        stderr = info.get("diagnostics", "")
        return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=True,
                           command=nvcc_command(nvcc, manifest, lesson, arch, binary, variant),
                           diagnostics=_without_ptxas(stderr),
                           resources=parse_resources(stderr))
    entry.mkdir(parents=True, exist_ok=True)
    partial = entry / f".{lesson.binary_name}.{os.getpid()}.partial"
    command = nvcc_command(nvcc, manifest, lesson, arch, partial, variant)
    try:
        result = runner(command, timeout=600, cwd=source_path.parent)
        diagnostics = result.stderr.decode("utf-8", errors="replace")
        if not result.ok or not partial.is_file():
            first = next((m for m in map(_DIAG.match, diagnostics.splitlines()) if m), None)
            line = int(first.group("line")) if first else None
            raise BuildError(f"nvcc failed for lesson {lesson.id!r} ({arch}):\n{result.describe()}",
                             path=manifest.source_path(lesson), line=line,
                             hint="fix the diagnostics above; the lesson was not run")
        os.replace(partial, binary)
    finally:
        if partial.exists():
            partial.unlink()
    display = nvcc_command(nvcc, manifest, lesson, arch, binary, variant)
    atomic_write(stamp, json.dumps({"command": display, "diagnostics": diagnostics,
                                    "seconds": result.seconds}, indent=1))
    return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=False,
                       seconds=result.seconds, command=display, diagnostics=_without_ptxas(diagnostics),
                       resources=parse_resources(diagnostics))


def _without_ptxas(stderr: str) -> str:
    """nvcc's own diagnostics: the ptxas resource report is evidence, not a warning."""
    kept = [line for line in stderr.splitlines(keepends=True)
            if not line.startswith("ptxas info") and not re.match(r"^\s+\d+ bytes stack frame", line)]
    return "".join(kept)
