"""lessons.yaml's models: the course, its defaults, each lesson, its claims and sanitizer passes.

manifest/load.py reads lessons.yaml into them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator,
                      model_validator)
from pydantic.json_schema import SkipJsonSchema

from .flags import flag_problem, sanitizer_arg_problem
from .page import PageSpec
from ..errors import UsageError
from ..names import ARCH, COMPUTE_CAPABILITY, LESSON_ID, check_arch
from .passes import ExpectedFinding, Tool
from .snippets import SnippetSpec
from ..transcript.schema import Item, OutputSchema
from ..transcript.fields import Strict
from .shorthand import lesson_long_form, long_entry, with_defaults
from .yamlfile import line_of


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

    findings: list[ExpectedFinding] = Field(default_factory=list)
    allow_other: bool = False
    timeout: float | None = Field(default=None, json_schema_extra=_TIMEOUT)
    args: list[str] = Field(default_factory=list)   # extra compute-sanitizer arguments
    # the lesson's own arguments under this pass, after its `args`
    program_args: list[str] = Field(default_factory=list)

    _timeout = field_validator("timeout")(_check_timeout)

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        problem = sanitizer_arg_problem(value)
        if problem:
            raise ValueError(problem)
        return value


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
    """`output: [...]` is short for `output: {items: [...]}`; an empty `output:` declares no items."""
    if value is None:
        return {"items": []}
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
    # A program of several translation units (.cu, .cpp, .c), compiled and linked as nvcc does; the first is
    # `source`, whose stem names the binary and whose folder nvcc runs in.
    sources: list[Path] | None = Field(default=None, json_schema_extra={"minItems": 1,
                                                                        "items": {"minLength": 1}})
    flags: list[str] | None = None
    args: list[str] = Field(default_factory=list)
    # Variants: one build, several runs of it, each with its own arguments (after `args`), judged as a
    # lesson of its own named `id[run]` (manifest/runs.py); claims may compare them as `runs.NAME.FIELD`.
    runs: dict[str, list[str]] | None = Field(default=None, json_schema_extra={
        "minProperties": 1, "propertyNames": {"pattern": r"^[a-z0-9][a-z0-9_-]*$(?!\n)"}})
    timeout: float | None = Field(default=None, json_schema_extra=_TIMEOUT)
    min_compute_capability: str | None = Field(default=None, json_schema_extra=_pattern(COMPUTE_CAPABILITY))
    sanitizers: dict[str, SanitizerPass] | None = Field(default=None, json_schema_extra=_TOOLS_SCHEMA)
    output: OutputOrItems = Field(default_factory=lambda: OutputSchema(items=[]))   # none: build needs none
    claims: list[Claim] = Field(default_factory=list)
    prose: Path | None = Field(default=None, json_schema_extra={"minLength": 1})
    page: PageSpec | None = None   # where its page is written, and what it shows: Key figures and charts
    source_header: bool = True     # false: render never writes its Build/Run/Verified lines into the source
    # Rules that check less than when the evidence was recorded, each with why (judge/rules.py names them:
    # `field kernels.ms`, `gate nothing-failed`, `pass racecheck`): a note instead of STALE.
    weakened: dict[str, str] = Field(default_factory=dict)
    # Claims of defaults.claims this lesson does not make; read when the manifest loads.
    skip_claims: list[str] = Field(default=[], exclude=True)
    # true: defaults.output does not start this lesson's output (a program that does not print it).
    skip_output: bool = Field(default=False, exclude=True)
    # Snippets by function name or line range, for a source the course must not edit (no markers).
    snippets: dict[str, SnippetSpec] = Field(default_factory=dict)
    # Set when `runs` is written out (manifest/runs.py), not read from YAML: the run's name, the lesson's id.
    run: SkipJsonSchema[str | None] = Field(default=None, exclude=True)
    group: SkipJsonSchema[str | None] = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _long_form(cls, data: Any, info: ValidationInfo) -> Any:
        return lesson_long_form(_first_source(data), (info.context or {}).get("root"))

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

    @field_validator("sources", mode="before")
    @classmethod
    def _units(cls, value: Any) -> Any:
        return _check_units(value)

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str] | None) -> list[str] | None:
        return _check_flags(value)

    @field_validator("runs")
    @classmethod
    def _runs(cls, value: dict | None) -> dict | None:
        if value is not None and not value:
            raise ValueError("an empty mapping; name each run and its arguments, e.g. {basic: [], shared: [shared]}")
        for name in value or {}:
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
                raise ValueError(f"run name {name!r} must be lower-case letters, digits, '_' and '-'")
        return value

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
    def source_files(self) -> list[Path]:
        """Every translation unit of its program, relative to the course root: `sources`, else `[source]`."""
        return list(self.sources) if self.sources else [self.source]

    @property
    def page_path(self) -> Path:
        """Its page, relative to the course root: `page.path`, else README.md beside its source."""
        if self.page is not None and self.page.path is not None:
            return self.page.path
        return self.source.parent / "README.md"


# What nvcc compiles as a translation unit of a lesson's program: CUDA, C++ and C.
UNIT_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def _first_source(data: Any) -> Any:
    """`sources: [a.cu, b.cu]` makes `source` its first file; a lesson gives one of the two keys, not both."""
    if isinstance(data, dict) and "sources" in data:
        if "source" in data:
            raise ValueError("give 'source' (one file) or 'sources' (several), not both")
        units = data["sources"]
        _check_units(units)
        if isinstance(units, list) and units and isinstance(units[0], str):
            data = {**data, "source": units[0]}
    return data


def _check_units(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    if not value:
        raise ValueError("an empty list; name the program's files (.cu, .cpp, .c), relative to the course root")
    for index, unit in enumerate(value):
        if isinstance(unit, str) and not unit.strip():
            raise ValueError(f"item {index}: an empty path; give a .cu, .cpp or .c file, relative to the course root")
        if isinstance(unit, str) and not unit.endswith(UNIT_SUFFIXES):
            raise ValueError(f"item {index}: {unit!r} is no translation unit; 'sources' lists the files nvcc "
                             f"compiles ({', '.join(UNIT_SUFFIXES)}), and a header is found by its #include")
        if isinstance(unit, str) and unit in value[:index]:
            raise ValueError(f"item {index}: {unit!r} is listed twice")
    return value


def _check_tools(value: dict | None) -> dict | None:
    for tool in value or {}:
        if tool not in SANITIZER_TOOLS:
            raise ValueError(f"unknown sanitizer tool {tool!r}; use {', '.join(SANITIZER_TOOLS)}")
    return value


def _check_flags(value: list[str] | None) -> list[str] | None:
    """coursectl never uses a shell, but nvcc hands its values to one for its own steps: manifest/flags.py
    says which characters reach it where, and which flags are coursectl's."""
    problem = flag_problem(value or [])
    if problem:
        raise ValueError(problem)
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
    # Days the course has no lesson for, by number, and the URL a mention of each in prose links to.
    external_days: dict[int, str] = Field(default_factory=dict)
    lessons: list[Lesson]

    # Set by load_manifest, not read from YAML.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"patternProperties": {"^x-": {}}})
    root: SkipJsonSchema[Path] = Field(default=Path("."), exclude=True)
    path: SkipJsonSchema[Path] = Field(default=Path("lessons.yaml"), exclude=True)
    lines: SkipJsonSchema[dict] = Field(default_factory=dict, exclude=True)   # key path -> its line in lessons.yaml
    # What is worth saying but not wrong, one `path:line: ...` line each, for the CLI to print.
    warnings: SkipJsonSchema[list[str]] = Field(default=[], exclude=True)
    # The claims that compare runs, by the id of the lesson whose `runs` they compare (manifest/runs.py).
    run_claims: SkipJsonSchema[dict[str, list[Claim]]] = Field(default_factory=dict, exclude=True)
    _sources: dict[str, tuple[Path, Path]] = PrivateAttr(default_factory=dict)   # source_path's, by lesson.source

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
            try:
                check_arch(arch, "architecture")
            except UsageError as exc:   # pydantic turns a ValueError into the manifest's error
                raise ValueError(exc.message) from None
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
        # Asked for eight times a lesson in a verify: made once, while the root is the one it was made under.
        made = self._sources.get(lesson.source)
        if made is None or made[0] is not self.root:
            made = self._sources[lesson.source] = (self.root, self.root / lesson.source)
        return made[1]

    def source_paths(self, lesson: Lesson) -> list[Path]:
        """Every translation unit of the lesson's program, the source first."""
        return [self.root / unit for unit in lesson.source_files]


