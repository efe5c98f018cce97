"""Claims' expressions compiled, once each, into closures that evaluate them as the walk in expressions.py does.

The walk (`expressions.evaluate`, simpleeval underneath) decides anew for every node of every evaluation
what the tree alone decides: the node's handler, its operator or function, whether a comprehension may
bind a name, the text a note quotes; and each node costs it three calls through three classes. A claim
evaluated over a transcript spent most of its time there. Here those decisions are made once an
expression, and evaluating it is a call of one closure a node (closures.py has them, but for those here).

The closures do what the walk does and in its order, so that a claim's result, notes, errors and
limits are the same: one step of the claim's `Budget` for each node the walk steps (and nowhere else),
simpleeval's look for modules and forbidden functions on the values the walk looks at, `Budget.check`
on the values the walk checks, the names a comprehension binds seen as the walk sees them (its scope
exists from before its first iterable is evaluated, and a name is bound from its first round on), the
same exceptions with the same messages. Nothing outside the checked language is reachable: the
expression is `parse_expression`'s, refused as it refuses. tests/test_compiled.py holds the two equal.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any, Iterable, Iterator

import simpleeval

from . import expressions
from .closures import PLAIN, Context, Run, Step, call, next_check
from .explaining import first_break
from .expressions import (EXPLAINED, MONOTONE, MONOTONE_WORDS, Budget, LimitExceeded, bind, parse_expression,
                          show_value, too_deep)


def _call(node: ast.Call, cx: Context) -> Step:
    """all/any/increasing and the like over one argument are explained; any other call is a plain one."""
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name in EXPLAINED and len(node.args) == 1 and not node.keywords:
        argument = node.args[0]
        if isinstance(argument, (ast.GeneratorExp, ast.ListComp)) and len(argument.generators) == 1:
            return _explained(name, argument, cx)
        if name in MONOTONE:
            return _monotone(name, argument, cx)
    return call(node, cx)


def _monotone(name: str, argument: ast.expr, cx: Context) -> Step:
    """increasing(values) and the like over anything but one comprehension: the items on either side of a break."""
    values_of, holds, words = cx.compile(argument), MONOTONE[name], MONOTONE_WORDS[name]

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        values = list(values_of(s))
        index = first_break(values, holds)
        if index is not None:
            s.notes.append(f"item {index} ({values[index]!r}) {words} item {index - 1} ({values[index - 1]!r})")
        value = index is None
        s.check(value)
        return value
    return run


def _binds(generators: list[ast.comprehension]) -> frozenset[str]:
    """The names a comprehension's targets can bind: `bind` goes into tuples and lists, and nothing else."""
    names: set[str] = set()
    targets: list[ast.AST] = [generator.target for generator in generators]
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Name):
            names.add(target.id)
        else:
            targets.extend(getattr(target, "elts", ()))
    return frozenset(names)


def _taken(s: Run, items: Iterable[Any], target: ast.expr, plain: str | None, tests: list[Step],
           bound: dict[str, Any], limit: int) -> Iterator[Any]:
    """Each item of a comprehension's generator that its conditions take, bound where its element reads it
    (`plain`: the target's name where it is one), every round counted against `limit` for all of one
    evaluation's comprehensions together, as the walk counts them."""
    for item in items:
        s.rounds += 1
        if s.rounds > limit:
            raise LimitExceeded(f"comprehensions went round more than {expressions.MAX_ITERATIONS} times")
        if plain is not None:
            bound[plain] = item
        else:
            bind(target, item, bound)
        if tests and not all(test(s) for test in tests):
            continue
        yield item


