"""Hostile and broken input: evidence that is not what it claims, a toolchain that cannot run,
command lines that try to leave the cache, output built to be slow, programs that leave children
behind, templates that try to run a shell, and pages that are links or files render did not write.

Each case ends as a result or as one line with the right exit status, never a traceback, and
writes nothing it should not. Most tests run coursectl in this process (typer's CliRunner) on
stand-in lessons, as tests/test_cli.py does; test_no_hostile_case_prints_a_traceback runs the
installed console script on each case.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import (GPU_SLUG, GPU_UUID, COURSE, STANDINS, H, after, coursectl, edit, is_gone, lines, named, snapshot,
                      statuses)

DAY14_MEMCHECK = {"day14-syncthreads": {"memcheck": {}}}


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, folders and links included: what a rename would change."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def recorded(course, lesson_ids=("day14-syncthreads", "day16-tiled-matmul"), sanitizers=DAY14_MEMCHECK):
    """A course whose lessons were recorded on the stood-in H200 (day 14 with its memcheck log)."""
    made = course(list(lesson_ids), sanitizers=sanitizers)
    assert coursectl("record", "--all", "-q").exit_code == 0
    return made


# -- 1. a folder where an evidence file should be ---------------------------------------------------
FOLDER_IN_PLACE = [
    ("memcheck.log", False, "evidence: {ev}/memcheck.log: a folder where a file should be"),
    ("memcheck.log", True, "evidence for nvidia-h200: {ev}/memcheck.log: a folder where a file should be"),
    ("memcheck.xml", True, "nvidia-h200: recorded {ev}/memcheck.xml: a folder where a file should be"),
    ("build/sm_90.json", False, "{ev}/../build/sm_90.json: a folder where a file should be"),
    ("build/sm_90.json", True, "{ev}/../build/sm_90.json: a folder where a file should be"),
]


@pytest.mark.parametrize("name, offline, reason", FOLDER_IN_PLACE,
                         ids=["log", "log-offline", "xml-offline", "build", "build-offline"])
def test_a_folder_in_place_of_an_evidence_file_fails_that_lesson_only(course, fake_sanitizer, prebuilt, tmp_path,
                                                                    name, offline, reason):
    made = recorded(course)
    evidence = made.evidence("day14-syncthreads")
    target = evidence / ".." / name if name.startswith("build/") else evidence / name
    if target.exists():
        target.unlink()
    target.mkdir()
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report, *(["--offline"] if offline else []))
    assert (result.exit_code, result.stderr) == (1, "")
    title = "verify --offline" if offline else "verify"
    assert statuses(result.stdout, title) == {"day14-syncthreads": "FAIL", "day16-tiled-matmul": "PASS"}
    [failed, passed] = json.loads(report.read_text())["results"]
    assert failed["reasons"] == [reason.format(ev=named(evidence, made.root)).replace(f"{GPU_SLUG}/../", "")]
    assert passed["reasons"] == []


# -- 2. evidence that points outside its folder -----------------------------------------------------
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def link_log_to_dev_zero(evidence: Path, outside: Path) -> str:
    (evidence / "memcheck.log").unlink()
    (evidence / "memcheck.log").symlink_to("/dev/zero")
    return f"{evidence}/memcheck.log: a link leading out of the evidence folder, to /dev/zero"


def name_dev_zero(evidence: Path, outside: Path) -> str:
    meta = json.loads((evidence / "meta.json").read_text())
    meta["files"] = {"/dev/zero": hashlib.sha256(b"").hexdigest()}
    (evidence / "meta.json").write_text(json.dumps(meta))
    return (f"{evidence}/meta.json: corrupt metadata: files: '/dev/zero' is not the plain name of a file in the "
            "evidence folder")


def name_a_file_above(evidence: Path, outside: Path) -> str:
    meta = json.loads((evidence / "meta.json").read_text())
    meta["files"] = {"../../../../secret.txt": sha256(outside)}
    (evidence / "meta.json").write_text(json.dumps(meta))
    return (f"{evidence}/meta.json: corrupt metadata: files: '../../../../secret.txt' is not the plain name of a "
            "file in the evidence folder")


def link_log_to_a_file_above(evidence: Path, outside: Path) -> str:
    log = evidence / "memcheck.log"
    outside.write_bytes(log.read_bytes())   # the same bytes: only where it lies gives it away
    log.unlink()
    log.symlink_to(outside)
    return f"{evidence}/memcheck.log: a link leading out of the evidence folder, to {outside}"


@pytest.mark.parametrize("plant", [link_log_to_dev_zero, name_dev_zero, name_a_file_above, link_log_to_a_file_above],
                         ids=["link-to-dev-zero", "dev-zero-in-files", "path-above-in-files", "link-above"])
def test_evidence_naming_a_file_outside_its_folder_is_refused(course, fake_sanitizer, prebuilt, tmp_path, plant):
    made = recorded(course)
    outside = tmp_path / "secret.txt"
    outside.write_text("not evidence\n")
    assert made.evidence("day14-syncthreads").resolve().parents[3] == tmp_path.resolve()
    evidence = made.evidence("day14-syncthreads")
    # Named from the course's root; only a link's target outside the course keeps its whole path.
    reason = plant(evidence, outside).replace(f"{evidence}/", f"{named(evidence, made.root)}/")
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "--offline", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    assert statuses(result.stdout, "verify --offline") == {"day14-syncthreads": "FAIL", "day16-tiled-matmul": "PASS"}
    assert json.loads(report.read_text())["results"][0]["reasons"] == [f"evidence for nvidia-h200: {reason}"]


# -- 8. read-only commands write nothing ----------------------------------------------------------------
def left_aside(made) -> tuple[Path, str]:
    """Killed between write_evidence's two renames, record left `.nvidia-h200.old`; a stray `.evil.old` lies beside."""
    directory = made.evidence("day16-tiled-matmul")
    os.rename(directory, directory.parent / f".{GPU_SLUG}.old")
    stray = directory.parent / ".evil.old"
    stray.mkdir()
    (stray / "meta.json").write_bytes((directory.parent / f".{GPU_SLUG}.old" / "meta.json").read_bytes())
    reason = (f"{named(directory.parent, made.root)}/.{GPU_SLUG}.old: the evidence for {GPU_SLUG}, left aside by an interrupted "
              "record; `coursectl record day16-tiled-matmul` puts it back")
    return directory, reason


