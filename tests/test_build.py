"""orchestrator.cuda.build: real nvcc builds of the stand-ins, and the cache that spares rebuilding them."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import ManifestError

from conftest import FLAGS, SEEDS, STANDINS, write_course
from orchestrator import process
from orchestrator.cuda.build import build_lesson, local_files, nvcc_command, parse_dependencies
from orchestrator.names import check_arch
from orchestrator.cuda.buildkey import cache_key, headers_key, host_programs, key_material, what_changed
from orchestrator.workflows.pipeline import build_many
from orchestrator.errors import BuildError, UsageError
from orchestrator.process import CommandResult, run_command

NVCC = shutil.which("nvcc")
LESSON = "day13-shared-memory"


class CountingRunner:
    """run_command, counting and recording the commands it is given and their environments."""

    def __init__(self):
        self.commands: list[list[str]] = []
        self.envs: list[dict | None] = []

    def __call__(self, argv, **kwargs):
        self.commands.append([str(a) for a in argv])
        self.envs.append(kwargs.get("env"))
        return run_command(argv, **kwargs)

    @property
    def count(self) -> int:
        return len(self.commands)


class Ran(Exception):
    """Raised by a runner in place of nvcc: the build was not taken from the cache."""


def nvcc_would_run(argv, **kwargs):
    raise Ran


def nvcc_argv(flags: list[str], arch: str, output: Path, source: Path, lineinfo: bool = False) -> list[str]:
    """The nvcc command coursectl runs for a build, written out."""
    return [NVCC, *flags, *(["-lineinfo"] if lineinfo else []), f"-arch={arch}", "--resource-usage",
            "-MD", "-MF", f"{output}.d", "-o", str(output), str(source)]


def entry_of(cache: Path, source: bytes, flags: list[str], arch: str, nvcc_version: str, variant: str = "plain",
             binary: str = "replay", headers: dict[str, str] | None = None, absent: tuple[str, ...] = ()) -> Path:
    """The cache entry of a build: no lesson id, the source's key, then its headers' key."""
    key = cache_key(source, [*flags, *(["-lineinfo"] if variant == "lineinfo" else [])], arch, nvcc_version, variant,
                    binary)
    return cache / f"{arch}-{variant}" / key / headers_key(headers or {}, absent)


def output_of(argv: list[str]) -> Path:
    """Where an nvcc command writes its binary."""
    return Path(argv[argv.index("-o") + 1])


def is_build_folder(folder: Path, entry: Path) -> bool:
    """Whether `folder` is the folder of one build of the cache entry `entry`: beside it, named for its source's key."""
    return folder.parent == entry.parent and re.fullmatch(rf"\.{entry.parent.name}\.\w+\.build",
                                                          folder.name) is not None


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def entries_and_records(cache: Path) -> tuple[list[str], list[str]]:
    """The files of a cache's entries, and the names of its records of each lesson's last build."""
    files = files_under(cache)
    return ([name for name in files if not name.startswith("last_builds/")],
            [name.removeprefix("last_builds/") for name in files if name.startswith("last_builds/")])


