"""orchestrator.render.course: lesson pages, the README's lessons table and the sources' header lines.

Each test renders a small course of its own in tmp_path with the repository's
templates: day01-scale has evidence recorded on an H200, day02-sum has none.
"""

from __future__ import annotations


import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from godbolt_decoder import decode_godbolt
from orchestrator.errors import EvidenceError, ManifestError, TemplateError
from orchestrator.judge.evidence import EvidenceMeta, lesson_digest, write_evidence
from orchestrator.render import godbolt, source_header
from orchestrator.render.figures import nice_ceiling_above
from orchestrator.judge.judging import parse_evidence
from orchestrator.manifest.load import load_manifest
from orchestrator.render.course import (
    Page,
    diff_pages,
    format_number,
    godbolt_link,
    nice_ceiling,
    plural,
    render_all,
    rewrite_header,
    write_pages,
)

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "tests" / "data" / "course"   # the fixture course (conftest.COURSE)

MANIFEST = """\
version: 1
course: A small course
architectures: [sm_75, sm_90]
defaults:
  flags: [-std=c++17, -O3]
  sanitizers: {}
lessons:
  - id: day01-scale
    day: 1
    title: Scaling a vector
    source: lessons/day01-scale/scale.cu
    prose: lessons/day01-scale/prose.md
    sanitizers:
      memcheck: {}
    output:
      items:
        - line: "GPU: {gpu} (compute capability {cc:word})"
          fields: {gpu: {compare: device}, cc: {compare: device}}
        - table: kernels
          header: "kernel time (ms) GB/s"
          key: kernel
          keys: [scale, copy]
          columns:
            kernel: word
            ms: {type: float, compare: tolerance, rel: 0.25, unit: ms, label: time}
            gbps: {type: float, compare: tolerance, rel: 0.25, unit: GB/s, label: bandwidth}
        - line: "all {n:int} elements match"
    claims:
      - id: all-match
        gate: n == 1024
        says: every element matches
      - id: scale-keeps-up
        expect: kernels['scale'].gbps >= kernels['copy'].gbps * 0.5
        says: scaling runs at least half as fast as a copy
  - id: day02-sum
    day: 2
    title: Summing a vector
    source: lessons/day02-sum/sum.cu
    output:
      items:
        - line: "sum = {sum:int}"
    claims:
      - id: right-sum
        gate: sum == 523776
        says: the sum is right
"""

SCALE_CU = """\
// SPDX-License-Identifier: MIT
//
// Day 1: scaling a vector.
//
// Build: nvcc -arch=sm_75 -o scale scale.cu
// Run:   ./scale
// Verified: no evidence recorded yet.

#include <cstdio>

// snippet: kernel
__global__ void scale(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= 2.0f;
    }
}
// end snippet

int main() { return 0; }
"""

SUM_CU = """\
// Day 2: summing a vector.

int main() { return 0; }
"""

README = """\
# A small course

Hand-written text.

## Lessons

<!-- lessons:begin -->
an old table
<!-- lessons:end -->

## More

Also hand-written.
"""

TRANSCRIPT = """\
GPU: NVIDIA H200 (compute capability 9.0)

kernel   time (ms)    GB/s
scale        0.020   400.0
copy         0.015   533.3

all 1024 elements match
"""

MEMCHECK_LOG = b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
MEMCHECK_XML = b'<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput/>\n'

VERIFIED = ("// Verified 2026-11-29 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, "
            "CUDA 13.0, nvcc 13.0.88. Transcript: evidence/day01-scale/nvidia-h200/transcript.txt")


def make_meta(date: str = "2026-11-29T14:30:58+00:00") -> EvidenceMeta:
    return EvidenceMeta(
        lesson="day01-scale", date=date, gpu_name="NVIDIA H200", gpu_slug="nvidia-h200",
        compute_capability="9.0", driver_version="580.159.04", cuda_version="13.0",
        nvcc_version="13.0.88", arch="sm_90", flags=["-std=c++17", "-O3"], source_sha256="0" * 64,
        transcript_sha256="", wall_seconds=0.3, exit_status=0, coursectl_version="0.1.0",
        sanitizer_version="2025.3.1.0")


def record(root: Path, transcript: str = TRANSCRIPT, date: str = "2026-11-29T14:30:58+00:00") -> None:
    write_evidence(root, make_meta(date), transcript,
                   {"memcheck.log": MEMCHECK_LOG, "memcheck.xml": MEMCHECK_XML})