READ_ONLY = [
    (["verify", "--all", "-q"], 1, "verify", "evidence: {reason}"),
    (["verify", "--all", "--offline", "-q"], 1, "verify --offline", "evidence for nvidia-h200: {reason}"),
    (["render", "--check"], 1, None, "coursectl: error: {reason}"),
    (["doctor"], 0, None, None),
]


@pytest.mark.parametrize("command, status, title, said", READ_ONLY, ids=["verify", "offline", "render-check", "doctor"])
def test_read_only_commands_leave_a_set_left_aside_where_it_lies(course, fake_sanitizer, prebuilt, command, status,
                                                                title, said):
    made = recorded(course, ["day16-tiled-matmul"], sanitizers=None)
    _, reason = left_aside(made)
    before = (tree(made.root / "evidence"), snapshot(made.root / "evidence"))
    result = coursectl(*command)
    assert (tree(made.root / "evidence"), snapshot(made.root / "evidence")) == before
    assert result.exit_code == status
    if title is not None:
        assert after(result.stdout, title) == [f"day16-tiled-matmul: {said.format(reason=reason)}"]
    elif said is not None:
        assert result.stderr.splitlines()[0] == said.format(reason=reason)


def test_record_puts_back_a_set_left_aside_and_says_so(course, fake_gpu, prebuilt, tmp_path):
    """Here the gate fails, so record writes no new set: what it put back is the old one, byte for byte."""
    made = recorded(course, ["day16-tiled-matmul"], sanitizers=None)
    before = snapshot(made.evidence("day16-tiled-matmul"))
    directory, _ = left_aside(made)
    edit(made.transcript("day16-tiled-matmul"), "all 3 cases match", "all 2 cases match")
    report = tmp_path / "report.json"
    result = coursectl("record", "--all", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["notes"] == [f"put back {named(directory, made.root)}: an interrupted record had left it aside in "
                               f".{GPU_SLUG}.old"]
    assert lesson["reasons"][0] == "not recorded: the previous evidence is untouched"
    assert snapshot(directory) == before
    assert sorted(p.name for p in directory.parent.iterdir()) == [".evil.old", "build", GPU_SLUG]


# -- 3. an nvcc that cannot start -------------------------------------------------------------------
@pytest.fixture
def nvcc_that_cannot_start(tmp_path, monkeypatch, gpu_bin, sanitizer_bin) -> Path:
    """PATH: an nvcc script whose interpreter is missing, then the fake GPU tools."""
    from orchestrator.cuda import toolchain

    folder = tmp_path / "broken-bin"
    folder.mkdir()
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/nonexistent/python\nprint('never')\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(folder), str(gpu_bin), str(sanitizer_bin)]))
    monkeypatch.setattr(toolchain, "_cuda_dirs", lambda: [])  # not /usr/local/cuda/bin of this machine
    return nvcc


def cannot_run(nvcc: Path) -> str:
    return (f"coursectl: error: nvcc at {nvcc} cannot run: No such file or directory (its interpreter "
            "/nonexistent/python is missing)\n"
            "hint: repair the CUDA toolkit, or put a working nvcc first on PATH\n")


@pytest.mark.parametrize("command", [["build", "--all"], ["verify", "--all"], ["verify", "--all", "--offline"],
                                     ["record", "--all"]], ids=["build", "verify", "offline", "record"])
def test_an_nvcc_that_cannot_start_exits_3(course, nvcc_that_cannot_start, command):
    made = course(["day16-tiled-matmul"])
    result = coursectl(*command)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "", cannot_run(nvcc_that_cannot_start))
    assert not (made.root / "evidence").exists()


def test_doctor_marks_an_nvcc_that_cannot_start_and_still_prints_its_table(course, nvcc_that_cannot_start,
                                                                         sanitizer_bin):
    course(["day16-tiled-matmul"])
    result = coursectl("doctor")
    assert result.exit_code == 3
    assert lines(result.stdout)[:4] == [
        f" nvcc              {H} {nvcc_that_cannot_start}: CANNOT RUN: No such file or directory (its interpreter "
        "/nonexistent/python is missing)",
        f" host compiler     {H} g++: NOT FOUND on PATH: nvcc builds host code with it",
        f" compute-sanitizer {H} {sanitizer_bin / 'compute-sanitizer'} (2025.3.1.0)",
        f" driver            {H} 580.159.04"]
    assert lines(result.stdout)[-1] == f" day16-tiled-matmul {H} none        {H} NO"
    assert result.stderr == cannot_run(nvcc_that_cannot_start)