def _explained(name: str, comprehension: ast.GeneratorExp | ast.ListComp, cx: Context) -> Step:
    """all/any/increasing over one comprehension, noting the first element that decides it."""
    generator = comprehension.generators[0]
    target, called = generator.target, cx.segment(generator.target) or "element"
    plain = target.id if isinstance(target, ast.Name) else None
    is_all, is_any, holds, words = name == "all", name == "any", MONOTONE.get(name), MONOTONE_WORDS.get(name)
    cx.layers.append(_binds([generator]))
    cx.inside += 1
    try:
        iterable = cx.compile(generator.iter)
        tests = [cx.compile(test) for test in generator.ifs]
        element = cx.compile(comprehension.elt)
    finally:
        cx.layers.pop()
        cx.inside -= 1

    def decide(s: Run, bound: dict[str, Any]) -> bool:
        notes = s.notes
        seen: list[tuple[Any, Any]] = []
        for item in _taken(s, iterable(s), target, plain, tests, bound, expressions.MAX_ITERATIONS):
            mark = len(notes)
            value = element(s)
            if is_all:
                if not value:
                    notes.insert(mark, f"first {called} to break it: {show_value(item)}")
                    return False
            elif is_any:
                if value:
                    del notes[mark:]
                    return True
            elif seen and not holds(seen[-1][1], value):
                notes.insert(mark, f"first {called} to break it: {show_value(item)} "
                                   f"({value!r} {words} {seen[-1][1]!r})")
                return False
            del notes[mark:]
            seen.append((item, value))
        if is_any:
            notes.append(f"no {called} of {len(seen)} holds it"
                         + (f", the first: {show_value(seen[0][0])}" if seen else ""))
            return False
        return True

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        bound: dict[str, Any] = {}
        s.scopes.append(bound)
        try:
            value = decide(s, bound)
        finally:
            s.scopes.pop()
        s.check(value)
        return value
    return run


def _comprehension(node: ast.ListComp | ast.GeneratorExp | ast.DictComp, cx: Context) -> Step:
    """A list (a generator expression too, as simpleeval has it) or a dict, every generator in one scope."""
    is_dict = isinstance(node, ast.DictComp)
    cx.layers.append(_binds(node.generators))
    try:
        generators = [(cx.compile(g.iter), g.target, g.target.id if isinstance(g.target, ast.Name) else None,
                       [cx.compile(test) for test in g.ifs]) for g in node.generators]
        if is_dict:
            key, element = cx.compile(node.key), cx.compile(node.value)      # type: ignore[union-attr]
        else:
            key, element = None, cx.compile(node.elt)                        # type: ignore[union-attr]
    finally:
        cx.layers.pop()
    last = len(generators) - 1

    def loop(s: Run, bound: dict[str, Any], out: Any, index: int) -> None:
        iterable, target, plain, tests = generators[index]
        # simpleeval's own bound, as its walk of a comprehension has it (the walk's all/any: MAX_ITERATIONS)
        for _ in _taken(s, iterable(s), target, plain, tests, bound, simpleeval.MAX_COMPREHENSION_LENGTH):
            if index < last:
                loop(s, bound, out, index + 1)
            elif key is None:
                out.append(element(s))
            else:
                value = element(s)      # before the key, as `out[key] = value` has it
                out[key(s)] = value

    def run(s: Run) -> Any:
        s.steps += 1
        if s.steps == s.until:
            s.tick()
        out: Any = {} if is_dict else []
        bound: dict[str, Any] = {}
        s.scopes.append(bound)
        try:
            loop(s, bound, out, 0)
        finally:
            s.scopes.pop()
        s.check(out)
        return out
    return run


_MAKERS = {**PLAIN, ast.Call: _call, ast.ListComp: _comprehension, ast.GeneratorExp: _comprehension,
           ast.DictComp: _comprehension}


@lru_cache(maxsize=4096)
def compiled(text: str) -> Step:
    """An expression's closures, made once; ExpressionError as parse_expression raises it (and then nothing is
    kept, so that every evaluation of it raises it again)."""
    return Context(text, _MAKERS).compile(parse_expression(text).body)


class Evaluator(Run):
    """`evaluate` for one claim's evaluations after another's (`spend` gives it each claim's budget): its
    state is made once, not once an evaluation."""

    __slots__ = ()

    def evaluate(self, text: str, names: dict[str, Any]) -> tuple[Any, list[str]]:
        run = compiled(text)
        self.names, self.notes, self.rounds = names, [], 0     # as the walk's evaluator is reset for one
        if self.steps != self.budget.steps:                     # the budget spent elsewhere since
            self.steps = self.budget.steps
            self.until = next_check(self.steps)
        try:
            return run(self), self.notes
        except RecursionError:
            raise LimitExceeded(too_deep()) from None
        finally:
            self.budget.steps = self.steps


def evaluate(text: str, names: dict[str, Any], budget: Budget) -> tuple[Any, list[str]]:
    """What `expressions.evaluate` gives, the value and the notes, and what it spends of `budget`."""
    return Evaluator().spend(budget).evaluate(text, names)
