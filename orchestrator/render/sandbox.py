"""The sandbox templates render in: they read the data they are given and compute within bounds.

Templates are text anyone can edit. On top of jinja2's sandbox (no `_`
attributes, no Python internals, no list or dict changed in place), a template

- reads only plain data (strings, numbers, lists, tuples, dicts, None), the
  models render hands it (their fields, the properties the course defines on
  them and the methods marked @template_method) and jinja's own loop, macro
  and namespace objects: a path is text to show, not an object to call
  (`.write_text()`, `.unlink()` and `.read_text()` are refused);
- calls only those methods (of strings, only the ones listed in _STR), its
  macros and blocks, its filters, and the functions it is handed: jinja's
  globals and the ones in its data, such as `snippet` and `fence`;
- builds within the bounds of limits.py: strings, lists and numbers of a
  bounded size, nesting of a bounded depth, rendering of a bounded time.

Each refusal is raised as Problem (or _Unsafe), which the renderer turns into
one TemplateError naming the template's file and line.
"""

from __future__ import annotations

import enum
import types
from collections import OrderedDict
from typing import Any, Callable, Iterable

import jinja2
import jinja2.sandbox
import jinja2.utils
from jinja2.runtime import BlockReference, LoopContext, Macro, TemplateReference
from pydantic import BaseModel

from .limits import (MAX_CHARACTERS, CodeGenerator, Output, Problem, bounded, bounded_filter, check_binop, check_call,
                     check_inclusion, check_recursion, lipsum, past_the_bound, short)

_PACKAGE = __name__.partition(".")[0] + "."   # orchestrator.: the models of every stage


class _Unsafe(jinja2.sandbox.SecurityError, Problem):
    """A template reached for what it may not read or call; the renderer names its file and line."""


# -- what a template may read ------------------------------------------------------------
# The methods of strings that compute and change nothing. Those that can make a long string from a short one
# (center, join, replace, format and the like) are bounded where they are called (limits.check_call).
_STR = frozenset(
    "capitalize casefold center count endswith find format format_map index isalnum isalpha isascii isdecimal "
    "isdigit isidentifier islower isnumeric isprintable isspace istitle isupper join ljust lower lstrip partition "
    "removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip split splitlines startswith "
    "strip swapcase title upper zfill".split())

# Plain data and what of it a template may read. bool is an int; str subclasses (Markup) get str's methods only.
_PLAIN: tuple[tuple[type, frozenset[str]], ...] = (
    (str, _STR),
    (int, frozenset({"real", "imag", "numerator", "denominator", "bit_length", "conjugate"})),
    (float, frozenset({"real", "imag", "is_integer", "conjugate"})),
    (list, frozenset({"count", "index"})),
    (tuple, frozenset({"count", "index"})),
    (dict, frozenset({"get", "items", "keys", "values"})),
    (type(None), frozenset()),
)

# jinja's own objects: a loop, a macro, a block, `self`, a namespace, a cycler, a joiner.
_JINJA = (LoopContext, Macro, BlockReference, TemplateReference, jinja2.utils.Namespace, jinja2.utils.Cycler,
          jinja2.utils.Joiner)


def readable(obj: Any, attribute: str) -> bool:
    """Whether a template may read `attribute` of `obj` (a method read here may be called too)."""
    if isinstance(obj, _JINJA):
        return True
    if isinstance(obj, enum.Enum) and attribute in ("name", "value"):
        return True
    for kind, names in _PLAIN:
        if isinstance(obj, kind):
            return attribute in names
    if isinstance(obj, BaseModel) and type(obj).__module__.startswith(_PACKAGE):
        if attribute in type(obj).model_fields:
            return True
        # A property the course defines on it, or a method it marked; never pydantic's own (model_dump, parse_file).
        for kind in type(obj).__mro__:
            if kind.__module__.startswith(_PACKAGE) and attribute in vars(kind):
                found = vars(kind)[attribute]
                return isinstance(found, property) or getattr(found, "template_method", False)
    return False


def template_method(function: Callable) -> Callable:
    """Mark a method of a model that templates may call: it computes from the model's fields and changes nothing."""
    function.template_method = True  # type: ignore[attr-defined]
    return function


def _method(obj: Any) -> tuple[Any, str] | None:
    """(the object, the name) of a bound method, str.format as the sandbox wraps it too; None for anything else."""
    method = getattr(obj, "__wrapped__", obj)
    if isinstance(method, (types.MethodType, types.BuiltinMethodType)) and not isinstance(
            method.__self__, (type, types.ModuleType)):
        return method.__self__, method.__name__
    return None


def _name(obj: Any) -> str:
    return str(getattr(obj, "__name__", None) or type(obj).__name__)


