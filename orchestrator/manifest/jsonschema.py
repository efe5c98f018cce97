"""The JSON Schema of lessons.yaml, generated from the manifest's models, for editors.

The committed copy ships in the package beside the report's,
orchestrator/schemas/lessons.schema.json, and lessons.yaml names it on its
first line, ``# yaml-language-server: $schema=orchestrator/schemas/lessons.schema.json``,
so an editor
with the YAML language server completes keys and flags typos as they are
typed. The schema says what the models accept; what it cannot say (the day
order, a claim's names, that a source file exists) is still checked by
`load_manifest`.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic.json_schema import GenerateJsonSchema

from ..files import atomic_write
from .model import Manifest

SHIPPED = Path(__file__).resolve().parent.parent / "schemas" / "lessons.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class EmptyDefaults(GenerateJsonSchema):
    """pydantic's JSON Schema, where a field made empty by a factory says its default as `= []` would.

    The models write `Field(default_factory=list)`, not `= []`: pydantic copies a default it cannot hash for
    each model it makes (8.4 us against 1.4 us for a model of four such fields), and a parse makes thousands.
    """

    def default_schema(self, schema):
        json_schema = super().default_schema(schema)
        factory = schema.get("default_factory")
        if factory in (list, dict, set) and "default" not in json_schema:
            json_schema = {**json_schema, "default": {} if factory is dict else []}
        return json_schema


def manifest_schema() -> dict:
    """The JSON Schema of lessons.yaml."""
    schema = Manifest.model_json_schema(mode="validation", schema_generator=EmptyDefaults)
    schema["title"] = "lessons.yaml"
    schema["description"] = ("The course manifest of coursectl: every lesson, how it is built, what it prints "
                             "and what it claims. docs/schema.md is the reference.")
    return {"$schema": DIALECT, **schema}


def schema_text() -> str:
    """The schema as the committed file holds it."""
    return json.dumps(manifest_schema(), indent=2, ensure_ascii=False) + "\n"


def write_manifest_schema(path: Path = SHIPPED) -> Path:
    """Write the schema to `path` (atomically), by default the shipped copy; return the path."""
    atomic_write(Path(path), schema_text())
    return Path(path)