def load(root: Path, **kwargs):
    manifest = write_course(root, [LESSON], **kwargs).load()
    return manifest, manifest.lesson(LESSON)


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """A cache of this test's own, so that the first build really runs nvcc."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    return cache


@pytest.fixture
def own_cache_built(own_cache, prebuilt) -> Path:
    """A cache of this test's own holding LESSON's sm_90 build, copied from the session's.

    For the tests that spoil an entry and watch it rebuilt: what they spoil
    need not be built again by nvcc first.
    """
    entry = prebuilt[LESSON].parent
    shutil.copytree(entry, own_cache / entry.parent.parent.name / entry.parent.name / entry.name)
    return own_cache


@pytest.mark.slow
def test_build_then_cached(tmp_path, own_cache, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    source = manifest.source_path(lesson)
    entry = entry_of(own_cache, source.read_bytes(), FLAGS, "sm_90", nvcc_version)
    binary = entry / "replay"
    command = nvcc_argv(FLAGS, "sm_90", binary, source)

    runner = CountingRunner()
    first = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert runner.count == 1
    work = output_of(runner.commands[0]).parent   # the build's own folder beside the entry, then renamed
    assert is_build_folder(work, binary.parent)
    assert runner.commands == [nvcc_argv(FLAGS, "sm_90", work / "replay", source)]
    assert runner.envs == [{"TMPDIR": str(work / "tmp")}]
    assert not work.exists()
    assert (first.lesson, first.arch, first.variant, first.binary, first.cached) == (
        LESSON, "sm_90", "plain", binary, False)
    assert first.command == command == nvcc_command(NVCC, manifest, lesson, "sm_90", binary)
    assert first.diagnostics == ""
    assert first.sources == {"standins/replay.cpp": hashlib.sha256(source.read_bytes()).hexdigest()}
    where = entry.relative_to(own_cache).as_posix()
    entries, records = entries_and_records(own_cache)
    assert entries == [f"{where}/build.json", f"{where}/replay", f"{where}/replay.d"]
    assert len(records) == 1 and re.fullmatch(rf"{LESSON}-sm_90-plain-[0-9a-f]{{12}}\.json", records[0])
    seed = SEEDS / "shared_memory.txt"
    assert run_command([binary, seed], timeout=30).stdout == seed.read_bytes()

    runner = CountingRunner()
    second = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert runner.count == 0
    assert (second.binary, second.cached, second.command, second.diagnostics) == (binary, True, command, "")
    assert second.sources == first.sources


@pytest.mark.slow
@pytest.mark.parametrize("what", ["source", "flags", "arch"])
def test_a_change_rebuilds(tmp_path, prebuilt, nvcc_version, what):
    """The session's cache holds this lesson as it is; a change of source, flags or arch misses it."""
    manifest, lesson = load(tmp_path / "course")
    runner = CountingRunner()
    unchanged = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, unchanged.cached, unchanged.binary) == (0, True, prebuilt[LESSON])

    edit = (lambda m: m["defaults"].update(flags=["-std=c++17", "-O2"])) if what == "flags" else None
    manifest, lesson = load(tmp_path / "changed", edit=edit)
    source = manifest.source_path(lesson)
    if what == "source":
        source.write_text(source.read_text() + "// changed\n")
    arch = "sm_80" if what == "arch" else "sm_90"   # the cache is shared: an architecture no other test builds
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, arch, NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached, rebuilt.arch) == (1, False, arch)
    assert rebuilt.binary.parent.parent.parent.name == f"{arch}-plain"
    assert rebuilt.binary != prebuilt[LESSON]
    assert rebuilt.command == nvcc_argv(manifest.flags(lesson), arch, rebuilt.binary, source)
    assert prebuilt[LESSON].is_file()

    runner = CountingRunner()
    again = build_lesson(manifest, lesson, arch, NVCC, nvcc_version, runner=runner)
    assert (runner.count, again.cached, again.binary) == (0, True, rebuilt.binary)


def test_cached_build_names_this_courses_source(tmp_path, prebuilt, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    runner = CountingRunner()
    cached = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, cached.cached) == (0, True)
    assert cached.command == nvcc_argv(FLAGS, "sm_90", prebuilt[LESSON], manifest.source_path(lesson))


@pytest.mark.slow
def test_lineinfo_variant_is_its_own_entry(tmp_path, own_cache, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    runner = CountingRunner()
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, variant="lineinfo", runner=runner)
    assert runner.count == 1
    assert (built.variant, built.cached) == ("lineinfo", False)
    assert built.binary.parent.parent.parent.name == "sm_90-lineinfo"
    assert built.command == nvcc_argv(FLAGS, "sm_90", built.binary, manifest.source_path(lesson), lineinfo=True)


BROKEN = """// replay.cu with a missing semicolon
#include <cstdio>

int main() {
    std::puts("no semicolon")
    return 0;
}
"""


@pytest.mark.slow
def test_syntax_error(tmp_path, own_cache, nvcc_version, real_nvcc):
    manifest, lesson = load(tmp_path / "course", cuda=True)   # nvcc's own diagnostics, not the host compiler's
    source = manifest.source_path(lesson)
    source.write_text(BROKEN)
    runner = CountingRunner()
    with pytest.raises(BuildError) as caught:
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    error = caught.value
    assert (error.path, error.line) == (str(source), 6)
    assert error.hint == "fix the diagnostics above; the lesson was not run"
    output = output_of(runner.commands[0])
    assert is_build_folder(output.parent, entry_of(own_cache, BROKEN.encode(), FLAGS, "sm_90", nvcc_version))
    assert error.message.splitlines() == [f"nvcc failed for lesson {LESSON!r} (sm_90):",
                                          f"$ {shlex.join(nvcc_argv(FLAGS, 'sm_90', output, source))}",
                                          "exit status 2",
                                          "stderr (last lines):",
                                          f'{source}(6): error: expected a ";"',
                                          "      return 0;",
                                          "      ^",
                                          "",
                                          f'1 error detected in the compilation of "{source}".']
    assert str(error) == f"{source}:6: {error.message}"
    assert files_under(own_cache) == []


