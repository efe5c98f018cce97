"""The CI workflows validate against GitHub's workflow schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parent.parent / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_matches_githubs_schema(path):
    tool = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    result = subprocess.run([tool, "--builtin-schema", "vendor.github-workflows", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gpu_workflow_shards_cover_every_lesson_once():
    gpu = yaml.safe_load((WORKFLOWS[0].parent / "gpu.yml").read_text())
    shards = gpu["jobs"]["verify"]["strategy"]["matrix"]["shard"]
    n = len(shards)
    assert shards == [f"{k}/{n}" for k in range(1, n + 1)]
    assert "report merge" in gpu["jobs"]["summary"]["steps"][-2]["run"]


def test_cpu_workflow_runs_the_readme_commands():
    cpu = yaml.safe_load((WORKFLOWS[0].parent / "cpu.yml").read_text())
    runs = [step.get("run", "") for step in cpu["jobs"]["test"]["steps"]]
    assert "make test" in runs
    assert any("verify --all --offline" in r for r in runs)
    assert any("render --check" in r for r in runs)
