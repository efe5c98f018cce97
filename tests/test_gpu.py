"""On the GPU machine: the real lessons verify against their evidence."""

from __future__ import annotations

import pytest

from bugs import ROOT
from orchestrator.manifest import load_manifest
from orchestrator.pipeline import Status, Options, make_sanitize_step, verify
from orchestrator.toolchain import discover


@pytest.mark.gpu
def test_every_lesson_passes_verify():
    manifest = load_manifest(ROOT / "lessons.yaml")
    tc = discover()
    options = Options(jobs=4)
    results = verify(manifest, manifest.lessons, tc, options,
                     sanitize_step=make_sanitize_step(manifest, tc, options))
    assert {r.lesson: r.status for r in results} == {l.id: Status.PASS for l in manifest.lessons}, \
        "\n".join(f"{r.lesson}: {x}" for r in results for x in r.reasons)