@pytest.mark.slow
def test_syntax_error_in_a_folder_with_spaces(tmp_path, own_cache, nvcc_version, real_nvcc):
    manifest, lesson = load(tmp_path / "my course", cuda=True)
    source = manifest.source_path(lesson)
    source.write_text(BROKEN)
    with pytest.raises(BuildError) as caught:
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    assert f'{source}(6): error: expected a ";"' in caught.value.message
    assert caught.value.line == 6


def test_interrupted_build_leaves_no_entry(tmp_path, own_cache, nvcc_version):
    """Ctrl-C while nvcc writes its output: no binary, no stamp, no partial file; the next build runs nvcc."""
    manifest, lesson = load(tmp_path / "course")
    outputs = []

    def interrupted(argv, **kwargs):
        output = Path(argv[argv.index("-o") + 1])
        outputs.append(output)
        output.write_bytes(b"\x7fELF half a binary")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=interrupted)
    assert outputs[0].parent.parent.parent == own_cache / "sm_90-plain"
    assert files_under(own_cache) == []

    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)


def test_binary_without_its_stamp_is_rebuilt(tmp_path, own_cache, nvcc_version):
    """Interrupted after the rename but before build.json: the entry is not trusted."""
    manifest, lesson = load(tmp_path / "course")
    source = manifest.source_path(lesson)
    entry = entry_of(own_cache, source.read_bytes(), FLAGS, "sm_90", nvcc_version)
    entry.mkdir(parents=True)
    (entry / "replay").write_bytes(b"\x7fELF not from this build")
    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)


GREETING_FLAG = """-DGREETING="a b  'c' ;|&<> end\""""


def greeting_course(root: Path, flag: str):
    def use_greeting(m):
        m["lessons"][0]["source"] = "standins/greeting.cpp"
        m["lessons"][0]["flags"] = ["-std=c++17", "-O3", flag]
    manifest = write_course(root, [LESSON], edit=use_greeting)
    shutil.copyfile(STANDINS / "greeting.cpp", root / "standins" / "greeting.cpp")
    manifest = manifest.load()
    return manifest, manifest.lesson(LESSON)


@pytest.mark.slow
def test_flags_reach_nvcc_intact(tmp_path, own_cache, nvcc_version, monkeypatch, real_nvcc):
    """Spaces, quotes and shell operators in a flag reach nvcc as one argument and the program as written."""
    monkeypatch.chdir(tmp_path)
    manifest, lesson = greeting_course(tmp_path / "course", GREETING_FLAG)
    runner = CountingRunner()
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert runner.commands[0][1:4] == ["-std=c++17", "-O3", GREETING_FLAG]
    assert built.command[1:4] == ["-std=c++17", "-O3", GREETING_FLAG]
    assert run_command([built.binary], timeout=30).stdout == b"a b  'c' ;|&<> end\n"


def test_command_substitution_in_a_flag_is_refused(tmp_path, own_cache, nvcc_version, monkeypatch):
    """nvcc re-quotes -D values for its host compiler inside a shell, so the manifest refuses `$` and backquotes."""
    monkeypatch.chdir(tmp_path)
    flag = '-DGREETING="a b $(touch X)"'
    with pytest.raises(ManifestError) as caught:
        greeting_course(tmp_path / "course", flag)
    assert "flags: flag '-DGREETING=\"a b $(touch X)\"' holds '$' or '`'" in str(caught.value)
    assert caught.value.exit_status == 2
    assert list(tmp_path.rglob("X")) == []


