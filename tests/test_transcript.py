"""orchestrator.transcript.parse: the real H200 transcripts parsed with lessons.yaml's own schemas.

tests/data/seeds/README.md says where each transcript came from. Broken
transcripts are a seed with one edit, each asserted to the message and line.
"""

from __future__ import annotations

import gc
import re
import threading
import time
from pathlib import Path

import pytest

from conftest import real_lessons
from orchestrator.transcript import patterns as patterns_module
from orchestrator.transcript import lines as lines_module
from orchestrator.transcript import parse as transcript_module
from orchestrator.errors import TranscriptError
from orchestrator.manifest.load import load_manifest
from orchestrator.transcript.schema import OutputSchema
from orchestrator.transcript.fields import Compare
from orchestrator.transcript.parse import Flat, Scope, Transcript, decode_output, flatten, parse_transcript

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "tests" / "data" / "course"   # the fixture course (conftest.COURSE)
SEEDS = Path(__file__).parent / "data" / "seeds"

DAY13 = "day13-shared-memory"
DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
DAY71 = "day71-matmul-fp16"

KERNELS_ROW_NAIVE = "transposeNaive                 0.092       522.9      5.43x\n"


@pytest.fixture(scope="module")
def schemas() -> dict[str, OutputSchema]:
    manifest = load_manifest(COURSE / "lessons.yaml")
    return {lesson.id: lesson.output for lesson in manifest.lessons}


def seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def parse(schemas, lesson: str, name: str, text: str | None = None) -> Transcript:
    return parse_transcript(schemas[lesson], seed(name) if text is None else text, name)


def parse_error(schemas, lesson: str, name: str, text: str) -> TranscriptError:
    assert text != seed(name)
    with pytest.raises(TranscriptError) as info:
        parse(schemas, lesson, name, text)
    return info.value


def rows(scope: Scope, table: str) -> list[tuple[str, int, dict]]:
    return [(row.key, row.line, row.values) for row in scope.tables[table]]


# --- day 13: shared memory --------------------------------------------------------


def test_day13_shared_memory(schemas):
    transcript = parse(schemas, DAY13, "shared_memory.txt")
    assert transcript.line_count == 20
    assert transcript.scope.values == {
        "gpu": "NVIDIA H200", "cc": "9.0",
        "rows": 2003, "cols": 3001, "buffer_mib": 22.9,
        "smem_default": 49152, "smem_optin": 232448, "smem_per_sm": 233472,
        "tile": 32, "tile_cols": 32, "tile_bytes": 4096,
        "moved_mib": 45.9,
        "probe_bytes": 53248, "before_optin": "invalid argument",
        "optin_bytes": 53248, "after_optin": "no error",
        "elements": 6011003,
    }
    assert transcript.scope.lines["smem_per_sm"] == 4
    assert transcript.scope.lines["moved_mib"] == 14
    assert transcript.scope.lines["before_optin"] == 18
    assert transcript.scope.lines["elements"] == 20
    assert rows(transcript.scope, "kernels") == [
        ("copyRowMajor", 9, {"kernel": "copyRowMajor", "ms": 0.017, "gbps": 2839.7, "vs_copy": 1.0}),
        ("transposeNaive", 10, {"kernel": "transposeNaive", "ms": 0.092, "gbps": 522.9, "vs_copy": 5.43}),
        ("transposeTiledStatic", 11,
         {"kernel": "transposeTiledStatic", "ms": 0.032, "gbps": 1494.4, "vs_copy": 1.9}),
        ("transposeTiledDynamic", 12,
         {"kernel": "transposeTiledDynamic", "ms": 0.032, "gbps": 1498.7, "vs_copy": 1.89}),
    ]
    assert transcript.scope.tables["failures"] == []
    assert transcript.scope.sections == {}


def test_day13_sm75_build(schemas):
    transcript = parse(schemas, DAY13, "shared_memory.sm_75-build.txt")
    assert [row.values["gbps"] for row in transcript.scope.tables["kernels"]] == [2853.7, 523.4, 1497.5, 1489.8]
    assert [row.values["vs_copy"] for row in transcript.scope.tables["kernels"]] == [1.0, 5.45, 1.91, 1.92]
    assert transcript.scope.values["elements"] == 6011003


def test_day13_without_the_optional_last_line(schemas):
    text = seed("shared_memory.txt").replace("all four kernels match the CPU reference at 6011003 elements\n", "")
    transcript = parse(schemas, DAY13, "shared_memory.txt", text)
    assert transcript.scope.values["elements"] is None
    assert "elements" not in transcript.scope.lines
    assert transcript.line_count == 19


def test_failure_lines_are_collected_from_anywhere(schemas):
    failure = "FAILED transposeNaive: first wrong element at (7, 3): got 1.5, want 2.5\n"
    text = seed("shared_memory.txt").replace("Matrix:", failure + "Matrix:")
    transcript = parse(schemas, DAY13, "shared_memory.txt", text)
    assert rows(transcript.scope, "failures") == [
        ("0", 2, {"kernel": "transposeNaive", "element": "(7, 3)", "got": "1.5", "want": "2.5"})]
    assert transcript.scope.tables["kernels"][0].line == 10


# --- day 14: __syncthreads --------------------------------------------------------


SYNCED = {"mismatches": 0, "first_bad": None, "read_warp": None, "wrote_warp": None}


