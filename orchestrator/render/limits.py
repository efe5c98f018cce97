"""What a template may build: the bounds of the sandbox (sandbox.py) on size, depth and time.

A template builds no string of more than MAX_CHARACTERS characters, no list
of more than MAX_ITEMS items and no integer of more than MAX_BITS bits: what
would be larger is refused before it is built (`'a' * 10**10`, `2 ** 10**10`,
a width of 10**10 in a format, a filter or a string method that makes much of
little), and what is built is measured (`+`, `~`, `%`, the text a template, a
macro or a block renders). A macro, a block, a loop or an included template
goes at most MAX_RECURSION deep in itself, and a template renders in at most
TEMPLATE_SECONDS. Past a bound, a Problem is raised where the template stands.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
import signal
import string
import sys
import threading
import time
import types
from typing import Any, Callable, Iterable, Iterator

import jinja2
import jinja2.compiler
import jinja2.filters
import jinja2.utils

MAX_CHARACTERS = 1 << 24   # of a string a template builds: 16 MiB, as much as a lesson's output may be
MAX_ITEMS = 1_000_000      # of a list, a tuple or a dict a template builds
MAX_BITS = 4096            # of an integer a template computes
TEMPLATE_SECONDS = 10.0    # wall time of one template's rendering, the templates it includes or extends too
MAX_RECURSION = 50         # how deep a macro, a block, a recursive loop or an included template may be in itself
MAX_PARAGRAPHS = 100       # lipsum() makes at most this many paragraphs,
MAX_WORDS = 1000           # of at most this many words each


class Problem(Exception):
    """Raised inside a template call; the renderer adds the template's file and line."""


# -- how much a template may build -------------------------------------------------------------
def short(value: Any) -> str:
    """An operand as a message shows it: short, whatever its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit number"
    if isinstance(value, str) and len(value) > 30:
        return repr(value[:29])[:-1] + f"...' ({len(value):,} characters)"
    if isinstance(value, (str, int, float)):
        return repr(value)
    return f"a {type(value).__name__}" + (f" of {len(value):,} items" if isinstance(value, (list, tuple, dict)) else "")


def _too_big(what: str, size: int, unit: str, most: int, verb: str = "would build") -> Problem:
    return Problem(f"{what} {verb} {size:,} {unit}; a template builds at most {most:,}")


def _check_length(what: str, size: int, *, text: bool, verb: str = "would build") -> None:
    if text and size > MAX_CHARACTERS:
        raise _too_big(what, size, "characters", MAX_CHARACTERS, verb)
    if not text and size > MAX_ITEMS:
        raise _too_big(what, size, "items", MAX_ITEMS, verb)


def bounded(value: Any, what: str) -> Any:
    """`value`, built by `what`, if it is within the bounds; else a Problem."""
    if isinstance(value, str):
        _check_length(what, len(value), text=True, verb="built")
    elif isinstance(value, (list, tuple, dict)):
        _check_length(what, len(value), text=False, verb="built")
    elif isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise Problem(f"{what} made a {value.bit_length():,}-bit number; a template computes with at most "
                      f"{MAX_BITS:,} bits")
    return value


def _check_width(what: str, width: Any) -> None:
    if isinstance(width, int) and width > MAX_CHARACTERS:
        raise _too_big(what, width, "characters", MAX_CHARACTERS)


def check_binop(what: str, operator: str, left: Any, right: Any) -> None:
    """Refuse `left operator right` before it is computed if its result would be past a bound."""
    ints = all(isinstance(x, int) for x in (left, right))
    if operator == "*":
        for sequence, times in ((left, right), (right, left)):
            if isinstance(sequence, (str, list, tuple)) and isinstance(times, int) and times > 0:
                _check_length(what, len(sequence) * times, text=isinstance(sequence, str))
        if ints and left.bit_length() + right.bit_length() > MAX_BITS + 1:
            raise Problem(f"{what} would have about {left.bit_length() + right.bit_length():,} bits; a template "
                          f"computes with at most {MAX_BITS:,}")
    elif operator == "**":
        if ints and right > 0 and abs(left) > 1:
            bits = math.ceil(right * math.log2(abs(left)))
            if bits > MAX_BITS:
                raise Problem(f"{what} would have {bits:,} bits; a template computes with at most {MAX_BITS:,}")
    elif operator == "+":
        for kind in (str, list, tuple):
            if isinstance(left, kind) and isinstance(right, kind):
                _check_length(what, len(left) + len(right), text=kind is str)
    elif operator == "%" and isinstance(left, str):
        _check_percent(what, left, right if isinstance(right, tuple) else (right,))


# printf-style conversions: %(name)-10.3f
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent(what: str, template: str, args: Iterable[Any]) -> None:
    """A printf-style format pads to no width past the bound, given in the format or by `*` from its values."""
    starred = False
    for match in _PERCENT.finditer(template):
        for given in match.groups():
            starred = starred or given == "*"
            _check_width(what, int(given) if given and given.isdigit() else None)
    if starred:
        for arg in args:
            _check_width(what, arg)


def _check_format(what: str, template: str, args: Iterable[Any]) -> None:
    """str.format pads to no width past the bound, given in a field's spec or by a nested field ({:{}})."""
    nested = False
    for _, _, spec, _ in string.Formatter().parse(template):
        if spec:
            nested = nested or "{" in spec
            for digits in re.findall(r"\d+", spec):
                _check_width(what, int(digits))
    if nested:
        for arg in args:
            _check_width(what, arg)


