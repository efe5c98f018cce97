"""orchestrator.authoring and `coursectl check`: writing a lesson without a GPU.

`check` runs on the real course and its recorded H200 evidence. Builds are
real (nvcc), into the session's cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, coursectl, lines

DAY16 = "day16-tiled-matmul"
EVIDENCE = ROOT / "evidence" / DAY16 / "nvidia-h200" / "transcript.txt"
HINT = "hint: fix the program's output or the lesson's output schema in lessons.yaml; docs/schema.md describes it\n"

DAY16_TREE = [
    "├── gpu = NVIDIA H200, cc = 9.0  line 1",
    "├── tile = 16, tile_cols = 16, threads = 256, smem_bytes = 2048  line 2",
    "├── cases: table, 6 rows",
    "│   ├── [256x256x256/naive] ms = 0.025, gflops = 1354.7, loads = 512  line 6",
    "│   ├── [256x256x256/tiled] ms = 0.01, gflops = 3435.7, loads = {loads}  line 7",
    "│   ├── [512x512x512/naive] ms = 0.063, gflops = 4274.2, loads = 1024  line 9",
    "│   ├── [512x512x512/tiled] ms = 0.04, gflops = 6641.8, loads = 64  line 10",
    "│   ├── [611x613x617/naive] ms = 0.113, gflops = 4078.4, loads = 1234  line 12",
    "│   └── [611x613x617/tiled] ms = 0.069, gflops = 6716.6, loads = 78  line 13",
    "├── speedups: notes of cases, 3 rows",
    "│   ├── [256x256x256] speedup = 2.54, fewer_loads = 16  line 8",
    "│   ├── [512x512x512] speedup = 1.55, fewer_loads = 16  line 11",
    "│   └── [611x613x617] speedup = 1.65, fewer_loads = 15.8  line 14",
    "├── cases_matched = 3  line 16",
    "└── failures: table, 0 rows",
    "claims (resources: ptxas' report of a build for sm_90):",
    "  gate 'every-case-matches' held (naive and tiled match the CPU reference on all three cases, 611 x 613 x 617 "
    "included)",
]
DAY16_REST = [
    "  gate 'shared-memory-is-two-tiles' held (the tiled kernel's shared memory is two 16 x 16 float tiles)",
    "  gate 'tiled-smem-is-two-tiles' held (ptxas agrees that the tiled kernel holds two 16 x 16 float tiles and the "
    "naive one none)",
    "  gate 'no-kernel-spills' held (ptxas keeps every kernel in registers)",
    "  expect 'tiled-is-faster' held (tiled beats naive on every case (a prediction))",
]


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)


def manifest_line(needle: str, after: str = "") -> int:
    rows = (ROOT / "lessons.yaml").read_text(encoding="utf-8").splitlines()
    start = next(n for n, row in enumerate(rows) if after in row) if after else 0
    return next(n for n, row in enumerate(rows, 1) if n > start and needle in row)


# -- check ------------------------------------------------------------------------------------
def test_check_the_recorded_evidence(in_repo):
    result = coursectl("check", DAY16)
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout) == [
        f"{DAY16}: evidence/{DAY16}/nvidia-h200/transcript.txt (recorded on nvidia-h200)",
        *[row.format(loads=32) for row in DAY16_TREE],
        "  gate 'loads-per-thread' held (naive reads 2K floats per thread, tiled 2 x ceil(K / 16))",
        *DAY16_REST,
        "5 of 5 gates held, 1 of 1 prediction held",
    ]
    assert coursectl("check", DAY16, "--gpu", "nvidia-h200").stdout == result.stdout


def test_check_a_transcript_with_a_gate_broken(in_repo, tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text(EVIDENCE.read_text().replace("0.010      3435.7            32", "0.010      3435.7            33"))
    result = coursectl("check", DAY16, broken)
    assert (result.exit_code, result.stderr) == (1, "")
    assert lines(result.stdout) == [
        f"{DAY16}: {broken}",
        *[row.format(loads=33) for row in DAY16_TREE],
        "  gate 'loads-per-thread' failed (naive reads 2K floats per thread, tiled 2 x ceil(K / 16))",
        "    cases[256x256x256/tiled]: loads == (2 * dims(case)[2] if kernel == 'naive' else 2 * ceil(dims(case)[2] / "
        "tile)) is false (case = '256x256x256', kernel = 'tiled', loads = 33, tile = 16)",
        *DAY16_REST,
        "4 of 5 gates held, 1 of 1 prediction held",
    ]


def test_check_reads_standard_input(in_repo):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    result = CliRunner().invoke(app, ["check", DAY16, "-"], input=EVIDENCE.read_text(), env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert lines(result.stdout)[0] == f"{DAY16}: <stdin>"


def test_a_transcript_off_the_schema_exits_2_naming_its_line_and_the_schema_items(in_repo, tmp_path):
    off = tmp_path / "off.txt"
    off.write_text(EVIDENCE.read_text().replace("all 3 cases match", "all three cases match"))
    result = coursectl("check", DAY16, off)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"coursectl: error: {off}:16: unexpected line after the last item of the schema; found 'all three cases "
        "match the CPU reference at every element'\n"
        f"lessons.yaml:{manifest_line('cases match the CPU reference', DAY16)}: lesson '{DAY16}': output.items[3] is "
        "the last item of the schema, where the transcript should end\n" + HINT)


def test_a_missing_line_names_the_item_it_expected_even_a_default_one(in_repo, tmp_path):
    off = tmp_path / "off.txt"
    off.write_text(EVIDENCE.read_text().replace("GPU: NVIDIA H200", "Device: NVIDIA H200"))
    result = coursectl("check", DAY16, off)
    assert result.exit_code == 2
    assert result.stderr == (
        f"coursectl: error: {off}:1: expected a line matching 'GPU: {{gpu}} (compute capability {{cc:word}})'; "
        "found 'Device: NVIDIA H200 (compute capability 9.0)'\n"
        f"lessons.yaml:{manifest_line('GPU: {gpu')}: lesson '{DAY16}': output.items[0] is the item it expected\n"
        + HINT)


def test_a_section_item_is_named_by_its_path(in_repo, tmp_path):
    day71 = ROOT / "evidence" / "day71-matmul-fp16" / "nvidia-h200" / "transcript.txt"
    off = tmp_path / "off.txt"
    off.write_text(day71.read_text().replace("observed f16-acc/f32-acc max-error ratio at K=1024",
                                             "observed ratio at K=1024"))
    result = coursectl("check", "day71-matmul-fp16", off)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1] == (
        f"lessons.yaml:{manifest_line('observed f16-acc')}: lesson 'day71-matmul-fp16': output.items[9].items[4] is "
        "the item it expected")


@pytest.mark.parametrize("args, message", [
    (["--gpu", "nvidia-b200"], "coursectl: error: lesson 'day16-tiled-matmul' has no evidence recorded on "
                               "'nvidia-b200'\nhint: it has evidence for: nvidia-h200\n"),
    (["nothing.txt"], "coursectl: error: no transcript nothing.txt: no such file\n"),
    (["t.txt", "--gpu", "nvidia-h200"], "coursectl: error: --gpu picks recorded evidence to check; leave it out "
                                        "when giving a TRANSCRIPT\n"),
    (["--arch", "sm90"], "coursectl: error: --arch 'sm90' must look like sm_90\n"),
])
def test_check_usage_errors(in_repo, args, message):
    result = coursectl("check", DAY16, *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)
