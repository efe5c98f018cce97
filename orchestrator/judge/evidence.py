"""The evidence store: evidence/<lesson>/<gpu>/ holds a transcript and its metadata."""

from __future__ import annotations

import os
import re
import shutil
import stat
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

from ..errors import CoursectlError, EvidenceError, TranscriptError
from ..files import TEXT_LIMIT, atomic_write, check_inside, read_file, relative, sha256_bytes, sha256_file, source_lines
from ..cuda.resources import BuildEvidence
from ..words import command_line

T = TypeVar("T")
EVIDENCE = "evidence"   # the store's folder, in the course root
TRANSCRIPT = "transcript.txt"
META = "meta.json"
# What one evidence file may hold: a transcript is captured up to 16 MiB, and
# sanitizer logs and XML of a lesson are far smaller.
FILE_LIMIT = 64 * 1024 * 1024


# A line break, a C0 or C1 control character, DEL, or a Unicode line or paragraph separator.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_ISO_TIME = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?", re.ASCII)


def is_iso_date(text: str) -> bool:
    """Whether `text` is an ISO 8601 date (2026-11-30) or date and time (2026-11-30T11:18:15+00:00, or with Z),
    as record writes one, and a real one (no 2026-02-30)."""
    day, sep, time = text.partition("T")
    if not _ISO_DATE.fullmatch(day) or sep and not _ISO_TIME.fullmatch(time):
        return False
    try:
        date.fromisoformat(day)
        if sep:
            # Python 3.10's fromisoformat takes no Z and a fraction of 3 or 6 digits only: the time is
            # given to it as hh:mm:ss with its offset, the fraction (already matched above) left out.
            clock = re.sub(r"\.\d+", "", time)
            datetime.fromisoformat(f"{day}T{clock[:-1] + '+00:00' if clock.endswith('Z') else clock}")
    except ValueError:
        return False
    return True


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
    source_sha256: str          # the lesson's source without render's header lines (lesson_digest)
    transcript_sha256: str
    wall_seconds: float
    exit_status: int
    coursectl_version: str
    sanitizer_version: str | None = None
    files: dict[str, str] = Field(default_factory=dict)  # extra files (sanitizer reports) and their sha256
    peak_gbps: float | None = None
    peak_fp32_gflops: float | None = None
    sm_count: int | None = None
    max_sm_clock_mhz: int | None = None
    environment: dict = Field(default_factory=dict)   # clocks, throttling and other processes around the run
    repeat: dict = Field(default_factory=dict)   # with record --repeat: runs and per-field spread
    # sanitizer reports kept from an earlier record whose build has changed since
    stale_passes: list[str] = Field(default_factory=list)
    # Every local file the build read, by its path in the course: the source (as source_sha256) and its
    # headers. Evidence recorded before this field knows its source alone, and is judged by source_sha256.
    sources: dict[str, str] = Field(default_factory=dict)
    # The rules the evidence was recorded under (judge/rules.py:rules_of); None: recorded before they were kept.
    rules: dict | None = None

    @field_validator("lesson", "gpu_name", "gpu_slug", "compute_capability", "driver_version", "cuda_version",
                     "nvcc_version", "arch", "coursectl_version", "sanitizer_version")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        # These land in pages and in the Verified line of a lesson's source: a line break there would be code.
        if value is not None and _CONTROL.search(value):
            raise ValueError(f"{value!r} holds a line break or control character; it is one line of text")
        return value

    @field_validator("date")
    @classmethod
    def _iso_date(cls, value: str) -> str:
        if not is_iso_date(value):
            raise ValueError(f"{value!r} is not an ISO 8601 date or date and time (2026-11-30T11:18:15+00:00)")
        return value

    @field_validator("files")
    @classmethod
    def _plain_names(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            if not is_plain_name(name):
                raise ValueError(f"{name!r} is not the plain name of a file in the evidence folder")
        return files


class Evidence(BaseModel):
    meta: EvidenceMeta
    transcript: str
    directory: Path
    root: Path | None = None   # the course's root, which errors name its files from
    # The files of meta.json's `files` as load_evidence read them and checked them against their sha256:
    # what read_bytes gives, unread again.
    checked: dict[str, bytes] = Field(default={}, repr=False, exclude=True)

    def extra(self, name: str) -> str | None:
        """An extra file of this evidence (a sanitizer log or XML) as text; None if there is none.

        Raises EvidenceError for anything but a plain file in the evidence folder.
        """
        data = self.read_bytes(name)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, name: str) -> bytes | None:
        """One of the files recorded with the evidence (a sanitizer report), as it was written; None if absent.

        Raises EvidenceError for anything but a plain file in the evidence folder.
        """
        if not is_plain_name(name):
            return None
        if name in self.checked:
            return self.checked[name]
        with named_from(self.root):
            return read_evidence_file(self.directory / name)