def _check_joined(what: str, separator: str, items: list) -> None:
    size = sum(len(item) for item in items if isinstance(item, str)) + len(separator) * max(len(items) - 1, 0)
    _check_length(what, size, text=True)


def _check_replaced(what: str, text: str, old: str, new: str, count: Any = -1) -> None:
    times = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    _check_length(what, len(text) + times * (len(new) - len(old)), text=True)


def check_call(method: tuple[Any, str] | None, args: tuple, kwargs: dict) -> tuple:
    """Refuse a call of a string's method (its object and name) whose result would be past a bound; the arguments
    to call it with."""
    if method is None or not isinstance(method[0], str):
        return args
    text, name = method
    what = f"{name}()"
    if name == "join" and args:
        items = list(args[0])
        if all(isinstance(item, str) for item in items):
            _check_joined(what, text, items)
        return (items, *args[1:])
    if name == "replace" and len(args) >= 2 and all(isinstance(arg, str) for arg in args[:2]):
        _check_replaced(what, text, *args[:3])
    elif name in ("center", "ljust", "rjust", "zfill") and args:
        _check_width(what, args[0])
    elif name == "format":
        _check_format(what, text, (*args, *kwargs.values()))
    elif name == "format_map" and args and isinstance(args[0], dict):
        _check_format(what, text, args[0].values())
    return args


# -- filters ------------------------------------------------------------------------------------
# What each filter that can build much from little is given; each is checked before it runs.
def _filter_center(what: str, arguments: dict) -> None:
    _check_width(what, arguments.get("width"))


def _filter_indent(what: str, arguments: dict) -> None:
    text, width = str(arguments.get("s", "")), arguments.get("width", 4)
    per_line = width if isinstance(width, int) else len(str(width))
    _check_length(what, len(text) + (text.count("\n") + 1) * per_line, text=True)


def _attributes(environment: jinja2.Environment, arguments: dict, key: str) -> list:
    """The items a filter works on, their `attribute` taken here (as the filter would) so that they can be measured."""
    items = list(arguments[key])
    if arguments.get("attribute") is not None:
        items = list(map(jinja2.filters.make_attrgetter(environment, arguments.pop("attribute")), items))
    arguments[key] = items
    return items


def _filter_join(what: str, arguments: dict) -> None:
    items = _attributes(arguments["eval_ctx"].environment, arguments, "value")
    _check_joined(what, str(arguments.get("d", "")), [str(item) for item in items])


def _filter_replace(what: str, arguments: dict) -> None:
    _check_replaced(what, str(arguments.get("s", "")), str(arguments.get("old", "")), str(arguments.get("new", "")),
                    arguments.get("count"))


def _filter_format(what: str, arguments: dict) -> None:
    _check_percent(what, str(arguments.get("value", "")), (*arguments.get("args", ()),
                                                           *arguments.get("kwargs", {}).values()))


def _filter_count(name: str) -> Callable[[str, dict], None]:
    def check(what: str, arguments: dict) -> None:
        count = arguments.get(name)
        if isinstance(count, int) and count > MAX_ITEMS:
            raise _too_big(what, count, "items", MAX_ITEMS)
    return check


def _filter_sum(what: str, arguments: dict) -> None:
    """Adding up lists copies the sum so far at each step: refuse a sum whose copies would be past the bound."""
    start = arguments.get("start", 0)
    if isinstance(start, (str, list, tuple)):
        items = _attributes(arguments["environment"], arguments, "iterable")
        size = len(start) + sum(len(item) for item in items if isinstance(item, (str, list, tuple)))
        _check_length(what, size * max(len(items), 1), text=isinstance(start, str), verb="would copy")


_FILTER_CHECKS: dict[str, Callable[[str, dict], None]] = {
    "center": _filter_center, "indent": _filter_indent, "join": _filter_join, "replace": _filter_replace,
    "format": _filter_format, "sum": _filter_sum, "batch": _filter_count("linecount"),
    "slice": _filter_count("slices"), "tojson": _filter_count("indent"),
}


