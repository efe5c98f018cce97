"""The one way coursectl runs an external program.

Argument lists only, never a shell; a timeout always; on timeout or Ctrl-C the
whole process group is killed and the partial output kept; output capture is
bounded so a flooding program cannot exhaust memory.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from pydantic import BaseModel, Field

DEFAULT_OUTPUT_LIMIT = 16 * 1024 * 1024
# How long a program's children may keep its output open once it has exited.
CHILD_GRACE = 0.5
LEFT_A_CHILD = "left a child process running; stopped"
WAKE = 0.1   # seconds between a wait's looks at anything but the program's end


class CommandResult(BaseModel):
    argv: list[str]
    returncode: int | None      # None when killed at the timeout
    signal: int | None = None   # the signal that ended it, if any
    timed_out: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    seconds: float = 0.0
    notes: list[str] = Field(default_factory=list)   # what else happened, e.g. LEFT_A_CHILD
    # What the program used, with the children it waited for (wait4); None where it was not reaped so
    # (stopped, timed out, or without a pidfd to wait on).
    cpu_seconds: float | None = None
    user_seconds: float | None = None   # the part of it spent in the programs themselves, not the kernel
    max_rss_mib: float | None = None   # the largest of those processes' peak resident memory

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def describe(self) -> str:
        """The fixed shape of a failed command: command, status, tails."""
        if self.timed_out:
            status = "timed out"
        elif self.signal:
            status = f"killed by signal {self.signal} ({signal_name(self.signal)})"
        else:
            status = f"exit status {self.returncode}"
        parts = [f"$ {self.command}", status]
        for name, data in (("stdout", self.stdout), ("stderr", self.stderr)):
            tail = tail_lines(data)
            if tail:
                parts.append(f"{name} (last lines):\n{tail}")
        return "\n".join(parts)


def signal_name(number: int) -> str:
    """SIGABRT for 6; `unknown` for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


