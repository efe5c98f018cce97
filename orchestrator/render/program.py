"""A program of several files (`sources:`) as its page shows it: each file whole, in a section of its own.

The translation units come in the order `sources:` gives, the first with the Build/Run/Verified lines render
writes into it, then the headers of the course that they include, in the order they are first included.
The files together are bounded by what a page may hold (limits.MAX_CHARACTERS): past it, one TemplateError
names the lesson, its `sources:` line and each file's size, before any template renders.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from ..errors import TemplateError
from ..files import TEXT_LIMIT, read_text, relative
from ..manifest.model import Lesson, Manifest
from .limits import MAX_CHARACTERS
from .navigation import link_to

# The language of each file's fence, by its suffix; a suffix not here gets a fence with none.
LANGUAGES = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".h": "cpp",
             ".hpp": "cpp", ".hh": "cpp", ".c": "c"}


class ProgramFile(BaseModel):
    """One file of a program of several files, as its section on the page shows it."""

    name: str        # relative to the course root
    link: str        # relative to the page
    language: str    # the fence's: cuda, cpp, c
    text: str


def language_of(path: Path) -> str:
    return LANGUAGES.get(path.suffix.lower(), "")


def file_links(units: list[Path], page_dir: Path) -> dict[str, str]:
    """Each file of the program by its name (as a sanitizer's finding names it) -> its link from the page; of
    two files of one name, the first."""
    links: dict[str, str] = {}
    for unit in units:
        links.setdefault(unit.name, link_to(unit, page_dir))
    return links


def program_files(manifest: Manifest, lesson: Lesson, units: list[Path], headers: list[Path], first_text: str,
                  page_dir: Path) -> list[ProgramFile]:
    """Every file of a lesson of several `sources:`, in order (see the module); [] for a lesson of one file.
    `first_text` is the first unit's text as render writes it."""
    if len(units) < 2:
        return []
    root = manifest.root
    shown: list[ProgramFile] = []
    for index, path in enumerate([*units, *headers]):
        name = relative(path, root)
        text = first_text if index == 0 else read_text(path, TEXT_LIMIT, "a file of a lesson's program",
                                                       shown=name, required=True, root=root)
        shown.append(ProgramFile(name=name, link=link_to(path, page_dir), language=language_of(path), text=text))
    total = sum(len(item.text) for item in shown)
    limit = MAX_CHARACTERS
    if total > limit:
        sizes = ", ".join(f"{item.name} {len(item.text):,}" for item in shown)
        index = next(n for n, other in enumerate(manifest.lessons) if other.id == lesson.id)
        raise TemplateError(
            f"lesson {lesson.id!r}: its page shows every file of its program, and they hold {total:,} characters "
            f"together, more than the {limit:,} a page may hold ({sizes})",
            path=relative(manifest.path, root), line=manifest.line_of("lessons", index, "sources"),
            hint="split the program into lessons of fewer files, or move data out of the sources")
    return shown