@pytest.fixture
def course(tmp_path) -> Path:
    root = tmp_path / "course"
    files = {
        "lessons.yaml": MANIFEST,
        "README.md": README,
        "lessons/day01-scale/scale.cu": SCALE_CU,
        "lessons/day01-scale/prose.md": "Each thread scales one element.\n",
        "lessons/day02-sum/sum.cu": SUM_CU,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    for name in ("lesson.md.j2", "index.md.j2"):
        (root / "templates").mkdir(exist_ok=True)
        shutil.copyfile(COURSE / "templates" / name, root / "templates" / name)
    record(root)
    return root


def render(root: Path) -> list[Page]:
    return render_all(load_manifest(root / "lessons.yaml"))


def by_name(pages: list[Page]) -> dict[str, Page]:
    return {page.name: page for page in pages}


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def set_template(root: Path, name: str, text: str) -> None:
    path = root / "templates" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- the pages -----------------------------------------------------------------------------------
SCALE_SOURCE_RENDERED = SCALE_CU.replace(
    "// Build: nvcc -arch=sm_75 -o scale scale.cu",
    "// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o scale scale.cu").replace(
    "// Verified: no evidence recorded yet.", VERIFIED)

SCALE_PAGE = """\
<!-- Generated by coursectl render from templates/lesson.md.j2, lessons.yaml, lessons/day01-scale/prose.md, lessons/day01-scale/scale.cu and evidence/day01-scale/: edit those, not this file. -->
# Day 1: Scaling a vector

[All lessons](../../README.md#lessons) · Next: [Day 2: Summing a vector](../day02-sum/README.md)

Each thread scales one element.

## Build and run

In this folder:

```sh
nvcc -std=c++17 -O3 -arch=sm_90 -o scale scale.cu
./scale
```

`-arch=sm_90` is the architecture of the NVIDIA H200 the output below was recorded on; on another GPU give its own, or `-arch=native`.

Under compute-sanitizer, built with `-lineinfo` so that its reports name source lines:

```sh
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 -o scale scale.cu
compute-sanitizer --tool memcheck ./scale
```

[Open in Compiler Explorer][compiler-explorer] (the whole of `scale.cu`, nvcc 13.0, `-std=c++17 -O3 -arch=sm_90`)

## The code

### kernel

[`scale.cu`, lines 12-17](scale.cu#L12-L17)

```cuda
__global__ void scale(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= 2.0f;
    }
}
```

## Expected output

Recorded 2026-11-29 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88 ([transcript](../../evidence/day01-scale/nvidia-h200/transcript.txt)):

```text
GPU: NVIDIA H200 (compute capability 9.0)

kernel   time (ms)    GB/s
scale        0.020   400.0
copy         0.015   533.3

all 1024 elements match
```

## Key figures

From the transcript recorded on NVIDIA H200:

| kernel | time (ms) | bandwidth (GB/s) |
| --- | ---: | ---: |
| scale | 0.020 | 400.0 |
| copy | 0.015 | 533.3 |

```mermaid
---
config:
  themeVariables:
    xyChart:
      plotColorPalette: "#0969da"
  xyChart:
    width: 700
    height: 400
---
xychart-beta
    title "bandwidth (GB/s), higher is better, NVIDIA H200"
    x-axis ["scale: 400.0", "copy: 533.3"]
    y-axis "GB/s" 0 --> 600
    bar [400.0, 533.3]
```

Bars closer than their run-to-run noise show no real difference; the noise is 25%, this field's tolerance, within which verify takes two runs as the same.

## Claims

A gate must hold for `coursectl verify` to pass; a prediction is reported and never enforced.

On NVIDIA H200, 1 of 1 gate held and 1 of 1 prediction held.

<details>
<summary>every element matches: <b>held</b> (gate)</summary>

Checks `n == 1024`.

</details>

<details>
<summary>scaling runs at least half as fast as a copy: <b>held</b> (prediction)</summary>

Checks `kernels['scale'].gbps >= kernels['copy'].gbps * 0.5`.

</details>

## Sanitizers

Recorded on NVIDIA H200 with compute-sanitizer 2025.3.1.0.

<details>
<summary>memcheck: <b>as expected</b>, no findings</summary>

- must find: nothing

</details>

[All lessons](../../README.md#lessons) · Next: [Day 2: Summing a vector](../day02-sum/README.md)

[compiler-explorer]: GODBOLT
"""

SUM_PAGE = """\
<!-- Generated by coursectl render from templates/lesson.md.j2, lessons.yaml, lessons/day02-sum/sum.cu and evidence/day02-sum/: edit those, not this file. -->
# Day 2: Summing a vector

[All lessons](../../README.md#lessons) · Previous: [Day 1: Scaling a vector](../day01-scale/README.md)

## Build and run

In this folder:

```sh
nvcc -std=c++17 -O3 -arch=sm_75 -o sum sum.cu
./sum
```

`-arch=sm_75` is the first architecture lessons.yaml names; give your GPU's own, or `-arch=native`.

[Open in Compiler Explorer][compiler-explorer] (the whole of `sum.cu`, nvcc 13.0, `-std=c++17 -O3 -arch=sm_90`)

## The code

## Expected output

No evidence has been recorded for this lesson yet. `coursectl record day02-sum` on a GPU records it; until then this page has no expected output, figures or claim results.

## Claims

A gate must hold for `coursectl verify` to pass; a prediction is reported and never enforced.

<details>
<summary>the sum is right: <b>not checked yet</b> (gate)</summary>

Checks `sum == 523776`.

</details>

[All lessons](../../README.md#lessons) · Previous: [Day 1: Scaling a vector](../day01-scale/README.md)

[compiler-explorer]: GODBOLT
"""

INDEX = """\
<!-- lessons:begin -->
<!-- Generated by coursectl render from templates/index.md.j2, lessons.yaml and evidence/: edit those, not this table. -->
| Day | Lesson | Verified on |
| ---: | --- | --- |
| 1 | [Scaling a vector](lessons/day01-scale/README.md) | NVIDIA H200, 2026-11-29: 1 of 1 gate held, 1 of 1 prediction held |
| 2 | [Summing a vector](lessons/day02-sum/README.md) | no evidence yet |
<!-- lessons:end -->
"""


def godbolt_of(page: str) -> str:
    """The Compiler Explorer link: a reference defined on the page's last line."""
    last = page.splitlines()[-1]
    assert last.startswith("[compiler-explorer]: "), last[:40]
    return last.removeprefix("[compiler-explorer]: ")


def test_a_small_course(course):
    pages = render(course)
    assert [(p.name, p.old is None, p.changed) for p in pages] == [
        ("lessons/day01-scale/README.md", True, True),
        ("lessons/day01-scale/scale.cu", False, True),
        ("lessons/day02-sum/README.md", True, True),
        ("lessons/day02-sum/sum.cu", False, True),
        ("README.md", False, True),
    ]
    scale_page, scale_source, sum_page, sum_source, index = pages

    assert scale_source.new == SCALE_SOURCE_RENDERED
    assert sum_source.new == ("// Day 2: summing a vector.\n"
                              "//\n"
                              "// Build: nvcc -std=c++17 -O3 -arch=sm_75 -o sum sum.cu\n"
                              "// Run:   ./sum\n"
                              "// Verified: no evidence recorded yet.\n"
                              "\n"
                              "int main() { return 0; }\n")

    link = godbolt_of(scale_page.new)
    assert scale_page.new == SCALE_PAGE.replace("GODBOLT", link)
    assert sum_page.new == SUM_PAGE.replace("GODBOLT", godbolt_of(sum_page.new))
    assert index.new == README.replace("<!-- lessons:begin -->\nan old table\n<!-- lessons:end -->\n", INDEX)


def test_the_compiler_explorer_link(course):
    scale_page = render(course)[0]
    # The whole source without its Verified lines, so that re-recording evidence keeps the link.
    source = SCALE_SOURCE_RENDERED.replace(VERIFIED + "\n", "")
    assert "[Open in Compiler Explorer][compiler-explorer] (the whole of `scale.cu`" in scale_page.new
    assert decode_godbolt(godbolt_of(scale_page.new)) == {"version": 4, "content": [{"type": "row", "content": [
        {"type": "component", "componentName": "codeEditor",
         "componentState": {"id": 1, "lang": "cuda", "source": source}},
        {"type": "component", "componentName": "compiler",
         "componentState": {"source": 1, "lang": "cuda", "compiler": "nvcc130",
                            "options": "-std=c++17 -O3 -arch=sm_90"}}]}]}
    assert godbolt_link("int main() {}\n", "-O3") == (
        "https://godbolt.org/#z:OYLghAFBqRAWIDGB7AJgUwKKoJYBdkAnAGhxAgCsQBGYgGwEMA7URAV1QeIGdk3DE6EAHIcTPAGoAtgzEQAlBICkAdgBCqgCJKADAEFh8%2BiICsh4vCTIpABxx10JMhBS37jkEwBuiRNQDMOvTMrBxcyDZ4OMhM3CIAtADy/sI8fAJC1EZ0pobZIgBMecRejtzRTCAALEA%3D%3D%3D")
    # The link's one parameter, and what decoding it gives back.
    assert decode_godbolt(godbolt_link("int main() {}\n", "-O3"))["content"][0]["content"][1] == {
        "type": "component", "componentName": "compiler",
        "componentState": {"source": 1, "lang": "cuda", "compiler": "nvcc130", "options": "-O3"}}


def test_render_writes_the_pages_and_then_has_nothing_to_do(course):
    pages = render(course)
    written = write_pages(pages)
    assert [p.name for p in written] == [p.name for p in pages]
    for page in pages:
        assert page.path.read_text(encoding="utf-8") == page.new
    again = render(course)
    assert [p.changed for p in again] == [False] * 5
    assert diff_pages(again) == ""
    assert write_pages(again) == []


def test_rendering_twice_gives_identical_bytes(course):
    first = render(course)
    second = render(course)
    assert [(p.name, p.new.encode()) for p in first] == [(p.name, p.new.encode()) for p in second]
    assert diff_pages(first) == diff_pages(second)


def test_header_lines_never_make_evidence_look_stale(course):
    source = course / "lessons/day01-scale/scale.cu"
    before = lesson_digest(source)
    write_pages(render(course))
    assert source.read_text(encoding="utf-8") == SCALE_SOURCE_RENDERED
    assert lesson_digest(source) == before


def test_the_readme_outside_the_markers_is_left_alone(course):
    write_pages(render(course))
    text = (course / "README.md").read_text(encoding="utf-8")
    before, rest = text.split("<!-- lessons:begin -->\n")
    _, after = rest.split("<!-- lessons:end -->\n")
    assert before == README.split("<!-- lessons:begin -->\n")[0]
    assert after == README.split("<!-- lessons:end -->\n")[1]


# -- check: what would change --------------------------------------------------------------------
def test_check_names_exactly_the_page_whose_snippet_changed(course):
    write_pages(render(course))
    source = course / "lessons/day01-scale/scale.cu"
    source.write_text(source.read_text().replace("x[i] *= 2.0f;", "x[i] *= 3.0f;"), encoding="utf-8")
    before = snapshot(course)

    pages = render(course)
    diff = diff_pages(pages)

    assert snapshot(course) == before   # rendering writes nothing
    assert [p.name for p in pages if p.changed] == ["lessons/day01-scale/README.md"]
    headers = [line for line in diff.splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers == ["--- a/lessons/day01-scale/README.md", "+++ b/lessons/day01-scale/README.md"]
    changed = [line for line in diff.splitlines()
               if line.startswith(("-", "+")) and not line.startswith(("--- ", "+++ "))]
    assert [line[:40] for line in changed] == [
        "-        x[i] *= 2.0f;",
        "+        x[i] *= 3.0f;",
        "-[compiler-explorer]: https://godbolt.or",
        "+[compiler-explorer]: https://godbolt.or",
    ]


def test_diff_of_a_new_page_and_of_a_file_without_final_newline(tmp_path):
    pages = [Page(path=tmp_path / "a.md", name="a.md", old=None, new="one\n"),
             Page(path=tmp_path / "b.md", name="b.md", old="x\ny", new="x\nz\n"),
             Page(path=tmp_path / "c.md", name="c.md", old="same\n", new="same\n")]
    assert diff_pages(pages) == (
        "--- /dev/null\n+++ b/a.md\n@@ -0,0 +1 @@\n+one\n"
        "--- a/b.md\n+++ b/b.md\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n")
    assert [p.name for p in write_pages(pages)] == ["a.md", "b.md"]
    assert (tmp_path / "b.md").read_text() == "x\nz\n"
    assert not (tmp_path / "c.md").exists()


def sections_changed(old: str, new: str) -> set[str]:
    """The `## ` sections of a page in which any line differs."""
    def headings(lines: list[str]) -> list[str]:
        out, current, fenced = [], "(top)", False
        for line in lines:
            fenced ^= line.startswith("```")
            if line.startswith("## ") and not fenced:
                current = line.strip()
            out.append(current)
        return out

    a, b = old.splitlines(), new.splitlines()
    ha, hb = headings(a), headings(b)
    found: set[str] = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            found |= set(ha[i1:i2]) | set(hb[j1:j2])
    return found


def test_new_evidence_changes_only_the_output_the_figures_and_the_verified_line(course):
    write_pages(render(course))
    record(course, TRANSCRIPT.replace("0.020   400.0", "0.016   500.0"), date="2026-12-03T09:00:00+00:00")

    pages = by_name(render(course))

    assert [name for name, p in pages.items() if p.changed] == [
        "lessons/day01-scale/README.md", "lessons/day01-scale/scale.cu", "README.md"]
    page = pages["lessons/day01-scale/README.md"]
    assert sections_changed(page.old, page.new) == {"## Expected output", "## Key figures"}
    assert "| scale | 0.016 | 500.0 |" in page.new
    # 500.0 beside 533.3 GB/s is within the field's 25% tolerance: said, not drawn.
    assert ("bandwidth (GB/s), higher is better, NVIDIA H200: scale 500.0 GB/s, copy 533.3 GB/s. No chart: these "
            "lie within their run-to-run noise of each other, 25%, this field's tolerance, within which verify takes "
            "two runs as the same.\n") in page.new
    assert "```mermaid" not in page.new
    assert "Recorded 2026-12-03 on NVIDIA H200" in page.new

    source = pages["lessons/day01-scale/scale.cu"]
    assert [line for line in difflib.ndiff(source.old.splitlines(), source.new.splitlines())
            if line.startswith(("- ", "+ "))] == ["- " + VERIFIED, "+ " + VERIFIED.replace("2026-11-29", "2026-12-03")]

    index = pages["README.md"]
    assert [line for line in difflib.ndiff(index.old.splitlines(), index.new.splitlines())
            if line.startswith(("- ", "+ "))] == [
        "- | 1 | [Scaling a vector](lessons/day01-scale/README.md) | NVIDIA H200, 2026-11-29: 1 of 1 gate held, 1 of 1 prediction held |",
        "+ | 1 | [Scaling a vector](lessons/day01-scale/README.md) | NVIDIA H200, 2026-12-03: 1 of 1 gate held, 1 of 1 prediction held |",
    ]


def test_two_gpus_side_by_side(course):
    t4 = make_meta("2026-08-30T10:00:00+00:00").model_copy(update={
        "gpu_name": "Tesla T4", "gpu_slug": "tesla-t4", "compute_capability": "7.5",
        "driver_version": "595.84", "cuda_version": "12.6", "nvcc_version": "12.6.85", "arch": "sm_75"})
    write_evidence(course, t4, TRANSCRIPT.replace("GPU: NVIDIA H200 (compute capability 9.0)",
                                                  "GPU: Tesla T4 (compute capability 7.5)")
                   .replace("0.020   400.0", "0.090    88.9").replace("0.015   533.3", "0.070   114.3"))
    pages = by_name(render(course))
    source = pages["lessons/day01-scale/scale.cu"].new
    assert source.splitlines()[4:9] == [
        "// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o scale scale.cu",
        "// Run:   ./scale",
        VERIFIED,
        "// Verified 2026-08-30 on Tesla T4 (compute capability 7.5), driver 595.84, CUDA 12.6, nvcc 12.6.85. "
        "Transcript: evidence/day01-scale/tesla-t4/transcript.txt",
        "",
    ]
    page = pages["lessons/day01-scale/README.md"].new
    assert ("## Key figures\n\n"
            "| kernel | time (ms), NVIDIA H200 | time (ms), Tesla T4 | bandwidth (GB/s), NVIDIA H200 "
            "| bandwidth (GB/s), Tesla T4 |\n"
            "| --- | ---: | ---: | ---: | ---: |\n"
            "| scale | 0.020 | 0.090 | 400.0 | 88.9 |\n"
            "| copy | 0.015 | 0.070 | 533.3 | 114.3 |\n") in page
    assert page.count("```mermaid") == 2
    assert ('    title "bandwidth (GB/s), higher is better, Tesla T4"\n    x-axis ["scale: 88.9", "copy: 114.3"]\n'
            '    y-axis "GB/s" 0 --> 120\n') in page
    assert ("On NVIDIA H200, 1 of 1 gate held and 1 of 1 prediction held.\n\n"
            "On Tesla T4, 1 of 1 gate held and 1 of 1 prediction held.\n\n") in page
    assert ("<summary>every element matches: <b>held</b> on NVIDIA H200, <b>held</b> on Tesla T4 (gate)</summary>"
            "\n\nChecks `n == 1024`.\n") in page
    assert "<summary>scaling runs at least half as fast as a copy: <b>held</b> on NVIDIA H200, " in page
    assert "[`scale.cu`, lines 13-18](scale.cu#L13-L18)" in page
    assert ("## Sanitizers\n\n"
            "<details>\n<summary>memcheck on NVIDIA H200: <b>as expected</b>, no findings</summary>\n\n"
            "- must find: nothing\n\n</details>\n\n"
            "<details>\n<summary>memcheck on Tesla T4: <b>not recorded</b></summary>\n\n"
            "- must find: nothing\n\n</details>\n\n[All lessons]") in page
    assert ("| 1 | [Scaling a vector](lessons/day01-scale/README.md) | NVIDIA H200, 2026-11-29: 1 of 1 gate held, "
            "1 of 1 prediction held<br>Tesla T4, 2026-08-30: 1 of 1 gate held, 1 of 1 prediction held |"
            ) in pages["README.md"].new


RACE_RECORD = """\
  <record>
    <kind>Analysis</kind>
    <level>{level}</level>
    <what>
      <text>Race condition</text>
      <source>
        <direction>Write</direction>
        <where><func>scale</func><path>/gpu/course/lessons/day01-scale/scale.cu</path><line>14</line><pc>0x150</pc></where>
      </source>
      <destination>
        <direction>Read</direction>
        <where><func>scale</func><path>/gpu/course/lessons/day01-scale/scale.cu</path><line>15</line><pc>0x1a0</pc></where>
        <count>1234567</count>
      </destination>
    </what>
  </record>
"""
RACECHECK_XML = ('<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n'
                 + RACE_RECORD.format(level="Warning") + RACE_RECORD.format(level="Error")
                 + "</ComputeSanitizerOutput>\n")
RACECHECK_LOG = ("========= COMPUTE-SANITIZER\n"
                 "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n")


@pytest.mark.parametrize("kernel, verdict", [
    ("scale", "as expected"),
    ("other", "unexpected race in scale at lessons/day01-scale/scale.cu:14 (1234567 hazards, "
              "2 reports); expected a finding in other inside snippet 'kernel' (lines 12-17) at scale.cu, none reported"),
])
def test_a_race_names_its_kernel_and_lines(course, kernel, verdict):
    manifest = course / "lessons.yaml"
    manifest.write_text(MANIFEST.replace(
        "      memcheck: {}\n",
        f"      racecheck:\n        findings:\n          - kernel: {kernel}\n            snippet: kernel\n"),
        encoding="utf-8")
    write_evidence(course, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG.encode(),
                                                     "racecheck.xml": RACECHECK_XML.encode()})
    page = render(course)[0].new
    assert "compute-sanitizer --tool racecheck ./scale\n" in page
    expected = verdict == "as expected"
    assert (
        f"<details{'' if expected else ' open'}>\n"
        f"<summary>racecheck: <b>{verdict if expected else 'not as expected'}</b>, "
        "2 findings (1 error, 1 warning)</summary>\n\n"
        f"- must find: a finding in {kernel} inside snippet 'kernel' (lines 12-17), and nothing else\n"
        "- kernels: `scale`\n"
        "- where: write at [scale.cu:14](scale.cu#L14) → read at [scale.cu:15](scale.cu#L15) (1,234,567 hazards), "
        "reported 2 times\n"
        + ("" if expected else f"- verdict: {verdict}\n")
        + "\n</details>\n\n[All lessons]") in page


def test_a_failed_prediction_is_reported_with_its_values(course):
    record(course, TRANSCRIPT.replace("0.020   400.0", "0.080   100.0"))
    page = render(course)[0].new
    assert "On NVIDIA H200, 1 of 1 gate held and 0 of 1 prediction held.\n" in page
    assert ("<details open>\n"
            "<summary>scaling runs at least half as fast as a copy: <b>missed</b> (prediction)</summary>\n\n"
            "Checks `kernels['scale'].gbps >= kernels['copy'].gbps * 0.5`.\n\n"
            "On NVIDIA H200 it did not hold:\n\n"
            "- `kernels['scale'].gbps >= kernels['copy'].gbps * 0.5 is false "
            "(kernels['copy'].gbps = 533.3, kernels['scale'].gbps = 100.0)`\n"
            "\n</details>\n\n## Sanitizers\n") in page


# -- errors: one TemplateError naming file:line, and nothing written -----------------------------
def render_error(root: Path) -> TemplateError:
    before = snapshot(root)
    with pytest.raises(TemplateError) as caught:
        write_pages(render(root))
    assert snapshot(root) == before
    assert caught.value.exit_status == 2
    return caught.value


def test_a_template_naming_a_missing_snippet(course):
    set_template(course, "lessons/day01-scale.md.j2",
                 '{% extends "lesson.md.j2" %}\n{% block code %}\n\n{{ snippet("kernel") }}\n'
                 '{{ snippet("launch") }}\n{% endblock %}\n')
    assert str(render_error(course)) == ("templates/lessons/day01-scale.md.j2:5: no snippet 'launch' in "
                                         "lessons/day01-scale/scale.cu (it has kernel)")


def test_a_lesson_template_names_its_snippets(course):
    set_template(course, "lessons/day01-scale.md.j2",
                 '{% extends "lesson.md.j2" %}\n{% block code %}\n\n### The kernel\n\n{{ snippet("kernel") }}\n'
                 '{% endblock %}\n')
    page = render(course)[0].new
    assert page.startswith("<!-- Generated by coursectl render from templates/lessons/day01-scale.md.j2, "
                           "templates/lesson.md.j2, lessons.yaml, ")
    assert "## The code\n\n### The kernel\n\n[`scale.cu`, lines 12-17](scale.cu#L12-L17)\n\n```cuda\n" in page


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace("// end snippet\n", ""),
     "lessons/day01-scale/scale.cu:11: snippet 'kernel' is never closed"),
    (lambda s: s.replace("// end snippet\n", "// end snippet\n// snippet: kernel\nint x;\n// end snippet\n"),
     "lessons/day01-scale/scale.cu:19: snippet 'kernel' is defined twice"),
    (lambda s: s.replace("int main", "// end snippet: kernel\nint main"),
     "lessons/day01-scale/scale.cu:20: 'end snippet' with no snippet open"),
])
def test_a_bad_snippet_marker(course, edit, message):
    source = course / "lessons/day01-scale/scale.cu"
    source.write_text(edit(source.read_text()), encoding="utf-8")
    assert str(render_error(course)) == message


