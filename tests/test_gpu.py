"""On the GPU machine: the real lessons verify against their evidence."""

from __future__ import annotations

import pytest

from bugs import ROOT
from orchestrator.manifest.load import load_manifest
from orchestrator.workflows.pipeline import verify
from orchestrator.judge.results import Options, Status
from orchestrator.cuda.toolchain import discover


@pytest.mark.gpu
def test_every_lesson_passes_verify():
    manifest = load_manifest(ROOT / "lessons.yaml")
    tc = discover()
    options = Options(jobs=4)
    results = verify(manifest, manifest.lessons, tc, options)
    # A lesson that fails says why, and what the GPU was doing around its runs: its clocks, throttling and
    # other processes before and after (a timing that moved once in a while is told apart from one that
    # moved with the GPU's state).
    assert {r.lesson: r.status for r in results} == {l.id: Status.PASS for l in manifest.lessons}, "\n".join(
        [f"{r.lesson}: {x}" for r in results for x in r.reasons]
        + [f"{r.lesson}: {r.environment.model_dump_json()}; notes: {r.notes}" for r in results
           if r.status is not Status.PASS])


def _fault_course(tmp_path, name: str, timeout: float):
    import shutil

    import yaml

    source = ROOT / "tests" / "data" / "gpu" / f"{name}.cu"
    shutil.copy(source, tmp_path / source.name)
    (tmp_path / "lessons.yaml").write_text(yaml.safe_dump({
        "version": 1, "architectures": ["sm_90"], "defaults": {"sanitizers": {}},
        "lessons": [{"id": name.replace("_", "-"), "day": 0, "title": name, "source": source.name,
                     "timeout": timeout,
                     "output": {"items": [{"line": "launching {what}"},
                                          {"line": "returned{rest}", "optional": True}]}}]}))
    return load_manifest(tmp_path / "lessons.yaml")


@pytest.mark.gpu
def test_a_kernel_that_never_ends_is_killed_at_its_timeout(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    manifest = _fault_course(tmp_path, "spin_forever", timeout=5)
    [result] = verify(manifest, manifest.lessons, discover(), Options(jobs=1, sanitize=False))
    print(result.status.value, result.reasons)
    assert result.status is Status.TIMEOUT
    assert result.reasons[0].startswith("killed after ")
    assert "launching a kernel that waits for a flag nobody sets" in result.reasons[0]
    left = subprocess.run(["pgrep", "-f", "spin_forever"], capture_output=True, text=True).stdout.split()
    assert left == []


@pytest.mark.gpu
def test_a_kernel_that_faults_fails_with_the_cuda_error(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    manifest = _fault_course(tmp_path, "illegal_address", timeout=20)
    [result] = verify(manifest, manifest.lessons, discover(), Options(jobs=1, sanitize=False))
    text = "\n".join(result.reasons)
    print(result.status.value, text)
    assert result.status is Status.FAIL
    assert "exit status 1" in text
    assert "CUDA error: an illegal memory access was encountered" in text


@pytest.mark.gpu
def test_sigterm_during_a_gpu_run_stops_everything(tmp_path):
    """SIGTERM while a kernel spins: exit 130, the lesson's process is gone, nothing recorded."""
    import os
    import signal
    import subprocess
    import sys
    import time

    _fault_course(tmp_path, "spin_forever", timeout=60)
    env = dict(os.environ, COURSECTL_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "record", "--all", "--no-sanitize"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "cache/.*/spin_forever"], capture_output=True).returncode == 0:
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    print(out, err)
    assert proc.returncode == 130
    assert "interrupted" in err
    assert subprocess.run(["pgrep", "-f", "cache/.*/spin_forever"], capture_output=True).returncode == 1
    assert not (tmp_path / "evidence").exists()