def test_a_tool_that_is_not_a_program_is_said_so(tmp_path):
    from orchestrator.cuda.toolchain import why_it_cannot_run

    binary = tmp_path / "nvcc"
    binary.write_bytes(b"\x7fELF not really")
    assert why_it_cannot_run(str(binary), OSError(errno.ENOENT, os.strerror(errno.ENOENT))) == (
        "No such file or directory (it exists: a library or loader it needs is missing)")
    assert why_it_cannot_run(str(binary), OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC))) == "Exec format error"


# -- 4. one architecture listed twice: see tests/test_build.py and tests/test_manifest.py ------------------

# -- 5. --arch that is not an architecture ---------------------------------------------------------
@pytest.mark.parametrize("arch", ["../../../../tmp/x", "sm_90; touch X", ""], ids=["path", "shell", "empty"])
@pytest.mark.parametrize("command", [["build", "--all"], ["verify", "--all"], ["verify", "--all", "--offline"],
                                     ["run", "day16-tiled-matmul"]], ids=["build", "verify", "offline", "run"])
def test_an_arch_that_is_not_one_is_a_usage_error_and_makes_nothing(course, fake_gpu, tmp_path, monkeypatch,
                                                                  command, arch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    made = course(["day16-tiled-matmul"])
    before = tree(tmp_path)
    result = coursectl(*command, "--arch", arch)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: --arch {arch!r} is not a GPU architecture; write one like sm_90\n"
    assert tree(tmp_path) == before
    assert not (made.root / "evidence").exists()


# -- 6. a corrupt cache stamp ---------------------------------------------------------------------------
def test_a_corrupt_stamp_is_rebuilt_and_said(course, fake_gpu, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    course(["day16-tiled-matmul"])
    assert coursectl("build", "--all").exit_code == 0
    [stamp] = cache.rglob("build.json")
    stamp.write_bytes(stamp.read_bytes()[:20])
    result = coursectl("build", "--all")
    assert result.exit_code == 0
    assert result.stdout.startswith("day16-tiled-matmul (sm_90): built in ")
    assert result.stderr == (f"day16-tiled-matmul (sm_90): cache entry {stamp.parent} had an unreadable stamp "
                             "(Unterminated string starting at: line 3 column 3 (char 18)); rebuilt\n")
    cached = coursectl("build", "--all")
    assert (cached.exit_code, cached.stderr) == (0, "")
    assert cached.stdout == f"day16-tiled-matmul (sm_90): cached: {stamp.parent / 'replay'}\n"


# -- 7. output built to be slow or long -------------------------------------------------------------------
def test_a_megabyte_line_in_an_evidence_transcript_is_quoted_short(course, fake_gpu, prebuilt, tmp_path):
    made = recorded(course, ["day16-tiled-matmul"], sanitizers=None)
    evidence = made.evidence("day16-tiled-matmul")
    transcript = evidence / "transcript.txt"
    transcript.write_bytes(transcript.read_bytes() + b"y" * 1_000_000 + b"\n")
    meta = json.loads((evidence / "meta.json").read_text())
    meta["transcript_sha256"] = sha256(transcript)   # as if it had been recorded so
    (evidence / "meta.json").write_text(json.dumps(meta))
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "--offline", "-q", "--json", report)
    reason = (f"evidence for nvidia-h200: {transcript.relative_to(made.root)}:17: unexpected line after the last "
              f"item of the schema; found '{'y' * 200}'… (1,000,000 characters)")
    assert (result.exit_code, result.stderr) == (1, "")
    assert after(result.stdout, "verify --offline") == [f"day16-tiled-matmul: {reason}"]
    assert json.loads(report.read_text())["results"][0]["reasons"] == [reason]


def test_a_lesson_printing_one_long_line_fails_with_a_short_reason(course, fake_gpu, prebuilt, tmp_path):
    made = course(["day16-tiled-matmul"])
    made.transcript("day16-tiled-matmul").write_bytes(b"x" * (4 << 20))   # what the stand-in prints
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--json", report)
    reason = ("day16-tiled-matmul stdout:1: expected a line matching 'GPU: {gpu} (compute capability {cc:word})'; "
              f"found '{'x' * 200}'… (4,194,304 characters)")
    assert (result.exit_code, result.stderr) == (1, "")
    assert after(result.stdout, "verify") == [f"day16-tiled-matmul: {reason}"]
    assert max(len(line) for line in result.stdout.splitlines()) < 400
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["reasons"] == [reason]
    assert lesson["transcript"] == "x" * 262_144 + ("\n… cut: the transcript holds 4,194,304 characters; the report "
                                                    "keeps the first 262,144\n")


# -- 10. a lesson that exits and leaves a child holding its stdout ------------------------------------------
def test_a_lesson_leaving_a_child_is_judged_at_once_with_a_note(course, fake_gpu, tmp_path):
    pid_file = tmp_path / "child.pid"

    def orphan(manifest: dict) -> None:
        manifest["lessons"][0]["source"] = "standins/orphan.cpp"
        manifest["lessons"][0]["args"].append(str(pid_file))

    made = course(["day16-tiled-matmul"], edit=orphan)
    shutil.copyfile(STANDINS / "orphan.cpp", made.root / "standins" / "orphan.cpp")
    assert coursectl("build", "--all").exit_code == 0
    report = tmp_path / "report.json"
    started = time.monotonic()
    result = coursectl("verify", "--all", "-q", "--json", report)
    elapsed = time.monotonic() - started
    assert (result.exit_code, result.stderr) == (0, "")
    assert statuses(result.stdout) == {"day16-tiled-matmul": "NO_EVIDENCE"}
    assert after(result.stdout, "verify")[-1] == "day16-tiled-matmul: note: left a child process running; stopped"
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["notes"] == ["left a child process running; stopped"]
    assert elapsed < 8, f"verify took {elapsed:.1f} s: it waited for the child"   # 10 s and more before
    assert is_gone(int(pid_file.read_text()))



def test_a_signal_another_thread_takes_still_stops_the_run(make_course, prebuilt, nvcc_version, ctrl_c):
    """The kernel may hand Ctrl-C or SIGTERM to any thread: here the GPU worker's own. The main thread,
    waiting for the lessons, still stops the run at once, not when the lesson ends 30 s later."""
    from orchestrator.errors import Interrupted
    from orchestrator.workflows.pipeline import verify
    from orchestrator.process import run_command
    from orchestrator.judge.results import Options
    from orchestrator.cuda.toolchain import Gpu, Toolchain

    manifest = make_course(["day13-shared-memory"]).load()
    toolchain = Toolchain(nvcc=shutil.which("nvcc"), nvcc_version=nvcc_version,
                          gpus=[Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")])

    def runner(argv, **kwargs):
        if str(argv[0]).endswith("/replay"):   # the lesson's run, not nvcc
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)   # this worker thread, not the main one
            return run_command(["sleep", "30"], **kwargs)
        return run_command(argv, **kwargs)

    started = time.monotonic()
    with pytest.raises(Interrupted):
        verify(manifest, manifest.lessons, toolchain, Options(jobs=1, sanitize=False), runner=runner)
    assert time.monotonic() - started < 10, "the interrupt waited for the lesson to end"


def test_a_signal_another_thread_takes_during_builds_keeps_nvcc_from_the_cache(make_course, nvcc_version, ctrl_c,
                                                                               tmp_path, monkeypatch, real_nvcc):
    """Here the thread that runs nvcc takes the Ctrl-C: nvcc is still stopped before it can finish."""
    from orchestrator.errors import Interrupted
    from orchestrator.workflows.pipeline import build_many
    from orchestrator.process import run_command
    from orchestrator.cuda.toolchain import Toolchain

    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))   # so that nvcc really runs
    manifest = make_course(["day16-tiled-matmul"], cuda=True).load()   # a build that lasts
    toolchain = Toolchain(nvcc=shutil.which("nvcc"), nvcc_version=nvcc_version)

    def runner(argv, **kwargs):
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)   # a build thread, not the main one
        return run_command(argv, **kwargs)

    with pytest.raises(Interrupted):
        build_many(manifest, [(manifest.lessons[0], "sm_90")], toolchain, 1, runner)
    assert [p for p in cache.rglob("*") if p.is_file()] == []