def test_day14_syncthreads(schemas):
    transcript = parse(schemas, DAY14, "syncthreads.txt")
    assert transcript.line_count == 19
    assert transcript.scope.values == {
        "gpu": "NVIDIA H200", "cc": "9.0", "n": 262755, "block_sizes": 4,
        "prefix_threads": 256, "prefix_reach": 96, "prefix_returned": True,
        "prefix_bad": 0, "prefix_n": 262755, "all_gated_matched": True,
    }
    assert rows(transcript.scope, "blocks") == [
        ("32/reverseTileRacy", 6, {"block": 32, "kernel": "reverseTileRacy", **SYNCED}),
        ("32/reverseTileSynced", 7, {"block": 32, "kernel": "reverseTileSynced", **SYNCED}),
        ("64/reverseTileRacy", 8, {"block": 64, "kernel": "reverseTileRacy",
                                   "mismatches": 98307, "first_bad": 32, "read_warp": 1, "wrote_warp": 0}),
        ("64/reverseTileSynced", 9, {"block": 64, "kernel": "reverseTileSynced", **SYNCED}),
        ("128/reverseTileRacy", 10, {"block": 128, "kernel": "reverseTileRacy",
                                     "mismatches": 98883, "first_bad": 192, "read_warp": 2, "wrote_warp": 1}),
        ("128/reverseTileSynced", 11, {"block": 128, "kernel": "reverseTileSynced", **SYNCED}),
        ("256/reverseTileRacy", 12, {"block": 256, "kernel": "reverseTileRacy",
                                     "mismatches": 95520, "first_bad": 96, "read_warp": 3, "wrote_warp": 4}),
        ("256/reverseTileSynced", 13, {"block": 256, "kernel": "reverseTileSynced", **SYNCED}),
    ]


def test_day14_racecheck_run_interleaved_with_the_tool_parses_where_the_schema_ignores_its_lines(schemas):
    # A run under compute-sanitizer without --log-file interleaves the tool's lines with the program's.
    # coursectl's passes log to a file, so by default every line of stdout is the program's own.
    text = seed("syncthreads.racecheck.txt")
    assert text.splitlines()[0] == "========= COMPUTE-SANITIZER"
    with pytest.raises(TranscriptError) as info:
        parse(schemas, DAY14, "syncthreads.racecheck.txt", text)
    assert "syncthreads.racecheck.txt:1:" in str(info.value) and "found '========= COMPUTE-SANITIZER'" in str(info.value)
    ignoring = schemas[DAY14].model_copy(update={"ignore": ["^========= "]})
    ignoring = OutputSchema.model_validate(ignoring.model_dump(exclude_unset=True))
    transcript = parse_transcript(ignoring, text, "syncthreads.racecheck.txt")
    assert transcript.line_count == 33
    assert transcript.scope.lines["gpu"] == 14
    assert transcript.scope.lines["all_gated_matched"] == 32
    assert [(row.key, row.line, row.values["mismatches"], row.values["first_bad"])
            for row in transcript.scope.tables["blocks"]] == [
        ("32/reverseTileRacy", 19, 0, None),
        ("32/reverseTileSynced", 20, 0, None),
        ("64/reverseTileRacy", 21, 0, None),
        ("64/reverseTileSynced", 22, 0, None),
        ("128/reverseTileRacy", 23, 20000, 2240),
        ("128/reverseTileSynced", 24, 0, None),
        ("256/reverseTileRacy", 25, 42496, 32),
        ("256/reverseTileSynced", 26, 0, None),
    ]


def test_lines_that_look_like_the_sanitizers_are_the_programs_unless_the_schema_ignores_them():
    text = "========= COMPUTE-SANITIZER\nn = 3\n========= ERROR SUMMARY: 0 errors\n"
    default = OutputSchema.model_validate({"items": [{"line": "n = {n:int}"}]})
    with pytest.raises(TranscriptError) as info:
        parse_transcript(default, text, "run.txt")
    assert str(info.value) == "run.txt:1: expected a line matching 'n = {n:int}'; found '========= COMPUTE-SANITIZER'"
    ignoring = OutputSchema.model_validate({"ignore": ["^========= "], "items": [{"line": "n = {n:int}"}]})
    assert parse_transcript(ignoring, text).scope.values == {"n": 3}
    # A program line the tool's prefix starts is judged as any other: a table row it hid is seen.
    rows = OutputSchema.model_validate({"items": [{"table": "t", "header": "k v", "row": "{k:word} {v:int}"}]})
    assert [row.values["v"] for row in parse_transcript(rows, "k v\n=========x 5\n").scope.tables["t"]] == [5]


def test_day14_sm75_build(schemas):
    transcript = parse(schemas, DAY14, "syncthreads.sm_75-build.txt")
    racy = {row.key: row.values["mismatches"] for row in transcript.scope.tables["blocks"]
            if row.values["kernel"] == "reverseTileRacy"}
    assert racy == {"32/reverseTileRacy": 0, "64/reverseTileRacy": 98563,
                    "128/reverseTileRacy": 100675, "256/reverseTileRacy": 93792}


def test_day14_without_the_optional_flag_lines(schemas):
    text = (seed("syncthreads.txt")
            .replace("  the launch returned, so the barrier did not deadlock\n", "")
            .replace("every gated kernel matched its reference\n", ""))
    transcript = parse(schemas, DAY14, "syncthreads.txt", text)
    assert transcript.scope.values["prefix_returned"] is False
    assert transcript.scope.values["all_gated_matched"] is False
    assert transcript.scope.values["prefix_bad"] == 0


# --- day 16: tiled matmul ---------------------------------------------------------


def test_day16_tiled_matmul(schemas):
    transcript = parse(schemas, DAY16, "tiled_matmul.txt")
    assert transcript.line_count == 16
    assert transcript.scope.values == {
        "gpu": "NVIDIA H200", "cc": "9.0", "tile": 16, "tile_cols": 16, "threads": 256,
        "smem_bytes": 2048, "cases_matched": 3,
    }
    assert rows(transcript.scope, "cases") == [
        ("256x256x256/naive", 6, {"case": "256x256x256", "kernel": "naive", "ms": 0.025, "gflops": 1344.0, "loads": 512}),
        ("256x256x256/tiled", 7, {"case": "256x256x256", "kernel": "tiled", "ms": 0.01, "gflops": 3350.1, "loads": 32}),
        ("512x512x512/naive", 9, {"case": "512x512x512", "kernel": "naive", "ms": 0.062, "gflops": 4297.0, "loads": 1024}),
        ("512x512x512/tiled", 10, {"case": "512x512x512", "kernel": "tiled", "ms": 0.041, "gflops": 6608.3, "loads": 64}),
        ("611x613x617/naive", 12, {"case": "611x613x617", "kernel": "naive", "ms": 0.113, "gflops": 4088.6, "loads": 1234}),
        ("611x613x617/tiled", 13, {"case": "611x613x617", "kernel": "tiled", "ms": 0.07, "gflops": 6589.1, "loads": 78}),
    ]
    assert rows(transcript.scope, "speedups") == [
        ("256x256x256", 8, {"speedup": 2.49, "fewer_loads": 16.0}),
        ("512x512x512", 11, {"speedup": 1.54, "fewer_loads": 16.0}),
        ("611x613x617", 14, {"speedup": 1.61, "fewer_loads": 15.8}),
    ]


