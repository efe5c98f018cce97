"""A lesson's `page:` key: where its page is written, the fields of its Key figures and its charts.

Checked against the lesson's output schema when the manifest loads
(`check_page`); render/figures.py draws the tables and charts it names.
docs/schema.md describes the keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from ..transcript.schema import LineItem, OutputSchema, SectionItem, TableItem
from ..transcript.fields import FieldSpec, Strict


def _field_shorthand(value: Any) -> Any:
    """`- ms` is short for `- {field: ms}`."""
    return {"field": value} if isinstance(value, str) else value


class FieldChoice(Strict):
    """A field the page shows, with the label and unit it is shown under."""

    field: str
    label: str | None = None   # default: the field's own label, else its name
    unit: str | None = None    # default: the field's own unit


# The shorthands, in the JSON Schema editors use too: `- ms` is `- {field: ms}`, `per: case` is `per: [case]`.
FieldChoiceOrName = Annotated[FieldChoice, BeforeValidator(_field_shorthand, json_schema_input_type=FieldChoice | str)]


_KEYS_SCHEMA = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}, {"type": "null"}]}


class ChartSpec(Strict):
    """One chart drawn per GPU (and per value of `per`): a bar for each value of `field`."""

    field: str
    label: str | None = None
    unit: str | None = None
    per: list[str] | None = Field(default=None, json_schema_extra=_KEYS_SCHEMA)  # key columns, one chart per
    against: FieldChoiceOrName | None = None   # value of them; []: one chart
    better: Literal["lower", "higher"] | None = None   # default: from the unit (ms lower, GB/s higher)

    @field_validator("per", mode="before")
    @classmethod
    def _one_key(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class PageSpec(Strict):
    """Where a lesson's page is written, and what it shows beyond its prose, code and transcript."""

    path: Path | None = None   # the page file, relative to the course root; default README.md beside the source
    figures: list[FieldChoiceOrName] | None = None
    charts: list[ChartSpec] | None = None


class PageSpecError(ValueError):
    """A `page:` entry names something the output schema lacks; `loc` is its path under `page`."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


class SchemaField(BaseModel):
    """A field of the output schema, wherever it stands."""

    path: str                          # cases.kernels.ms: the table and section names, then the field
    spec: FieldSpec
    keys: list[str]                    # the key columns along the way, outermost first


def schema_fields(items: list, prefix: str = "", keys: tuple[str, ...] = ()) -> list[SchemaField]:
    """Every field of an output schema, in schema order; the key columns of a table are not fields here."""
    out: list[SchemaField] = []
    for item in items:
        if isinstance(item, LineItem):
            out += [SchemaField(path=prefix + name, spec=spec, keys=list(keys)) for name, spec in item.names.items()]
        elif isinstance(item, TableItem):
            inner = (*keys, *item.key_columns)
            out += [SchemaField(path=f"{prefix}{item.table}.{name}", spec=spec, keys=list(inner))
                    for name, spec in item.columns.items() if name not in item.key_columns]
            for note in item.notes:
                note_keys = (*keys, *item.key_columns[:1])
                out += [SchemaField(path=f"{prefix}{note.name}.{name}", spec=spec, keys=list(note_keys))
                        for name, spec in note.pattern.fields.items()]
        elif isinstance(item, SectionItem):
            out += schema_fields(item.items, f"{prefix}{item.section}.", (*keys, *item.key_columns))
    return out


def find_field(fields: list[SchemaField], name: str, loc: tuple) -> SchemaField:
    """The one field `name` names: its own name, or its path (`cases.kernels.ms`) where names repeat."""
    found = [f for f in fields if f.path == name or f.path.endswith("." + name)]
    if len(found) == 1:
        return found[0]
    if found:
        raise PageSpecError(loc, f"{name!r} names {len(found)} fields ({', '.join(f.path for f in found)}); "
                                 f"give its path")
    raise PageSpecError(loc, f"no field {name!r} in the output schema")


def _numeric(field: SchemaField, loc: tuple) -> SchemaField:
    if field.spec.type not in ("int", "float"):
        raise PageSpecError(loc, f"{field.path} is of type {field.spec.type}, not a number")
    return field


def check_page(output: OutputSchema, page: PageSpec) -> None:
    """Raise PageSpecError when `page` names a field, key or axis the output schema lacks."""
    fields = schema_fields(output.items)
    for index, choice in enumerate(page.figures or []):
        _numeric(find_field(fields, choice.field, ("figures", index, "field")), ("figures", index, "field"))
    for index, chart in enumerate(page.charts or []):
        field = _numeric(find_field(fields, chart.field, ("charts", index, "field")), ("charts", index, "field"))
        for column in chart.per or []:
            if column not in field.keys:
                have = ", ".join(field.keys) or "none"
                raise PageSpecError(("charts", index, "per"),
                                    f"{column!r} is not a key of {field.path} (its keys: {have})")
        if chart.against is not None:
            loc = ("charts", index, "against")
            against = find_field(fields, chart.against.field, loc)
            scope = field.path.rpartition(".")[0]
            if against.path.rpartition(".")[0] != scope:
                raise PageSpecError(loc, f"{against.path} does not stand beside {field.path}: the bars of a "
                                         f"chart are named by a field of the same line, row or block")
