"""orchestrator.workflows.authoring, `coursectl check` and `coursectl new`: writing a lesson without a GPU.

`check` runs on the real course and its recorded H200 evidence; `new` on a
copy of the real course in tmp_path. Builds are real (nvcc), into the
session's cache.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import FIRST_LESSONS, COURSE, coursectl, first_lessons_only, lines
from orchestrator.workflows.authoring import FORMATS, N, THREADS, sample_transcript

DAY16 = "day16-tiled-matmul"
EVIDENCE = COURSE / "evidence" / DAY16 / "nvidia-h200" / "transcript.txt"
# A recorded transcript that does not change when the evidence is re-recorded (tests/data/h200-2026-11-29).
FIXED = Path(__file__).parent / "data" / "h200-2026-11-29" / "tiled_matmul.txt"
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
def in_repo(course_copy):
    """In a copy of the fixture course (conftest.COURSE), as an author in a course's folder."""
    return course_copy


def manifest_line(needle: str, after: str = "") -> int:
    rows = (COURSE / "lessons.yaml").read_text(encoding="utf-8").splitlines()
    start = next(n for n, row in enumerate(rows) if after in row) if after else 0
    return next(n for n, row in enumerate(rows, 1) if n > start and needle in row)


# -- check ------------------------------------------------------------------------------------
def test_check_a_recorded_transcript(in_repo):
    result = coursectl("check", DAY16, FIXED)
    assert (result.exit_code, result.stderr) == (0, "")
    assert lines(result.stdout) == [
        f"{DAY16}: {FIXED}",
        *[row.format(loads=32) for row in DAY16_TREE],
        "  gate 'loads-per-thread' held (naive reads 2K floats per thread, tiled 2 x ceil(K / 16))",
        *DAY16_REST,
        "5 of 5 gates held, 1 of 1 prediction held",
    ]


def test_check_reads_the_recorded_evidence_by_default(in_repo):
    result = coursectl("check", DAY16)
    assert (result.exit_code, result.stderr) == (0, "")
    out = lines(result.stdout)
    assert out[0] == f"{DAY16}: evidence/{DAY16}/nvidia-h200/transcript.txt (recorded on nvidia-h200)"
    assert out[1:] == lines(coursectl("check", DAY16, EVIDENCE).stdout)[1:]
    assert out[-1] == "5 of 5 gates held, 1 of 1 prediction held"
    assert coursectl("check", DAY16, "--gpu", "nvidia-h200").stdout == result.stdout


def test_check_a_transcript_with_a_gate_broken(in_repo, tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text(FIXED.read_text().replace("0.010      3435.7            32",
                                                   "0.010      3435.7            33"))
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

    from orchestrator.cli.main import app

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
    day71 = COURSE / "evidence" / "day71-matmul-fp16" / "nvidia-h200" / "transcript.txt"
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
    (["--arch", "sm90"], "coursectl: error: --arch 'sm90' is not a GPU architecture; write one like sm_90\n"),
])
def test_check_usage_errors(in_repo, args, message):
    result = coursectl("check", DAY16, *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)


def test_check_verify_and_build_refuse_an_architecture_with_one_line(in_repo):
    said = {name: coursectl(*name.split(), "--arch", "foo")
            for name in (f"check {DAY16}", "verify --offline --all", "build --all")}
    refused = (2, "", "coursectl: error: --arch 'foo' is not a GPU architecture; write one like sm_90\n")
    assert {name: (r.exit_code, r.stdout, r.stderr) for name, r in said.items()} == {name: refused for name in said}


# -- new --------------------------------------------------------------------------------------
@pytest.fixture
def copy(tmp_path, monkeypatch) -> Path:
    """The real course's first lessons, copied: their folders, entries and evidence, the templates and README."""
    root = tmp_path / "course"
    shutil.copytree(COURSE / "templates", root / "templates")
    for lesson in FIRST_LESSONS:
        shutil.copytree(COURSE / "lessons" / lesson, root / "lessons" / lesson)
        shutil.copytree(COURSE / "evidence" / lesson, root / "evidence" / lesson)
    (root / "lessons.yaml").write_text(first_lessons_only((COURSE / "lessons.yaml").read_text(encoding="utf-8")),
                                       encoding="utf-8")
    shutil.copyfile(COURSE / "README.md", root / "README.md")
    monkeypatch.chdir(root)
    return root