# -- the environment -----------------------------------------------------------------------------
class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Templates are text anyone can edit: they render data, and never reach `__globals__`, a file or a shell.

    Every refusal of the sandbox is raised as _Unsafe, and every bound passed as
    Problem, so that it ends as one TemplateError naming the template and the
    line, like any other template error.
    """

    code_generator_class = CodeGenerator
    intercepted_binops = frozenset(["+", "*", "**", "%"])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.globals["lipsum"] = lipsum

    def bound_filters(self) -> None:
        """Bound every filter (call once the filters are all there)."""
        self.filters = {name: bounded_filter(name, function) for name, function in self.filters.items()}

    # The Python code of the templates compiled in this process, by the settings that shape it and the source.
    _generated: OrderedDict[tuple, str] = OrderedDict()
    GENERATED_KEPT = 64

    def compile(self, source: Any, name: str | None = None, filename: str | None = None, raw: bool = False,
                defer_init: bool = False) -> Any:
        """jinja2's compile, with the Python code generated from a template's text remembered for the process.

        Parsing a template and generating its code is most of what loading it
        costs; the code depends on the text, the template's name and the
        environment's settings, never on the file it was read from, so the same
        template read again (another page, another copy of the course) reuses
        it. Python's compile still runs each time, with the template's own
        file name, which is what a rendering error names. A template that fails
        to compile is never remembered.
        """
        if not isinstance(source, str):
            return super().compile(source, name, filename, raw, defer_init)
        key = (self._settings(), source, name, defer_init)
        code = self._generated.get(key)
        if code is None:
            code = super().compile(source, name, filename, raw=True, defer_init=defer_init)
            self._generated[key] = code
            while len(self._generated) > self.GENERATED_KEPT:
                self._generated.popitem(last=False)
        else:
            self._generated.move_to_end(key)
        return code if raw else self._compile(code, filename or "<template>")

    def _settings(self) -> tuple:
        """What, besides a template's text and name, the code generated from it depends on."""
        return (type(self), self.code_generator_class, self.block_start_string, self.block_end_string,
                self.variable_start_string, self.variable_end_string, self.comment_start_string,
                self.comment_end_string, self.line_statement_prefix, self.line_comment_prefix, self.trim_blocks,
                self.lstrip_blocks, self.newline_sequence, self.keep_trailing_newline, self.autoescape,
                self.optimized, self.finalize, self.is_async, tuple(sorted(self.extensions)))

    def get_template(self, name: Any, *args: Any, **kwargs: Any) -> jinja2.Template:
        check_inclusion([name])     # {% include %}, {% extends %} or {% import %} in a template
        return super().get_template(name, *args, **kwargs)

    def select_template(self, names: Any, *args: Any, **kwargs: Any) -> jinja2.Template:
        if isinstance(names, (list, tuple)):
            check_inclusion(names)
        return super().select_template(names, *args, **kwargs)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return super().is_safe_attribute(obj, attr, value) and readable(obj, attr)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        return self.undefined(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe",
                              name=attribute, obj=obj, exc=_Unsafe)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        what = f"{short(left)} {operator} {short(right)}"
        check_binop(what, operator, left, right)
        return bounded(super().call_binop(context, operator, left, right), what)

    @staticmethod
    def joined(text: str) -> str:
        """What `a ~ b` joined, within the bound."""
        return bounded(text, "'~'")

    @staticmethod
    def output() -> Output:
        return Output()

    def concat(self, parts: Iterable[str]) -> str:
        """The text a template, a macro or a block renders, joined; refused once it passes MAX_CHARACTERS."""
        kept: list[str] = []
        size = 0
        for part in parts:
            size += len(part)
            if size > MAX_CHARACTERS:
                error = past_the_bound()
                throw = getattr(parts, "throw", None)
                if throw is not None:
                    throw(error)     # raised where the template stands, so that its line is named
                raise error
            kept.append(part)
        return "".join(kept)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
        if not __self._may_call(__context, __obj):
            raise _Unsafe(f"{_name(__obj)} is not a function a template may call")
        if isinstance(__obj, (Macro, BlockReference, LoopContext)):
            check_recursion()
        args = check_call(_method(__obj), args, kwargs)
        try:
            result = super().call(__context, __obj, *args, **kwargs)
        except jinja2.sandbox.SecurityError as exc:
            if isinstance(exc, _Unsafe):
                raise
            raise _Unsafe(str(exc)) from None
        return bounded(result, f"{_name(__obj)}()")

    def _may_call(self, context: jinja2.runtime.Context, obj: Any) -> bool:
        """Template code, a method of what a template may read, or a function handed to the template.

        An undefined value is let through: calling it raises its own error, which says why it is undefined.
        """
        if isinstance(obj, (Macro, BlockReference, LoopContext, jinja2.utils.Joiner, jinja2.Undefined)):
            return True
        method = _method(obj)
        if method is not None:
            return readable(*method)
        return any(obj is value for value in context.parent.values())
