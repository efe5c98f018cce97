"""The lines of a transcript that its parser looks at, numbered as str.splitlines() numbers them.

The parser (parse.py) is `parser` here: the schema's plan, the transcript's
MatchBudget, where it says which line was matched last (`at`), and where the
rows of the schema's `anywhere` tables go as they are found.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import TranscriptError
from ..process import clip_line
from .plan import BLANK_PROBES

# Where str.splitlines() ends a line, so that line numbers agree with it.
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK = r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"
# One line, or a run of blank lines at once: whitespace up to the last line break it holds.
LINES = re.compile(r"(?P<blank>\s*[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029])"
                   rf"|(?P<line>[^{BREAKS}]*)(?:{_BREAK}|\Z)")
ONE_LINE = re.compile(rf"(?P<line>[^{BREAKS}]*)(?:{_BREAK}|\Z)")

# No lesson prints anywhere near this many lines; past it the parser reads no further, so
# that what a program prints costs time in proportion to what the schema looks at.
MAX_LINES = 100_000
# A text up to this long is split into its lines at once (str.splitlines, the same lines as LINES finds one
# by one); a longer one is read a line at a time, as the parser asks for them.
SPLIT_AT_ONCE = 1 << 18


class Lines:
    """The transcript's lines the parser looks at, numbered, taken from the text as it asks for them.

    Lines the schema ignores and rows of its `anywhere` tables are set aside on
    the way. A run of blank lines is one entry: the parser only ever skips
    blank lines or stops at one, so 16 MiB of newlines cost one regex match.
    The parser reads `taken` itself for a line already read, and asks `has`
    only past its end.
    """

    def __init__(self, parser: Any, text: str):
        self.parser = parser
        self.text = text
        self.taken: list[tuple[int, str]] = []
        self.count = 0          # lines read so far, blank ones included
        self.done = False
        plan = parser.plan
        self.ignore = ignore = plan.ignore
        self.budget = budget = parser.budget
        self.anywhere = plan.rows
        self.pure = plan.pure
        # A schema whose ignore patterns or anywhere rows could take a blank line must see each one.
        self.collapse = not (ignore and any(p.search(probe, budget) for p in ignore for probe in BLANK_PROBES)) and (
            plan.no_blank_row or not any(match_row(probe, budget) is not None for _, match_row, _ in self.anywhere
                                         for probe in BLANK_PROBES))
        split = text.splitlines() if len(text) <= SPLIT_AT_ONCE else None
        if split is not None and len(split) <= MAX_LINES:
            self.split = split
            # A blank line is one a line break ends: the last, unended, is a line as it is (as LINES reads it).
            self.blank_until = len(split) if text and text[-1] in BREAKS else len(split) - 1
        else:
            self.split = None
            self.matches = (LINES if self.collapse else ONE_LINE).finditer(text)

    def has(self, pos: int) -> bool:
        """Whether the transcript has entry `pos`, reading lines up to it as needed.

        A text split at once is read here: a run of blank lines is one entry too.
        Past `pos` it reads on while a line runs no pattern to be set aside or
        taken (the schema is `pure` and the line holds no needle): read early, it
        fails in no way and takes no time of the budget, and the parser's next
        lines are then mostly read already.
        """
        taken = self.taken
        if pos < len(taken):   # the common case: a line already read
            return True
        split = self.split
        if split is None:
            while len(taken) <= pos and not self.done:
                self._next()
            return pos < len(taken)
        at, pure, collapse, blank_until, last = self.count, self.pure, self.collapse, self.blank_until, len(split)
        while at < last:
            line = split[at]
            if collapse and at < blank_until and (not line or line.isspace()):
                end = at + 1
                while end < blank_until and (not split[end] or split[end].isspace()):
                    end += 1
                taken.append((at + 1, ""))
                at = end
                continue
            if pure is not None:
                for needle in pure:
                    if needle in line:
                        break
                else:   # neither ignored nor a row
                    at += 1
                    taken.append((at, line))
                    continue
            if len(taken) > pos:   # asked for no more
                break
            at += 1
            self.count = at
            self._take(line)
        else:
            self.done = True
        self.count = at
        return pos < len(taken)

    def __getitem__(self, pos: int) -> tuple[int, str]:
        taken = self.taken
        if pos >= len(taken):
            self.has(pos)
        self.parser.at = line = taken[pos]   # fetched to be matched: a pattern that runs out of time is on it
        return line

    def total(self) -> int:
        if self.split is not None:
            self.has(len(self.split))   # at most one entry a line: past the last
        while not self.done:
            self._next()
        return self.count

    def _next(self) -> None:
        match = next(self.matches, None)
        if match is None or match.start() == len(self.text):
            self.done = True
            return
        if match.lastgroup == "blank":
            start, end = match.span()
            lines = sum(self.text.count(c, start, end) for c in BREAKS) - self.text.count("\r\n", start, end)
            self.taken.append((self.count + 1, ""))
            self.count += lines
            return
        self.count += 1
        line = match.group("line")
        if self.count > MAX_LINES and (line.strip() or not self.collapse):
            raise TranscriptError(f"the output goes on past line {MAX_LINES:,}, longer than any transcript; "
                                  f"it is not parsed further; found {clip_line(line.strip(), quote=True)}",
                                  path=self.parser.source, line=self.count)
        self._take(line)

    def _take(self, line: str) -> None:
        """The line just read, numbered self.count: set aside (ignored, an anywhere row) or taken."""
        self.parser.at = entry = (self.count, line)
        if self.ignore and any(p.search(line, self.budget) for p in self.ignore):
            return
        for table, match_row, needle in self.anywhere:
            if needle is not None and needle not in line:
                continue
            values = match_row(line, self.budget)
            if values is not None:
                self.parser.anywhere_rows[table].append((self.count, values))
                return
        self.taken.append(entry)


def line_at(text: str, at: int) -> tuple[int, str]:
    """The number and the text of the line of `text` that holds the character at `at`."""
    no = sum(text.count(c, 0, at) for c in BREAKS) - text.count("\r\n", 0, at) + 1
    return no, ONE_LINE.match(text, max(text.rfind(c, 0, at) for c in BREAKS) + 1).group("line")
