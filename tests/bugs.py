"""Planted-bug copies of the lessons, made from tests/fixtures/bugs/*.yaml.

Each mutation replaces one exact piece of a lesson's source. A bug course is
a copy of the course holding only that lesson, with the mutated source and
the lesson's real evidence, so `verify` judges the bug against the truth.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from orchestrator.manifest.shorthand import written_out

ROOT = Path(__file__).resolve().parent.parent
BUGS = Path(__file__).resolve().parent / "fixtures" / "bugs"


def load_mutations() -> list[dict]:
    mutations = []
    for path in sorted(BUGS.glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text()):
            entry["file"] = path.name
            mutations.append(entry)
    return mutations


def mutation(lesson: str, name: str) -> dict:
    for entry in load_mutations():
        if entry["lesson"] == lesson and entry["name"] == name:
            return entry
    raise KeyError(f"{lesson}/{name}")


def make_bug_course(entry: dict, dest: Path, root: Path = ROOT) -> Path:
    """Write a one-lesson course under dest with the mutation applied; return its manifest."""
    manifest = written_out(yaml.safe_load((root / "lessons.yaml").read_text()), root)
    [lesson] = [l for l in manifest["lessons"] if l["id"] == entry["lesson"]]
    source = root / lesson["source"]
    text = source.read_text()
    count = text.count(entry["old"])
    if count != 1:
        raise ValueError(f"{entry['file']}: {entry['name']}: 'old' occurs {count} times in {source}")
    target = dest / lesson["source"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text.replace(entry["old"], entry["new"]))
    if lesson.get("prose"):
        shutil.copy(root / lesson["prose"], dest / lesson["prose"])
    evidence = root / "evidence" / lesson["id"]
    if evidence.is_dir():
        shutil.copytree(evidence, dest / "evidence" / lesson["id"])
    manifest["lessons"] = [lesson]
    path = dest / "lessons.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path