def test_day16_memcheck_run_with_the_tools_lines_ignored(schemas):
    ignoring = OutputSchema.model_validate({**schemas[DAY16].model_dump(exclude_unset=True), "ignore": ["^========= "]})
    transcript = parse_transcript(ignoring, seed("tiled_matmul.memcheck.txt"), "tiled_matmul.memcheck.txt")
    assert transcript.line_count == 18
    assert transcript.scope.lines["gpu"] == 2
    assert transcript.scope.values["cases_matched"] == 3
    assert [row.values["ms"] for row in transcript.scope.tables["cases"]] == [
        1.751, 0.772, 15.325, 5.739, 28.83, 9.985]
    assert [(row.key, row.values["speedup"]) for row in transcript.scope.tables["speedups"]] == [
        ("256x256x256", 2.27), ("512x512x512", 2.67), ("611x613x617", 2.89)]


def test_day16_sm75_build(schemas):
    transcript = parse(schemas, DAY16, "tiled_matmul.sm_75-build.txt")
    assert [(row.key, row.values["speedup"]) for row in transcript.scope.tables["speedups"]] == [
        ("256x256x256", 2.48), ("512x512x512", 1.54), ("611x613x617", 1.64)]


# --- day 71: FP16 -----------------------------------------------------------------


def test_day71_matmul_fp16(schemas):
    transcript = parse(schemas, DAY71, "matmul_fp16.txt")
    scope = transcript.scope
    assert transcript.line_count == 44
    assert scope.values == {
        "gpu": "NVIDIA H200", "cc": "9.0", "support_cc": "9.0",
        "half_max": 65504.0, "half_65520_isinf": 1, "half_300k": "inf", "half_300k_isinf": 1,
        "bf16_300k": 299008.0, "half_near_one": 1.0009765625, "bf16_near_one": 1.0,
        "cases_passed": 3,
    }
    assert rows(transcript.scope, "tensor_cores") == [
        ("FP16 (mma.sync.m16n8k8)", 4, {"format": "FP16 (mma.sync.m16n8k8)", "support": "yes"}),
        ("BF16 (mma, sm_80)", 5, {"format": "BF16 (mma, sm_80)", "support": "yes"}),
        ("TF32 (mma, sm_80)", 6, {"format": "TF32 (mma, sm_80)", "support": "yes"}),
        ("FP8 E4M3/E5M2 (mma, sm_89)", 7, {"format": "FP8 E4M3/E5M2 (mma, sm_89)", "support": "yes"}),
        ("FP4 E2M1 (mma, sm_120a)", 8, {"format": "FP4 E2M1 (mma, sm_120a)", "support": "no on this card"}),
    ]
    cases = scope.sections["cases"]
    assert [(block.key, block.line) for block in cases] == [
        ("256x256x256", 17), ("1024x1024x1024", 26), ("2048x2048x2048", 35)]
    last = cases[2].scope
    assert last.values == {
        "case": "2048x2048x2048", "max_ref": 16.9878,
        "f32_atol": 3.666e-04, "f32_rtol": 2.158e-05, "f16_atol": 3.003, "f16_rtol": 1.768e-01,
        "ratio_k": 2048, "error_ratio": 252.0,
    }
    assert rows(cases[2].scope, "kernels") == [
        ("matmulTiledF32", 39, {"kernel": "matmulTiledF32", "max_abs_err": 7.610e-05,
                                "gate_frac": 0.1952, "ms": 2.1097, "vs_f32": 1.0}),
        ("matmulF16StoreF32Acc", 40, {"kernel": "matmulF16StoreF32Acc", "max_abs_err": 2.016e-03,
                                      "gate_frac": 0.0004, "ms": 1.9174, "vs_f32": 1.1}),
        ("matmulF16StoreF16Acc", 41, {"kernel": "matmulF16StoreF16Acc", "max_abs_err": 5.078e-01,
                                      "gate_frac": 0.1467, "ms": 1.8526, "vs_f32": 1.14}),
    ]
    assert [block.scope.values["error_ratio"] for block in cases] == [11.4, 51.3, 252.0]
    assert [block.scope.lines["ratio_k"] for block in cases] == [24, 33, 42]
    assert scope.tables["failures"] == []


def test_day71_sm75_build(schemas):
    transcript = parse(schemas, DAY71, "matmul_fp16.sm_75-build.txt")
    first = transcript.scope.sections["cases"][0].scope
    assert [row.values["ms"] for row in first.tables["kernels"]] == [0.0099, 0.0093, 0.0089]
    assert [row.values["vs_f32"] for row in first.tables["kernels"]] == [1.0, 1.07, 1.12]


def test_day71_cases_may_come_in_any_order(schemas):
    lines = seed("matmul_fp16.txt").splitlines(keepends=True)
    swapped = "".join(lines[:16] + lines[25:34] + lines[16:25] + lines[34:])
    transcript = parse(schemas, DAY71, "matmul_fp16.txt", swapped)
    assert [(block.key, block.line) for block in transcript.scope.sections["cases"]] == [
        ("1024x1024x1024", 17), ("256x256x256", 26), ("2048x2048x2048", 35)]


# --- broken transcripts -----------------------------------------------------------


def test_shortened_table(schemas):
    error = parse_error(schemas, DAY13, "shared_memory.txt", seed("shared_memory.txt").replace(KERNELS_ROW_NAIVE, ""))
    assert str(error) == "shared_memory.txt:11: table 'kernels' ends after 3 rows; it needs 4"
    assert error.line == 11


