"""orchestrator.workflows.compare and `coursectl compare`: two GPUs' evidence, or two revisions of it, side by side.

Each test writes fixture evidence (evidence.write_evidence) into a course tree in
tmp_path: the H200 transcripts recorded on the GPU machine, and a Tesla T4 one
derived from them; revisions come from a git repository made in that tree.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import SEEDS, coursectl, lines, table
from orchestrator.workflows.compare import resolve_sides
from orchestrator.errors import UsageError
from orchestrator.judge.evidence import EvidenceMeta, write_evidence
from orchestrator.process import run_command

DAY16 = "day16-tiled-matmul"
DAY13 = "day13-shared-memory"
H200 = dict(gpu_name="NVIDIA H200", gpu_slug="nvidia-h200", compute_capability="9.0", driver_version="580.159.04",
            cuda_version="13.0", arch="sm_90", max_sm_clock_mhz=1980)
T4 = dict(gpu_name="Tesla T4", gpu_slug="tesla-t4", compute_capability="7.5", driver_version="570.86.15",
          cuda_version="12.8", arch="sm_75", max_sm_clock_mhz=1590)


def t4_transcript() -> str:
    text = (SEEDS / "tiled_matmul.txt").read_text()
    for old, new in (("GPU: NVIDIA H200 (compute capability 9.0)", "GPU: Tesla T4 (compute capability 7.5)"),
                     ("naive         0.025      1344.0", "naive         0.180       186.4"),
                     ("tiled         0.010      3350.1", "tiled         0.090       372.8"),
                     ("tiled is 2.49x faster", "tiled is 2.00x faster")):
        assert text.count(old) == 1
        text = text.replace(old, new)
    return text


def put(root, lesson: str, gpu: dict, transcript: str, date: str = "2026-11-29T10:00:00+00:00") -> None:
    meta = EvidenceMeta(lesson=lesson, date=date, nvcc_version="13.0.88", flags=["-std=c++17", "-O3"],
                        source_sha256="0" * 64, transcript_sha256="", wall_seconds=0.5, exit_status=0,
                        coursectl_version="0.1.0", sanitizer_version="2025.3.1.0", **gpu)
    write_evidence(root, meta, transcript)


@pytest.fixture(autouse=True)
def own_git_environment(monkeypatch):
    """git here sees only the test's repository: a GIT_DIR or GIT_WORK_TREE inherited from a hook or a
    `git rebase --exec` would point the tests' `git init` and `git commit` at the developer's repository."""
    for name in [name for name in os.environ if name.startswith("GIT_")]:
        monkeypatch.delenv(name)


def git(root, *args: str) -> str:
    assert not any(name.startswith("GIT_") for name in os.environ)
    done = subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args], cwd=root,
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def two_gpus(course):
    """Day 16 recorded on the H200 and on a T4; day 13 on the H200 only."""
    made = course([DAY13, DAY16])
    put(made.root, DAY16, H200, (SEEDS / "tiled_matmul.txt").read_text())
    put(made.root, DAY16, T4, t4_transcript(), date="2026-08-30T10:00:00+00:00")
    put(made.root, DAY13, H200, (SEEDS / "shared_memory.txt").read_text())
    return made


FIELD_HEADER = ["field", "rule", "A: nvidia-h200", "B: tesla-t4", "ratio", "result"]


def test_two_gpus_side_by_side(two_gpus):
    result = coursectl("compare", "nvidia-h200", "tesla-t4", DAY16)
    assert (result.exit_code, result.stderr) == (0, "")
    out = lines(result.stdout)
    title = "day16-tiled-matmul: 31 fields (17 other-gpu, 14 same)"
    assert out[:out.index(title)] == [
        "A: nvidia-h200 in the working tree; B: tesla-t4 in the working tree; ratios are B / A",
        "day16-tiled-matmul: recorded 2026-11-29 (A), 2026-08-30 (B)",
        "day16-tiled-matmul: GPU NVIDIA H200 (A), Tesla T4 (B)",
        "day16-tiled-matmul: compute capability 9.0 (A), 7.5 (B)",
        "day16-tiled-matmul: driver 580.159.04 (A), 570.86.15 (B)",
        "day16-tiled-matmul: CUDA 13.0 (A), 12.8 (B)",
        "day16-tiled-matmul: arch sm_90 (A), sm_75 (B)",
        "day16-tiled-matmul: max SM clock 1980 MHz (A), 1590 MHz (B)"]
    rows = table(result.stdout, title)
    assert rows[0] == FIELD_HEADER
    assert rows[1:8] == [
        ["gpu", "device", "NVIDIA H200", "Tesla T4", "", "other-gpu"],
        ["cc", "device", "9.0", "7.5", "", "other-gpu"],
        ["tile", "exact", "16", "16", "1.000", "same"],
        ["tile_cols", "exact", "16", "16", "1.000", "same"],
        ["threads", "exact", "256", "256", "1.000", "same"],
        ["smem_bytes", "exact", "2048", "2048", "1.000", "same"],
        ["cases[256x256x256/naive].ms", "tolerance ±25% + ±0.003", "0.025", "0.18", "7.200", "other-gpu"]]
    assert rows[8] == ["cases[256x256x256/naive].gflops", "tolerance ±25%", "1344", "186.4", "0.139", "other-gpu"]
    assert rows[25] == ["speedups[256x256x256].speedup", "tolerance ±30%", "2.49", "2", "0.803", "other-gpu"]
    assert len(rows) == 32


def test_a_lesson_without_evidence_on_one_side_is_said_so(two_gpus):
    result = coursectl("compare", "nvidia-h200", "tesla-t4")
    assert result.exit_code == 0
    assert lines(result.stdout)[1] == "day13-shared-memory: not compared: no evidence on tesla-t4"


COMPARE_REPORT = """\
<!-- Generated by coursectl compare HEAD~1:nvidia-h200 nvidia-h200 from the evidence on both sides. -->
## Evidence compared: HEAD~1:nvidia-h200 and nvidia-h200

