"""Loading lessons.yaml: the YAML read with each key's line, the short forms written out, the models
validated, and the checks that span lessons (ids, days, page paths, snippets).

Every error names the file, the line, the lesson and the field path, e.g.
``lessons.yaml:42: lesson 'day13-shared-memory': output.items[3].columns.gbps.compare: unknown comparison 'aprox'``.
"""

from __future__ import annotations

import functools
import gc
import os
from pathlib import Path

from pydantic import ValidationError

from ..errors import CoursectlError, ManifestError, TemplateError
from ..files import link_out, relative
from ..names import SNIPPET_NAME
from ..transcript.claims import ClaimError, check_claims
from ..transcript.schema import COUNT_TAGS
from .model import Lesson, Manifest
from .page import PageSpecError, check_page
from .runs import expand_runs, split_claims
from ..collector import freeze_more
from .shorthand import entry_id, relocate_lines
from .snippets import lesson_snippets
from .yamlfile import line_of, load_yaml


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _strip_tags(loc: tuple) -> tuple:
    """Drop the union tags pydantic inserts: after an output item's index, and after `rows` or `repeat`."""
    out: list = []
    skip = False
    for i, part in enumerate(loc):
        if skip:
            skip = False
            continue
        out.append(part)
        if isinstance(part, int) and i >= 1 and loc[i - 1] == "items" and i + 1 < len(loc) \
                and loc[i + 1] in ("line", "table", "section", "text"):
            skip = True
        if part in ("rows", "repeat") and i + 1 < len(loc) and loc[i + 1] in COUNT_TAGS:
            skip = True
    return tuple(out)


def _message(error: dict) -> str:
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        return f"unknown key {loc[-1]!r}"
    if kind == "missing":
        return f"missing key {loc[-1]!r}"
    if kind == "enum" or kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        what = "comparison" if loc and loc[-1] == "compare" else "value"
        return f"unknown {what} {error['input']!r}; expected {expected}"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    return f"{error['msg']} (got {error['input']!r})" if "input" in error and not isinstance(
        error["input"], (dict, list)) else error["msg"]


