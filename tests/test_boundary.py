"""The course's boundary: what coursectl reads, and where it writes.

coursectl writes only pages, evidence, lessons.yaml (for `new`), the cache and
the report paths it is given, and reads nothing of the course through a link
that leads out of it. Each case is a course of its own in tmp_path, with a
file outside it; each checks that nothing outside the course, the cache and
the report paths given changed (`outside`), and what it printed.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import threading
from pathlib import Path

import pytest

from conftest import COURSE, coursectl, snapshot
from orchestrator.files import link_out, report_refusal, write_report

DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
OUT = "outside the course; coursectl reads nothing of the course through a link that leads out of it"


def outside(tmp_path: Path, course: Path) -> dict[str, bytes]:
    """Every file of tmp_path but the course's own: what must stay as it was."""
    return {name: data for name, data in snapshot(tmp_path).items() if not Path(tmp_path / name).is_relative_to(course)}


def kinds(folder: Path) -> dict[str, int]:
    """What each entry under `folder` is (file, link, FIFO), links not followed: a link replaced by a file shows."""
    return {str(p.relative_to(folder)): stat.S_IFMT(os.lstat(p).st_mode) for p in sorted(folder.rglob("*"))}


def copy_course(root: Path) -> Path:
    for name in ("lessons", "templates", "evidence"):
        shutil.copytree(COURSE / name, root / name)
    for name in ("lessons.yaml", "README.md"):
        shutil.copyfile(COURSE / name, root / name)
    return root


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("a secret of the machine\n")
    return path


def refused(result, message: str, hint: str | None = None) -> None:
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == f"coursectl: error: {message}\n" + (f"hint: {hint}\n" if hint else "")


def leaves(link: str, target: Path) -> str:
    return f"{link}: a link to {target}, {OUT}"


def hint_for(link: str) -> str:
    return f"put what {link} leads to in its place, inside the course"


# -- 2, 3. a report path that is a file of the course, a folder or a link -----------------------------------
COURSE_FILES = [
    ("lessons.yaml", "is lessons.yaml, the course's manifest"),
    ("README.md", "is README.md, the course's index"),
    (f"lessons/{DAY16}/tiled_matmul.cu", "is in lessons/, the lessons' folder"),
    (f"lessons/{DAY16}/README.md", "is in lessons/, the lessons' folder"),
    (f"evidence/{DAY16}/nvidia-h200/meta.json", "is in evidence/, the evidence store"),
    (f"evidence/{DAY16}/nvidia-h200/transcript.txt", "is in evidence/, the evidence store"),
    ("templates/lesson.md.j2", "is in templates/, the page templates"),
]


@pytest.mark.parametrize("name, why", COURSE_FILES, ids=[n.replace(f"{DAY16}/", "") for n, _ in COURSE_FILES])
def test_a_report_path_that_is_a_file_of_the_course_is_refused_before_anything_runs(course_copy, tmp_path, name, why):
    """--json lessons.yaml replaced the manifest, exit 0; now every report option refuses it, exit 2."""
    link = tmp_path / "report.json"   # a link to a file of the course, named outside it, is that file
    link.symlink_to(course_copy / name)
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    tail = "which coursectl reads or writes; a report there would replace it"
    for command in (["verify", "--offline", DAY16, "--json", name], ["verify", "--offline", DAY16, "--junit", name],
                    ["verify", DAY16, "--report", name], ["record", DAY16, "--json", name],
                    ["sanitize", DAY16, "--json", name], ["compare", "nvidia-h200", "nvidia-h200", "--report", name]):
        option = command[-2]
        refused(coursectl(*command), f"{option} {name}: {why}, {tail}")
    refused(coursectl("verify", "--offline", DAY16, "--json", link), f"--json {link}: {why}, {tail}")
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before
    assert link.is_symlink()


def test_report_merge_refuses_a_file_of_the_course_it_runs_in(course_copy, tmp_path):
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    refused(coursectl("report", "merge", "any.json", "--json", "lessons.yaml"),
            "--json lessons.yaml: is lessons.yaml, the course's manifest, which coursectl reads or writes; a report "
            "there would replace it")
    refused(coursectl("report", "merge", "any.json", "--junit", "evidence/x.xml"),
            "--junit evidence/x.xml: is in evidence/, the evidence store, which coursectl reads or writes; a report "
            "there would replace it")
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