A is nvidia-h200 at HEAD~1 ({commit}); B is nvidia-h200 in the working tree. Ratios are B / A.

### day16-tiled-matmul

|  | A | B |
| --- | --- | --- |
| recorded | 2026-11-29 | 2026-12-03 |
| driver | 580.159.04 | 590.10.02 |

| field | rule | A: HEAD~1:nvidia-h200 | B: nvidia-h200 | ratio | result |
| --- | --- | ---: | ---: | ---: | --- |
| `gpu` | device | NVIDIA H200 | NVIDIA H200 | - | same |
| `cc` | device | 9.0 | 9.0 | - | same |
| `tile` | exact | 16 | 16 | 1.000 | same |
| `tile_cols` | exact | 16 | 16 | 1.000 | same |
| `threads` | exact | 256 | 256 | 1.000 | same |
| `smem_bytes` | exact | 2048 | 2048 | 1.000 | same |
| `cases[256x256x256/naive].ms` | tolerance ±25% + ±0.003 | 0.025 | 0.03 | 1.200 | within |
| `cases[256x256x256/naive].gflops` | tolerance ±25% | 1344 | 1120 | 0.833 | within |
| `cases[256x256x256/naive].loads` | exact | 512 | 512 | 1.000 | same |
| `cases[256x256x256/tiled].ms` | tolerance ±25% + ±0.003 | 0.01 | 0.01 | 1.000 | same |

<details><summary>21 more fields</summary>

