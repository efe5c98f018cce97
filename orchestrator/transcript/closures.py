"""The closures compiled.py makes of an expression's nodes: the evaluation's state, and those that bind no name.

A maker takes a node and the compiling `Context` and returns the node's closure, which takes the
evaluation's state (`Run`) and does what the walk (expressions._Evaluator) does with the node: first
the walk's step of the claim's Budget, then the node's children in the walk's order, then simpleeval's
look for modules and forbidden functions where the walk has it look, and `Budget.check` where the walk
checks. Comprehensions and the explained all/any/increasing, which bind names, are in compiled.py.
"""

from __future__ import annotations

import ast
import operator
from types import ModuleType
from typing import Any, Callable

from simpleeval import DISALLOW_FUNCTIONS, FeatureNotAvailable, FunctionNotDefined, NameNotDefined, OperatorNotDefined
from simpleeval import SimpleEval

from . import expressions
from .explaining import difference, false_part
from .expressions import FUNCTIONS, OPERATORS, SCALARS, Budget, FieldView

Step = Callable[["Run"], Any]


class Run:
    """The state of one claim's evaluations: the names it reads, the budget it spends (its steps counted
    here between the steps where Budget.step can raise), the notes and the rounds of the one under way."""

    __slots__ = ("names", "budget", "check", "steps", "until", "notes", "rounds", "scopes")

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []   # what each comprehension under way has bound, outermost first

    def spend(self, budget: Budget) -> "Run":
        """Ready for the evaluations of one claim, which spend its budget."""
        self.budget = budget
        self.check = budget.check
        self.steps = budget.steps
        self.until = next_check(budget.steps)
        return self

    def tick(self) -> None:
        """The step at which `Budget.step` can raise: taken by it, so that the bounds and messages are its own."""
        self.budget.steps = self.steps - 1
        self.budget.step()
        self.until = next_check(self.steps)


