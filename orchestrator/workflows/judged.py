"""verify --offline's verdicts kept: a lesson is judged again only where something it is judged from changed.

Offline, a lesson's result is a function of what its stages read, and of nothing else (no clock, no GPU, no
variable of the environment): judging evidence that did not change against an entry, sources and builds
that did not change gives the result it gave last time. `Judged` keeps each lesson's result after its
stages (before it settles) in the build cache, beside a key of everything it was judged from:

- coursectl's own code (every file of the package, by sha256), Python's version and those of the
  libraries that parse and judge (pydantic, pydantic-core, simpleeval, regex, PyYAML);
- verify's options, nvcc's version, the course's root, what lessons.yaml declares for every lesson (all
  but its lessons), the lesson's entry, and the lines of lessons.yaml that entry is on (a reason names them);
- each of the lesson's builds as this run found them: its command, nvcc's diagnostics, ptxas' report, and
  every local file the compilation read, by sha256 (the build cache hashed them to find the build);
- every file and folder under evidence/<lesson>/, by its status: kind, device, inode, size, and
  modification and change times (a file rewritten with its times put back has another change time; a
  file added or removed changes its folder's times);
- and, kept with the entry, the files the judging read that no build read (a header the evidence names
  that the program no longer includes), by their status too.

Only a lesson that came out of its stages clean is kept: no reason, nothing stale, verified. A failure is
judged again every time, so that what it says is always of now. A lesson whose runs share claims across
them (`runs:`) is judged every time too: those claims are judged on every run's parsed transcript. A file
changed within RACY_S of its status being taken could change again within the same tick of the
filesystem's clock, its status the same: such a lesson is not kept this time (as git treats an index entry
written in the second its file changed). `verify --offline --rejudge` judges every lesson again and keeps
what it finds; a machine without the cache (the pull request's job on a fresh clone) judges them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from ..cuda.build import BuildResult, cache_root
from ..cuda.toolchain import Toolchain
from ..files import atomic_write, read_file
from ..judge.evidence import evidence_root
from ..judge.results import LessonResult, Options, Status, status_of as status_of_result
from ..manifest.model import Lesson, Manifest

FORMAT = 1
FOLDER = "judged"          # under the build cache's root
RACY_S = 2.0               # a file changed this recently is not trusted to its status (see above)
ENTRY_LIMIT = 64 * 2**20   # the most one kept result may hold (a transcript is captured up to 16 MiB)
LIBRARIES = ("pydantic", "pydantic-core", "simpleeval", "regex", "PyYAML")
PACKAGE = Path(__file__).resolve().parent.parent
_CODE: list[str] = []      # coursectl's own code's digest, made once a process


def code_digest() -> str:
    """sha256 of every file of coursectl's package (its path and bytes), Python's version and the judging
    libraries' versions: any change to what judges makes every kept result another's."""
    if not _CODE:
        digest = hashlib.sha256(sys.version.encode())
        for name in LIBRARIES:
            try:
                digest.update(f"\0{name} {metadata.version(name)}".encode())
            except metadata.PackageNotFoundError:
                digest.update(f"\0{name} -".encode())
        for folder, dirs, files in os.walk(PACKAGE):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(folder) / name
                digest.update(f"\0{path.relative_to(PACKAGE).as_posix()}\0".encode())
                digest.update(path.read_bytes())
        _CODE.append(digest.hexdigest())
    return _CODE[0]


def file_status(path: str | Path) -> list | None:
    """A file's or folder's status as a key holds it (None: there is none): kind and permissions, device,
    inode, size, modification and change times; for a symbolic link, where it points and its target's too."""
    try:
        seen = os.lstat(path)
    except OSError:
        return None
    mine = [seen.st_mode, seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns]
    if stat.S_ISLNK(seen.st_mode):
        try:
            mine += [os.readlink(path), file_status(os.path.realpath(path))]
        except OSError:
            mine.append(None)
    return mine


def _tree(folder: Path) -> list:
    """Every entry under `folder` (itself first), each with its status, in a stable order; links not followed."""
    found: list = [["", file_status(folder)]]
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError as exc:
            found.append([os.path.relpath(current, folder), f"unreadable: {exc.errno}"])
            continue
        for entry in entries:
            found.append([os.path.relpath(entry.path, folder), file_status(entry.path)])
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
    return found


