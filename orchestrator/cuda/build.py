"""nvcc builds, cached by every local file they read, flags, architecture, nvcc, host compiler and environment.

The cache is content-addressed: an entry is
`$COURSECTL_CACHE/<arch>-<variant>/<key>/<headers>/`, where `key` hashes the
lesson's source, its flags, the architecture, the variant, the binary's name,
nvcc's version, the host programs nvcc runs (the host compiler, the
assembler and the linker: resolved path and sha256) and the variables of the
environment that nvcc and the host compiler read (NVCC_APPEND_FLAGS, CPATH,
...), and `headers` the local files the compilation read
besides the source (nvcc's own dependency list, `-MD -MF`), each relative
to the source's folder. No lesson id is part of it: lessons, and copies of
a course, that build the same inputs share one entry. The headers of an
entry are known only once it is built, so its stamp lists them with their
sha256, and the places inside the course where the preprocessor looked for
a header and found none (`absent`), and a lookup takes the entry whose
listed files all still match and whose absent files are still absent.
Files outside the course root (the system's and CUDA's headers) are left
to the nvcc version.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from concurrent.futures import Executor, Future
from pathlib import Path

from pydantic import BaseModel, Field

from ..errors import BuildError, CoursectlError, UsageError
from ..files import TEXT_LIMIT, atomic_write, check_inside, parse_json, read_file, relative, sha256_bytes, sha256_file
from .buildkey import flag_files, key_of, headers_key, host_programs, key_material, what_changed
from .includes import places_looked
from .units import link_failure, unit_commands
from ..manifest.model import Lesson, Manifest
from ..names import check_arch
from ..process import CommandResult, Runner, run_command
from .resources import KernelResources, parse_resources
from .stamp import STAMP, STAMP_LIMIT, new_stamp, publish, stamped_resources, trusted_stamp
from ..trace import span



class BuildResult(BaseModel):
    lesson: str
    arch: str
    variant: str = "plain"   # "plain" or "lineinfo" (sanitizer builds)
    binary: Path
    cached: bool
    seconds: float = 0.0
    command: list[str]
    diagnostics: str = ""    # nvcc's stderr, file:line warnings included, ptxas' report left out
    resources: dict[str, KernelResources] = Field(default_factory=dict)   # per kernel, from ptxas
    notes: list[str] = Field(default_factory=list)   # e.g. why the cache entry could not be used
    # every local file the compilation read, the source first: course path -> sha256
    sources: dict[str, str] = Field(default_factory=dict)


def mangled_kernels(builds: Iterable[BuildResult]) -> list[str]:
    """The program's kernels as ptxas reported them in these builds, by mangled name: what a sanitizer pass's
    kernel filters are matched against."""
    return sorted({kernel.mangled for build in builds for kernel in build.resources.values()})


def build_detail(build: BuildResult) -> str:
    """What a progress line says of a build: which one, and cached or how long it took (`sm_90 -lineinfo, 2.1 s`)."""
    which = " ".join([build.arch, *variant_flags(build.variant)])
    return f"{which}, {'cached' if build.cached else f'{build.seconds:.1f} s'}"


# The folders of a course that hold what it is made of; the build cache lies in none of them.
COURSE_FOLDERS = ("evidence", "templates", "lessons")


def cache_root(manifest: Manifest) -> Path:
    """$COURSECTL_CACHE, a relative one taken from the folder coursectl was started in (it never changes
    folder; nvcc runs in each lesson's), else .coursectl/cache in the course.

    A cache inside the course's evidence/, templates/ or lessons/ is refused
    (UsageError): its build folders would become part of the course. Once per course, $COURSECTL_CACHE, folder.
    """
    return _cache_root(manifest.root, os.environ.get("COURSECTL_CACHE"), os.getcwd())


@functools.lru_cache(maxsize=16)
def _cache_root(course: Path, env: str | None, _cwd: str) -> Path:
    if not env:
        return course / ".coursectl" / "cache"
    root = Path(os.path.abspath(env))
    for name in COURSE_FOLDERS:
        folder = (course / name).resolve()
        if root.resolve().is_relative_to(folder):
            raise UsageError(f"COURSECTL_CACHE={env} lies inside the course's {name}/ ({folder}), which its "
                             f"build folders would fill",
                             hint="give COURSECTL_CACHE a folder outside the course's evidence/, templates/ and "
                                  "lessons/, or leave it unset for .coursectl/cache")
    return root


def variant_flags(variant: str) -> list[str]:
    return ["-lineinfo"] if variant == "lineinfo" else []


def nvcc_command(nvcc: str, manifest: Manifest, lesson: Lesson, arch: str, output: Path | str,
                 variant: str = "plain") -> list[str]:
    """The exact argument list coursectl runs.

    It is the reader's command plus --resource-usage, which makes ptxas report
    each kernel's registers, spills and shared memory (the build evidence)
    without changing the code it generates.
    """
    if lesson.sources and len(lesson.sources) > 1:   # compiled unit by unit, then linked: unit_commands
        return [nvcc, *manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}", "--resource-usage",
                "-o", str(output), *map(str, manifest.source_paths(lesson))]
    return [nvcc, *manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}",
            "--resource-usage", "-MD", "-MF", str(dependency_file(output)), "-o", str(output),
            str(manifest.source_path(lesson))]


def dependency_file(output: Path | str) -> Path:
    """Where nvcc writes the make rule listing every file a build read (`-MD -MF`)."""
    return Path(f"{output}.d")


def display_command(manifest: Manifest, lesson: Lesson, arch: str, variant: str = "plain") -> list[str]:
    """The build command as a reader types it, in the folder of the lesson's source (where nvcc runs)."""
    folder = manifest.source_path(lesson).parent
    return ["nvcc", *manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}",
            "-o", lesson.binary_name,
            *(Path(os.path.relpath(unit, folder)).as_posix() for unit in manifest.source_paths(lesson))]


