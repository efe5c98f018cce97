"""Patterns lessons.yaml wrote, matched in bounded time (`regex`, whose matches take a timeout).

A regex such as `(a|aa)+$` takes hours on a line of a hundred characters, and
`re`'s matches cannot be stopped; every match of a transcript's lines goes
through `BoundedRegex` and one `MatchBudget` per transcript.
"""

from __future__ import annotations

import functools
import re
import time

import regex as timed_re   # the `regex` package: its matches take a timeout, and `re`'s cannot be stopped


# What matching a transcript with the patterns lessons.yaml wrote may take: a regex
# such as `(a|aa)+$` takes hours on a line of a hundred characters, and a template with
# several `str` fields is polynomial in the line's length. Each match gets LINE_SECONDS,
# the matches of one transcript TRANSCRIPT_SECONDS in all; the parse then stops with
# an error naming the pattern and the line (transcript.py).
LINE_SECONDS = 1.0


TRANSCRIPT_SECONDS = 5.0
_clock = time.monotonic

# `regex` lets go of the interpreter's lock for every match of a str unless told not to. A line's match takes
# microseconds, and each letting go hands the lock to another thread that wants it, which this one then waits
# to get back: in a verify, where the threads that wait for programs and the one that judges the passes take
# turns, every line of every transcript was a switch of threads (2,000 matches beside one busy thread: 0.88 s
# and 282 switches letting go, 0.004 s and 4 switches holding on). Held, a match that runs out of time holds
# the other threads for its timeout: LINE_SECONDS, TRANSCRIPT_SECONDS a transcript at most, a lesson's error
# in any case; its programs run on meanwhile, and a program's own timer times its kernels.
CONCURRENT = False


class MatchBudget:
    """The time the pattern matches of one transcript may take, and what each pattern took of it."""

    def __init__(self, line: float | None = None, total: float | None = None):
        self.line = LINE_SECONDS if line is None else line
        self.total = TRANSCRIPT_SECONDS if total is None else total
        self.deadline = time.monotonic() + self.total
        self.taken: dict[BoundedRegex, float] = {}

    def match(self, pattern: "BoundedRegex", method, text: str):
        """`method(text)` with the time left as its timeout: at most `line`, 0 once the whole is spent
        (`regex` then stops at once), holding the interpreter's lock (see CONCURRENT).

        `method` is a compiled pattern's fullmatch or search, given its arguments in their order (string, pos,
        endpos, concurrent, partial, timeout), as `regex`'s own functions pass them: by keyword they took a
        seventh of a short line's match more.
        """
        start = _clock()
        left = self.deadline - start
        line = self.line
        try:
            return method(text, None, None, CONCURRENT, False, line if left > line else max(0.0, left))
        except TimeoutError:
            raise PatternTimeout(pattern, self, whole=left <= self.line) from None
        finally:
            taken = self.taken
            taken[pattern] = taken.get(pattern, 0.0) + _clock() - start


class PatternTimeout(Exception):
    """A match ran out of time: the line's (`whole` false) or the transcript's; the parser names the line."""

    def __init__(self, pattern: "BoundedRegex", budget: MatchBudget, *, whole: bool):
        super().__init__(pattern.source)
        self.pattern = pattern
        self.budget = budget
        self.whole = whole

    def culprit(self) -> "BoundedRegex":
        """The pattern to blame: the one that ran out of time, or the one that took most of the transcript's."""
        return max(self.budget.taken, key=self.budget.taken.__getitem__) if self.whole else self.pattern


class BoundedRegex:
    """A pattern lessons.yaml wrote, or made from one of its templates, matched in bounded time.

    Written as Python's `re` reads it (checked with `re`, so its errors read as
    they always did) and matched with the `regex` package, whose matches take a
    timeout. Its error names it by `at`, its path in the lesson's `output`
    (("items", 2, "row"), set by OutputSchema), and `origin`, `lessons.yaml:LINE`
    (set by load_manifest).
    """

    def __init__(self, source: str, text: str, *, written: bool):
        self.source = source      # as written in lessons.yaml
        self.written = written    # a regex as written (regex: true, row_regex, ignore), not a template
        self.compiled = _compiled(text)
        self.at: tuple = ()
        self.origin = ""

    @property
    def groupindex(self):
        return self.compiled.groupindex

    def fullmatch(self, text: str, budget: MatchBudget | None = None):
        return (budget or MatchBudget()).match(self, self.compiled.fullmatch, text)

    def search(self, text: str, budget: MatchBudget | None = None):
        return (budget or MatchBudget()).match(self, self.compiled.search, text)


@functools.lru_cache(maxsize=4096)
def _compiled(text: str):
    """`regex`'s compiled pattern of `text`, made once a process: a course's lessons repeat their lines'
    templates (`GPU: {gpu}`), and `regex`'s own cache of compiled patterns does not spare the work."""
    return timed_re.compile(text)


def compile_regex(source: str, what: str = "regex") -> BoundedRegex:
    """A regex lessons.yaml wrote; ValueError says what is wrong with it in `re`'s words."""
    try:
        re.compile(source)
    except re.error as exc:
        raise ValueError(f"invalid {what} {source!r}: {exc}") from None
    try:
        return BoundedRegex(source, source, written=True)
    except timed_re.error as exc:
        raise ValueError(f"invalid {what} {source!r}: {exc}") from None
