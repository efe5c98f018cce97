"""Judge each parsed field against recorded evidence under its rule."""

from __future__ import annotations

import statistics
from collections.abc import Collection
from enum import Enum

from pydantic import BaseModel

from ..transcript.fields import Compare, FieldSpec
from ..transcript.parse import Flat, Value


class FieldStatus(str, Enum):
    same = "same"            # equal to the evidence
    within = "within"        # moved, inside its tolerance
    moved = "moved"          # outside its rule: a failure
    missing = "missing"      # in the evidence, not in this run: a failure
    new = "new"              # in this run, not in the evidence: a failure
    volatile = "volatile"    # never compared
    other_gpu = "other-gpu"  # device-dependent and the evidence is another GPU's
    ambiguous = "ambiguous"  # with --repeat: its spread is wider than its tolerance
    untrusted = "untrusted"  # outside tolerance, but the GPU was throttled or shared

    @property
    def is_failure(self) -> bool:
        return self in (FieldStatus.moved, FieldStatus.missing, FieldStatus.new)


class FieldResult(BaseModel):
    path: str
    rule: str
    old: Value = None
    new: Value = None
    ratio: float | None = None
    status: FieldStatus
    line: int | None = None


def describe_rule(spec: FieldSpec) -> str:
    if spec.compare is Compare.tolerance:
        parts = []
        if spec.rel is not None:
            parts.append(f"±{spec.rel * 100:g}%")
        if spec.abs is not None:
            parts.append(f"±{spec.abs:g}")
        return "tolerance " + " + ".join(parts)
    return spec.compare.value


def value_ratio(old: Value, new: Value) -> float | None:
    """new / old for two numbers (not booleans) with old non-zero; otherwise None."""
    if isinstance(old, bool) or isinstance(new, bool):
        return None
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and old:
        return new / old
    return None


def tolerance_bound(spec: FieldSpec, reference: float) -> float:
    """How far a tolerance field may move from `reference`: its abs plus rel times the reference."""
    return (spec.abs or 0.0) + (spec.rel or 0.0) * abs(reference)


def within(spec: FieldSpec, old: Value, new: Value) -> bool:
    if isinstance(old, list) and isinstance(new, list):   # a `floats` field: element by element
        return len(old) == len(new) and all(within(spec, a, b) for a, b in zip(old, new))
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return old == new
    return abs(new - old) <= tolerance_bound(spec, old)


def spread_of_runs(runs: list[list[Flat]]) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """(median, spread, ambiguous paths) of every numeric tolerance field over several runs.

    A field is ambiguous when its runs lie further apart than its own
    tolerance allows around their median; `compare_fields` gives it that status.
    """
    values: dict[str, list[float]] = {}
    specs = {}
    for flats in runs:
        for flat in flats:
            if flat.spec.compare is Compare.tolerance and isinstance(flat.value, (int, float)):
                values.setdefault(flat.path, []).append(float(flat.value))
                specs[flat.path] = flat.spec
    medians, spread, ambiguous = {}, {}, set()
    for path, series in values.items():
        median = statistics.median(series)
        medians[path] = median
        width = max(series) - min(series)
        spread[path] = round(width / abs(median), 4) if median else 0.0
        if width > tolerance_bound(specs[path], median):
            ambiguous.add(path)
    return medians, spread, ambiguous