def test_a_missing_variable_is_an_error(course):
    set_template(course, "lesson.md.j2", "# Day {{ lesson.day }}\n\n{{ lesson.summary }}\n")
    assert str(render_error(course)) == ("templates/lesson.md.j2:3: 'orchestrator.manifest.model.Lesson object' "
                                        "has no attribute 'summary'")
    set_template(course, "lesson.md.j2", "# Day {{ lesson.day }}\n\n{{ summary }}\n")
    assert str(render_error(course)) == "templates/lesson.md.j2:3: 'summary' is undefined"


def test_a_template_syntax_error(course):
    set_template(course, "index.md.j2", "| Day |\n{% for row in lessons %}\n| {{ row.lesson.day }} |\n")
    assert str(render_error(course)) == (
        "templates/index.md.j2:3: template syntax error: Unexpected end of template. Jinja was looking "
        "for the following tags: 'endfor' or 'else'. The innermost block that needs to be closed is 'for'.")


def test_an_included_template_that_does_not_exist(course):
    set_template(course, "lesson.md.j2", "# Day {{ lesson.day }}\n{% include 'footer.md.j2' %}\n")
    assert str(render_error(course)) == "templates/lesson.md.j2:2: no template 'footer.md.j2' in templates/"


def test_no_page_is_written_when_the_second_lesson_fails(course):
    # The first lesson's page and source would change; the second lesson's template fails.
    set_template(course, "lessons/day02-sum.md.j2",
                 '{% extends "lesson.md.j2" %}\n{% block code %}\n{{ snippet("total") }}\n{% endblock %}\n')
    error = render_error(course)
    assert str(error) == "templates/lessons/day02-sum.md.j2:3: no snippet 'total' in lessons/day02-sum/sum.cu (it has none)"
    assert not (course / "lessons/day01-scale/README.md").exists()
    assert (course / "lessons/day01-scale/scale.cu").read_text() == SCALE_CU