# -- several builds of one entry at once, and temporary files -------------------------------------
@pytest.mark.slow
def test_builds_of_one_entry_at_once_each_write_their_own_files(tmp_path, own_cache, nvcc_version):
    """Three builds of one lesson and architecture, their nvcc runs made to overlap: each writes its own files."""
    manifest, lesson = load(tmp_path / "course")
    both_ran = threading.Barrier(3, timeout=120)
    outputs = []

    def overlapping(argv, **kwargs):
        both_ran.wait()
        result = run_command(argv, **kwargs)
        outputs.append(output_of([str(a) for a in argv]))
        both_ran.wait()   # every nvcc has finished before any build moves its binary
        return result

    with ThreadPoolExecutor(max_workers=3) as pool:
        builds = list(pool.map(lambda _: build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version,
                                                      runner=overlapping), range(3)))
    assert len(set(outputs)) == 3
    [binary] = {build.binary for build in builds}
    where = binary.parent.relative_to(own_cache).as_posix()
    entries, records = entries_and_records(own_cache)
    assert (entries, len(records)) == ([f"{where}/build.json", f"{where}/replay", f"{where}/replay.d"], 1)
    assert sorted(p.name for p in binary.parent.parent.iterdir()) == [binary.parent.name]
    seed = SEEDS / "shared_memory.txt"
    assert run_command([binary, seed], timeout=30).stdout == seed.read_bytes()
    again = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (again.cached, again.binary, again.notes) == (True, binary, [])


def test_an_interrupted_build_leaves_no_temporary_files(tmp_path, own_cache, nvcc_version, real_nvcc):
    """nvcc cleans its tmpxft_* files when it alone is signalled, not when its process group is killed:
    they are written into the build's own folder (TMPDIR), which goes with the build."""
    manifest, lesson = load(tmp_path / "course")
    seen: list[str] = []

    def interrupted_once_it_writes(argv, **kwargs):
        temporary = Path(kwargs["env"]["TMPDIR"])

        def interrupt():
            deadline = time.monotonic() + 60
            while not list(temporary.glob("tmpxft_*")) and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.extend(p.name for p in temporary.iterdir())
            process.kill_all()   # what coursectl does on Ctrl-C: every child's process group is killed

        watcher = threading.Thread(target=interrupt)
        watcher.start()
        try:
            return run_command(argv, **kwargs)
        finally:
            watcher.join()
            process.resume()

    with pytest.raises(BuildError):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=interrupted_once_it_writes)
    assert any(name.startswith("tmpxft_") for name in seen)
    assert files_under(own_cache) == []
    [group] = (own_cache / "sm_90-plain").iterdir()
    assert list(group.iterdir()) == []


# -- the cache stamp ------------------------------------------------------------------------------
CORRUPT_STAMPS = [
    (b'{"command": ["nvcc", "-O3"', "Expecting ',' delimiter: line 1 column 27 (char 26)"),
    (b"[]", "not the stamp a build writes"),
    (b"\x00\xff\xfe\x7fELF", "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"),
    (b"", "Expecting value: line 1 column 1 (char 0)"),
    (b'{"command": [], "diagnostics": "", "seconds": 1.0}', "not the stamp a build writes"),
    (b'{"command": [], "diagnostics": "", "seconds": 1.0, "binary_sha256": "00"}', "not the stamp a build writes"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply for Python's JSON parser"),
]


@pytest.mark.slow
@pytest.mark.parametrize("stamp, why", CORRUPT_STAMPS, ids=["truncated", "list", "binary", "empty", "no-sha256",
                                                            "no-headers", "nested-100000-deep"])
def test_a_corrupt_stamp_is_a_cache_miss_said_in_a_note(tmp_path, own_cache_built, nvcc_version, stamp, why):
    manifest, lesson = load(tmp_path / "course")
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    entry = built.binary.parent
    (entry / "build.json").write_bytes(stamp)
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached, rebuilt.binary) == (1, False, built.binary)
    assert rebuilt.notes == [f"cache entry {entry} had an unreadable stamp ({why}); rebuilt"]
    again = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (again.cached, again.notes) == (True, [])


@pytest.mark.slow
def test_a_binary_that_no_longer_matches_its_stamp_is_rebuilt(tmp_path, own_cache_built, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    built.binary.write_bytes(built.binary.read_bytes() + b"\0")
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached) == (1, False)
    assert rebuilt.notes == [f"cache entry {built.binary.parent} held a binary that no longer matches its stamp; "
                             "rebuilt"]
    seed = SEEDS / "shared_memory.txt"
    assert run_command([rebuilt.binary, seed], timeout=30).stdout == seed.read_bytes()


# -- the architecture ------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["../../../../tmp/x", "sm_90; touch X", "", "sm_90\n", "sm_9", "compute_90"])
def test_an_architecture_that_is_not_one_is_refused_before_anything_is_made(tmp_path, own_cache, nvcc_version, arch):
    manifest, lesson = load(tmp_path / "course")
    with pytest.raises(UsageError) as caught:
        build_lesson(manifest, lesson, arch, NVCC, nvcc_version, runner=nvcc_would_run)
    assert str(caught.value) == f"architecture {arch!r} is not a GPU architecture; write one like sm_90"
    assert caught.value.exit_status == 2
    assert not own_cache.exists()
    with pytest.raises(UsageError) as caught:
        check_arch(arch)
    assert str(caught.value) == f"--arch {arch!r} is not a GPU architecture; write one like sm_90"