def test_table_with_a_row_too_many(schemas):
    text = seed("shared_memory.txt").replace(KERNELS_ROW_NAIVE, KERNELS_ROW_NAIVE * 2)
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:13: table 'kernels' has more than 4 rows; "
                          "found 'transposeTiledDynamic          0.032      1498.7      1.89x'")


def test_table_with_an_unexpected_key(schemas):
    text = seed("shared_memory.txt").replace("transposeNaive ", "transposeNaivX ")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == "shared_memory.txt:10: table 'kernels': missing transposeNaive; unexpected transposeNaivX"


def test_table_repeating_a_key(schemas):
    text = seed("tiled_matmul.txt").replace("512x512x512      tiled ", "512x512x512      naive ")
    error = parse_error(schemas, DAY16, "tiled_matmul.txt", text)
    assert str(error) == "tiled_matmul.txt:10: table 'cases' repeats key '512x512x512/naive' (first at line 9)"


def test_missing_required_line(schemas):
    text = seed("shared_memory.txt").replace("Tile: 32 x 32 floats, 4096 bytes per block\n", "")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:6: expected a line matching "
                          "'Tile: {tile:int} x {tile_cols:int} floats, {tile_bytes:int} bytes per block'; "
                          "found 'kernel                     time (ms)        GB/s    vs copy'")


def test_malformed_line(schemas):
    text = seed("shared_memory.txt").replace("22.9 MiB", "2x.9 MiB")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:2: expected a line matching "
                          "'Matrix: {rows:int} x {cols:int} floats, {buffer_mib:float} MiB per buffer'; "
                          "found 'Matrix: 2003 x 3001 floats, 2x.9 MiB per buffer'")


def test_malformed_table_row(schemas):
    text = seed("shared_memory.txt").replace("2839.7", "28#9.7")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:9: table 'kernels' has 0 of its 4 rows and this line is not a row "
                          "(<kernel:word> <ms:float> <gbps:float> <vs_copy:float>); "
                          "found 'copyRowMajor                   0.017      28#9.7      1.00x'")


def test_extra_line_at_the_end(schemas):
    error = parse_error(schemas, DAY13, "shared_memory.txt", seed("shared_memory.txt") + "Segmentation fault\n")
    assert str(error) == "shared_memory.txt:21: unexpected line after the last item of the schema; found 'Segmentation fault'"


def test_free_text_longer_than_allowed(schemas):
    text = seed("shared_memory.txt").replace(
        "no row can win by doing less work.\n", "no row can win by doing less work.\nAnd a third line.\n")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:17: free text 'why no row can win by doing less work' "
                          "runs past its 2 lines; found 'And a third line.'")


def test_binary_output(schemas):
    text = seed("shared_memory.txt").replace("2839.7", "28\x009.7")
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == "shared_memory.txt:9: binary output (a NUL byte) where text was expected"


def test_decode_output_replaces_bytes_that_are_not_utf8():
    assert decode_output(b"n = 3\xff\n") == "n = 3\ufffd\n"


def test_output_cut_inside_a_table(schemas):
    text = "".join(seed("shared_memory.txt").splitlines(keepends=True)[:10])
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == "shared_memory.txt:10: table 'kernels' ends after 2 rows; it needs 4"


def test_output_cut_inside_a_line(schemas):
    text = seed("shared_memory.txt")
    text = text[: text.index("transposeTiledStatic") + len("transposeTiled")]
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:11: table 'kernels' has 2 of its 4 rows and this line is not a row "
                          "(<kernel:word> <ms:float> <gbps:float> <vs_copy:float>); found 'transposeTiled'")


def test_output_cut_after_the_prose(schemas):
    text = "".join(seed("shared_memory.txt").splitlines(keepends=True)[:17])
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:17: expected a line matching "
                          "'{probe_bytes:int} bytes of dynamic shared memory, no opt-in: {before_optin}'; "
                          "the transcript ends at line 17")


def test_output_cut_inside_a_section(schemas):
    text = "".join(seed("matmul_fp16.txt").splitlines(keepends=True)[:30])
    error = parse_error(schemas, DAY71, "matmul_fp16.txt", text)
    assert str(error) == "matmul_fp16.txt:30: table 'kernels' ends after 1 row; it needs 3"


def test_output_cut_between_sections(schemas):
    text = "".join(seed("matmul_fp16.txt").splitlines(keepends=True)[:34])
    error = parse_error(schemas, DAY71, "matmul_fp16.txt", text)
    assert str(error) == ("matmul_fp16.txt:34: expected section 'cases' (2 of at least 3) starting with "
                          "'case {case:word}, max |reference| = {max_ref:float}'; the transcript ends at line 34")


def test_section_missing(schemas):
    lines = seed("matmul_fp16.txt").splitlines(keepends=True)
    error = parse_error(schemas, DAY71, "matmul_fp16.txt", "".join(lines[:25] + lines[34:]))
    assert str(error) == ("matmul_fp16.txt:35: expected section 'cases' (2 of at least 3) starting with "
                          "'case {case:word}, max |reference| = {max_ref:float}'; "
                          "found 'all 3 cases passed their gates'")


def test_reordered_lines(schemas):
    lines = seed("shared_memory.txt").splitlines(keepends=True)
    error = parse_error(schemas, DAY13, "shared_memory.txt", "".join(lines[:2] + [lines[3], lines[2]] + lines[4:]))
    assert str(error) == ("shared_memory.txt:3: expected a line matching "
                          "'Shared memory per block: {smem_default:int} bytes default, {smem_optin:int} bytes opt-in'; "
                          "found 'Shared memory per SM:    233472 bytes'")


def test_reordered_blocks(schemas):
    lines = seed("matmul_fp16.txt").splitlines(keepends=True)
    # the FP16 facts (lines 10-16) moved above the tensor-core table (lines 3-9)
    error = parse_error(schemas, DAY71, "matmul_fp16.txt", "".join(lines[:2] + lines[9:16] + lines[2:9] + lines[16:]))
    assert str(error) == ("matmul_fp16.txt:3: expected a line matching "
                          "'tensor-core format support at compute capability {support_cc:word}:'; "
                          "found 'largest finite __half:            65504.0'")


