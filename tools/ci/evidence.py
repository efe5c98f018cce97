#!/usr/bin/env python3
"""The evidence record.yml's jobs write, staged for an artifact and collected into one tree.

    python3 tools/ci/evidence.py stage REPORT.json OUT [--gpu SLUG]   # in a record job, in the checkout
    python3 tools/ci/evidence.py collect ARTIFACTS                    # in the collect job, in the checkout

`stage` reads the JSON report of `coursectl record --json REPORT.json` and copies, for each lesson it
recorded, evidence/<lesson>/<gpu>/ and evidence/<lesson>/build/ into OUT (as they are after the record: the
whole folder), with the report beside them as OUT/record-report.json; with --gpu, a lesson recorded on
another GPU is refused (exit 1).

`collect` takes ARTIFACTS, a folder holding one folder per downloaded artifact, each as `stage` wrote it, and
puts every folder they hold into evidence/, each replacing the checkout's. Two artifacts writing one file with
different bytes (two runners' nvcc giving one lesson other build evidence) is refused, every such file
named, and nothing is written: exit 1. Bad input (a report or an artifact that is not such) is exit 2.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

REPORT = "record-report.json"
EVIDENCE = "evidence"
PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")   # a lesson id, a GPU slug, a file name


class Refused(Exception):
    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _part(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not PART.fullmatch(value) or value in (".", ".."):
        raise Refused(f"{where}: {what} {json.dumps(value)} is not a folder name coursectl writes")
    return value


def recorded_folders(report_path: Path, gpu: str | None = None) -> list[Path]:
    """evidence/<lesson>/<gpu> and evidence/<lesson>/build of every lesson the report says it recorded; with
    `gpu`, a lesson recorded on another GPU is refused (a runner of another model that has the model's label)."""
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"{report_path}: not a coursectl JSON report: {exc}")
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise Refused(f"{report_path}: not a coursectl JSON report: no results")
    if not str(report.get("command", "")).startswith("record"):
        raise Refused(f"{report_path}: a report of {report.get('command')!r}, not of coursectl record")
    folders: list[Path] = []
    for index, result in enumerate(report["results"]):
        if not isinstance(result, dict) or result.get("recorded") is not True:
            continue
        where = f"{report_path}: results[{index}]"
        lesson = _part(result.get("lesson"), "lesson", where)
        slug = _part(result.get("gpu"), "gpu", where)
        if gpu is not None and slug != gpu:
            raise Refused(f"{where}: lesson {lesson!r} was recorded on {slug}, not on {gpu}, the GPU of this job's "
                          "model: a runner of another model has its label", status=1)
        folders += [Path(EVIDENCE, lesson, slug), Path(EVIDENCE, lesson, "build")]
    return folders


def stage(report_path: Path, out: Path, root: Path = Path("."), gpu: str | None = None) -> list[Path]:
    """Copy what the report's record wrote into `out`; the folders copied, course-relative."""
    folders = recorded_folders(report_path, gpu)
    if out.exists():
        raise Refused(f"{out}: already there; stage into a new folder")
    out.mkdir(parents=True)
    for folder in folders:
        source = root / folder
        if source.is_symlink() or not source.is_dir():
            raise Refused(f"{folder}: the report says it was recorded, but there is no such folder", status=1)
        shutil.copytree(source, out / folder, symlinks=True)
    shutil.copyfile(report_path, out / REPORT)
    return folders


def _files(artifact: Path) -> dict[Path, Path]:
    """Every file under artifact/evidence/<lesson>/<folder>/, course-relative -> where it lies; anything else
    there (a link, a file outside such a folder) is refused."""
    files: dict[Path, Path] = {}
    base = artifact / EVIDENCE
    if not base.is_dir():
        return files
    for path in sorted(base.rglob("*")):
        relative = path.relative_to(artifact)
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise Refused(f"{artifact.name}: {relative}: not a plain file or folder")
        if path.is_dir():
            continue
        if len(relative.parts) < 4 or not all(PART.fullmatch(p) for p in relative.parts):
            raise Refused(f"{artifact.name}: {relative}: not in evidence/<lesson>/<gpu or build>/")
        files[relative] = path
    return files


def collect(artifacts: Path, root: Path = Path(".")) -> tuple[list[Path], int]:
    """Every artifact's folders into root/evidence/; (the folders written, the files in them)."""
    if not artifacts.is_dir():
        raise Refused(f"{artifacts}: no such folder")
    owners: dict[Path, tuple[str, str, Path]] = {}   # file -> (its sha256, the artifact, where it lies)
    clashes: list[str] = []
    for artifact in sorted(p for p in artifacts.iterdir() if p.is_dir()):
        for relative, path in _files(artifact).items():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if relative in owners and owners[relative][0] != digest:
                clashes.append(f"{relative}: {owners[relative][1]} and {artifact.name} differ")
            owners.setdefault(relative, (digest, artifact.name, path))
    if clashes:
        raise Refused("two artifacts write one file with different bytes; nothing was written:\n  "
                      + "\n  ".join(clashes), status=1)
    if not owners:
        raise Refused(f"{artifacts}: no artifact holds evidence/", status=1)
    folders = sorted({Path(*relative.parts[:3]) for relative in owners})
    for folder in folders:
        target = root / folder
        if target.is_symlink() or target.exists() and not target.is_dir():
            raise Refused(f"{folder}: not a folder in the checkout", status=1)
    for folder in folders:
        shutil.rmtree(root / folder, ignore_errors=True)
    for relative, (_, _, path) in owners.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, root / relative)
    return folders, len(owners)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    staged = commands.add_parser("stage", help="copy what a record job wrote, for its artifact")
    staged.add_argument("report", type=Path)
    staged.add_argument("out", type=Path)
    staged.add_argument("--gpu", metavar="SLUG", help="the GPU every lesson must have been recorded on")
    collected = commands.add_parser("collect", help="every artifact's evidence into evidence/")
    collected.add_argument("artifacts", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "stage":
            folders = stage(args.report, args.out, gpu=args.gpu)
            print(f"staged {len(folders)} folders into {args.out}" + "".join(f"\n  {f}" for f in folders))
        else:
            folders, count = collect(args.artifacts)
            print(f"collected {count} files in {len(folders)} folders" + "".join(f"\n  {f}" for f in folders))
    except Refused as exc:
        print(f"evidence.py: error: {exc}", file=sys.stderr)
        return exc.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