@pytest.mark.parametrize("arch", ["sm_75", "sm_90", "sm_90a", "sm_100f", "sm_121"])
def test_architectures_like_the_manifests_pass(arch):
    assert check_arch(arch) == arch


# -- lessons of more than one file ------------------------------------------------------------------
CHECK = "lessons/ext/common/check.cuh"


def test_nvcc_dependency_list_is_read_with_its_escapes():
    text = ("/tmp/my\\ course/x/a : /tmp/my\\ course/x/a\\ b.cu \\\n"
            "    /usr/include/stdc-predef.h \\\n"
            "    com\\ mon/check.cuh \\\n"
            "    cost$$.h\n")
    assert parse_dependencies(text) == ["/tmp/my course/x/a b.cu", "/usr/include/stdc-predef.h",
                                        "com mon/check.cuh", "cost$.h"]
    assert parse_dependencies("") == []


def test_only_files_inside_the_course_are_local(tmp_path):
    root = tmp_path / "course"
    folder = root / "lessons" / "ext"
    (folder / "common").mkdir(parents=True)
    listed = [str(folder / "a.cu"), "/usr/include/stdio.h", "common/check.cuh", "../../../outside.h",
              "./common/check.cuh", "/usr/local/cuda/bin/../targets/x86_64-linux/include/cuda_runtime.h"]
    assert local_files(listed, folder, root) == [folder / "a.cu", folder / "common" / "check.cuh"]


@pytest.mark.slow
def test_nvcc_runs_in_the_sources_folder_so_relative_include_paths_are_its(multi_course, own_cache, nvcc_version,
                                                                           monkeypatch, tmp_path):
    """-Icommon means lessons/ext/common wherever coursectl is started, as it does in the page's command."""
    monkeypatch.chdir(tmp_path)
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    runner = CountingRunner()
    cwd = []
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version,
                         runner=lambda argv, **kw: cwd.append(kw["cwd"]) or runner(argv, **kw))
    assert cwd == [multi_course.root / "lessons" / "ext"]
    assert "-Icommon" in runner.commands[0]
    check = multi_course.root / CHECK
    source = manifest.source_path(lesson)
    assert built.sources == {"lessons/ext/sum.cu": hashlib.sha256(source.read_bytes()).hexdigest(),
                             CHECK: hashlib.sha256(check.read_bytes()).hexdigest()}
    assert json.loads((built.binary.parent / "build.json").read_text())["headers"] == {
        "common/check.cuh": hashlib.sha256(check.read_bytes()).hexdigest()}
    numbers = multi_course.root / "lessons/ext/data/numbers.txt"
    assert run_command([built.binary, numbers], timeout=30).stdout == (
        f"sum of 5 numbers from {numbers} = 15\nbuilt with check.cuh version 1\n".encode())


@pytest.mark.slow
def test_editing_a_header_rebuilds_and_says_which_file_changed(multi_course, own_cache, nvcc_version):
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    first = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    assert build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run).cached

    check = multi_course.root / CHECK
    original = check.read_text()
    check.write_text(original.replace("#define CHECK_VERSION 1", "#define CHECK_VERSION 2"))
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached) == (1, False)
    assert rebuilt.notes == [f"{CHECK} changed since the cached build; rebuilt"]
    assert rebuilt.binary != first.binary and first.binary.is_file()
    assert rebuilt.sources[CHECK] == hashlib.sha256(check.read_bytes()).hexdigest() != first.sources[CHECK]
    numbers = multi_course.root / "lessons/ext/data/numbers.txt"
    assert run_command([rebuilt.binary, numbers], timeout=30).stdout.endswith(b"check.cuh version 2\n")
    again = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (again.cached, again.binary, again.notes) == (True, rebuilt.binary, [])

    check.write_text(original)   # content-addressed: the first entry is found again, nothing is built
    back = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (back.cached, back.binary, back.sources) == (True, first.binary, first.sources)


@pytest.mark.slow
def test_a_header_that_is_gone_is_rebuilt_and_nvcc_says_so(multi_course, own_cache, nvcc_version):
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    (multi_course.root / CHECK).unlink()
    with pytest.raises(BuildError) as caught:
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    assert "check.cuh" in caught.value.message