def bounded_filter(name: str, function: Callable) -> Callable:
    """The filter `name`, checked before it runs (_FILTER_CHECKS) and its result after."""
    check = _FILTER_CHECKS.get(name)
    signature = inspect.signature(function) if check is not None else None
    # jinja hands some filters an evaluation context their signature does not show (those it wraps for async).
    first = next(iter(signature.parameters), None) if signature is not None else None
    hidden = int(getattr(function, "jinja_pass_arg", None) is not None
                 and first not in ("context", "eval_ctx", "environment"))
    what = f"the filter {name}"

    @functools.wraps(function)   # keeps jinja's pass_context and the like
    def filtered(*args: Any, **kwargs: Any) -> Any:
        if signature is not None:
            try:
                bound = signature.bind(*args[hidden:], **kwargs)
            except TypeError:
                pass    # the filter itself says what is wrong with its arguments
            else:
                check(what, bound.arguments)
                args, kwargs = (*args[:hidden], *bound.args), bound.kwargs
        return bounded(function(*args, **kwargs), what)
    return filtered


def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 - jinja's names
    """jinja's lipsum(), at most MAX_PARAGRAPHS paragraphs of at most MAX_WORDS words."""
    if n > MAX_PARAGRAPHS or max > MAX_WORDS:
        raise Problem(f"lipsum makes at most {MAX_PARAGRAPHS} paragraphs of at most {MAX_WORDS} words")
    return jinja2.utils.generate_lorem_ipsum(n, html, min, max)


# -- how deep templates nest ------------------------------------------------------------------------
def check_recursion() -> None:
    """Refuse a call of a macro, a block or a recursive loop at a place of a template that is already
    MAX_RECURSION deep in itself on the stack: a template calling itself without end stops there, its line
    named, long before Python's recursion limit."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and "__jinja_template__" not in frame.f_globals:
        frame = frame.f_back
    if frame is None:
        return
    # Where a frame stands: its code and its template's line (a statement may take several lines of Python).
    here, depth = (frame.f_code, _template_line(frame)), 0
    while frame is not None:
        depth += frame.f_code is here[0] and _template_line(frame) == here[1]
        frame = frame.f_back
    if depth > MAX_RECURSION:
        raise Problem(f"this macro, block or loop calls itself more than {MAX_RECURSION} deep, the most a "
                      f"template may")


def _template_line(frame: types.FrameType) -> int:
    return frame.f_globals["__jinja_template__"].get_corresponding_lineno(frame.f_lineno)


def check_inclusion(names: Iterable[Any]) -> None:
    """Refuse to include, extend or import a template that is already MAX_RECURSION deep in itself on the stack."""
    for name in names:
        depth = 0
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None:
            template = frame.f_globals.get("__jinja_template__")
            depth += template is not None and template.name == name
            frame = frame.f_back
        if depth > MAX_RECURSION:
            raise Problem(f"{name!r} is included or extended within itself more than {MAX_RECURSION} deep, the "
                          f"most a template may")


# -- the text templates render ---------------------------------------------------------------------------
def past_the_bound() -> Problem:
    return Problem(f"the text it renders passes {MAX_CHARACTERS:,} characters; a template builds at most "
                   f"{MAX_CHARACTERS:,}")


class Output(list):
    """The text a macro, a call, a {% set %} or a {% filter %} block renders, measured as it grows."""

    size = 0

    def append(self, part: Any) -> None:
        self.extend((part,))

    def extend(self, parts: Iterable[Any]) -> None:
        parts = tuple(parts)
        self.size += sum(len(part) for part in parts if isinstance(part, str))
        if self.size > MAX_CHARACTERS:
            raise past_the_bound()
        super().extend(parts)


class CodeGenerator(jinja2.compiler.CodeGenerator):
    """Compiles `a ~ b` so that what it joins is measured (Sandbox.joined), as `+` and `*` are in call_binop,
    and what a macro or a block renders into a list (a buffer) so that the list is measured as it grows."""

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: jinja2.compiler.Frame) -> None:
        self.write("environment.joined(")
        super().visit_Concat(node, frame)
        self.write(")")

    def buffer(self, frame: jinja2.compiler.Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.output()")


# -- how long a template renders ------------------------------------------------------------------------
@contextlib.contextmanager
def time_limit(seconds: float | None = None) -> Iterator[None]:
    """Stop a template still rendering after `seconds` (TEMPLATE_SECONDS) with a Problem, where it stands.

    A signal timer, so only in the main thread; elsewhere templates render unbounded in time. A timer already
    set is set again when the template is done, for what is left of it.
    """
    seconds = TEMPLATE_SECONDS if seconds is None else seconds
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum: int, frame: Any) -> None:  # noqa: ARG001
        raise Problem(f"still rendering after {seconds:g} s, the most a template may take")

    previous = signal.signal(signal.SIGALRM, expired)
    started = time.monotonic()
    delay, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if delay:   # a timer of someone else's, set again for what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - started), 0.001), interval)