def _collector_off(load):
    """`load` with Python's cycle collector off while it runs, and back on (if it was) when it returns or raises.

    Loading allocates objects by the hundred thousand and frees none, and the collections that triggered
    scanned them again and again, so 1,000 lessons took 28 times as long as 100 (the YAML walk alone); with
    it off, 10 times. What loading builds holds no garbage cycles.
    """
    @functools.wraps(load)
    def wrapper(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            loaded = load(*args, **kwargs)
            freeze_more()   # inside a command it lasts as long as the command (collector.py): never scanned
            return loaded
        finally:
            if enabled:
                gc.enable()
    return wrapper


@_collector_off
def load_manifest(path: Path) -> Manifest:
    """Load and check lessons.yaml; raise ManifestError naming file, line, lesson and field."""
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise ManifestError("the manifest must be a mapping with a 'lessons' list", path=path, line=1)
    # Top-level x- keys hold fragments for anchors to share, as in compose files; nothing reads them.
    data = {key: value for key, value in data.items() if not (isinstance(key, str) and key.startswith("x-"))}
    raw_lessons = data.get("lessons") if isinstance(data.get("lessons"), list) else []
    lines = relocate_lines(data, lines)
    # The course is the folder the manifest is named in, its own links (lessons.yaml linked to another
    # course's) not followed: the folder itself, resolved, for comparing with where its files lead.
    root = Path(os.path.normpath(path.absolute())).parent.resolve()

    def fail(loc: tuple, message: str) -> ManifestError:
        lesson = ""
        rest = loc
        if len(loc) >= 2 and loc[0] == "lessons" and isinstance(loc[1], int):
            entry = raw_lessons[loc[1]] if loc[1] < len(raw_lessons) else None
            ident = entry_id(entry)
            lesson = f"lesson {ident!r}: " if isinstance(ident, str) and ident else f"lessons[{loc[1]}]: "
            rest = loc[2:]
        field = f"{_format_loc(rest)}: " if rest else ""
        return ManifestError(f"{lesson}{field}{message}", path=path, line=line_of(lines, loc))

    for reserved in ("root", "path", "lines", "warnings", "run_claims"):
        if reserved in data:
            raise fail((reserved,), f"unknown key {reserved!r}")
    try:
        manifest = Manifest.model_validate(data, context={"root": root})
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: line_of(lines, _strip_tags(e["loc"])) or 0)
        first = errors[0]
        loc = _strip_tags(first["loc"])
        message = _message(first)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
        raise fail(loc, message) from None

    manifest.root = root
    manifest.path = path
    manifest.lines = lines
    for index, entry in enumerate(raw_lessons):
        for reserved in ("run", "group"):
            if isinstance(entry, dict) and reserved in entry:
                raise fail(("lessons", index, reserved), f"unknown key {reserved!r}")
    split_claims(manifest, fail)
    seen: dict[str, int] = {}
    days: dict[int, Lesson] = {}
    readme: list[str] = []   # where README.md leads, looked up once (_check_page_path)
    for index, lesson in enumerate(manifest.lessons):
        if lesson.id in seen:
            raise fail(("lessons", index, "id"),
                       f"duplicate lesson id (also lessons[{seen[lesson.id]}])")
        seen[lesson.id] = index
        _check_day(manifest, index, days, fail)
        checked = [("source", lesson.source, ("lessons", index, "source")), *(
            ("source", unit, ("lessons", index, "sources", n)) for n, unit in enumerate(lesson.sources or [])),
            ("prose", lesson.prose, ("lessons", index, "prose"))]
        for key, rel, at in checked:
            if rel is None:
                continue
            full = (root / rel).resolve()
            if (out := link_out(root / rel, root)) is not None:
                raise fail(at, _leaves(out, root))
            if not full.is_relative_to(root):
                raise fail(at, f"{rel} lies outside the course root {root}")
            if rel.is_absolute():
                raise fail(at,
                           f"{rel} is absolute; give it relative to the course root {root}")
            if full.is_dir():
                if key == "source":
                    sources = ", ".join(sorted(p.name for p in full.glob("*.cu")))
                    want = f"the lesson's .cu file in it ({sources})" if sources else "the lesson's .cu file"
                else:
                    want = "its prose, a Markdown file"
                raise fail(at, f"{rel} is a folder; give {want}")
            if not full.is_file():
                raise fail(at, f"{rel} does not exist")
        if lesson.page is not None and lesson.page.path is not None:
            _check_page_path(manifest, lesson.page.path, ("lessons", index, "page", "path"), fail, readme)
        _check_sanitizer_snippets(manifest, lesson, index, fail)
        known: dict = {}
        for c_index, claim in enumerate(lesson.claims):
            try:
                check_claims(lesson.output, claim, known)
            except ClaimError as exc:
                raise fail(("lessons", index, "claims", c_index, *exc.loc), exc.reason) from None
        if lesson.page is not None:
            try:
                check_page(lesson.output, lesson.page)
            except PageSpecError as exc:
                raise fail(("lessons", index, "page", *exc.loc), str(exc)) from None
        _check_claim_ids(manifest, lesson, index, fail)
        for at, regex in lesson.output.patterns():
            regex.origin = f"{path}:{line_of(lines, ('lessons', index, 'output', *at))}"
    expand_runs(manifest)
    return manifest


def _leaves(out: tuple[Path, Path], root: Path) -> str:
    link, target = out
    return (f"{relative(link, root)} is a link to {target}, outside the course; coursectl reads and writes "
            f"nothing of the course through a link that leads out of it")