LINE_LIMIT = 200   # characters of a program's line that coursectl quotes
# The control characters of a program's line, but the tab: written as escapes (\x1b), so that what a
# lesson prints reaches a terminal or CI log as text, never as a colour, a cursor move or a title.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_char(match: re.Match) -> str:
    """The character `match` found, written out as an escape: \\x1b, or \\ud800 past \\xff (for re.sub)."""
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clip_line(line: str, *, quote: bool = False, limit: int = LINE_LIMIT) -> str:
    """A line a program printed, as coursectl quotes it: cut to about `limit` characters.

    Every reason and report that shows a program's line goes through here, so a
    16 MiB line is shown as its first 200 characters and its length. With
    `quote` the kept text is written as a Python string literal (repr), cut so
    that the literal itself stays within `limit`.
    """
    kept = line[:limit]
    if quote:
        shown = repr(kept)
        while len(shown) > limit + 2:   # escapes make a literal longer than its text
            kept = kept[:max(0, len(kept) * (limit + 2) // len(shown) - 1)]
            shown = repr(kept)
    else:
        shown = _CONTROL.sub(escape_char, kept)
    return shown if len(kept) == len(line) else f"{shown}… ({len(line):,} characters)"


def tail_lines(data: bytes, count: int = 12) -> str:
    """The last `count` lines of a program's output, each clipped.

    Only the end of the output is decoded: a window that grows until it holds
    more than `count` lines (or all of the output), so that 16 MiB of output
    costs what its last lines cost, and a 16 MiB line is decoded once.
    """
    data = data.rstrip(b"\n")
    window = 64 * 1024
    while True:
        part = data[-window:]
        lines = part.decode("utf-8", errors="replace").splitlines()
        if len(part) == len(data) or len(lines) > count:
            break
        window *= 4
    return "\n".join(clip_line(line) for line in lines[-count:])


def _drain(stream, limit: int, sink: list, flags: list) -> None:
    total = 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        if total < limit:
            keep = chunk[: limit - total]
            sink.append(keep)
            if len(keep) < len(chunk):
                flags.append(True)
        else:
            flags.append(True)
        total += len(chunk)
    stream.close()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_command(argv: Sequence[str | os.PathLike], *, timeout: float,
                env: Mapping[str, str] | None = None, cwd: Path | None = None,
                output_limit: int = DEFAULT_OUTPUT_LIMIT) -> CommandResult:
    """Run argv in its own process group and collect bounded output."""
    argv = [str(a) for a in argv]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=_devnull(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd, env=_environment(env),
                            start_new_session=True)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    if _STOPPING.is_set():  # an interrupt came while this child was being started
        _kill_group(proc)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):   # not Linux, or an old kernel: a thread for each pipe, Popen.wait
        pidfd = None
    collect = _collect_threaded if pidfd is None else functools.partial(_collect_polled, pidfd=pidfd)
    try:
        out, err, cut, timed_out, usage, notes = collect(proc, timeout, output_limit)
    except BaseException:
        _kill_group(proc)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        raise
    finally:
        if pidfd is not None:
            os.close(pidfd)
    with _LIVE_LOCK:
        _LIVE.discard(proc)
    code = proc.returncode
    sig = -code if code is not None and code < 0 else None
    return CommandResult(argv=argv, returncode=None if timed_out else code, signal=sig,
                         timed_out=timed_out, stdout=b"".join(out), stderr=b"".join(err),
                         stdout_truncated=cut[0], stderr_truncated=cut[1],
                         seconds=time.monotonic() - start, notes=notes,
                         cpu_seconds=None if usage is None else round(usage.ru_utime + usage.ru_stime, 3),
                         user_seconds=None if usage is None else round(usage.ru_utime, 3),
                         max_rss_mib=None if usage is None else round(usage.ru_maxrss / 1024, 1))


_DEVNULL: list[int] = []


def _devnull() -> int:
    """The null device, open to read, as every program's standard input: opened once a process (Popen's
    DEVNULL opens and closes it for each program)."""
    if not _DEVNULL:
        with _LIVE_LOCK:
            if not _DEVNULL:
                _DEVNULL.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    return _DEVNULL[0]


def environ_bytes() -> Mapping[bytes, bytes] | None:
    """This process's environment as os.environ holds it on POSIX, names and values in bytes, none of them
    decoded; None elsewhere (os.environ itself is the one to read there)."""
    return getattr(os.environ, "_data", None) if os.name == "posix" else None


def _environment(env: Mapping[str, str] | None):
    """This process's environment with `env` on top, as Popen takes it; None (inherited as it is) for nothing on
    top. On POSIX made from os.environ's own bytes: read through os.environ, key by key, it cost more than
    starting the program."""
    if not env:
        return None
    data = environ_bytes()
    if data is None:
        return {**os.environ, **env}
    return {**data, **{os.fsencode(name): os.fsencode(value) for name, value in env.items()}}


def _collect_polled(proc: subprocess.Popen, timeout: float, limit: int, *, pidfd: int):
    """Read both pipes and wait for the program in this thread, with poll on the pipes and on its pidfd: woken
    the moment it writes or exits, and in the main thread every WAKE seconds, so that an interrupt raised in
    Python (not by a signal, which ends poll at once) is not held up until the program ends. No thread is
    started or joined (a third of a millisecond of CPU a run, and a 400-lesson verify makes 2,139 runs).
    Returns stdout's and stderr's chunks, whether each was cut, whether it timed out, wait4's rusage (None
    where it was not reaped so) and the notes."""
    streams = [_Pipe(proc.stdout), _Pipe(proc.stderr)]
    reading = {pipe.fd: pipe for pipe in streams}
    poller = select.poll()
    for fd in reading:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    timed_out, usage, notes, ended = False, None, [], False
    deadline = time.monotonic() + timeout
    # Only the main thread is ever interrupted from Python (_thread.interrupt_main, which no system call
    # notices): it looks every WAKE seconds. A worker waits for the program alone: its looks found nothing
    # to do (1,525 of the 8,473 polls of a 400-lesson verify), each a wake for nothing.
    wake = WAKE if threading.current_thread() is threading.main_thread() else math.inf
    while reading or not ended:
        now = time.monotonic()
        if now >= deadline:
            if not ended:                 # the timeout: what it wrote until then is read for up to 5 s more
                timed_out = ended = True
                _kill_group(proc)
                deadline = now + 5
                continue
            if not timed_out and not notes and _group_is_alive(proc.pid):   # a child holds its output open
                notes.append(LEFT_A_CHILD)
                _kill_group(proc)
                deadline = now + 5
                continue
            break
        for fd, _ in poller.poll(max(0.0, min(wake, deadline - now)) * 1000):
            if fd == pidfd:
                poller.unregister(pidfd)
                if not ended:
                    usage = _reap(proc)
                    ended, deadline = True, time.monotonic() + CHILD_GRACE
                    # It has exited: what it left in its pipes is read now, and their ends with it, where no
                    # child of its holds them open (not in a poll and a wake more).
                    for open_fd in [open_fd for open_fd, pipe in reading.items() if not pipe.read(limit)]:
                        poller.unregister(open_fd)
                        del reading[open_fd]
            elif fd in reading and not reading[fd].read(limit):
                poller.unregister(fd)
                del reading[fd]
    for pipe in streams:
        pipe.stream.close()
    if proc.returncode is None:
        proc.wait()
    return (streams[0].chunks, streams[1].chunks, (streams[0].total > limit, streams[1].total > limit), timed_out,
            usage, notes)


class _Pipe:
    """One of a program's output pipes, read as it becomes readable, up to a limit (the rest counted, not kept)."""

    def __init__(self, stream):
        self.stream, self.fd = stream, stream.fileno()
        self.chunks: list[bytes] = []
        self.total = 0

    def read(self, limit: int) -> bool:
        """Read what is there, and on until there is nothing more for now; False at its end (seen in the same
        wake as the last of the output, where the program has closed the pipe by then)."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            if self.total < limit:
                self.chunks.append(chunk[: limit - self.total])
            self.total += len(chunk)


def _collect_threaded(proc: subprocess.Popen, timeout: float, limit: int):
    """_collect_polled where there is no pidfd: a thread drains each pipe, the wait is Popen.wait's."""
    out: list[bytes] = []
    err: list[bytes] = []
    out_cut: list = []
    err_cut: list = []
    readers = [threading.Thread(target=_drain, args=(proc.stdout, limit, out, out_cut), daemon=True),
               threading.Thread(target=_drain, args=(proc.stderr, limit, err, err_cut), daemon=True)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    # A child the program left behind may still hold its output open: it gets
    # a moment to finish, then its process group is stopped and what it wrote
    # so far is kept. After a timeout the group is already gone.
    notes = []
    _join(readers, 5 if timed_out else CHILD_GRACE)
    if any(r.is_alive() for r in readers):
        if not timed_out and _group_is_alive(proc.pid):   # not merely readers slow on a busy machine
            notes.append(LEFT_A_CHILD)
        _kill_group(proc)
        _join(readers, 5)
    return out, err, (bool(out_cut), bool(err_cut)), timed_out, None, notes


def _reap(proc: subprocess.Popen):
    """Reap a program that has exited, with wait4: its status set on `proc`, and its rusage (its own CPU and
    that of the children it waited for, the largest peak memory among them); None if it was reaped already."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:   # reaped already (a stop's proc.wait in another thread)
        proc.wait()
        return None
    if proc.returncode is None:
        proc.returncode = os.waitstatus_to_exitcode(status)
    proc.wait()   # reaped: Popen returns its status at once
    return usage


def _group_is_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait for every thread, `seconds` in all."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


Runner = Callable[..., CommandResult]


# Every live child, so an interrupt in the main thread can end the ones that
# worker threads started.
_LIVE: set = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def kill_all() -> None:
    """Kill the process group of every child still running, and of any started until resume()."""
    _STOPPING.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill_group(proc)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while the block runs, then deliver them.

    For the main thread handing builds to a thread pool: an interrupt raised
    while the pool starts a worker thread leaves that thread out of the pool's
    count, so a stop would not wait for its build (which would go on after
    coursectl said it had stopped). The block is short; a signal that comes
    meanwhile is raised again as it ends, to whatever handler was there.
    Outside the main thread (where handlers cannot be set) it holds nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    for sig in dict.fromkeys(held):
        signal.raise_signal(sig)


def resume() -> None:
    """After an interrupt has been handled: children may start again."""
    _STOPPING.clear()
