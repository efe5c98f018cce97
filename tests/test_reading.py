"""Every file coursectl reads, read one way (orchestrator/files.py): a regular file, opened without
blocking, up to a limit, and as UTF-8 where it is text; JSON however deeply it nests.

A file that is none of that is one line naming it (and its line, for bytes that are not UTF-8),
never a traceback, a hang on a FIFO or a process eating the machine's memory on /dev/zero; a
lesson's own file fails that lesson alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import after, coursectl, statuses
from orchestrator.errors import CoursectlError, UsageError
from orchestrator.files import parse_json, read_file, read_stream, read_text, relative

DAY16 = "day16-tiled-matmul"
NOT_UTF8 = "is not UTF-8 text: byte 0xe9 cannot be decoded"
DEEP = b"[" * 100_000 + b"]" * 100_000
MiB = 2**20
COURSECTL = Path(sys.executable).parent / "coursectl"


def append_latin1(path: Path, text: str = "// caf\xe9\n") -> int:
    """Append a line in Latin-1 (not UTF-8) to a file; the number of the line it is."""
    with open(path, "ab") as handle:
        handle.write(text.encode("latin-1"))
    return path.read_bytes().count(b"\n")


# -- the reader ----------------------------------------------------------------------------------
def test_read_file_reads_a_regular_file_up_to_its_limit(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"x" * 1025)
    assert read_file(path, 1025, "a thing") == b"x" * 1025
    assert read_file(tmp_path / "missing.txt", 1025, "a thing") is None
    with pytest.raises(UsageError) as caught:
        read_file(path, 1024, "a thing", UsageError, shown="f.txt")
    assert str(caught.value) == "f.txt: larger than 1,024 bytes, the most a thing may hold"


@pytest.mark.parametrize("make, kind", [
    (lambda tmp, fifo: Path("/dev/zero"), "a device"),
    (lambda tmp, fifo: tmp, "a folder"),
    (lambda tmp, fifo: fifo(tmp / "pipe"), "a named pipe"),
], ids=["device", "folder", "fifo"])
def test_read_file_reads_only_a_regular_file(tmp_path, fifo, make, kind):
    path = make(tmp_path, fifo)
    with pytest.raises(CoursectlError) as caught:
        read_file(path, MiB, "a thing")
    assert str(caught.value) == f"{path}: {kind} where a file should be"


def test_read_text_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"one\ntwo\ncaf\xe9\n")
    with pytest.raises(CoursectlError) as caught:
        read_text(path, MiB, "a thing", shown="f.txt")
    assert str(caught.value) == f"f.txt:3: {NOT_UTF8}"


def test_read_stream_stops_one_byte_past_its_limit():
    class Endless:
        given = 0

        def read(self, size: int) -> bytes:
            self.given += size
            return b"y" * size
    stream = Endless()
    with pytest.raises(UsageError) as caught:
        read_stream(stream, MiB, "a transcript", "<stdin>", UsageError)
    assert str(caught.value) == "<stdin>: larger than 1 MiB, the most a transcript may hold"
    assert stream.given == MiB + 1


def test_json_nested_100000_deep_is_a_value_error():
    with pytest.raises(ValueError, match="^nested too deeply for Python's JSON parser$"):
        parse_json(DEEP)
    assert parse_json(b"[[[1]]]") == [[[1]]]


# -- a path as the course names it -----------------------------------------------------------------
def test_a_path_inside_the_root_is_named_from_it(tmp_path):
    root = tmp_path / "course"
    assert relative(root / "lessons" / "a.cu", root) == "lessons/a.cu"
    assert relative(root / "lessons" / ".." / "README.md", root) == "README.md"
    assert relative(root, root) == "."


def test_a_path_outside_the_root_is_named_as_it_was_given(tmp_path, monkeypatch):
    root = tmp_path / "course"
    root.mkdir()
    assert relative(tmp_path / "t.txt", root) == (tmp_path / "t.txt").as_posix()
    assert relative(Path("/usr/include/stdio.h"), root) == "/usr/include/stdio.h"
    assert relative(root / ".." / "t.txt", root) == (root / ".." / "t.txt").as_posix()
    monkeypatch.chdir(root)
    assert relative(Path("../t.txt"), root) == "../t.txt"
    assert relative(Path("lessons/a.cu"), root) == "lessons/a.cu"


def test_a_link_is_named_as_the_course_names_it(tmp_path):
    root = tmp_path / "course"
    (root / "lessons").mkdir(parents=True)
    shared = tmp_path / "shared" / "check.cuh"   # a file of the course kept outside it
    shared.parent.mkdir()
    shared.write_text("")
    (root / "lessons" / "check.cuh").symlink_to(shared)
    assert relative(root / "lessons" / "check.cuh", root) == "lessons/check.cuh"
    link = tmp_path / "link"                     # the course reached through a link, or named by one
    link.symlink_to(root)
    assert relative(link / "lessons" / "a.cu", root) == "lessons/a.cu"
    assert relative(root / "lessons" / "a.cu", link) == "lessons/a.cu"


# -- 1. text that is not UTF-8 --------------------------------------------------------------------
@pytest.mark.parametrize("name, status", [
    (f"lessons/{DAY16}/tiled_matmul.cu", 1),
    (f"lessons/{DAY16}/prose.md", 1),
    ("README.md", 1),
    ("templates/lesson.md.j2", 2),
], ids=["source", "prose", "readme", "template"])
def test_render_names_the_file_and_line_that_is_not_utf8(course_copy, name, status):
    line = append_latin1(course_copy / name, "caf\xe9\n" if not name.endswith(".cu") else "// caf\xe9\n")
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout, result.stderr) == (status, "", f"coursectl: error: {name}:{line}: "
                                                                            f"{NOT_UTF8}\n")


def test_verify_offline_fails_only_the_lesson_whose_source_is_not_utf8(course, monkeypatch, gpu_bin, prebuilt,
                                                                         tmp_path):
    def own_source(manifest):   # day 16 on a source of its own, the stand-in's as it is
        standins = tmp_path / "course" / "standins"
        (standins / "day16.cpp").write_bytes((standins / "replay.cpp").read_bytes())
        [entry] = [entry for entry in manifest["lessons"] if entry["id"] == DAY16]
        entry["source"] = "standins/day16.cpp"
    made = course(["day13-shared-memory", DAY16], edit=own_source)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", os.pathsep.join([str(gpu_bin), path]))
    assert coursectl("record", "--all", "-q").exit_code == 0
    monkeypatch.setenv("PATH", path)
    line = append_latin1(made.root / "standins" / "day16.cpp")
    report = tmp_path / "offline.json"
    result = coursectl("verify", "--all", "--offline", "-q", "--json", report)
    assert result.exit_code == 1, result.stderr
    assert statuses(result.stdout, "verify --offline") == {"day13-shared-memory": "PASS", DAY16: "FAIL"}
    reasons = {r["lesson"]: r["reasons"] for r in json.loads(report.read_text())["results"]}
    assert reasons == {"day13-shared-memory": [], DAY16: [f"standins/day16.cpp:{line}: {NOT_UTF8}"]}
    assert f"{DAY16}: standins/day16.cpp:{line}: {NOT_UTF8}" in after(result.stdout, "verify --offline")


# -- 2. files that are no regular file, or too big ------------------------------------------------
@pytest.mark.parametrize("make, kind", [
    (lambda tmp, fifo: Path("/dev/zero"), "a device"),
    (lambda tmp, fifo: tmp, "a folder"),
    (lambda tmp, fifo: fifo(tmp / "pipe"), "a named pipe"),
], ids=["dev-zero", "folder", "fifo"])
def test_check_reads_a_transcript_from_a_regular_file_only(course_copy, tmp_path, fifo, make, kind):
    path = make(tmp_path, fifo)
    result = coursectl("check", DAY16, path)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"coursectl: error: {path}: {kind} where a "
                                                                       "file should be\n")


def test_check_reads_a_transcript_up_to_the_capture_limit(course_copy, tmp_path):
    transcript = tmp_path / "t.txt"
    transcript.write_bytes(b"y\n" * (8 * MiB))
    result = coursectl("check", DAY16, transcript)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"coursectl: error: {transcript}:1: expected a line matching ")
    with open(transcript, "ab") as handle:
        handle.write(b"y")
    result = coursectl("check", DAY16, transcript)
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", f"coursectl: error: {transcript}: larger than 16 MiB, the most a transcript may hold\n")


def test_check_reads_standard_input_up_to_the_capture_limit(course_copy):
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    result = CliRunner().invoke(app, ["check", DAY16, "-"], input=b"y\n" * (8 * MiB) + b"y", env={"COLUMNS": "200"})
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", "coursectl: error: <stdin>: larger than 16 MiB, the most a transcript may hold\n")


def test_yes_piped_into_check_is_one_line_and_stops(course_copy):
    """`yes | coursectl check LESSON -`: it reads 16 MiB and a byte, says so and exits, closing the pipe."""
    read_end, write_end = os.pipe()
    checking = subprocess.Popen([str(COURSECTL), "check", DAY16, "-"], stdin=read_end, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="200"))
    os.close(read_end)

    def yes():   # as `yes` does, until the reader has gone; 64 MiB at most, should it never go
        with open(write_end, "wb", buffering=0) as pipe:
            try:
                for _ in range(128):
                    pipe.write(b"y\n" * (MiB // 4))
            except BrokenPipeError:
                pass
    writer = threading.Thread(target=yes)
    writer.start()
    out, err = checking.communicate(timeout=120)
    writer.join()
    assert (checking.returncode, out, err) == (
        2, b"", b"coursectl: error: <stdin>: larger than 16 MiB, the most a transcript may hold\n")


@pytest.mark.parametrize("make, message", [
    (lambda tmp, fifo: Path("/dev/zero"), "/dev/zero: a device where a file should be"),
    (lambda tmp, fifo: fifo(tmp / "report.json"), "{path}: a named pipe where a file should be"),
], ids=["dev-zero", "fifo"])
def test_report_merge_reads_a_regular_file_only(tmp_path, fifo, make, message):
    path = make(tmp_path, fifo)
    result = coursectl("report", "merge", path)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"coursectl: error: "
                                                                       f"{message.format(path=path)}\n")


@pytest.mark.parametrize("name, status, hint", [
    ("lessons.yaml", 2, "hint: fix lessons.yaml; docs/schema.md describes every key\n"),
    ("README.md", 1, ""),
    ("templates/lesson.md.j2", 2, ""),   # was taken for no template at all
], ids=["manifest", "readme", "template"])
def test_render_refuses_a_named_pipe_at_once(course_copy, fifo, name, status, hint):
    (course_copy / name).unlink()
    fifo(course_copy / name)
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout, result.stderr) == (
        status, "", f"coursectl: error: {name}: a named pipe where a file should be\n{hint}")


# -- 3. JSON nested 100,000 deep ------------------------------------------------------------------
def test_report_merge_of_json_nested_100000_deep_is_a_usage_error(tmp_path):
    report = tmp_path / "deep.json"
    report.write_bytes(DEEP)
    result = coursectl("report", "merge", report)
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", f"coursectl: error: {report}: not a coursectl JSON report: nested too deeply for Python's JSON "
               "parser\n")


def test_source_lines_end_where_a_compiler_ends_them():
    """\\n, \\r\\n and \\r end a line; \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028 and \\u2029 (str.splitlines' other breaks) do not."""
    from orchestrator.files import source_lines

    assert source_lines("a\nb\r\nc\rd") == ["a", "b", "c", "d"]
    assert source_lines("a\r\r\nb\n\n", keepends=True) == ["a\r", "\r\n", "b\n", "\n"]
    assert source_lines("") == [] and source_lines("\n") == [""]
    for other in "\f\v\x1c\x1d\x1e\x85\u2028\u2029":
        assert source_lines(f"int a;{other}int b;\nint c;") == [f"int a;{other}int b;", "int c;"]
        assert source_lines(f"x\r\n{other}\r\n", keepends=True) == ["x\r\n", f"{other}\r\n"]