@contextmanager
def named_from(course_root: Path | None):
    """An EvidenceError raised inside names its file as the course does, from its root: a report
    names no path of the machine that wrote it."""
    try:
        yield
    except EvidenceError as exc:
        if exc.path and course_root is not None:
            exc.path = relative(Path(exc.path), course_root)
        raise


def is_plain_name(name: str) -> bool:
    """Whether `name` names a file right in its folder: no path, not `.` or `..`."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def read_evidence_file(path: Path, limit: int = FILE_LIMIT) -> bytes | None:
    """The bytes of one file of the evidence store; None if there is none.

    Evidence is data anyone can edit, so only a regular file is read, and only
    up to `limit` bytes (files.read_file): a folder, a device, a FIFO, a link
    leading out of its folder, a file reached through a link leading out of the
    course (a lesson's or a GPU's folder linked elsewhere), or a bigger file
    raises EvidenceError naming it.
    """
    path = Path(path)
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            target = Path(os.path.realpath(path))
            if not target.is_relative_to(Path(os.path.realpath(path.parent))):
                raise EvidenceError(f"a link leading out of the evidence folder, to {target}", path=path)
    except (FileNotFoundError, ValueError):   # nothing there (or no name a file can have): nothing read
        return None
    except OSError as exc:
        raise EvidenceError(f"cannot read: {exc.strerror}", path=path) from None
    parts = path.parts[:-1]   # <root>/evidence/<lesson>/<gpu>/<file>: nothing of it through a link out of the course
    if EVIDENCE in parts:
        at = len(parts) - 1 - parts[::-1].index(EVIDENCE)   # the nearest folder of that name, as path.parents
        check_inside(path, Path(*parts[:at]) if at else Path(), EvidenceError)
    return read_file(path, limit, "an evidence file", EvidenceError)


# The source header lines render owns (and rewrites); lesson_digest leaves them out.
HEADER_LINE = re.compile(r"^//\s*(Build:|Run:|Verified\b)")


def lesson_digest(source: Path) -> str:
    """sha256 of a lesson's source without its Build/Run/Verified header lines.

    render rewrites those lines from the evidence, so they must not make the
    evidence look stale.
    """
    data = read_file(source, TEXT_LIMIT, "a lesson's source", required=True)
    # Bytes that are not UTF-8 are kept as they are (surrogateescape): the digest is of the file, which a
    # source that is not UTF-8 still is; the commands that read it as text say what is wrong with it.
    lines = source_lines(data.decode("utf-8", errors="surrogateescape"), keepends=True)
    kept = "".join(line for line in lines if not (line.startswith("//") and HEADER_LINE.match(line)))
    return sha256_bytes(kept.encode("utf-8", errors="surrogateescape"))


def source_digests(root: Path, source: str, files: list[str]) -> dict[str, str | None]:
    """sha256 of each local file a lesson's build reads, by its path in the course; None for one that is gone.

    The lesson's own source (`source`) is hashed as lesson_digest hashes it,
    without render's header lines; a header as it is.
    """
    out: dict[str, str | None] = {}
    for name in files:
        path = Path(root) / name
        try:
            out[name] = lesson_digest(path) if name == source else sha256_file(path)
        except (OSError, CoursectlError):
            out[name] = None
    return out


def source_changes(recorded: dict[str, str], now: dict[str, str | None]) -> list[tuple[str, str | None, str | None]]:
    """(file, its sha256 in the evidence, now) of each local file that differs, in the order of the evidence.

    A file the build reads now but did not then has no recorded digest; one
    it read then and no longer reads (or that is gone) has none now. Evidence
    without per-file digests (recorded before them) names no file here.
    """
    if not recorded:
        return []
    changed = [(name, digest, now.get(name)) for name, digest in recorded.items() if now.get(name) != digest]
    return changed + [(name, None, digest) for name, digest in now.items() if name not in recorded]


def describe_source_change(name: str, old: str | None, new: str | None) -> str:
    """`lessons/ext/common/check.cuh changed since the evidence`, and the words for a file added or gone."""
    if old is None:
        return f"{name} is read by the build now and was not when the evidence was recorded"
    if new is None:
        return f"{name} was read by the build when the evidence was recorded and is not now"
    return f"{name} changed since the evidence"


def first_error(exc: ValidationError) -> str:
    """`field.path: message` of a file's first validation error (no path for invalid JSON)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def evidence_root(course_root: Path) -> Path:
    return Path(os.path.join(course_root, EVIDENCE))