# -- what changed since the last build of a source -----------------------------------------------
# The cache holds no lesson id, so a first-level miss cannot find the entry it replaces. For that,
# the key material of each lesson's last build (by lesson, architecture, variant and the source's
# path) is kept beside the entries, and a miss names what differs from it.
LAST_BUILDS = "last_builds"   # under the cache root; not an architecture, so never an entry's folder


def _last_build(manifest: Manifest, lesson: Lesson, arch: str, variant: str) -> Path:
    where = sha256_bytes(str(manifest.source_path(lesson).absolute()).encode())[:12]
    return cache_root(manifest) / LAST_BUILDS / f"{lesson.id}-{arch}-{variant}-{where}.json"


def _record(path: Path) -> bytes | None:
    """The record of a lesson's last build as stored, or None: never written, or it cannot be read."""
    try:
        return read_file(path, STAMP_LIMIT, "a record of the last build")
    except (OSError, CoursectlError):
        return None


def _remember(path: Path, material: dict, previous: bytes | None) -> None:
    """Keep `material` as the last build of its lesson, where `previous` (the record read) is not that already;
    a failure only costs the next miss its explanation."""
    text = json.dumps(material, sort_keys=True)
    if previous == text.encode():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text, durable=False)
    except (OSError, CoursectlError):
        pass


def parse_dependencies(text: str) -> list[str]:
    """The prerequisites of the make rule nvcc writes (`-M`, `-MD -MF`): every file the compilation read.

    nvcc writes `target : a.cu \\` and one file a line after it, a space in a
    name escaped as `\\ `.
    """
    joined = re.sub(r"\\\r?\n", " ", text)
    tokens = [re.sub(r"\\([ #])", r"\1", token).replace("$$", "$")
              for token in re.findall(r"(?:\\.|[^\s\\])+", joined)]
    colon = next((n for n, token in enumerate(tokens) if token == ":" or token.endswith(":")), None)
    return tokens[colon + 1:] if colon is not None else []


def local_files(paths: list[str], folder: Path, root: Path) -> list[Path]:
    """The files of `paths` (relative to `folder`, where nvcc ran) that lie inside the course root, in order.

    The system's and CUDA's headers lie outside it; the nvcc version stands for them.
    A path inside the root that is a link to a file outside it is the course's
    too (the build refuses it: _headers_read), not a system header.
    """
    inside, seen = [], set()
    lexical_root, resolved_root = Path(os.path.normpath(Path(root).absolute())), Path(root).resolve()
    for name in paths:
        path = Path(os.path.normpath(Path(folder) / name))
        if path not in seen and (path.is_relative_to(lexical_root) or path.resolve().is_relative_to(resolved_root)):
            seen.add(path)
            inside.append(path)
    return inside


