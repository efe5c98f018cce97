"""render with the real course and a second GPU's evidence: one Key-figures column per GPU.

A copy of the course (lessons.yaml, lessons/, templates/, README.md and the
H200 evidence) in tmp_path gets fixture evidence for day 16 on a Tesla T4,
written with evidence.write_evidence; the repository's evidence is never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.judge.evidence import load_evidence, write_evidence
from orchestrator.manifest.load import load_manifest
from orchestrator.render.course import render_all

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "tests" / "data" / "course"   # the fixture course (conftest.COURSE)
DAY16 = "day16-tiled-matmul"

T4_ROWS = {  # the H200's line -> the T4's
    "256x256x256      naive         0.025      1354.7": "256x256x256      naive         0.120       279.6",
    "256x256x256      tiled         0.010      3435.7": "256x256x256      tiled         0.060       559.2",
    "tiled is 2.54x faster": "tiled is 2.00x faster",
    "512x512x512      naive         0.063      4274.2": "512x512x512      naive         0.700       383.5",
    "512x512x512      tiled         0.040      6641.8": "512x512x512      tiled         0.420       639.1",
    "tiled is 1.55x faster": "tiled is 1.67x faster",
    "611x613x617      naive         0.113      4078.4": "611x613x617      naive         1.250       368.9",
    "611x613x617      tiled         0.069      6716.6": "611x613x617      tiled         0.760       606.7",
    "tiled is 1.65x faster": "tiled is 1.64x faster",
    "GPU: NVIDIA H200 (compute capability 9.0)": "GPU: Tesla T4 (compute capability 7.5)",
}


@pytest.fixture
def pages(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    for name in ("lessons", "templates", "evidence"):
        shutil.copytree(COURSE / name, root / name)
    for name in ("lessons.yaml", "README.md"):
        shutil.copy(COURSE / name, root / name)
    # The copy's H200 evidence is day 16's of 2026-11-29 (tests/data/h200-2026-11-29), whatever was recorded
    # since, and the T4's is that transcript with its figures changed.
    fixed = (Path(__file__).parent / "data" / "h200-2026-11-29" / "tiled_matmul.txt").read_text()
    h200 = load_evidence(root, DAY16, "nvidia-h200")
    write_evidence(root, h200.meta.model_copy(update={"date": "2026-11-29T10:00:00+00:00"}), fixed,
                   {name: (h200.directory / name).read_bytes() for name in h200.meta.files})
    h200 = load_evidence(root, DAY16, "nvidia-h200")
    transcript = fixed
    for old, new in T4_ROWS.items():
        assert transcript.count(old) == 1, old
        transcript = transcript.replace(old, new)
    meta = h200.meta.model_copy(update={
        "date": "2026-12-01T10:00:00+00:00", "gpu_name": "Tesla T4", "gpu_slug": "tesla-t4",
        "compute_capability": "7.5", "arch": "sm_75", "driver_version": "570.86.15", "cuda_version": "12.8",
        "peak_gbps": 320.1, "peak_fp32_gflops": 8140.8, "sm_count": 40, "max_sm_clock_mhz": 1590})
    extra = {name: (h200.directory / name).read_bytes() for name in h200.meta.files}
    write_evidence(root, meta, transcript, extra)
    return {page.name: page.new for page in render_all(load_manifest(root / "lessons.yaml"))}


KEY_FIGURES = """\
## Key figures

| case / kernel | time (ms), NVIDIA H200 | time (ms), Tesla T4 | throughput (GFLOP/s), NVIDIA H200 | throughput (GFLOP/s), Tesla T4 |
| --- | ---: | ---: | ---: | ---: |
| 256x256x256 / naive | 0.025 | 0.120 | 1354.7 (2%) | 279.6 (3%) |
| 256x256x256 / tiled | 0.010 | 0.060 | 3435.7 (5%) | 559.2 (7%) |
| 512x512x512 / naive | 0.063 | 0.700 | 4274.2 (6%) | 383.5 (5%) |
| 512x512x512 / tiled | 0.040 | 0.420 | 6641.8 (10%) | 639.1 (8%) |
| 611x613x617 / naive | 0.113 | 1.250 | 4078.4 (6%) | 368.9 (5%) |
| 611x613x617 / tiled | 0.069 | 0.760 | 6716.6 (10%) | 606.7 (7%) |

Percentages are of NVIDIA H200's peak: 66908.2 GFLOP/s of FP32, as recorded with its evidence.

Percentages are of Tesla T4's peak: 8140.8 GFLOP/s of FP32, as recorded with its evidence.

```mermaid
"""


def test_key_figures_have_a_column_per_gpu(pages):
    page = pages[f"lessons/{DAY16}/README.md"]
    start = page.index("## Key figures")
    assert page[start:page.index("```mermaid", start) + len("```mermaid\n")] == KEY_FIGURES


def test_each_gpu_has_its_chart_its_transcript_and_its_claims_column(pages):
    page = pages[f"lessons/{DAY16}/README.md"]
    assert [line for line in page.splitlines() if line.startswith("    title ")] == [
        '    title "throughput (GFLOP/s), higher is better, NVIDIA H200"',
        '    title "throughput (GFLOP/s), higher is better, Tesla T4"']
    assert [line for line in page.splitlines() if line.startswith("Recorded ")] == [
        "Recorded 2026-11-29 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88 "
        "([transcript](../../evidence/day16-tiled-matmul/nvidia-h200/transcript.txt)):",
        "Recorded 2026-12-01 on Tesla T4 (compute capability 7.5), driver 570.86.15, CUDA 12.8, nvcc 13.0.88 "
        "([transcript](../../evidence/day16-tiled-matmul/tesla-t4/transcript.txt)):"]
    assert ("On NVIDIA H200, 5 of 5 gates held and 1 of 1 prediction held.\n\n"
            "On Tesla T4, 5 of 5 gates held and 1 of 1 prediction held.\n") in page
    assert ("<summary>tiled beats naive on every case (a prediction): <b>held</b> on NVIDIA H200, <b>held</b> on "
            "Tesla T4 (prediction)</summary>") in page
    assert "<summary>memcheck on Tesla T4: <b>as expected</b>, no findings</summary>" in page


def test_the_index_names_both_gpus_and_other_pages_keep_one_column(pages):
    assert ("NVIDIA H200, 2026-11-29: 5 of 5 gates held, 1 of 1 prediction held<br>"
            "Tesla T4, 2026-12-01: 5 of 5 gates held, 1 of 1 prediction held |") in pages["README.md"]
    day13 = pages["lessons/day13-shared-memory/README.md"]
    assert day13 == (COURSE / "lessons/day13-shared-memory/README.md").read_text()