def next_check(steps: int) -> int:
    """The first step after `steps` where Budget.step does more than count: past MAX_STEPS, or where it reads
    the clock (every 256th); the closures count the steps between and call it only there."""
    limit = expressions.MAX_STEPS + 1
    return steps + 1 if steps >= limit else min(limit, (steps // 256 + 1) * 256)


class Context:
    """What compiling a node needs to know of those around it, and the makers of every kind of node."""

    def __init__(self, text: str, makers: dict[type, Callable[[Any, "Context"], Step]]):
        self.text = text                    # as evaluated: simpleeval's messages quote it so
        self.source = text.strip()          # as parsed: notes quote parts of it
        self.makers = makers
        self.layers: list[frozenset[str]] = []   # the names each comprehension around the node can bind
        self.inside = 0                     # explained all/any/increasing calls around the node

    def compile(self, node: ast.AST) -> Step:
        make = self.makers.get(type(node))
        if make is None:
            message = f"Sorry, {type(node).__name__} is not available in this evaluator"
            return refusal(FeatureNotAvailable, message)
        return make(node, self)

    def segment(self, node: ast.AST) -> str | None:
        return ast.get_source_segment(self.source, node)


def refusal(error: type[Exception], *args: Any) -> Step:
    """A node the walk steps and then refuses."""
    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        raise error(*args)
    return run


# Types of values the walk does not look into (expressions._Evaluator._check_disallowed_items), and those
# the look passed that are neither callable nor modules: what it finds in one of them depends on its type.
_QUIET: set[type] = {*SCALARS, list, tuple, set, frozenset, dict}
_CONTAINERS = (list, tuple, set, frozenset, dict)
_SIMPLE = SimpleEval(names={})
# Types Budget.check passes whatever the value: it bounds ints, strings, lists, tuples, dicts and sets. An int
# (or a bool) it passes where its bits are few enough, and the closures ask that first.
_UNSIZED: set[type] = {float, type(None), complex}
_INTS = frozenset({int, bool})
_SIZED = (int, str, list, tuple, dict, set)


def _look(value: Any) -> None:
    """simpleeval's look for modules and forbidden functions, at a value of a type not _QUIET."""
    if isinstance(value, _CONTAINERS):
        return
    _SIMPLE._check_disallowed_items(value)
    if not callable(value) and not isinstance(value, ModuleType) and value.__class__ is type(value):
        _QUIET.add(type(value))


def _size(s: Run, value: Any) -> None:
    """Budget.check of a value of a type not _UNSIZED."""
    s.check(value)
    if not isinstance(value, _SIZED) and value.__class__ is type(value):
        _UNSIZED.add(type(value))


def _result(s: Run, value: Any) -> Any:
    """A value an operator or a call made, as the walk takes it: simpleeval's look, then Budget.check (each
    asked only of a type that may fail it)."""
    if type(value) not in _QUIET:
        _look(value)
    if type(value) not in _UNSIZED and not (type(value) in _INTS and value.bit_length() <= expressions.MAX_INT_BITS):
        _size(s, value)
    return value


def _constant(node: ast.Constant, cx: Context) -> Step:
    # simpleeval refuses a literal longer than its MAX_STRING_LENGTH (100,000); an expression has at most
    # MAX_CHARS (1,000) characters. Nothing to look at or check either: a constant is a scalar (or `...`).
    value = node.value

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        return value
    return run


def _name(node: ast.Name, cx: Context) -> Step:
    key, text = node.id, cx.text
    layers = tuple(i for i in reversed(range(len(cx.layers))) if key in cx.layers[i])   # innermost first
    known, function = key in FUNCTIONS, FUNCTIONS.get(key)

    def outside(s: Run) -> Any:
        try:
            return s.names[key]
        except (TypeError, KeyError):
            pass
        if known:
            return function
        raise NameNotDefined(key, text)

    def bound(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        for index in layers:
            scope = s.scopes[index]
            if key in scope:
                value = scope[key]
                break
        else:
            value = outside(s)
        if type(value) not in _QUIET:
            _look(value)
        return value

    def free(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        try:
            value = s.names[key]
        except (TypeError, KeyError):
            value = outside(s)
        if type(value) not in _QUIET:
            _look(value)
        return value
    return bound if layers else free


# What the bounded * and % (expressions.OPERATORS) do with two numbers: bound strings and lists, and
# otherwise multiply or divide; int and float only, a subclass (bool) goes the long way.
_ON_NUMBERS = {ast.Mult: operator.mul, ast.Mod: operator.mod}
_NUMBERS = frozenset({int, float})


def _binop(node: ast.BinOp, cx: Context) -> Step:
    bounded = OPERATORS.get(type(node.op))
    if bounded is None:
        return refusal(OperatorNotDefined, node.op, cx.text)
    left, right = cx.compile(node.left), cx.compile(node.right)
    plain = _ON_NUMBERS.get(type(node.op))

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        return _result(s, bounded(left(s), right(s)))

    def numbers(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        a, b = left(s), right(s)
        return _result(s, plain(a, b) if type(a) in _NUMBERS and type(b) in _NUMBERS else bounded(a, b))
    return run if plain is None else numbers


def _unaryop(node: ast.UnaryOp, cx: Context) -> Step:
    apply = OPERATORS.get(type(node.op))
    if apply is None:
        return refusal(OperatorNotDefined, node.op, cx.text)
    operand = cx.compile(node.operand)

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        return _result(s, apply(operand(s)))
    return run


def _boolop(node: ast.BoolOp, cx: Context) -> Step:
    parts = [cx.compile(part) for part in node.values]
    if not isinstance(node.op, ast.And):
        def either(s: Run) -> Any:
            s.steps += 1
            if s.steps == s.until:
                s.tick()
            value = False
            for part in parts:
                value = part(s)
                if value:
                    break
            if type(value) not in _QUIET:
                _look(value)
            return value
        return either
    # inside an explained all/any the element that broke it is named instead
    noted = [(part, None if cx.inside else false_part(cx.segment(value))) for part, value in zip(parts, node.values)]

    def both(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        value = True
        for part, note in noted:
            mark = len(s.notes)
            value = part(s)
            if not value:
                if note is not None:
                    s.notes.insert(mark, note)
                break
        if type(value) not in _QUIET:
            _look(value)
        return value
    return both


def _compare(node: ast.Compare, cx: Context) -> Step:
    left = cx.compile(node.left)
    pairs = [(OPERATORS[type(op)], cx.compile(comparator)) for op, comparator in zip(node.ops, node.comparators)]
    if len(pairs) > 1:
        def chain(s: Run) -> Any:
            s.steps += 1
            if s.steps == s.until:
                s.tick()
            right = left(s)
            value = True
            for apply, comparator in pairs:
                if not value:
                    break
                before, right = right, comparator(s)
                value = apply(before, right)
            if type(value) not in _QUIET:
                _look(value)
            return value
        return chain
    [(apply, right)] = pairs
    noted = isinstance(node.ops[0], ast.Eq)   # a false == of two lists notes where they differ

    def one(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        value = apply(left(s), right(s))
        if not value and noted:
            note = difference(left(s), right(s))   # both sides evaluated again, as the walk does
            if note is not None:
                s.notes.append(note)
        if type(value) not in _QUIET:
            _look(value)
        return value
    return one


def _ifexp(node: ast.IfExp, cx: Context) -> Step:
    test, body, orelse = cx.compile(node.test), cx.compile(node.body), cx.compile(node.orelse)

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        value = body(s) if test(s) else orelse(s)
        if type(value) not in _QUIET:
            _look(value)
        return value
    return run


def call(node: ast.Call, cx: Context) -> Step:
    """A call of one of the FUNCTIONS (compiled.py has the explained all/any/increasing)."""
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name is None and not isinstance(node.func, ast.Attribute):
        return refusal(FeatureNotAvailable, "Lambda Functions not implemented")
    if name is not None and name not in FUNCTIONS:
        return refusal(FunctionNotDefined, name, cx.text)
    if name is not None and FUNCTIONS[name] in DISALLOW_FUNCTIONS:
        return refusal(FeatureNotAvailable, "This function is forbidden")
    function = FUNCTIONS.get(name)
    method = cx.compile(node.func) if name is None else None
    args = [cx.compile(arg) for arg in node.args]
    keywords = [(keyword.arg, cx.compile(keyword.value)) for keyword in node.keywords]

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        called = function if method is None else method(s)
        named = {}
        for key, argument in keywords:     # before the positional arguments, as simpleeval's call has them
            s.steps += 1
            if s.steps == s.until:
                s.tick()
            named[key] = argument(s)
        if len(args) == 2:
            value = called(args[0](s), args[1](s), **named)
        else:
            value = called(*[arg(s) for arg in args], **named)
        return _result(s, value)

    if method is not None or keywords or len(args) != 1:
        return run
    [arg] = args

    def one(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        return _result(s, function(arg(s)))
    return one


def _attribute(node: ast.Attribute, cx: Context) -> Step:
    attr = node.attr
    if attr.startswith("_"):
        return refusal(FeatureNotAvailable, f"the attribute {attr!r} starts with '_'")
    of = cx.compile(node.value)

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        view = of(s)
        if not isinstance(view, FieldView):
            raise FeatureNotAvailable(f"'.{attr}' reads a field of a row or a block, not of a {type(view).__name__}")
        try:
            value = view.fields[attr]
        except KeyError:
            raise view.missing(attr) from None
        if type(value) not in _QUIET:
            _look(value)
        return value
    return run


def _subscript(node: ast.Subscript, cx: Context) -> Step:
    of, index = cx.compile(node.value), cx.compile(node.slice)

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        container = of(s)
        return _result(s, container[index(s)])
    return run


def _slice(node: ast.Slice, cx: Context) -> Step:
    parts = [None if part is None else cx.compile(part) for part in (node.lower, node.upper, node.step)]

    def run(s: Run) -> Any:     # a slice holds nothing to look at, and Budget.check passes it
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        return slice(*[None if part is None else part(s) for part in parts])
    return run


def _sequence(node: ast.Tuple | ast.List, cx: Context) -> Step:
    elements = [cx.compile(element) for element in node.elts]
    make = tuple if isinstance(node, ast.Tuple) else list

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        value = make([element(s) for element in elements])
        s.check(value)
        return value
    return run


def _set(node: ast.Set, cx: Context) -> Step:
    elements = [cx.compile(element) for element in node.elts]

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        value = {element(s) for element in elements}
        s.check(value)
        return value
    return run


def _dict(node: ast.Dict, cx: Context) -> Step:
    pairs = [(cx.compile(key), cx.compile(value))                # type: ignore[arg-type]
             for key, value in zip(node.keys, node.values)]

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        out = {}
        for key, value in pairs:
            item = value(s)             # before the key, as `out[key] = value` has it
            out[key(s)] = item
        s.check(out)
        return out
    return run


PLAIN: dict[type, Callable[[Any, Context], Step]] = {
    ast.Constant: _constant, ast.Name: _name, ast.BinOp: _binop, ast.UnaryOp: _unaryop, ast.BoolOp: _boolop,
    ast.Compare: _compare, ast.IfExp: _ifexp, ast.Call: call, ast.Attribute: _attribute, ast.Subscript: _subscript,
    ast.Slice: _slice, ast.Tuple: _sequence, ast.List: _sequence, ast.Set: _set, ast.Dict: _dict,
}