def hash_files(paths: list[Path]) -> dict[Path, str | None]:
    """sha256 of each file; None for one that cannot be read (gone, or a folder or a FIFO now)."""
    return {path: sha256_file(path) for path in paths}


_DIAG = re.compile(r"^(?P<file>.+?\.(?:cu|cuh|h|hpp|cpp|cc|cxx|c))[(:](?P<line>\d+)")


def build_lesson(manifest: Manifest, lesson: Lesson, arch: str, nvcc: str, nvcc_version: str | None,
                 variant: str = "plain", runner: Runner = run_command) -> BuildResult:
    """Build one lesson for one architecture, or return the cached binary.

    nvcc runs in the folder of the lesson's source, so a relative path in its
    flags (`-Icommon`) means what it means in the page's build command.

    Each build works in a folder of its own beside its cache entries: nvcc
    writes the binary there, and its temporary files too (TMPDIR), so that
    parallel builds of one entry never share a path and an interrupted nvcc
    leaves nothing in /tmp. Only a build that succeeded becomes the entry,
    binary, dependency list and stamp in one rename; the folder is removed on
    every way out.
    """
    check_arch(arch, "architecture")
    source_path = manifest.source_path(lesson)
    folder = source_path.parent
    units = manifest.source_paths(lesson)
    texts = []
    for unit in units:
        text = read_file(unit, TEXT_LIMIT, "a lesson's source", BuildError)
        if text is None:
            raise BuildError("cannot read source: No such file or directory", path=unit)
        texts.append(text)
    source = texts[0]
    flags = manifest.flags(lesson) + variant_flags(variant)
    material = key_material(source, flags, arch, nvcc_version, variant, lesson.binary_name,
                            host=host_programs(flags, folder))
    if len(units) > 1:   # the other units, by their paths from nvcc's folder (one program only when all are it)
        material["units"] = {Path(os.path.relpath(unit, folder)).as_posix(): sha256_bytes(text)
                             for unit, text in zip(units[1:], texts[1:])}
    named = flag_files(flags, folder, manifest.root)
    if named:            # a file a flag names (`--options-file`, a linker script): an input as much as the source
        material["inputs"] = named
    key = key_of(material)
    group = cache_root(manifest) / f"{arch}-{variant}" / key
    entry, info, misses = _lookup(group, lesson.binary_name, folder, manifest.root)
    last = _last_build(manifest, lesson, arch, variant)
    previous = _record(last)
    digests = {unit: sha256_bytes(text) for unit, text in zip(units, texts)}
    if entry is not None:
        _remember(last, material, previous)
        binary = entry / lesson.binary_name
        stderr = info["diagnostics"]
        return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=True,
                           command=nvcc_command(nvcc, manifest, lesson, arch, binary, variant),
                           diagnostics=_without_ptxas(stderr), resources=stamped_resources(entry, info),
                           sources=_sources(manifest, digests, folder, info["headers"], named))
    group.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".build", dir=group))
    try:
        temporary = work / "tmp"
        temporary.mkdir()
        output = work / lesson.binary_name
        result, diagnostics, lists = _compile(runner, nvcc, manifest, lesson, arch, output, variant, temporary)
        if not result.ok or not output.is_file():
            first = next((m for m in map(_DIAG.match, diagnostics.splitlines()) if m), None)
            line = int(first.group("line")) if first else None
            link = link_failure(diagnostics, lesson)   # in the message: every report of the failure says it
            raise BuildError(f"nvcc failed for lesson {lesson.id!r} ({arch}):\n{result.describe()}"
                             + (f"\n{link}" if link else ""), path=manifest.source_path(lesson), line=line,
                             hint="fix the diagnostics above; the lesson was not run")
        shutil.rmtree(temporary)
        headers: dict[str, str] = {}
        absent: list[str] = []
        for unit, listed in zip(units, lists):
            mine = _headers_read(listed, units, folder, manifest.root)
            headers.update(mine)
            absent += [name for name in _absent(unit, mine, manifest.flags(lesson), folder, manifest.root)
                       if name not in absent]
        entry = group / headers_key(headers, absent)
        binary = entry / lesson.binary_name
        display = nvcc_command(nvcc, manifest, lesson, arch, binary, variant)
        for unit_list in lists if len(units) > 1 else []:
            unit_list.unlink(missing_ok=True)
        for leftover in work.glob(f"{lesson.binary_name}.*.o"):
            leftover.unlink()
        resources = parse_resources(diagnostics)
        atomic_write(work / STAMP, new_stamp(display, diagnostics, result.seconds, output, headers, absent, resources))
        publish(work, entry, lesson.binary_name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not misses:
        misses = _changed_since(previous, material, relative(source_path, manifest.root))
    _remember(last, material, previous)
    return BuildResult(lesson=lesson.id, arch=arch, variant=variant, binary=binary, cached=False,
                       seconds=result.seconds, command=display, diagnostics=_without_ptxas(diagnostics),
                       resources=resources, notes=misses,
                       sources=_sources(manifest, digests, folder, headers, named))


def _compile(runner: Runner, nvcc: str, manifest: Manifest, lesson: Lesson, arch: str, output: Path,
             variant: str, temporary: Path) -> tuple[CommandResult, str, list[Path]]:
    """Run nvcc: one command for one file, else each unit's compile and the link (unit_commands), stopping at
    the first that fails. (the last command's result, every command's stderr, each unit's dependency list)."""
    env = {"TMPDIR": str(temporary)}
    folder = manifest.source_path(lesson).parent
    if not (lesson.sources and len(lesson.sources) > 1):
        with span(f"nvcc {arch} {variant}", f"{lesson.id} build"):
            result = runner(nvcc_command(nvcc, manifest, lesson, arch, output, variant), timeout=600, cwd=folder,
                            env=env)
        return result, result.stderr.decode("utf-8", errors="replace"), [dependency_file(output)]
    compiles, link = unit_commands(nvcc, [*manifest.flags(lesson), *variant_flags(variant), f"-arch={arch}"],
                                   manifest.source_paths(lesson), output)
    said, seconds = [], 0.0
    for command in [*(command for command, _ in compiles), link]:
        with span(f"nvcc {arch} {variant}", f"{lesson.id} build"):
            result = runner(command, timeout=600, cwd=folder, env=env)
        said.append(result.stderr.decode("utf-8", errors="replace"))
        seconds += result.seconds
        if not result.ok:
            break
    return result.model_copy(update={"seconds": seconds}), "".join(said), [listed for _, listed in compiles]


def _headers_read(dependencies: Path, units: list[Path], folder: Path, root: Path) -> dict[str, str]:
    """The local files a finished build read besides its source: path relative to the source's folder -> sha256."""
    try:
        listed = parse_dependencies(dependencies.read_text(encoding="utf-8", errors="surrogateescape"))
    except OSError as exc:
        raise BuildError(f"nvcc wrote no dependency list ({exc.strerror})", path=dependencies)
    own = {Path(os.path.normpath(unit)) for unit in units}
    files = [path for path in local_files(listed, folder, root) if path not in own]
    for path in files:
        check_inside(path, root, BuildError)   # a header the course names that is a link out of it
    digests = hash_files(files)
    return {Path(os.path.relpath(path, folder)).as_posix(): digest for path, digest in digests.items()
            if digest is not None}


def _absent(source: Path, headers: dict[str, str], flags: list[str], folder: Path, root: Path) -> list[str]:
    """Where, inside the course, the preprocessor looked for the headers of a finished build and found nothing
    (relative to the source's folder): a file that appears there is read instead of one in `headers`."""
    looked = places_looked(source, [folder / name for name in headers], flags, root)
    return [Path(os.path.relpath(path, folder)).as_posix() for path in looked]


def _sources(manifest: Manifest, units: dict[Path, str], folder: Path, headers: dict[str, str],
             named: dict[str, str | None]) -> dict[str, str]:
    """BuildResult.sources: the program's files, the source first, then their headers and the files the flags
    name, by their paths in the course."""
    out = {relative(unit, manifest.root): digest for unit, digest in units.items()}
    for name, sha in [*headers.items(), *named.items()]:
        if sha is not None:
            out.setdefault(relative(folder / name, manifest.root), sha)
    return out


def _changed_since(previous: bytes | None, material: dict, source_name: str) -> list[str]:
    """Why the lesson's last build (its record, `previous`) does not serve now: `[... since the last build;
    rebuilt]`, or [] where there was none (or its record cannot be read)."""
    if previous is None:
        return []
    try:
        before = parse_json(previous)
    except ValueError:
        return []
    if not isinstance(before, dict) or before == material:
        return []
    try:
        said = what_changed(before, material, source_name)
    except (TypeError, AttributeError):   # a record edited by hand into other shapes says nothing
        return []
    return [f"{_listed(said)} since the last build; rebuilt"] if said else []


def _lookup(group: Path, binary_name: str, folder: Path, root: Path) -> tuple[Path | None, dict | None, list[str]]:
    """(entry, stamp, []) of the entry of `group` whose headers all still match; else (None, None, why not).

    Why not: the newest entry's files that changed since it was built, or an
    entry that cannot be trusted; nothing when there was no entry at all.
    """
    try:
        candidates = sorted(p for p in group.iterdir() if not p.name.startswith(".") and p.is_dir())
    except OSError:
        return None, None, []
    newest: tuple[float, list[str], list[str]] | None = None
    untrusted: list[str] = []
    for entry in candidates:
        info, miss = trusted_stamp(entry, binary_name)
        if info is None:
            if miss:
                untrusted.append(miss)
            continue
        paths = {name: Path(os.path.normpath(folder / name)) for name in info["headers"]}
        now = hash_files(list(paths.values()))
        changed = [relative(paths[name], root) for name, digest in info["headers"].items()
                   if now[paths[name]] != digest]
        appeared = [relative(folder / name, root) for name in info.get("absent", [])
                    if Path(os.path.normpath(folder / name)).is_file()]
        if not changed and not appeared:
            return entry, info, []
        built = (entry / STAMP).stat().st_mtime
        if newest is None or built > newest[0]:
            newest = (built, changed, appeared)
    if newest is not None:
        _, changed, appeared = newest
        said = " and ".join(f"{_listed(names)} {what}" for names, what in ((changed, "changed"),
                                                                          (appeared, "appeared")) if names)
        return None, None, [f"{said} since the cached build; rebuilt"]
    return None, None, untrusted


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class SharedBuilds:
    """Builds submitted to a pool once per set of inputs.

    Lessons that build one source with the same flags, architecture and
    variant share a single build (and cache entry): the second lesson's
    future gets the first one's result, named for it.
    """

    def __init__(self, pool: Executor, nvcc: str, nvcc_version: str | None, runner: Runner = run_command):
        self.pool, self.nvcc, self.nvcc_version, self.runner = pool, nvcc, nvcc_version, runner
        self._first: dict[tuple, tuple[str, Future]] = {}
        self._real: dict[Path, str] = {}   # each source's realpath, looked up once a run (a walk of its folders)

    def submit(self, manifest: Manifest, lesson: Lesson, arch: str, variant: str = "plain") -> Future:
        cache_root(manifest)   # a cache that is refused is refused here, in the thread that submits, not in a build
        real = self._real
        units = [real[unit] if unit in real else real.setdefault(unit, os.path.realpath(unit))
                 for unit in manifest.source_paths(lesson)]
        inputs = (tuple(units), tuple(manifest.flags(lesson)), arch, variant)
        if inputs not in self._first:
            future = self.pool.submit(build_lesson, manifest, lesson, arch, self.nvcc, self.nvcc_version, variant,
                                      self.runner)
            self._first[inputs] = (lesson.id, future)
            return future
        first_id, first = self._first[inputs]
        mine: Future = Future()

        def share(done: Future) -> None:
            try:
                built = done.result()
            except BaseException as exc:  # noqa: BLE001 - the same failure, for this lesson too
                mine.set_exception(exc)
                return
            mine.set_result(built.model_copy(update={
                "lesson": lesson.id, "cached": True, "seconds": 0.0,
                "notes": [f"the same build as lesson {first_id!r}: one source, flags and architecture"]}))
        first.add_done_callback(share)
        return mine


def _without_ptxas(stderr: str) -> str:
    """nvcc's own diagnostics: the ptxas resource report is evidence, not a warning."""
    kept = [line for line in stderr.splitlines(keepends=True)
            if not line.startswith("ptxas info") and not re.match(r"^\s+\d+ bytes stack frame", line)]
    return "".join(kept)