def test_a_report_path_that_is_a_folder_a_dangling_link_in_the_cache_or_given_twice_is_refused(course_copy, tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    to_folder = tmp_path / "to-folder.json"
    to_folder.symlink_to(folder)
    inside = course_copy / "notes.txt"
    inside.write_text("notes\n")
    to_inside = tmp_path / "to-notes.json"
    to_inside.symlink_to(inside)
    before, whole = (outside(tmp_path, course_copy), kinds(tmp_path)), snapshot(course_copy)
    refused(coursectl("verify", "--offline", DAY16, "--json", folder), f"--json {folder}: is a folder; a report goes "
                                                                       f"to a file")
    refused(coursectl("verify", "--offline", DAY16, "--json", dangling),
            f"--json {dangling}: is a link to {tmp_path / 'nowhere.json'}, which is no file; a report goes to a file")
    refused(coursectl("verify", "--offline", DAY16, "--junit", to_folder),
            f"--junit {to_folder}: is a link to {folder}, a folder; a report goes to a file")
    refused(coursectl("verify", "--offline", DAY16, "--json", to_inside),
            f"--json {to_inside}: is a link to {inside}, a file of the course; a report goes to a file of its own")
    cached = Path(os.environ["COURSECTL_CACHE"]) / "r.json"
    refused(coursectl("verify", "--offline", DAY16, "--json", cached),
            f"--json {cached}: is in the build cache, which coursectl reads or writes; a report there would replace it")
    assert not cached.exists()
    refused(coursectl("verify", "--offline", DAY16, "--json", "r.json", "--junit", "r.json"),
            "--junit r.json: the same file as --json; give each report a file of its own")
    assert (outside(tmp_path, course_copy), kinds(tmp_path)) == before and snapshot(course_copy) == whole


def test_a_report_in_the_course_root_that_is_no_file_of_it_is_written(course_copy, tmp_path):
    """What the course does not read or write is anyone's: a report beside lessons.yaml is fine."""
    before = outside(tmp_path, course_copy)
    result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", "compare.md")
    assert result.exit_code == 0, result.output
    assert (course_copy / "compare.md").read_text().startswith("<!-- Generated by coursectl compare")
    assert outside(tmp_path, course_copy) == before


def test_a_named_pipe_a_device_and_a_link_out_of_the_course_are_written_through_not_replaced(course_copy, tmp_path):
    """--json /dev/full replaced the device node (as root); a FIFO or a link became a regular file."""
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    target = tmp_path / "kept" / "report.md"
    target.parent.mkdir()
    target.write_text("the previous report\n")
    link = tmp_path / "report-link.md"
    link.symlink_to(target)
    before = kinds(tmp_path)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", fifo)
    reader.join(10)
    assert result.exit_code == 0, result.output
    assert got and got[0].startswith(b"<!-- Generated by coursectl compare")
    result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", link)
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == got[0]
    result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", "/dev/null")
    assert result.exit_code == 0, result.output
    assert kinds(tmp_path) == before   # the FIFO a FIFO, the link a link
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    # nothing reads the FIFO now: one line, exit 1, never a hang; a full device: its error
    result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", fifo)
    assert (result.exit_code, result.stderr) == (1, f"coursectl: error: {fifo}: a named pipe that nothing reads; "
                                                    f"start its reader first\n")
    if os.path.exists("/dev/full"):
        result = coursectl("compare", "nvidia-h200", "nvidia-h200", DAY16, "--report", "/dev/full")
        assert (result.exit_code, result.stderr) == (1, "coursectl: error: cannot write/read /dev/full: No space "
                                                        "left on device\n")
        assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)
    assert kinds(tmp_path) == before


def test_json_and_junit_of_verify_go_through_a_fifo_and_a_link(course, fake_gpu, prebuilt, tmp_path):
    made = course([DAY16])
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    target = tmp_path / "junit.xml"
    target.write_text("old\n")
    link = tmp_path / "junit-link.xml"
    link.symlink_to(target)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result = coursectl("verify", "--all", "-q", "--json", fifo, "--junit", link)
    reader.join(10)
    assert result.exit_code == 0, result.output
    assert got and b'"command": "verify"' in got[0]
    assert target.read_text().startswith('<?xml version="1.0"')
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert made.manifest.is_file()


def test_report_refusal_and_write_report_alone(tmp_path):
    """files.py's two, without a command: the one judge and the one writer of a report path."""
    owned = [(tmp_path / "lessons.yaml", "lessons.yaml, the course's manifest")]
    assert report_refusal(tmp_path / "r.json", owned, tmp_path) is None
    assert report_refusal(tmp_path / "lessons.yaml", owned, tmp_path).startswith("is lessons.yaml")
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        assert report_refusal(sock_path, owned, tmp_path) == "is a socket; a report goes to a file"
    write_report(tmp_path / "new" / "r.json", "{}\n")
    assert (tmp_path / "new" / "r.json").read_text() == "{}\n"


