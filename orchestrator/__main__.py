"""`python -m orchestrator` is `coursectl`; `main` is the console script's entry point.

Ctrl-C or SIGTERM at any moment ends a command with one line and exit 130,
never a traceback: also in its first 0.3 s, while typer, rich and pydantic
are imported, before the command's own handling (cli/common.py's handle_errors) is in
place. So nothing heavy is imported here, and both signals are held back
while the rest is.
"""

import gc
import signal
import sys

from .errors import INTERRUPTED

_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        # Held while the command line's modules are imported: a KeyboardInterrupt raised in the import
        # system's own callbacks is lost there (`Exception ignored in: ...` and a traceback, and the
        # command goes on). Held, it is raised here, at once once they are in.
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            from .cli.main import app
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        app(prog_name="coursectl")
    except KeyboardInterrupt:
        try:
            sys.stderr.write(INTERRUPTED + "\n")
            sys.stderr.flush()
        except (KeyboardInterrupt, OSError):
            pass
        sys.exit(130)
    finally:
        # The command has ended and said how. A Ctrl-C while Python shuts down would land in some object's
        # __del__ and print `Exception ignored in: ...` and a traceback; there is nothing left to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Nor is there anything left to collect: Python's exit would go through every object once more for
        # cycles (a third of a second after a 400-lesson verify), to free memory the process is giving back.
        gc.freeze()


if __name__ == "__main__":
    main()