@pytest.mark.parametrize("readme, message", [
    ("# Course\n", "README.md: the marker <!-- lessons:begin --> is missing"),
    ("<!-- lessons:begin -->\n<!-- lessons:end -->\n<!-- lessons:end -->\n",
     "README.md:3: the marker <!-- lessons:end --> appears 2 times"),
    ("<!-- lessons:end -->\n<!-- lessons:begin -->\n",
     "README.md:1: <!-- lessons:end --> comes before <!-- lessons:begin -->"),
])
def test_the_readme_needs_its_markers(course, readme, message):
    (course / "README.md").write_text(readme, encoding="utf-8")
    error = render_error(course)
    assert str(error) == message
    assert error.hint == ("README.md needs one <!-- lessons:begin --> line and, after it, "
                          "one <!-- lessons:end --> line")


def test_edited_evidence_is_refused(course):
    transcript = course / "evidence/day01-scale/nvidia-h200/transcript.txt"
    transcript.write_text(TRANSCRIPT.replace("400.0", "900.0"), encoding="utf-8")
    with pytest.raises(EvidenceError) as caught:
        render(course)
    assert str(caught.value) == ("evidence/day01-scale/nvidia-h200/transcript.txt: transcript does not match "
                                 "the sha256 in meta.json: it was edited after recording")


