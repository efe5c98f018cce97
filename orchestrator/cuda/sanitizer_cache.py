"""Compute-sanitizer results kept between runs, keyed by everything that can change them.

A pass is a pure function of its inputs as far as coursectl can see them: the
-lineinfo binary, the tool and its arguments, the program's arguments, the
tool's version, the driver, the GPU model, the CUDA_* environment, the
dynamic loader's variables (LD_PRELOAD, LD_LIBRARY_PATH) and the content of
every file an argument names (a lesson's data, a suppressions file). When
none of those changed, `verify` reuses what the tool wrote last time (the log
and XML bytes, the exit status, the program's stdout, the seconds it took)
instead of running it again, as Bazel reuses a test result.

Each entry also keeps what the pass used of the machine (`Footprint`: its
CPU seconds against its wall seconds, its peak host memory and, where NVML
could tell, its GPU memory), from which the scheduler chooses how many
passes run at once (workflows/concurrency.py).

What the lesson expects of the pass is not in the key: judging is done again
from the stored log and XML every time, so a changed expectation is judged
at once without running anything.

Each entry is one JSON file, written atomically, that carries the checksum
of its own content; an entry that does not parse, does not validate, does
not match its checksum or was stored under another key is a miss, never an
error. A pass that timed out, died of a signal or did not end the way the
tool ends (exit 0, or the error exit code after a finding) is not stored.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from ..errors import CoursectlError
from ..files import is_file, overwrite_entry, parse_json, read_file, sha256_bytes, sha256_file
from ..process import CommandResult, environ_bytes
from .sanitizer import DEFAULT_ERROR_EXITCODE, sanitizer_command
from .stamp import binary_stat
from ..manifest.passes import Tool

CACHE_FORMAT = 3  # 2: the dynamic loader's variables; 3: the files the arguments name
FOLDER = "sanitizer_passes"   # under the build cache's root; not a valid lesson id, so never one's folder
# The most an entry may hold: in base64, a run's stdout and stderr (16 MiB each at most) and a log and XML
# (64 MiB each at most, as evidence files).
ENTRY_LIMIT = 256 * 2**20

# The environment variables in the key: every CUDA_* variable the pass sees
# (CUDA_LAUNCH_BLOCKING, CUDA_MODULE_LOADING, CUDA_CACHE_DISABLE,
# CUDA_DEVICE_MAX_CONNECTIONS, ... change how the program runs), except these:
# coursectl sets the first two to pick the GPU, whose model is in the key, and
# the last two only say where the toolkit is, whose tool version is in the key.
# Then the dynamic loader's: which libraries the program and the tool load (another
# libcuda, a library put in front of them) changes what they do.
ENV_PREFIXES = ("CUDA_",)
ENV_LEFT_OUT = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH"})
ENV_NAMES = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})


class PassKey(BaseModel):
    """Everything a sanitizer pass's outcome depends on, as far as coursectl can tell."""

    format: int = CACHE_FORMAT
    binary_sha256: str            # the -lineinfo binary
    tool: str
    tool_args: list[str]          # the pass's `args`
    program_args: list[str]       # the lesson's `args`, then the pass's `program_args`
    command: list[str]            # the whole command, files and program as placeholders
    sanitizer_version: str | None
    driver_version: str | None
    gpu: str                      # the GPU model's name
    environment: dict[str, str]   # see ENV_PREFIXES
    # each argument that names a file (where the pass runs), and its sha256
    files: dict[str, str | None] = Field(default_factory=dict)

    def digest(self) -> str:
        return sha256_bytes(self.model_dump_json().encode())[:24]


class Footprint(BaseModel):
    """What one pass used of the machine as it ran."""

    wall_s: float
    cpu_s: float                  # the tool's and the program's CPU seconds (wait4)
    user_s: float | None = None   # the part of cpu_s in user space (None: stored before it was kept)
    max_rss_mib: float            # the largest peak resident memory among its processes
    gpu_mib: float | None = None  # its processes' GPU memory at most, where NVML could tell

    @property
    def cores(self) -> float:
        """The CPU cores it needs, on average: its user-space CPU seconds over its wall seconds.

        The kernel's part is left out: on the H200 a racecheck pass spent 90.85 of its 103.3 CPU seconds
        there (the driver's waits on the GPU), and that part gives way when passes share the cores: the
        passes' summed CPU stayed at about 200 s from 1 pass at once to 16 (HISTORY.md's sweep).
        """
        used = self.cpu_s if self.user_s is None else self.user_s
        return used / self.wall_s if self.wall_s > 0 else 0.0

    @classmethod
    def of(cls, run: CommandResult, gpu_mib: float | None = None) -> Footprint | None:
        """A run's footprint; None where its use was not measured (see CommandResult.cpu_seconds)."""
        if run.cpu_seconds is None or run.max_rss_mib is None or run.seconds <= 0:
            return None
        return cls(wall_s=round(run.seconds, 3), cpu_s=run.cpu_seconds, user_s=run.user_seconds,
                   max_rss_mib=run.max_rss_mib, gpu_mib=gpu_mib)


