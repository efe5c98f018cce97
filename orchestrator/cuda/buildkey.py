"""What a build's cache key is made of, and what changed between two keys, in words.

The key holds everything known before nvcc runs that changes what it makes:
the source, the flags, the architecture, the variant, the binary's name,
nvcc's version, the host programs nvcc runs (resolved path and sha256) and
the variables of the environment nvcc and the host compiler read. No lesson
id: lessons, and copies of a course, that build the same inputs share one
entry. cuda/build.py keeps the entries.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..files import is_dir, is_file, sha256_bytes, sha256_file
from ..process import Runner, run_command
from .toolchain import why_it_cannot_run


CACHE_FORMAT = 6  # 2: ptxas' resource report; 3: the binary's sha256; 4: content-addressed, with the files read;
#                   5: nvcc's variables of the environment; 6: the host compiler and the variables it reads
# A program's other units (`units`) and the files its flags name (`inputs`) are keys present only where a
# lesson has them, so that no other lesson's entry moves.


# The variables of the environment that change what a build makes: nvcc's (the flags it puts before and
# after every command's own, the host compiler it runs) and the host compiler's, which nvcc runs in the same
# environment (the places gcc looks for headers, libraries and its own programs). A binary built with
# NVCC_APPEND_FLAGS=-G, or with CPATH naming another folder of headers, is not the lesson's binary.
BUILD_ENVIRONMENT = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH",
                     "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")


# The programs nvcc runs on Linux besides its own: the host compilers it finds on PATH (where neither
# -ccbin nor NVCC_CCBIN names one) and the assembler and linker they run.
HOST_PROGRAMS = ("gcc", "g++")


HOST_TOOLS = ("as", "ld")


_CCBIN = ("-ccbin", "--compiler-bindir")


def build_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of BUILD_ENVIRONMENT that `environ` (default: this process's, which nvcc inherits) sets."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in BUILD_ENVIRONMENT if name in environ}


def host_programs(flags: Sequence[str], folder: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The host programs a build with `flags` runs, each as its resolved path and sha256 (None: not found).

    The host compiler is the one `-ccbin` (or `--compiler-bindir`) names in
    the flags, else NVCC_CCBIN, else gcc and g++ on PATH; a folder named
    there stands for the gcc and g++ in it, and a relative path is taken from
    `folder`, where nvcc runs. The assembler and linker are the ones on PATH.
    A compiler upgraded in place, or another one first on PATH, is another
    build. Each program is read once a process while its size and time stay the same.
    """
    environ = os.environ if environ is None else environ
    search = environ.get("PATH", os.defpath)
    chosen = _ccbin(flags) or environ.get("NVCC_CCBIN")
    if not chosen:
        compilers = list(HOST_PROGRAMS)
    elif "/" not in chosen:
        compilers = [chosen]        # a bare name, looked up on PATH as nvcc does
    else:
        named = Path(chosen) if os.path.isabs(chosen) or folder is None else Path(folder) / chosen
        compilers = [str(named / name) for name in HOST_PROGRAMS] if is_dir(named) else [str(named)]
    return {name: _program(shutil.which(name, path=search)) for name in [*compilers, *HOST_TOOLS]}


def describe_host_compiler(runner: Runner = run_command) -> str:
    """What doctor says of the host compiler nvcc runs (NVCC_CCBIN's, else g++ on PATH): where, and which."""
    programs = host_programs([])
    name, found = [(name, found) for name, found in programs.items() if name not in HOST_TOOLS][-1]
    if found is None:
        return f"{name}: NOT FOUND on PATH: nvcc builds host code with it"
    path = found.rsplit(" ", 1)[0]
    try:
        result = runner([path, "--version"], timeout=30)
    except OSError as exc:
        return f"{path}: CANNOT RUN: {why_it_cannot_run(path, exc)}"
    first = result.stdout.decode(errors="replace").strip().splitlines()[:1]
    return f"{path} ({first[0].strip()})" if result.ok and first else f"{path}: CANNOT RUN: {result.describe()}"


def _ccbin(flags: Sequence[str]) -> str | None:
    """The host compiler the flags name, the last one winning as in nvcc, or None."""
    chosen = None
    for index, flag in enumerate(flags):
        if flag in _CCBIN and index + 1 < len(flags):
            chosen = flags[index + 1]
        elif flag.startswith(tuple(f"{name}=" for name in _CCBIN)):
            chosen = flag.split("=", 1)[1]
    return chosen


_PROGRAMS: dict[tuple, str | None] = {}


def _program(path: str | None) -> str | None:
    """`path` resolved, with the sha256 of the program there, remembered by its size and modification time."""
    if path is None:
        return None
    real = os.path.realpath(path)
    try:
        status = os.stat(real)
    except OSError:
        return None
    seen = (real, status.st_size, status.st_mtime_ns, status.st_ino)
    if seen not in _PROGRAMS:
        digest = sha256_file(Path(real))
        _PROGRAMS[seen] = None if digest is None else f"{real} {digest}"
    return _PROGRAMS[seen]