# -- the pieces ----------------------------------------------------------------------------------
def test_rewrite_header_keeps_each_line_where_it_stands():
    text = ("// Title\n//\n// Build: old\n// Run:   ./old\n//\n// For the sanitizer: ...\n//\n"
            "// Verified 2026-01-01 on A.\n// Verified 2026-01-02 on B.\n\nint x;\n// Build: not the header\n")
    assert rewrite_header(text, ["// Build: new", "// Run:   ./new", "// Verified: no evidence recorded yet."]) == (
        "// Title\n//\n// Build: new\n// Run:   ./new\n//\n// For the sanitizer: ...\n//\n"
        "// Verified: no evidence recorded yet.\n\nint x;\n// Build: not the header\n")


def test_rewrite_header_adds_what_is_missing():
    lines = ["// Build: b", "// Run:   ./r", "// Verified: no evidence recorded yet."]
    assert rewrite_header("// Title\n// Run:   ./old\n// More.\n\nint x;\n", lines) == (
        "// Title\n// Build: b\n// Run:   ./r\n// Verified: no evidence recorded yet.\n// More.\n\nint x;\n")
    assert rewrite_header("int x;\n", lines) == (
        "// Build: b\n// Run:   ./r\n// Verified: no evidence recorded yet.\n\nint x;\n")
    assert rewrite_header("// Title\r\n// Build: a\r\n// Run: a\r\n// Verified: a\r\nint x;\r\n", lines) == (
        "// Title\r\n// Build: b\r\n// Run:   ./r\r\n// Verified: no evidence recorded yet.\r\nint x;\r\n")


@pytest.mark.parametrize("odd", ["\f", "\v", "\x1c", "\x85", "\u2028"])
def test_a_character_python_splits_lines_at_is_no_line_break_in_a_source(odd):
    """Compilers, editors and GitHub break lines at \\n, \\r\\n and \\r only: the header stays where it is."""
    text = f"// Title {odd}page two\n// Build: a\n// Run: a\n// Verified: a\nint x;{odd}\n"
    assert rewrite_header(text, ["// Build: b", "// Run:   ./r", "// Verified: no evidence recorded yet."]) == (
        f"// Title {odd}page two\n// Build: b\n// Run:   ./r\n// Verified: no evidence recorded yet.\nint x;{odd}\n")


HEADER = ["// Build: b", "// Run:   ./r", "// Verified: no evidence recorded yet."]
GENERATED = "".join(line + "\n" for line in HEADER)
NVIDIA_NOTICE = ("/* Copyright (c) 2022, NVIDIA CORPORATION. All rights reserved.\n"
                 " *\n"
                 " * Redistribution and use in source and binary forms, with or without\n"
                 " * modification, are permitted provided that the following conditions are met: ...\n"
                 " */\n")


@pytest.mark.parametrize("before, after", [
    # cuda-samples: a block comment, a blank line, the code.
    (NVIDIA_NOTICE + "\n#include <cstdio>\n", NVIDIA_NOTICE + GENERATED + "\n#include <cstdio>\n"),
    # no blank line after the notice: one is added after the lines.
    ("/* Copyright 2024 A. Author */\nint x;\n", "/* Copyright 2024 A. Author */\n" + GENERATED + "\nint x;\n"),
    # lines an older render wrote above the notice move below it, the notice untouched.
    ("// Build: old\n// Run:   ./old\n// Verified: old\n\n" + NVIDIA_NOTICE + "\nint x;\n",
     NVIDIA_NOTICE + GENERATED + "\nint x;\n"),
    # a notice of // lines: after its last paragraph, and a lesson comment after it keeps them at its end.
    ("//===- x.cu -===//\n// Part of the LLVM Project, under the Apache License v2.0\n"
     "// SPDX-License-Identifier: Apache-2.0\n//===------===//\n\nint x;\n",
     "//===- x.cu -===//\n// Part of the LLVM Project, under the Apache License v2.0\n"
     "// SPDX-License-Identifier: Apache-2.0\n//===------===//\n" + GENERATED + "\nint x;\n"),
    ("// SPDX-License-Identifier: MIT\nint x;\n", "// SPDX-License-Identifier: MIT\n" + GENERATED + "\nint x;\n"),
    ("/* Copyright X */\n\n// What this sample does.\n\nint x;\n",
     "/* Copyright X */\n\n// What this sample does.\n//\n" + GENERATED + "\nint x;\n"),
    # a block comment that is no notice is the lesson's own: the lines go above it, as before.
    ("/* What this sample does. */\nint x;\n", GENERATED + "\n/* What this sample does. */\nint x;\n"),
], ids=["cuda-samples", "no-blank-line", "moved-below", "llvm-banner", "spdx-line", "notice-then-comment",
        "no-notice"])
def test_the_header_lines_go_after_a_licence_notice_never_above_it(before, after):
    assert rewrite_header(before, HEADER) == after
    assert rewrite_header(after, HEADER) == after


def test_lesson_digest_ignores_the_header_lines_wherever_they_sit(tmp_path):
    def digest(text: str) -> str:
        path = tmp_path / "x.cu"
        path.write_text(text, encoding="utf-8")
        return lesson_digest(path)

    plain = NVIDIA_NOTICE + "\nint x;\n"
    placed = [GENERATED + plain, NVIDIA_NOTICE + GENERATED + "\nint x;\n",
              NVIDIA_NOTICE + "\n" + GENERATED + "int x;\n"]
    assert {digest(text) for text in placed} == {digest(plain)}
    assert digest(NVIDIA_NOTICE + "int x;\n") != digest(plain)   # a blank line is the source's own


def test_a_source_the_course_must_not_edit_is_never_written(course):
    """`source_header: false`: render and render --check leave the file alone, byte for byte."""
    source = course / "lessons/day02-sum/sum.cu"
    text = NVIDIA_NOTICE + "\nint main() { return 0; }\n"
    source.write_text(text, encoding="utf-8")
    manifest = course / "lessons.yaml"
    manifest.write_text(manifest.read_text().replace(
        "    source: lessons/day02-sum/sum.cu\n", "    source: lessons/day02-sum/sum.cu\n    source_header: false\n"))
    pages = render(course)
    assert "lessons/day02-sum/sum.cu" not in by_name(pages)
    write_pages(pages)
    assert source.read_bytes() == text.encode()
    assert diff_pages(render(course)) == ""
    assert "nvcc -std=c++17 -O3 -arch=sm_75 -o sum sum.cu" in (course / "lessons/day02-sum/README.md").read_text()


