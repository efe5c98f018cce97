"""The main thread's wait for futures: woken by the first to end, or by Ctrl-C or SIGTERM, whichever thread took it.

On POSIX a lock's wait without a timeout is interrupted by a signal that
the main thread takes, and Python runs the handler (KeyboardInterrupt) at
once. But the kernel may hand the signal to another thread (Linux gives it to
the main thread only while that one has none pending; pthread_kill picks
any): there, only Python's C handler runs, and the main thread would run the
Python one only once it woke for something else, when a lesson or a build
ended. So the main thread waits in select() on a pipe that each future
writes a byte to as it ends, and that is also signal.set_wakeup_fd's: the C
handler writes the signal's number to it from whichever thread took the
signal, the main thread wakes and runs the handler. Nothing wakes it
otherwise: no timeout, no polling.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, as_completed
from concurrent.futures import wait as wait_for_futures
from typing import Iterable, Iterator


def completed(futures: Iterable[Future]) -> Iterator[Future]:
    """as_completed, its main thread woken by a signal any thread took (see the module), in the order they end.

    Each future is given one callback, which files it as ended and rings the pipe: the work is one step a
    future, however many are pending (a wait that looked at every pending future each time one ended was
    quadratic: 860,000 looks for the 800 builds of a 400-lesson course). The pipe stays open between the
    futures given: take them all (a `for` over it), or wait for one with first_done. A generator dropped after
    `next` closes its pipe as it is collected, and a Ctrl-C that comes then is lost."""
    pending = list(dict.fromkeys(futures))
    if threading.current_thread() is not threading.main_thread():
        yield from as_completed(pending)
        return
    ended: deque[Future] = deque()
    with _Wakeup() as wakeup:
        def end(future: Future) -> None:
            ended.append(future)   # deque.append is atomic: the pool's threads file futures as they end
            wakeup.ring()
        for future in pending:
            future.add_done_callback(end)   # one done already is called back at once, here
        for _ in pending:
            while not ended:
                wakeup.sleep()
            yield ended.popleft()


def first_done(futures: set[Future]) -> set[Future]:
    """Wait until one of `futures` is done; those done. Outside the main thread, futures.wait (no signal runs there)."""
    done = {future for future in futures if future.done()}
    if done:
        return done
    if threading.current_thread() is not threading.main_thread():
        return wait_for_futures(futures, return_when=FIRST_COMPLETED).done
    with _Wakeup() as wakeup:
        for future in futures:
            future.add_done_callback(wakeup.ring)
        while not (done := {future for future in futures if future.done()}):
            wakeup.sleep()
    return done


class _Wakeup:
    """A pipe the main thread sleeps on: rung by a future's end, and by the signal handler (set_wakeup_fd)."""

    def __init__(self):
        self.read, self.write = os.pipe()
        for fd in (self.read, self.write):
            os.set_blocking(fd, False)
        self.lock = threading.Lock()   # a future may end after the pipe is closed: its callback then writes nothing
        self.open = True
        self.previous = -1

    def __enter__(self) -> _Wakeup:
        try:
            self.previous = signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        except ValueError:   # not the main interpreter's main thread: no handler runs here anyway
            self.previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.set_wakeup_fd(self.previous)
        with self.lock:
            self.open = False
            os.close(self.read)
            os.close(self.write)

    def ring(self, _future: Future | None = None) -> None:
        with self.lock:
            if self.open:
                try:
                    os.write(self.write, b"\0")
                except BlockingIOError:   # full: the main thread has enough to wake for
                    pass

    def sleep(self) -> None:
        """Until the pipe is rung (a signal's handler runs as select returns, or interrupts it)."""
        select.select([self.read], [], [])
        try:
            while os.read(self.read, 4096):
                pass
        except BlockingIOError:
            pass
