"""orchestrator.claims: lessons.yaml's claims evaluated on the real H200 transcripts.

tests/data/seeds/README.md says where each transcript came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.claims import ClaimResult, check_claims, evaluate_claim, evaluate_claims
from orchestrator.manifest import Claim, Lesson, load_manifest
from orchestrator.transcript import Transcript, parse_transcript

REPO = Path(__file__).resolve().parent.parent
SEEDS = Path(__file__).parent / "data" / "seeds"

DAY13 = "day13-shared-memory"
DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
DAY71 = "day71-matmul-fp16"

SYNCED_256 = "   256  reverseTileSynced             0            -           -           -\n"
STATIC_ROW = "transposeTiledStatic           0.032      1494.4      1.90x\n"


@pytest.fixture(scope="module")
def lessons() -> dict[str, Lesson]:
    return {lesson.id: lesson for lesson in load_manifest(REPO / "lessons.yaml").lessons}


def seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def parsed(lesson: Lesson, name: str, text: str | None = None) -> Transcript:
    return parse_transcript(lesson.output, seed(name) if text is None else text, name)


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
        "(cols = 3001, elements = None, failures = (no rows), rows = 2003)"]


# --- gate and expect --------------------------------------------------------------


def test_an_expect_that_fails_is_reported_as_an_expect(lessons):
    text = seed("shared_memory.txt").replace(STATIC_ROW, "transposeTiledStatic           0.120       398.2      7.06x\n")
    lesson = lessons[DAY13]
    results = {r.id: r for r in evaluate_claims(lesson.output, parsed(lesson, "shared_memory.txt", text), lesson.claims)}
    tiled = results["tiled-beats-naive"]
    assert (tiled.kind, tiled.held, tiled.checked) == ("expect", False, 1)
    assert tiled.failures == [
        "kernels['transposeTiledStatic'].ms < kernels['transposeNaive'].ms is false "
        "(kernels = [copyRowMajor] kernel=copyRowMajor, ms=0.017, gbps=2839.7, vs_copy=1.0; "
        "[transposeNaive] kernel=transposeNaive, ms=0.092, gbps=522.9, vs_copy=5.43; "
        "[transposeTiledStatic] kernel=transposeTiledStatic, ms=0.12, gbps=398.2, vs_copy=7.06; and 1 more)"]
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


@pytest.mark.parametrize("expression, failure", [
    ("__import__('os').system('true')",
     "cannot evaluate \"__import__('os').system('true')\": Function '__import__' not defined, "
     "for expression '__import__('os').system('true')'."),
    ("open('/etc/passwd')",
     "cannot evaluate \"open('/etc/passwd')\": Function 'open' not defined, for expression 'open('/etc/passwd')'."),
    ("kernels.__class__",
     "cannot evaluate 'kernels.__class__': Sorry, access to __attributes  or func_ attributes is not available. "
     "(__class__)"),
    ("kernels['copyRowMajor'].__class__.__init__",
     "cannot evaluate \"kernels['copyRowMajor'].__class__.__init__\": Sorry, access to __attributes  or func_ "
     "attributes is not available. (__init__)"),
    ("'a' * 10**9",
     "cannot evaluate \"'a' * 10**9\": Sorry, I will not evaluate something that long."),
    ("rows / 0", "cannot evaluate 'rows / 0': division by zero"),
    ("sqrt(-rows)", "cannot evaluate 'sqrt(-rows)': math domain error"),
])
def test_unsafe_or_broken_expressions_fail_the_claim(lessons, expression, failure):
    result = evaluate(lessons[DAY13], "shared_memory.txt", gate=expression)
    assert (result.held, result.checked, result.failures) == (False, 1, [failure])


@pytest.mark.parametrize("expression", ["__import__('os')", "str(rows)"])
def test_functions_outside_the_list_are_refused_statically(lessons, expression):
    name = expression.split("(")[0]
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY13].output, Claim(id="probe", gate=expression))
    assert str(info.value).startswith(f"{expression!r} names unknown field {name!r}; known here: ")


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
        "'mismatch == 0' names unknown field 'mismatch'; known here: all_gated_matched, block, block_sizes, "
        "blocks, cc, failures, first_bad, gpu, kernel, mismatches, n, prefix_bad, prefix_n, prefix_reach, "
        "prefix_returned, prefix_threads, read_warp, resources, wrote_warp")


def test_check_claims_unknown_field_in_where(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", each="blocks", where="kernal == 1", gate="mismatches == 0"))
    assert str(info.value).startswith("where: 'kernal == 1' names unknown field 'kernal'; known here: ")


def test_check_claims_columns_are_only_known_inside_each(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY71].output, Claim(id="probe", gate="kernels > 0"))
    assert str(info.value) == (
        "'kernels > 0' names unknown field 'kernels'; known here: bf16_300k, bf16_near_one, cases, cases_passed, "
        "cc, failures, gpu, half_300k, half_300k_isinf, half_65520_isinf, half_max, half_near_one, resources, "
        "support_cc, tensor_cores")
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY16].output, Claim(id="probe", each="speedups", gate="speedup > 1 and loads > 0"))
    assert str(info.value) == (
        "'speedup > 1 and loads > 0' names unknown field 'loads'; known here: cases, cases_matched, cc, failures, "
        "fewer_loads, gpu, resources, smem_bytes, speedup, speedups, threads, tile, tile_cols")


def test_check_claims_each_naming_a_column(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY71].output, Claim(id="probe", each="kernels", gate="ms > 0"))
    assert str(info.value) == "each: 'kernels' is not a table or section of the output (known: cases, failures, tensor_cores)"


def test_check_claims_syntax_error(lessons):
    with pytest.raises(ValueError) as info:
        check_claims(lessons[DAY14].output, Claim(id="probe", gate="mismatches == 0 and"))
    assert str(info.value) == "invalid expression 'mismatches == 0 and': invalid syntax"


def test_comprehension_variables_are_not_fields(lessons):
    check_claims(lessons[DAY13].output, Claim(id="probe", expect="all(k.gbps > 0 for k in kernels)"))
