"""lessons.yaml: the course's one manifest, loaded into pydantic models.

Every error names the file, the line, the lesson and the field path, e.g.
``lessons.yaml:42: lesson 'day13-shared-memory': output.items[3].columns.gbps.compare: unknown comparison 'aprox'``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)
from pydantic.json_schema import SkipJsonSchema

from ..transcript.claims import check_claims
from ..errors import CoursectlError, ManifestError, TemplateError, UsageError
from ..render.figures import PageSpec, PageSpecError, check_page
from ..names import ARCH, COMPUTE_CAPABILITY, LESSON_ID, SNIPPET_NAME
from ..cuda.sanitizer import ExpectedFinding, Tool
from ..transcript.schema import COUNT_TAGS, Item, OutputSchema, Strict
from .shorthand import entry_id, lesson_long_form, long_entry, relocate_lines, with_defaults
from .snippets import extract_snippets
from .yamlfile import line_of, load_yaml


# A timeout's bounds: a day at most, for `.inf` (or 1e300) would never stop a hung lesson.
MAX_TIMEOUT = 86_400.0
_TIMEOUT = {"exclusiveMinimum": 0, "maximum": MAX_TIMEOUT}


def _check_timeout(value: float | None) -> float | None:
    if value is None:
        return value
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{value:g} is not a number of seconds above 0; give the seconds after which a hung "
                         f"run is killed")
    if value > MAX_TIMEOUT:
        raise ValueError(f"{value:g} s would never stop a hung run; give at most {MAX_TIMEOUT:g} s (a day)")
    return value


class SanitizerPass(Strict):
    """One compute-sanitizer tool run on a lesson, and what it must find."""

    findings: list[ExpectedFinding] = []
    allow_other: bool = False
    timeout: float | None = Field(default=None, json_schema_extra=_TIMEOUT)
    args: list[str] = []          # extra compute-sanitizer arguments
    program_args: list[str] = []  # the lesson's own arguments under this pass, after its `args`

    _timeout = field_validator("timeout")(_check_timeout)


SANITIZER_TOOLS = tuple(tool.value for tool in Tool)


# The short form `- ID: TEXT`: any key holding a dash is the id (no key of the manifest holds one).
_SHORT_FORM = {"-": {"type": "string", "description": "the short form: the id as the key, the text as its value"}}


def _claim_schema(schema: dict) -> None:
    schema["oneOf"] = [{"required": ["gate"]}, {"required": ["expect"]}]
    schema["required"] = [key for key in schema.get("required", []) if key != "id"]
    schema["patternProperties"] = _SHORT_FORM


class Claim(Strict):
    """An assertion over parsed fields: a gate fails verify, an expect is only reported.

    `- no-kernel-spills: ptxas keeps every kernel in registers` is short for
    `{id: no-kernel-spills, says: ptxas keeps every kernel in registers}`.
    """

    model_config = ConfigDict(json_schema_extra=_claim_schema)

    id: str
    gate: str | None = None
    expect: str | None = None
    each: str | None = None
    where: str | None = None
    says: str = ""

    @model_validator(mode="before")
    @classmethod
    def _long_form(cls, data: Any) -> Any:
        return long_entry(data, "says")

    @model_validator(mode="after")
    def _one_kind(self) -> "Claim":
        if (self.gate is None) == (self.expect is None):
            raise ValueError("a claim has exactly one of 'gate' or 'expect'")
        return self

    @property
    def kind(self) -> str:
        return "gate" if self.gate is not None else "expect"

    @property
    def expression(self) -> str:
        return self.gate if self.gate is not None else self.expect  # type: ignore[return-value]


def _pattern(regex) -> dict:
    """A name's shape for the JSON Schema; validation itself says it in its own words.

    `$(?!\n)`: JSON Schema means ECMA-262's `$`, the end of the text, but validators
    written in Python (jsonschema, older check-jsonschema) use `re`, whose `$` also
    matches before a final newline; the lookahead makes both refuse "sm_90\n".
    """
    return {"pattern": rf"^{regex.pattern}$(?!\n)"}


_TOOLS_SCHEMA = {"propertyNames": {"enum": list(SANITIZER_TOOLS)}}


def _lesson_schema(schema: dict) -> None:
    """The short forms: `- ID: TITLE`, `day` from the id, `source` from the folder, `output` as a list."""
    schema["required"] = [key for key in schema.get("required", []) if key not in ("id", "title", "day", "source")]
    # The id as a key must have the shape of an id (and a dash): a key of another shape is unknown.
    schema["patternProperties"] = {rf"^(?=.*-){LESSON_ID.pattern}$(?!\n)": _SHORT_FORM["-"]}


def _output_items(value: Any) -> Any:
    """`output: [...]` is short for `output: {items: [...]}`."""
    return {"items": value} if isinstance(value, list) else value


OutputOrItems = Annotated[OutputSchema,
                          BeforeValidator(_output_items, json_schema_input_type=OutputSchema | list[Item])]


class Lesson(Strict):
    """One lesson. docs/schema.md says which keys may be left out, and what they then are."""

    model_config = ConfigDict(json_schema_extra=_lesson_schema)

    id: str = Field(json_schema_extra=_pattern(LESSON_ID))
    day: int = Field(ge=0)
    title: str
    source: Path = Field(json_schema_extra={"minLength": 1})
    flags: list[str] | None = None
    args: list[str] = []
    timeout: float | None = Field(default=None, json_schema_extra=_TIMEOUT)
    min_compute_capability: str | None = Field(default=None, json_schema_extra=_pattern(COMPUTE_CAPABILITY))
    sanitizers: dict[str, SanitizerPass] | None = Field(default=None, json_schema_extra=_TOOLS_SCHEMA)
    output: OutputOrItems
    claims: list[Claim] = []
    prose: Path | None = Field(default=None, json_schema_extra={"minLength": 1})
    page: PageSpec | None = None   # where its page is written, and what it shows: Key figures and charts
    source_header: bool = True     # false: render never writes its Build/Run/Verified lines into the source
    # Claims of defaults.claims this lesson does not make; read when the manifest loads.
    skip_claims: list[str] = Field(default=[], exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _long_form(cls, data: Any, info: ValidationInfo) -> Any:
        return lesson_long_form(data, (info.context or {}).get("root"))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not LESSON_ID.fullmatch(value):
            raise ValueError(f"lesson id {value!r} must be lower-case letters, digits and dashes")
        return value

    @field_validator("source", "prose", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        # An empty string would be Path(""), which is ".", the course root itself.
        if isinstance(value, str) and not value.strip():
            what = "the lesson's .cu file" if info.field_name == "source" else "its prose, a Markdown file"
            raise ValueError(f"an empty path; give {what}, relative to the course root")
        return value

    _timeout = field_validator("timeout")(_check_timeout)

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str] | None) -> list[str] | None:
        return _check_flags(value)

    @field_validator("sanitizers")
    @classmethod
    def _tools(cls, value: dict | None) -> dict | None:
        return _check_tools(value)

    @field_validator("min_compute_capability")
    @classmethod
    def _cc(cls, value: str | None) -> str | None:
        if value is not None and not COMPUTE_CAPABILITY.fullmatch(value):
            raise ValueError(f"compute capability {value!r} must look like 8.0")
        return value

    @property
    def binary_name(self) -> str:
        return self.source.stem

    @property
    def page_path(self) -> Path:
        """Its page, relative to the course root: `page.path`, else README.md beside its source."""
        if self.page is not None and self.page.path is not None:
            return self.page.path
        return self.source.parent / "README.md"


def _check_tools(value: dict | None) -> dict | None:
    for tool in value or {}:
        if tool not in SANITIZER_TOOLS:
            raise ValueError(f"unknown sanitizer tool {tool!r}; use {', '.join(SANITIZER_TOOLS)}")
    return value


def _check_flags(value: list[str] | None) -> list[str] | None:
    """coursectl never uses a shell, but nvcc re-quotes -D values for its host compiler
    inside one: a `$` or a backquote in a flag would run a command."""
    for flag in value or []:
        if "$" in flag or "`" in flag:
            raise ValueError(f"flag {flag!r} holds '$' or '`', which nvcc's own host-compiler "
                             f"step would expand in a shell; write the value without them")
    return value


class Defaults(Strict):
    """What every lesson has unless it says otherwise.

    `output` and `claims` are joined into each lesson when the manifest loads
    (shorthand.with_defaults), so a lesson holds all of its own; they are left
    out of a dump, which shows each lesson as it ends up.
    """

    flags: list[str] = ["-std=c++17", "-O3"]
    timeout: float = Field(default=60.0, json_schema_extra=_TIMEOUT)
    sanitizers: dict[str, SanitizerPass] = Field(default={"memcheck": SanitizerPass()},
                                                 json_schema_extra=_TOOLS_SCHEMA)
    output: list[Item] = Field(default=[], exclude=True)     # the items every lesson's output starts with
    claims: list[Claim] = Field(default=[], exclude=True)    # the claims every lesson makes

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        return _check_flags(value)

    @field_validator("sanitizers")
    @classmethod
    def _tools(cls, value: dict) -> dict:
        return _check_tools(value)

    _timeout = field_validator("timeout")(_check_timeout)


class Manifest(Strict):
    version: Literal[1] = 1
    course: str = ""
    architectures: list[str] = Field(default=["sm_90"],
                                     json_schema_extra={"items": {"type": "string", **_pattern(ARCH)}})
    defaults: Defaults = Defaults()
    lessons: list[Lesson]

    # Set by load_manifest, not read from YAML.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"patternProperties": {"^x-": {}}})
    root: SkipJsonSchema[Path] = Field(default=Path("."), exclude=True)
    path: SkipJsonSchema[Path] = Field(default=Path("lessons.yaml"), exclude=True)
    lines: SkipJsonSchema[dict] = Field(default_factory=dict, exclude=True)   # key path -> its line in lessons.yaml
    # What is worth saying but not wrong, one `path:line: ...` line each, for the CLI to print.
    warnings: SkipJsonSchema[list[str]] = Field(default=[], exclude=True)

    def line_of(self, *key: str | int) -> int | None:
        """The line in lessons.yaml of a key path such as ("lessons", 2, "claims", 0)."""
        return line_of(self.lines, key)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if isinstance(value, bool):   # `true` is 1 to pydantic's Literal[1]
            raise ValueError(f"unknown value {value!r}; expected 1")
        return value

    @model_validator(mode="before")
    @classmethod
    def _join_defaults(cls, data: Any) -> Any:
        return with_defaults(data)

    @field_validator("architectures")
    @classmethod
    def _archs(cls, value: list[str]) -> list[str]:
        for arch in value:
            if not ARCH.fullmatch(arch):
                raise ValueError(f"architecture {arch!r} must look like sm_90")
        if not value:
            raise ValueError("list at least one architecture")
        twice = next((arch for index, arch in enumerate(value) if arch in value[:index]), None)
        if twice is not None:
            raise ValueError(f"architecture {twice!r} is listed twice")
        return value

    def lesson(self, lesson_id: str) -> Lesson:
        for lesson in self.lessons:
            if lesson.id == lesson_id:
                return lesson
        raise KeyError(lesson_id)

    def flags(self, lesson: Lesson) -> list[str]:
        return list(lesson.flags if lesson.flags is not None else self.defaults.flags)

    def timeout(self, lesson: Lesson) -> float:
        return lesson.timeout if lesson.timeout is not None else self.defaults.timeout

    def sanitizers(self, lesson: Lesson) -> dict[str, SanitizerPass]:
        return dict(lesson.sanitizers if lesson.sanitizers is not None else self.defaults.sanitizers)

    def source_path(self, lesson: Lesson) -> Path:
        return self.root / lesson.source


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
    root = path.resolve().parent

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

    for reserved in ("root", "path", "lines", "warnings"):
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
    seen: dict[str, int] = {}
    days: dict[int, Lesson] = {}
    for index, lesson in enumerate(manifest.lessons):
        if lesson.id in seen:
            raise fail(("lessons", index, "id"),
                       f"duplicate lesson id (also lessons[{seen[lesson.id]}])")
        seen[lesson.id] = index
        _check_day(manifest, index, days, fail)
        for key in ("source", "prose"):
            rel = getattr(lesson, key)
            if rel is None:
                continue
            full = (root / rel).resolve()
            if not full.is_relative_to(root):
                raise fail(("lessons", index, key), f"{rel} lies outside the course root {root}")
            if rel.is_absolute():
                raise fail(("lessons", index, key),
                           f"{rel} is absolute; give it relative to the course root {root}")
            if full.is_dir():
                if key == "source":
                    sources = ", ".join(sorted(p.name for p in full.glob("*.cu")))
                    want = f"the lesson's .cu file in it ({sources})" if sources else "the lesson's .cu file"
                else:
                    want = "its prose, a Markdown file"
                raise fail(("lessons", index, key), f"{rel} is a folder; give {want}")
            if not full.is_file():
                raise fail(("lessons", index, key), f"{rel} does not exist")
        if lesson.page is not None and lesson.page.path is not None:
            _check_page_path(manifest, lesson.page.path, ("lessons", index, "page", "path"), fail)
        _check_sanitizer_snippets(manifest, lesson, index, fail)
        known: dict = {}
        for c_index, claim in enumerate(lesson.claims):
            try:
                check_claims(lesson.output, claim, known)
            except ValueError as exc:
                field = "gate" if claim.gate is not None else "expect"
                sub = field
                text = str(exc)
                if text.startswith("each:"):
                    sub, text = "each", text[5:].strip()
                elif text.startswith("where:"):
                    sub, text = "where", text[6:].strip()
                raise fail(("lessons", index, "claims", c_index, sub), text) from None
        if lesson.page is not None:
            try:
                check_page(lesson.output, lesson.page)
            except PageSpecError as exc:
                raise fail(("lessons", index, "page", *exc.loc), str(exc)) from None
        _check_claim_ids(manifest, lesson, index, fail)
        for at, regex in lesson.output.patterns():
            regex.origin = f"{path}:{line_of(lines, ('lessons', index, 'output', *at))}"
    return manifest


def _check_page_path(manifest: Manifest, rel: Path, loc: tuple, fail) -> None:
    """A page path names a Markdown file inside the course that render may own."""
    root = manifest.root
    if rel.is_absolute():
        raise fail(loc, f"{rel} is absolute; give it relative to the course root {root}")
    if not (root / rel).resolve().is_relative_to(root):
        raise fail(loc, f"{rel} lies outside the course root {root}")
    if rel.suffix != ".md":
        raise fail(loc, f"{rel} is not a Markdown file: a page's name ends in .md")
    if (root / rel).resolve() == (root / "README.md").resolve():
        raise fail(loc, f"{rel} is the course's README.md, which holds the lessons table")
    if (root / rel).is_dir():
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
                names = extract_snippets(manifest.source_path(lesson), str(lesson.source))
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
                           f"no snippet {finding.snippet!r} in {lesson.source} "
                           f"(it has {', '.join(sorted(names)) or 'none'})")


def select_lessons(manifest: Manifest, ids: list[str], all_: bool) -> list[Lesson]:
    """The lessons a command names, in manifest order; unknown ids are a usage error."""
    if all_ or not ids:
        if not all_ and not ids:
            raise UsageError("name at least one lesson or pass --all",
                             hint=f"lessons: {', '.join(l.id for l in manifest.lessons)}")
        return list(manifest.lessons)
    known = {lesson.id for lesson in manifest.lessons}
    for ident in ids:
        if ident not in known:
            raise UsageError(f"no lesson {ident!r} in {manifest.path}",
                             hint=f"lessons: {', '.join(sorted(known))}")
    return [lesson for lesson in manifest.lessons if lesson.id in ids]
