"""tests/nvcc_memo.py, the compile memo the suite's nvcc goes through: it replays only what nvcc would make.

Each test compiles through a memo of this module's own, in front of a "real"
nvcc that counts its runs (a shell script that notes each run, then runs the
real one), so a replay is seen to run no nvcc at all.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import REAL_NVCC
from nvcc_memo import write_wrapper

pytestmark = pytest.mark.slow

SOURCE = '#include <cstdio>\n#include "greet.h"\n\nint main() {\n    std::puts(GREETING);\n    return 0;\n}\n'
HEADER = '#define GREETING "hello from the header"\n'
FLAGS = ["-std=c++17", "-O3", "-arch=sm_90", "--resource-usage"]


class Memo:
    """A memo in a folder of its own, its nvcc, and the count of the real nvcc's runs."""

    def __init__(self, folder: Path):
        self.runs, self.log, self.entries = folder / "runs", folder / "memo.log", folder / "memo" / "entries"
        counting = folder / "real" / "nvcc"
        counting.parent.mkdir()
        counting.write_text(f'#!/bin/sh\necho run >> "{self.runs}"\nexec "{REAL_NVCC}" "$@"\n')
        counting.chmod(0o755)
        self.nvcc = write_wrapper(folder / "bin" / "nvcc", str(counting), folder / "memo")

    def real_runs(self) -> int:
        return len(self.runs.read_text().splitlines()) if self.runs.exists() else 0

    def logged(self) -> list[str]:
        """The first word of each line the memo logged: real, replay, pass or unstored."""
        return [line.split(" ", 1)[0] for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def compile(self, folder: Path, flags=FLAGS, source: str = "hello.cu", **env) -> subprocess.CompletedProcess:
        """coursectl's command, in the source's folder: the binary and its dependency list in folder/out."""
        (folder / "out").mkdir(exist_ok=True)
        binary = folder / "out" / "hello"
        return subprocess.run([str(self.nvcc), *flags, "-MD", "-MF", f"{binary}.d", "-o", str(binary),
                               str(folder / "src" / source)], cwd=folder / "src", capture_output=True, text=True,
                              timeout=300, env={**os.environ, "COURSECTL_TEST_NVCC_MEMO": "1",
                                                "COURSECTL_TEST_NVCC_MEMO_LOG": str(self.log), **env})


def lesson(folder: Path, source: str = SOURCE, header: str = HEADER) -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "hello.cu").write_text(source)
    (folder / "src" / "greet.h").write_text(header)
    return folder


