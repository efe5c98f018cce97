"""A field of a lesson's output: its type, how its text converts, and how it is judged against evidence.

`Strict` is the base of every model lessons.yaml is read into.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from enum import Enum
from typing import Any, Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..names import is_identifier
from ..words import quoted


def check_field_name(name: str, where: str = "") -> str:
    """`name` if it can name a field (a column, a placeholder); else ValueError saying so, the name shown
    with any hidden character escaped and `where` (`in 'n = {x-y:int}'`) naming the item."""
    if not is_identifier(name):
        raise ValueError(f"field name {quoted(name)}{' ' + where if where else ''} is not an identifier: "
                         f"letters, digits and _ only, not starting with a digit")
    return name


class Strict(BaseModel):
    """What lessons.yaml is read into: no key it does not know, and `true` or `false` only where a truth value goes.

    pydantic takes `true` for 1 in a number (`timeout: true` ran with a
    one-second timeout, `rel: true` was a tolerance of 100%) and in a
    Literal[1]; here every field that takes no bool refuses one, naming it.
    """

    model_config = ConfigDict(extra="forbid", frozen=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_truth_value_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool):
            types = _types(cls.model_fields[info.field_name].annotation)
            if not types & {bool, Any}:
                wanted = "a number" if types & {int, float} else "what this key takes"
                raise ValueError(f"{str(value).lower()} is a truth value, not {wanted}")
        return value


def _types(annotation: Any) -> set:
    """The types a field's annotation is made of (`float | None` is float and NoneType), Literal values left out."""
    arguments = [argument for argument in get_args(annotation) if isinstance(argument, type) or get_args(argument)
                 or argument is Any]
    return {annotation} | set().union(*map(_types, arguments)) if arguments else {annotation}


class Compare(str, Enum):
    """How a field is judged against recorded evidence."""

    exact = "exact"          # identical on every GPU: sizes, counts, gate arithmetic
    tolerance = "tolerance"  # within rel/abs of this GPU's evidence: timings
    device = "device"        # identical, but only against the same GPU's evidence
    volatile = "volatile"    # recorded, never compared: racy counts


FieldType = Literal["int", "float", "str", "word", "bool", "floats"]


def shorthand_schema(schema: dict) -> None:
    """`name: float` is short for `name: {type: float}`: the JSON Schema says so too."""
    schema["additionalProperties"] = {"anyOf": [schema["additionalProperties"],
                                                {"enum": list(get_args(FieldType))}]}


# `\d+(?:\.\d*)?`, not `\d+\.?\d*`: the second splits a run of digits in as many ways as it is long,
# and a line of 40,000 digits then took 28 s to refuse.
_FLOAT = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"


TYPE_REGEX = {
    "int": r"[-+]?\d+",
    "float": _FLOAT,
    "word": r"\S+",
    "str": r".+?",
    "bool": r"yes|no|true|false",
    # A line of numbers, as many as it holds, apart by blanks or commas: a list of floats.
    "floats": rf"{_FLOAT}(?:(?:[ \t]*,[ \t]*|[ \t]+){_FLOAT})*",
}
_APART = re.compile(r"[ \t]*,[ \t]*|[ \t]+")


def _check_bound(value: float | None, info: ValidationInfo) -> float | None:
    """A tolerance's `rel` or `abs`: a finite number, 0 or more (`.inf` would let any value pass)."""
    if value is None:
        return value
    example = "rel: 0.25 lets a value move by 25%" if info.field_name == "rel" else "abs: 0.003 lets it move by 0.003"
    if math.isnan(value) or value < 0:
        raise ValueError(f"{value:g} is not a bound of 0 or more; give how far a value may move ({example})")
    if math.isinf(value):
        raise ValueError(f"inf would let any value pass; give a finite bound ({example})")
    return value


# The JSON Schema says what check_bound does, where it can: a number of 0 or more (JSON has no .inf).
_BOUND = {"minimum": 0}


