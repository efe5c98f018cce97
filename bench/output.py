"""What each bench script does with its result: the JSON on stdout and, with --out, in a file too."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path


def now() -> str:
    """The date and time for a result's "date": UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def emit(result: dict, out: Path | None) -> None:
    """Print the result as indented JSON; write the same to `out` (its folder made) where given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
