"""The links between lessons: each page's neighbours by day, and mentions of other days in prose as links.

A mention of a day the course has no lesson for is an error: a student
would follow it to nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel

from ..manifest.model import Lesson, Manifest
from ..markdown import md


INDEX_FILE = "README.md"


def link_to(target: Path, page_dir: Path) -> str:
    """`target` as a link written on a page in `page_dir`."""
    return Path(os.path.relpath(Path(target).resolve(), Path(page_dir).resolve())).as_posix()


class NavLink(BaseModel):
    text: str                         # Markdown
    link: str                         # relative to the page


class Navigation(BaseModel):
    """The links around a page: the course index, and the lessons before and after it by day."""

    index: str
    previous: NavLink | None
    next: NavLink | None



# A mention of another day in prose: "day 16", "Day 16".
_DAY_MENTION = re.compile(r"\b([Dd]ay) (\d+)\b")
# Where a mention stays as it is: fenced code, code spans, links and HTML tags.
_KEPT = re.compile(r"^(```+|~~~+)[^\n]*\n.*?^\1[ \t]*$|(`+).+?\2|!?\[[^\]]*\]\([^)]*\)|<[^>\n]+>",
                   re.MULTILINE | re.DOTALL)


def _by_day(manifest: Manifest) -> list[Lesson]:
    """The lessons in day order (lessons.yaml's order among lessons of one day), one a page: of a lesson with
    runs, its first run, with which its page is written."""
    return sorted((lesson for lesson in manifest.lessons if not lesson.group or lesson.run == next(iter(lesson.runs))),
                  key=lambda lesson: lesson.day)


def _page_of(lesson: Lesson, manifest: Manifest) -> Path:
    return manifest.root / lesson.page_path


# A link or image whose target may be a path: [text](target "title").
_LINK = re.compile(r"^(!?\[[^\]]*\]\()([^)\s]*)(.*)$", re.DOTALL)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def rebase_links(text: str, from_dir: Path, page_dir: Path) -> str:
    """Prose written in one folder, shown on a page in another: its relative links still reach their files.

    Links to a URL, an anchor on the page or an absolute path are left as
    they are; so is everything inside code.
    """
    if Path(from_dir).resolve() == Path(page_dir).resolve():
        return text

    def rebased(kept: re.Match) -> str:
        link = _LINK.match(kept[0])
        if link is None or not link[2] or link[2].startswith(("#", "/")) or _SCHEME.match(link[2]):
            return kept[0]
        target, hash_, fragment = link[2].partition("#")
        moved = link_to(Path(from_dir) / target, page_dir) + ("/" if target.endswith("/") else "")
        return f"{link[1]}{moved}{hash_}{fragment}{link[3]}"
    return _KEPT.sub(rebased, text)


def link_days(text: str, name: str, manifest: Manifest, lesson: Lesson, page_dir: Path) -> str:
    """Prose with each mention of another lesson's day ("day 16") linked to its page.

    A day the course has no lesson for links to its URL in the manifest's
    `external_days`, or stays text with a warning naming the prose file and
    line (appended to `manifest.warnings`): never a stop, since an adopted
    course's prose names the days of the course it came from.
    """
    days: dict[int, Lesson] = {}
    for other in _by_day(manifest):
        days.setdefault(other.day, other)

    def linked(match: re.Match, offset: int) -> str:
        day = int(match[2])
        target = days.get(day)
        if target is None:
            if day in manifest.external_days:
                return f"[{match[0]}]({manifest.external_days[day]})"
            line = text.count("\n", 0, offset + match.start()) + 1
            have = ", ".join(str(d) for d in sorted(days))
            warning = (f"{name}:{line}: {match[0]!r} names a day the course has no lesson for (its days: {have}); "
                       f"it stays text: give its URL under external_days in lessons.yaml, or add its lesson")
            if warning not in manifest.warnings:
                manifest.warnings.append(warning)
            return match[0]
        if target.id == lesson.id:
            return match[0]
        return f"[{match[0]}]({link_to(_page_of(target, manifest), page_dir)})"

    out: list[str] = []
    pos = 0
    for kept in [*_KEPT.finditer(text), None]:
        end = kept.start() if kept is not None else len(text)
        plain = text[pos:end]
        out.append(_DAY_MENTION.sub(lambda m, at=pos: linked(m, at), plain))
        if kept is not None:
            out.append(kept[0])
            pos = kept.end()
    return "".join(out)


def navigation(manifest: Manifest, lesson: Lesson, page_dir: Path) -> Navigation:
    ordered = _by_day(manifest)
    at = next(n for n, other in enumerate(ordered)   # a run of a lesson: where its page stands
              if other.id == lesson.id or (lesson.group and other.group == lesson.group))

    def link(other: Lesson) -> NavLink:
        return NavLink(text=f"Day {other.day}: {md(other.title)}", link=link_to(_page_of(other, manifest), page_dir))

    return Navigation(index=link_to(manifest.root / INDEX_FILE, page_dir) + "#lessons",
                      previous=link(ordered[at - 1]) if at > 0 else None,
                      next=link(ordered[at + 1]) if at + 1 < len(ordered) else None)
