"""The JSON Schema of lessons.yaml, generated from the manifest's models, for editors.

lessons.yaml names the committed copy on its first line,
``# yaml-language-server: $schema=schemas/lessons.schema.json``, so an editor
with the YAML language server completes keys and flags typos as they are
typed. The schema says what the models accept; what it cannot say (the day
order, a claim's names, that a source file exists) is still checked by
`load_manifest`.
"""

from __future__ import annotations

import json
from pathlib import Path

from .files import atomic_write
from .manifest import Manifest

SCHEMA_PATH = Path("schemas") / "lessons.schema.json"   # relative to the course root
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def manifest_schema() -> dict:
    """The JSON Schema of lessons.yaml."""
    schema = Manifest.model_json_schema(mode="validation")
    schema["title"] = "lessons.yaml"
    schema["description"] = ("The course manifest of coursectl: every lesson, how it is built, what it prints "
                             "and what it claims. docs/schema.md is the reference.")
    return {"$schema": DIALECT, **schema}


def schema_text() -> str:
    """The schema as the committed file holds it."""
    return json.dumps(manifest_schema(), indent=2, ensure_ascii=False) + "\n"


def write_manifest_schema(path: Path) -> Path:
    """Write the schema to `path` (atomically); return the path."""
    atomic_write(Path(path), schema_text())
    return Path(path)
