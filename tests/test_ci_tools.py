"""tools/ci/: the GPU workflows' matrix from .github/gpu-models.json, and record.yml's evidence staged by each
shard and collected into one tree (docs/maintaining.md, "Several GPU models")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GPU_SLUG, coursectl

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "tools" / "ci" / "gpu_matrix.py"
EVIDENCE = ROOT / "tools" / "ci" / "evidence.py"


def run(script: Path, *args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd, capture_output=True, text=True)


def models_file(tmp_path: Path, models) -> Path:
    path = tmp_path / "gpu-models.json"
    path.write_text(json.dumps(models) if not isinstance(models, str) else models)
    return path


TWO = {"h200": {"label": "h200", "gpu": "nvidia-h200", "shards": 1, "verify": True},
       "t4": {"label": "gpu-t4", "gpu": "tesla-t4", "shards": 4, "verify": False}}


# -- the matrix --------------------------------------------------------------------------------------------------
def test_each_model_takes_its_own_number_of_shards_on_its_own_runners(tmp_path):
    path = models_file(tmp_path, TWO)
    recorded = run(MATRIX, "--for", "record", "--models", path)
    assert (recorded.returncode, recorded.stderr) == (0, "")
    include = json.loads(recorded.stdout)["include"]
    assert [(e["model"], e["label"], e["gpu"], e["shard"], e["name"]) for e in include] == [
        ("h200", "h200", "nvidia-h200", "1/1", "h200-1-of-1"),
        *[("t4", "gpu-t4", "tesla-t4", f"{k}/4", f"t4-{k}-of-4") for k in range(1, 5)]]
    verified = json.loads(run(MATRIX, "--for", "verify", "--models", path).stdout)["include"]
    assert [e["model"] for e in verified] == ["h200"]   # the T4 is recorded on, not yet verified on
    only = json.loads(run(MATRIX, "--for", "record", "--only", " t4 ", "--models", path).stdout)["include"]
    assert [e["shard"] for e in only] == ["1/4", "2/4", "3/4", "4/4"]


def test_the_checked_in_models_verify_on_the_h200_alone():
    """The course has evidence for nvidia-h200 only: no other model is verified on."""
    models = json.loads((ROOT / ".github" / "gpu-models.json").read_text())
    assert {name: m["gpu"] for name, m in models.items() if m["verify"]} == {"h200": GPU_SLUG}
    assert all((ROOT / "evidence").glob(f"*/{m['gpu']}/meta.json") for m in models.values() if m["verify"])


@pytest.mark.parametrize("models, message", [
    ("{", ": not JSON: Expecting property name enclosed in double quotes"),
    ("[]", ": must be an object of GPU models, such as {"),
    ({"H200": TWO["h200"]}, ": model 'H200': a model's name is lower-case letters, digits and '-', at most 40"),
    ({"h200": "h200"}, ": model 'h200': must be an object with gpu, label, shards, verify"),
    ({"h200": {**TWO["h200"], "shard": 2}}, ": model 'h200': unknown key 'shard' (the keys are gpu, label, "
                                            "shards, verify)"),
    ({"h200": {"label": "h200", "gpu": "nvidia-h200", "verify": True}}, ": model 'h200': shards: missing"),
    ({"h200": {**TWO["h200"], "shards": 0}}, ": model 'h200': shards: a whole number from 1 to 64, not 0"),
    ({"h200": {**TWO["h200"], "shards": True}}, ": model 'h200': shards: a whole number from 1 to 64, not true"),
    ({"h200": {**TWO["h200"], "shards": "2"}}, ": model 'h200': shards: a whole number from 1 to 64, not \"2\""),
    ({"h200": {**TWO["h200"], "label": "h200, t4"}}, ": model 'h200': label: a runner label (letters, digits, "
                                                     "'_', '.', '-'), not \"h200, t4\""),
    ({"h200": {**TWO["h200"], "gpu": "NVIDIA H200"}}, ": model 'h200': gpu: the GPU's slug as coursectl doctor "
                                                      "names it (nvidia-h200), not \"NVIDIA H200\""),
    ({"h200": {**TWO["h200"], "verify": "yes"}}, ": model 'h200': verify: true or false, not \"yes\""),
    ({"h200": TWO["h200"], "h200b": TWO["h200"]}, ": gpu 'nvidia-h200' is given to two models; evidence is kept "
                                                  "per GPU model"),
], ids=["json", "list", "name", "not-object", "unknown-key", "missing", "zero", "bool", "string", "label", "slug",
        "verify", "twice"])
def test_a_bad_models_file_is_one_message_naming_it_and_exit_2(tmp_path, models, message):
    path = models_file(tmp_path, models)
    result = run(MATRIX, "--for", "verify", "--models", path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"gpu_matrix.py: error: {path}")
    assert message in result.stderr, result.stderr


def test_a_matrix_of_nothing_is_refused_saying_why(tmp_path):
    """GitHub fails an empty matrix with a message of its own about the workflow; the plan says which models."""
    path = models_file(tmp_path, TWO)
    unknown = run(MATRIX, "--for", "record", "--only", "a100", "--models", path)
    assert (unknown.returncode, unknown.stderr) == (2, f"gpu_matrix.py: error: --only: no model 'a100' in {path} "
                                                       "(its models: h200, t4)\n")
    unverified = run(MATRIX, "--for", "verify", "--only", "t4", "--models", path)
    assert (unverified.returncode, unverified.stderr) == (2, 'gpu_matrix.py: error: no GPU model to verify on: '
                                                             f'none of t4 has "verify": true in {path}\n')
    missing = run(MATRIX, "--for", "verify", "--models", tmp_path / "none.json")
    assert (missing.returncode, missing.stderr) == (2, f"gpu_matrix.py: error: {tmp_path / 'none.json'}: "
                                                       "no such file\n")


# -- the evidence ------------------------------------------------------------------------------------------------
def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_shard_stages_what_its_record_wrote_and_collect_puts_every_shard_into_one_tree(course, fake_gpu, prebuilt,
                                                                                        tmp_path):
    made = course(["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"])
    before = tree(made.root / "evidence")
    reports = [tmp_path / f"record-{k}.json" for k in (1, 2)]
    for k, report in enumerate(reports, 1):
        assert coursectl("record", "--all", "-q", "--shard", f"{k}/2", "--json", report).exit_code == 0
    recorded = tree(made.root / "evidence")
    assert recorded != before

    artifacts = tmp_path / "artifacts"
    for k, report in enumerate(reports, 1):
        staged = run(EVIDENCE, "stage", report, artifacts / f"evidence-h200-{k - 1}", cwd=made.root)
        assert (staged.returncode, staged.stderr) == (0, "")
    shard_two = tree(artifacts / "evidence-h200-1")
    assert shard_two == {"record-report.json": reports[1].read_bytes(),
                         **{f"evidence/{name}": data for name, data in recorded.items()
                            if name.startswith("day14-syncthreads/")}}

    # Back to the evidence as it was checked out (the collect job's checkout), then every shard's into it.
    for name in recorded:
        (made.root / "evidence" / name).unlink()
    for name, data in before.items():
        (made.root / "evidence" / name).parent.mkdir(parents=True, exist_ok=True)
        (made.root / "evidence" / name).write_bytes(data)
    stale = made.root / "evidence" / "day13-shared-memory" / GPU_SLUG / "racecheck.log"
    stale.write_text("a file the new record does not write\n")
    collected = run(EVIDENCE, "collect", artifacts, cwd=made.root)
    assert (collected.returncode, collected.stderr) == (0, "")
    assert collected.stdout.splitlines()[0].startswith("collected ")
    assert tree(made.root / "evidence") == recorded   # each folder replaced whole: the stale file is gone
    assert coursectl("verify", "--all", "-q", "--offline", "--strict").exit_code == 0


def artifact(root: Path, name: str, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / name / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / name / relative).write_text(text)


def test_two_artifacts_writing_one_file_with_different_bytes_are_refused_and_nothing_is_written(tmp_path):
    artifacts, checkout = tmp_path / "artifacts", tmp_path / "checkout"
    build = "evidence/day13-shared-memory/build/sm_90.json"
    artifact(artifacts, "evidence-h200-0", {build: '{"nvcc_version": "13.0.88"}\n',
                                            "evidence/day13-shared-memory/nvidia-h200/meta.json": "{}\n"})
    artifact(artifacts, "evidence-t4-0", {build: '{"nvcc_version": "12.8.93"}\n',
                                          "evidence/day13-shared-memory/tesla-t4/meta.json": "{}\n"})
    artifact(checkout, ".", {build: "as checked out\n"})
    result = run(EVIDENCE, "collect", artifacts, cwd=checkout)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("evidence.py: error: two artifacts write one file with different bytes; nothing was "
                             f"written:\n  {build}: evidence-h200-0 and evidence-t4-0 differ\n")
    assert tree(checkout) == {build: b"as checked out\n"}

    # The same bytes from two models (one nvcc) are one file.
    artifact(artifacts, "evidence-t4-0", {build: '{"nvcc_version": "13.0.88"}\n'})
    result = run(EVIDENCE, "collect", artifacts, cwd=checkout)
    assert (result.returncode, result.stderr) == (0, "")
    assert tree(checkout) == {build: b'{"nvcc_version": "13.0.88"}\n',
                              "evidence/day13-shared-memory/nvidia-h200/meta.json": b"{}\n",
                              "evidence/day13-shared-memory/tesla-t4/meta.json": b"{}\n"}


@pytest.mark.parametrize("files, message", [
    ({"evidence/x/meta.json": "{}"}, "evidence-h200-0: evidence/x/meta.json: not in evidence/<lesson>/<gpu or build>/"),
    ({"evidence/a/b/.hidden": "{}"}, "evidence-h200-0: evidence/a/b/.hidden: not in evidence/<lesson>/<gpu or build>/"),
], ids=["shallow", "hidden"])
def test_an_artifact_that_is_not_staged_evidence_is_refused(tmp_path, files, message):
    artifacts = tmp_path / "artifacts"
    artifact(artifacts, "evidence-h200-0", files)
    result = run(EVIDENCE, "collect", artifacts, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"evidence.py: error: {message}\n")


def test_an_artifact_holding_a_link_is_refused(tmp_path):
    artifacts = tmp_path / "artifacts"
    artifact(artifacts, "evidence-h200-0", {"evidence/a/nvidia-h200/meta.json": "{}"})
    (artifacts / "evidence-h200-0" / "evidence" / "a" / "nvidia-h200" / "link").symlink_to("/etc/passwd")
    result = run(EVIDENCE, "collect", artifacts, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "evidence.py: error: evidence-h200-0: evidence/a/nvidia-h200/link: not a plain file or folder\n")
    assert not (tmp_path / "evidence").exists()


@pytest.mark.parametrize("report, message", [
    ({"command": "verify", "results": []}, "a report of 'verify', not of coursectl record"),
    ({"command": "record", "results": [{"lesson": "../../etc", "gpu": "nvidia-h200", "recorded": True}]},
     'results[0]: lesson "../../etc" is not a folder name coursectl writes'),
    ({"command": "record"}, "not a coursectl JSON report: no results"),
], ids=["verify", "escape", "no-results"])
def test_stage_takes_a_record_report_and_only_folders_it_names(tmp_path, report, message):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    result = run(EVIDENCE, "stage", path, tmp_path / "out", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"evidence.py: error: {path}: {message}\n")
    assert not (tmp_path / "out").exists()


def test_stage_of_a_recorded_lesson_without_its_folder_is_an_error(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"command": "record", "results": [
        {"lesson": "day13-shared-memory", "gpu": "nvidia-h200", "recorded": True},
        {"lesson": "day14-syncthreads", "gpu": "nvidia-h200", "recorded": False}]}))
    result = run(EVIDENCE, "stage", path, tmp_path / "out", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (1, "evidence.py: error: evidence/day13-shared-memory/nvidia-h200: "
                                                     "the report says it was recorded, but there is no such folder\n")


def test_stage_refuses_a_lesson_recorded_on_another_gpu_than_the_models(course, fake_gpu, prebuilt, tmp_path,
                                                                       monkeypatch):
    """A runner labelled for one model whose GPU is another: its evidence would be that other model's."""
    made = course(["day13-shared-memory"])
    monkeypatch.setenv("FAKE_GPU_NAME", "NVIDIA H100 80GB HBM3")
    report = tmp_path / "record.json"
    assert coursectl("record", "--all", "-q", "--json", report).exit_code == 0
    refused = run(EVIDENCE, "stage", report, tmp_path / "out", "--gpu", GPU_SLUG, cwd=made.root)
    assert (refused.returncode, refused.stderr) == (1, (
        f"evidence.py: error: {report}: results[0]: lesson 'day13-shared-memory' was recorded on "
        "nvidia-h100-80gb-hbm3, not on nvidia-h200, the GPU of this job's model: a runner of another model has "
        "its label\n"))
    assert not (tmp_path / "out").exists()
    staged = run(EVIDENCE, "stage", report, tmp_path / "out", "--gpu", "nvidia-h100-80gb-hbm3", cwd=made.root)
    assert (staged.returncode, staged.stderr) == (0, "")
    assert (tmp_path / "out" / "evidence" / "day13-shared-memory" / "nvidia-h100-80gb-hbm3" / "meta.json").is_file()
