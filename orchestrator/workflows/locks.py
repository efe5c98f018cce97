"""One GPU run at a time per GPU, across every coursectl process on the host.

A timed run holds its GPU's lock exclusively; sanitizer passes hold it
shared, so they may run together but never beside a timed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from typing import Callable, Iterator


def lock_dir() -> str:
    """The folder of the GPU locks (COURSECTL_LOCK_DIR, else coursectl-locks in the temporary folder), made."""
    base = os.environ.get("COURSECTL_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "coursectl-locks")
    os.makedirs(base, exist_ok=True)
    return base


@contextlib.contextmanager
def gpu_lock(gpu_id: str, on_wait: Callable[[str], None] | None = None, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock for `gpu_id` (its UUID); call on_wait once if another process has it.

    `shared` holds it beside other shared holders (sanitizer passes) and
    excludes only the exclusive ones (timed runs). Each call opens the file
    anew, so threads of one process exclude each other too.
    """
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu_id)
    path = os.path.join(lock_dir(), f"gpu-{safe}.lock")
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    # Opened without O_APPEND, so that each holder writes its name over the last one's; the descriptor itself
    # (no file object: a lesson's run and each of its passes take the lock, 1,333 times in 400 lessons).
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
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
        try:
            yield
        finally:
            if not shared:   # another shared holder may still be there, and is named
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