def compare_fields(new: list[Flat], old: list[Flat], *, same_gpu: bool, ambiguous: Collection[str] = frozenset(),
                   untrusted: bool = False) -> list[FieldResult]:
    """One result per field of either side, in this run's order, each with its final status.

    exact fields are compared with any GPU's evidence; device and tolerance
    fields only with the same GPU's; volatile fields never. A compared field
    whose path is in `ambiguous` (its repeated runs spread wider than its
    tolerance, `spread_of_runs`) is AMBIGUOUS whatever its value; with
    `untrusted` (the timings were taken on a throttled or shared GPU) a
    tolerance field outside its tolerance is UNTRUSTED instead of MOVED.
    verify, record and compare all take a field's status from here.
    """
    old_by_path = {f.path: f for f in old}
    results: list[FieldResult] = []
    for field in new:
        spec = field.spec
        rule = describe_rule(spec)
        before = old_by_path.pop(field.path, None)
        if spec.compare is Compare.volatile:
            results.append(FieldResult(path=field.path, rule=rule, new=field.value,
                                       old=before.value if before else None,
                                       status=FieldStatus.volatile, line=field.line))
            continue
        if spec.compare in (Compare.device, Compare.tolerance) and not same_gpu:
            results.append(FieldResult(path=field.path, rule=rule, new=field.value,
                                       old=before.value if before else None,
                                       status=FieldStatus.other_gpu, line=field.line))
            continue
        if before is None:
            results.append(FieldResult(path=field.path, rule=rule, new=field.value,
                                       status=FieldStatus.new, line=field.line))
            continue
        if before.value == field.value:
            status = FieldStatus.same
        elif spec.compare is Compare.tolerance and within(spec, before.value, field.value):
            status = FieldStatus.within
        else:
            status = FieldStatus.moved
        if field.path in ambiguous:
            status = FieldStatus.ambiguous
        elif untrusted and status is FieldStatus.moved and spec.compare is Compare.tolerance:
            status = FieldStatus.untrusted
        results.append(FieldResult(path=field.path, rule=rule, old=before.value, new=field.value,
                                   ratio=value_ratio(before.value, field.value), status=status,
                                   line=field.line))
    for path, field in old_by_path.items():
        if field.spec.compare is Compare.volatile or (
                field.spec.compare in (Compare.device, Compare.tolerance) and not same_gpu):
            continue
        results.append(FieldResult(path=path, rule=describe_rule(field.spec), old=field.value,
                                   status=FieldStatus.missing))
    return results + _row_keys(new, old, results, same_gpu=same_gpu)


ROW_KEY = "row key"   # the rule of a table row's (or a section's) key: compared exactly, whatever its columns' rules


def _rows(flats: list[Flat], *, same_gpu: bool) -> dict[str, int | None]:
    """Each table row and section block of a side (`blocks[65/reverseTileRacy]`), by path, with its first line.

    Across GPUs only those with an exact field: a row of device-dependent fields may differ between GPUs."""
    rows: dict[str, int | None] = {}
    for flat in flats:
        if not same_gpu and flat.spec.compare is not Compare.exact:
            continue
        for end in (i for i, c in enumerate(flat.path) if c == "]" and flat.path[i + 1:i + 2] == "."):
            rows.setdefault(flat.path[:end + 1], flat.line)
    return rows


def _row_keys(new: list[Flat], old: list[Flat], results: list[FieldResult], *, same_gpu: bool) -> list[FieldResult]:
    """A row (its key columns, or its label) in one side only is missing or new, even when every one of its
    other fields is volatile or device-dependent; a row whose fields already failed so is not named twice."""
    failed = {r.path for r in results if r.status.is_failure}
    before, after = _rows(old, same_gpu=same_gpu), _rows(new, same_gpu=same_gpu)

    def named(row: str) -> bool:
        return any(path.startswith(row + ".") for path in failed)
    out = [FieldResult(path=row, rule=ROW_KEY, new=row, status=FieldStatus.new, line=line)
           for row, line in after.items() if row not in before and not named(row)]
    return out + [FieldResult(path=row, rule=ROW_KEY, old=row, status=FieldStatus.missing)
                  for row in before if row not in after and not named(row)]


def check_plausibility(fields: list, peak_gbps: float | None, peak_gflops: float | None) -> list[str]:
    """A GB/s or GFLOP/s figure above the hardware's peak is an accounting bug in the lesson."""
    problems = []
    for field in fields:
        unit = field.spec.unit
        peak = peak_gbps if unit == "GB/s" else peak_gflops if unit == "GFLOP/s" else None
        if peak and isinstance(field.value, (int, float)) and field.value > peak:
            problems.append(f"plausibility: {field.path} = {field.value:g} {unit} exceeds the GPU's peak "
                            f"{peak:g} {unit}; the lesson's byte or flop count is wrong")
    return problems


def fraction_of_peak(value, unit: str | None, peak_gbps: float | None, peak_gflops: float | None) -> float | None:
    peak = peak_gbps if unit == "GB/s" else peak_gflops if unit == "GFLOP/s" else None
    if peak and isinstance(value, (int, float)):
        return value / peak
    return None
