"""Tolerances suggested from the spread of repeated runs (`record --repeat N`).

Each numeric field that moved between the runs gets a suggestion: a
tolerance field a `rel` that holds every run with room to spare, an exact or
device field that moved the rule that would hold it. Nothing here writes
lessons.yaml: the author reads the suggestion and decides.
"""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel

from .comparison import describe_rule, tolerance_bound
from ..transcript.fields import Compare
from ..transcript.parse import Flat

MARGIN = 2.0       # a suggested bound is this many times the furthest run's distance from the median
FLOOR = 0.01       # and never below 1%: a handful of runs measures a spread only roughly


class Suggestion(BaseModel):
    path: str
    rule: str                 # the field's rule now, as the field tables show it
    runs: int
    low: float
    high: float
    median: float
    deviation: float          # the furthest run from the median, as a fraction of the median (abs where it is 0)
    holds: bool               # whether the rule now holds every run against their median
    suggested: str            # the rule to write in lessons.yaml, in its own words


def round_up(value: float) -> float:
    """`value` rounded up to two significant digits: 0.0734 -> 0.074, 0.147 -> 0.15."""
    if value <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(value)) - 1)
    return round(math.ceil(round(value / step, 6)) * step, 12)


def suggest_tolerances(runs: list[list[Flat]]) -> list[Suggestion]:
    """A suggestion per numeric, compared field whose value differed between the runs, in the first run's order."""
    series: dict[str, list[float]] = {}
    specs = {}
    for flats in runs:
        for flat in flats:
            if flat.spec.compare is Compare.volatile or isinstance(flat.value, bool) \
                    or not isinstance(flat.value, (int, float)):
                continue
            series.setdefault(flat.path, []).append(float(flat.value))
            specs.setdefault(flat.path, flat.spec)
    suggestions = []
    for path, values in series.items():
        if len(values) < 2 or (specs[path].compare is not Compare.tolerance and len(set(values)) == 1):
            continue
        spec, median = specs[path], statistics.median(values)
        furthest = max(abs(v - median) for v in values)
        holds = spec.compare is Compare.tolerance and furthest <= tolerance_bound(spec, median)
        if median:
            deviation = furthest / abs(median)
            rel = max(FLOOR, round_up(MARGIN * deviation))
            suggested = f"rel: {rel:g}" + (f", abs: {spec.abs:g}" if spec.abs is not None else "")
        else:
            deviation = furthest
            suggested = f"abs: {round_up(MARGIN * furthest):g}"
        if spec.compare is not Compare.tolerance:
            suggested = f"compare: tolerance, {suggested}"
        suggestions.append(Suggestion(path=path, rule=describe_rule(spec), runs=len(values), low=min(values),
                                      high=max(values), median=median, deviation=deviation, holds=holds,
                                      suggested=suggested))
    return suggestions
