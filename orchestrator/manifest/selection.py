"""Which lessons a command works on: ids, --all, -k PATTERN and --shard K/N."""

from __future__ import annotations

import fnmatch
import re
from typing import List, Optional

from ..errors import UsageError
from ..words import quoted
from .model import Lesson, Manifest


def choose_lessons(manifest: Manifest, ids: Optional[List[str]], *, all_: bool, shard: Optional[str] = None,
                   keyword: Optional[str] = None) -> list[Lesson]:
    """The lessons named, or all of them (--all, or -k alone), kept by -k PATTERN, then this shard's share."""
    lessons = select_lessons(manifest, ids or [], all_=all_ or (bool(keyword) and not ids))
    if keyword:
        lessons = [lesson for lesson in lessons if _matches(lesson, keyword)]
    if shard:
        lessons = shard_lessons(lessons, shard)
    return lessons


def _matches(lesson: Lesson, pattern: str) -> bool:
    """-k: a substring of the id or title, or a glob over either; case does not matter."""
    pattern = pattern.lower()
    texts = (lesson.id.lower(), lesson.title.lower())
    return any(pattern in text or fnmatch.fnmatchcase(text, pattern) for text in texts)


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
    for ident in ids:
        if ident not in known:
            raise UsageError(f"no lesson {quoted(ident)} in {manifest.path}",
                             hint=f"lessons: {', '.join(sorted(known))}")
    return [lesson for lesson in manifest.lessons if lesson.id in ids]