class FieldSpec(Strict):
    """A typed field and its comparison rule."""

    type: FieldType = "str"
    compare: Compare = Compare.exact
    rel: float | None = Field(default=None, json_schema_extra=_BOUND)
    abs: float | None = Field(default=None, json_schema_extra=_BOUND)
    missing: str | None = None      # a token that means "no value", such as "-"
    suffix: str | None = None       # stripped from a table cell: "x" in "1.91x"
    unit: str | None = None         # "ms", "GB/s", "GFLOP/s": for reports and plausibility
    label: str | None = None        # a human name for pages and reports

    _bounds = field_validator("rel", "abs")(_check_bound)

    @model_validator(mode="after")
    def _tolerance_needs_bounds(self) -> "FieldSpec":
        if self.compare is Compare.tolerance and self.rel is None and self.abs is None:
            raise ValueError("compare 'tolerance' needs rel, abs or both")
        if self.compare is not Compare.tolerance and (self.rel is not None or self.abs is not None):
            raise ValueError(f"rel/abs only apply to compare 'tolerance', not {self.compare.value!r}")
        if "type" in self.model_fields_set:
            self.check_type()
        return self

    def check_type(self, name: str | None = None) -> "FieldSpec":
        """This spec, once its type is settled: a tolerance is only for numbers.

        A refinement under `fields:` that sets no type takes the one its
        template declares (`{gflops:float}`), so the check waits until then.
        """
        if self.compare is Compare.tolerance and self.type not in ("int", "float", "floats"):
            where = f"field {name!r}: " if name else ""
            raise ValueError(f"{where}compare 'tolerance' needs a number, not type {self.type!r}")
        return self

    def convert(self, text: str) -> Any:
        return _converter(self.type, self.suffix, self.missing)(text)

    def converter(self) -> Callable[[str], Any]:
        """convert as one function of the text, the same for every spec of this type, suffix and missing token:
        a transcript's parser converts each value with it, without asking the spec again."""
        return _converter(self.type, self.suffix, self.missing)

    def value_regex(self) -> str:
        return _value_regex(self.type, self.suffix, self.missing)

    def cell_regex(self) -> re.Pattern:
        """What a cell of a table split on whitespace matches in full when it is a value of this field."""
        return _cell_regex(self.type, self.suffix, self.missing)

    def takes(self, cell: str) -> bool:
        """Whether a cell of a table split on whitespace is a value of this field (before convert)."""
        return _cell_regex(self.type, self.suffix, self.missing).fullmatch(cell) is not None


def _to_int(text: str) -> int:
    text = text.strip()   # stripped already by convert, but not when it is the whole of a field's converter
    if len(text) > _DIGITS_ALWAYS:
        check_digits(text)
    return int(text)


def check_digits(text: str) -> None:
    """NumberTooLong if `text`, an int's, has more digits than Python converts to an int."""
    digits = len(text.lstrip("+-"))
    limit = _INT_DIGITS()
    if limit and digits > limit:
        raise NumberTooLong(text, digits, limit)


def _to_floats(text: str) -> list[float]:
    return [float(part) for part in _APART.split(text) if part]


def _to_bool(text: str) -> bool:
    return text in ("yes", "true")


_CONVERT: dict[str, Callable[[str], Any]] = {"int": _to_int, "float": float, "floats": _to_floats, "bool": _to_bool}


@functools.lru_cache(maxsize=512)
def _converter(type_: str, suffix: str | None, missing: str | None) -> Callable[[str], Any]:
    """A field's text stripped, its missing token None, its suffix cut, then converted by type (a str kept as it
    is). A field with neither token nor suffix, most of them, strips and converts in one call."""
    to = _CONVERT.get(type_)
    if missing is None and not suffix:
        if to is None:
            return str.strip
        if to is _to_int:
            return _to_int
        return lambda text: to(text.strip())

    def convert(text: str) -> Any:
        text = text.strip()
        if missing is not None and text == missing:
            return None
        if suffix and text.endswith(suffix):
            text = text[: -len(suffix)]
        return text if to is None else to(text)
    return convert


@functools.lru_cache(maxsize=512)
def _value_regex(type_: str, suffix: str | None, missing: str | None) -> str:
    core = TYPE_REGEX[type_]
    if suffix:
        core = f"(?:{core}){re.escape(suffix)}"
    if missing is not None:
        core = f"(?:{core}|{re.escape(missing)})"
    return core


@functools.lru_cache(maxsize=512)
def _cell_regex(type_: str, suffix: str | None, missing: str | None) -> re.Pattern:
    """A field's value regex compiled, once a process: each cell of each row was matched by its text."""
    return re.compile(_value_regex(type_, suffix, missing))


FieldMap = dict[str, FieldSpec]


# Python before 3.10.7 converts ints of any length, and has no such limit.
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 0)
# Where there is one it is 0 (none) or more than this (sys.set_int_max_str_digits refuses less): a text this
# short converts whatever the limit is set to, without asking for it.
_DIGITS_ALWAYS = getattr(sys.int_info, "str_digits_check_threshold", 0)


class NumberTooLong(ValueError):
    """An int field's text has more digits than Python converts to an int (sys.get_int_max_str_digits, 4300).

    Unlike any other value that does not convert, it is not taken for a line
    that does not match: Pattern.match and TableItem.match_row raise it, and
    the transcript's parser names the line that holds it.
    """

    def __init__(self, text: str, digits: int, limit: int):
        super().__init__(f"the number here has {digits:,} digits, too long to read: Python converts at most "
                         f"{limit:,} digits to an int")
        self.text = text
