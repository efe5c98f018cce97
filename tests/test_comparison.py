"""orchestrator.judge.comparison: each field judged against evidence under its rule.

The first tests compare real H200 runs with each other (tests/data/seeds/README.md);
the rest pin each rule's edges on single fields.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.judge.comparison import (FieldResult, FieldStatus, compare_fields, describe_rule, spread_of_runs,
                                           within)
from orchestrator.manifest.model import Lesson
from orchestrator.manifest.load import load_manifest
from orchestrator.transcript.fields import Compare, FieldSpec
from conftest import interleaved
from orchestrator.transcript.parse import Flat, flatten, parse_transcript

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "tests" / "data" / "course"   # the fixture course (conftest.COURSE)
SEEDS = Path(__file__).parent / "data" / "seeds"


@pytest.fixture(scope="module")
def lessons() -> dict[str, Lesson]:
    return {lesson.id: lesson for lesson in load_manifest(COURSE / "lessons.yaml").lessons}


def fields(lesson: Lesson, name: str) -> list[Flat]:
    # The seeds' runs under a sanitizer interleave the tool's lines with the program's: the schema ignores them.
    text = (SEEDS / name).read_text(encoding="utf-8")
    return list(flatten(lesson.output.items, parse_transcript(interleaved(lesson.output), text, name).scope))


def flat(path: str, value, line: int | None = 7, **spec) -> Flat:
    return Flat(path=path, value=value, spec=FieldSpec(**spec), line=line)


def one(new: Flat, old: Flat, same_gpu: bool = True) -> FieldResult:
    [result] = compare_fields([new], [old], same_gpu=same_gpu)
    return result


def statuses(results: list[FieldResult]) -> dict[str, int]:
    return dict(Counter(r.status.value for r in results))


TOLERANCE_25 = {"type": "float", "compare": "tolerance", "rel": 0.25}


# --- real runs --------------------------------------------------------------------


def test_two_runs_on_one_gpu_are_same_or_within(lessons):
    lesson = lessons["day13-shared-memory"]
    results = compare_fields(fields(lesson, "shared_memory.sm_75-build.txt"),
                             fields(lesson, "shared_memory.txt"), same_gpu=True)
    assert statuses(results) == {"same": 22, "within": 7}
    assert [(r.path, r.rule, r.old, r.new, r.line) for r in results if r.status is FieldStatus.within] == [
        ("kernels[copyRowMajor].gbps", "tolerance ±25%", 2839.7, 2853.7, 9),
        ("kernels[transposeNaive].gbps", "tolerance ±25%", 522.9, 523.4, 10),
        ("kernels[transposeNaive].vs_copy", "tolerance ±25% + ±0.05", 5.43, 5.45, 10),
        ("kernels[transposeTiledStatic].gbps", "tolerance ±25%", 1494.4, 1497.5, 11),
        ("kernels[transposeTiledStatic].vs_copy", "tolerance ±25% + ±0.05", 1.9, 1.91, 11),
        ("kernels[transposeTiledDynamic].gbps", "tolerance ±25%", 1498.7, 1489.8, 12),
        ("kernels[transposeTiledDynamic].vs_copy", "tolerance ±25% + ±0.05", 1.89, 1.92, 12),
    ]
    first = results[0]
    assert first == FieldResult(path="gpu", rule="device", old="NVIDIA H200", new="NVIDIA H200",
                                ratio=None, status=FieldStatus.same, line=1)
    rows = {r.path: r for r in results}
    assert rows["rows"].ratio == 1.0
    assert rows["kernels[copyRowMajor].gbps"].ratio == 2853.7 / 2839.7


def test_against_another_gpus_evidence_only_exact_fields_are_compared(lessons):
    lesson = lessons["day13-shared-memory"]
    results = compare_fields(fields(lesson, "shared_memory.sm_75-build.txt"),
                             fields(lesson, "shared_memory.txt"), same_gpu=False)
    assert statuses(results) == {"other-gpu": 19, "same": 10}
    assert [r.path for r in results if r.status is FieldStatus.same] == [
        "rows", "cols", "buffer_mib", "tile", "tile_cols", "tile_bytes", "moved_mib",
        "probe_bytes", "optin_bytes", "elements"]
    gbps = {r.path: r for r in results}["kernels[copyRowMajor].gbps"]
    assert gbps == FieldResult(path="kernels[copyRowMajor].gbps", rule="tolerance ±25%", old=2839.7, new=2853.7,
                               ratio=None, status=FieldStatus.other_gpu, line=9)


def test_a_memcheck_run_moves_every_timing(lessons):
    lesson = lessons["day16-tiled-matmul"]
    results = compare_fields(fields(lesson, "tiled_matmul.memcheck.txt"),
                             fields(lesson, "tiled_matmul.txt"), same_gpu=True)
    assert statuses(results) == {"same": 16, "moved": 14, "within": 1}
    assert [r.path for r in results if r.status is FieldStatus.moved] == [
        f"cases[{case}/{kernel}].{name}"
        for case in ("256x256x256", "512x512x512", "611x613x617")
        for kernel in ("naive", "tiled")
        for name in ("ms", "gflops")
    ] + ["speedups[512x512x512].speedup", "speedups[611x613x617].speedup"]
    speedup = {r.path: r for r in results}["speedups[256x256x256].speedup"]
    assert (speedup.rule, speedup.old, speedup.new, speedup.status) == (
        "tolerance ±30%", 2.49, 2.27, FieldStatus.within)
    naive = {r.path: r for r in results}["cases[256x256x256/naive].ms"]
    assert (naive.old, naive.new, naive.ratio, naive.line) == (0.025, 1.751, 1.751 / 0.025, 7)


def test_racy_counts_are_never_compared(lessons):
    lesson = lessons["day14-syncthreads"]
    results = compare_fields(fields(lesson, "syncthreads.racecheck.txt"), fields(lesson, "syncthreads.txt"),
                             same_gpu=True)
    assert statuses(results) == {"same": 10, "volatile": 32}
    racy = {r.path: r for r in results}["blocks[64/reverseTileRacy].mismatches"]
    assert racy == FieldResult(path="blocks[64/reverseTileRacy].mismatches", rule="volatile", old=98307, new=0,
                               ratio=None, status=FieldStatus.volatile, line=21)
    assert not any(r.status.is_failure for r in results)


# --- exact ------------------------------------------------------------------------


def test_exact_same():
    result = one(flat("n", 262755, type="int"), flat("n", 262755, type="int"))
    assert result == FieldResult(path="n", rule="exact", old=262755, new=262755, ratio=1.0,
                                 status=FieldStatus.same, line=7)


def test_exact_moved_by_one():
    result = one(flat("n", 262756, type="int"), flat("n", 262755, type="int"))
    assert (result.status, result.old, result.new, result.ratio) == (FieldStatus.moved, 262755, 262756, 262756 / 262755)


def test_exact_text_moved_has_no_ratio():
    result = one(flat("after_optin", "invalid argument"), flat("after_optin", "no error"))
    assert (result.status, result.ratio) == (FieldStatus.moved, None)


def test_exact_is_compared_on_another_gpu_too():
    assert one(flat("n", 3, type="int"), flat("n", 4, type="int"), same_gpu=False).status is FieldStatus.moved
    assert one(flat("n", 3, type="int"), flat("n", 3, type="int"), same_gpu=False).status is FieldStatus.same


def test_exact_none_is_the_same_as_none_only():
    assert one(flat("first_bad", None, type="int"), flat("first_bad", None, type="int")).status is FieldStatus.same
    assert one(flat("first_bad", 32, type="int"), flat("first_bad", None, type="int")).status is FieldStatus.moved


# --- tolerance --------------------------------------------------------------------


@pytest.mark.parametrize("new, status", [
    (8.0, FieldStatus.same),
    (10.0, FieldStatus.within),        # +25%, on the bound
    (6.0, FieldStatus.within),         # -25%, on the bound
    (10.000001, FieldStatus.moved),
    (5.999999, FieldStatus.moved),
])
def test_tolerance_rel(new, status):
    result = one(flat("ms", new, **TOLERANCE_25), flat("ms", 8.0, **TOLERANCE_25))
    assert (result.rule, result.status, result.ratio) == ("tolerance ±25%", status, new / 8.0)


@pytest.mark.parametrize("new, status", [
    (1.5, FieldStatus.within),
    (0.5, FieldStatus.within),
    (1.5000001, FieldStatus.moved),
    (0.4999999, FieldStatus.moved),
])
def test_tolerance_abs(new, status):
    spec = {"type": "float", "compare": "tolerance", "abs": 0.5}
    result = one(flat("ms", new, **spec), flat("ms", 1.0, **spec))
    assert (result.rule, result.status) == ("tolerance ±0.5", status)


@pytest.mark.parametrize("new, status", [
    (5.5, FieldStatus.within),         # 0.5 + 25% of 4
    (2.5, FieldStatus.within),
    (5.5000001, FieldStatus.moved),
    (2.4999999, FieldStatus.moved),
])
def test_tolerance_rel_and_abs_add(new, status):
    spec = {"type": "float", "compare": "tolerance", "rel": 0.25, "abs": 0.5}
    result = one(flat("ms", new, **spec), flat("ms", 4.0, **spec))
    assert (result.rule, result.status) == ("tolerance ±25% + ±0.5", status)


def test_tolerance_bound_is_relative_to_the_evidence():
    spec = FieldSpec(**TOLERANCE_25)
    assert within(spec, 8.0, 10.0) is True    # 10 is 25% above 8
    assert within(spec, 10.0, 8.0) is True    # 8 is 20% below 10
    assert within(spec, 10.0, 7.4) is False
    assert within(spec, 8.0, 10.5) is False


def test_tolerance_on_a_real_timing(lessons):
    kernels = lessons["day13-shared-memory"].output.items[5]
    ms = kernels.columns["ms"]
    assert describe_rule(ms) == "tolerance ±25% + ±0.003"
    old = Flat(path="kernels[copyRowMajor].ms", value=0.017, spec=ms, line=9)
    assert one(old.model_copy(update={"value": 0.024}), old).status is FieldStatus.within
    assert one(old.model_copy(update={"value": 0.025}), old).status is FieldStatus.moved
    assert one(old.model_copy(update={"value": 0.010}), old).status is FieldStatus.within
    assert one(old.model_copy(update={"value": 0.009}), old).status is FieldStatus.moved


def test_tolerance_of_ints():
    spec = {"type": "int", "compare": "tolerance", "rel": 0.25}
    assert one(flat("n", 125, **spec), flat("n", 100, **spec)).status is FieldStatus.within
    assert one(flat("n", 126, **spec), flat("n", 100, **spec)).status is FieldStatus.moved


def test_tolerance_from_zero_evidence():
    rel_only = one(flat("ms", 0.001, **TOLERANCE_25), flat("ms", 0.0, **TOLERANCE_25))
    assert (rel_only.status, rel_only.ratio) == (FieldStatus.moved, None)
    spec = {"type": "float", "compare": "tolerance", "rel": 0.25, "abs": 0.003}
    with_abs = one(flat("ms", 0.003, **spec), flat("ms", 0.0, **spec))
    assert (with_abs.status, with_abs.ratio) == (FieldStatus.within, None)


def test_tolerance_value_that_went_missing_moved():
    spec = {"type": "float", "compare": "tolerance", "rel": 0.25, "missing": "-"}
    result = one(flat("ms", None, **spec), flat("ms", 0.5, **spec))
    assert (result.status, result.old, result.new, result.ratio) == (FieldStatus.moved, 0.5, None, None)


def test_tolerance_on_another_gpu_is_not_compared():
    result = one(flat("ms", 80.0, **TOLERANCE_25), flat("ms", 8.0, **TOLERANCE_25), same_gpu=False)
    assert result == FieldResult(path="ms", rule="tolerance ±25%", old=8.0, new=80.0, ratio=None,
                                 status=FieldStatus.other_gpu, line=7)


# --- device -----------------------------------------------------------------------


def test_device_on_the_same_gpu():
    same = one(flat("smem_optin", 232448, type="int", compare="device"),
               flat("smem_optin", 232448, type="int", compare="device"))
    assert (same.rule, same.status) == ("device", FieldStatus.same)
    moved = one(flat("smem_optin", 101376, type="int", compare="device"),
                flat("smem_optin", 232448, type="int", compare="device"))
    assert (moved.status, moved.old, moved.new) == (FieldStatus.moved, 232448, 101376)


def test_device_on_another_gpu_is_skipped():
    result = one(flat("gpu", "Tesla T4", compare="device"), flat("gpu", "NVIDIA H200", compare="device"),
                 same_gpu=False)
    assert result == FieldResult(path="gpu", rule="device", old="NVIDIA H200", new="Tesla T4", ratio=None,
                                 status=FieldStatus.other_gpu, line=7)
    assert result.status.value == "other-gpu"
    assert not result.status.is_failure


def test_device_has_no_tolerance():
    result = one(flat("max_abs_err", 0.5079, type="float", compare="device"),
                 flat("max_abs_err", 0.5078, type="float", compare="device"))
    assert result.status is FieldStatus.moved


# --- volatile ---------------------------------------------------------------------


@pytest.mark.parametrize("same_gpu", [True, False])
def test_volatile_is_never_compared(same_gpu):
    result = one(flat("mismatches", 0, type="int", compare="volatile"),
                 flat("mismatches", 98307, type="int", compare="volatile"), same_gpu)
    assert result == FieldResult(path="mismatches", rule="volatile", old=98307, new=0, ratio=None,
                                 status=FieldStatus.volatile, line=7)


def test_volatile_without_evidence_is_not_new():
    [result] = compare_fields([flat("mismatches", 5, type="int", compare="volatile")], [], same_gpu=True)
    assert (result.status, result.old, result.new) == (FieldStatus.volatile, None, 5)


def test_volatile_gone_from_the_run_is_not_missing():
    assert compare_fields([], [flat("mismatches", 5, type="int", compare="volatile")], same_gpu=True) == []


# --- missing and new --------------------------------------------------------------


def test_missing_and_new_fields():
    new = [flat("a", 1, type="int", line=1), flat("c", 3, type="int", line=2)]
    old = [flat("a", 1, type="int"), flat("b", 2, type="int"), flat("d", 4.0, **TOLERANCE_25)]
    results = compare_fields(new, old, same_gpu=True)
    assert results == [
        FieldResult(path="a", rule="exact", old=1, new=1, ratio=1.0, status=FieldStatus.same, line=1),
        FieldResult(path="c", rule="exact", old=None, new=3, ratio=None, status=FieldStatus.new, line=2),
        FieldResult(path="b", rule="exact", old=2, new=None, ratio=None, status=FieldStatus.missing, line=None),
        FieldResult(path="d", rule="tolerance ±25%", old=4.0, new=None, ratio=None,
                    status=FieldStatus.missing, line=None),
    ]


def test_missing_device_and_tolerance_fields_are_not_reported_against_another_gpu():
    old = [flat("gpu", "NVIDIA H200", compare="device"), flat("ms", 4.0, **TOLERANCE_25), flat("n", 3, type="int")]
    assert compare_fields([], old, same_gpu=False) == [
        FieldResult(path="n", rule="exact", old=3, new=None, ratio=None, status=FieldStatus.missing, line=None)]


def test_new_device_field_against_another_gpu_is_other_gpu():
    [result] = compare_fields([flat("gpu", "Tesla T4", compare="device")], [], same_gpu=False)
    assert result.status is FieldStatus.other_gpu


def test_untrusted_timings_make_only_a_moved_tolerance_field_untrusted():
    new = [flat("ms", 9.0, **TOLERANCE_25), flat("n", 4, type="int"), flat("gpu", "B", compare="device"),
           flat("us", 1.1, **TOLERANCE_25)]
    old = [flat("ms", 4.0, **TOLERANCE_25), flat("n", 3, type="int"), flat("gpu", "A", compare="device"),
           flat("us", 1.0, **TOLERANCE_25)]
    assert statuses(compare_fields(new, old, same_gpu=True, untrusted=True)) == {"untrusted": 1, "moved": 2,
                                                                                   "within": 1}
    assert statuses(compare_fields(new, old, same_gpu=True)) == {"moved": 3, "within": 1}


def test_a_field_whose_runs_spread_past_its_tolerance_is_ambiguous_whatever_it_did():
    new = [flat("a", 9.0, **TOLERANCE_25), flat("b", 4.0, **TOLERANCE_25), flat("c", 4.1, **TOLERANCE_25),
           flat("d", 1.0, **TOLERANCE_25)]
    old = [flat("a", 4.0, **TOLERANCE_25), flat("b", 4.0, **TOLERANCE_25), flat("c", 4.0, **TOLERANCE_25),
           flat("e", 1.0, **TOLERANCE_25)]
    results = compare_fields(new, old, same_gpu=True, ambiguous={"a", "b", "c", "d", "e"}, untrusted=True)
    assert [(r.path, r.status.value) for r in results] == [("a", "ambiguous"), ("b", "ambiguous"),
                                                           ("c", "ambiguous"), ("d", "new"), ("e", "missing")]


def test_the_spread_of_repeated_runs_is_judged_against_each_fields_tolerance():
    runs = [[flat("ms", value, **TOLERANCE_25), flat("us", value, type="float", compare="tolerance", rel=0.6),
             flat("n", 3, type="int")] for value in (1.0, 1.2, 1.5)]
    medians, spread, ambiguous = spread_of_runs(runs)
    assert (medians, spread, ambiguous) == ({"ms": 1.2, "us": 1.2}, {"ms": 0.4167, "us": 0.4167}, {"ms"})


def test_which_statuses_are_failures():
    assert {status.value: status.is_failure for status in FieldStatus} == {
        "same": False, "within": False, "moved": True, "missing": True, "new": True,
        "volatile": False, "other-gpu": False, "ambiguous": False, "untrusted": False}


# --- describe_rule ----------------------------------------------------------------


@pytest.mark.parametrize("spec, text", [
    ({}, "exact"),
    ({"compare": "device"}, "device"),
    ({"compare": "volatile"}, "volatile"),
    ({"type": "float", "compare": "tolerance", "rel": 0.25}, "tolerance ±25%"),
    ({"type": "float", "compare": "tolerance", "rel": 0.3}, "tolerance ±30%"),
    ({"type": "float", "compare": "tolerance", "rel": 0.01}, "tolerance ±1%"),
    ({"type": "float", "compare": "tolerance", "rel": 0.005}, "tolerance ±0.5%"),
    ({"type": "float", "compare": "tolerance", "abs": 0.003}, "tolerance ±0.003"),
    ({"type": "float", "compare": "tolerance", "rel": 0.25, "abs": 0.003}, "tolerance ±25% + ±0.003"),
])
def test_describe_rule(spec, text):
    assert describe_rule(FieldSpec(**spec)) == text


def test_describe_rule_keeps_fractional_percents():
    assert describe_rule(FieldSpec(type="float", compare=Compare.tolerance, rel=0.125)) == "tolerance ±12.5%"
