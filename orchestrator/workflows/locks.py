"""One GPU run at a time per GPU, across every coursectl process on the host.

A timed run holds its GPU's lock exclusively; sanitizer passes hold it
shared, so they may run together but never beside a timed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from typing import Callable, Iterator

from ..files import open_making_folder

_MADE: set[str] = set()   # the lock folders made (or found) by this process
# The passes of this process that hold a GPU's lock shared hold it through one descriptor: [fd, holders], by
# the lock file's path. The first opens and locks it, the last unlocks and closes it; in between a pass takes
# it with no system call (each holder opened, locked, named itself in and closed the file: 7 calls a pass).
_SHARED: dict[str, list[int]] = {}
_SHARED_LOCK = threading.Lock()


def lock_dir() -> str:
    """The folder of the GPU locks (COURSECTL_LOCK_DIR, else coursectl-locks in the temporary folder), made."""
    base = os.environ.get("COURSECTL_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "coursectl-locks")
    if base not in _MADE:
        os.makedirs(base, exist_ok=True)
        _MADE.add(base)
    return base


@contextlib.contextmanager
def gpu_lock(gpu_id: str, on_wait: Callable[[str], None] | None = None, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock for `gpu_id` (its UUID); call on_wait once if another process has it.

    `shared` holds it beside other shared holders (sanitizer passes) and
    excludes only the exclusive ones (timed runs). An exclusive holder opens
    the file anew, so threads of one process exclude each other too: a timed
    run waits for this process's passes as for another's.
    """
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu_id)
    path = os.path.join(lock_dir(), f"gpu-{safe}.lock")
    if shared:
        with _SHARED_LOCK:
            held = _SHARED.get(path)
            if held is not None:
                held[1] += 1
        if held is None:
            fd = _locked(path, gpu_id, on_wait, shared=True)
            with _SHARED_LOCK:
                held = _SHARED.get(path)
                if held is None:
                    _SHARED[path] = [fd, 1]
                else:   # another pass of this process took it meanwhile: its descriptor holds for both
                    held[1] += 1
                    os.close(fd)
        try:
            yield
        finally:
            with _SHARED_LOCK:
                held = _SHARED[path]
                held[1] -= 1
                if held[1] == 0:
                    del _SHARED[path]
                    try:
                        fcntl.flock(held[0], fcntl.LOCK_UN)
                    finally:
                        os.close(held[0])
        return
    fd = _locked(path, gpu_id, on_wait, shared=False)
    try:
        yield
    finally:
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _locked(path: str, gpu_id: str, on_wait: Callable[[str], None] | None, *, shared: bool) -> int:
    """The lock file open and locked, shared or not (waited for, and on_wait told who holds it, if another
    process does), with this holder's name written in: its descriptor."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    # Opened without O_APPEND, so that each holder writes its name over the last one's; the descriptor itself
    # (no file object: a lesson's run and each of its passes take the lock, 1,333 times in 400 lessons).
    fd = open_making_folder(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)   # made again if it went away
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            if on_wait:
                on_wait(f"waiting for GPU {gpu_id}: held by {holder}")
            fcntl.flock(fd, mode)
        name = (f"coursectl pid {os.getpid()}" + (" (sanitizer passes)" if shared else "")).encode()
        os.pwrite(fd, name, 0)
        os.ftruncate(fd, len(name))
    except BaseException:
        os.close(fd)
        raise
    return fd