@pytest.mark.slow
def test_a_header_that_shadows_the_one_the_build_read_rebuilds(multi_course, own_cache, nvcc_version, real_nvcc):
    """check.cuh added beside the source is found before common/check.cuh (-Icommon): the build reads another file.

    The test run's compile memo shares the blind spot this test is about: nvcc itself runs.
    """
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    first = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    beside = multi_course.root / "lessons/ext/check.cuh"
    beside.write_text((multi_course.root / CHECK).read_text().replace("#define CHECK_VERSION 1",
                                                                      "#define CHECK_VERSION 3"))
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached) == (1, False)
    assert rebuilt.notes == ["lessons/ext/check.cuh appeared since the cached build; rebuilt"]
    assert list(rebuilt.sources) == ["lessons/ext/sum.cu", "lessons/ext/check.cuh"]
    numbers = multi_course.root / "lessons/ext/data/numbers.txt"
    assert run_command([rebuilt.binary, numbers], timeout=30).stdout.endswith(b"check.cuh version 3\n")
    assert build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run).binary == \
        rebuilt.binary

    beside.unlink()   # the first build's files are its files again: found, not built
    back = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (back.binary, back.sources) == (first.binary, first.sources)


@pytest.mark.slow
def test_a_header_that_appears_where_the_build_never_reads_rebuilds_once(multi_course, own_cache, nvcc_version):
    """An include in `#if 0` is looked for by the scan, not by nvcc: its header appearing rebuilds once, then not."""
    source = multi_course.root / "lessons/ext/sum.cu"
    source.write_text('#if 0\n#include "ghost.cuh"\n#endif\n' + source.read_text())
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    first = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    (multi_course.root / "lessons/ext/ghost.cuh").write_text("#error never read\n")
    rebuilt = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    assert (rebuilt.cached, rebuilt.notes) == (False, ["lessons/ext/ghost.cuh appeared since the cached build; "
                                                       "rebuilt"])
    assert rebuilt.sources == first.sources and rebuilt.binary != first.binary
    again = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (again.cached, again.binary) == (True, rebuilt.binary)


@pytest.mark.slow
def test_a_header_linked_from_outside_the_course_is_refused_naming_the_link(multi_course, own_cache, nvcc_version,
                                                                          tmp_path):
    """A header the course names (lessons/ext/common/check.cuh) that is a link to a file outside the course is read
    through nothing: the build fails naming the link and its target, and no binary is kept."""
    manifest = multi_course.load()
    lesson = manifest.lesson("day02-sum")
    check = multi_course.root / CHECK
    shared = tmp_path / "shared" / "check.cuh"   # outside the course's root
    shared.parent.mkdir()
    shutil.move(check, shared)
    check.symlink_to(shared)
    with pytest.raises(BuildError) as raised:
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version)
    assert raised.value.path == CHECK
    assert f"a link to {shared}, outside the course" in str(raised.value)
    assert not list(own_cache.rglob("sum")), "no binary of the refused build is kept"


@pytest.mark.parametrize("name, value", [("NVCC_APPEND_FLAGS", "-DTILE_DIM=64"), ("NVCC_PREPEND_FLAGS", "-G"),
                                         ("NVCC_CCBIN", "/usr/bin/g++-12"), ("CPATH", "/opt/other/include"),
                                         ("C_INCLUDE_PATH", "/opt/other/include"),
                                         ("CPLUS_INCLUDE_PATH", "/opt/other/include"),
                                         ("LIBRARY_PATH", "/opt/other/lib"), ("GCC_EXEC_PREFIX", "/opt/gcc/"),
                                         ("COMPILER_PATH", "/opt/gcc/bin")])
def test_the_variables_nvcc_and_the_host_compiler_read_are_inputs_of_the_build(tmp_path, own_cache_built,
                                                                               nvcc_version, monkeypatch, name,
                                                                               value):
    """nvcc adds NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS to every command and builds host code with NVCC_CCBIN;
    the host compiler, run in the same environment, finds headers through CPATH and the like."""
    monkeypatch.delenv(name, raising=False)
    manifest, lesson = load(tmp_path / "course")
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    monkeypatch.setenv(name, value)
    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    monkeypatch.delenv(name)
    assert build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run).binary == built.binary


HOST_COMPILERS = {name: shutil.which(name) for name in ("gcc", "g++")}