def printf_formats(source: str) -> list[str]:
    """The format strings of a source's printf calls, in order. C's printf reads the conversions the
    skeleton uses (%s %d %.3f %-10s %.9g) as Python's % operator does."""
    return [json.loads(f) for f in re.findall(r'std::printf\(\s*("(?:[^"\\]|\\.)*")', source)]


SAXPY_ENTRY = """\
  - day17-saxpy: "SAXPY: the hello world of bandwidth"
    output:
      - line: "n = {n:int} floats, {threads:int} threads per block"
      - table: kernels
        header: "kernel time (ms) GB/s"
        keys: [saxpy]
        columns:
          kernel: word
          ms: {type: float, compare: tolerance, rel: 0.25, abs: 0.003, unit: ms, label: time}
          gbps: {type: float, compare: tolerance, rel: 0.25, unit: GB/s, label: bandwidth}
      - line: "all {elements:int} elements match the CPU reference"
        optional: true
      - table: failures
        anywhere: true
        row: "FAILED {kernel:word}: first wrong element at {element:int}: got {got}, want {want}"
    claims:
      - saxpy-matches: every element matches the CPU reference
        gate: len(failures) == 0 and elements == n
      - saxpy-needs-no-shared-memory: the kernel reads and writes global memory only
        gate: resources['saxpy'].smem == 0
      - saxpy-streams: SAXPY streams at more than 100 GB/s (a prediction)
        expect: kernels['saxpy'].gbps > 100

"""


