"""coursectl: build, run, sanitize, verify and document a CUDA course's lessons."""

__version__ = "0.1.0"
