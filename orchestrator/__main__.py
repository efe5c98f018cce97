"""`python -m orchestrator` is `coursectl`."""

from .cli import app

app(prog_name="coursectl")