def evidence_of_no_lesson(course_root: Path, lesson_ids: Iterable[str]) -> list[str]:
    """The folders of evidence/ named for no lesson of the manifest: a lesson renamed or removed.

    Nothing reads them, so no verify would ever say they are stale.
    """
    known = set(lesson_ids)
    try:
        folders = sorted(entry.name for entry in os.scandir(evidence_root(course_root))
                         if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."))
    except OSError:   # no evidence/ yet, or not a folder: nothing to say here
        return []
    return [name for name in folders if name not in known]


def evidence_dir(course_root: Path, lesson_id: str, slug: str) -> Path:
    return Path(os.path.join(course_root, EVIDENCE, lesson_id, slug))


def list_gpus(course_root: Path, lesson_id: str) -> list[str]:
    """The GPUs a lesson has evidence for, a set an interrupted record left aside included.

    It only reads: putting such a set back is recover_evidence's, which record calls.
    """
    base = evidence_root(course_root) / lesson_id
    if not base.is_dir():
        return []
    found = set()
    for folder in base.iterdir():
        if not folder.name.startswith("."):
            # A transcript without its meta.json is evidence gone wrong, which load_evidence says; the build
            # folder holds neither.
            if folder.is_dir() and any(os.path.lexists(folder / name) for name in (META, TRANSCRIPT)):
                found.add(folder.name)
        elif (slug := _aside_slug(folder.name)) and not (base / slug).exists() \
                and _is_left_aside(folder, lesson_id, slug):
            found.add(slug)
    return sorted(found)


def load_evidence(course_root: Path, lesson_id: str, slug: str) -> Evidence | None:
    """The evidence for one lesson on one GPU model; None if there is none.

    Raises EvidenceError when it exists but cannot be trusted: unreadable
    metadata, a transcript whose hash is not the one recorded, a file that is
    not a plain file of the folder, or a set an interrupted record left aside.
    """
    with named_from(course_root):
        return _load_evidence(course_root, lesson_id, slug)


def _load_evidence(course_root: Path, lesson_id: str, slug: str) -> Evidence | None:
    directory = evidence_dir(course_root, lesson_id, slug)
    aside = _aside(directory)
    if not directory.exists() and _is_left_aside(aside, lesson_id, slug):
        raise EvidenceError(f"the evidence for {slug}, left aside by an interrupted record; "
                            f"`{command_line('coursectl', 'record', lesson_id)}` puts it back", path=aside)
    meta_path = directory / META
    data = read_evidence_file(meta_path)
    if data is None:
        if os.path.lexists(directory / TRANSCRIPT):
            raise EvidenceError("transcript without its metadata", path=meta_path)
        return None
    try:
        meta = EvidenceMeta.model_validate_json(data)
    except ValidationError as exc:
        raise EvidenceError(f"corrupt metadata: {first_error(exc)}", path=meta_path)
    transcript_path = directory / TRANSCRIPT
    data = read_evidence_file(transcript_path)
    if data is None:
        raise EvidenceError("metadata without its transcript", path=transcript_path)
    if sha256_bytes(data) != meta.transcript_sha256:
        raise EvidenceError("transcript does not match the sha256 in meta.json: it was edited "
                            "after recording", path=transcript_path)
    if meta.lesson != lesson_id or meta.gpu_slug != slug:
        raise EvidenceError(f"meta.json says lesson {meta.lesson!r} on {meta.gpu_slug!r} but lies "
                            f"in {lesson_id}/{slug}", path=meta_path)
    checked = {}
    for name, digest in meta.files.items():
        path = directory / name
        extra = read_evidence_file(path)
        if extra is None or sha256_bytes(extra) != digest:
            raise EvidenceError(f"{name} is missing or does not match its sha256 in meta.json", path=path)
        checked[name] = extra
    return Evidence(meta=meta, transcript=data.decode("utf-8", errors="replace"), directory=directory, root=course_root,
                    checked=checked)


class Recorded:
    """One lesson's evidence as the stages of verify --offline read it: its GPUs listed once, each GPU's set
    loaded once (load_evidence), its build evidence read once an architecture, and what judging made of
    each set (`parse`: judging.parse_evidence's) kept, so that no stage reads or parses a file again.

    A set that cannot be read (or parsed) raises the same error each time it is asked for.
    """

    def __init__(self, course_root: Path, lesson_id: str):
        self.root, self.lesson_id = Path(course_root), lesson_id
        self._slugs: list[str] | None = None
        self._loaded: dict[str, Evidence | None | EvidenceError] = {}
        self._builds: dict[str, BuildEvidence | None | EvidenceError] = {}
        self._parsed: dict[str, object] = {}

    def slugs(self) -> list[str]:
        if self._slugs is None:
            self._slugs = list_gpus(self.root, self.lesson_id)
        return list(self._slugs)

    def load(self, slug: str) -> Evidence | None:
        return _once(self._loaded, slug, lambda: load_evidence(self.root, self.lesson_id, slug), (EvidenceError,))

    def parse(self, slug: str, parse: Callable[[Evidence | None], T]) -> T:
        """`parse` of the set of `slug` (loaded once), made once: its result, or the EvidenceError or
        TranscriptError it raised, kept."""
        return _once(self._parsed, slug, lambda: parse(self.load(slug)), (EvidenceError, TranscriptError))

    def loaded(self) -> list[Evidence]:
        """The sets the stages have loaded, those that could be read."""
        return [kept for kept in self._loaded.values() if isinstance(kept, Evidence)]

    def build(self, arch: str) -> BuildEvidence | None:
        return _once(self._builds, arch, lambda: load_build_evidence(self.root, self.lesson_id, arch),
                     (EvidenceError,))


def _once(kept: dict, key: str, make: Callable, errors: tuple[type[Exception], ...]):
    """`make()` for `key`, made once into `kept`: its result, or the error of `errors` it raised, raised again."""
    if key not in kept:
        try:
            kept[key] = make()
        except errors as exc:
            kept[key] = exc
    return _given(kept[key])


def _given(kept):
    if isinstance(kept, Exception):
        raise kept
    return kept


def recover_evidence(course_root: Path, lesson_id: str) -> list[str]:
    """Finish the swaps of evidence sets an interrupted write_evidence left half done.

    Killed between its two renames, write_evidence leaves the old set in
    `.SLUG.old` and no SLUG: it is put back. Killed after them, both are
    there and the old set is removed. Only record calls this; every other
    command reads the store as it finds it. Returns one sentence per set.
    """
    base = evidence_root(course_root) / lesson_id
    if not base.is_dir():
        return []
    done = []
    for backup in sorted(base.iterdir()):
        slug = _aside_slug(backup.name)
        if slug is None or not _is_left_aside(backup, lesson_id, slug):
            continue
        directory = base / slug
        if directory.exists() or directory.is_symlink():
            shutil.rmtree(backup)
            done.append(f"removed {relative(backup, course_root)}: the evidence {slug} had before an interrupted "
                        "record")
        else:
            os.rename(backup, directory)
            done.append(f"put back {relative(directory, course_root)}: an interrupted record had left it aside in "
                        f"{backup.name}")
    return done


def write_evidence(course_root: Path, meta: EvidenceMeta, transcript: str,
                   extra: dict[str, bytes] | None = None) -> Path:
    """Replace one lesson's evidence for one GPU as a whole.

    The new set is written into a staging folder beside the old one, then
    swapped in with two renames; an interrupted write leaves the old set (or,
    between the renames, a backup that load_evidence restores).
    """
    directory = evidence_dir(course_root, meta.lesson, meta.gpu_slug)
    check_inside(directory.parent, course_root, EvidenceError)   # evidence/<lesson>/ linked out of the course
    directory.parent.mkdir(parents=True, exist_ok=True)
    data = transcript.encode("utf-8")
    meta = meta.model_copy(update={
        "transcript_sha256": sha256_bytes(data),
        "files": {name: sha256_bytes(blob) for name, blob in (extra or {}).items()}})
    staging = directory.parent / f".{directory.name}.new-{os.getpid()}"
    backup = _aside(directory)
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


def _aside(directory: Path) -> Path:
    """Where write_evidence keeps the old set of `directory` while it swaps the new one in."""
    return directory.parent / f".{directory.name}.old"


def _is_left_aside(folder: Path, lesson_id: str, slug: str) -> bool:
    """Whether `folder` holds a set write_evidence moved aside: its metadata names this lesson and GPU.

    Any other folder whose name starts with a dot is not evidence, and is left alone.
    """
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        data = read_evidence_file(folder / META)
        meta = EvidenceMeta.model_validate_json(data) if data is not None else None
    except (EvidenceError, ValidationError):
        return False
    return meta is not None and meta.lesson == lesson_id and meta.gpu_slug == slug


def _aside_slug(name: str) -> str | None:
    """The GPU of a set left aside (`.nvidia-h200.old` -> `nvidia-h200`); None for any other name."""
    match = re.fullmatch(r"\.([^.].*)\.old", name)
    return match.group(1) if match else None


def build_evidence_path(course_root: Path, lesson_id: str, arch: str) -> Path:
    return Path(os.path.join(course_root, EVIDENCE, lesson_id, "build", f"{arch}.json"))


def load_build_evidence(course_root: Path, lesson_id: str, arch: str):
    """ptxas' recorded report for one lesson and architecture, or None."""
    path = build_evidence_path(course_root, lesson_id, arch)
    with named_from(course_root):
        data = read_evidence_file(path)
        if data is None:
            return None
        try:
            return BuildEvidence.model_validate_json(data)
        except ValidationError as exc:
            raise EvidenceError(f"corrupt build evidence: {first_error(exc)}", path=path)


def write_build_evidence(course_root: Path, evidence: BuildEvidence) -> Path:
    path = build_evidence_path(course_root, evidence.lesson, evidence.arch)
    check_inside(path, course_root, EvidenceError)
    atomic_write(path, evidence.model_dump_json(indent=2) + "\n")
    return path