@pytest.mark.parametrize("value, ceiling", [(6726.0, 8000.0), (2.109, 2.5), (0.0102, 0.012), (533.3, 600.0),
                                            (1.0, 1.0), (0.0, 1.0), (97.0, 100.0)])
def test_nice_ceiling(value, ceiling):
    assert nice_ceiling(value) == ceiling


@pytest.mark.parametrize("value, decimals, shown", [(0.01, 3, "0.010"), (6726.0, 1, "6726.0"), (2.109, None, "2.109"),
                                                   (7, 2, "7"), (None, 1, "-"), (float("inf"), 2, "inf"),
                                                   (1e-07, 3, "1e-07")])
def test_format_number(value, decimals, shown):
    assert format_number(value, decimals) == shown


# -- navigation and links between lessons --------------------------------------------------------
THIRD_LESSON = """\
  - id: day00-hello
    day: 0
    title: Hello, GPU
    source: lessons/day00-hello/hello.cu
    prose: lessons/day00-hello/prose.md
    output:
      items:
        - line: "hello"
"""


def add_first_day(root: Path, prose: str) -> None:
    """A lesson listed last in lessons.yaml whose day comes first."""
    (root / "lessons.yaml").write_text(MANIFEST + THIRD_LESSON, encoding="utf-8")
    (root / "lessons/day00-hello").mkdir(parents=True)
    (root / "lessons/day00-hello/hello.cu").write_text("int main() { return 0; }\n", encoding="utf-8")
    (root / "lessons/day00-hello/prose.md").write_text(prose, encoding="utf-8")


def test_each_page_links_the_index_and_its_neighbours_by_day(course):
    add_first_day(course, "Say hello.\n")
    pages = by_name(render(course))
    nav = {name: page.new.split("\n")[3] for name, page in pages.items() if name.endswith("/README.md")}
    assert nav == {
        "lessons/day00-hello/README.md":
            "[All lessons](../../README.md#lessons) · Next: [Day 1: Scaling a vector](../day01-scale/README.md)",
        "lessons/day01-scale/README.md":
            "[All lessons](../../README.md#lessons) · Previous: [Day 0: Hello, GPU](../day00-hello/README.md)"
            " · Next: [Day 2: Summing a vector](../day02-sum/README.md)",
        "lessons/day02-sum/README.md":
            "[All lessons](../../README.md#lessons) · Previous: [Day 1: Scaling a vector](../day01-scale/README.md)",
    }
    # The same line closes the page, above the link definitions.
    page = pages["lessons/day01-scale/README.md"].new
    assert page.splitlines()[-3:-1] == [nav["lessons/day01-scale/README.md"], ""]


def test_a_mention_of_another_day_links_its_page(course):
    add_first_day(course, "Day 1 scales a vector and day 2 sums one; this is day 0.\n"
                          "`day 1` in code, [day 2](https://example.com) and <a title=\"day 9\">x</a> stay.\n"
                          "\n```text\nday 7 in a fence stays too\n```\n")
    page = by_name(render(course))["lessons/day00-hello/README.md"].new
    assert ("[Day 1](../day01-scale/README.md) scales a vector and [day 2](../day02-sum/README.md) sums one; "
            "this is day 0.\n"
            "`day 1` in code, [day 2](https://example.com) and <a title=\"day 9\">x</a> stay.\n"
            "\n```text\nday 7 in a fence stays too\n```\n") in page


def test_a_mention_of_a_day_the_course_lacks_stays_text_with_a_warning(course):
    add_first_day(course, "Say hello.\n\nDay 15 measures\nthat.\n")
    manifest = load_manifest(course / "lessons.yaml")
    page = by_name(render_all(manifest))["lessons/day00-hello/README.md"].new
    assert "Day 15 measures" in page and "[Day 15]" not in page
    assert [w for w in manifest.warnings if "prose.md" in w] == ["lessons/day00-hello/prose.md:3: 'Day 15' names a day the course has no lesson "
                                 "for (its days: 0, 1, 2); it stays text: give its URL under external_days in "
                                 "lessons.yaml, or add its lesson"]


def test_a_day_the_course_lacks_links_to_its_external_days_url(course):
    add_first_day(course, "Say hello.\n\nDay 15 measures\nthat.\n")
    text = (course / "lessons.yaml").read_text(encoding="utf-8")
    (course / "lessons.yaml").write_text("external_days:\n  15: https://example.com/day15\n" + text,
                                         encoding="utf-8")
    manifest = load_manifest(course / "lessons.yaml")
    page = by_name(render_all(manifest))["lessons/day00-hello/README.md"].new
    assert "[Day 15](https://example.com/day15) measures" in page
    assert [w for w in manifest.warnings if "prose.md" in w] == []


def test_the_course_prose_names_only_days_it_has():
    manifest = load_manifest(COURSE / "lessons.yaml")
    pages = by_name(render_all(manifest))
    assert ("Three versions of the [day 16](../day16-tiled-matmul/README.md) tiled multiply make the comparison."
            in pages["lessons/day71-matmul-fp16/README.md"].new.replace("\n", " "))
    assert "Day 15" not in pages["lessons/day13-shared-memory/README.md"].new.split("## Build and run")[0]


# -- what the page shows: Key figures and charts --------------------------------------------------
def test_percentages_are_explained_only_where_they_are_shown(course):
    page = render(course)[0].new
    assert "Percentages" not in page   # this GPU's evidence records no peaks
    meta = make_meta().model_copy(update={"peak_gbps": 4814.3, "peak_fp32_gflops": 66908.2})
    write_evidence(course, meta, TRANSCRIPT, {"memcheck.log": MEMCHECK_LOG, "memcheck.xml": MEMCHECK_XML})
    page = render(course)[0].new
    assert "| scale | 0.020 | 400.0 (8%) |\n" in page
    # The FP32 peak is recorded too, but no figure here is in GFLOP/s.
    assert ("\n\nPercentages are of NVIDIA H200's peak: 4814.3 GB/s of DRAM bandwidth, as recorded with its "
            "evidence.\n\n```mermaid\n") in page


SECTIONS_TRANSCRIPT = """\
case 256
kernel   err        time (ms)
f32      4.582e-06  0.0100
f16      2.950e-02  0.0090
ratio at K=256: 11.4

case 2048
kernel   err        time (ms)
f32      7.610e-05  2.1094
f16      5.078e-01  1.8576
ratio at K=2048: 252
"""

SECTIONS_OUTPUT = """\
    output:
      items:
        - section: cases
          key: case
          repeat: 2
          items:
            - line: "case {case:word}"
            - table: kernels
              header: "kernel err time (ms)"
              key: kernel
              columns:
                kernel: word
                err: float
                ms: {type: float, compare: tolerance, rel: 0.25, unit: ms, label: time}
            - line: "ratio at K={k:int}: {ratio:float}"
"""

SECTIONS_PAGE = """\
    page:
      figures: [{field: err, label: max error}, ms, {field: ratio, label: error ratio}]
      charts:
        - {field: ratio, label: error ratio, per: [], against: {field: k, label: K}}
        - {field: ms, per: case}
"""