def test_free_text_ending_a_section_stops_at_the_next_item():
    schema = OutputSchema.model_validate({"items": [
        {"section": "cases", "key": "case", "items": [{"line": "case {case:word}"}, {"text": "notes"}]},
        {"line": "done {n:int}"},
    ]})
    transcript = parse_transcript(schema, "case a\nsome text\ncase b\nmore text\ndone 3\n")
    assert [block.key for block in transcript.scope.sections["cases"]] == ["a", "b"]
    assert transcript.scope.values == {"n": 3}


# --- flatten ----------------------------------------------------------------------


def test_flatten_day71(schemas):
    flat = list(flatten(schemas[DAY71].items, parse(schemas, DAY71, "matmul_fp16.txt").scope))
    assert len(flat) == 76
    by_path = {f.path: f for f in flat}
    assert len(by_path) == 76
    assert [f.path for f in flat[:8]] == [
        "gpu", "cc", "support_cc",
        "tensor_cores[FP16 (mma.sync.m16n8k8)].support",
        "tensor_cores[BF16 (mma, sm_80)].support",
        "tensor_cores[TF32 (mma, sm_80)].support",
        "tensor_cores[FP8 E4M3/E5M2 (mma, sm_89)].support",
        "tensor_cores[FP4 E2M1 (mma, sm_120a)].support",
    ]
    assert flat[-1].path == "cases_passed"
    ms = by_path["cases[2048x2048x2048].kernels[matmulTiledF32].ms"]
    assert (ms.value, ms.line, ms.spec.compare, ms.spec.rel, ms.spec.abs) == (2.1097, 39, Compare.tolerance, 0.25, 0.003)
    err = by_path["cases[2048x2048x2048].kernels[matmulF16StoreF16Acc].max_abs_err"]
    assert (err.value, err.line, err.spec.compare) == (0.5078, 41, Compare.device)
    ratio = by_path["cases[256x256x256].error_ratio"]
    assert (ratio.value, ratio.line, ratio.spec.compare) == (11.4, 24, Compare.device)
    case = by_path["cases[1024x1024x1024].case"]
    assert (case.value, case.line, case.spec.compare) == ("1024x1024x1024", 26, Compare.exact)
    support = by_path["tensor_cores[FP4 E2M1 (mma, sm_120a)].support"]
    assert (support.value, support.line, support.spec.compare) == ("no on this card", 8, Compare.device)
    # key columns name the row; they are not fields of their own
    assert "cases[2048x2048x2048].kernels[matmulTiledF32].kernel" not in by_path
    assert "tensor_cores[FP16 (mma.sync.m16n8k8)].format" not in by_path
    assert sum(1 for path in by_path if path.startswith("cases[")) == 3 * (6 + 2 + 3 * 4)


def test_flatten_day16_notes_and_day14_flags(schemas):
    flat16 = {f.path: f for f in flatten(schemas[DAY16].items, parse(schemas, DAY16, "tiled_matmul.txt").scope)}
    assert len(flat16) == 7 + 6 * 3 + 3 * 2
    assert flat16["cases[611x613x617/tiled].loads"].value == 78
    speedup = flat16["speedups[611x613x617].speedup"]
    assert (speedup.value, speedup.line, speedup.spec.compare, speedup.spec.rel) == (1.61, 14, Compare.tolerance, 0.3)
    assert flat16["speedups[611x613x617].fewer_loads"].spec.compare is Compare.exact

    flat14 = {f.path: f for f in flatten(schemas[DAY14].items, parse(schemas, DAY14, "syncthreads.txt").scope)}
    assert len(flat14) == 10 + 8 * 4
    returned = flat14["prefix_returned"]
    assert (returned.value, returned.line, returned.spec.type) == (True, 16, "bool")
    first_bad = flat14["blocks[64/reverseTileRacy].first_bad"]
    assert (first_bad.value, first_bad.line, first_bad.spec.compare) == (32, 8, Compare.volatile)
    assert flat14["blocks[64/reverseTileSynced].first_bad"].value is None


# --- hostile output: bounded work, bounded quotes -------------------------------------
MIB16 = 16 * 1024 * 1024
GPU_TEMPLATE = "GPU: {gpu} (compute capability {cc:word})"


