"""The shapes of the names coursectl accepts: lesson ids, architectures, GPU slugs, snippets.

Each pattern is meant for `fullmatch`: `re.match` with a trailing `$` also
accepts a name that ends in a newline, such as ``"day16-tiled-matmul\\n"``.
"""

from __future__ import annotations

import re

from .errors import UsageError

LESSON_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
ARCH = re.compile(r"sm_\d{2,3}[af]?")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")      # fields, tables, notes, sections, flags
GPU_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")       # what toolchain.gpu_slug makes: nvidia-h200
SNIPPET_NAME = re.compile(r"[A-Za-z0-9_.-]+")            # `// snippet: NAME` in a lesson's source
COMPUTE_CAPABILITY = re.compile(r"\d+\.\d+")


def is_identifier(name: str) -> bool:
    return IDENTIFIER.fullmatch(name) is not None


def check_arch(arch: str, what: str = "--arch") -> str:
    """`arch` if it is an architecture as lessons.yaml writes one (sm_90, sm_90a, sm_100f), whole.

    Else UsageError, `what` naming where it was given: `--arch 'foo' is not a
    GPU architecture; write one like sm_90`. Every check of an architecture is
    this one: the options, the manifest's `architectures`, build_lesson.
    """
    if not ARCH.fullmatch(arch):
        raise UsageError(f"{what} {arch!r} is not a GPU architecture; write one like sm_90")
    return arch
