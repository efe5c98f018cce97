"""tools/slurm/submit.sh against a real single-node Slurm, CPU-only: a job array of `verify --offline
--shard K/N` tasks and the dependent `report merge` job, whose report is complete or refused.

Installs nothing: it is skipped unless Slurm's daemons and clients are on PATH (Debian's slurm-wlm;
.ci/run installs it). It starts slurmctld and slurmd of its own (auth/none, its own ports, state and
spool folders under the test's tmp folder) and stops them after.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPLAYING, ROOT

pytestmark = pytest.mark.slow

SUBMIT = ROOT / "tools" / "slurm" / "submit.sh"
NEEDED = ("slurmctld", "slurmd", "sbatch", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """A single-node Slurm cluster of this machine; yields the environment that reaches it."""
    missing = [name for name in NEEDED if _which(name) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} not on PATH)")
    if os.geteuid() != 0:
        pytest.skip("the single-node Slurm of this test runs its daemons as root")
    host = socket.gethostname().split(".")[0]
    state = tmp_path / "slurm"
    for name in ("state", "spool"):
        (state / name).mkdir(parents=True)
    conf = state / "slurm.conf"
    conf.write_text(f"""\
ClusterName=coursectl-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={state / 'state'}
SlurmdSpoolDir={state / 'spool'}
SlurmctldPidFile={state / 'slurmctld.pid'}
SlurmdPidFile={state / 'slurmd.pid'}
SlurmctldLogFile={state / 'slurmctld.log'}
SlurmdLogFile={state / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    daemons = [subprocess.Popen([_which("slurmctld"), "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=True)]
    daemons.append(subprocess.Popen([_which("slurmd"), "-D", "-N", host], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT, start_new_session=True))
    try:
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run([_which("sinfo"), "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if done.returncode == 0 and done.stdout.strip() in ("idle", "mixed"):
                break
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                logs = "".join(p.read_text(errors="replace")[-2000:] for p in state.glob("*.log"))
                pytest.fail(f"the test's Slurm did not come up (sinfo: {done.stdout.strip() or done.stderr.strip()})\n{logs}")
            time.sleep(0.5)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def _submit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SUBMIT), *args], capture_output=True, text=True, timeout=600)


def test_an_array_of_shards_then_a_merge_is_complete(slurm, course, monkeypatch):
    made = course(REPLAYING)
    monkeypatch.setenv("COURSECTL", str(Path(sys.executable).with_name("coursectl")))
    done = _submit("-n", "2", "-o", "reports", "--offline", "--wait")
    logs = "".join(p.read_text() for p in sorted((made.root / "reports").glob("*.log")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    merged = json.loads((made.root / "reports" / "merged.json").read_text())
    assert merged["partial"] is False
    assert sorted(r["lesson"] for r in merged["results"]) == sorted(REPLAYING)
    assert sorted(p.name for p in (made.root / "reports").glob("report-*.json")) == ["report-1.json",
                                                                                   "report-2.json"]


def test_a_shard_that_wrote_no_report_makes_the_merge_refuse(slurm, course, tmp_path, monkeypatch):
    made = course(REPLAYING)
    real = Path(sys.executable).with_name("coursectl")
    wrapper = tmp_path / "coursectl-losing-shard-2"
    wrapper.write_text(f'#!/usr/bin/env bash\ncase " $* " in *" 2/3 "*) exit 1 ;; esac\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("COURSECTL", str(wrapper))
    done = _submit("-n", "3", "-o", "reports", "--offline", "--wait")
    merge_log = (made.root / "reports" / "merge.log").read_text()
    assert done.returncode == 2, done.stdout + done.stderr + merge_log
    assert "shard 2 of 3 missing" in merge_log, merge_log
    assert not (made.root / "reports" / "merged.json").exists()


def test_record_is_never_offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lessons.yaml").write_text("version: 1\n")
    done = _submit("-n", "2", "--record", "--offline")
    assert done.returncode == 2 and "not with --offline" in done.stderr
