"""orchestrator.transcript.compiled: claims are evaluated by their expressions' closures, which must give what
the walk (expressions.evaluate, on simpleeval) gives: the value, the notes, the error and its message, the
steps and items spent, and a bound hit at the same node.

Over the fixture course's lessons and seed transcripts (tests/data), with the course's own claims and with
expressions that use every node a claim may hold, comprehensions' scopes, the explained all/any/increasing,
each bound, and what a claim may not hold.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import interleaved
from orchestrator.cuda.resources import KernelResources
from orchestrator.manifest.load import load_manifest
from orchestrator.manifest.model import Claim
from orchestrator.transcript import claims, compiled, expressions
from orchestrator.transcript.claims import evaluate_claim, evaluate_claims, names_in_scope, resources_view
from orchestrator.transcript.expressions import Budget, FieldView
from orchestrator.transcript.parse import parse_transcript

DATA = Path(__file__).parent / "data"
SEEDS = {"day13-shared-memory": ["shared_memory.txt", "shared_memory.sm_75-build.txt"],
         "day14-syncthreads": ["syncthreads.txt", "syncthreads.racecheck.txt"],
         "day16-tiled-matmul": ["tiled_matmul.txt", "tiled_matmul.memcheck.txt"],
         "day71-matmul-fp16": ["matmul_fp16.txt"]}
EACH = {"day13-shared-memory": [None, "kernels", "failures"], "day14-syncthreads": [None, "blocks"],
        "day16-tiled-matmul": [None, "cases", "speedups"], "day71-matmul-fp16": [None, "cases", "cases.kernels"]}
RESOURCES = {name: KernelResources(kernel=name, mangled=f"_Z{name}", registers=32, spill_stores=spills,
                                   spill_loads=spills)
             for name, spills in (("copyRowMajor", 0), ("transposeNaive", 8), ("transposeTiledStatic", 0),
                                  ("transposeTiledDynamic", 0), ("reverseTileSynced", 0), ("reverseTileRacy", 0),
                                  ("matmulTiled", 0), ("matmulNaive", 0))}

EXPRESSIONS = [
    # the shapes of the course's claims, and ones that fail
    "all(k.gbps <= kernels['copyRowMajor'].gbps * 0.5 for k in kernels)", "any(k.vs_copy > 10 for k in kernels)",
    "any(k.vs_copy > 1 for k in kernels if k.ms > 100)", "all(k.ms > 0.02 for k in kernels if k.gbps > 0)",
    "increasing(s.speedup for s in speedups)", "increasing(k.ms for k in kernels)",
    "non_decreasing(k.ms for k in kernels)", "decreasing(k.gbps for k in kernels)",
    "non_increasing([k.gbps for k in kernels])", "increasing(sorted([rows, cols]) + [rows])",
    "increasing([1, 2, 3]) and not increasing([1, 1, 2])", "increasing(x for x in [1, 2] for y in [1, 2])",
    "all(a > b for a, b in zip([1, 2], [3, 4]))", "any(x > 5 for x, y in zip([1, 2], [3, 4]))",
    "all(all(k.max_abs_err < 0.3 for k in c.kernels) for c in cases)",
    "all(all(k.max_abs_err < 0.1 for k in c.kernels) and c.ratio_k > 0 for c in cases)",
    "all(b.block < 64 and 1 / (128 - b.block) for b in blocks)", "mismatches >= 0 and block > 0",
    "tile == 16 and tile_cols == 32 and threads > 0", "n == 3 and y[0] == 1 and len(y) == 4",
    "y == [1, 2, 3]", "y == [1, 2]", "(1, 2) == [1, 2]", "[1, [2, 3]] == [1, [2, 4]]",
    "sorted(words, key=len, reverse=True) == ['bb', 'a']", "zip([1, 2], ['a', 'b']) == [(1, 'a'), (2, 'b')]",
    "sum(k.ms for k in kernels) < 1", "sum([k.ms for k in kernels], 10) > 10", "dims('3x4x5') == (3, 4, 5)",
    "len(kernels) == 3 and dims(case)[2] == ratio_k and cc == '9.0'",
    "blocks[256, 'reverseTileRacy'].first_bad == 96 and blocks[0].block == 32 and blocks[-1].kernel == 'x'",
    "isclose(moved_mib, 2 * rows * cols * 4 / 2**20, abs_tol=0.05, rel_tol=0)", "isclose(a=1, b=1)",
    "max(1, 2, key=abs)", "round(2.5, ndigits=1)", "floor(2.5) + ceil(2.5) == 5 and log2(8) == 3",
    # every node, and values of every kind
    "kernels", "kernels[0]", "kernels[-1].kernel", "kernels[1:3]", "y[::-1]", "y[0:2:1]", "cases",
    "cases['1024x1024x1024'].kernels['matmulTiledF32'].ms > 0", "cases['nope']", "speedups[0].speedup",
    "resources['copyRowMajor'].registers", "[k.ms for k in kernels]", "{k.kernel: k.ms for k in kernels if k.ms}",
    "{'a': 1, 'b': [1, 2]}", "{1, 2, 3} == {3, 2, 1}", "{[1]}", "(1, 2, 3)", "()", "[]", "[[1] * 3] * 2",
    "1 if n else 2", "kernels if n > 5 else 'small'", "not kernels", "-n", "+n", "~n", "-kernels",
    "1 < n < 2", "1 < 2 < 3 == 3 != 4", "n in [1, 2, 3]", "n not in y", "'Copy' in gpu",
    "kernels[0] in kernels", "kernels[0] is kernels[0]", "kernels is kernels", "rows is None or cols is not None",
    "rows // 3 + rows % 3 + rows ** 2 - rows / 2", "rows << 2 | 1 & 3 ^ 7 >> 1", "n * 'ab'", "[1] * n",
    "True * 3", "2.5 * 2", "7 % 2.5", "'a' + 1", "len", "max(len, 1)", "gpu", "True", "None", "...", "1j",
    "1e400", "'ab'[5]", "{'a': 1}['b']", "[1, 2, 3][True]", "dims(gpu)", "sorted(kernels)", "max([])",
    # identity: every element's names are made as before, none shared with another's
    "cases['256x256x256'].kernels is kernels", "cases['256x256x256'] is cases['256x256x256']",
    "[c for c in cases][0] is cases['256x256x256']", "all(c.kernels is c.kernels for c in cases)",
    # comprehensions' scopes, as simpleeval has them
    "[x for x in x]", "[y for x in [[1], [2]] for y in x]", "[y for x in [1, 2] for y in [x, y]]",
    "[a for a, b in [(1,)]]", "[a for (a, b) in [(1, 2, 3)]]", "[a for a, b in [1, 2]]", "[1 for x.y in [1]]",
    "[1 for x[0] in [1]]", "[1 for (a, x.y) in [(1, 2)]]", "[x for x in [1] for x in [x, 2]]",
    "{y: x for x in [1, 2] for y in [x]}", "{k: v for k, v in [(1, 2), (1, 3)]}", "[n for n in [n, n]]",
    "all(any(x > y for y in [0, 5]) for x in [1, 2])", "all(x for x in [1] if x for y in [x])",
    "all(q for q in [q for q in [1]])", "all(k for k in [])", "any(k for k in [0, 0])", "increasing(5)",
    "[[x for x in [5]] for x in [1]]", "[[x, y] for x in [1] for y in [x for x in [7]]]",
    "all(all(x == 5 for x in [5]) for x in [1])", "all(x == 1 for x in [1] if all(x == 2 for x in [2]))",
    # notes of and, == and the explained calls, inside and outside one another
    "all(x for x in y) and not all(x > 1 for x in y)", "n > 0 and all(x > 1 for x in y)",
    "all(x > 1 and x < 5 for x in y)", "[x > 1 and x < 5 for x in y]", "all([x > 1 and x < 5 for x in y])",
    "all(y == [1, 2] for q in [1])", "all(q == 1 for q in [y == [1, 2]])", "[y == [1, 2]] == [False]",
    "y == [1, 2] and n == 3", "[k.ms for k in kernels] == [k.ms for k in kernels][::-1]",
    # simpleeval's look for modules and forbidden functions
    "module", "forbidden", "[module]", "(module, 1)", "{1: forbidden}", "module.pi", "holder", "holder.mod",
    "holder.fun", "holder.n + 1", "[h.mod for h in [holder]]", "all(h.n for h in [holder, holder])",
    # what a claim may not hold, and what fails as it evaluates
    "gpu.upper()", "__import__('os')", "open('/etc/passwd')", "str(rows)", "kernels.__class__", "_rows > 0",
    "gpu.upper == 'x'", "kernels.rows", "kernels[0].gbs > 0", "nope", "nope(1)", "rows(2) > 0",
    "(lambda: 1)() == 1", "f'{rows}' == ''", "(n := 3) > 0", "max(*[1, 2]) > 0", "len({**{}}) == 0",
    "len({k for k in kernels}) > 0", "rows @ cols > 0", "b'a' * 2 == b'aa'", "mismatches == 0 and",
    "'%d' % 3", "rows / 0", "sqrt(-1)", "ceil(1e400)", "sum(['a'])", "round(1.5, 400)",
    # the bounds
    "'a' * 10**9", "3999999**3999999 > 0", "2**4096 > 0", "1 << 10**6 > 0", "1 << 4095",
    "2**4000 * 2**4000 > 0", "[rows] * 10001 == []", "[[1] * 100] * 100 == []", "[[1] * 99] * 99",
    "sum([[1] * 50] * 2, []) == []", "len([[a, b] for a in 'x' * 99 for b in 'y' * 99])",
]
# Each goes round comprehensions thousands of times: evaluated on one lesson's names.
LONG = [
    "len([1 for a in 'x' * 9000 for b in 'y' * 9000]) > 0", "all(all(True for b in 'x' * 200) for a in 'y' * 200)",
    "len(['a' * 10000 for a in 'x' * 101]) > 0", "len([1 for a in 'x' * 10000]) > 0", "all(True for a in 'x' * 10000)",
    "all(True for a in 'x' * 10001)", "sum(1 for a in 'x' * 5000 for b in 'yy') > 0",
    "len([1 for a in 'x' * 300 for b in 'y' * 300 if a == b])",
]


@pytest.fixture(scope="module")
def lessons():
    return {lesson.id: lesson for lesson in load_manifest(DATA / "course" / "lessons.yaml").lessons}


def transcript(lesson, seed):
    return parse_transcript(interleaved(lesson.output), (DATA / "seeds" / seed).read_text(encoding="utf-8"), seed)


class Holder(FieldView):
    """A view whose fields hold what no claim may touch."""

    fields = {"mod": math, "fun": eval, "n": 1}

    def describe(self) -> str:
        return "holder"


def names(lesson):
    return {**names_in_scope(lesson.output.items, transcript(lesson, SEEDS[lesson.id][0]).scope),
            "resources": resources_view(RESOURCES), "y": [1.0, 2.0, 9.0], "n": 3, "pairs": [(1, 2), (3, 4)],
            "words": ["a", "bb"], "module": math, "forbidden": eval, "holder": Holder()}


def outcome(evaluate, text, names):
    budget = Budget()
    try:
        value, notes = evaluate(text, names, budget)
        result = ("value", type(value).__name__, repr(value), notes)
    except Exception as exc:
        result = ("error", type(exc).__name__, str(exc))
    return result, budget.steps, budget.built


class Walk:
    """compiled.Evaluator's part, played by the walk."""

    def spend(self, budget: Budget) -> "Walk":
        self.budget = budget
        return self

    def evaluate(self, text: str, names: dict) -> tuple:
        return expressions.evaluate(text, names, self.budget)


