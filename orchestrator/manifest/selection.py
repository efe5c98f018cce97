"""Which lessons a command works on: ids, --all, -k EXPRESSION and --shard K/N."""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, List, NoReturn, Optional

from ..errors import UsageError
from ..words import quoted
from .model import Lesson, Manifest


def choose_lessons(manifest: Manifest, ids: Optional[List[str]], *, all_: bool, shard: Optional[str] = None,
                   keyword: Optional[str] = None) -> list[Lesson]:
    """The lessons named, or all of them (--all, or -k alone), kept by -k EXPRESSION, then this shard's share."""
    lessons = select_lessons(manifest, ids or [], all_=all_ or (bool(keyword) and not ids))
    if keyword:
        matches = keyword_matcher(keyword)
        lessons = [lesson for lesson in lessons if matches(lesson)]
    if shard:
        lessons = shard_lessons(lessons, shard)
    return lessons


# -k, in pytest's grammar (_pytest/mark/expression.py):
#   expression: expr? EOF;  expr: and_expr ('or' and_expr)*;  and_expr: not_expr ('and' not_expr)*
#   not_expr: 'not' not_expr | '(' expr ')' | ident
# An ident is matched, case-insensitively, as a substring of the lesson's id or title; one holding a glob
# character (* ? [) is matched as a glob over either (day1*, day1[36]*), as -k always did.
_TOKEN = re.compile(r"\s*(?:(?P<paren>[()])|(?P<ident>[\w:+\-.\[\]\\/*?]+))")
_KEYWORDS = ("and", "or", "not")


def keyword_matcher(expression: str) -> Callable[[Lesson], bool]:
    """-k EXPRESSION as a test of one lesson; a malformed expression is a UsageError naming it and the column."""
    tokens = _tokens(expression)
    position = 0

    def fail(message: str) -> NoReturn:
        column = tokens[position][1] + 1 if position < len(tokens) else len(expression) + 1
        raise UsageError(f"-k {expression!r}: at column {column}: {message}",
                         hint="-k takes pytest's grammar: substrings or globs of the id or title, with and, or, "
                              "not and parentheses, such as 'day13 or day14', 'not sync', 'day1* and not day16'")

    def peek() -> str | None:
        return tokens[position][0] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1][0]

    def expr() -> Callable[[Lesson], bool]:
        terms = [and_expr()]
        while peek() == "or":
            take()
            terms.append(and_expr())
        return terms[0] if len(terms) == 1 else (lambda lesson: any(term(lesson) for term in terms))

    def and_expr() -> Callable[[Lesson], bool]:
        terms = [not_expr()]
        while peek() == "and":
            take()
            terms.append(not_expr())
        return terms[0] if len(terms) == 1 else (lambda lesson: all(term(lesson) for term in terms))

    def not_expr() -> Callable[[Lesson], bool]:
        token = peek()
        if token == "not":
            take()
            inner = not_expr()
            return lambda lesson: not inner(lesson)
        if token == "(":
            take()
            inner = expr()
            if peek() != ")":
                fail("expected ')'" + (f", found {peek()!r}" if peek() else ", found the end"))
            take()
            return inner
        if token is None or token in (")", "and", "or"):
            fail("expected not, ( or a word" + (f", found {token!r}" if token else ", found the end"))
        word = take()
        return lambda lesson: _matches(lesson, word)

    if not tokens:   # pytest: an empty expression selects everything
        return lambda lesson: True
    matcher = expr()
    if position < len(tokens):
        fail(f"expected and, or or the end, found {peek()!r}")
    return matcher


def _tokens(expression: str) -> list[tuple[str, int]]:
    """(token, column) pairs; a character no token holds is a UsageError naming it."""
    out: list[tuple[str, int]] = []
    at = 0
    while expression[at:].strip():
        match = _TOKEN.match(expression, at)
        if match is None:
            at += len(expression[at:]) - len(expression[at:].lstrip())
            raise UsageError(f"-k {expression!r}: at column {at + 1}: unexpected character {expression[at]!r}",
                             hint="-k takes pytest's grammar: words of letters, digits and _-.:+/[]*?, "
                                  "with and, or, not and parentheses")
        kind = match.lastgroup
        out.append((match[kind], match.start(kind)))
        at = match.end()
    return out


def _matches(lesson: Lesson, pattern: str) -> bool:
    """One word of -k: a substring of the id or title, or a glob over either; case does not matter."""
    pattern = pattern.lower()
    texts = (lesson.id.lower(), lesson.title.lower())
    if any(c in pattern for c in "*?["):
        # A run's id holds brackets, `day05-heat[shared]`: the word as it stands matches it too.
        return any(fnmatch.fnmatchcase(text, pattern) or pattern in text for text in texts)
    return any(pattern in text for text in texts)


def shard_lessons(lessons: list[Lesson], shard: str) -> list[Lesson]:
    """`K/N`: a deterministic 1-based share of the lessons, by sorted id."""
    match = re.fullmatch(r"(\d+)/(\d+)", shard)
    if match is None:
        raise UsageError(f"--shard {shard!r} must look like 2/4")
    k, n = int(match[1]), int(match[2])
    if not 1 <= k <= n:
        raise UsageError(f"--shard {shard!r}: K must be between 1 and N")
    order = sorted(lessons, key=lambda l: l.id)
    mine = {l.id for i, l in enumerate(order) if i % n == k - 1}
    return [l for l in lessons if l.id in mine]


def select_lessons(manifest: Manifest, ids: list[str], *, all_: bool) -> list[Lesson]:
    """The lessons a command names, in manifest order; unknown ids are a usage error."""
    if all_ or not ids:
        if not all_ and not ids:
            raise UsageError("name at least one lesson or pass --all",
                             hint=f"lessons: {', '.join(l.id for l in manifest.lessons)}")
        return list(manifest.lessons)
    known = {lesson.id for lesson in manifest.lessons}
    # A lesson with `runs` is named by its id (all its runs) or by a run's, `id[run]`.
    groups = {lesson.group for lesson in manifest.lessons if lesson.group}
    for ident in ids:
        if ident not in known and ident not in groups:
            raise UsageError(f"no lesson {quoted(ident)} in {manifest.path}",
                             hint=f"lessons: {', '.join(sorted(known))}")
    return [lesson for lesson in manifest.lessons if lesson.id in ids or lesson.group in ids]


def keep_failed(lessons: list[Lesson], failed: Optional[list[str]], source: str) -> tuple[list[Lesson], str]:
    """--last-failed, --failed-from: of the lessons selected, those that failed in the report, or all of them when
    none did (or there is no report), as pytest's --last-failed; with the line that says which it took."""
    if failed is None:
        return lessons, f"no last report ({source}): running every selected lesson"
    chosen = [lesson for lesson in lessons if lesson.id in set(failed)]
    if not chosen:
        return lessons, f"no lesson of the selection failed in {source}: running all {len(lessons)}"
    return chosen, f"running the {len(chosen)} of {len(lessons)} selected lessons that failed in {source}"
