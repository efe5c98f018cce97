"""tools/browser-check: every page rendered as GitHub would, checked in headless Chromium.

Needs node, Debian's Chromium and the check's npm packages (tools/browser-check/setup.sh
installs them); skipped where any is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "tools" / "browser-check" / "check.mjs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,   # Chromium renders every page: about 15 s of the suite's time
    pytest.mark.skipif(shutil.which("node") is None or not Path(CHROMIUM).exists()
                       or not (CHECK.parent / "node_modules" / "playwright-core").is_dir(),
                       reason="needs node, Chromium and tools/browser-check/setup.sh's packages"),
]


def check(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(CHECK), "--root", str(root), "--out", str(out), "--chromium", CHROMIUM],
                          capture_output=True, text=True, timeout=300)


def test_every_page_of_the_course_renders_cleanly(tmp_path):
    done = check(REPO, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lessons = sorted(p.parent.name for p in REPO.glob("lessons/*/README.md"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{name}.png" for name in lessons] + ["index.png"])
    assert done.stdout.splitlines()[-1] == f"browser-check: {len(lessons) + 1} passed, 0 failed"
    assert "ok   lessons/day71-matmul-fp16/README.md: 4 charts, 3 CUDA blocks, " in done.stdout


BROKEN = """\
# Day 1: Broken on purpose

[All lessons](../../README.md#lessons) · [no such heading](../../README.md#nowhere) · [gone](../day09/README.md)

![a missing picture](missing.png)

```mermaid
xychart-beta
    title "no closing bracket"
    x-axis ["a", "b"
    bar [1, 2]
```

<img src="https://example.com/x.png">

[Open in Compiler Explorer](https://godbolt.org/clientstate/e30=)
"""


def test_a_broken_page_fails_with_every_fault_named(tmp_path):
    root = tmp_path / "course"
    (root / "lessons" / "day01-broken").mkdir(parents=True)
    (root / "README.md").write_text("# A course\n\n## Lessons\n\n[day 1](lessons/day01-broken/README.md)\n")
    (root / "lessons" / "day01-broken" / "README.md").write_text(BROKEN)
    done = check(root, tmp_path / "shots")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "FAIL lessons/day01-broken/README.md: 1 chart, 0 CUDA blocks, 4 links"
    problems = "\n".join(lines[1:])
    for expected in ["  chart 1: ", "  chart 1 was not drawn: ",
                     "  broken link ../../README.md#nowhere: README.md has no heading #nowhere",
                     "  broken link ../day09/README.md: no such file lessons/day09/README.md",
                     "  image does not load: missing.png",
                     "  HTTP 404: http://127.0.0.1:",
                     "  request failed: https://example.com/x.png (net::ERR_FAILED)",
                     "  the Compiler Explorer link is missing or not a #z: link: "]:
        assert expected in problems, expected
    assert lines[-1] == "browser-check: 1 passed, 1 failed"
