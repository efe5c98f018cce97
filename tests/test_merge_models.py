"""`report merge` of the shards of several GPU models at once: each model's split counted on its own, the model
named in every message, each model's toolchain kept (docs/maintaining.md, "Several GPU models")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import GPU_SLUG, GPU_UUID, coursectl, lines, tally_line

H100 = "NVIDIA H100 80GB HBM3"   # the stand-in nvidia-smi's other model (FAKE_GPU_NAME), compute capability 9.0
H100_SLUG = "nvidia-h100-80gb-hbm3"
THREE = ["day13-shared-memory", "day14-syncthreads", "day16-tiled-matmul"]


@pytest.fixture
def shards(course, fake_gpu, prebuilt, tmp_path, monkeypatch):
    """Writes `verify --shard K/N` reports on the H200 (name None) or another model; returns each path."""
    made = course(THREE)

    def verify(shard: str | None, name: str | None = None, *extra: str) -> Path:
        if name is None:
            monkeypatch.delenv("FAKE_GPU_NAME", raising=False)
        else:
            monkeypatch.setenv("FAKE_GPU_NAME", name)
        slug = H100_SLUG if name == H100 else GPU_SLUG
        path = tmp_path / f"{slug}-{(shard or 'all').replace('/', 'of')}.json"
        args = ["--shard", shard] if shard else []
        result = coursectl("verify", "--all", "-q", *args, *extra, "--json", path)
        assert (result.exit_code, result.stderr) == (0, "")
        return path

    verify.made = made
    return verify


def test_two_models_of_different_splits_merge_each_lesson_once_per_gpu(shards, tmp_path):
    """The H200 in 2 shards and the H100 in 1 were refused: `shards of different splits (1/1, 1/2, 2/2)`."""
    reports = [shards("1/2"), shards("2/2"), shards("1/1", H100)]
    merged, junit = tmp_path / "merged.json", tmp_path / "merged.xml"
    result = coursectl("report", "merge", *reports, "--json", merged, "--junit", junit)
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout)[0] == "merged 3 reports"

    report = json.loads(merged.read_text())
    assert sorted((r["lesson"], r["gpu"]) for r in report["results"]) == sorted(
        (lesson, gpu) for lesson in THREE for gpu in (GPU_SLUG, H100_SLUG))
    assert report["toolchain"] is None   # no one GPU ran everything
    assert {model: run["shards"] for model, run in report["models"].items()} == {
        GPU_SLUG: ["1/2", "2/2"], H100_SLUG: ["1/1"]}
    assert {model: [g["name"] for g in run["toolchain"]["gpus"]] for model, run in report["models"].items()} == {
        GPU_SLUG: ["NVIDIA H200"], H100_SLUG: [H100]}
    assert (report["shards"], report["partial"]) == (["1/1", "1/2", "2/2"], False)

    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert properties[f"gpu.{GPU_SLUG}.0"] == f"NVIDIA H200, compute capability 9.0, {GPU_UUID}"
    assert properties[f"gpu.{H100_SLUG}.0"] == f"{H100}, compute capability 9.0, {GPU_UUID}"
    assert (properties[f"shards.{GPU_SLUG}"], properties[f"shards.{H100_SLUG}"]) == ("1/2, 2/2", "1/1")
    assert properties[f"driver.{GPU_SLUG}"] == properties[f"driver.{H100_SLUG}"] == "580.159.04"
    assert "gpu.0" not in properties and "driver" not in properties


def test_a_models_missing_shard_is_not_hidden_by_another_models(shards, tmp_path):
    """The H200's shard 2/2 missing was hidden by the H100's 2/2: the shards were counted all together."""
    reports = [shards("1/2"), shards("1/2", H100), shards("2/2", H100)]
    refused = coursectl("report", "merge", *reports)
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert refused.stderr == (f"coursectl: error: {GPU_SLUG}: shard 2 of 2 missing; merge every shard, or pass "
                              "--allow-partial\n")

    merged = tmp_path / "merged.json"
    partial = coursectl("report", "merge", *reports, "--allow-partial", "--strict", "--json", merged)
    assert partial.exit_code == 1
    assert tally_line(partial.stdout).endswith(
        f"; a partial merge ({GPU_SLUG}: shard 2 of 2 missing), counted as failed")
    report = json.loads(merged.read_text())
    assert (report["partial"], report["models"][GPU_SLUG]["shards"], report["models"][H100_SLUG]["shards"]) == (
        True, ["1/2"], ["1/2", "2/2"])


def test_every_model_missing_a_shard_is_named(shards):
    refused = coursectl("report", "merge", shards("2/3"), shards("1/2", H100))
    assert refused.exit_code == 2
    assert refused.stderr == (f"coursectl: error: {H100_SLUG}: shard 2 of 2 missing; {GPU_SLUG}: shards 1, 3 of 3 "
                              "missing; merge every shard, or pass --allow-partial\n")


def test_one_models_shards_of_two_splits_are_still_refused_naming_the_model(shards):
    h100 = shards("1/1", H100)
    mixed = coursectl("report", "merge", shards("1/2"), shards("1/3"), h100)
    assert (mixed.exit_code, mixed.stdout) == (1, "")
    assert mixed.stderr == (f"coursectl: error: {GPU_SLUG}: the reports are shards of different splits "
                            "(1/2, 1/3)\n")
    whole_and_shard = coursectl("report", "merge", shards(None), shards("2/2"), h100)
    assert whole_and_shard.exit_code == 1
    assert whole_and_shard.stderr == (f"coursectl: error: {GPU_SLUG}: the reports are shards of different splits "
                                      "(2/2)\n")


def test_a_model_run_whole_merges_with_another_models_shards(shards, tmp_path):
    """A report without --shard is its model's whole split; the other model's are counted on their own."""
    merged = tmp_path / "merged.json"
    result = coursectl("report", "merge", shards(None, H100), shards("1/2"), shards("2/2"), "--json", merged)
    assert (result.exit_code, result.stderr) == (0, "")
    report = json.loads(merged.read_text())
    assert {model: run["shards"] for model, run in report["models"].items()} == {
        GPU_SLUG: ["1/2", "2/2"], H100_SLUG: []}
    assert len(report["results"]) == 6


def test_a_merged_report_merges_again_with_another_models(shards, tmp_path):
    """Each model's shards merged on its own (a job per model), then the models together."""
    h200 = tmp_path / "h200.json"
    assert coursectl("report", "merge", shards("1/2"), shards("2/2"), "--json", h200).exit_code == 0
    alone = json.loads(h200.read_text())
    assert alone["toolchain"]["gpus"][0]["name"] == "NVIDIA H200"   # one model: its toolchain, as before
    merged = tmp_path / "merged.json"
    result = coursectl("report", "merge", h200, shards("1/1", H100), "--json", merged)
    assert (result.exit_code, result.stderr) == (0, "")
    report = json.loads(merged.read_text())
    assert {model: run["shards"] for model, run in report["models"].items()} == {
        GPU_SLUG: ["1/2", "2/2"], H100_SLUG: ["1/1"]}
    again = coursectl("report", "merge", h200, shards("1/2"))
    assert (again.exit_code, again.stderr) == (1, f"coursectl: error: lesson 'day13-shared-memory' on {GPU_SLUG} "
                                                  "appears in reports 1 and 2\n")


def test_a_models_shards_from_another_manifest_are_still_refused(shards):
    first = shards("1/1", H100)
    manifest = shards.made.manifest
    manifest.write_text(manifest.read_text().replace("timeout: 30", "timeout: 31"))
    refused = coursectl("report", "merge", first, shards("1/1"))
    assert (refused.exit_code, refused.stderr) == (1, (
        "coursectl: error: the reports come from 2 different manifests (lessons.yaml changed between the shards' "
        "runs); merge the shards of one run\n"))