# -- 11. a template that reaches for a shell --------------------------------------------------------------
ESCAPES = [
    ("{{ lipsum.__globals__['os'].system('touch ' ~ marker) }}",
     "access to attribute '__globals__' of 'function' object is unsafe"),
    ("{{ cycler.__init__.__globals__.os.system('touch ' ~ marker) }}",
     "access to attribute '__init__' of 'type' object is unsafe"),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}",
     "access to attribute '__class__' of 'str' object is unsafe"),
    ("{{ '{0.__class__.__init__}'.format(lesson) }}",   # the sandbox's formatter looks up each part
     "access to attribute '__init__' of 'StrictUndefined' object is unsafe"),
]


@pytest.mark.parametrize("payload, message", ESCAPES, ids=["lipsum-globals", "cycler-init", "str-mro", "format"])
def test_a_template_reaching_for_python_internals_is_a_template_error(course_copy, tmp_path, payload, message):
    marker = tmp_path / "ran-a-shell"
    template = course_copy / "templates" / "lessons" / "day13-shared-memory.md.j2"
    template.write_text('{% extends "lesson.md.j2" %}\n{% block code %}\n{% set marker = "' + str(marker)
                        + '" %}\n' + payload + "\n{% endblock %}\n")
    before = (tree(course_copy), snapshot(course_copy))
    for command in (["render", "--check"], ["render"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr == f"coursectl: error: templates/lessons/day13-shared-memory.md.j2:4: {message}\n"
    assert not marker.exists()
    assert (tree(course_copy), snapshot(course_copy)) == before


def test_the_sandbox_renders_the_course_as_before(course_copy):
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "every page is up to date\n", "")


def test_a_page_linked_outside_the_course_is_never_read_nor_replaced(course_copy, tmp_path):
    """render --check printed the linked file in its diff, render replaced the link; both now stop, naming it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("a secret of the machine\n")
    page = course_copy / "lessons" / "day14-syncthreads" / "README.md"
    page.unlink()
    page.symlink_to(secret)
    before = (tree(course_copy), snapshot(course_copy))
    for command in (["render", "--check"], ["render"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr == (
            "coursectl: error: lessons.yaml:64: lesson 'day14-syncthreads': its page, beside its source, would be "
            f"lessons/day14-syncthreads/README.md, a symbolic link (to {secret}); render writes each page as a file "
            "of its own\nhint: remove the link lessons/day14-syncthreads/README.md: render writes the page there\n")
    assert (tree(course_copy), snapshot(course_copy)) == before
    assert page.is_symlink() and secret.read_text() == "a secret of the machine\n"


# -- 12. a pattern in lessons.yaml that backtracks without end ----------------------------------------------
BACKTRACKING = "^(?:.|..)+[.;]$"   # every way of cutting a line into pieces of one and two characters


def ignore_backtracking(made) -> int:
    """Day 16's output ignores lines BACKTRACKING matches; the line of that pattern in lessons.yaml."""
    data = yaml.safe_load(made.manifest.read_text())
    [day16] = [lesson for lesson in data["lessons"] if lesson["id"] == "day16-tiled-matmul"]
    day16["output"]["ignore"] = [BACKTRACKING]
    text = yaml.safe_dump(data, sort_keys=False, width=1000)
    made.manifest.write_text(text)
    return next(n for n, row in enumerate(text.splitlines(), 1) if BACKTRACKING in row)


@pytest.mark.slow   # waits out a pattern's time bound, on purpose
def test_a_pattern_that_backtracks_without_end_fails_its_lesson_and_the_others_stand(course, fake_sanitizer, prebuilt,
                                                                                      tmp_path, monkeypatch):
    """verify --offline, render --check and check hung on day 16's first line; now each match has 1 s (0.2 here)."""
    from orchestrator.transcript import patterns

    monkeypatch.setattr(patterns, "LINE_SECONDS", 0.2)
    # Day 16 first (as day 1), so that render --check parses its evidence before it makes any page.
    made = course(["day16-tiled-matmul", "day14-syncthreads"], sanitizers=DAY14_MEMCHECK,
                  edit=lambda manifest: manifest["lessons"][0].update(day=1))
    assert coursectl("record", "--all", "-q").exit_code == 0
    line = ignore_backtracking(made)
    evidence = f"{named(made.evidence('day16-tiled-matmul'), made.root)}/transcript.txt"
    said = (f":1: the pattern of lessons.yaml:{line} (output.ignore[0] {BACKTRACKING!r}) took longer than 0.2 s on "
            "this line, so the transcript was not parsed further; a regex that can match a text in very many ways, as "
            "(a|aa)+$ can, backtracks without end: write it so that it cannot; found 'GPU: NVIDIA H200 (compute "
            "capability 9.0)'")
    report = tmp_path / "report.json"
    result = coursectl("verify", "--all", "--offline", "-q", "--json", report)
    assert (result.exit_code, result.stderr) == (1, "")
    assert statuses(result.stdout, "verify --offline") == {"day14-syncthreads": "PASS", "day16-tiled-matmul": "FAIL"}
    assert json.loads(report.read_text())["results"][0]["reasons"] == [f"evidence for nvidia-h200: {evidence}{said}"]
    shutil.copytree(COURSE / "templates", made.root / "templates")
    (made.root / "README.md").write_text("# Course\n\n<!-- lessons:begin -->\n<!-- lessons:end -->\n")
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stderr) == (1, f"coursectl: error: {evidence}{said}\n")
    transcript = made.transcript("day16-tiled-matmul")
    result = coursectl("check", "day16-tiled-matmul", transcript)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"coursectl: error: {transcript}{said}\n"
        f"lessons.yaml:{line}: lesson 'day16-tiled-matmul': output.ignore[0] is the pattern that ran out of time\n"
        "hint: fix the program's output or the lesson's output schema in lessons.yaml; docs/schema.md describes it\n")