def sections_course(course: Path, page: str, output: str = SECTIONS_OUTPUT, meta: EvidenceMeta | None = None) -> str:
    text = MANIFEST.split("  - id: day02-sum")[0]
    start = text.split("    output:\n", 1)[0]
    text = start + page + output + "    claims:\n      - {id: two-cases, gate: len(cases) == 2}\n"
    (course / "lessons.yaml").write_text(text, encoding="utf-8")
    write_evidence(course, meta or make_meta(), SECTIONS_TRANSCRIPT,
                   {"memcheck.log": MEMCHECK_LOG, "memcheck.xml": MEMCHECK_XML})
    page = render(course)[0].new
    return page[page.index("## Key figures"):page.index("## Claims")]


def test_the_page_key_chooses_the_figures_and_charts(course):
    assert sections_course(course, SECTIONS_PAGE) == """\
## Key figures

From the transcript recorded on NVIDIA H200:

| case / kernel | max error | time (ms) |
| --- | ---: | ---: |
| 256 / f32 | 4.582e-06 | 0.0100 |
| 256 / f16 | 2.950e-02 | 0.0090 |
| 2048 / f32 | 7.610e-05 | 2.1094 |
| 2048 / f16 | 5.078e-01 | 1.8576 |

| case | error ratio |
| --- | ---: |
| 256 | 11.4 |
| 2048 | 252.0 |

```mermaid
---
config:
  themeVariables:
    xyChart:
      plotColorPalette: "#0969da"
  xyChart:
    width: 700
    height: 400
---
xychart-beta
    title "error ratio against K, NVIDIA H200"
    x-axis "K" ["256: 11.4", "2048: 252.0"]
    y-axis "error ratio" 0 --> 300
    bar [11.4, 252.0]
```

time (ms), lower is better, case 256, NVIDIA H200: f32 0.01 ms, f16 0.009 ms. No chart: these lie within their run-to-run noise of each other, 25%, this field's tolerance, within which verify takes two runs as the same.

time (ms), lower is better, case 2048, NVIDIA H200: f32 2.1094 ms, f16 1.8576 ms. No chart: these lie within their run-to-run noise of each other, 25%, this field's tolerance, within which verify takes two runs as the same.

"""


def test_without_a_page_key_every_field_with_a_unit_is_shown_and_its_unit_charted(course):
    shown = sections_course(course, "")
    assert "| case / kernel | time (ms) |\n" in shown
    assert "error ratio" not in shown and "max error" not in shown
    assert "```mermaid" not in shown   # each case's two times lie within their tolerance of each other
    assert "\ntime (ms), lower is better, case 2048, NVIDIA H200: f32 2.1094 ms, f16 1.8576 ms. No chart: " in shown


def test_times_further_apart_than_their_tolerance_are_charted_with_their_values_and_noise(course):
    shown = sections_course(course, SECTIONS_PAGE, SECTIONS_OUTPUT.replace("rel: 0.25", "rel: 0.05, abs: 0.0001"))
    assert shown.count("```mermaid") == 3
    assert ('    title "time (ms), lower is better, case 256, NVIDIA H200"\n'
            '    x-axis ["f32: 0.01", "f16: 0.009"]\n    y-axis "ms" 0 --> 0.012\n    bar [0.01, 0.009]\n```\n\n'
            "Bars closer than their run-to-run noise show no real difference; the noise is 5% + 0.0001 ms, this "
            "field's tolerance, within which verify takes two runs as the same.\n") in shown
    assert "No chart" not in shown
    assert "\nBars closer" not in shown.split('title "time')[0]   # the error ratio is compared exactly: no noise


def test_a_spread_recorded_by_record_repeat_is_the_noise_where_there_is_one(course):
    spread = {"cases[256].kernels[f32].ms": 0.2, "cases[256].kernels[f16].ms": 0.2,
              "cases[2048].kernels[f32].ms": 0.01, "cases[2048].kernels[f16].ms": 0.01}
    meta = make_meta().model_copy(update={"repeat": {"runs": 5, "spread": spread}})
    shown = sections_course(course, SECTIONS_PAGE, meta=meta)
    # 0.0100 and 0.0090 ms, 20% apart from run to run: no real difference. 2.1094 and 1.8576 ms, 1%: charted.
    assert ("time (ms), lower is better, case 256, NVIDIA H200: f32 0.01 ms, f16 0.009 ms. No chart: these lie "
            "within their run-to-run noise of each other, up to 20.0%, the spread of the runs that record --repeat "
            "recorded with this evidence.\n") in shown
    assert ('    x-axis ["f32: 2.1094", "f16: 1.8576"]\n    y-axis "ms" 0 --> 2.5\n    bar [2.1094, 1.8576]\n```\n\n'
            "Bars closer than their run-to-run noise show no real difference; the noise is up to 1.0%, the spread "
            "of the runs that record --repeat recorded with this evidence.\n") in shown
    # A spread that is not a number is not one.
    meta = make_meta().model_copy(update={"repeat": {"runs": 5, "spread": {p: "wide" for p in spread}}})
    assert "record --repeat" not in sections_course(course, SECTIONS_PAGE, meta=meta)


@pytest.mark.parametrize("value, top", [(0.01, 0.012), (2.1094, 2.5), (533.3, 600.0), (600.0, 800.0), (1.0, 1.2)])
def test_no_bar_reaches_the_end_of_its_axis(value, top):
    assert nice_ceiling_above(value) == top


@pytest.mark.parametrize("count, text", [(0, "0 predictions"), (1, "1 prediction"), (2, "2 predictions")])
def test_counts_agree_with_their_nouns(count, text):
    assert plural(count, "prediction") == text
    assert plural(count, "claim was", "claims were") == text.replace("prediction", "claim was").replace(
        "claim wass", "claims were")


def test_day_71_charts_its_error_ratio_against_k_and_says_its_times_are_within_noise():
    page = by_name(render_all(load_manifest(COURSE / "lessons.yaml")))["lessons/day71-matmul-fp16/README.md"].new
    assert ("| case | FP16 / FP32 max-error ratio |\n| --- | ---: |\n| 256x256x256 | 11.4 |\n"
            "| 1024x1024x1024 | 51.3 |\n| 2048x2048x2048 | 252.0 |\n") in page
    assert ('xychart-beta\n    title "FP16 / FP32 max-error ratio against K, NVIDIA H200"\n'
            '    x-axis "K" ["256: 11.4", "1024: 51.3", "2048: 252.0"]\n    y-axis "FP16 / FP32 max-error ratio" 0 --> 300\n'
            '    bar [11.4, 51.3, 252.0]\n') in page
    # The 256^3 times lie microseconds apart, well inside their tolerance: given, not drawn as bars.
    manifest = load_manifest(COURSE / "lessons.yaml")
    recorded = parse_evidence(manifest, manifest.lesson("day71-matmul-fp16"), "nvidia-h200")
    kernels = ["matmulTiledF32", "matmulF16StoreF32Acc", "matmulF16StoreF16Acc"]
    ms = {f.path: f.value for f in recorded.flats}
    bars = [ms[f"cases[256x256x256].kernels[{kernel}].ms"] for kernel in kernels]
    assert max(bars) - min(bars) < 0.003
    said = ", ".join(f"{kernel} {format(v, 'g')} ms" for kernel, v in zip(kernels, bars))
    assert f"\ntime (ms), lower is better, case 256x256x256, NVIDIA H200: {said}. No chart: " in page
    assert 'title "time (ms), lower is better, case 256x256x256' not in page
    assert "Percentages" not in page   # no rate among its figures


