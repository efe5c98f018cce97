"""The whole command line: `app` with every command registered on it.

The commands register themselves on cli/common.py's `app` as their modules
are imported: cli/commands.py those that run lessons, cli/course.py those that
run none (check, new, compare, report merge, schema).
"""

from . import commands, course  # noqa: F401  (each registers its commands on app)
from .common import app

__all__ = ["app"]