@pytest.mark.parametrize("breaks, lines", [("\n", MIB16), ("\r", MIB16), ("\r\n", MIB16 // 2),
                                           (" \t\n", MIB16 // 3)], ids=["newlines", "returns", "crlf", "spaces"])
def test_megabytes_of_blank_lines_end_the_transcript_where_they_end(schemas, breaks, lines):
    """A run of blank lines is one entry for the parser: linear, and the line numbers stay those of splitlines()."""
    text = breaks * (MIB16 // len(breaks))
    assert len(text.splitlines()) == lines
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == (f"shared_memory.txt:{lines}: expected a line matching {GPU_TEMPLATE!r}; "
                          f"the transcript ends at line {lines}")


def test_blank_lines_after_a_whole_transcript(schemas):
    text = seed("shared_memory.txt") + "\r\n \n\t\r" * 100_000
    transcript = parse(schemas, DAY13, "shared_memory.txt", text)
    assert transcript.line_count == len(text.splitlines()) == 20 + 300_000
    assert transcript.scope.values["moved_mib"] == parse(schemas, DAY13, "shared_memory.txt").scope.values["moved_mib"]


def test_line_numbers_count_every_kind_of_line_break(schemas):
    text = "\n\r\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029  \n\tgarbage\n"
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert text.splitlines().index("\tgarbage") + 1 == 13
    assert str(error) == f"shared_memory.txt:13: expected a line matching {GPU_TEMPLATE!r}; found 'garbage'"


@pytest.mark.parametrize("tail", ["", "\n"], ids=["no-newline", "newline"])
def test_a_16_mib_line_is_quoted_by_its_first_200_characters(schemas, tail):
    text = "x" * MIB16 + tail
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == (f"shared_memory.txt:1: expected a line matching {GPU_TEMPLATE!r}; found "
                          f"'{'x' * 200}'… ({MIB16:,} characters)")


def test_a_long_line_after_a_whole_transcript_is_quoted_short(schemas):
    text = seed("shared_memory.txt") + "y" * 1_000_000
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:21: unexpected line after the last item of the schema; found "
                          f"'{'y' * 200}'… (1,000,000 characters)")


def test_output_that_goes_on_past_the_line_limit_is_not_parsed_further(schemas, monkeypatch):
    """Rows of an `anywhere` table are taken wherever they stand, so every line of them is parsed, up to a limit.

    The limit is 100,000 lines; the test lowers it to 2,000, which parses the same way in a fiftieth of the time.
    """
    assert lines_module.MAX_LINES == 100_000
    monkeypatch.setattr(lines_module, "MAX_LINES", 2_000)
    row = "FAILED copy: first wrong element at 1: got 2, want 3\n"
    text = seed("shared_memory.txt") + row * 4_000
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error) == ("shared_memory.txt:2001: the output goes on past line 2,000, longer than any "
                          "transcript; it is not parsed further; found "
                          "'FAILED copy: first wrong element at 1: got 2, want 3'")


def test_a_schema_that_ignores_blank_lines_still_sees_each_of_them(schemas):
    """An ignore pattern that takes blank lines lets a table run across them: blank lines are not collapsed then."""
    schema = schemas[DAY13]
    written = real_lessons()[DAY13]
    ignoring = OutputSchema.model_validate({**written["output"], "ignore": [r"^\s*$", "^========= "]})
    text = seed("shared_memory.txt").replace("copyRowMajor ", "\n\n  \ncopyRowMajor ")
    with pytest.raises(TranscriptError):
        parse_transcript(schema, text, "shared_memory.txt")
    transcript = parse_transcript(ignoring, text, "shared_memory.txt")
    assert [row.line for row in transcript.scope.tables["kernels"]] == [12, 13, 14, 15]



def _outcome(schema: OutputSchema, text: str):
    """The parse or its error, and the lines the parser is given: numbered, blank runs collapsed, rows set aside."""
    parser = transcript_module._Parser(schema, text, "t.txt")
    lines = lines_module.Lines(parser, text)
    read = (lines.total(), lines.taken, parser.anywhere_rows)
    try:
        return parse_transcript(schema, text, "t.txt").model_dump(), read
    except TranscriptError as exc:
        return (str(exc), exc.line), read


@pytest.mark.parametrize("seed_name", [0, 1, 2, 3])
def test_a_text_split_at_once_parses_as_the_same_text_read_line_by_line(schemas, monkeypatch, seed_name):
    """A text up to SPLIT_AT_ONCE is split into its lines in one call: on 300 texts of the seed's lines, blank
    lines, whitespace and every kind of line break, each parse (or its error, and its line) is the one of the
    text read a line at a time, with blank lines collapsed and, where an ignore pattern takes them, not."""
    import random
    chance = random.Random(seed_name)
    lines = seed("shared_memory.txt").splitlines()
    breaks = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
    written = real_lessons()[DAY13]
    kept = [schemas[DAY13], OutputSchema.model_validate({**written["output"], "ignore": [r"^\s*$", "^========= "]})]
    differed = 0
    for _ in range(300):
        parts = []
        for line in lines:
            if chance.random() < 0.2:
                parts.append(chance.choice(["", " ", "\t", "  \t"]) + chance.choice(breaks))
            parts.append(line + (chance.choice(breaks) if chance.random() < 0.3 else "\n"))
        text = "".join(parts)
        if chance.random() < 0.3:
            text = text.rstrip("\n") + chance.choice(["", " ", "\n \n", "\t"])
        for schema in kept:
            monkeypatch.setattr(lines_module, "SPLIT_AT_ONCE", 1 << 18)
            split = _outcome(schema, text)
            monkeypatch.setattr(lines_module, "SPLIT_AT_ONCE", -1)
            one_by_one = _outcome(schema, text)
            assert split == one_by_one, repr(text)
            differed += isinstance(split[0], tuple)
    assert 0 < differed < 600, "the texts should give parses and errors both"

# -- a number too long to read --------------------------------------------------------------------
TOO_LONG = ("the number here has 5,000 digits, too long to read: Python converts at most 4,300 digits to an int")


def test_a_row_holding_a_5000_digit_number_says_the_number_is_too_long(schemas):
    """Python converts at most 4,300 digits to an int (sys.set_int_max_str_digits): the row is a row, its number is
    too long, and the message says so, not that the line is no row."""
    row = "256x256x256      tiled         0.010      3350.1            32"
    text = seed("tiled_matmul.txt").replace(row, row[:-2] + "3" * 5000)
    error = parse_error(schemas, DAY16, "tiled_matmul.txt", text)
    assert str(error) == f"tiled_matmul.txt:7: {TOO_LONG}; found '{(row[:-2] + '3' * 5000)[:200]}'… (5,060 characters)"


def test_a_line_holding_a_5000_digit_number_says_the_number_is_too_long(schemas):
    text = seed("tiled_matmul.txt").replace("tile 16 x 16,", "tile " + "1" * 5000 + " x 16,")
    error = parse_error(schemas, DAY16, "tiled_matmul.txt", text)
    assert str(error).startswith(f"tiled_matmul.txt:2: {TOO_LONG}; found 'tile 1111")


def test_the_longest_number_python_reads_is_read(schemas):
    text = seed("tiled_matmul.txt").replace("tile 16 x 16,", "tile " + "1" * 4300 + " x 16,")
    transcript = parse(schemas, DAY16, "tiled_matmul.txt", text)
    assert len(str(transcript.scope.values["tile"])) == 4300


def test_a_long_number_in_free_text_is_no_error(schemas):
    """Only a number a field reads is converted: one in text that matches no field is text."""
    text = seed("shared_memory.txt") + "9" * 5000 + "\n"
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert str(error).startswith("shared_memory.txt:21: unexpected line after the last item of the schema; found '999")


# --- patterns that backtrack without end: every match is bounded in time ---------------
# lessons.yaml with one pattern of each kind; each test makes one of them one that backtracks.
SLOW = """\
version: 1
lessons:
  - id: slow
    day: 1
    title: Slow patterns
    source: slow.cu
    output:
      ignore: ['^========= ', 'IGNORE']
      items:
        - line: 'LINE'
          regex: true
        - table: values
          row: 'ROW'
          row_regex: true
        - {text: the rest}
        - table: lists
          anywhere: true
          row: '{a}, {b}, {c}, {d}!'
"""
FAST = {"IGNORE": "^#", "LINE": r"n = (?P<n>\d+)", "ROW": r"(?P<name>[a-z]+) +(?P<value>\d+)"}
# Each of these tries every way of cutting a line into pieces of one and two characters.
BACKTRACKING = {"IGNORE": "^(?:.|..)+[.;]$", "LINE": "n = (?P<n>(?:.|..)+)[.;]",
                "ROW": "(?P<name>[a-z]+) (?P<value>(?:.|..)+)[.;]"}
SLOW_TEXT = f"n = {'7' * 60}\nalpha {'1' * 60}\n"


def slow_schema(tmp_path, slow: str = "") -> tuple[Path, OutputSchema]:
    """SLOW's lesson, loaded from tmp_path/lessons.yaml, with the pattern `slow` names backtracking."""
    text = SLOW
    for name, fast in FAST.items():
        text = text.replace(name, BACKTRACKING[name] if name == slow else fast)
    (tmp_path / "slow.cu").write_text("int main() {}\n")
    path = tmp_path / "lessons.yaml"
    path.write_text(text)
    return path, load_manifest(path).lesson("slow").output


def test_the_slow_schema_parses_when_its_patterns_are_fast(tmp_path):
    _, schema = slow_schema(tmp_path)
    transcript = parse_transcript(schema, SLOW_TEXT, "slow.txt")
    assert transcript.scope.values == {"n": "7" * 60}
    assert rows(transcript.scope, "values") == [("0", 2, {"name": "alpha", "value": "1" * 60})]


@pytest.mark.parametrize("slow, line, item, where", [
    ("IGNORE", 1, 8, "output.ignore[1]"), ("LINE", 1, 10, "output.items[0].line"),
    ("ROW", 2, 13, "output.items[1].row")], ids=["ignore", "line", "row"])
def test_a_regex_that_backtracks_without_end_is_stopped_naming_it_and_the_line(tmp_path, monkeypatch, slow, line,
                                                                                item, where):
    """`re` cannot stop a match: `(a|aa)+$` on a line of 60 characters would run for years. `regex` takes a timeout."""
    monkeypatch.setattr(patterns_module, "LINE_SECONDS", 0.2)
    path, schema = slow_schema(tmp_path, slow)
    started = time.monotonic()
    with pytest.raises(TranscriptError) as info:
        parse_transcript(schema, SLOW_TEXT, "slow.txt")
    assert time.monotonic() - started < 5   # stopped by its bound (0.2 s a line), not years later; room for a loaded machine
    found = SLOW_TEXT.splitlines()[line - 1]
    assert str(info.value) == (
        f"slow.txt:{line}: the pattern of {path}:{item} ({where} {BACKTRACKING[slow]!r}) took longer than 0.2 s on "
        "this line, so the transcript was not parsed further; a regex that can match a text in very many ways, as "
        f"(a|aa)+$ can, backtracks without end: write it so that it cannot; found {found!r}")
    assert info.value.item == (tuple(int(p) if p.isdigit() else p for p in re.findall(r"\w+", where)[1:]),
                               "the pattern that ran out of time")


def test_a_template_that_splits_a_long_line_too_many_ways_is_stopped(tmp_path, monkeypatch):
    """Four `str` fields split a line of 3,001 characters in billions of ways: 0.06 s at 300, hours at 3,000."""
    monkeypatch.setattr(patterns_module, "LINE_SECONDS", 0.2)
    path, schema = slow_schema(tmp_path)
    line = "a, " * 1000 + "z"
    with pytest.raises(TranscriptError) as info:
        parse_transcript(schema, SLOW_TEXT + line, "slow.txt")
    assert str(info.value) == (
        f"slow.txt:3: the pattern of {path}:18 (output.items[3].row '{{a}}, {{b}}, {{c}}, {{d}}!') took longer than "
        "0.2 s on this line, so the transcript was not parsed further; a template whose fields of type str can split "
        "a line in very many ways is slow on a long one: give them narrower types (int, float, word); found "
        f"'{line[:200]}'… (3,001 characters)")


def test_the_matches_of_one_transcript_are_bounded_in_all(tmp_path, monkeypatch):
    """Lines each well inside the bound of one line still add up: the transcript's matches stop at their own bound."""
    monkeypatch.setattr(patterns_module, "TRANSCRIPT_SECONDS", 0.5)
    path, schema = slow_schema(tmp_path)
    line = "a, " * 100 + "z"       # about 0.06 s each
    started = time.monotonic()
    with pytest.raises(TranscriptError) as info:
        parse_transcript(schema, SLOW_TEXT + f"{line}\n" * 1000, "slow.txt")
    assert time.monotonic() - started < 5   # stopped by the bound of 0.5 s in all; room for a loaded machine
    assert re.fullmatch(
        r"slow\.txt:(\d+): matching the transcript took longer than 0\.5 s in all, so it was not parsed past this "
        + re.escape(f"line; the pattern of {path}:18 (output.items[3].row '{{a}}, {{b}}, {{c}}, {{d}}!') took ")
        + r"0\.\d s of it; "
        + re.escape("a template whose fields of type str can split a line in very many ways is slow on a long one: "
                    f"give them narrower types (int, float, word); found '{line[:200]}'… (301 characters)"),
        str(info.value))
    assert (patterns_module.LINE_SECONDS, patterns_module.MatchBudget().total) == (1.0, 0.5)


def test_the_flat_fields_are_what_validating_them_would_make(schemas):
    """flatten makes each Flat without validating it again: every one equals the Flat validated from its own
    fields, value types included (day 14's flag is 1, as validating made it)."""
    for lesson, name in ((DAY13, "shared_memory.txt"), (DAY14, "syncthreads.txt"), (DAY16, "tiled_matmul.txt"),
                         (DAY71, "matmul_fp16.txt")):
        flats = list(flatten(schemas[lesson].items, parse(schemas, lesson, name).scope))
        assert flats, lesson
        for flat in flats:
            again = Flat(path=flat.path, value=flat.value, spec=flat.spec, line=flat.line)
            assert (again == flat and type(again.value) is type(flat.value)
                    and again.model_dump_json() == flat.model_dump_json()), flat.path


def _voluntary_switches() -> int:
    with open("/proc/thread-self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))


@pytest.mark.skipif(not Path("/proc/thread-self/status").exists(), reason="counts a thread's switches from /proc")
def test_a_parse_keeps_the_interpreter_beside_a_busy_thread(schemas):
    """The patterns match holding the interpreter's lock: a thread that wants it all the while does not take it
    at every line (`regex` lets go of it unless told not to, and this thread then waits to get it back)."""
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            pass

    text = seed("shared_memory.txt")
    other = threading.Thread(target=busy)
    other.start()
    try:
        time.sleep(0.01)   # the other thread is running
        before = _voluntary_switches()
        for _ in range(50):
            parse_transcript(schemas[DAY13], text, "shared_memory.txt")   # about 15 matches a parse
        switches = _voluntary_switches() - before
    finally:
        stop.set()
        other.join()
    assert switches < 25   # letting go at every match: 79-133 here


def test_the_patterns_found_to_hang_end_at_once(schemas):
    """`^(\\S+\\s*)*!$` over day 16's evidence and `(a+)+$` over forty a's and a '!' never ended under `re`."""
    written = real_lessons()[DAY16]
    for ignore, text, error in [
            (r"^(\S+\s*)*!$", seed("tiled_matmul.txt"), None),
            ("(a+)+$", seed("tiled_matmul.txt") + "a" * 40 + "!\n",
             "tiled_matmul.txt:17: unexpected line after the last item of the schema; found "
             "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!'")]:
        schema = OutputSchema.model_validate({**written["output"], "ignore": [ignore]})
        started = time.monotonic()
        if error is None:
            assert parse_transcript(schema, text, "tiled_matmul.txt").line_count == 16
        else:
            with pytest.raises(TranscriptError) as info:
                parse_transcript(schema, text, "tiled_matmul.txt")
            assert str(info.value) == error
        assert time.monotonic() - started < patterns_module.LINE_SECONDS


@pytest.mark.slow   # waits out a pattern's time bound, on purpose
def test_a_pattern_made_outside_a_manifest_is_named_by_its_text():
    schema = OutputSchema.model_validate({"ignore": ["^(?:.|..)+[.;]$"], "items": [{"line": "n = {n:int}"}]})
    with pytest.raises(TranscriptError) as info:
        parse_transcript(schema, f"n = {'7' * 60}\n", "t.txt")
    assert str(info.value).startswith("t.txt:1: the pattern output.ignore[0] '^(?:.|..)+[.;]$' took longer than 1 s "
                                      "on this line")
    assert info.value.item == (("ignore", 0), "the pattern that ran out of time")


# --- built-in patterns stay linear ------------------------------------------------------
def test_a_long_run_of_dashes_in_a_table_is_judged_at_once(schemas):
    """A rule is `---` among rule characters; as one regex it was cubic: 3,000 dashes and an `x` took 18 s."""
    lines = seed("tiled_matmul.txt").splitlines(keepends=True)
    dashes = "-" * 3000 + "x"
    started = time.monotonic()
    error = parse_error(schemas, DAY16, "tiled_matmul.txt", "".join(lines[:5] + [dashes + "\n"] + lines[5:]))
    assert time.monotonic() - started < 1
    assert str(error) == ("tiled_matmul.txt:6: table 'cases' has 0 of its 6 rows and this line is not a row "
                          "(<case:word> <kernel:word> <ms:float> <gflops:float> <loads:int>); "
                          f"found '{'-' * 200}'… (3,001 characters)")
    assert transcript_module._is_rule("-----  ----- | ===:") and not transcript_module._is_rule("-- --")
    assert parse_error(schemas, DAY16, "tiled_matmul.txt", "".join(lines[:5] + ["-" * 1_000_000 + "x\n"] + lines[5:]))


def test_a_float_of_many_digits_is_judged_at_once(schemas):
    """`\\d+\\.?\\d*` split a run of digits in as many ways as it is long: 40,000 digits took 28 s."""
    digits = "1" * 40_000 + "x"
    text = seed("shared_memory.txt").replace("floats, 22.9 MiB", f"floats, {digits} MiB")
    started = time.monotonic()
    error = parse_error(schemas, DAY13, "shared_memory.txt", text)
    assert time.monotonic() - started < 1
    assert str(error) == ("shared_memory.txt:2: expected a line matching "
                          "'Matrix: {rows:int} x {cols:int} floats, {buffer_mib:float} MiB per buffer'; found "
                          f"'Matrix: 2003 x 3001 floats, {'1' * 172}'… (40,044 characters)")
    float_ = OutputSchema.model_validate({"items": [{"line": "{x:float}"}]})
    assert [parse_transcript(float_, f"{x}\n").scope.values["x"] for x in ("1.", ".5", "1.5e3", "-inf", "7")] == [
        1.0, 0.5, 1500.0, float("-inf"), 7.0]


def test_a_parse_leaves_no_cycle_for_the_collector(schemas):
    """The parser and its lines referred to each other: each parse left 34 objects that only the cycle collector
    could free (45,000 in a 400-lesson verify)."""
    gc.collect()
    gc.disable()
    try:
        parse(schemas, "day13-shared-memory", "shared_memory.txt")
        with pytest.raises(TranscriptError):
            parse(schemas, "day13-shared-memory", "shared_memory.txt", "no such line\n")
        assert gc.collect() == 0
    finally:
        gc.enable()