# -- every case above through the installed console script: a line, never a traceback -------------------------
COURSECTL = Path(sys.executable).parent / "coursectl"


def folder_for_the_memcheck_log(made, tmp_path, monkeypatch):
    log = made.evidence("day14-syncthreads") / "memcheck.log"
    log.unlink()
    log.mkdir()
    return ["verify", "--all", "--offline", "-q"], 1


def memcheck_log_linked_to_dev_zero(made, tmp_path, monkeypatch):
    link_log_to_dev_zero(made.evidence("day14-syncthreads"), tmp_path / "secret.txt")
    return ["verify", "--all", "-q"], 1


def a_path_above_in_files(made, tmp_path, monkeypatch):
    (tmp_path / "secret.txt").write_text("not evidence\n")
    name_a_file_above(made.evidence("day14-syncthreads"), tmp_path / "secret.txt")
    return ["render", "--check"], 1


def an_nvcc_that_cannot_start(made, tmp_path, monkeypatch):
    nvcc = tmp_path / "broken-bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/nonexistent/python\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(nvcc.parent), os.environ["PATH"]]))
    return ["doctor"], 3


def an_architecture_listed_twice(made, tmp_path, monkeypatch):
    made.manifest.write_text(made.manifest.read_text().replace("architectures:\n- sm_90\n- sm_75\n",
                                                               "architectures: [sm_89, sm_89, sm_89]\n"))
    return ["build", "--all"], 2


def arch_leaving_the_cache(made, tmp_path, monkeypatch):
    return ["build", "--all", "--arch", "../../../../tmp/x"], 2


