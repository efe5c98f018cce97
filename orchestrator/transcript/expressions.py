"""The expression language of claims: what an expression may contain, and its bounded evaluation.

Expressions are Python-shaped (``tiled_ms < naive_ms``, ``all(r.mismatches == 0
for r in blocks)``) and evaluated by simpleeval. What one may contain is
checked once, when the manifest loads (`parse_expression`): a bounded size and
depth, no method calls, no names or attributes starting with `_`, no lambda,
f-string or unpacking, and only the functions in FUNCTIONS. Evaluation is
bounded too (`Budget`): integers, strings and lists have a largest size, and a
claim has a number of steps and a time to finish in; past a bound the claim
fails, naming the bound. `.name` reads a field of a `FieldView` (a table's
row, a section's block) and nothing else.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterator

import simpleeval
from simpleeval import (DEFAULT_OPERATORS, EvalWithCompoundTypes, FeatureNotAvailable, InvalidExpression,
                        IterableTooLong)

from ..words import quoted, shown
from .explaining import Explaining, first_break

# -- limits (docs/schema.md, "Limits") ----------------------------------------------
MAX_CHARS = 1000          # characters of one expression
MAX_DEPTH = 50            # nesting of one expression; each operator of a chain a + b + c is a level
MAX_INT_BITS = 4096       # the largest integer a claim computes (Python prints up to ~14,000 bits)
MAX_ITEMS = 10_000        # the longest string, list, tuple or dict a claim builds
MAX_ITERATIONS = simpleeval.MAX_COMPREHENSION_LENGTH  # rounds of all comprehensions of one evaluation
MAX_BUILT = 1_000_000     # items of every string and list one claim builds, together
MAX_STEPS = 500_000       # evaluation steps of one claim, every row together
CLAIM_SECONDS = 2.0       # wall time of one claim, every row together


def _sum(values, start=0):
    """sum() of numbers only: adding lists or strings would build them quadratically."""
    values = list(values)
    for value in [start, *values]:
        if not isinstance(value, (int, float)):
            raise TypeError(f"sum() adds numbers, not {type(value).__name__}")
    return sum(values, start)


def _round(number, ndigits=None):
    if ndigits is not None and isinstance(ndigits, int) and abs(ndigits) > 308:
        raise LimitExceeded(f"round() keeps at most 308 digits, not {ndigits}")
    return round(number) if ndigits is None else round(number, ndigits)


def _zip(*iterables) -> list:
    return list(zip(*iterables))


# increasing(values) and the like: how each value must follow the one before it, and what a break says
MONOTONE = {"increasing": operator.lt, "decreasing": operator.gt,
            "non_decreasing": operator.le, "non_increasing": operator.ge}
MONOTONE_WORDS = {"increasing": "is not above", "decreasing": "is not below",
                  "non_decreasing": "is below", "non_increasing": "is above"}


def _monotone(holds):
    def check(values) -> bool:
        return first_break(list(values), holds) is None
    return check


FUNCTIONS = {
    "abs": abs, "all": all, "any": any, "ceil": math.ceil,
    "dims": lambda text: tuple(int(part) for part in str(text).split("x")),
    "floor": math.floor, "isclose": math.isclose, "len": len, "log2": math.log2, "max": max, "min": min,
    "round": _round, "sorted": sorted, "sqrt": math.sqrt, "sum": _sum, "zip": _zip,
    **{name: _monotone(holds) for name, holds in MONOTONE.items()},
}
ALLOWED = ", ".join(sorted(FUNCTIONS))
EXPLAINED = {"all", "any", *MONOTONE}


class LimitExceeded(Exception):
    """A claim went past one of the bounds above: it fails, naming the bound."""


class OutOfBudget(LimitExceeded):
    """The claim as a whole used up its steps or its time: nothing more of it is evaluated."""


class FieldView:
    """What `.name` may read: a table's row or a section's block, its fields by name."""

    fields: dict[str, Any]

    def describe(self) -> str:
        raise NotImplementedError

    def missing(self, name: str) -> KeyError:
        """The error of reading a field it has not: it names those it has."""
        return KeyError(f"{self.describe()} has no field {quoted(name)} (it has {', '.join(map(shown, self.fields))})")


# -- what an expression may contain ----------------------------------------------
class ExpressionError(ValueError):
    """An expression a claim may not hold; `reason` says why without repeating it."""

    def __init__(self, text: str, reason: str, *, syntax: bool = False):
        self.text = text
        self.reason = reason
        shown = quote(text)
        super().__init__(f"invalid expression {shown}: {reason}" if syntax else f"{shown}: {reason}")


def quote(text: str) -> str:
    """An expression quoted for a message; a very long one is cut."""
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"


_NODES = (ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call, ast.Constant, ast.Name,
          ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.ListComp,
          ast.GeneratorExp, ast.DictComp, ast.comprehension, ast.keyword, ast.expr_context,
          ast.boolop, ast.unaryop, ast.cmpop)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
              ast.BitOr, ast.BitXor, ast.BitAnd)
_REFUSED = {ast.Lambda: "a lambda", ast.NamedExpr: "an assignment (:=)", ast.JoinedStr: "an f-string",
            ast.FormattedValue: "an f-string", ast.Starred: "unpacking with *",
            ast.SetComp: "a set comprehension", ast.MatMult: "the operator @",
            ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield"}


@dataclass(frozen=True)
class Expression:
    """A parsed expression that passed every check that needs no schema."""

    text: str
    body: ast.expr
    free: frozenset[str]          # names not bound by a comprehension
    called: frozenset[str]        # names called as functions
    references: tuple[tuple[str, ast.expr, bool], ...]  # (source, node, is a comprehension's iterable)


@lru_cache(maxsize=4096)
def parse_expression(text: str) -> Expression:
    """Parse and check one expression; raise ExpressionError saying what is wrong with it."""
    if len(text) > MAX_CHARS:
        raise ExpressionError(text, f"is {len(text)} characters long; a claim's expression has at most {MAX_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        where = (f" at line {exc.lineno} of the expression, column {exc.offset}: a YAML block (>-) keeps the "
                 "line break before a more-indented line; indent its lines alike" if "\n" in text.strip() else "")
        raise ExpressionError(text, exc.msg + where, syntax=True) from None
    except ValueError as exc:      # a NUL character
        raise ExpressionError(text, str(exc), syntax=True) from None
    except (RecursionError, MemoryError):
        raise ExpressionError(text, too_deep()) from None
    bound: set[str] = set()
    names: set[str] = set()
    called: set[str] = set()
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH and isinstance(node, ast.expr):
            raise ExpressionError(text, too_deep())
        _check_node(text, node)
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.comprehension):
            bound.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        deeper = depth + 1 if isinstance(node, ast.expr) else depth
        stack.extend((child, deeper) for child in ast.iter_child_nodes(node))
    return Expression(text=text, body=tree.body, free=frozenset(names - bound), called=frozenset(called),
                      references=tuple(_references(text, tree.body, bound)))


def too_deep() -> str:
    return f"nests more than {MAX_DEPTH} levels deep (each operator of a chain such as a + b + c is a level)"


def _check_node(text: str, node: ast.AST) -> None:
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        raise ExpressionError(text, f"the name {node.id!r} starts with '_', which a claim may not use")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise ExpressionError(text, f"the attribute {node.attr!r} starts with '_', which a claim may not read")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise ExpressionError(text, f"calls the method .{node.func.attr}(); a claim calls only "
                                        f"the allowed functions ({ALLOWED})")
        if not isinstance(node.func, ast.Name):
            raise ExpressionError(text, f"calls something other than a function's name; a claim calls only "
                                        f"the allowed functions ({ALLOWED})")
        if any(k.arg is None for k in node.keywords):
            raise ExpressionError(text, "unpacking with ** is not allowed in a claim")
    if isinstance(node, ast.Dict) and any(key is None for key in node.keys):
        raise ExpressionError(text, "unpacking with ** is not allowed in a claim")
    if isinstance(node, ast.comprehension) and node.is_async:
        raise ExpressionError(text, "an async comprehension is not allowed in a claim")
    if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
        raise ExpressionError(text, "a bytes literal is not allowed in a claim")
    if isinstance(node, _NODES) or isinstance(node, _OPERATORS):
        return
    what = _REFUSED.get(type(node), type(node).__name__)
    raise ExpressionError(text, f"{what} is not allowed in a claim")


def _references(text: str, body: ast.expr, bound: set[str]) -> Iterator[tuple[str, ast.expr, bool]]:
    """The outermost `name`, `name.field` and `name['key'].field` of an expression, for failure messages."""
    iterables = set()
    stack: list[ast.AST] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.comprehension):
            iterables.add(id(node.iter))
        root = _reference_root(node)
        if root is not None:
            if root.id not in bound:
                yield ast.get_source_segment(text.strip(), node) or root.id, node, id(node) in iterables
            continue
        if isinstance(node, ast.Call):
            stack.extend([*node.args, *(k.value for k in node.keywords)])
        else:
            stack.extend(ast.iter_child_nodes(node))


def _reference_root(node: ast.AST) -> ast.Name | None:
    while True:
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Subscript) and _is_constant(node.slice):
            node = node.value
        else:
            return None


def _is_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Tuple):
        return all(_is_constant(n) for n in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_constant(node.operand)
    return isinstance(node, ast.Constant)


# -- evaluation -----------------------------------------------------------------
class Budget:
    """What one claim may spend, over all its rows: steps, items built, and time."""

    def __init__(self) -> None:
        self.steps = 0
        self.built = 0
        self.deadline = time.monotonic() + CLAIM_SECONDS

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise OutOfBudget(f"the claim took more than {MAX_STEPS} evaluation steps")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise OutOfBudget(f"the claim ran for more than {CLAIM_SECONDS:g} s")

    def check(self, value: Any) -> None:
        """Bound a value the claim just computed."""
        if isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                raise LimitExceeded(f"a number of {value.bit_length()} bits is too large "
                                    f"(a claim computes with at most {MAX_INT_BITS} bits)")
        elif isinstance(value, (str, list, tuple, dict, set)):
            size = len(value) if isinstance(value, str) else _size(value, {})
            if size > MAX_ITEMS:
                raise LimitExceeded(f"a {type(value).__name__} of {size} items is too long "
                                    f"(a claim builds at most {MAX_ITEMS}, nested ones counted)")
            self.built += size
            if self.built > MAX_BUILT:
                raise OutOfBudget(f"the claim built more than {MAX_BUILT} items of strings and lists")


def _size(value: Any, seen: dict[int, int]) -> int:
    """Items of a list, tuple, dict or set, counting those of the ones inside it each time
    they appear: `[[1] * 10000] * 10000` is 100,010,000 items to compare or iterate."""
    if not isinstance(value, (list, tuple, dict, set)):
        return 0
    known = seen.get(id(value))
    if known is None:
        items = value.values() if isinstance(value, dict) else value
        known = seen[id(value)] = len(value) + sum(_size(item, seen) for item in items)
    return known


def _power(a, b):
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        bits = b * math.log2(abs(a))
        if bits > MAX_INT_BITS:
            raise LimitExceeded(f"{_short(a)} ** {_short(b)} would have {bits:.0f} bits "
                                f"(a claim computes with at most {MAX_INT_BITS})")
    return a ** b


def _lshift(a, b):
    if isinstance(a, int) and isinstance(b, int) and a and b > 0 and a.bit_length() + b > MAX_INT_BITS:
        raise LimitExceeded(f"{_short(a)} << {_short(b)} would have {a.bit_length() + b} bits "
                            f"(a claim computes with at most {MAX_INT_BITS})")
    return a << b


def _multiply(a, b):
    for sequence, times in ((a, b), (b, a)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(times, int) and times > 0 \
                and len(sequence) * times > MAX_ITEMS:
            raise LimitExceeded(f"repeating a {type(sequence).__name__} of length {len(sequence)} "
                                f"{_short(times)} times is too long (a claim builds at most {MAX_ITEMS} items)")
    return a * b


def _modulo(a, b):
    if isinstance(a, (str, bytes)):
        raise FeatureNotAvailable("formatting a string with % is not allowed in a claim")
    return a % b


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


OPERATORS = {**DEFAULT_OPERATORS, ast.Add: operator.add, ast.Mult: _multiply, ast.Pow: _power,
             ast.LShift: _lshift, ast.RShift: operator.rshift, ast.Mod: _modulo}
_CHECKED = frozenset({ast.BinOp, ast.UnaryOp, ast.Call, ast.Subscript, ast.List, ast.Tuple, ast.Dict, ast.Set,
                      ast.ListComp, ast.GeneratorExp, ast.DictComp})   # ast's own nodes: none is subclassed
SCALARS = frozenset({int, float, str, bool, type(None), bytes, complex})   # nothing forbidden can be inside


class _Evaluator(Explaining, EvalWithCompoundTypes):
    """simpleeval with the bounds above, reads of a row's fields only, and explained all/any."""

    def __init__(self, names: dict[str, Any], budget: Budget):
        super().__init__(operators=OPERATORS, names=names)
        self.functions = dict(FUNCTIONS)   # without the list/tuple/dict/set simpleeval adds
        self.reset(names, budget)

    def reset(self, names: dict[str, Any], budget: Budget) -> None:
        """Ready for an evaluation of its own: the names it reads, the budget it spends, no notes yet."""
        self.names = names
        self.nodes[ast.Name] = self._eval_name   # as made: a comprehension's scope never outlives it
        self.budget = budget
        self.notes: list[str] = []         # why an all/any/increasing call was false, outermost first
        self._inside = 0                   # explained all/any/increasing calls under way

    def _eval(self, node):
        """simpleeval's step, in one call: its handler for the node, the look for what is forbidden (none for a
        number or a string), and the bounds (a claim of 6 expressions took 82 steps, each three calls deep)."""
        self.budget.step()
        try:
            handler = self.nodes[type(node)]
        except KeyError:
            raise FeatureNotAvailable(f"Sorry, {type(node).__name__} is not available in this evaluator") from None
        result = handler(node)
        if type(result) not in SCALARS:
            self._check_disallowed_items(result)
        if type(node) in _CHECKED:
            self.budget.check(result)
        return result

    def _check_disallowed_items(self, item):
        """simpleeval looks through every list for modules and forbidden functions, in every
        step; nothing a claim sees holds either, and the look costs time a claim has not got."""
        if type(item) not in SCALARS and not isinstance(item, (list, tuple, set, frozenset, dict)):
            super()._check_disallowed_items(item)

    def _eval_comprehension(self, node):
        try:
            return super()._eval_comprehension(node)
        except IterableTooLong:
            raise LimitExceeded(f"comprehensions went round more than {MAX_ITERATIONS} times") from None

    def _eval_attribute(self, node):
        if node.attr.startswith("_"):
            raise FeatureNotAvailable(f"the attribute {node.attr!r} starts with '_'")
        value = self._eval(node.value)
        if not isinstance(value, FieldView):
            raise FeatureNotAvailable(f"'.{node.attr}' reads a field of a row or a block, "
                                      f"not of a {type(value).__name__}")
        try:
            return value.fields[node.attr]
        except KeyError:
            raise value.missing(node.attr) from None

    def _eval_call(self, node):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name in EXPLAINED and len(node.args) == 1 and not node.keywords:
            argument = node.args[0]
            if isinstance(argument, (ast.GeneratorExp, ast.ListComp)) and len(argument.generators) == 1:
                return self._explained(name, argument)
            if name in MONOTONE:
                values = list(self._eval(argument))
                index = first_break(values, MONOTONE[name])
                if index is not None:
                    self.notes.append(f"item {index} ({values[index]!r}) {MONOTONE_WORDS[name]} "
                                      f"item {index - 1} ({values[index - 1]!r})")
                return index is None
        return super()._eval_call(node)

    def _explained(self, name: str, comprehension: ast.expr) -> bool:
        """all/any/increasing over one comprehension, noting the first element that decides it."""
        generator = comprehension.generators[0]

        def target() -> str:   # the comprehension's variable as written: only a note names it
            return ast.get_source_segment(self.expr.strip(), generator.target) or "element"
        bound: dict[str, Any] = {}
        previous_lookup = self.nodes[ast.Name]

        def lookup(node):
            return bound[node.id] if node.id in bound else previous_lookup(node)

        self.nodes[ast.Name] = lookup
        self._inside += 1
        try:
            seen: list[tuple[Any, Any]] = []
            for item in self._eval(generator.iter):
                self._max_count += 1
                if self._max_count > MAX_ITERATIONS:
                    raise LimitExceeded(f"comprehensions went round more than {MAX_ITERATIONS} times")
                bind(generator.target, item, bound)
                if not all(self._eval(condition) for condition in generator.ifs):
                    continue
                mark = len(self.notes)
                value = self._eval(comprehension.elt)
                if name == "all" and not value:
                    self.notes.insert(mark, f"first {target()} to break it: {show_value(item)}")
                    return False
                if name == "any" and value:
                    del self.notes[mark:]
                    return True
                if name in MONOTONE and seen and not MONOTONE[name](seen[-1][1], value):
                    self.notes.insert(mark, f"first {target()} to break it: {show_value(item)} "
                                            f"({value!r} {MONOTONE_WORDS[name]} {seen[-1][1]!r})")
                    return False
                del self.notes[mark:]
                seen.append((item, value))
        finally:
            self.nodes[ast.Name] = previous_lookup
            self._inside -= 1
        if name == "any":
            self.notes.append(f"no {target()} of {len(seen)} holds it"
                              + (f", the first: {show_value(seen[0][0])}" if seen else ""))
            return False
        return True


