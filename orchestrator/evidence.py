"""The evidence store: evidence/<lesson>/<gpu>/ holds a transcript and its metadata."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from pydantic import BaseModel, ValidationError

from .errors import EvidenceError
from .files import atomic_write, sha256_bytes
from .resources import BuildEvidence

TRANSCRIPT = "transcript.txt"
META = "meta.json"


class EvidenceMeta(BaseModel):
    lesson: str
    date: str                   # UTC, ISO 8601 date and time
    gpu_name: str
    gpu_slug: str
    compute_capability: str
    driver_version: str | None
    cuda_version: str | None
    nvcc_version: str | None
    arch: str
    flags: list[str]
    source_sha256: str
    transcript_sha256: str
    wall_seconds: float
    exit_status: int
    coursectl_version: str
    sanitizer_version: str | None = None
    files: dict[str, str] = {}  # extra files (sanitizer reports) and their sha256
    peak_gbps: float | None = None
    peak_fp32_gflops: float | None = None
    sm_count: int | None = None
    max_sm_clock_mhz: int | None = None
    environment: dict = {}      # clocks, throttling and other processes around the run
    repeat: dict = {}           # with record --repeat: runs and per-field spread
    stale_passes: list[str] = []  # sanitizer reports kept from an earlier record whose build has changed since


class Evidence(BaseModel):
    meta: EvidenceMeta
    transcript: str
    directory: Path

    def extra(self, name: str) -> str:
        return self.read_bytes(name).decode("utf-8", errors="replace")

    def read_bytes(self, name: str) -> bytes:
        """One of the files recorded with the evidence (a sanitizer report), as it was written."""
        return (self.directory / name).read_bytes()


# The source header lines render owns (and rewrites); lesson_digest leaves them out.
HEADER_LINE = re.compile(r"^//\s*(Build:|Run:|Verified\b)")


def lesson_digest(source: Path) -> str:
    """sha256 of a lesson's source without its Build/Run/Verified header lines.

    render rewrites those lines from the evidence, so they must not make the
    evidence look stale.
    """
    lines = Path(source).read_text(encoding="utf-8").splitlines(keepends=True)
    kept = "".join(line for line in lines if not HEADER_LINE.match(line))
    return sha256_bytes(kept.encode("utf-8"))


def _first_error(exc: ValidationError) -> str:
    """`field.path: message` of a file's first validation error (no path for invalid JSON)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def evidence_root(course_root: Path) -> Path:
    return Path(course_root) / "evidence"


def evidence_dir(course_root: Path, lesson_id: str, slug: str) -> Path:
    return evidence_root(course_root) / lesson_id / slug


def list_gpus(course_root: Path, lesson_id: str) -> list[str]:
    base = evidence_root(course_root) / lesson_id
    if not base.is_dir():
        return []
    for backup in base.glob(".*.old"):  # an interrupted write_evidence left its old set aside
        _restore_backup(base / backup.name[1:-len(".old")])
    return sorted(p.name for p in base.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and (p / META).exists())


def load_evidence(course_root: Path, lesson_id: str, slug: str) -> Evidence | None:
    """The evidence for one lesson on one GPU model; None if there is none.

    Raises EvidenceError when it exists but cannot be trusted: unreadable
    metadata, or a transcript whose hash is not the one recorded.
    """
    directory = evidence_dir(course_root, lesson_id, slug)
    _restore_backup(directory)
    meta_path = directory / META
    if not meta_path.exists():
        return None
    try:
        meta = EvidenceMeta.model_validate_json(meta_path.read_bytes())
    except ValidationError as exc:
        raise EvidenceError(f"corrupt metadata: {_first_error(exc)}", path=meta_path)
    except OSError as exc:
        raise EvidenceError(f"cannot read: {exc.strerror}", path=meta_path)
    transcript_path = directory / TRANSCRIPT
    try:
        data = transcript_path.read_bytes()
    except OSError:
        raise EvidenceError("metadata without its transcript", path=transcript_path)
    if sha256_bytes(data) != meta.transcript_sha256:
        raise EvidenceError("transcript does not match the sha256 in meta.json: it was edited "
                            "after recording", path=transcript_path)
    if meta.lesson != lesson_id or meta.gpu_slug != slug:
        raise EvidenceError(f"meta.json says lesson {meta.lesson!r} on {meta.gpu_slug!r} but lies "
                            f"in {lesson_id}/{slug}", path=meta_path)
    for name, digest in meta.files.items():
        path = directory / name
        if not path.exists() or sha256_bytes(path.read_bytes()) != digest:
            raise EvidenceError(f"{name} is missing or does not match its sha256 in meta.json", path=path)
    return Evidence(meta=meta, transcript=data.decode("utf-8", errors="replace"), directory=directory)


def write_evidence(course_root: Path, meta: EvidenceMeta, transcript: str,
                   extra: dict[str, bytes] | None = None) -> Path:
    """Replace one lesson's evidence for one GPU as a whole.

    The new set is written into a staging folder beside the old one, then
    swapped in with two renames; an interrupted write leaves the old set (or,
    between the renames, a backup that load_evidence restores).
    """
    directory = evidence_dir(course_root, meta.lesson, meta.gpu_slug)
    directory.parent.mkdir(parents=True, exist_ok=True)
    data = transcript.encode("utf-8")
    meta = meta.model_copy(update={
        "transcript_sha256": sha256_bytes(data),
        "files": {name: sha256_bytes(blob) for name, blob in (extra or {}).items()}})
    staging = directory.parent / f".{directory.name}.new-{os.getpid()}"
    backup = directory.parent / f".{directory.name}.old"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        atomic_write(staging / TRANSCRIPT, data)
        for name, blob in (extra or {}).items():
            atomic_write(staging / name, blob)
        atomic_write(staging / META, meta.model_dump_json(indent=2) + "\n")
        shutil.rmtree(backup, ignore_errors=True)
        if directory.exists():
            os.rename(directory, backup)
        os.rename(staging, directory)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _restore_backup(directory: Path) -> None:
    backup = directory.parent / f".{directory.name}.old"
    if not directory.exists() and backup.is_dir():
        os.rename(backup, directory)


def build_evidence_path(course_root: Path, lesson_id: str, arch: str) -> Path:
    return evidence_root(course_root) / lesson_id / "build" / f"{arch}.json"


def load_build_evidence(course_root: Path, lesson_id: str, arch: str):
    """ptxas' recorded report for one lesson and architecture, or None."""
    path = build_evidence_path(course_root, lesson_id, arch)
    if not path.exists():
        return None
    try:
        return BuildEvidence.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise EvidenceError(f"corrupt build evidence: {_first_error(exc)}", path=path)


def write_build_evidence(course_root: Path, evidence: BuildEvidence) -> Path:
    path = build_evidence_path(course_root, evidence.lesson, evidence.arch)
    atomic_write(path, evidence.model_dump_json(indent=2) + "\n")
    return path