def a_corrupt_stamp(made, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    assert coursectl("build", "day16-tiled-matmul").exit_code == 0
    [stamp] = cache.rglob("build.json")
    stamp.write_bytes(b"[]")
    return ["build", "day16-tiled-matmul"], 0


def a_set_left_aside(made, tmp_path, monkeypatch):
    directory = made.evidence("day16-tiled-matmul")
    os.rename(directory, directory.parent / f".{GPU_SLUG}.old")
    return ["verify", "--all", "--offline", "-q"], 1


def a_megabyte_line_in_the_evidence(made, tmp_path, monkeypatch):
    evidence = made.evidence("day16-tiled-matmul")
    transcript = evidence / "transcript.txt"
    transcript.write_bytes(transcript.read_bytes() + b"y" * 1_000_000)
    meta = json.loads((evidence / "meta.json").read_text())
    meta["transcript_sha256"] = sha256(transcript)
    (evidence / "meta.json").write_text(json.dumps(meta))
    return ["verify", "--all", "-q"], 1


def a_pattern_that_backtracks_without_end(made, tmp_path, monkeypatch):
    ignore_backtracking(made)
    return ["verify", "--all", "--offline", "-q"], 1


def a_template_reaching_for_a_shell(made, tmp_path, monkeypatch):
    shutil.copytree(COURSE / "templates", made.root / "templates")
    (made.root / "README.md").write_text("# Course\n\n<!-- lessons:begin -->\n<!-- lessons:end -->\n")
    (made.root / "templates" / "lesson.md.j2").write_text(
        "{{ lipsum.__globals__['os'].system('touch " + str(tmp_path / "ran-a-shell") + "') }}\n")
    return ["render", "--check"], 2


def a_template_writing_through_a_path(made, tmp_path, monkeypatch):
    a_template_reaching_for_a_shell(made, tmp_path, monkeypatch)
    (made.root / "templates" / "lesson.md.j2").write_text(
        "{{ lesson.source.joinpath('" + str(tmp_path / "ran-a-shell") + "').write_text('owned') }}\n")
    return ["render"], 2


def a_template_calling_itself(made, tmp_path, monkeypatch):
    a_template_reaching_for_a_shell(made, tmp_path, monkeypatch)
    (made.root / "templates" / "lesson.md.j2").write_text("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}\n")
    return ["render", "--check"], 2


def a_template_building_ten_gigabytes(made, tmp_path, monkeypatch):
    a_template_reaching_for_a_shell(made, tmp_path, monkeypatch)
    (made.root / "templates" / "lesson.md.j2").write_text("{{ 'a' * 10**10 }}\n")
    return ["render", "--check"], 2


def a_page_linked_outside_the_course(made, tmp_path, monkeypatch):
    a_template_reaching_for_a_shell(made, tmp_path, monkeypatch)
    (made.root / "templates" / "lesson.md.j2").write_text("# {{ lesson.title }}\n")
    (tmp_path / "secret.txt").write_text("not for the course\n")
    page = made.root / "lessons" / "day14-syncthreads" / "README.md"
    page.parent.mkdir(parents=True)
    page.symlink_to(tmp_path / "secret.txt")
    return ["render", "--check"], 2


def a_page_path_naming_a_hand_written_file(made, tmp_path, monkeypatch):
    a_page_linked_outside_the_course(made, tmp_path, monkeypatch)
    page = made.root / "lessons" / "day14-syncthreads" / "README.md"
    page.unlink()
    page.write_text("# Written by hand\n")
    return ["render"], 2


def a_stamp_nested_100000_deep(made, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COURSECTL_CACHE", str(cache))
    assert coursectl("build", "day16-tiled-matmul").exit_code == 0
    [stamp] = cache.rglob("build.json")
    stamp.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return ["build", "day16-tiled-matmul"], 0


def a_report_nested_100000_deep(made, tmp_path, monkeypatch):
    (tmp_path / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return ["report", "merge", str(tmp_path / "deep.json")], 2


def a_source_that_is_not_utf8(made, tmp_path, monkeypatch):
    with open(made.root / "standins" / "replay.cpp", "ab") as source:
        source.write(b"// caf\xe9\n")
    return ["verify", "--all", "--offline", "-q"], 1


def dev_zero_as_a_transcript(made, tmp_path, monkeypatch):
    return ["check", "day16-tiled-matmul", "/dev/zero"], 2


def a_report_path_that_is_the_manifest(made, tmp_path, monkeypatch):
    return ["verify", "--all", "--offline", "--json", "lessons.yaml"], 2


def a_template_linked_outside_the_course(made, tmp_path, monkeypatch):
    a_template_reaching_for_a_shell(made, tmp_path, monkeypatch)
    (tmp_path / "secret.txt").write_text("not for the course\n")
    template = made.root / "templates" / "lesson.md.j2"
    template.unlink()
    template.symlink_to(tmp_path / "secret.txt")
    return ["render", "--check"], 2


def an_evidence_folder_linked_outside_the_course(made, tmp_path, monkeypatch):
    folder = made.evidence("day16-tiled-matmul")
    shutil.move(folder, tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    return ["check", "day16-tiled-matmul"], 1


def a_flag_nvcc_would_hand_to_a_shell(made, tmp_path, monkeypatch):
    manifest = yaml.safe_load(made.manifest.read_text())
    manifest["defaults"]["flags"] = ["-O3", "-DX=a\\\\", f"-DY=;touch {tmp_path / 'ran-a-shell'};#"]
    made.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return ["verify", "--all", "--offline", "-q"], 2


def a_cache_inside_the_evidence(made, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSECTL_CACHE", "evidence/cache")
    return ["build", "--all"], 2


HOSTILE_CASES = [folder_for_the_memcheck_log, memcheck_log_linked_to_dev_zero, a_path_above_in_files,
                 an_nvcc_that_cannot_start, an_architecture_listed_twice, arch_leaving_the_cache, a_corrupt_stamp,
                 a_set_left_aside, a_megabyte_line_in_the_evidence, a_pattern_that_backtracks_without_end,
                 a_template_reaching_for_a_shell,
                 a_template_writing_through_a_path, a_template_calling_itself, a_template_building_ten_gigabytes,
                 a_page_linked_outside_the_course, a_page_path_naming_a_hand_written_file,
                 a_stamp_nested_100000_deep, a_report_nested_100000_deep, a_source_that_is_not_utf8,
                 dev_zero_as_a_transcript, a_report_path_that_is_the_manifest, a_template_linked_outside_the_course,
                 an_evidence_folder_linked_outside_the_course, a_flag_nvcc_would_hand_to_a_shell,
                 a_cache_inside_the_evidence]


@pytest.mark.slow   # each case through the installed console script, a process of its own: 12 s of CPU in all
@pytest.mark.parametrize("case", HOSTILE_CASES, ids=[case.__name__ for case in HOSTILE_CASES])
def test_no_hostile_case_prints_a_traceback(course, fake_sanitizer, prebuilt, tmp_path, monkeypatch, case):
    assert COURSECTL.is_file(), "the console script is installed with the package (pip install -e .)"
    made = recorded(course)
    command, status = case(made, tmp_path, monkeypatch)
    done = subprocess.run([str(COURSECTL), *command], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="200"))
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == status, done.stdout + done.stderr
    if status in (2, 3):
        assert done.stderr.startswith("coursectl: error: ") and len(done.stderr.splitlines()) <= 2, done.stderr
    assert not (tmp_path / "ran-a-shell").exists()
    assert "not for the course" not in done.stdout + done.stderr


# -- 13. flags that would reach a shell ----------------------------------------------------------------------
# nvcc writes its steps as command lines for /bin/sh (`nvcc -dryrun` prints them): the values of -D, -U, -I,
# -isystem, -L and -include inside double quotes, every other value bare (manifest/flags.py).
def shell_flags(ran: Path) -> dict[str, tuple[list[str], str]]:
    """Flags that ran `touch RAN` through nvcc's shell before they were refused, and what is said of each."""
    touch = f";touch {ran};#"
    bare = ("which nvcc writes unquoted into a command line that a shell reads{}: there a flag may hold only "
            "letters, digits and _-+=.,/:@%; spaces, quotes and other characters only in the values of -D, -U, "
            "-I, -isystem, -L and -include, which nvcc quotes")
    return {
        "backslash-ends-the-quotes": (["-DX=a\\\\", f"-DY={touch}"],
                                      "flag '-DX=a\\\\' holds a backslash: nvcc passes its values on to a shell, "
                                      "where a backslash can end the quotes around a value and let the rest run as "
                                      "a command; write the value without it"),
        "host-compiler-option": (["-Xcompiler", f"-Wall{touch}"],
                                 f"flag '-Xcompiler -Wall{touch}' holds ';', " + bare.format(" (the host compiler's)")),
        "library": ([f"-lm{touch}"], f"flag '-lm{touch}' holds ';', " + bare.format("")),
        "linker-option": ([f"-Xlinker=-v|touch {ran}"],
                          f"flag '-Xlinker=-v|touch {ran}' holds '|', " + bare.format(" (the host linker's)")),
    }


def everything_but(root: Path, *kept: Path) -> dict[str, bytes]:
    """snapshot(root), less what lies under each of `kept` (the course, the cache, the reports)."""
    return {name: data for name, data in snapshot(root).items()
            if not any((root / name).is_relative_to(path) for path in kept)}


@pytest.mark.parametrize("case", ["backslash-ends-the-quotes", "host-compiler-option", "library", "linker-option"])
@pytest.mark.parametrize("command", [["verify", "--all", "--offline"], ["build", "--all"], ["check", "day16-tiled-matmul"]],
                         ids=["verify-offline", "build", "check"])
def test_a_flag_nvcc_would_hand_to_a_shell_is_refused_and_nothing_runs(course, fake_gpu, real_nvcc, tmp_path,
                                                                         case, command):
    ran = tmp_path / "ran-a-shell"
    flags, message = shell_flags(ran)[case]
    made = course(["day16-tiled-matmul"], edit=lambda m: m["defaults"].update(flags=["-O3", *flags]))
    course_before, outside_before = snapshot(made.root), everything_but(tmp_path, made.root)
    line = made.manifest.read_text().splitlines().index("  flags:") + 1
    result = coursectl(*command)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"coursectl: error: lessons.yaml:{line}: defaults.flags: {message}\n"
                             "hint: fix lessons.yaml; docs/schema.md describes every key\n")
    assert not ran.exists()
    assert snapshot(made.root) == course_before and everything_but(tmp_path, made.root) == outside_before


@pytest.mark.parametrize("case", ["backslash-ends-the-quotes", "host-compiler-option", "library"])
def test_each_refused_shell_flag_does_run_a_command_through_nvcc(tmp_path, real_nvcc, case):
    """What the check stands on: nvcc itself, given these flags, runs `touch` (so each case above is live)."""
    ran = tmp_path / "ran-a-shell"
    flags, _ = shell_flags(ran)[case]
    (tmp_path / "a.cpp").write_text("int main() { return 0; }\n")
    subprocess.run([real_nvcc, *flags, "-o", str(tmp_path / "a"), "a.cpp"], cwd=tmp_path, capture_output=True,
                   timeout=300)
    assert ran.exists()


def test_quoted_values_keep_their_spaces_quotes_and_operators(course, real_nvcc, tmp_path):
    """The values nvcc quotes may hold what a shell would read bare: they reach the compiler as written."""
    ran = tmp_path / "ran-a-shell"
    flags = [f"-DNOTE=\"a b ;touch {ran};# 'c' |&<>\"", f"-I{tmp_path}/inc dir;touch {ran}", "-Xcompiler",
             "-Wall,-Wextra", "-lm"]
    made = course(["day16-tiled-matmul"], edit=lambda m: m["defaults"].update(flags=["-O3", *flags]))
    result = coursectl("build", "--all")
    assert (result.exit_code, result.stderr) == (0, ""), result.stdout
    assert not ran.exists() and not (made.root / "evidence").exists()


# -- 14. flags that choose outputs, the architecture or a run --------------------------------------------------
OUTPUT = ("chooses what nvcc writes, or where; the outputs are coursectl's (the binary, its dependency list and "
          "its temporary files go into the build cache): leave it out")
ARCH = ("chooses the GPU architecture, which is coursectl's: list the architectures to build for in "
        "`architectures:` (with a GPU present, coursectl builds for it)")
RUN = "runs the program nvcc builds; coursectl runs each lesson itself, with its `args` and its `timeout`: leave it out"


def own_flags(out: Path) -> list[tuple[list[str], str, str]]:
    return [
        (["--keep-dir", str(out)], f"--keep-dir {out}", OUTPUT),
        ([f"-keep-dir={out}"], f"-keep-dir={out}", OUTPUT),
        (["-keep"], "-keep", OUTPUT),
        (["-o", str(out / "a")], f"-o {out}/a", OUTPUT),
        ([f"--output-directory={out}"], f"--output-directory={out}", OUTPUT),
        (["-MD"], "-MD", OUTPUT),
        (["-MF", str(out / "a.d")], f"-MF {out}/a.d", OUTPUT),
        (["--generate-dependencies"], "--generate-dependencies", OUTPUT),
        (["-time", str(out / "t.csv")], f"-time {out}/t.csv", OUTPUT),
        (["-Xlinker", f"-Map={out}/a.map"], f"-Xlinker -Map={out}/a.map",
         f"makes the host linker write a file of its own (-Map={out}/a.map); the outputs are coursectl's: leave it out"),
        (["-Xcompiler", f"-Wl,-Map={out}/a.map"], f"-Xcompiler -Wl,-Map={out}/a.map",
         f"makes the host compiler write a file of its own (-Map={out}/a.map); the outputs are coursectl's: leave "
         "it out"),
        (["--run"], "--run", RUN),
        (["-run-args", "1"], "-run-args 1", RUN),
        (["-arch=sm_80"], "-arch=sm_80", ARCH),
        (["--gpu-architecture", "sm_80"], "--gpu-architecture sm_80", ARCH),
        (["-gencode", "arch=compute_80,code=sm_80"], "-gencode arch=compute_80,code=sm_80", ARCH),
        (["-code=sm_80"], "-code=sm_80", ARCH),
        (["-optf", str(out / "more.txt")], f"-optf {out}/more.txt",
         "reads more flags from a file, which coursectl does not check: write them in lessons.yaml itself"),
    ]


@pytest.mark.parametrize("index", range(18), ids=[shown for _, shown, _ in own_flags(Path("OUT"))])
def test_a_flag_choosing_an_output_the_architecture_or_a_run_is_refused(course, fake_gpu, real_nvcc, tmp_path,
                                                                        index):
    out = tmp_path / "out"
    flags, shown, why = own_flags(out)[index]
    made = course(["day16-tiled-matmul"], edit=lambda m: m["lessons"][0].update(flags=["-O3", *flags]))
    course_before, outside_before = snapshot(made.root), everything_but(tmp_path, made.root)
    for command in (["verify", "--all", "--offline"], ["build", "--all"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, "")
        assert f": lesson 'day16-tiled-matmul': flags: flag {shown!r} {why}\n" in result.stderr
    assert not out.exists()
    assert snapshot(made.root) == course_before and everything_but(tmp_path, made.root) == outside_before


# -- 15. COURSECTL_CACHE relative, or inside the course ------------------------------------------------------
def test_a_relative_cache_is_taken_from_the_folder_coursectl_started_in(course, tmp_path, monkeypatch):
    made = course(["day16-tiled-matmul"])
    monkeypatch.setenv("COURSECTL_CACHE", "../cache")
    outside_before = everything_but(tmp_path, made.root, tmp_path / "cache")
    result = coursectl("build", "--all")
    assert (result.exit_code, result.stderr) == (0, ""), result.stdout
    assert list((tmp_path / "cache").rglob("build.json")), "the build went into ../cache of the course"
    assert not (made.root / ".coursectl").exists()
    assert everything_but(tmp_path, made.root, tmp_path / "cache") == outside_before


@pytest.mark.parametrize("inside", ["evidence/cache", "templates", "lessons/day16-tiled-matmul/.cache"])
def test_a_cache_inside_the_course_is_refused(course, tmp_path, monkeypatch, inside):
    made = course(["day16-tiled-matmul"])
    folder = inside.split("/")[0]
    (made.root / folder).mkdir(exist_ok=True)
    monkeypatch.setenv("COURSECTL_CACHE", inside)
    before = snapshot(tmp_path), tree(tmp_path)
    for command in (["build", "--all"], ["verify", "--all", "--offline"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, ""), result.stdout
        assert result.stderr == (f"coursectl: error: COURSECTL_CACHE={inside} lies inside the course's {folder}/ "
                                 f"({(made.root / folder).resolve()}), which its build folders would fill\n"
                                 "hint: give COURSECTL_CACHE a folder outside the course's evidence/, templates/ and "
                                 "lessons/, or leave it unset for .coursectl/cache\n")
    assert (snapshot(tmp_path), tree(tmp_path)) == before   # no file and no folder made, in the course or out