def _check_page_path(manifest: Manifest, rel: Path, loc: tuple, fail, readme: list[str]) -> None:
    """A page path names a Markdown file inside the course that render may own. `readme` holds where the
    course's README.md leads once a check has looked (the same for every page)."""
    root = manifest.root
    if rel.is_absolute():
        raise fail(loc, f"{rel} is absolute; give it relative to the course root {root}")
    if (out := link_out(root / rel, root)) is not None:
        raise fail(loc, _leaves(out, root))
    real = os.path.realpath(root / rel)
    if not Path(real).is_relative_to(root):
        raise fail(loc, f"{rel} lies outside the course root {root}")
    if rel.suffix != ".md":
        raise fail(loc, f"{rel} is not a Markdown file: a page's name ends in .md")
    if not readme:
        readme.append(os.path.realpath(root / "README.md"))
    if real == readme[0]:
        raise fail(loc, f"{rel} is the course's README.md, which holds the lessons table")
    if os.path.isdir(real):
        raise fail(loc, f"{rel} is a folder")


def _check_claim_ids(manifest: Manifest, lesson: Lesson, index: int, fail) -> None:
    inherited = [claim.id for claim in manifest.defaults.claims]
    for s_index, ident in enumerate(lesson.skip_claims):
        if ident not in inherited:
            raise fail(("lessons", index, "skip_claims", s_index),
                       f"no claim {ident!r} in defaults.claims to skip "
                       f"({'it has ' + ', '.join(inherited) if inherited else 'it has none'})")
    ids = [c.id for c in lesson.claims]
    for c_index, ident in enumerate(ids):
        if ids.index(ident) != c_index:
            also = (" (defaults.claims has it too: name it in skip_claims to make only the lesson's own)"
                    if ident in inherited else "")
            raise fail(("lessons", index, "claims", c_index, "id"), f"duplicate claim id {ident!r}{also}")


def _check_day(manifest: Manifest, index: int, days: dict[int, Lesson], fail) -> None:
    """Warn where file order and day order part: pages and the index go by day, commands by file."""
    lesson = manifest.lessons[index]
    before = manifest.lessons[index - 1] if index else None
    if lesson.day in days:
        text = (f"day {lesson.day} is also the day of lesson {days[lesson.day].id!r}; a mention of "
                f"'day {lesson.day}' in prose links to the first of them")
    elif before is not None and lesson.day < before.day:
        text = (f"day {lesson.day} comes after day {before.day} (lesson {before.id!r}); the pages and the index "
                f"list lessons in day order, but commands take them in lessons.yaml's order")
    else:
        text = None
    if text is not None:
        manifest.warnings.append(str(fail(("lessons", index, "day"), text)))
    days.setdefault(lesson.day, lesson)


def _check_sanitizer_snippets(manifest: Manifest, lesson: Lesson, index: int, fail) -> None:
    for tool, spec in (lesson.sanitizers or {}).items():
        for f_index, finding in enumerate(spec.findings):
            if finding.snippet is None:
                continue
            if not SNIPPET_NAME.fullmatch(finding.snippet):
                raise fail(("lessons", index, "sanitizers", tool, "findings", f_index, "snippet"),
                           f"snippet name {finding.snippet!r} must be letters, digits, '_', '.' and '-'")
            try:
                names = lesson_snippets(manifest.source_paths(lesson), lesson.source_files)
            except TemplateError as exc:
                # The fault is in the source: its file and line come first, the entry that reads it after.
                line = manifest.line_of("lessons", index, "sanitizers", tool, "findings", f_index, "snippet")
                raise TemplateError(f"{exc.message}; lesson {lesson.id!r} reads the snippets of this file "
                                    f"({manifest.path}:{line}, sanitizers.{tool}.findings[{f_index}].snippet)",
                                    path=exc.path, line=exc.line, hint=exc.hint) from None
            except CoursectlError as exc:   # a source that cannot be read as text
                raise fail(("lessons", index, "sanitizers", tool, "findings", f_index, "snippet"), str(exc))
            if finding.snippet not in names:
                raise fail(("lessons", index, "sanitizers", tool, "findings", f_index, "snippet"),
                           f"no snippet {finding.snippet!r} in {', '.join(map(str, lesson.source_files))} "
                           f"(it has {', '.join(sorted(names)) or 'none'})")
