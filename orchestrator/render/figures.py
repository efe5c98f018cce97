"""Key figures and charts: which fields a lesson's page shows, and the tables and charts of them.

A lesson's `page:` key in lessons.yaml says where its page is written
(`path`, default README.md beside its source), names the fields of its Key
figures and the charts drawn from its fields; without it a page shows every field that has
a unit, and charts the rate (GB/s, GFLOP/s) where there is one, else the first
unit. docs/schema.md describes the keys.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, Field

from ..judge.comparison import fraction_of_peak, tolerance_bound
from ..transcript.fields import Compare, FieldSpec
from ..transcript.schema import OutputSchema, SectionItem, TableItem
from ..manifest.page import FieldChoice, PageSpec, find_field, schema_fields
from ..transcript.parse import flatten

# Units whose smaller values are better, and whose larger ones are (every rate, "/s").
LOWER_IS_BETTER_UNITS = ("s", "ms", "us", "µs", "ns", "cycles")





# -- figures ----------------------------------------------------------------------------------
class Figure(BaseModel):
    """A field, one value per GPU, as the Key figures show it."""

    path: str
    keys: list[tuple[str, str]]          # (key column, value), outermost first
    section_keys: list[tuple[str, str]]  # the part of `keys` that names a section block
    field: str                           # the schema path without keys: cases.kernels.ms
    label: str
    unit: str | None
    values: dict[str, float | int | None]
    shown: dict[str, str] = Field(default_factory=dict)   # as the table prints them, one precision per field

    @property
    def where(self) -> str:
        return " / ".join(value for _, value in self.keys)

    @property
    def what(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


class FigureTable(BaseModel):
    """The figures of one shape pivoted: a row per key (case / kernel), a column per figure and GPU."""

    where_header: str | None
    header: list[str]
    rows: list[tuple[str, list[str]]]


class Chart(BaseModel):
    """A Mermaid xychart-beta bar chart, or where its bars differ by less than their noise, the sentence saying so."""

    title: str
    horizontal: bool
    width: int                 # pixels, Mermaid's xyChart config; a page scales it down to fit
    height: int
    x_title: str | None = None
    labels: list[str]          # each bar's name and value (GitHub's Mermaid may draw no data labels)
    names: list[str] = Field(default_factory=list)   # each bar's name alone
    unit: str | None = None
    axis: str
    top: str
    values: list[str]
    noise: str | None = None   # the run-to-run noise of a tolerance field, and where it comes from
    drawn: bool = True         # False: every bar lies within `noise` of every other, so none is drawn


_SEGMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\[(?P<key>[^\]]*)\]\.")


def plain_path(path: str) -> str:
    """`cases[256x256x256].kernels[naive].ms` -> `cases.kernels.ms`."""
    return re.sub(r"\[[^\]]*\]", "", path)


def _key_columns(items: list) -> dict[str, tuple[bool, list[str]]]:
    """Table, note and section name -> (is a section, its key columns)."""
    out: dict[str, tuple[bool, list[str]]] = {}
    for item in items:
        if isinstance(item, TableItem):
            out[item.table] = (False, item.key_columns)
            for note in item.notes:
                out[note.name] = (False, item.key_columns[:1])
        elif isinstance(item, SectionItem):
            out[item.section] = (True, item.key_columns)
            out.update(_key_columns(item.items))
    return out


def _split_path(path: str, columns: dict[str, tuple[bool, list[str]]]):
    """`cases[256x256x256/naive].ms` -> ([(case, 256x256x256), (kernel, naive)], [], 'ms')."""
    keys: list[tuple[str, str]] = []
    section: list[tuple[str, str]] = []
    pos = 0
    while (match := _SEGMENT.match(path, pos)) is not None:
        name, key = match["name"], match["key"]
        is_section, names = columns.get(name, (False, []))
        values = key.split("/") if len(names) > 1 and key.count("/") == len(names) - 1 else [key]
        pairs = list(zip(names, values)) if len(values) == len(names) else [(name, key)]
        keys += pairs
        if is_section:
            section += pairs
        pos = match.end()
    return keys, section, path[pos:]


def _choices(output: OutputSchema, page: PageSpec | None) -> dict[str, FieldChoice]:
    """Schema path -> how it is shown, in the order the page lists them."""
    fields = schema_fields(output.items)
    if page is None or page.figures is None:
        return {f.path: FieldChoice(field=f.path) for f in fields if f.spec.unit is not None}
    return {find_field(fields, c.field, ()).path: c for c in page.figures}


def build_figures(output: OutputSchema, page: PageSpec | None, parsed: dict) -> list[Figure]:
    """The Key figures of a lesson from its parsed transcripts (GPU slug -> transcript)."""
    choices = _choices(output, page)
    order = {path: n for n, path in enumerate(choices)}
    columns = _key_columns(output.items)
    figures: dict[str, Figure] = {}
    for slug, transcript in parsed.items():
        for flat in flatten(output.items, transcript.scope):
            field = plain_path(flat.path)
            choice = choices.get(field)
            if choice is None:
                continue
            figure = figures.get(flat.path)
            if figure is None:
                keys, section, name = _split_path(flat.path, columns)
                figure = figures[flat.path] = Figure(
                    path=flat.path, keys=keys, section_keys=section, field=field,
                    label=choice.label or flat.spec.label or name, unit=choice.unit or flat.spec.unit, values={})
            figure.values[slug] = flat.value if isinstance(flat.value, (int, float)) else None
    # A field's values share one precision, as the program's printf does
    # (0.010 beside 0.025, not 0.01; 4.582e-06 beside 2.595e-03).
    by_field: dict[str, list] = {}
    for figure in figures.values():
        by_field.setdefault(figure.field, []).extend(figure.values.values())
    formats = {field: _number_format(values) for field, values in by_field.items()}
    for figure in figures.values():
        figure.shown = {slug: formats[figure.field](value) for slug, value in figure.values.items()}
    return sorted(figures.values(), key=lambda f: order[f.field])


def _number_format(values: list):
    numbers = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    exponents = [repr(v) for v in numbers if "e" in repr(v)]
    if exponents:
        digits = max(len(text.split("e")[0].partition(".")[2]) for text in exponents)
        return lambda v: f"{v:.{digits}e}" if isinstance(v, float) and math.isfinite(v) else format_number(v)
    decimals = max((_decimals(v) for v in values), default=0)
    return lambda v: format_number(v, decimals)


def _decimals(value: Any) -> int:
    text = repr(value) if isinstance(value, float) else ""
    if not math.isfinite(value if isinstance(value, (int, float)) else 0) or "e" in text or "." not in text:
        return 0
    return len(text.split(".")[1])


def figure_tables(figures: list[Figure], gpus: list) -> tuple[list[FigureTable], list[str]]:
    """One table per shape of key (case / kernel, case, ...) and the peaks their percentages are of.

    A rate in GB/s or GFLOP/s is followed by its share of the GPU's recorded
    peak; the second list says, per GPU, which peaks those shares used.
    """
    shapes: dict[tuple[str, ...], list[Figure]] = {}
    for figure in figures:
        shapes.setdefault(tuple(column for column, _ in figure.keys), []).append(figure)
    used: dict[str, set[str]] = {}
    tables = []
    for shape, members in sorted(shapes.items(), key=lambda item: _first_seen(figures, item[1])):
        whats = list(dict.fromkeys(f.what for f in members))
        columns = [(what, gpu) for what in whats for gpu in gpus]
        header = [what if len(gpus) == 1 else f"{what}, {gpu.name}" for what, gpu in columns]
        cells: dict[str, dict[tuple[str, str], str]] = {}
        for figure in members:
            row = cells.setdefault(figure.where or "-", {})
            for gpu in gpus:
                shown = figure.shown.get(gpu.slug, "-")
                share = fraction_of_peak(figure.values.get(gpu.slug), figure.unit, gpu.peak_gbps,
                                         gpu.peak_fp32_gflops)
                if share is not None:
                    used.setdefault(gpu.slug, set()).add(figure.unit or "")
                row[(figure.what, gpu.slug)] = shown if share is None else f"{shown} ({share:.0%})"
        rows = [(where, [row.get((what, gpu.slug), "") for what, gpu in columns]) for where, row in cells.items()]
        tables.append(FigureTable(where_header=" / ".join(shape) if shape else None, header=header, rows=rows))
    notes = []
    for gpu in gpus:
        peaks = []
        if "GB/s" in used.get(gpu.slug, ()):
            peaks.append(f"{gpu.peak_gbps} GB/s of DRAM bandwidth")
        if "GFLOP/s" in used.get(gpu.slug, ()):
            peaks.append(f"{gpu.peak_fp32_gflops} GFLOP/s of FP32")
        if peaks:
            notes.append((gpu.name, " and ".join(peaks)))
    return tables, [f"Percentages are of {name}'s peak: {peaks}, as recorded with its evidence." for name, peaks in notes]


def _first_seen(figures: list[Figure], members: list[Figure]) -> int:
    return min(figures.index(f) for f in members)


# -- charts -----------------------------------------------------------------------------------
class _Plan(BaseModel):
    fields: list[str]                  # schema paths, one series of bars
    label: str
    unit: str | None
    per: list[str] | None              # None: the repeated section's key columns
    against: str | None = None         # the name of the field whose values name the bars
    against_label: str | None = None
    better: str | None = None


def better_for(unit: str | None) -> str | None:
    """`lower` for times, `higher` for rates, None when the unit says neither."""
    if unit is None:
        return None
    if unit.endswith("/s"):
        return "higher"
    return "lower" if unit in LOWER_IS_BETTER_UNITS else None


def _plans(output: OutputSchema, page: PageSpec | None, figures: list[Figure]) -> list[_Plan]:
    if page is None or page.charts is None:
        # The rate where there is one, else the first unit, of the fields the Key figures show.
        units = list(dict.fromkeys(f.unit for f in figures if f.unit))
        if not units:
            return []
        unit = next((u for u in units if u.endswith("/s")), units[0])
        members = [f for f in figures if f.unit == unit]
        fields = list(dict.fromkeys(f.field for f in members))
        label = ", ".join(dict.fromkeys(f.label for f in members))
        return [_Plan(fields=fields, label=label, unit=unit, per=None, better=better_for(unit))]
    schema = schema_fields(output.items)
    plans = []
    for chart in page.charts:
        field = find_field(schema, chart.field, ())
        against = find_field(schema, chart.against.field, ()) if chart.against else None
        unit = chart.unit or field.spec.unit
        plans.append(_Plan(
            fields=[field.path], label=chart.label or field.spec.label or field.path.rpartition(".")[2],
            unit=unit, per=chart.per,
            against=against.path.rpartition(".")[2] if against else None,
            against_label=(chart.against.label or against.spec.label or against.path.rpartition(".")[2])
            if chart.against and against else None,
            better=chart.better or better_for(unit)))
    return plans


def build_charts(output: OutputSchema, page: PageSpec | None, parsed: dict, figures: list[Figure],
                 gpus: list) -> list[Chart]:
    """Bar charts, one per plan, GPU and group (by default a block of a repeated section).

    Grouping keeps figures of very different sizes (a 256^3 case beside a
    2048^3 one) off one scale; a chart needs at least two bars.
    """
    columns = _key_columns(output.items)
    charts: list[Chart] = []
    for plan in _plans(output, page, figures):
        for gpu in gpus:
            transcript = parsed.get(gpu.slug)
            if transcript is None:
                continue
            flats = list(flatten(output.items, transcript.scope))
            value_at = {flat.path: flat.value for flat in flats}
            groups: dict[tuple, list[tuple[str, float, str, FieldSpec]]] = {}
            for flat in flats:
                if plain_path(flat.path) not in plan.fields:
                    continue
                value = flat.value
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                keys, section, name = _split_path(flat.path, columns)
                grouped = section if plan.per is None else [(c, v) for c, v in keys if c in plan.per]
                if plan.against is not None:
                    named = value_at.get(flat.path.rpartition(".")[0] + "." + plan.against
                                         if "." in flat.path else plan.against)
                    label = format_number(named)
                else:
                    parts = [part for column, part in keys if (column, part) not in grouped]
                    if len(plan.fields) > 1 or not parts:
                        parts.append(_label_of(figures, flat.path, plan.label))
                    label = " ".join(parts)
                groups.setdefault(tuple(grouped), []).append((label, value, flat.path, flat.spec))
            for grouped, bars in groups.items():
                if len(bars) < 2:
                    continue
                title = plan.label + (f" ({plan.unit})" if plan.unit else "")
                if plan.against_label:
                    title += f" against {plan.against_label}"
                if plan.better:
                    title += f", {plan.better} is better"
                if grouped:
                    title += ", " + ", ".join(f"{column} {value}" for column, value in grouped)
                names = [bar[0] for bar in bars]
                values = [bar[1] for bar in bars]
                shown = [format_number(v) for v in values]
                horizontal = max(map(len, names)) > 8
                noise, within = _noise(bars, plan.unit, gpu.spread)
                # Horizontal bars get the width their value axis' tick labels need, and a
                # height that grows with the bars instead of Mermaid's fixed 500 pixels.
                charts.append(Chart(title=f"{title}, {gpu.name}", horizontal=horizontal,
                                    width=900 if horizontal else 700,
                                    height=120 + 60 * len(bars) if horizontal else 400,
                                    x_title=plan.against_label,
                                    labels=[f"{name}: {value}" for name, value in zip(names, shown)], names=names, unit=plan.unit,
                                    axis=plan.unit or plan.label,
                                    top=f"{nice_ceiling_above(max(values)):.12g}",
                                    values=shown, noise=noise, drawn=not within))
    return charts


def _noise(bars: list[tuple[str, float, str, FieldSpec]], unit: str | None,
           spread: dict[str, float]) -> tuple[str | None, bool]:
    """The noise of a chart's bars, said in words, and whether every bar lies within it of every other.

    The noise is the run-to-run spread that record --repeat recorded with the
    evidence (meta.json's repeat.spread: (max - min) / median per field),
    where there is one for every bar; otherwise the field's tolerance, which
    verify takes as the same value. A field compared exactly has none.
    """
    specs = [spec for *_, spec in bars]
    if any(spec.compare is not Compare.tolerance for spec in specs):
        return None, False
    values = [value for _, value, _, _ in bars]
    low = min(values, key=abs)
    gap = max(values) - min(values)
    unit_text = f" {unit}" if unit else ""
    if all(path in spread for _, _, path, _ in bars):
        widths = [spread[path] * abs(value) for _, value, path, _ in bars]
        largest = max(spread[path] for _, _, path, _ in bars)
        return (f"up to {largest:.1%}, the spread of the runs that record --repeat recorded with this evidence",
                gap <= max(widths))
    within = gap <= min(tolerance_bound(s, low) for s in specs)
    if len({(s.rel, s.abs) for s in specs}) > 1:
        return "each field's tolerance, within which verify takes two runs as the same", within
    spec = specs[0]
    parts = ([f"{spec.rel:.0%}"] if spec.rel else []) + ([f"{format_number(spec.abs)}{unit_text}"] if spec.abs else [])
    return f"{' + '.join(parts)}, this field's tolerance, within which verify takes two runs as the same", within


def _label_of(figures: list[Figure], path: str, default: str) -> str:
    return next((f.label for f in figures if f.path == path), default)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 (times a power of ten) not below `value`."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        candidate = float(f"{step * power:.12g}")
        if candidate >= value:
            return candidate
    return 10 * power


def nice_ceiling_above(value: float) -> float:
    """A chart's axis end: the next nice value above the largest bar, so no bar fills the axis."""
    top = nice_ceiling(value)
    return top if top > value else nice_ceiling(value * (1 + 1e-9))


def format_number(value: Any, decimals: int | None = None) -> str:
    """A figure as the reader expects it: ints plain, floats in their shortest exact form
    or with `decimals` digits after the point."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if decimals is not None and math.isfinite(value) and "e" not in repr(value):
            return f"{value:.{decimals}f}"
        return repr(value)
    return str(value)