@pytest.mark.slow
def test_new_makes_a_lesson_that_builds_checks_and_renders(copy, tmp_path):
    before = (copy / "lessons.yaml").read_text()
    result = coursectl("new", "day17-saxpy", "--title", "SAXPY: the hello world of bandwidth")
    assert (result.exit_code, result.stderr) == (0, "")
    entry_line = before.splitlines().index("  - day71-matmul-fp16: Mixed precision, FP16 storage with FP32 and FP16 "
                                           "accumulation") + 1
    assert lines(result.stdout) == [
        "wrote lessons/day17-saxpy/saxpy.cu",
        "wrote lessons/day17-saxpy/prose.md",
        f"wrote lessons.yaml (the entry at line {entry_line})",
        "next: write the lesson, `coursectl build day17-saxpy`, `coursectl check day17-saxpy TRANSCRIPT`, "
        "`coursectl render`; docs/authoring.md walks through it",
    ]
    # Inserted as text before day 71, in day order: every other byte of lessons.yaml is as it was.
    at = before.index("  - day71-matmul-fp16:")
    assert (copy / "lessons.yaml").read_text() == before[:at] + SAXPY_ENTRY + before[at:]

    source = (copy / "lessons/day17-saxpy/saxpy.cu").read_text()
    assert source.splitlines()[:3] == ["// SPDX-License-Identifier: MIT", "//",
                                       "// Day 17: SAXPY: the hello world of bandwidth"]
    assert [row for row in source.splitlines() if row.startswith(("// Build:", "// Run:", "// Verified"))] == [
        "// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o saxpy saxpy.cu", "// Run:   ./saxpy",
        "// Verified: no evidence recorded yet."]
    assert "#define CUDA_CHECK(call)" in source
    assert "// snippet: saxpy\n__global__ void saxpy(" in source and "\n// end snippet: saxpy\n" in source

    # nvcc builds it, for real.
    built = coursectl("build", "day17-saxpy", "--arch", "sm_90", "-v")
    assert (built.exit_code, built.stderr) == (0, "")
    # -v shows ptxas' report as the claims read it: no shared memory, as the claim below says.
    [report] = [line for line in lines(built.stdout) if line.startswith("  resources[")]
    assert re.fullmatch(r"  resources\['saxpy'\]: registers \d+, spill_stores 0, spill_loads 0, stack 0, smem 0, "
                        r"barriers 0", report), report

    # What the program prints on a GPU, from its own printf formats, passes check.
    # Its printf calls, in source order: the GPU, the size, the table's header and row, then FAILED or
    # the line that says every element matched.
    gbps = 3.0 * 4 * N / 0.012e-3 / 1e9
    success = [("NVIDIA H200", 9, 0), (N, THREADS), ("kernel", "time (ms)", "GB/s"), ("saxpy", 0.012, gbps)]
    formats = printf_formats(source)
    assert formats == [FORMATS[key] for key in ("gpu_format", "size_format", "header_format", "row_format",
                                                "failed_format", "matched_format")]
    sample = "".join(fmt % args for fmt, args in zip(formats[:4] + formats[5:], success + [(N,)], strict=True))
    assert sample == sample_transcript()
    (tmp_path / "sample.txt").write_text(sample)
    checked = coursectl("check", "day17-saxpy", tmp_path / "sample.txt")
    assert (checked.exit_code, checked.stderr) == (0, "")
    assert lines(checked.stdout) == [
        f"day17-saxpy: {tmp_path / 'sample.txt'}",
        "├── gpu = NVIDIA H200, cc = 9.0  line 1",
        "├── n = 1048576, threads = 256  line 2",
        "├── kernels: table, 1 row",
        "│   └── [saxpy] ms = 0.012, gbps = 1048.6  line 5",
        "├── elements = 1048576  line 7",
        "└── failures: table, 0 rows",
        "claims (resources: ptxas' report of a build for sm_90):",
        "  gate 'saxpy-matches' held (every element matches the CPU reference)",
        "  gate 'saxpy-needs-no-shared-memory' held (the kernel reads and writes global memory only)",
        "  gate 'no-kernel-spills' held (ptxas keeps every kernel in registers)",
        "  expect 'saxpy-streams' held (SAXPY streams at more than 100 GB/s (a prediction))",
        "3 of 3 gates held, 1 of 1 prediction held",
    ]

    # A run whose check failed prints a FAILED line instead, and fails the gate.
    failed = "".join(fmt % args for fmt, args in zip(formats[:5], success + [("saxpy", 12, 1.5, 2.5)], strict=True))
    assert failed == sample_transcript(wrong=(12, 1.5, 2.5))
    (tmp_path / "failed.txt").write_text(failed)
    result = coursectl("check", "day17-saxpy", tmp_path / "failed.txt")
    assert result.exit_code == 1
    assert "  gate 'saxpy-matches' failed (every element matches the CPU reference)" in lines(result.stdout)

    # Its page renders; render leaves the source's header lines as new wrote them.
    rendered = coursectl("render")
    assert (rendered.exit_code, rendered.stderr) == (0, "")
    assert "wrote lessons/day17-saxpy/README.md" in lines(rendered.stdout)
    assert "wrote lessons/day17-saxpy/saxpy.cu" not in lines(rendered.stdout)
    page = (copy / "lessons/day17-saxpy/README.md").read_text()
    assert page.splitlines()[1] == "# Day 17: SAXPY: the hello world of bandwidth"
    assert "[lessons/day17-saxpy/README.md]" not in page and "### saxpy" in page
    assert "| 17 | [SAXPY: the hello world of bandwidth](lessons/day17-saxpy/README.md) | no evidence yet |" in (
        copy / "README.md").read_text()
    assert coursectl("render", "--check").exit_code == 0


def test_new_prints_each_path_whole_in_a_narrow_terminal(copy):
    """At 60 columns `wrote lessons/day17-...` broke inside the path, and `next:` inside its commands."""
    result = coursectl("new", "day17-saxpy-with-a-longer-name", "--title", "SAXPY", columns=60)
    assert result.exit_code == 0
    assert lines(result.stdout)[:2] == ["wrote lessons/day17-saxpy-with-a-longer-name/saxpy_with_a_longer_name.cu",
                                        "wrote lessons/day17-saxpy-with-a-longer-name/prose.md"]
    assert lines(result.stdout)[3].endswith("docs/authoring.md walks through it")


