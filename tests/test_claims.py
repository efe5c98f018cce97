"""orchestrator.transcript.claims: lessons.yaml's claims evaluated on the real H200 transcripts.

tests/data/seeds/README.md says where each transcript came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.transcript.claims import ClaimError, ClaimResult, check_claims, evaluate_claim, evaluate_claims
from orchestrator.manifest.model import Claim, Lesson
from orchestrator.manifest.load import load_manifest
from conftest import interleaved
from orchestrator.transcript.parse import Transcript, parse_transcript

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "tests" / "data" / "course"   # the fixture course (conftest.COURSE)
SEEDS = Path(__file__).parent / "data" / "seeds"

DAY13 = "day13-shared-memory"
DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
DAY71 = "day71-matmul-fp16"

SYNCED_256 = "   256  reverseTileSynced             0            -           -           -\n"
STATIC_ROW = "transposeTiledStatic           0.032      1494.4      1.90x\n"


@pytest.fixture(scope="module")
def lessons() -> dict[str, Lesson]:
    return {lesson.id: lesson for lesson in load_manifest(COURSE / "lessons.yaml").lessons}


def seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def parsed(lesson: Lesson, name: str, text: str | None = None) -> Transcript:
    # The seeds' runs under a sanitizer interleave the tool's lines with the program's: the schema ignores them.
    return parse_transcript(interleaved(lesson.output), seed(name) if text is None else text, name)


def evaluate(lesson: Lesson, name: str, text: str | None = None, **claim) -> ClaimResult:
    return evaluate_claim(lesson.output, parsed(lesson, name, text), Claim(id="probe", **claim))


def summary(results: list[ClaimResult]) -> list[tuple[str, str, bool, int, list[str]]]:
    return [(r.id, r.kind, r.held, r.checked, r.failures) for r in results]


# --- every claim holds on the recorded runs ---------------------------------------

DAY13_HELD = [
    ("every-kernel-matches", "gate", True, 1, []),
    ("same-bytes-every-row", "gate", True, 1, []),
    ("optin-lifts-the-cap", "gate", True, 1, []),
    ("default-cap-refuses", "expect", True, 1, []),
    ("tiled-beats-naive", "expect", True, 1, []),
    ("copy-is-the-ceiling", "expect", True, 1, []),
]
DAY14_HELD = [
    ("synced-has-no-mismatch", "gate", True, 4, []),
    ("prefix-matches-and-returns", "gate", True, 1, []),
    ("every-block-size", "gate", True, 1, []),
    ("nothing-failed", "gate", True, 1, []),
    ("one-warp-hides-the-race", "expect", True, 1, []),
]
DAY16_HELD = [
    ("every-case-matches", "gate", True, 1, []),
    ("loads-per-thread", "gate", True, 6, []),
    ("shared-memory-is-two-tiles", "gate", True, 1, []),
    ("tiled-is-faster", "expect", True, 3, []),
]
DAY71_HELD = [
    ("every-kernel-within-its-gate", "gate", True, 9, []),
    ("all-cases-passed", "gate", True, 1, []),
    ("gate-arithmetic", "gate", True, 3, []),
    ("f16-accumulation-loses", "expect", True, 3, []),
]


@pytest.mark.parametrize("lesson_id, name, expected", [
    (DAY13, "shared_memory.txt", DAY13_HELD),
    (DAY13, "shared_memory.sm_75-build.txt", DAY13_HELD),
    (DAY14, "syncthreads.txt", DAY14_HELD),
    (DAY14, "syncthreads.sm_75-build.txt", DAY14_HELD),
    (DAY14, "syncthreads.racecheck.txt", DAY14_HELD),
    (DAY16, "tiled_matmul.txt", DAY16_HELD),
    (DAY16, "tiled_matmul.sm_75-build.txt", DAY16_HELD),
    (DAY16, "tiled_matmul.memcheck.txt", DAY16_HELD),
    (DAY71, "matmul_fp16.txt", DAY71_HELD),
    (DAY71, "matmul_fp16.sm_75-build.txt", DAY71_HELD),
])
def test_every_claim_holds_on_the_recorded_runs(lessons, lesson_id, name, expected):
    lesson = lessons[lesson_id]
    assert summary(evaluate_claims(lesson.output, parsed(lesson, name), lesson.claims)) == expected


def test_every_claim_passes_the_static_check(lessons):
    for lesson in lessons.values():
        for claim in lesson.claims:
            check_claims(lesson.output, claim)


# --- failing claims name the element ----------------------------------------------


def test_failing_gate_names_the_row(lessons):
    text = seed("syncthreads.txt").replace(
        SYNCED_256, "   256  reverseTileSynced             5           17           0           3\n")
    lesson = lessons[DAY14]
    results = evaluate_claims(lesson.output, parsed(lesson, "syncthreads.txt", text), lesson.claims)
    synced = results[0]
    assert synced == ClaimResult(
        id="synced-has-no-mismatch", kind="gate",
        says="with the barrier, every block size reverses every tile correctly",
        expression="mismatches == 0", held=False, checked=4,
        failures=["blocks[256/reverseTileSynced]: mismatches == 0 is false (mismatches = 5)"])
    assert [r.held for r in results[1:]] == [True, True, True, True]


def test_failing_gate_in_a_nested_table_names_the_section_and_the_row(lessons):
    result = evaluate(lessons[DAY71], "matmul_fp16.txt", each="cases.kernels",
                      where="kernel == 'matmulF16StoreF16Acc'", gate="max_abs_err < 0.1")
    assert (result.held, result.checked) == (False, 3)
    assert result.failures == [
        "cases[1024x1024x1024].kernels[matmulF16StoreF16Acc]: max_abs_err < 0.1 is false (max_abs_err = 0.1867)",
        "cases[2048x2048x2048].kernels[matmulF16StoreF16Acc]: max_abs_err < 0.1 is false (max_abs_err = 0.5078)",
    ]


def test_failing_claim_without_each_shows_its_fields(lessons):
    text = seed("shared_memory.txt").replace(
        "all four kernels match the CPU reference at 6011003 elements\n", "")
    result = evaluate_claim(lessons[DAY13].output, parsed(lessons[DAY13], "shared_memory.txt", text),
                            lessons[DAY13].claims[0])
    assert result.held is False
    assert result.failures == [
        "len(failures) == 0 and elements == rows * cols is false "
        "(cols = 3001, elements = None, failures = (no rows), rows = 2003); "
        "the part of 'and' that is false: elements == rows * cols"]


# --- gate and expect --------------------------------------------------------------


def test_an_expect_that_fails_is_reported_as_an_expect(lessons):
    text = seed("shared_memory.txt").replace(STATIC_ROW, "transposeTiledStatic           0.120       398.2      7.06x\n")
    lesson = lessons[DAY13]
    results = {r.id: r for r in evaluate_claims(lesson.output, parsed(lesson, "shared_memory.txt", text), lesson.claims)}
    tiled = results["tiled-beats-naive"]
    assert (tiled.kind, tiled.held, tiled.checked) == ("expect", False, 1)
    assert tiled.failures == [
        "kernels['transposeTiledStatic'].ms < kernels['transposeNaive'].ms is false "
        "(kernels['transposeNaive'].ms = 0.092, kernels['transposeTiledStatic'].ms = 0.12)"]
    assert [r.held for r in results.values() if r.kind == "gate"] == [True, True, True]


def test_kind_follows_the_key(lessons):
    assert evaluate(lessons[DAY16], "tiled_matmul.txt", gate="tile == 16").kind == "gate"
    assert evaluate(lessons[DAY16], "tiled_matmul.txt", expect="tile == 16").kind == "expect"
    assert evaluate(lessons[DAY16], "tiled_matmul.txt", expect="tile == 32").model_dump() == {
        "id": "probe", "kind": "expect", "says": "", "expression": "tile == 32", "held": False,
        "checked": 1, "failures": ["tile == 32 is false (tile = 16)"]}


# --- each and where ---------------------------------------------------------------


def test_where_picks_the_rows_checked(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.txt", each="blocks",
                      where="kernel == 'reverseTileRacy' and block >= 64", expect="mismatches == 0")
    assert (result.held, result.checked) == (False, 3)
    assert result.failures == [
        "blocks[64/reverseTileRacy]: mismatches == 0 is false (mismatches = 98307)",
        "blocks[128/reverseTileRacy]: mismatches == 0 is false (mismatches = 98883)",
        "blocks[256/reverseTileRacy]: mismatches == 0 is false (mismatches = 95520)",
    ]


def test_where_on_the_racecheck_run(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.racecheck.txt", each="blocks",
                      where="kernel == 'reverseTileRacy' and mismatches > 0", gate="first_bad is not None")
    assert (result.held, result.checked, result.failures) == (True, 2, [])


def test_each_that_matches_nothing_fails(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.txt", each="blocks", where="block == 1024", gate="mismatches == 0")
    assert (result.held, result.checked) == (False, 0)
    assert result.failures == ["no element of 'blocks' matched; the claim checked nothing"]


def test_each_over_a_section_sees_the_block_and_the_top_level(lessons):
    result = evaluate(lessons[DAY71], "matmul_fp16.txt", each="cases",
                      gate="len(kernels) == 3 and dims(case)[2] == ratio_k and cc == '9.0'")
    assert (result.held, result.checked, result.failures) == (True, 3, [])


def test_each_over_notes(lessons):
    result = evaluate(lessons[DAY16], "tiled_matmul.txt", each="speedups", gate="speedup > 2")
    assert (result.held, result.checked) == (False, 3)
    assert result.failures == [
        "speedups[512x512x512]: speedup > 2 is false (speedup = 1.54)",
        "speedups[611x613x617]: speedup > 2 is false (speedup = 1.61)",
    ]


def test_tables_index_by_key_tuple_and_position(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.txt",
                      gate="blocks[256, 'reverseTileRacy'].first_bad == 96 and blocks['64/reverseTileRacy'].wrote_warp == 0 "
                           "and blocks[0].block == 32 and blocks[-1].kernel == 'reverseTileSynced'")
    assert (result.held, result.failures) == (True, [])


def test_unknown_row_fails_the_claim(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.txt", gate="blocks['nope'].block == 32")
    assert result.failures == ["cannot evaluate \"blocks['nope'].block == 32\": \"table 'blocks' has no row 'nope'\""]
    result = evaluate(lessons[DAY14], "syncthreads.txt", gate="blocks[99].block == 32")
    assert result.failures == ["cannot evaluate 'blocks[99].block == 32': list index out of range"]


# --- unsafe expressions -----------------------------------------------------------


ALLOWED = ("abs, all, any, ceil, decreasing, dims, floor, increasing, isclose, len, log2, max, min, "
           "non_decreasing, non_increasing, round, sorted, sqrt, sum, zip")


# Evaluation checks what the manifest's static check checks, for claims made without it.
@pytest.mark.parametrize("expression, failure", [
    ("__import__('os').system('true')",
     "cannot evaluate \"__import__('os').system('true')\": calls the method .system(); a claim calls only "
     f"the allowed functions ({ALLOWED})"),
    ("__import__('os')",
     "cannot evaluate \"__import__('os')\": the name '__import__' starts with '_', which a claim may not use"),
    ("open('/etc/passwd')",
     "cannot evaluate \"open('/etc/passwd')\": Function 'open' not defined, for expression 'open('/etc/passwd')'."),
    ("kernels.__class__",
     "cannot evaluate 'kernels.__class__': the attribute '__class__' starts with '_', which a claim may not read"),
    ("kernels['copyRowMajor'].__class__.__init__",
     "cannot evaluate \"kernels['copyRowMajor'].__class__.__init__\": the attribute '__init__' starts with '_', "
     "which a claim may not read"),
    ("'a' * 10**9",
     "cannot evaluate \"'a' * 10**9\": repeating a str of length 1 1000000000 times is too long "
     "(a claim builds at most 10000 items)"),
    ("rows / 0", "cannot evaluate 'rows / 0': division by zero"),
    ("sqrt(-rows)", "cannot evaluate 'sqrt(-rows)': math domain error"),
])
def test_unsafe_or_broken_expressions_fail_the_claim(lessons, expression, failure):
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate=expression)
    assert (result.held, result.checked, result.failures) == (False, 1, [failure])


@pytest.mark.parametrize("expression, message", [
    ("__import__('os')", "\"__import__('os')\": the name '__import__' starts with '_', which a claim may not use"),
    ("str(rows)", "'str(rows)' names unknown name 'str': not a field of this lesson and not an allowed function "
                  f"(allowed: {ALLOWED})")])
def test_functions_outside_the_list_are_refused_statically(lessons, expression, message):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate=expression))
    assert str(info.value) == message


def test_overflow_fails_the_claim(lessons):
    text = seed("tiled_matmul.txt").replace("tiled is 2.49x faster", "tiled is infx faster")
    result = evaluate(lessons[DAY16], "tiled_matmul.txt", text, each="speedups", gate="ceil(speedup) >= 2")
    assert (result.held, result.checked) == (False, 3)
    assert result.failures == [
        "speedups[256x256x256]: cannot evaluate 'ceil(speedup) >= 2': cannot convert float infinity to integer"]


# --- the static check -------------------------------------------------------------


def test_check_claims_unknown_field_in_each(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", each="blocks", gate="mismatch == 0"))
    assert str(info.value) == (
        "'mismatch == 0' names unknown name 'mismatch': not a field of this lesson and not an allowed function "
        "(fields here: all_gated_matched, block, block_sizes, blocks, cc, failures, first_bad, gpu, kernel, "
        "mismatches, n, prefix_bad, prefix_n, prefix_reach, prefix_returned, prefix_threads, read_warp, resources, "
        "wrote_warp)")


def test_check_claims_unknown_field_in_where(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", each="blocks", where="kernal == 1", gate="mismatches == 0"))
    assert str(info.value).startswith("where: 'kernal == 1' names unknown name 'kernal': not a field of this "
                                      "lesson and not an allowed function (fields here: all_gated_matched, ")


def test_check_claims_columns_are_only_known_inside_each(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY71].output, Claim(id="probe", gate="kernels > 0"))
    assert str(info.value) == (
        "'kernels > 0' names unknown name 'kernels': not a field of this lesson and not an allowed function "
        "(fields here: bf16_300k, bf16_near_one, cases, cases_passed, cc, failures, gpu, half_300k, half_300k_isinf, "
        "half_65520_isinf, half_max, half_near_one, resources, support_cc, tensor_cores)")
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY16].output, Claim(id="probe", each="speedups", gate="speedup > 1 and loads > 0"))
    assert str(info.value) == (
        "'speedup > 1 and loads > 0' names unknown name 'loads': not a field of this lesson and not an allowed "
        "function (fields here: cases, cases_matched, cc, failures, fewer_loads, gpu, resources, smem_bytes, speedup, "
        "speedups, threads, tile, tile_cols)")


def test_check_claims_each_naming_a_column(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY71].output, Claim(id="probe", each="kernels", gate="ms > 0"))
    assert str(info.value) == "each: 'kernels' is not a table or section of the output (known: cases, failures, tensor_cores)"


def test_check_claims_syntax_error(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", gate="mismatches == 0 and"))
    assert str(info.value) == "invalid expression 'mismatches == 0 and': invalid syntax"


@pytest.mark.parametrize("claim, loc, reason", [
    (Claim(id="probe", expect="mismatches == 0 and"), ("expect",),
     "invalid expression 'mismatches == 0 and': invalid syntax"),
    (Claim(id="probe", each="blocks", where="kernal == 1", gate="mismatches == 0"), ("where",),
     "'kernal == 1' names unknown name 'kernal'"),
    (Claim(id="probe", each="nothing", gate="mismatches == 0"), ("each",),
     "'nothing' is not a table or section of the output"),
], ids=["expect", "where", "each"])
def test_a_claim_error_carries_the_key_it_is_about(lessons, claim, loc, reason):
    with pytest.raises(ClaimError) as info:
        check_claims(lessons[DAY14].output, claim)
    assert (info.value.loc, info.value.reason[:len(reason)]) == (loc, reason)
    assert str(info.value) == (info.value.reason if loc == ("expect",) else f"{loc[0]}: {info.value.reason}")


def test_comprehension_variables_are_not_fields(lessons):
    check_claims(lessons[DAY13].output, Claim(id="probe", expect="all(k.gbps > 0 for k in kernels)"))


# --- what a claim may contain: refused when the manifest loads --------------------


@pytest.mark.parametrize("expression, reason", [
    ("gpu.upper() == 'NVIDIA H200'", f"calls the method .upper(); a claim calls only the allowed functions ({ALLOWED})"),
    ("failures.count('a') == 0", f"calls the method .count(); a claim calls only the allowed functions ({ALLOWED})"),
    ("dims('1x2')[0]() > 0", "calls something other than a function's name; a claim calls only the allowed "
                             f"functions ({ALLOWED})"),
    ("_rows > 0", "the name '_rows' starts with '_', which a claim may not use"),
    ("all(_k.ms > 0 for _k in kernels)", "the name '_k' starts with '_', which a claim may not use"),
    ("kernels[0]._row is None", "the attribute '_row' starts with '_', which a claim may not read"),
    ("(lambda: 1)() == 1", "calls something other than a function's name; a claim calls only the allowed "
                           f"functions ({ALLOWED})"),
    ("max(lambda x: x, 1) > 0", "a lambda is not allowed in a claim"),
    ("f'{rows:>99999999}' == ''", "an f-string is not allowed in a claim"),
    ("(n := 3) > 0", "an assignment (:=) is not allowed in a claim"),
    ("max(*[1, 2]) > 0", "unpacking with * is not allowed in a claim"),
    ("isclose(1, 1, **{'rel_tol': 1}) ", "unpacking with ** is not allowed in a claim"),
    ("len({**{}}) == 0", "unpacking with ** is not allowed in a claim"),
    ("len({k for k in kernels}) > 0", "a set comprehension is not allowed in a claim"),
    ("rows @ cols > 0", "the operator @ is not allowed in a claim"),
    ("b'a' * 2 == b'aa'", "a bytes literal is not allowed in a claim"),
])
def test_constructs_the_docs_exclude_are_refused_statically(lessons, expression, reason):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate=expression))
    assert str(info.value) == f"{expression!r}: {reason}"
    # and by evaluation, for a claim that never went through the manifest
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate=expression)
    assert result.failures == [f"cannot evaluate {expression!r}: {reason}"]


def test_calling_a_field_is_refused_statically(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate="rows(2) > 0"))
    assert str(info.value) == ("'rows(2) > 0' calls 'rows', which is a field, not a function; "
                               f"a claim calls only the allowed functions ({ALLOWED})")


def test_an_unknown_function_lists_the_allowed_ones(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate="sortd([rows, cols]) == [rows, cols]"))
    assert str(info.value) == ("'sortd([rows, cols]) == [rows, cols]' names unknown name 'sortd': not a field of "
                               f"this lesson and not an allowed function (allowed: {ALLOWED})")


def test_reading_a_field_of_something_that_is_not_a_row_fails_the_claim(lessons):
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate="gpu.upper == 'NVIDIA H200'")
    assert result.failures == ["cannot evaluate \"gpu.upper == 'NVIDIA H200'\": '.upper' reads a field of a row "
                               "or a block, not of a str"]
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate="kernels[0].gbs > 0")
    assert result.failures == ["cannot evaluate 'kernels[0].gbs > 0': \"kernels[copyRowMajor] kernel=copyRowMajor, "
                               "ms=0.017, gbps=2839.7, vs_copy=1.0 has no field 'gbs' (it has kernel, ms, gbps, "
                               "vs_copy)\""]


def test_string_formatting_with_percent_is_refused(lessons):
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate="'%0999999999d' % rows == ''")
    assert result.failures == ["cannot evaluate \"'%0999999999d' % rows == ''\": formatting a string with % "
                               "is not allowed in a claim"]


# --- size and depth: refused when the manifest loads; what loads evaluates ----------


def test_an_expression_longer_than_the_limit_is_refused(lessons):
    expression = " + ".join(["rows"] * 5000) + " > 0"
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate=expression))
    assert str(info.value) == ("'rows + rows + rows + rows + rows + rows + rows + rows + rows'... "
                               "(35001 characters): is 35001 characters long; a claim's expression has at most 1000")


@pytest.mark.parametrize("expression", [
    "+".join(["n"] * 400) + " > 0",            # 803 characters: short enough, too deep
    "not " * 240 + "n",
    "-" * 999 + "n",                            # deeper than Python's own parser goes
    "abs(" * 60 + "n" + ")" * 60,
], ids=["plus", "not", "minus", "calls"])
def test_an_expression_nested_deeper_than_the_limit_is_refused(lessons, expression):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", gate=expression))
    assert str(info.value).endswith(": nests more than 50 levels deep (each operator of a chain such as "
                                    "a + b + c is a level)")


@pytest.mark.parametrize("make", [
    lambda depth: "+".join(["n"] * (depth - 1)) + " > 0",
    lambda depth: "not " * (depth - 2) + "n",   # an even number of nots
    lambda depth: "abs(" * (depth - 2) + "n" + ")" * (depth - 2) + " > 0",
    lambda depth: "all(" * (depth // 2 - 1) + "True" + " for x in 'a')" * (depth // 2 - 1),
], ids=["plus", "not", "calls", "comprehensions"])
def test_the_deepest_expression_that_loads_also_evaluates(lessons, make):
    expression = make(50)
    check_claims(lessons[DAY14].output, Claim(id="probe", gate=expression))
    result = evaluate(lessons[DAY14], "syncthreads.txt", gate=expression)
    assert (result.held, result.failures) == (True, [])
    with pytest.raises(ValueError):
        check_claims(lessons[DAY14].output, Claim(id="probe", gate=make(52)))


# --- bounds on evaluation: past one, the claim fails and says which -----------------


@pytest.mark.parametrize("expression, reason", [
    ("3999999**3999999 > 0", "3999999 ** 3999999 would have 87726251 bits (a claim computes with at most 4096)"),
    ("2**4097 > 0", "2 ** 4097 would have 4097 bits (a claim computes with at most 4096)"),
    ("1 << 10**6 > 0", "1 << 1000000 would have 1000001 bits (a claim computes with at most 4096)"),
    ("2**4000 * 2**4000 > 0", "a number of 8001 bits is too large (a claim computes with at most 4096 bits)"),
    ("'ab' * 10**6 == ''", "repeating a str of length 2 1000000 times is too long (a claim builds at most 10000 items)"),
    ("[rows] * 10001 == []", "repeating a list of length 1 10001 times is too long (a claim builds at most 10000 items)"),
    ("[[1] * 10000] * 10000 == []", "a list of 10001 items is too long (a claim builds at most 10000, nested ones "
                                    "counted)"),
    ("[[1] * 100] * 100 == []", "a list of 10100 items is too long (a claim builds at most 10000, nested ones counted)"),
    ("sum([[1] * 50] * 2, []) == []", "sum() adds numbers, not list"),
    ("round(rows, -10**9) == 0", "round() keeps at most 308 digits, not -1000000000"),
    ("len([1 for a in 'x' * 9000 for b in 'y' * 9000]) > 0", "comprehensions went round more than 10000 times"),
    ("all(all(True for b in 'x' * 200) for a in 'y' * 200)", "comprehensions went round more than 10000 times"),
    ("len(['a' * 10000 for a in 'x' * 101]) > 0", "the claim built more than 1000000 items of strings and lists"),
])
def test_a_claim_past_a_bound_fails_naming_it(lessons, expression, reason):
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate=expression)
    assert (result.held, result.checked, result.failures) == (False, 1, [f"cannot evaluate {expression!r}: {reason}"])


def test_the_step_bound_covers_every_row_of_a_claim_and_stops_it(lessons, monkeypatch):
    import orchestrator.transcript.expressions as claims

    monkeypatch.setattr(claims, "MAX_STEPS", 40)   # 7 steps a row: the sixth row goes past 40
    result = evaluate(lessons[DAY14], "syncthreads.txt", each="blocks", gate="mismatches >= 0 and block > 0")
    assert (result.held, result.checked) == (False, 6)
    assert result.failures == ["blocks[128/reverseTileSynced]: cannot evaluate 'mismatches >= 0 and block > 0': "
                               "the claim took more than 40 evaluation steps"]


def test_the_time_bound_stops_a_claim(lessons, monkeypatch):
    import orchestrator.transcript.expressions as claims

    monkeypatch.setattr(claims, "CLAIM_SECONDS", -1.0)
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate="all(k.ms > 0 for k in kernels for j in 'x' * 300)")
    assert result.failures == ["cannot evaluate \"all(k.ms > 0 for k in kernels for j in 'x' * 300)\": "
                               "the claim ran for more than -1 s"]


def test_the_real_limits_are_the_documented_ones():
    import orchestrator.transcript.expressions as claims

    docs = (REPO / "docs" / "schema.md").read_text(encoding="utf-8")
    for line in ["| expression length | 1000 characters |", "| expression depth | 50 levels |",
                 "| integers | 4096 bits |", "| a string, list, tuple or dict | 10000 items, nested ones counted |",
                 "| comprehension rounds | 10000 per evaluation |",
                 "| items built | 1000000 per claim, all its rows together |",
                 "| evaluation steps | 500000 per claim, all its rows together |",
                 "| time | 2 s per claim, all its rows together |"]:
        assert line in docs
    assert (claims.MAX_CHARS, claims.MAX_DEPTH, claims.MAX_INT_BITS, claims.MAX_ITEMS, claims.MAX_ITERATIONS,
            claims.MAX_BUILT, claims.MAX_STEPS, claims.CLAIM_SECONDS) == (
        1000, 50, 4096, 10000, 10000, 1000000, 500000, 2.0)


# --- sorted, zip, increasing and the rest ------------------------------------------


@pytest.mark.parametrize("expression, held", [
    ("sorted([k.ms for k in kernels]) == [0.017, 0.032, 0.032, 0.092]", True),
    ("sorted([3, 1, 2], reverse=True) == [3, 2, 1]", True),
    ("zip([1, 2], ['a', 'b']) == [(1, 'a'), (2, 'b')]", True),
    ("all(a < b for a, b in zip([1, 2], [3, 4]))", True),
    ("increasing([1, 2, 3]) and not increasing([1, 1, 2])", True),
    ("non_decreasing([1, 1, 2]) and not non_decreasing([2, 1])", True),
    ("decreasing([3, 2, 1]) and not decreasing([3, 3])", True),
    ("non_increasing([3, 3, 1]) and not non_increasing([1, 2])", True),
    ("increasing([]) and increasing([5]) and decreasing(k.ms for k in kernels if False)", True),
    ("sum(k.ms for k in kernels) < 1", True),
])
def test_functions(lessons, expression, held):
    check_claims(lessons[DAY13].output, Claim(id="probe", gate=expression))
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate=expression)
    assert (result.held, result.failures) == (held, [])


# --- a failed all, any or increasing names the row that decided it ------------------


def test_a_failed_all_names_the_first_row_that_broke_it(lessons):
    result = evaluate(lessons[DAY13], "shared_memory.txt",
                      expect="all(k.gbps <= kernels['copyRowMajor'].gbps * 0.5 for k in kernels)")
    assert result.failures == [
        "all(k.gbps <= kernels['copyRowMajor'].gbps * 0.5 for k in kernels) is false "
        "(kernels['copyRowMajor'].gbps = 2839.7); first k to break it: kernels[copyRowMajor] kernel=copyRowMajor, "
        "ms=0.017, gbps=2839.7, vs_copy=1.0"]


def test_a_failed_all_over_build_resources_names_the_kernel(lessons):
    from orchestrator.cuda.resources import KernelResources

    resources = {name: KernelResources(kernel=name, mangled=f"_Z{name}", registers=32, spill_stores=spills,
                                       spill_loads=spills)
                 for name, spills in (("copyRowMajor", 0), ("transposeNaive", 8))}
    lesson = lessons[DAY13]
    claim = next(c for c in lesson.claims if c.id == "no-kernel-spills")
    [result] = evaluate_claims(lesson.output, parsed(lesson, "shared_memory.txt"), [claim], resources)
    assert result.failures == [
        "all(k.spill_stores == 0 and k.spill_loads == 0 for k in resources) is false; first k to break it: "
        "resources[transposeNaive] kernel=transposeNaive, registers=32, spill_stores=8, spill_loads=8, "
        "stack=0, smem=0, barriers=0"]


def test_a_failed_any_says_no_row_held_it(lessons):
    result = evaluate(lessons[DAY13], "shared_memory.txt", expect="any(k.vs_copy > 10 for k in kernels)")
    assert result.failures == [
        "any(k.vs_copy > 10 for k in kernels) is false; no k of 4 holds it, the first: kernels[copyRowMajor] "
        "kernel=copyRowMajor, ms=0.017, gbps=2839.7, vs_copy=1.0"]


def test_a_failed_increasing_names_the_row_and_both_values(lessons):
    result = evaluate(lessons[DAY16], "tiled_matmul.txt", expect="increasing(s.speedup for s in speedups)")
    assert result.failures == [
        "increasing(s.speedup for s in speedups) is false; first s to break it: speedups[512x512x512] "
        "speedup=1.54, fewer_loads=16.0 (1.54 is not above 2.49)"]


def test_a_failed_increasing_over_a_list_names_the_items(lessons):
    result = evaluate(lessons[DAY13], "shared_memory.txt", expect="increasing(sorted([rows, cols]) + [rows])")
    assert result.failures == [
        "increasing(sorted([rows, cols]) + [rows]) is false (cols = 3001, rows = 2003); "
        "item 2 (2003) is not above item 1 (3001)"]


def test_nested_alls_name_the_block_then_the_row(lessons):
    result = evaluate(lessons[DAY71], "matmul_fp16.txt",
                      expect="all(all(k.max_abs_err < 0.3 for k in c.kernels) for c in cases)")
    assert result.failures == [
        "all(all(k.max_abs_err < 0.3 for k in c.kernels) for c in cases) is false; first c to break it: "
        "cases[2048x2048x2048]; first k to break it: kernels[matmulF16StoreF16Acc] kernel=matmulF16StoreF16Acc, "
        "max_abs_err=0.5078, gate_frac=0.1467, ms=1.8526, vs_f32=1.14"]


def test_all_stops_at_the_first_row_that_breaks_it(lessons):
    result = evaluate(lessons[DAY14], "syncthreads.txt", gate="all(b.block < 64 and 1 / (128 - b.block) for b in blocks)")
    assert result.failures[0].startswith(
        "all(b.block < 64 and 1 / (128 - b.block) for b in blocks) is false; first b to break it: blocks[64/")


def test_a_failed_and_names_its_false_part_and_a_list_the_first_element_to_differ():
    from orchestrator.transcript.compiled import evaluate   # what claims evaluate (the walk: tests/test_compiled.py)
    from orchestrator.transcript.expressions import Budget
    names = {"y": [1.0, 2.0, 9.0], "n": 3}
    held, notes = evaluate("n == 3 and y[0] == 1 and len(y) == 4", names, Budget())
    assert held is False and notes == ["the part of 'and' that is false: len(y) == 4"]
    held, notes = evaluate("y == [1, 2, 3]", names, Budget())
    assert held is False and notes == ["first element to differ: [2] 9.0 != 3"]
    held, notes = evaluate("y == [1, 2]", names, Budget())
    assert notes == ["the lists differ in length: 3 and 2"]


def test_a_field_read_by_a_computed_name_is_refused_as_the_manifest_loads(tmp_path):
    from orchestrator.errors import ManifestError
    from orchestrator.manifest.load import load_manifest
    (tmp_path / "lessons/day01-t").mkdir(parents=True)
    (tmp_path / "lessons/day01-t/t.cu").write_text("int main() {}\n", encoding="utf-8")
    (tmp_path / "lessons.yaml").write_text(
        "version: 1\nlessons:\n  - day01-t: T\n    output:\n      - table: sample\n        header: 'a b'\n"
        "        columns: {a: int, b: int}\n    claims:\n      - by-name: by name\n"
        "        gate: all(sample[0][c] > 0 for c in ['a', 'b'])\n", encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "lessons.yaml")
    assert str(info.value).endswith("claims[0].gate: \"all(sample[0][c] > 0 for c in ['a', 'b'])\": 'sample[0][c]' "
                                    "reads a field of a row by a computed name, which claims do not support; name "
                                    "the field: sample[0].NAME")
    assert ":10:" in str(info.value)


def test_a_block_scalar_slip_is_positioned():
    from orchestrator.transcript.expressions import ExpressionError, parse_expression
    with pytest.raises(ExpressionError) as info:
        parse_expression("n > 0 and\n  m > 0\n")
    assert "at line 1 of the expression, column" in str(info.value)
    assert "a YAML block (>-) keeps the line break before a more-indented line" in str(info.value)