def key_material(source: bytes, flags: list[str], arch: str, nvcc_version: str | None, variant: str,
                 binary_name: str, environment: Mapping[str, str] | None = None,
                 host: Mapping[str, str | None] | None = None) -> dict:
    """Everything a build's first-level key is made of: what is known before nvcc runs, and no lesson id.

    `environment`: the variables the build reads (default: build_environment() of this process);
    `host`: the host programs it runs (default: host_programs(flags) from this process's folder).
    """
    environment = build_environment() if environment is None else dict(environment)
    host = host_programs(flags) if host is None else dict(host)
    return {"format": CACHE_FORMAT, "source": sha256_bytes(source), "flags": list(flags), "arch": arch,
            "nvcc": nvcc_version, "variant": variant, "binary": binary_name, "environment": environment,
            "host": host}


def flag_files(flags: Sequence[str], folder: Path, root: Path) -> dict[str, str]:
    """The files of the course that nvcc's flags name, from `folder` (where nvcc runs): path -> sha256.

    A flag names a file when it, what follows its `=`, a part of a comma list
    (`-Xlinker=-T,link.ld`) or such a part without its option (`-Tlink.ld`) is
    the path of a regular file inside the course: `--options-file opts.txt`,
    `-include prelude.cuh`, a linker script, a .cpp given as a flag. What it
    holds changes the build as much as the source does; the system's files
    are left to the host programs' and nvcc's versions.
    """
    named: dict[str, str] = {}
    base, inside = Path(folder), Path(root).resolve()
    for flag in flags:
        parts = [flag, flag.partition("=")[2]]
        parts += [part for piece in list(parts) for part in piece.split(",")]
        parts += [part[2:] for part in list(parts) if part.startswith("-") and len(part) > 2]
        for candidate in parts:
            if not candidate or candidate.startswith("-") or candidate in named:
                continue
            path = base / candidate
            if is_file(path) and path.resolve().is_relative_to(inside):
                digest = sha256_file(path)
                if digest is not None:
                    named[candidate] = digest
    return named


def cache_key(*args, **kwargs) -> str:
    """The first level of a cache entry: the sha256 of key_material(*args, **kwargs)."""
    return key_of(key_material(*args, **kwargs))


def key_of(material: dict) -> str:
    return sha256_bytes(json.dumps(material, sort_keys=True).encode())[:20]


def what_changed(before: dict, now: dict, source_name: str) -> list[str]:
    """The inputs of a build that differ between two key materials, in words."""
    said: list[str] = []
    if before.get("source") != now["source"]:
        said.append(f"{source_name} changed")
    for key in ("units", "inputs"):   # the other files of a program, and the files its flags name
        old_files, new_files = before.get(key) or {}, now.get(key) or {}
        for name in sorted(set(old_files) | set(new_files)):
            if old_files.get(name) != new_files.get(name):
                said.append(f"{_in_course(name, source_name)} "
                            f"{'changed' if name in old_files and name in new_files else 'was added' if name in new_files else 'was left out'}")
    if before.get("flags") != now["flags"]:
        said.append(f"the flags changed ({' '.join(before.get('flags') or []) or 'none'} -> "
                    f"{' '.join(now['flags']) or 'none'})")
    if before.get("nvcc") != now["nvcc"]:
        said.append(f"nvcc changed ({before.get('nvcc')} -> {now['nvcc']})")
    old_env, new_env = before.get("environment") or {}, now["environment"]
    for name in sorted(set(old_env) | set(new_env)):
        if old_env.get(name) != new_env.get(name):
            said.append(f"{name} was unset" if name not in new_env else
                        f"{name} was set to {new_env[name]!r}" if name not in old_env else
                        f"{name} changed ({old_env[name]!r} -> {new_env[name]!r})")
    old_host, new_host = before.get("host") or {}, now["host"]
    for name in sorted(set(old_host) | set(new_host)):
        old, new = old_host.get(name), new_host.get(name)
        if old != new:
            old_path, new_path = (value.rsplit(" ", 1)[0] if value else "none" for value in (old, new))
            said.append(f"the host program {name} changed in place ({new_path})" if old_path == new_path else
                        f"the host program {name} changed ({old_path} -> {new_path})")
    if not said and before != now:
        said.append("the build cache's format changed")
    return said


def _in_course(name: str, source_name: str) -> str:
    """A file named from nvcc's folder, as the course names it: from the folder of `source_name`."""
    return os.path.normpath(os.path.join(os.path.dirname(source_name), name)).replace(os.sep, "/")


def headers_key(headers: dict[str, str], absent: Sequence[str] = ()) -> str:
    """The second level: the local files a build read besides its source (relative to its folder) and their sha256,
    and the places it looked for them and found none.

    Both, because the same files read with a file now at a place that was
    empty (a header in `#if 0`) is another entry: the stamp of the first
    would otherwise send every lookup to nvcc again.
    """
    return sha256_bytes(json.dumps([headers, list(absent)], sort_keys=True).encode())[:20]