def walked(monkeypatch):
    """evaluate_claim's evaluations made by the walk instead of the closures."""
    monkeypatch.setattr(claims, "Evaluator", Walk)


@pytest.mark.parametrize("lesson_id", SEEDS)
def test_every_expression_evaluates_as_the_walk_does(lessons, lesson_id):
    seen = names(lessons[lesson_id])
    texts = [*EXPRESSIONS, *(c.expression for c in lessons[lesson_id].claims),
             *(LONG if lesson_id == "day13-shared-memory" else [])]
    for text in texts:
        assert outcome(compiled.evaluate, text, seen) == outcome(expressions.evaluate, text, seen), text


def one_by_one_on_the_walk(monkeypatch, lesson, parsed, probes, resources):
    """evaluate_claims as it was: each claim's names and elements made for it alone, evaluated by the walk."""
    with monkeypatch.context() as patch:
        walked(patch)
        extra = {"resources": resources_view(resources)} if resources is not None else {}
        return [evaluate_claim(lesson.output, parsed, claim, extra).model_dump() for claim in probes
                if resources is not None or not claims.uses_resources(claim)]


@pytest.mark.parametrize("lesson_id, seed", [(lesson, seed) for lesson, seeds in SEEDS.items() for seed in seeds])
@pytest.mark.parametrize("resources", [None, RESOURCES], ids=["", "resources"])
def test_the_course_claims_come_out_as_they_did(lessons, monkeypatch, lesson_id, seed, resources):
    lesson = lessons[lesson_id]
    parsed = transcript(lesson, seed)
    results = [r.model_dump() for r in evaluate_claims(lesson.output, parsed, lesson.claims, resources)]
    assert results == one_by_one_on_the_walk(monkeypatch, lesson, parsed, lesson.claims, resources)


