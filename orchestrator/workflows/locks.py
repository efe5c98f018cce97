"""One GPU run at a time per GPU, across every coursectl process on the host.

A timed run holds its GPU's lock exclusively; sanitizer passes hold it
shared, so they may run together but never beside a timed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def lock_dir() -> Path:
    base = os.environ.get("COURSECTL_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "coursectl-locks")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def gpu_lock(gpu_id: str, on_wait: Callable[[str], None] | None = None, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock for `gpu_id` (its UUID); call on_wait once if another process has it.

    `shared` holds it beside other shared holders (sanitizer passes) and
    excludes only the exclusive ones (timed runs). Each call opens the file
    anew, so threads of one process exclude each other too.
    """
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu_id)
    path = lock_dir() / f"gpu-{safe}.lock"
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    # Opened without O_APPEND, so that each holder writes its name over the last one's.
    with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), "r+") as handle:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if on_wait:
                on_wait(f"waiting for GPU {gpu_id}: held by {holder}")
            fcntl.flock(handle, mode)
        handle.seek(0)
        handle.write(f"coursectl pid {os.getpid()}" + (" (sanitizer passes)" if shared else ""))
        handle.truncate()
        handle.flush()
        try:
            yield
        finally:
            if not shared:   # another shared holder may still be there, and is named
                handle.seek(0)
                handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
