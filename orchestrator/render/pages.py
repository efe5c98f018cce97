"""Where render writes a lesson's page: one file per page, of the course's own, that render itself wrote.

A page lies beside its source (README.md in the source's folder) unless
`page.path` names another file. render refuses, before it renders anything,
two lessons whose pages would be one file, a page that would be the course's
index or a lesson's prose, a page or README.md that is a symbolic link, and a
page file that is there and that render did not write.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ManifestError, TemplateError
from ..manifest.model import Lesson, Manifest
from .markup import BANNER_START
from .navigation import INDEX_FILE


def check_page_paths(manifest: Manifest) -> None:
    """Refuse two lessons whose pages would be one file, or a page that would overwrite a lesson's prose, or
    a file render did not write, or a page or README.md that is a symbolic link.

    A page lies beside its source unless `page.path` says otherwise, so two
    lessons whose sources share a folder need a path for one of them. A link
    would be read through (`render --check` would show what it points at, maybe
    outside the course, in its diff) and then replaced by a file.
    """
    index_file = manifest.root / INDEX_FILE
    if index_file.is_symlink():
        raise TemplateError(f"is a symbolic link (to {os.readlink(index_file)}); render rewrites the lessons table "
                            f"in it, so it must be a file of the course", path=INDEX_FILE,
                            hint=f"put the text of {INDEX_FILE} in its place, as a file")
    owners: dict[Path, Lesson] = {}
    prose = {(manifest.root / l.prose).resolve(): l for l in manifest.lessons if l.prose is not None}
    for index, lesson in enumerate(manifest.lessons):
        if lesson.group and index and manifest.lessons[index - 1].group == lesson.group:
            continue   # the runs of one lesson share its page
        page = manifest.root / lesson.page_path
        path = page.resolve()
        given = lesson.page is not None and lesson.page.path is not None
        line = manifest.line_of("lessons", index, "page", "path") if given else manifest.line_of("lessons", index)
        where = "its page.path" if given else "its page, beside its source,"
        if path in owners:
            first = owners[path]
            own = (lesson.page_path.parent / f"{lesson.binary_name}.md").as_posix()
            raise ManifestError(f"lesson {lesson.id!r}: {where} would be {lesson.page_path.as_posix()}, the page of "
                                f"lesson {first.id!r} too", path=manifest.path, line=line,
                                hint=f"give one of them its own page: page: {{path: {own}}}")
        if path in prose or path == (manifest.root / INDEX_FILE).resolve():
            what = f"the prose of lesson {prose[path].id!r}" if path in prose else "the course's index"
            raise ManifestError(f"lesson {lesson.id!r}: {where} would be {lesson.page_path.as_posix()}, {what}",
                                path=manifest.path, line=line,
                                hint=f"give the page a name of its own: page: {{path: {lesson.binary_name}.md}}")
        if page.is_symlink():
            raise ManifestError(f"lesson {lesson.id!r}: {where} would be {lesson.page_path.as_posix()}, a symbolic "
                                f"link (to {os.readlink(page)}); render writes each page as a file of its own",
                                path=manifest.path, line=line,
                                hint=f"remove the link {lesson.page_path.as_posix()}: render writes the page there")
        if not _written_by_render(page):
            own = (lesson.source.parent / f"{lesson.binary_name}.md").as_posix()
            raise ManifestError(f"lesson {lesson.id!r}: {where} would be {lesson.page_path.as_posix()}, a file "
                                f"render did not write (its first line is not render's banner, "
                                f"{BANNER_START.strip()} ...); render overwrites only the pages it wrote",
                                path=manifest.path, line=line,
                                hint=f"give the page a path of its own, such as page: {{path: {own}}}, or move "
                                     f"{lesson.page_path.as_posix()} away if render may replace it")
        owners[path] = lesson


def _written_by_render(page: Path) -> bool:
    """Whether render may overwrite `page`: there is none yet, or its first line is render's banner."""
    start = BANNER_START.encode("utf-8")
    try:
        with page.open("rb") as handle:
            return handle.read(len(start)) == start
    except FileNotFoundError:
        return True
