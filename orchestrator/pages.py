"""Where render writes a lesson's page: one file per page, of the course's own.

A page lies beside its source (README.md in the source's folder) unless
`page.path` names another file. render refuses, before it renders anything,
two lessons whose pages would be one file, and a page that would be the
course's index or a lesson's prose.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ManifestError
from .manifest import Lesson, Manifest
from .navigation import INDEX_FILE


def check_page_paths(manifest: Manifest) -> None:
    """Refuse two lessons whose pages would be one file, or a page that would overwrite a lesson's prose.

    A page lies beside its source unless `page.path` says otherwise, so two
    lessons whose sources share a folder need a path for one of them.
    """
    owners: dict[Path, Lesson] = {}
    prose = {(manifest.root / l.prose).resolve(): l for l in manifest.lessons if l.prose is not None}
    for index, lesson in enumerate(manifest.lessons):
        path = (manifest.root / lesson.page_path).resolve()
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
        owners[path] = lesson