class Judged:
    """The kept offline results of one course, for one verify --offline (its options and toolchain)."""

    def __init__(self, manifest: Manifest, toolchain: Toolchain, options: Options):
        self.manifest = manifest
        self.folder = cache_root(manifest) / FOLDER
        self.rejudge = options.rejudge
        # lessons.yaml's lines, a lesson's apart: its key paths (tuples of names and indexes) and lines, in the
        # order the file gives them, which the same file always gives.
        course_lines: list = []
        self._lines: dict[int, list] = {}
        for key, line in manifest.lines.items():
            if len(key) > 1 and key[0] == "lessons" and isinstance(key[1], int):
                self._lines.setdefault(key[1], []).append((key[2:], line))
            else:
                course_lines.append((key, line))
        self.common = {"format": FORMAT, "code": code_digest(), "root": str(Path(manifest.root).resolve()),
                       "options": options.model_dump(mode="json", exclude={"jobs", "rejudge"}),
                       "nvcc": toolchain.nvcc_version, "course": manifest.model_dump(mode="json", exclude={"lessons"}),
                       "course lines": course_lines}
        self._index = {lesson.id: index for index, lesson in enumerate(manifest.lessons)}

    def _evidence(self, lesson: Lesson) -> list:
        return _tree(evidence_root(self.manifest.root) / lesson.id)

    def _key(self, lesson: Lesson, builds: list[BuildResult], evidence: list) -> str:
        """The key of `lesson` judged with `builds` and `evidence` (its _tree)."""
        material = {**self.common, "lesson": lesson.model_dump(mode="json"),
                    "lines": self._lines.get(self._index.get(lesson.id, -1), []),
                    "builds": [build.model_dump(mode="json", exclude={"cached", "seconds"}) for build in builds],
                    "evidence": evidence}
        return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()

    def path_of(self, lesson: Lesson) -> Path:
        """The file that keeps the lesson's result, in the build cache."""
        name = hashlib.sha256(f"{self.common['root']}\0{lesson.id}".encode()).hexdigest()[:24]
        return self.folder / f"{name}.json"

    def take(self, lesson: Lesson, builds: list[BuildResult]) -> LessonResult | None:
        """The lesson's result as it was last judged, where nothing it was judged from changed since; else None."""
        if self.rejudge:
            return None
        try:
            data = read_file(self.path_of(lesson), ENTRY_LIMIT, "a kept result")
            if data is None:
                return None
            head, _, body = data.partition(b"\n")
            entry = json.loads(head)
            if entry.get("key") != self._key(lesson, builds, self._evidence(lesson)):
                return None
            root = Path(self.manifest.root)
            if any(file_status(root / name) != seen for name, seen in entry["files"]):
                return None
            result = LessonResult.model_validate_json(body)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, ValidationError):
            return None   # an entry that cannot be read or trusted is no entry: the lesson is judged
        result.builds = list(builds)   # as this run found them: cached, their seconds
        return result

    def keep(self, lesson: Lesson, builds: list[BuildResult], result: LessonResult, read: list[str]) -> None:
        """Keep a result that came out of the stages clean, with the files (course paths) its judging read that
        no build read; where one of them, or of the lesson's evidence, changed too recently to trust, nothing."""
        if status_of_result(result) is not Status.PASS or not builds:
            return
        root = Path(self.manifest.root)
        built = {name for build in builds for name in build.sources}
        others = sorted(set(read) - built)
        if any(os.path.isabs(name) or os.path.normpath(name).startswith("..") for name in others):
            return   # a name the evidence gives outside the course: its status is not looked at, nor kept
        files = [[name, file_status(root / name)] for name in others]
        evidence = self._evidence(lesson)   # walked once, for the key and for the change times below
        newest = max((seen[5] for _, seen in [*files, *evidence] if isinstance(seen, list)), default=0)
        if newest > time.time_ns() - RACY_S * 1e9:
            return
        key = self._key(lesson, builds, evidence)
        # The key and the files on the first line, the result after it: a look-up that finds another key reads
        # one line's worth of JSON, and the result is validated from its JSON at once.
        head = json.dumps({"format": FORMAT, "lesson": lesson.id, "key": key, "files": files})
        try:
            # Not durable: an entry a crash cut short does not parse, and is no entry.
            atomic_write(self.path_of(lesson), f"{head}\n{result.model_dump_json()}\n", durable=False)
        except OSError:
            pass   # a cache that cannot be written only costs the next run its judging

