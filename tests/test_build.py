"""orchestrator.build: real nvcc builds of the stand-ins, and the cache that spares rebuilding them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.errors import ManifestError

from conftest import FLAGS, SEEDS, STANDINS, write_course
from orchestrator import process
from orchestrator.build import build_lesson, cache_key, check_arch, nvcc_command
from orchestrator.errors import BuildError, UsageError
from orchestrator.process import run_command

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
            "-o", str(output), str(source)]


def output_of(argv: list[str]) -> Path:
    """Where an nvcc command writes its binary."""
    return Path(argv[argv.index("-o") + 1])


def is_build_folder(folder: Path, entry: Path) -> bool:
    """Whether `folder` is the folder of one build of the cache entry `entry`: beside it, named for it."""
    return folder.parent == entry.parent and re.fullmatch(rf"\.{entry.name}\.\w+\.build", folder.name) is not None


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


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
    shutil.copytree(entry, own_cache / LESSON / entry.parent.name / entry.name)
    return own_cache


@pytest.mark.slow
def test_build_then_cached(tmp_path, own_cache, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    source = manifest.source_path(lesson)
    key = cache_key(source.read_bytes(), FLAGS, "sm_90", nvcc_version, "plain")
    binary = own_cache / LESSON / "sm_90-plain" / key / "replay"
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
    assert files_under(own_cache) == [f"{LESSON}/sm_90-plain/{key}/build.json",
                                      f"{LESSON}/sm_90-plain/{key}/replay"]
    seed = SEEDS / "shared_memory.txt"
    assert run_command([binary, seed], timeout=30).stdout == seed.read_bytes()

    runner = CountingRunner()
    second = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    assert runner.count == 0
    assert (second.binary, second.cached, second.command, second.diagnostics) == (binary, True, command, "")


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
    arch = "sm_80" if what == "arch" else "sm_90"   # the session's cache holds sm_90 and sm_75 builds
    runner = CountingRunner()
    rebuilt = build_lesson(manifest, lesson, arch, NVCC, nvcc_version, runner=runner)
    assert (runner.count, rebuilt.cached, rebuilt.arch) == (1, False, arch)
    assert rebuilt.binary.parent.parent.name == f"{arch}-plain"
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
    assert (built.variant, built.cached, built.binary.parent.parent.name) == ("lineinfo", False, "sm_90-lineinfo")
    assert built.command == nvcc_argv(FLAGS, "sm_90", built.binary, manifest.source_path(lesson), lineinfo=True)


BROKEN = """// replay.cu with a missing semicolon
#include <cstdio>

int main() {
    std::puts("no semicolon")
    return 0;
}
"""


@pytest.mark.slow
def test_syntax_error(tmp_path, own_cache, nvcc_version):
    manifest, lesson = load(tmp_path / "course")
    source = manifest.source_path(lesson)
    source.write_text(BROKEN)
    runner = CountingRunner()
    with pytest.raises(BuildError) as caught:
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=runner)
    error = caught.value
    assert (error.path, error.line) == (str(source), 6)
    assert error.hint == "fix the diagnostics above; the lesson was not run"
    key = cache_key(BROKEN.encode(), FLAGS, "sm_90", nvcc_version, "plain")
    output = output_of(runner.commands[0])
    assert is_build_folder(output.parent, own_cache / LESSON / "sm_90-plain" / key)
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
def test_syntax_error_in_a_folder_with_spaces(tmp_path, own_cache, nvcc_version):
    manifest, lesson = load(tmp_path / "my course")
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
    assert outputs[0].parent.parent.parent == own_cache / LESSON
    assert files_under(own_cache) == []

    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)


def test_binary_without_its_stamp_is_rebuilt(tmp_path, own_cache, nvcc_version):
    """Interrupted after the rename but before build.json: the entry is not trusted."""
    manifest, lesson = load(tmp_path / "course")
    source = manifest.source_path(lesson)
    key = cache_key(source.read_bytes(), FLAGS, "sm_90", nvcc_version, "plain")
    entry = own_cache / LESSON / "sm_90-plain" / key
    entry.mkdir(parents=True)
    (entry / "replay").write_bytes(b"\x7fELF not from this build")
    with pytest.raises(Ran):
        build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)


GREETING_FLAG = """-DGREETING="a b  'c' ;|&<> end\""""


def greeting_course(root: Path, flag: str):
    def use_greeting(m):
        m["lessons"][0]["source"] = "standins/greeting.cu"
        m["lessons"][0]["flags"] = ["-std=c++17", "-O3", flag]
    manifest = write_course(root, [LESSON], edit=use_greeting)
    shutil.copyfile(STANDINS / "greeting.cu", root / "standins" / "greeting.cu")
    manifest = manifest.load()
    return manifest, manifest.lesson(LESSON)


@pytest.mark.slow
def test_flags_reach_nvcc_intact(tmp_path, own_cache, nvcc_version, monkeypatch):
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
    key = binary.parent.name
    assert files_under(own_cache) == [f"{LESSON}/sm_90-plain/{key}/build.json", f"{LESSON}/sm_90-plain/{key}/replay"]
    assert sorted(p.name for p in binary.parent.parent.iterdir()) == [key]
    seed = SEEDS / "shared_memory.txt"
    assert run_command([binary, seed], timeout=30).stdout == seed.read_bytes()
    again = build_lesson(manifest, lesson, "sm_90", NVCC, nvcc_version, runner=nvcc_would_run)
    assert (again.cached, again.binary, again.notes) == (True, binary, [])


def test_an_interrupted_build_leaves_no_temporary_files(tmp_path, own_cache, nvcc_version):
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
    assert list((own_cache / LESSON / "sm_90-plain").iterdir()) == []


# -- the cache stamp ------------------------------------------------------------------------------
CORRUPT_STAMPS = [
    (b'{"command": ["nvcc", "-O3"', "Expecting ',' delimiter: line 1 column 27 (char 26)"),
    (b"[]", "not the stamp a build writes"),
    (b"\x00\xff\xfe\x7fELF", "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"),
    (b"", "Expecting value: line 1 column 1 (char 0)"),
    (b'{"command": [], "diagnostics": "", "seconds": 1.0}', "not the stamp a build writes"),
]


@pytest.mark.slow
@pytest.mark.parametrize("stamp, why", CORRUPT_STAMPS, ids=["truncated", "list", "binary", "empty", "no-sha256"])
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
