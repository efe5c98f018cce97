"""The JSON report: a versioned format, its JSON Schema shipped with the package, and every report valid."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, coursectl
from orchestrator.cli.report import REPORT_FORMAT, report_schema

SHIPPED = ROOT / "orchestrator" / "schemas" / "report.schema.json"


def validate(report: dict) -> None:
    jsonschema.Draft202012Validator(json.loads(SHIPPED.read_text())).validate(report)


def test_the_shipped_schema_is_the_models():
    """Regenerate with: coursectl schema report > orchestrator/schemas/report.schema.json"""
    assert json.loads(SHIPPED.read_text()) == report_schema()
    assert coursectl("schema", "report").stdout == SHIPPED.read_text()


def test_a_report_written_by_verify_is_valid_and_says_its_format(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory", "day16-tiled-matmul", "crash"])
    path = tmp_path / "report.json"
    assert coursectl("verify", "--all", "-q", "--json", path).exit_code == 1
    report = json.loads(path.read_text())
    assert report["format"] == REPORT_FORMAT == 1
    validate(report)
    broken = dict(report, format=2)
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_a_report_of_another_format_is_refused_with_what_to_do(course, fake_gpu, prebuilt, tmp_path):
    course(["day13-shared-memory"])
    path = tmp_path / "old.json"
    assert coursectl("verify", "--all", "-q", "--json", path).exit_code == 0
    old = json.loads(path.read_text())
    del old["format"]
    path.write_text(json.dumps(old))
    result = coursectl("report", "merge", path)
    assert (result.exit_code, result.stderr) == (2, f"coursectl: error: {path}: a report of format 0; this coursectl "
                                                    "reads format 1: re-run the command that wrote it\n")


def committed_reports() -> list[Path]:
    """Every JSON report in the repository: a `results` list at the top."""
    found = []
    for path in sorted(ROOT.glob("bench/results/**/*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "results" in data:
            found.append(path)
    return found


@pytest.mark.parametrize("path", committed_reports(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_report_is_valid(path):
    validate(json.loads(path.read_text()))