def bind(target: ast.expr, value: Any, bound: dict[str, Any]) -> None:
    """A comprehension's target bound to one item, into tuples and lists as deep as they go."""
    if isinstance(target, ast.Name):
        bound[target.id] = value
    else:
        for part, item in zip(target.elts, value):  # type: ignore[attr-defined]
            bind(part, item, bound)


def show_value(value: Any) -> str:
    """An element or a value as a note shows it: a row or block by its key and fields, cut at 200 characters."""
    text = value.describe() if isinstance(value, FieldView) else repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


EVAL_ERRORS = (InvalidExpression, LimitExceeded, ExpressionError, TypeError, KeyError, ValueError,
                ArithmeticError, AttributeError, IndexError)


def evaluate(text: str, names: dict[str, Any], budget: Budget) -> tuple[Any, list[str]]:
    """The walk, simpleeval's, node by node: what an expression is. Claims evaluate its compiled form
    (compiled.py), which does the same in a fraction of the time; tests/test_compiled.py holds them equal."""
    evaluator = _Evaluator(names, budget)
    try:
        return evaluator.eval(text, previously_parsed=parse_expression(text).body), evaluator.notes
    except RecursionError:
        raise LimitExceeded(too_deep()) from None


def explain(text: str, names: dict[str, Any], notes: list[str]) -> str:
    """The values a false expression read, and why its all/any was false."""
    shown: dict[str, str] = {}
    for source, node, iterated in parse_expression(text).references:
        if (iterated and notes) or source in shown or _reference_root(node).id not in names:
            continue
        try:
            value = _Evaluator(names, Budget())._eval(node)
        except EVAL_ERRORS:
            continue
        shown[source] = f"{source} = {show_value(value)}"
    values = f" ({', '.join(shown[k] for k in sorted(shown))})" if shown else ""
    return values + "".join(f"; {note}" for note in notes)
