"""tools/browser-check: every page rendered as GitHub would, checked in headless Chromium.

The checks in Chromium need node, Debian's Chromium and the check's npm packages
(tools/browser-check/setup.sh installs them) and are skipped where any is absent;
the one that tells a stale screenshot needs none of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "tools" / "browser-check" / "check.mjs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

SCREENSHOTS = REPO / "docs" / "screenshots"


def in_chromium(test):
    for mark in (pytest.mark.browser,
                 pytest.mark.slow,   # Chromium renders every page: about 15 s of the suite's time
                 pytest.mark.skipif(shutil.which("node") is None or not Path(CHROMIUM).exists()
                                    or not (CHECK.parent / "node_modules" / "cmark-gfm").is_dir(),
                                    reason="needs node, Chromium and tools/browser-check/setup.sh's packages")):
        test = mark(test)
    return test


def check(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(CHECK), "--root", str(root), "--out", str(out), "--chromium", CHROMIUM],
                          capture_output=True, text=True, timeout=300)


@in_chromium
def test_every_page_of_the_course_renders_cleanly(tmp_path):
    done = check(REPO, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lessons = sorted(p.parent.name for p in REPO.glob("lessons/*/README.md"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{name}.png" for name in lessons]
                                                               + ["index.png", "pages.json"])
    assert done.stdout.splitlines()[-1] == f"browser-check: {len(lessons) + 1} passed, 0 failed"
    recorded = json.loads((tmp_path / "pages.json").read_text())["screenshots"]
    assert recorded["index.png"]["page"] == "README.md"
    assert recorded["index.png"]["page_sha256"] == sha256(REPO / "README.md")
    assert recorded["index.png"]["png_sha256"] == sha256(tmp_path / "index.png")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_screenshots(folder: Path, root: Path) -> list[str]:
    """What makes a screenshot in `folder` (check.mjs's --out) other than a picture of its page now."""
    recorded = json.loads((folder / "pages.json").read_text(encoding="utf-8"))
    problems = [f"{name} changed since the screenshots were taken" for name, digest in recorded["renderer"].items()
                if sha256(REPO / name) != digest]
    shots = recorded["screenshots"]
    for png in sorted(p.name for p in folder.glob("*.png")):
        if png not in shots:
            problems.append(f"{png}: not taken by the browser check")
    for png, shot in shots.items():
        page = root / shot["page"]
        if not (folder / png).is_file():
            problems.append(f"{png}: missing")
        elif sha256(folder / png) != shot["png_sha256"]:
            problems.append(f"{png}: not the picture the browser check took")
        if not page.is_file() or sha256(page) != shot["page_sha256"]:
            problems.append(f"{png}: {shot['page']} changed since it was taken")
    pages = {p.relative_to(root).as_posix() for p in root.glob("lessons/*/README.md")} | {"README.md"}
    problems += [f"{page}: no screenshot" for page in sorted(pages - {s["page"] for s in shots.values()})]
    return problems


def test_the_screenshots_are_of_the_pages_as_they_are_now():
    problems = stale_screenshots(SCREENSHOTS, REPO)
    assert not problems, ("docs/screenshots is stale; bash tools/browser-check/ci.sh takes them again:\n  "
                          + "\n  ".join(problems))


def test_a_changed_page_makes_its_screenshot_stale(tmp_path):
    root = tmp_path / "course"
    (root / "lessons" / "day01-a").mkdir(parents=True)
    (root / "README.md").write_text("# A course\n")
    (root / "lessons" / "day01-a" / "README.md").write_text("# Day 1\n")
    shots = tmp_path / "shots"
    shots.mkdir()
    (shots / "index.png").write_bytes(b"png of the index")
    (shots / "day01-a.png").write_bytes(b"png of day 1")
    renderer = {name: sha256(REPO / name) for name in ("tools/browser-check/check.mjs",
                                                      "tools/browser-check/package-lock.json")}
    taken = {png: {"page": page, "page_sha256": sha256(root / page), "png_sha256": sha256(shots / png)}
             for png, page in (("index.png", "README.md"), ("day01-a.png", "lessons/day01-a/README.md"))}
    (shots / "pages.json").write_text(json.dumps({"renderer": renderer, "screenshots": taken}))
    assert stale_screenshots(shots, root) == []
    (root / "lessons" / "day01-a" / "README.md").write_text("# Day 1, rendered again\n")
    (root / "lessons" / "day02-b").mkdir()
    (root / "lessons" / "day02-b" / "README.md").write_text("# Day 2\n")
    (shots / "index.png").write_bytes(b"another picture")
    assert stale_screenshots(shots, root) == [
        "index.png: not the picture the browser check took",
        "day01-a.png: lessons/day01-a/README.md changed since it was taken",
        "lessons/day02-b/README.md: no screenshot"]


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


@in_chromium
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