@pytest.mark.parametrize("lesson_id", SEEDS)
def test_claims_come_out_as_they_did_one_by_one_on_the_walk(lessons, monkeypatch, lesson_id):
    lesson = lessons[lesson_id]
    parsed = transcript(lesson, SEEDS[lesson_id][0])
    probes = [Claim(id=f"p{i}", gate=text, each=each) for each in EACH[lesson_id] for i, text in enumerate(EXPRESSIONS)]
    probes += [Claim(id=f"w{i}", expect="True", where=text, each=each) for each in EACH[lesson_id][1:]
               for i, text in enumerate(EXPRESSIONS[:40])]
    for resources in (None, RESOURCES):
        results = [r.model_dump() for r in evaluate_claims(lesson.output, parsed, probes, resources)]
        assert results == one_by_one_on_the_walk(monkeypatch, lesson, parsed, probes, resources)


@pytest.mark.parametrize("lesson_id, each, text", [
    ("day14-syncthreads", "blocks", "mismatches >= 0 and block > 0"),
    ("day13-shared-memory", None, "all(k.gbps <= kernels['copyRowMajor'].gbps * 1.05 for k in kernels)"),
    ("day71-matmul-fp16", "cases", "all(k.ms > 0 for k in kernels) and len([1 for a in kernels for b in kernels "
                                   "if a.ms < b.ms]) == 3 and isclose(f32_atol, f32_rtol * max_ref, rel_tol=2e-3)"),
    ("day16-tiled-matmul", "cases",
     "loads == (2 * dims(case)[2] if kernel == 'naive' else 2 * ceil(dims(case)[2] / tile))"),
])
def test_the_step_bound_stops_both_at_the_same_node(lessons, monkeypatch, lesson_id, each, text):
    lesson = lessons[lesson_id]
    parsed = transcript(lesson, SEEDS[lesson_id][0])
    claim = Claim(id="steps", gate=text, each=each, where="kernel != 'x'" if each == "blocks" else "True")
    stopped = set()
    for steps in range(0, 150):
        monkeypatch.setattr(expressions, "MAX_STEPS", steps)
        fast = evaluate_claim(lesson.output, parsed, claim).model_dump()
        with monkeypatch.context() as patch:
            walked(patch)
            assert fast == evaluate_claim(lesson.output, parsed, claim).model_dump(), steps
        stopped.add(fast["failures"][-1] if fast["failures"] else "")
    assert len(stopped) > 3   # the bound met different nodes


