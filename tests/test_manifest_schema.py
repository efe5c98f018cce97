"""orchestrator.manifest.jsonschema: the JSON Schema editors use for lessons.yaml, kept in step with the models."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.manifest.jsonschema import SHIPPED, manifest_schema, schema_text, write_manifest_schema

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "orchestrator" / "schemas" / "lessons.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(COMMITTED.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, data) -> list[str]:
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data))


def test_the_committed_schema_is_what_the_models_generate():
    # Compared as JSON: pydantic 2.10 writes a bound as 0.0 where later ones write 0.
    assert json.loads(COMMITTED.read_text(encoding="utf-8")) == manifest_schema(), (
        "orchestrator/schemas/lessons.schema.json is stale: regenerate it with "
        "python -c 'from orchestrator.manifest.jsonschema import write_manifest_schema; write_manifest_schema()'")
    assert SHIPPED == COMMITTED


def test_write_manifest_schema_writes_that_text(tmp_path):
    path = write_manifest_schema(tmp_path / "out" / "lessons.schema.json")
    assert path.read_text(encoding="utf-8") == schema_text()
    assert json.loads(path.read_text(encoding="utf-8")) == manifest_schema()


def test_lessons_yaml_names_the_schema_on_its_first_line():
    first = (REPO / "lessons.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=orchestrator/schemas/lessons.schema.json"


def test_the_course_manifest_is_valid_under_the_schema(validator):
    data = yaml.safe_load((REPO / "lessons.yaml").read_text(encoding="utf-8"))
    assert errors(validator, data) == []


def test_the_manifest_before_its_fragments_is_valid_too(validator):
    data = yaml.safe_load((REPO / "tests" / "data" / "manifest" / "lessons.before.yaml").read_text(encoding="utf-8"))
    assert errors(validator, data) == []


def test_root_and_path_are_not_keys_of_the_schema():
    schema = manifest_schema()
    assert sorted(schema["properties"]) == ["architectures", "course", "defaults", "external_days", "lessons", "version"]
    assert schema["patternProperties"] == {"^x-": {}}
    assert schema["additionalProperties"] is False


MINIMAL = {"version": 1, "lessons": [{
    "id": "hello", "day": 1, "title": "Hello", "source": "hello.cu",
    "output": {"items": [{"line": "n = {n:int}"},
                         {"table": "rows", "columns": {"name": "word", "gbps": {"type": "float"}}}]},
    "claims": [{"id": "n-positive", "gate": "n > 0"}]}]}


def edited(edit) -> dict:
    data = json.loads(json.dumps(MINIMAL))
    edit(data)
    return data


def test_a_minimal_manifest_is_valid(validator):
    assert errors(validator, MINIMAL) == []
    assert errors(validator, edited(lambda d: d.update({"x-anything": [1, {"a": "b"}]}))) == []


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d.update(colour="red"), [": 'colour' does not match any of the regexes: '^x-'"]),
    (lambda d: d["lessons"][0].update(id="Hello"),
     ["lessons/0/id: 'Hello' does not match '^[a-z0-9][a-z0-9-]*$(?!\\\\n)'"]),
    (lambda d: d["lessons"][0].update(id="hello\n"),
     ["lessons/0/id: 'hello\\n' does not match '^[a-z0-9][a-z0-9-]*$(?!\\\\n)'"]),
    (lambda d: d.update(architectures=["sm_90\n"]),
     ["architectures/0: 'sm_90\\n' does not match '^sm_\\\\d{2,3}[af]?$(?!\\\\n)'"]),
    (lambda d: d["lessons"][0].update(sanitizers={"memchek": {}}),
     ["lessons/0/sanitizers: 'memchek' is not one of ['memcheck', 'racecheck', 'synccheck', 'initcheck']"]),
    (lambda d: d["lessons"][0]["claims"][0].update(expect="n > 1"),
     ["lessons/0/claims/0: {'id': 'n-positive', 'gate': 'n > 0', 'expect': 'n > 1'} is valid under each of "
      "{'required': ['expect']}, {'required': ['gate']}"]),
    (lambda d: d["lessons"][0]["output"]["items"][1]["columns"].update(name="wrd"),
     ["lessons/0/output: {'items': [{'line': 'n = {n:int}'}, {'table': 'rows', 'columns': {'name': 'wrd', 'gbps': "
      "{'type': 'float'}}}]} is not valid under any of the given schemas"]),
    (lambda d: d["lessons"][0].update(day=-1), ["lessons/0/day: -1 is less than the minimum of 0"]),
])
def test_the_schema_refuses_what_the_manifest_refuses(validator, edit, expected):
    assert errors(validator, edited(edit)) == expected


def test_check_jsonschema_reads_lessons_yaml_and_refuses_a_trailing_newline(tmp_path):
    """The command CI's checks run, which reads YAML with a parser of its own."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(COMMITTED)]
    good = subprocess.run([*command, str(REPO / "lessons.yaml")], capture_output=True, text=True, timeout=120)
    assert (good.returncode, good.stdout.strip()) == (0, "ok -- validation done")
    broken = tmp_path / "lessons.yaml"
    text = (REPO / "lessons.yaml").read_text(encoding="utf-8")
    broken.write_text(text.replace("  - day16-tiled-matmul: ", '  - id: "day16-tiled-matmul\\n"\n    title: '),
                      encoding="utf-8")
    bad = subprocess.run([*command, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    at = [next(iter(lesson)) if "id" not in lesson else lesson["id"]
          for lesson in yaml.safe_load(text)["lessons"]].index("day16-tiled-matmul")
    assert f"{broken}::$.lessons[{at}].id: 'day16-tiled-matmul\\n' does not match '^[a-z0-9][a-z0-9-]*$(?!\\\\n)'" \
        in bad.stdout
    # The short form's id is a key: one of another shape, or a misspelt key, is no id.
    broken.write_text(text.replace("  - day16-tiled-matmul: ", '  - "day16-tiled-matmul\\n": ')
                      .replace("    timeout: 30\n    output:\n      - line: \"tile", "    timout: 30\n    output:\n      - line: \"tile"),
                      encoding="utf-8")
    bad = subprocess.run([*command, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert [line.strip() for line in bad.stdout.splitlines()[1:]] == [
        f"{broken}::$.lessons[{at}]: 'day16-tiled-matmul\\n', 'timout' do not match any of the regexes: "
        "'^(?=.*-)[a-z0-9][a-z0-9-]*$(?!\\\\n)'"]


def test_the_short_forms_are_valid_and_a_misspelt_key_is_not(validator):
    from test_shorthand import SHORT

    data = yaml.safe_load(SHORT)
    assert errors(validator, data) == []
    data["lessons"][0]["timout"] = 30
    data["lessons"][0]["claims"][0]["gaet"] = "n > 0"
    assert errors(validator, data) == [
        "lessons/0/claims/0: 'gaet' does not match any of the regexes: '-'",
        "lessons/0: 'timout' does not match any of the regexes: '^(?=.*-)[a-z0-9][a-z0-9-]*$(?!\\\\n)'"]


def test_coursectl_schema_manifest_prints_the_shipped_schema():
    from conftest import coursectl

    result = coursectl("schema", "manifest")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == SHIPPED.read_text(encoding="utf-8")