def ran(folder: Path) -> str:
    return subprocess.run([folder / "out" / "hello"], capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.fixture(scope="module")
def memo(tmp_path_factory) -> Memo:
    """A memo asked for one compile by two processes at once, in two folders: lesson(first), lesson(second)."""
    made = Memo(tmp_path_factory.mktemp("memo"))
    made.first, made.second = lesson(tmp_path_factory.mktemp("first")), lesson(tmp_path_factory.mktemp("second"))
    made.done = {}
    threads = [threading.Thread(target=lambda f=folder: made.done.__setitem__(f, made.compile(f)))
               for folder in (made.first, made.second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made.at_once = (made.real_runs(), sorted(made.logged()))
    return made


def test_two_compiles_at_once_run_nvcc_once(memo):
    """The second waits for the first's lock, then replays what it stored."""
    assert [done.returncode for done in memo.done.values()] == [0, 0]
    assert memo.at_once == (1, ["real", "replay"])
    assert ran(memo.first) == ran(memo.second) == "hello from the header\n"
    assert memo.done[memo.first].stderr.replace(str(memo.first), "") == memo.done[memo.second].stderr.replace(
        str(memo.second), "")


def test_a_repeat_compile_in_another_folder_is_replayed(memo, tmp_path):
    runs, entries = memo.real_runs(), sorted(memo.entries.iterdir())
    again = lesson(tmp_path / "another course")   # a space in the path, as nvcc escapes it in the list
    done = memo.compile(again)
    assert (done.returncode, memo.real_runs(), memo.logged()[-1]) == (0, runs, "replay")
    assert sorted(memo.entries.iterdir()) == entries
    assert ran(again) == "hello from the header\n"
    # what nvcc would have written and printed there: what it wrote in the folder where it ran, with
    # this folder in its place
    real = next(line for line in memo.log.read_text().splitlines() if line.startswith("real "))
    first = memo.first if f" {memo.first / 'src' / 'hello.cu'} " in real else memo.second
    first_target, first_files = (first / "out" / "hello.d").read_text().split(" : ", 1)
    target, files = (again / "out" / "hello.d").read_text().split(" : ", 1)
    assert (first_target, target) == (f"{first}/out/hello", f"{again}/out/hello")
    assert files == first_files.replace(str(first), str(again).replace(" ", "\\ "))
    assert str(again / "src" / "greet.h").replace(" ", "\\ ") in files and str(first) not in files
    assert done.stderr == memo.done[first].stderr.replace(str(first), str(again)) and "ptxas info" in done.stderr


def test_editing_a_header_the_source_includes_is_a_miss(memo, tmp_path):
    runs = memo.real_runs()
    edited = lesson(tmp_path / "edited", header='#define GREETING "hello from an edited header"\n')
    done = memo.compile(edited)
    assert (done.returncode, memo.real_runs(), memo.logged()[-1]) == (0, runs + 1, "real")
    assert ran(edited) == "hello from an edited header\n"
    (edited / "src" / "greet.h").write_text(HEADER)   # as the first folder's again: replayed
    assert memo.compile(edited).returncode == 0
    assert (memo.real_runs(), memo.logged()[-1], ran(edited)) == (runs + 1, "replay", "hello from the header\n")


def test_a_header_that_is_gone_is_a_miss_and_nvcc_says_so(memo, tmp_path):
    runs = memo.real_runs()
    gone = lesson(tmp_path / "gone")
    (gone / "src" / "greet.h").unlink()
    done = memo.compile(gone)
    assert (done.returncode != 0, memo.real_runs(), memo.logged()[-1]) == (True, runs + 1, "real")
    assert "greet.h" in done.stderr and not (gone / "out" / "hello").exists()


def test_a_failed_compile_is_never_stored(memo, tmp_path):
    broken = lesson(tmp_path / "broken", source=SOURCE.replace("return 0;", "return 0"))
    runs, entries = memo.real_runs(), sorted(memo.entries.iterdir())
    for attempt in (1, 2):
        done = memo.compile(broken)
        assert done.returncode == 2
        assert f'{broken / "src" / "hello.cu"}(7): error: expected a ";"' in done.stderr
        assert (memo.real_runs(), memo.logged()[-1]) == (runs + attempt, "real")
    assert sorted(memo.entries.iterdir()) == entries


def test_the_switch_turns_it_off(memo, tmp_path):
    runs, logged = memo.real_runs(), memo.logged()
    plain = lesson(tmp_path / "plain")   # the first folder's compile, which the memo would replay
    done = memo.compile(plain, COURSECTL_TEST_NVCC_MEMO="0")
    assert (done.returncode, memo.real_runs(), memo.logged()) == (0, runs + 1, logged)
    assert ran(plain) == "hello from the header\n"


def test_version_goes_straight_to_nvcc(memo):
    runs, logged = memo.real_runs(), memo.logged()
    done = subprocess.run([str(memo.nvcc), "--version"], capture_output=True, text=True, timeout=30)
    assert done.stdout == subprocess.run([REAL_NVCC, "--version"], capture_output=True, text=True,
                                         timeout=30).stdout
    assert (memo.real_runs(), memo.logged()) == (runs + 1, logged)


def test_a_binary_holding_its_folders_path_is_replayed_only_in_that_folder(memo, tmp_path):
    """A source that prints __FILE__ (or a -lineinfo build) holds the path nvcc was given."""
    source = '#include <cstdio>\n\nint main() {\n    std::puts(__FILE__);\n    return 0;\n}\n'
    runs = memo.real_runs()
    here, there = lesson(tmp_path / "here", source=source), lesson(tmp_path / "there", source=source)
    for folder in (here, there):
        assert memo.compile(folder).returncode == 0
        assert ran(folder) == f"{folder / 'src' / 'hello.cu'}\n"
    assert (memo.real_runs(), memo.logged()[-2:]) == (runs + 2, ["real", "real"])
    assert memo.compile(here).returncode == 0
    assert (memo.real_runs(), memo.logged()[-1], ran(here)) == (runs + 2, "replay", f"{here / 'src' / 'hello.cu'}\n")


def test_a_command_naming_no_cu_file_goes_to_nvcc_without_the_memo(tmp_path):
    """The stand-ins' .cpp compiles (host code, a tenth of a second) skip the memo's Python altogether."""
    (tmp_path / "memo").mkdir()
    memo = Memo(tmp_path / "memo")
    folder = tmp_path / "plain"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "hello.cpp").write_text(SOURCE)
    (folder / "src" / "greet.h").write_text(HEADER)
    for _ in range(2):
        done = memo.compile(folder, source="hello.cpp")
        assert done.returncode == 0, done.stderr
    assert ran(folder) == "hello from the header\n"
    assert (memo.real_runs(), memo.logged()) == (2, [])