def _host_compilers(folder: Path, says: str) -> Path:
    """A folder holding a gcc and a g++ that run the real ones; `says` makes their programs differ."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, real in HOST_COMPILERS.items():
        program = folder / name
        program.write_text(f"#!/bin/sh\n# {says}\nexec {real} \"$@\"\n")
        program.chmod(0o755)
    return folder


def test_another_host_compiler_first_on_path_is_another_build(tmp_path, own_cache_built, nvcc_version,
                                                              monkeypatch):
    """nvcc runs the gcc and g++ it finds on PATH: another one there builds another binary."""
    manifest, lesson = load(tmp_path / "course")
    built = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    other = _host_compilers(tmp_path / "other-gcc", "version 1")
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{path}")
    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    monkeypatch.setenv("PATH", path)
    assert build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run).binary == built.binary


def test_a_host_compiler_changed_in_place_is_another_build(tmp_path, nvcc_version, monkeypatch):
    """The key holds each host program's sha256, not only its path: an upgrade in place rebuilds."""
    compilers = _host_compilers(tmp_path / "gcc", "version 1")
    monkeypatch.setenv("PATH", f"{compilers}{os.pathsep}{os.environ['PATH']}")
    before = cache_key(b"source", FLAGS, "sm_90", nvcc_version, "plain", "replay")
    size = (compilers / "g++").stat().st_size
    assert cache_key(b"source", FLAGS, "sm_90", nvcc_version, "plain", "replay") == before
    _host_compilers(compilers, "version 2")      # the same size as before
    os.utime(compilers / "g++", ns=(1, 1))
    assert (compilers / "g++").stat().st_size == size
    assert cache_key(b"source", FLAGS, "sm_90", nvcc_version, "plain", "replay") != before


def test_the_host_compiler_is_the_one_ccbin_names(tmp_path, monkeypatch):
    """-ccbin (or --compiler-bindir, or NVCC_CCBIN) chooses the host compiler: a folder's gcc and g++, a file
    (relative to where nvcc runs), or a name on PATH."""
    compilers = _host_compilers(tmp_path / "course" / "tools", "version 1")
    monkeypatch.delenv("NVCC_CCBIN", raising=False)
    folder = tmp_path / "course" / "lessons"
    folder.mkdir()
    on_path = host_programs(["-O3"], folder)
    assert {"gcc", "g++", "as", "ld"} == set(on_path) and on_path["g++"].startswith(os.path.realpath(shutil.which("g++")))
    by_folder = host_programs(["-ccbin", str(compilers)], folder)
    assert by_folder[str(compilers / "g++")].startswith(f"{compilers / 'g++'} ")
    assert set(by_folder) == {str(compilers / "gcc"), str(compilers / "g++"), "as", "ld"}
    relative_file = host_programs(["--compiler-bindir=../tools/g++"], folder)
    assert relative_file[str(folder / "../tools/g++")].startswith(f"{compilers / 'g++'} ")
    assert host_programs(["-ccbin", "nosuchcompiler-1"], folder)["nosuchcompiler-1"] is None
    for hostile in ("x" * 5000 + "/g++", "tools/\0/g++", "x" * 5000):   # no such compiler: nvcc will say so
        assert host_programs(["-ccbin", hostile], folder)[hostile if "/" not in hostile else
                                                          str(folder / hostile)] is None
    monkeypatch.setenv("NVCC_CCBIN", str(compilers))
    assert host_programs(["-O3"], folder) == by_folder
    assert host_programs(["-ccbin", "g++", "-O3"], folder) == {"g++": on_path["g++"], "as": on_path["as"],
                                                            "ld": on_path["ld"]}


def nvcc_standing_in(argv, **kwargs) -> CommandResult:
    """What nvcc leaves for a build, without nvcc: a binary, and a dependency list naming the source alone."""
    output, dependencies, source = Path(argv[argv.index("-o") + 1]), Path(argv[argv.index("-MF") + 1]), argv[-1]
    output.write_bytes(b"\x7fELF a stand-in for nvcc's binary")
    dependencies.write_text(f"{output}: {source}\n")
    return CommandResult(argv=[str(a) for a in argv], returncode=0, seconds=0.01, stdout=b"", stderr=b"")