"""


@pytest.fixture
def history(two_gpus):
    """A git repository whose first commit holds the evidence; the working tree re-records day 16 on the H200."""
    root = two_gpus.root
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "evidence")
    text = (SEEDS / "tiled_matmul.txt").read_text().replace("naive         0.025      1344.0",
                                                           "naive         0.030      1120.0")
    put(root, DAY16, {**H200, "driver_version": "590.10.02"}, text, date="2026-12-03T09:00:00+00:00")
    git(root, "commit", "-qam", "re-record day 16 after the driver upgrade")
    return two_gpus


def test_a_revision_against_the_working_tree_with_a_markdown_report(history, tmp_path):
    report = tmp_path / "compare.md"
    result = coursectl("compare", "HEAD~1:nvidia-h200", "nvidia-h200", DAY16, "--report", report)
    assert (result.exit_code, result.stderr) == (0, "")
    commit = git(history.root, "rev-parse", "HEAD~1")
    out = lines(result.stdout)
    assert out[:3] == [f"A: nvidia-h200 at HEAD~1 ({commit[:10]}); B: nvidia-h200 in the working tree; "
                       "ratios are B / A",
                       "day16-tiled-matmul: recorded 2026-11-29 (A), 2026-12-03 (B)",
                       "day16-tiled-matmul: driver 580.159.04 (A), 590.10.02 (B)"]
    assert table(result.stdout, "day16-tiled-matmul: 31 fields (29 same, 2 within)")[7:9] == [
        ["cases[256x256x256/naive].ms", "tolerance ±25% + ±0.003", "0.025", "0.03", "1.200", "within"],
        ["cases[256x256x256/naive].gflops", "tolerance ±25%", "1344", "1120", "0.833", "within"]]
    text = report.read_text()
    assert text.startswith(COMPARE_REPORT.format(commit=commit[:10]))
    assert text.endswith("| `cases_matched` | exact | 3 | 3 | 1.000 | same |\n\n</details>\n")


def test_a_plain_revision_takes_the_other_sides_gpu(history):
    result = coursectl("compare", "HEAD~1", "nvidia-h200", DAY16)
    assert result.exit_code == 0
    assert lines(result.stdout)[0].startswith("A: nvidia-h200 at HEAD~1 (")
    assert "day16-tiled-matmul: 31 fields (29 same, 2 within)" in lines(result.stdout)


def test_two_revisions_of_one_gpu(history):
    result = coursectl("compare", "HEAD~1:tesla-t4", "HEAD:tesla-t4", DAY16)
    assert result.exit_code == 0
    assert "day16-tiled-matmul: 31 fields (31 same)" in lines(result.stdout)


def test_a_revision_whose_transcript_was_edited_is_not_trusted(history):
    root = history.root
    transcript = root / "evidence" / DAY16 / "tesla-t4" / "transcript.txt"
    transcript.write_text(transcript.read_text().replace("0.090", "0.080"))
    git(root, "commit", "-qam", "an edit by hand")
    result = coursectl("compare", "HEAD:tesla-t4", "nvidia-h200", DAY16)
    assert result.exit_code == 0
    assert lines(result.stdout)[1] == (
        "day16-tiled-matmul: not compared: HEAD:evidence/day16-tiled-matmul/tesla-t4/transcript.txt: transcript "
        "does not match the sha256 in meta.json: it was edited after recording")


def test_a_revision_whose_metadata_nests_100000_deep_is_not_compared(history):
    """json.loads stops at about 1,000 levels with RecursionError: such metadata is corrupt, like any other."""
    root = history.root
    meta = root / "evidence" / DAY16 / "tesla-t4" / "meta.json"
    meta.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    git(root, "commit", "-qam", "metadata nested 100,000 deep")
    result = coursectl("compare", "HEAD:tesla-t4", "nvidia-h200", DAY16)
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout)[1].startswith(
        "day16-tiled-matmul: not compared: HEAD:evidence/day16-tiled-matmul/tesla-t4/meta.json: corrupt metadata: "
        "Invalid JSON: recursion limit exceeded")


@pytest.mark.parametrize("a, b, message", [
    ("nvidia-h999", "nvidia-h200",
     "compare: 'nvidia-h999' is neither a GPU with evidence here (nvidia-h200, tesla-t4) nor a git revision"),
    ("nope:nvidia-h200", "nvidia-h200", "compare: 'nope' is not a git revision (in 'nope:nvidia-h200')"),
    ("HEAD:nvidia-h999", "nvidia-h200",
     "compare: no evidence for 'nvidia-h999' at HEAD (it has nvidia-h200, tesla-t4)"),
    ("HEAD~1", "HEAD", "compare: name a GPU on at least one side: 'HEAD~1' and 'HEAD' name none "
                       "(GPUs with evidence here: nvidia-h200, tesla-t4)"),
    (":nvidia-h200", "nvidia-h200", "compare: ':nvidia-h200': name a revision before the colon (HEAD~3:nvidia-h200)"),
])
def test_an_unknown_side_exits_2_with_one_line(history, a, b, message):
    result = coursectl("compare", a, b)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"coursectl: error: {message}\n")


def test_a_side_that_looks_like_an_option_never_reaches_git_as_one(history):
    result = coursectl("compare", "--", "--output=x", "nvidia-h200")
    assert (result.exit_code, result.stderr) == (
        2, "coursectl: error: compare: '--output=x' is neither a GPU with evidence here (nvidia-h200, tesla-t4) "
           "nor a git revision\n")


def test_outside_a_git_repository_a_word_that_is_no_gpu_is_refused(two_gpus):
    result = coursectl("compare", "HEAD~3", "nvidia-h200")
    assert (result.exit_code, result.stderr) == (
        2, "coursectl: error: compare: 'HEAD~3' is neither a GPU with evidence here (nvidia-h200, tesla-t4) "
           "nor a git revision\n")


def test_git_runs_through_the_process_runner_with_argument_lists(history):
    calls = []

    def runner(argv, **kwargs):
        calls.append((list(argv), kwargs["timeout"]))
        return run_command(argv, **kwargs)

    a, b = resolve_sides(history.load(), "HEAD~1", "tesla-t4", runner)
    assert (a.label, b.label, a.commit) == ("HEAD~1:tesla-t4", "tesla-t4", git(history.root, "rev-parse", "HEAD~1"))
    assert calls == [(["git", "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"], 60.0),
                     (["git", "ls-tree", "-r", "--name-only", a.commit, "--", "evidence"], 60.0)]
    with pytest.raises(UsageError):
        resolve_sides(history.load(), "HEAD~1", "HEAD", runner)


def test_a_field_verify_finds_untrusted_is_untrusted_for_record_and_compare_too(two_gpus):
    """One status for one field: what verify says of a run on a throttled GPU, record says of it, and compare
    says of it once it is recorded (B stands where verify's run does)."""
    from orchestrator.cuda.toolchain import Gpu, GpuState
    from orchestrator.judge.comparison import FieldStatus
    from orchestrator.judge.judging import compare_with_previous, describe_environment, judge_runs
    from orchestrator.process import CommandResult
    from orchestrator.workflows.compare import compare_evidence

    root = two_gpus.root
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "evidence")
    manifest = two_gpus.load()
    lesson = manifest.lesson(DAY16)
    text = (SEEDS / "tiled_matmul.txt").read_text()
    slow = text.replace("tiled         0.010      3350.1", "tiled         0.200       167.5")
    assert slow != text
    gpu = Gpu(index=0, name="NVIDIA H200", uuid="GPU-test", compute_capability="9.0", peak_gbps=4814.3,
              peak_fp32_gflops=66908.2)
    throttled = describe_environment(GpuState(throttle_reasons=0x20), GpuState(throttle_reasons=0x20))
    run = CommandResult(argv=["./tiled_matmul"], returncode=0, stdout=slow.encode(), seconds=0.5)

    verified, _ = judge_runs(manifest, lesson, [run], gpu, "sm_90", compare=True, resources=None, environment=throttled)
    recorded, _ = judge_runs(manifest, lesson, [run], gpu, "sm_90", compare=False, resources=None, environment=throttled)
    compare_with_previous(manifest, lesson, recorded, gpu.slug)
    put(root, DAY16, {**H200, "environment": throttled.model_dump(exclude_none=True)}, slow,
        date="2026-12-03T09:00:00+00:00")
    git(root, "commit", "-qam", "re-record day 16 on a throttled GPU")
    [compared] = compare_evidence(manifest, [lesson], *resolve_sides(manifest, "HEAD~1:nvidia-h200", "nvidia-h200"))

    def statuses(fields):
        return {f.path: f.status for f in fields if f.status is not FieldStatus.volatile}
    assert statuses(verified.fields)["cases[256x256x256/tiled].ms"] is FieldStatus.untrusted
    assert statuses(compared.fields) == statuses(recorded.fields) == statuses(verified.fields)
    assert FieldStatus.moved not in statuses(compared.fields).values()