class StoredPass(BaseModel):
    """What one pass produced, as stored: enough to judge it again as if it had just run."""

    key: PassKey
    command: list[str]
    exit_status: int | None
    seconds: float
    stdout: str        # base64, as are log and xml
    stderr: str
    log: str
    xml: str | None
    checksum: str      # sha256 of the entry without this field
    footprint: Footprint | None = None   # entries stored before it was measured have none

    def command_result(self) -> CommandResult:
        stdout, stderr = self._streams
        return CommandResult(argv=self.command, returncode=self.exit_status, seconds=self.seconds,
                             stdout=stdout, stderr=stderr)

    # Each base64 field is decoded once: load_pass decodes them all to check the entry.
    @cached_property
    def _streams(self) -> tuple[bytes, bytes]:
        return base64.b64decode(self.stdout), base64.b64decode(self.stderr)

    @cached_property
    def log_bytes(self) -> bytes:
        return base64.b64decode(self.log)

    @cached_property
    def xml_bytes(self) -> bytes | None:
        return None if self.xml is None else base64.b64decode(self.xml)


def key_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that belong in the key, from `environ` (default: this process's)."""
    environ = _own_environment() if environ is None else environ
    return {name: value for name, value in sorted(environ.items())
            if name.startswith(ENV_PREFIXES) and name not in ENV_LEFT_OUT or name in ENV_NAMES}


def _own_environment() -> Mapping[str, str]:
    """This process's variables that may belong in a key; on POSIX picked from os.environ's own bytes, the rest
    never decoded (every variable read through os.environ, name and value, for each of 933 passes cost more
    than the rest of their keys)."""
    data = environ_bytes()
    if data is None:
        return os.environ
    prefixes, names = tuple(os.fsencode(p) for p in ENV_PREFIXES), {os.fsencode(n) for n in ENV_NAMES}
    return {os.fsdecode(name): os.fsdecode(value) for name, value in data.items()
            if name.startswith(prefixes) or name in names}


def argument_files(arguments: Sequence[str], folder: Path | None) -> dict[str, str | None]:
    """The files the arguments name, read from `folder` (where the program runs), each with its sha256.

    A program given a file reads it (the replaying stand-in its transcript, a
    lesson its data, compute-sanitizer `--suppressions FILE`): what it holds
    is an input of the pass as much as the binary is. An argument names a
    file when it, or what follows its `=` (`--input=data.bin`), is the path of
    a regular file; one that names none is in the key as written, as before.
    """
    named: dict[str, str | None] = {}
    base = os.fspath(folder) if folder is not None else os.getcwd()
    for argument in arguments:
        for candidate in (argument, argument.partition("=")[2]):
            if candidate and candidate not in named and is_file(path := os.path.join(base, candidate)):
                named[candidate] = _file_sha256(path)
    return named


def _file_sha256(path: str) -> str | None:
    """sha256 of an argument's file (a lesson's passes all read its transcript or data), None if it cannot be
    read; hashed once while it stays as it was (_sha256_once)."""
    return _sha256_once(path, lambda: sha256_file(path))


def pass_key(binary: Path, tool: str, tool_args: Sequence[str], program_args: Sequence[str],
             sanitizer_version: str | None, driver_version: str | None, gpu_name: str,
             env: Mapping[str, str] | None = None, folder: Path | None = None) -> PassKey:
    """The key of one pass; `env` is what the pass runs with on top of this process's environment,
    `folder` where it runs (a relative path among the arguments is read from there)."""
    command = sanitizer_command("compute-sanitizer", Tool(tool), ["PROGRAM", *program_args],
                                Path("LOG"), Path("XML"), DEFAULT_ERROR_EXITCODE, extra=tool_args)
    return PassKey(binary_sha256=_binary_sha256(Path(binary)), tool=tool, tool_args=list(tool_args),
                   program_args=list(program_args), command=command, sanitizer_version=sanitizer_version,
                   driver_version=driver_version, gpu=gpu_name,
                   environment=key_environment({**_own_environment(), **(env or {})}),
                   files=argument_files([*tool_args, *program_args], folder))


_DIGESTS: dict[tuple, str] = {}
RACY = 2.0


def _binary_sha256(binary: Path) -> str:
    """sha256 of a lesson's binary (a lesson's passes share it), hashed once while it stays as it was
    (_sha256_once); one gone or unreadable is read anyway, and read_bytes says why."""
    return _sha256_once(str(binary), lambda: sha256_bytes(binary.read_bytes()))


def _sha256_once(path: str, digest: Callable[[], str | None]) -> str | None:
    """`digest()` of the file at `path`, taken once a process while its device, inode, size, modification and
    change times stay the same. A file changed in the last RACY seconds is hashed every time: the system's
    clock for file times moves in steps of milliseconds, so a file written twice within one step would look
    unchanged. A file that cannot be stat'ed is hashed every time (`digest` says what is wrong with it)."""
    seen = binary_stat(path)
    if seen is None or time.time_ns() - seen[4] < RACY * 1e9:
        return digest()
    known = (path, *seen)
    if known not in _DIGESTS:
        made = digest()
        if made is None:
            return None
        _DIGESTS[known] = made
    return _DIGESTS[known]


def entry_path(root: Path, lesson_id: str, key: PassKey) -> Path:
    """Where the pass with `key` is stored under the cache root `root`."""
    return Path(os.path.join(root, FOLDER, lesson_id, f"{key.tool}-{key.digest()}.json"))


def is_cacheable(run: CommandResult, log: bytes) -> bool:
    """Whether a pass ended as the tool ends, with a log: not timed out, not killed, not failing to start."""
    return (not run.timed_out and run.signal is None and run.returncode in (0, DEFAULT_ERROR_EXITCODE)
            and bool(log))


def _canonical(fields: dict) -> str:
    """The fields as their checksum is taken of: JSON, keys sorted."""
    return json.dumps(fields, sort_keys=True)


def _checksum(fields: dict) -> str:
    return sha256_bytes(_canonical(fields).encode())


def store_pass(root: Path, lesson_id: str, key: PassKey, run: CommandResult, log: bytes, xml: bytes | None,
               gpu_mib: float | None = None) -> Path:
    """Write one pass's outcome and footprint (`gpu_mib`: its GPU memory, if known) under its key, atomically;
    return the entry's path."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    fields = {"key": key.model_dump(), "command": list(run.argv), "exit_status": run.returncode,
              "seconds": round(run.seconds, 3), "stdout": b64(run.stdout), "stderr": b64(run.stderr),
              "log": b64(log), "xml": None if xml is None else b64(xml)}
    footprint = Footprint.of(run, gpu_mib)
    if footprint is not None:
        fields["footprint"] = footprint.model_dump()
    path = entry_path(root, lesson_id, key)
    # The canonical dump, its checksum added as the last key: the fields are dumped once, not twice.
    text = _canonical(fields)
    checksum = sha256_bytes(text.encode())
    overwrite_entry(path, f'{text[:-1]}, "checksum": {json.dumps(checksum)}}}')   # checked as read (load_pass)
    return path


def load_pass(root: Path, lesson_id: str, key: PassKey) -> StoredPass | None:
    """The stored outcome of the pass with `key`, or None: never stored, or the entry is damaged."""
    path = entry_path(root, lesson_id, key)
    try:
        raw = read_file(path, ENTRY_LIMIT, "a sanitizer cache entry")
        if raw is None:
            return None
        data = parse_json(raw)
        stored = StoredPass.model_validate(data)
        fields = {name: value for name, value in data.items() if name != "checksum"}
        if stored.checksum != _checksum(fields) or stored.key != key:
            return None
        stored._streams, stored.log_bytes, stored.xml_bytes   # the base64 decodes, kept for the caller
        return stored
    except (OSError, CoursectlError, ValueError, ValidationError, TypeError, AttributeError):
        return None


def expected_seconds(root: Path, lesson_id: str, tool: str) -> float:
    """How long the lesson's `tool` pass took when it last ran here (any key), or 0.0 if it never has.

    Only an estimate, to start the longest passes first.
    """
    return last_run(root, lesson_id, tool)[0]


def _newest_entry(folder: str | Path, prefix: str) -> Path | None:
    """The most recently written entry of `folder` whose name starts with `prefix`; None if none (or no folder)."""
    newest, when = None, 0.0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(".json") and entry.is_file():
                    mtime = entry.stat().st_mtime
                    if newest is None or mtime > when:
                        newest, when = entry.path, mtime
    except FileNotFoundError:
        return None
    return None if newest is None else Path(newest)


def last_run(root: Path, lesson_id: str, tool: str) -> tuple[float, Footprint | None]:
    """The seconds the lesson's `tool` pass took when it last ran here (any key) and its footprint; (0.0, None)
    if it never has, None for a footprint not measured."""
    try:
        newest = _newest_entry(os.path.join(root, FOLDER, lesson_id), f"{tool}-")
        raw = read_file(newest, ENTRY_LIMIT, "a sanitizer cache entry") if newest is not None else None
        if raw is None:
            return 0.0, None
        data = parse_json(raw)
        seconds = float(data["seconds"])
    except (OSError, CoursectlError, ValueError, KeyError, TypeError):
        return 0.0, None
    try:
        footprint = Footprint.model_validate(data["footprint"]) if data.get("footprint") else None
    except (ValidationError, AttributeError):
        footprint = None
    return seconds, footprint