def test_a_page_that_would_be_the_index_or_a_prose_file_is_refused(course):
    """A source at the course root would put its page on the README holding the lessons table."""
    shutil.copyfile(course / "lessons/day02-sum/sum.cu", course / "sum.cu")
    manifest = course / "lessons.yaml"
    manifest.write_text(manifest.read_text().replace("source: lessons/day02-sum/sum.cu", "source: sum.cu"))
    with pytest.raises(ManifestError) as caught:
        render(course)
    assert str(caught.value) == (f"{manifest}:35: lesson 'day02-sum': its page, beside its source, would be "
                                 "README.md, the course's index")
    assert caught.value.hint == "give the page a name of its own: page: {path: sum.md}"
    manifest.write_text(manifest.read_text().replace(
        "source: sum.cu", "source: sum.cu\n    page: {path: lessons/day01-scale/prose.md}"))
    with pytest.raises(ManifestError) as caught:
        render(course)
    assert str(caught.value) == (f"{manifest}:39: lesson 'day02-sum': its page.path would be "
                                 "lessons/day01-scale/prose.md, the prose of lesson 'day01-scale'")


def test_the_index_lists_lessons_in_day_order(course):
    add_first_day(course, "Say hello.\n")
    index = by_name(render(course))["README.md"].new
    assert [row.split(" | ")[:2] for row in index.splitlines() if row.startswith("| ") and row[2].isdigit()] == [
        ["| 0", "[Hello, GPU](lessons/day00-hello/README.md)"],
        ["| 1", "[Scaling a vector](lessons/day01-scale/README.md)"],
        ["| 2", "[Summing a vector](lessons/day02-sum/README.md)"]]


# -- files render may not write: a link, or a file it did not write ------------------------------------------
def test_a_page_that_is_a_symbolic_link_is_refused_and_left_alone(course, tmp_path):
    """A page linked to a file outside the course was shown in render --check's diff, then replaced by render."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the course\n", encoding="utf-8")
    page = course / "lessons/day01-scale/README.md"
    page.symlink_to(secret)
    manifest = course / "lessons.yaml"
    with pytest.raises(ManifestError) as caught:
        render(course)
    assert str(caught.value) == (f"{manifest}:8: lesson 'day01-scale': its page, beside its source, would be "
                                 f"lessons/day01-scale/README.md, a symbolic link (to {secret}); render writes each "
                                 "page as a file of its own")
    assert caught.value.hint == "remove the link lessons/day01-scale/README.md: render writes the page there"
    assert caught.value.exit_status == 2
    assert page.is_symlink() and secret.read_text() == "not for the course\n"


def test_a_page_path_that_is_a_symbolic_link_inside_the_course_is_refused_too(course):
    (course / "notes.md").write_text("Hand-written notes.\n", encoding="utf-8")
    (course / "lessons/day02-sum/sum.md").symlink_to("../../notes.md")
    manifest = course / "lessons.yaml"
    source = "source: lessons/day02-sum/sum.cu"
    manifest.write_text(manifest.read_text().replace(source, f"{source}\n    page: {{path: lessons/day02-sum/sum.md}}"))
    with pytest.raises(ManifestError) as caught:
        render(course)
    assert str(caught.value) == (f"{manifest}:39: lesson 'day02-sum': its page.path would be lessons/day02-sum/sum.md, "
                                 "a symbolic link (to ../../notes.md); render writes each page as a file of its own")


def test_a_readme_that_is_a_symbolic_link_is_refused(course, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(README, encoding="utf-8")
    (course / "README.md").unlink()
    (course / "README.md").symlink_to(secret)
    with pytest.raises(TemplateError) as caught:
        render(course)
    assert str(caught.value) == (f"README.md: is a symbolic link (to {secret}); render rewrites the lessons table in "
                                 "it, so it must be a file of the course")
    assert caught.value.hint == "put the text of README.md in its place, as a file"
    assert caught.value.exit_status == 2
    assert secret.read_text() == README


@pytest.mark.parametrize("page, line, where", [
    ("docs/notes.md", 39, "its page.path"),
    (None, 35, "its page, beside its source,"),
], ids=["page-path", "beside-the-source"])
def test_a_page_render_did_not_write_is_never_overwritten(course, page, line, where):
    """`page: {path: docs/schema.md}` made render overwrite a hand-written file; a missing file, or one render
    wrote, it still writes."""
    manifest = course / "lessons.yaml"
    if page is not None:
        manifest.write_text(manifest.read_text().replace(
            "source: lessons/day02-sum/sum.cu", f"source: lessons/day02-sum/sum.cu\n    page: {{path: {page}}}"))
    name = page or "lessons/day02-sum/README.md"
    hand_written = course / name
    hand_written.parent.mkdir(parents=True, exist_ok=True)
    hand_written.write_text("# Notes\n\nWritten by hand.\n", encoding="utf-8")
    for check in (False, True):
        with pytest.raises(ManifestError) as caught:
            pages = render(course)
            if not check:
                write_pages(pages)
        assert str(caught.value) == (
            f"{manifest}:{line}: lesson 'day02-sum': {where} would be {name}, a file render did not write (its first "
            "line is not render's banner, <!-- Generated by coursectl render from ...); render overwrites only the "
            "pages it wrote")
        assert caught.value.hint == ("give the page a path of its own, such as page: {path: lessons/day02-sum/sum.md}, "
                                     f"or move {name} away if render may replace it")
        assert caught.value.exit_status == 2
    assert hand_written.read_text() == "# Notes\n\nWritten by hand.\n"
    hand_written.unlink()
    write_pages(render(course))
    assert hand_written.read_text().startswith("<!-- Generated by coursectl render from templates/lesson.md.j2, ")
    hand_written.write_text(hand_written.read_text().replace("Summing a vector", "Summing"), encoding="utf-8")
    assert [page.name for page in write_pages(render(course))] == [name]


# -- the offline check of a source's header lines ---------------------------------------------------
def test_the_header_check_computes_the_lines_alone_not_the_page(course, monkeypatch):
    """verify --offline asks it of every lesson: no Compiler Explorer link, snippets or charts for it."""
    write_pages(render(course))
    manifest = load_manifest(course / "lessons.yaml")
    lesson = manifest.lesson("day01-scale")

    def no_page(*args, **kwargs):
        raise AssertionError("the page was built")

    monkeypatch.setattr(godbolt, "godbolt_url", no_page)
    assert source_header.stale_source_header(manifest, lesson) is None
    scale = course / "lessons/day01-scale/scale.cu"
    scale.write_text(scale.read_text().replace("-O3", "-O2", 1))
    assert source_header.stale_source_header(manifest, lesson) == (
        "lessons/day01-scale/scale.cu: its Build/Run/Verified lines are not the ones render writes from lessons.yaml "
        "and the evidence; run `coursectl render`")


def test_the_offline_pipeline_imports_neither_the_page_renderer_nor_jinja2():
    code = ("import sys, orchestrator.workflows.pipeline; "
            "print(sorted({'orchestrator.render.course', 'jinja2'} & set(sys.modules)))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout == "[]\n"


def test_fields_of_different_tolerances_on_one_chart_are_each_judged_by_their_own():
    from orchestrator.render.figures import _noise
    from orchestrator.transcript.fields import FieldSpec
    loose = FieldSpec(type="float", compare="tolerance", rel=0.25)
    tight = FieldSpec(type="float", compare="tolerance", rel=0.01)
    noise, within = _noise([("a", 1.0, "a", loose), ("b", 1.1, "b", tight)], "ms", {})
    assert (noise, within) == ("each field's tolerance, within which verify takes two runs as the same", False)
    assert _noise([("a", 1.0, "a", loose), ("b", 1.1, "b", loose)], "ms", {}) == (
        "25%, this field's tolerance, within which verify takes two runs as the same", True)
    exact = FieldSpec(type="float")
    assert _noise([("a", 1.0, "a", exact), ("b", 1.0, "b", exact)], "ms", {}) == (None, False)
