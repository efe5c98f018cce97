"""What a lesson's sanitizer passes expect: the tools, and the findings each must (and may) report.

lessons.yaml declares them (manifest/model.py's SanitizerPass); cuda/sanitizer.py
runs a pass and judges its report against them.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Tool(str, Enum):
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    SYNCCHECK = "synccheck"
    INITCHECK = "initcheck"


class ExpectedFinding(BaseModel):
    """A finding a lesson is meant to produce; the fields left out match anything.

    `kind` is compared without case, and `race` matches every race; `line`
    matches either end of a race; `text` is a substring of the finding's
    text (for API errors, which name no kernel); `snippet` names a snippet of
    the lesson's source that the finding must fall in (resolved to
    `line_range` before judging).
    """

    model_config = ConfigDict(extra="forbid")

    kernel: str | None = None
    kind: str | None = None
    severity: Literal["error", "warning"] | None = None
    file: str | None = None
    line: int | None = Field(default=None, ge=1)
    text: str | None = None
    snippet: str | None = None
    line_range: tuple[int, int] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _something(self) -> "ExpectedFinding":
        if self.kernel is None and self.kind is None and self.text is None:
            raise ValueError("an expected finding names a kernel, a kind or a text")
        return self

    def describe(self) -> str:
        where = f"in {self.kernel}" if self.kernel else f"of kind {self.kind}" if self.kind else ""
        if self.text:
            where += f" saying {self.text!r}"
        if self.snippet:
            span = f" (lines {self.line_range[0]}-{self.line_range[1]})" if self.line_range else ""
            where += f" inside snippet {self.snippet!r}{span}"
        return where.strip()


class Expectation(BaseModel):
    """What one tool must report on a lesson: these findings, and no other unless allowed."""

    model_config = ConfigDict(extra="forbid")

    tool: Tool
    findings: list[ExpectedFinding] = Field(default_factory=list)
    allow_other: bool = False