def test_many_paths_resolved_at_once_lead_where_realpath_says(tmp_path):
    """files._Resolving, which looks up each folder once for the report paths' check, against files._real, one
    path at a time: links within the tree and out of it, a link's loop, a missing file, a file as a folder,
    a '..' after a link."""
    from orchestrator.files import _Resolving, _real
    (tmp_path / "c" / "lessons" / "a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "c" / "lessons" / "a" / "x.cu").write_text("")
    (tmp_path / "c" / "lessons" / "b").symlink_to("a")
    (tmp_path / "c" / "lessons" / "far").symlink_to(tmp_path / "out")
    (tmp_path / "c" / "lessons" / "a" / "y.cu").symlink_to("x.cu")
    (tmp_path / "c" / "loop").symlink_to("loop")
    names = ["c/lessons/a/x.cu", "c/lessons/b/x.cu", "c/lessons/b/y.cu", "c/lessons/far/new.md", "c/loop",
             "c/loop/x", "c/lessons/a/missing/README.md", "c/lessons/a/x.cu/inside", "c/lessons/far/../a/x.cu",
             "c/lessons/b/./x.cu", "c//lessons/a", "c/lessons/a/y.cu"]
    resolved = _Resolving()
    for name in names * 2:   # the second time from what it found the first
        assert resolved(tmp_path / name) == _real(tmp_path / name), name
    assert resolved(tmp_path / "c/loop") is None and resolved(tmp_path / "c/lessons/far/new.md") == str(
        tmp_path / "out" / "new.md")


# -- 5. templates through links, or no file at all --------------------------------------------------------
def test_a_lesson_template_linked_out_of_the_course_is_never_published(course_copy, tmp_path, secret):
    """A lesson's template linked to /etc/passwd was published in its page."""
    own = course_copy / "templates" / "lessons" / f"{DAY14}.md.j2"
    own.unlink()
    own.symlink_to(secret)
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    for command in (["render", "--check"], ["render"]):
        refused(coursectl(*command), leaves(f"templates/lessons/{DAY14}.md.j2", secret),
                hint_for(f"templates/lessons/{DAY14}.md.j2"))
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


def test_an_included_template_linked_out_of_the_course_is_refused(course_copy, tmp_path, secret):
    own = course_copy / "templates" / "lessons" / f"{DAY14}.md.j2"
    own.write_text(own.read_text() + '{% include "lessons/part.j2" %}\n')
    (course_copy / "templates" / "lessons" / "part.j2").symlink_to(secret)
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    result = coursectl("render")
    assert (result.exit_code, result.stdout) == (2, "")
    assert leaves("templates/lessons/part.j2", secret) in result.stderr
    assert "a secret" not in result.stderr
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


def test_a_templates_folder_linked_out_of_the_course_is_refused_as_one(course_copy, tmp_path):
    elsewhere = tmp_path / "templates-elsewhere"
    shutil.move(course_copy / "templates", elsewhere)
    (course_copy / "templates").symlink_to(elsewhere)
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    refused(coursectl("render"), leaves("templates", elsewhere), hint_for("templates"))
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


def test_a_template_that_is_a_fifo_or_a_device_is_refused_not_passed_over(course_copy, tmp_path):
    """A lesson's template linked to /dev/zero, or a FIFO in its place, was skipped without a word."""
    own = course_copy / "templates" / "lessons" / f"{DAY14}.md.j2"
    own.unlink()
    os.mkfifo(own)
    whole = snapshot(course_copy)
    refused(coursectl("render", "--check"), f"templates/lessons/{DAY14}.md.j2: a named pipe where a file should be")
    own.unlink()
    os.mknod(own, 0o644 | stat.S_IFCHR, os.makedev(1, 5)) if os.geteuid() == 0 else own.symlink_to("/dev/zero")
    message = (f"templates/lessons/{DAY14}.md.j2: a device where a file should be" if os.geteuid() == 0
               else leaves(f"templates/lessons/{DAY14}.md.j2", Path("/dev/zero")))
    result = coursectl("render")
    assert (result.exit_code, result.stdout) == (2, "") and result.stderr.startswith(f"coursectl: error: {message}\n")
    assert snapshot(course_copy) == whole


# -- 6. evidence through a link out of the course --------------------------------------------------------
def test_an_evidence_folder_linked_out_of_the_course_is_not_evidence(course_copy, tmp_path):
    """An evidence GPU folder linked outside the course was read as evidence and published by render and check."""
    elsewhere = tmp_path / "h200-elsewhere"
    shutil.move(course_copy / "evidence" / DAY14 / "nvidia-h200", elsewhere)
    (course_copy / "evidence" / DAY14 / "nvidia-h200").symlink_to(elsewhere)
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    link = f"evidence/{DAY14}/nvidia-h200"
    for command in (["render"], ["render", "--check"], ["check", DAY14]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (1, ""), command
        assert result.stderr == f"coursectl: error: {leaves(link, elsewhere)}\nhint: {hint_for(link)}\n"
        assert "NVIDIA H200" not in result.stderr
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


# -- headers, prose and sources through links ------------------------------------------------------------
def test_a_header_linked_out_of_the_course_is_not_published(course_copy, tmp_path):
    header = tmp_path / "extra.cuh"
    header.write_text("#pragma once\n// a secret of the machine\n")
    (course_copy / "lessons" / DAY14 / "extra.cuh").symlink_to(header)
    source = course_copy / "lessons" / DAY14 / "syncthreads.cu"
    source.write_text(source.read_text().replace("#include <cstdio>", '#include "extra.cuh"\n#include <cstdio>', 1))
    before, whole = outside(tmp_path, course_copy), snapshot(course_copy)
    result = coursectl("render")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (f"coursectl: error: {leaves(f'lessons/{DAY14}/extra.cuh', header)}\n"
                             f"hint: {hint_for(f'lessons/{DAY14}/extra.cuh')}\n")
    assert snapshot(course_copy) == whole and outside(tmp_path, course_copy) == before


def test_prose_linked_out_of_the_course_is_refused_naming_the_link(course_copy, tmp_path, secret):
    prose = course_copy / "lessons" / DAY14 / "prose.md"
    prose.unlink()
    prose.symlink_to(secret)
    whole = snapshot(course_copy)
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout) == (2, "")
    assert f"lessons/{DAY14}/prose.md is a link to {secret}, outside the course" in result.stderr
    assert snapshot(course_copy) == whole


def test_link_out_names_the_first_link_that_leaves(tmp_path):
    root = tmp_path / "course"
    (root / "inner").mkdir(parents=True)
    (tmp_path / "away").mkdir()
    (root / "a").symlink_to(root / "inner")          # a link within the course is the course's own
    (root / "inner" / "b").symlink_to(tmp_path / "away")
    assert link_out(root / "a" / "x", root) is None
    assert link_out(root / "inner" / "b" / "x", root) == (root / "inner" / "b", (tmp_path / "away").resolve())
    assert link_out(root / "a" / "b" / "x", root) == (root / "a" / "b", (tmp_path / "away").resolve())
    (root / "loop").symlink_to(root / "loop")         # a link that cannot be followed leads nowhere inside
    assert link_out(root / "loop" / "x", root) is not None
    assert link_out(Path("/usr/include/stdio.h"), root) is None


# -- 7. lessons.yaml that is a link -------------------------------------------------------------------------
def test_lessons_yaml_linked_to_another_course_keeps_this_folder_as_the_course(course_copy, tmp_path):
    """render in a folder whose lessons.yaml links to another course rewrote the other course's pages."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "lessons.yaml").symlink_to(course_copy / "lessons.yaml")
    os.chdir(here)
    before = snapshot(tmp_path)
    for command in (["render"], ["new", "day20-saxpy", "--title", "SAXPY"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, "")
        assert "lessons/day13-shared-memory/ holds no .cu file" in result.stderr   # this folder's, which has none
    assert snapshot(tmp_path) == before and (here / "lessons.yaml").is_symlink()


def test_lessons_yaml_linked_to_a_lone_file_finds_the_lessons_beside_the_link(tmp_path):
    """A link to a lone file gave a false `holds no .cu file`; new then split a lesson across two folders."""
    course = copy_course(tmp_path / "course")
    os.chdir(course)
    assert coursectl("render").exit_code == 0   # its pages as render writes them, whatever lessons it holds
    lone = tmp_path / "elsewhere" / "lessons.yaml"
    lone.parent.mkdir()
    shutil.move(course / "lessons.yaml", lone)
    (course / "lessons.yaml").symlink_to(lone)
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "every page is up to date\n", "")
    before = (snapshot(tmp_path), kinds(tmp_path))
    refused(coursectl("new", "day20-saxpy", "--title", "SAXPY"),
            f"lessons.yaml: is a link to {lone}; `new` writes the lesson into lessons.yaml and its folder beside it, "
            "so it edits only a manifest that is a file of the course",
            "run `new` in the course the link leads to, or put the file itself in place of the link")
    assert (snapshot(tmp_path), kinds(tmp_path)) == before


def test_new_refuses_a_lessons_folder_linked_out_of_the_course(course_copy, tmp_path):
    elsewhere = tmp_path / "lessons-elsewhere"
    shutil.move(course_copy / "lessons", elsewhere)
    (course_copy / "lessons").symlink_to(elsewhere)
    before = snapshot(tmp_path)
    result = coursectl("new", "day20-saxpy", "--title", "SAXPY")
    assert (result.exit_code, result.stdout) == (2, "")
    assert "lessons" in result.stderr and f"a link to {elsewhere}" in result.stderr
    assert snapshot(tmp_path) == before