def test_the_time_bound_stops_both_at_the_same_step(lessons, monkeypatch):
    monkeypatch.setattr(expressions, "CLAIM_SECONDS", -1.0)
    seen = names(lessons["day13-shared-memory"])
    for text in ["all(k.ms > 0 for k in kernels for j in 'x' * 300)", "[[a, b] for a in 'x' * 9 for b in 'y' * 40]",
                 "len([1 for a in 'x' * 100]) > 0", "[x for x in y]"]:
        assert outcome(compiled.evaluate, text, seen) == outcome(expressions.evaluate, text, seen), text


def test_an_expression_refused_is_refused_at_every_evaluation(lessons):
    seen = names(lessons["day13-shared-memory"])
    for _ in range(2):
        assert outcome(compiled.evaluate, "rows @ cols > 0", seen) == (
            ("error", "ExpressionError", "'rows @ cols > 0': the operator @ is not allowed in a claim"), 0, 0)


def test_results_are_the_models_their_constructor_makes(lessons):
    lesson = lessons["day14-syncthreads"]
    results = evaluate_claims(lesson.output, transcript(lesson, "syncthreads.txt"),
                              [*lesson.claims, Claim(id="fails", gate="n < 0", says="never")])
    assert [r.held for r in results] == [True] * 5 + [False]
    for result in results:
        again = claims.ClaimResult(**result.model_dump())
        assert (result, result.model_fields_set) == (again, again.model_fields_set)


def test_a_block_names_its_fields_in_the_schema_s_order(lessons):
    lesson = lessons["day71-matmul-fp16"]
    [result] = evaluate_claims(lesson.output, transcript(lesson, "matmul_fp16.txt"),
                               [Claim(id="nope", gate="cases['256x256x256'].nope")])
    assert result.failures == [
        "cannot evaluate \"cases['256x256x256'].nope\": \"cases[256x256x256] has no field 'nope' (it has case, "
        "max_ref, f32_atol, f32_rtol, f16_atol, f16_rtol, kernels, error_ratio, ratio_k)\""]