def test_a_rebuild_says_what_changed_since_the_last_build(tmp_path, own_cache, nvcc_version, monkeypatch):
    """The cache holds no lesson id, so the entry a build replaces cannot be found; the last build's inputs are
    kept per lesson to say what changed: an edited source, a variable, another compiler."""
    for name in ("CPATH", "NVCC_APPEND_FLAGS"):
        monkeypatch.delenv(name, raising=False)
    manifest, lesson = load(tmp_path / "course")

    def build():
        return build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_standing_in)

    first = build()
    assert (first.cached, first.notes) == (False, [])      # no build before it: nothing to say
    assert build().cached
    monkeypatch.setenv("CPATH", "/opt/other/include")
    assert build().notes == ["CPATH was set to '/opt/other/include' since the last build; rebuilt"]
    source = manifest.source_path(lesson)
    source.write_text(source.read_text() + "\n// edited\n")
    monkeypatch.delenv("CPATH")
    assert build().notes == [f"{manifest.source_path(lesson).relative_to(manifest.root)} changed, CPATH was unset "
                             "since the last build; rebuilt"]
    other = _host_compilers(tmp_path / "other-gcc", "version 1")
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    gcc = os.path.realpath(shutil.which("gcc", path=os.defpath))
    gxx = os.path.realpath(shutil.which("g++", path=os.defpath))
    assert build().notes == [f"the host program g++ changed ({gxx} -> {other / 'g++'}), the host program gcc "
                             f"changed ({gcc} -> {other / 'gcc'}) since the last build; rebuilt"]
    assert build().cached                                  # nothing changed since: nothing said
    # A record that cannot be read, or holds something else, says nothing, and the build goes on.
    [record] = (own_cache / "last_builds").iterdir()
    for damaged in ('{"flags": 5, "host": 7, "environment": []}', "[]", "{", "\0" * 10):
        record.write_text(damaged)
        monkeypatch.setenv("LIBRARY_PATH", f"/opt/{len(damaged)}")
        assert build().notes == []


def test_what_changed_names_each_input_in_words():
    before = key_material(b"one", ["-O3"], "sm_90", "13.0.88", "plain", "replay", environment={"CPATH": "/a"},
                          host={"g++": "/usr/bin/g++-12 aaa", "as": "/usr/bin/as bbb"})
    now = key_material(b"two", ["-O2"], "sm_90", "13.1.10", "plain", "replay", environment={"LIBRARY_PATH": "/l"},
                       host={"g++": "/usr/bin/g++-12 ccc", "as": None})
    assert what_changed(before, now, "lessons/a.cu") == [
        "lessons/a.cu changed", "the flags changed (-O3 -> -O2)", "nvcc changed (13.0.88 -> 13.1.10)",
        "CPATH was unset", "LIBRARY_PATH was set to '/l'", "the host program as changed (/usr/bin/as -> none)",
        "the host program g++ changed in place (/usr/bin/g++-12)"]
    assert what_changed(before, before, "lessons/a.cu") == []
    assert what_changed({**before, "format": 5}, before, "lessons/a.cu") == ["the build cache's format changed"]


def test_two_lessons_sharing_a_source_and_flags_build_once(multi_course, own_cache, nvcc_version, fake_gpu):
    """The cache is content-addressed and the scheduler builds shared inputs once, whichever lessons share them."""
    def twice(manifest: dict) -> None:
        again = dict(manifest["lessons"][1], id="day03-sum-again", day=3, page={"path": "lessons/ext/again.md"})
        manifest["lessons"].append(again)
    data = yaml.safe_load(multi_course.manifest.read_text())
    twice(data)
    multi_course.manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    manifest = multi_course.load()
    from orchestrator.cuda.toolchain import discover
    toolchain = discover()
    runner = CountingRunner()
    jobs = [(manifest.lesson("day02-sum"), "sm_90"), (manifest.lesson("day03-sum-again"), "sm_90")]
    built = build_many(manifest, jobs, toolchain, 2, runner)
    assert runner.count == 1
    (_, _, first), (_, _, second) = built
    assert (first.lesson, second.lesson, first.binary) == ("day02-sum", "day03-sum-again", second.binary)
    assert (second.cached, second.notes) == (
        True, ["the same build as lesson 'day02-sum': one source, flags and architecture"])
    # and across runs too: a later build of either lesson is the same cache entry, whatever its id
    alone = build_lesson(manifest, manifest.lesson("day03-sum-again"), "sm_90", NVCC, nvcc_version,
                         runner=nvcc_would_run)
    assert (alone.cached, alone.binary) == (True, first.binary)
    assert sorted(p.name for p in own_cache.iterdir()) == ["last_builds", "sm_90-plain"]