def test_verify_offline_without_nvcc_promises_nothing_first(copy, monkeypatch, tmp_path):
    """It printed `offline: compute-sanitizer passes skipped ...; recorded sanitizer reports are checked` on
    stdout, then stopped for want of nvcc, having checked nothing."""
    from orchestrator.cuda import toolchain

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])
    result = coursectl("verify", "--all", "--offline")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr.startswith("coursectl: error: nvcc not found")


@pytest.mark.slow
def test_verify_offline_quiet_prints_the_summary_not_the_note(copy):
    """-q is the summary, the reasons and the tally: the note on skipped passes is left to the full output."""
    quiet = coursectl("verify", "day14-syncthreads", "--offline", "-q")
    assert quiet.exit_code == 0 and "offline:" not in quiet.stdout
    assert lines(quiet.stdout)[0].startswith("verify --offline")   # the summary's title comes first


def test_new_refuses_an_existing_id_or_day_and_a_bad_id(copy):
    before = (copy / "lessons.yaml").read_text()
    day16 = before.splitlines().index(f"  - {DAY16}: Tiled matrix multiply in shared memory") + 1
    for args, message in [
        ([DAY16], f"coursectl: error: lesson '{DAY16}' already exists (lessons.yaml:{day16})\n"),
        (["day16-streams"], f"coursectl: error: day 16 already has lesson '{DAY16}' (lessons.yaml:{day16})\n"
                            "hint: one lesson a day: pick another day\n"),
        (["saxpy"], "coursectl: error: lesson id 'saxpy' must look like dayNN-name: 'day', the day's number, a dash, "
                    "then lower-case words joined by dashes (day17-saxpy)\n"),
        (["day17-SAXPY"], "coursectl: error: lesson id 'day17-SAXPY' must look like dayNN-name: 'day', the day's "
                          "number, a dash, then lower-case words joined by dashes (day17-saxpy)\n"),
        (["day17-saxpy", "--title", "  "], "coursectl: error: --title must say something: it is the lesson's page "
                                           "title\n"),
    ]:
        result = coursectl("new", *args, *([] if "--title" in args else ["--title", "T"]))
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)
    assert (copy / "lessons.yaml").read_text() == before
    assert sorted(p.name for p in (copy / "lessons").iterdir()) == FIRST_LESSONS


def test_new_refuses_a_folder_that_is_there(copy):
    (copy / "lessons" / "day17-saxpy").mkdir()
    result = coursectl("new", "day17-saxpy", "--title", "T")
    assert (result.exit_code, result.stderr) == (
        2, "coursectl: error: lessons/day17-saxpy/ already exists; move it away or pick another id\n")


MINIMAL = """\
version: 1
lessons:
  - id: day05-hello
    title: Hello
    source: hello.cu
    output:
      - line: "GPU: {gpu:device} (compute capability {cc:word:device})"
# the end of the lessons
x-notes: [1]
"""


def test_new_in_a_course_without_defaults_or_licence_after_the_last_lesson(tmp_path, monkeypatch):
    (tmp_path / "hello.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "lessons.yaml").write_text(MINIMAL)
    monkeypatch.chdir(tmp_path)
    result = coursectl("new", "day06-scale", "--title", "Scaling")
    assert (result.exit_code, result.stderr) == (0, "")
    assert (tmp_path / "lessons.yaml").read_text().startswith(MINIMAL.split("# the end")[0] + "\n"
        "  - day06-scale: Scaling\n"
        "    output:\n"
        '      - line: "GPU: {gpu:device} (compute capability {cc:word:device})"\n'
        '      - line: "n = {n:int} floats, {threads:int} threads per block"\n')
    assert (tmp_path / "lessons.yaml").read_text().endswith(
        "        expect: kernels['saxpy'].gbps > 100\n# the end of the lessons\nx-notes: [1]\n")
    assert (tmp_path / "lessons/day06-scale/scale.cu").read_text().startswith("// Day 6: Scaling\n//\n")
    assert coursectl("new", "day01-first", "--title", "First").exit_code == 0
    text = (tmp_path / "lessons.yaml").read_text()
    assert text.index("  - day01-first: First") < text.index("  - id: day05-hello")


def test_new_in_an_empty_course(tmp_path, monkeypatch):
    (tmp_path / "lessons.yaml").write_text("version: 1\ndefaults:\n  flags: [-O2]\nlessons: []\n")
    monkeypatch.chdir(tmp_path)
    result = coursectl("new", "day01-first", "--title", "# not a comment")
    assert (result.exit_code, result.stderr) == (0, "")
    assert (tmp_path / "lessons.yaml").read_text().startswith(
        'version: 1\ndefaults:\n  flags: [-O2]\nlessons:\n  - day01-first: "# not a comment"\n')
    source = (tmp_path / "lessons/day01-first/first.cu").read_text()
    assert "// Build: nvcc -O2 -arch=sm_90 -o first first.cu\n" in source


def test_new_writes_nothing_when_its_entry_would_not_hold(tmp_path, monkeypatch):
    """A course whose defaults claim what the skeleton does not print: the entry is refused before it is kept."""
    text = MINIMAL.replace("lessons:\n", "defaults:\n  claims:\n    - has-rows: rows\n      gate: rows > 0\n"
                                         "lessons:\n")
    text = text.replace("# the end", '      - line: "rows = {rows:int}"\n# the end')
    (tmp_path / "hello.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "lessons.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    result = coursectl("new", "day06-scale", "--title", "Scaling")
    assert result.exit_code == 2
    assert result.stderr.startswith("coursectl: error: lessons.yaml:")
    assert "lesson 'day06-scale': claims[2].gate: 'rows > 0' names unknown name 'rows'" in result.stderr
    assert (tmp_path / "lessons.yaml").read_text() == text
    assert not (tmp_path / "lessons").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -- the manifest's warnings ----------------------------------------------------------------------
def test_evidence_of_a_renamed_lesson_is_named_not_left_unread(copy):
    """A lesson renamed in lessons.yaml left its evidence under the old id, which nothing read: a green verify
    --strict said nothing of it."""
    (copy / "evidence" / "day16-tiled-matmul").rename(copy / "evidence" / "day15-tiled-matmul")
    (copy / "evidence" / ".cache").mkdir()   # hidden folders are not evidence
    warning = ("coursectl: warning: evidence/day15-tiled-matmul/: no lesson 'day15-tiled-matmul' in lessons.yaml, "
               "so nothing checks this evidence (a lesson renamed or removed?): move it to the lesson's id, "
               "or delete it\n")
    for args in (["check", "day14-syncthreads"], ["render", "--check"]):
        assert coursectl(*args).stderr.startswith(warning), args
    (copy / "evidence" / "day15-tiled-matmul").rename(copy / "evidence" / "day16-tiled-matmul")
    assert "warning" not in coursectl("check", "day14-syncthreads").stderr


def test_every_command_prints_the_manifests_warnings(tmp_path, monkeypatch):
    (tmp_path / "hello.cpp").write_text("int main() { return 0; }\n")   # a host program: nvcc hands it on
    text = MINIMAL.replace("source: hello.cu", "source: hello.cpp")
    (tmp_path / "lessons.yaml").write_text(text.replace("# the end", "  - id: day03-early\n    title: Early\n"
                                                        "    source: hello.cpp\n    output: [{line: hi}]\n# the end"))
    (tmp_path / "t.txt").write_text("hi\n")
    monkeypatch.chdir(tmp_path)
    warning = ("coursectl: warning: lessons.yaml:8: lesson 'day03-early': day: day 3 comes after day 5 (lesson "
               "'day05-hello'); the pages and the index list lessons in day order, but commands take them in "
               "lessons.yaml's order\n")
    result = coursectl("check", "day03-early", "t.txt")
    assert (result.exit_code, result.stderr) == (0, warning)
    result = coursectl("verify", "--all", "--offline", "-q")
    assert result.stderr.startswith(warning)
