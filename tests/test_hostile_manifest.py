"""Hostile and broken manifests through the command line: exit status 2, one line naming file:line
and what is wrong, the hint, and never a traceback. test_manifest.py and test_claims.py hold the
finer cases; this file is the issue's list, end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import COURSE, coursectl
from test_manifest import LAUGHS, MINIMAL, edited, write

HINT = "hint: fix lessons.yaml; docs/schema.md describes every key\n"
ALLOWED = ("abs, all, any, ceil, decreasing, dims, floor, increasing, isclose, len, log2, max, min, "
           "non_decreasing, non_increasing, round, sorted, sqrt, sum, zip")

CASES = {
    "5000-terms": (edited("gate: n > 0", "gate: " + " + ".join(["n"] * 5000) + " > 0"), 17,
                   "lesson 'hello': claims[0].gate: 'n + n + n + n + n + n + n + n + n + n + n + n + n + n + n + '"
                   "... (20001 characters): is 20001 characters long; a claim's expression has at most 1000"),
    "3000-nots": (edited("gate: n > 0", "gate: " + "not " * 3000 + "n"), 17,
                  "lesson 'hello': claims[0].gate: 'not not not not not not not not not not not not not not not '"
                  "... (12001 characters): is 12001 characters long; a claim's expression has at most 1000"),
    "300-terms": (edited("gate: n > 0", "gate: " + "+".join(["n"] * 300) + " > 0"), 17,
                  "lesson 'hello': claims[0].gate: 'n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+'"
                  "... (603 characters): nests more than 50 levels deep (each operator of a chain such as "
                  "a + b + c is a level)"),
    "method-call": (edited("gate: n > 0", "gate: gpu.upper() == 'X'"), 17,
                    "lesson 'hello': claims[0].gate: \"gpu.upper() == 'X'\": calls the method .upper(); a claim "
                    f"calls only the allowed functions ({ALLOWED})"),
    "id-newline": (edited("  - id: hello\n", '  - id: "hello\\n"\n'), 3,
                   "lesson 'hello\\n': id: lesson id 'hello\\n' must be lower-case letters, digits and dashes"),
    "recursive-alias": ("version: 1\ncourse: &x [*x]\n" + MINIMAL[len("version: 1\n"):], 2,
                        "recursive alias: *x lies inside the value anchored &x at line 2"),
    "billion-laughs": (LAUGHS, 2, "aliases expand the manifest past 200000 values; coursectl stops there"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_manifest_is_one_line_and_exit_2(tmp_path, name):
    text, line, message = CASES[name]
    path = write(tmp_path, text)
    result = coursectl("build", "--all", "--manifest", path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: {path}:{line}: {message}\n{HINT}"


@pytest.mark.parametrize("make, message", [
    (lambda tmp, fifo: Path("/dev/zero"), "a device where a file should be"),
    (lambda tmp, fifo: tmp, "is a directory, not a manifest file"),
    (lambda tmp, fifo: fifo(tmp / "lessons.yaml"), "a named pipe where a file should be"),
    (lambda tmp, fifo: write(tmp, MINIMAL).parent / "latin1.yaml", None),
], ids=["dev-zero", "directory", "fifo", "not-utf8"])
def test_a_manifest_that_is_not_a_manifest_file(tmp_path, fifo, make, message):
    path = make(tmp_path, fifo)
    if message is None:
        path.write_bytes(b"version: 1\ncourse: caf\xe9\n")
        message, where = "is not UTF-8 text: byte 0xe9 cannot be decoded", f"{path}:2"
    else:
        where = str(path)
    result = coursectl("build", "--all", "--manifest", path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: {where}: {message}\n{HINT}"


# Values that loaded, then crashed render --check and verify --offline with a pydantic traceback in
# the parser (rows: -1, repeat: -1), were blamed on the evidence, took away a limit (.inf) or were
# refused in the wrong words (a folder); in the course's own lessons.yaml.
COURSE_EDITS = {
    "rows-negative": ("        rows: 8\n", "        rows: -1\n",
                      "lesson 'day14-syncthreads': output.items[3].rows: -1 is negative; a count is 0 or more"),
    "repeat-negative": ("        repeat: 3\n", "        repeat: -1\n",
                        "lesson 'day71-matmul-fp16': output.items[9].repeat: -1 is negative; a count is 0 or more"),
    "repeat-min-above-max": ("        repeat: 3\n", "        repeat: {min: 5, max: 1}\n",
                             "lesson 'day71-matmul-fp16': output.items[9].repeat: min 5 is more than max 1, so no "
                             "count would do; give a min of at most the max"),
    "keys-twice": ("keys: [copyRowMajor, transposeNaive,", "keys: [copyRowMajor, copyRowMajor,",
                   "lesson 'day13-shared-memory': output.items[5].keys: key 'copyRowMajor' is listed twice; a table "
                   "has one row of each key"),
    "source-a-folder": ("    timeout: 60\n", "    timeout: 60\n    source: lessons/day71-matmul-fp16\n",
                        "lesson 'day71-matmul-fp16': source: lessons/day71-matmul-fp16 is a folder; give the "
                        "lesson's .cu file in it (matmul_fp16.cu)"),
    "timeout-inf": ("    timeout: 60\n", "    timeout: .inf\n",
                    "lesson 'day71-matmul-fp16': timeout: inf s would never stop a hung run; give at most 86400 s "
                    "(a day)"),
}


@pytest.mark.parametrize("command", [["render", "--check"], ["verify", "--offline", "--all"]],
                         ids=["render", "offline"])
@pytest.mark.parametrize("name", list(COURSE_EDITS))
def test_a_value_the_parser_could_not_take_is_refused_when_the_course_loads(tmp_path, monkeypatch, name, command):
    old, new, message = COURSE_EDITS[name]
    shutil.copytree(COURSE / "lessons", tmp_path / "lessons")
    text = (COURSE / "lessons.yaml").read_text()
    assert text.count(old) == 1, old
    text = text.replace(old, new)
    (tmp_path / "lessons.yaml").write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if new.splitlines()[-1] in row)
    monkeypatch.chdir(tmp_path)
    result = coursectl(*command)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: lessons.yaml:{line}: {message}\n{HINT}"


@pytest.mark.parametrize("command", [["render", "--check"], ["verify", "--offline", "--all"],
                                     ["check", "day14-syncthreads"]], ids=["render", "offline", "check"])
def test_a_bad_snippet_marker_names_the_source_first_and_hints_at_the_marker(tmp_path, monkeypatch, command):
    """It was `lessons.yaml:69: ... findings[0].snippet: lessons/...cu:160: ...` and `hint: fix lessons.yaml`."""
    shutil.copytree(COURSE / "lessons", tmp_path / "lessons")
    shutil.copyfile(COURSE / "lessons.yaml", tmp_path / "lessons.yaml")
    source = tmp_path / "lessons" / "day14-syncthreads" / "syncthreads.cu"
    text = source.read_text()
    assert text.count("// end snippet: racy\n") == 1
    source.write_text(text.replace("// end snippet: racy\n", "// end snippet: racey\n"))
    rows = text.splitlines()
    opened, closed = rows.index("// snippet: racy") + 1, rows.index("// end snippet: racy") + 1
    line = next(n for n, row in enumerate((COURSE / "lessons.yaml").read_text().splitlines(), 1)
                if "snippet: racy" in row)
    monkeypatch.chdir(tmp_path)
    result = coursectl(*command)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"coursectl: error: lessons/day14-syncthreads/syncthreads.cu:{closed}: 'end snippet: racey' closes 'racy' "
        f"(opened at line {opened}); lesson 'day14-syncthreads' reads the snippets of this file (lessons.yaml:{line}, "
        "sanitizers.racecheck.findings[0].snippet)\n"
        "hint: fix the marker in the source: '// snippet: NAME' opens a snippet, '// end snippet' or "
        "'// end snippet: NAME' closes the innermost one open\n")


# -- a lesson's flags: what nvcc would hand to a shell, and what is coursectl's -------------------------------
BARE = ("which nvcc writes unquoted into a command line that a shell reads{}: there a flag may hold only letters, "
        "digits and _-+=.,/:@%{}; spaces, quotes and other characters only in the values of -D, -U, -I, -isystem, "
        "-L and -include, which nvcc quotes")
BACKSLASH = ("holds a backslash: nvcc passes its values on to a shell, where a backslash can end the quotes around "
             "a value and let the rest run as a command; write the value without it")
OUTPUT = ("chooses what nvcc writes, or where; the outputs are coursectl's (the binary, its dependency list and its "
          "temporary files go into the build cache): leave it out")
FLAG_CASES = {
    "backslash-in-quotes": (["-DX=a\\\\", "-DY=;touch f;#"], "'-DX=a\\\\' " + BACKSLASH),
    "backslash-in-include": (["-I", "inc\\"], "'-I inc\\' " + BACKSLASH),
    "dollar": (["-I$HOME"], "'-I$HOME' holds '$' or '`', which nvcc's own host-compiler step would expand in a "
                            "shell; write the value without them"),
    "newline": (["-DX=1\ntouch f"], "'-DX=1\\ntouch f' holds the control character '\\n'; a flag is one line of text"),
    "space-to-the-host-compiler": (["--compiler-options", "-Wall -Wextra"],
                                   "'--compiler-options -Wall -Wextra' holds ' ', " + BARE.format(
                                       " (the host compiler's)", " (a list of options is written with commas: "
                                       "-Xcompiler -Wall,-Wextra)")),
    "quote-to-ptxas": (["-Xptxas='-v'"], "\"-Xptxas='-v'\" holds \"'\", " + BARE.format(" (ptxas's)", "")),
    "glob-to-nvlink": (["-Xnvlink", "*"], "'-Xnvlink *' holds '*', " + BARE.format(" (nvlink's)", "")),
    "redirect-in-ccbin": (["-ccbin", "g++>f"], "'-ccbin g++>f' holds '>', " + BARE.format("", "")),
    "and-in-a-file": (["x.cu&&touch"], "'x.cu&&touch' holds '&', " + BARE.format("", "")),
    "output-file": (["--output-file=a.out"], "'--output-file=a.out' " + OUTPUT),
    "save-temps": (["-save-temps"], "'-save-temps' " + OUTPUT),
    "preprocess": (["-E"], "'-E' " + OUTPUT),
    "map-by-wl": (["-forward-unknown-to-host-compiler", "-Wl,-Map,out.map"],
                  "'-Wl,-Map,out.map' makes the host linker write a file of its own (-Map); the outputs are "
                  "coursectl's: leave it out"),
    "dependencies-by-xcompiler": (["-Xcompiler", "-MD,-MF,x.d"],
                                  "'-Xcompiler -MD,-MF,x.d' makes the host compiler write a file of its own (-MD); "
                                  "the outputs are coursectl's: leave it out"),
    "arch-long": (["--gpu-code=sm_90"], "'--gpu-code=sm_90' chooses the GPU architecture, which is coursectl's: list "
                                        "the architectures to build for in `architectures:` (with a GPU present, "
                                        "coursectl builds for it)"),
    "run": (["-run"], "'-run' runs the program nvcc builds; coursectl runs each lesson itself, with its `args` and "
                      "its `timeout`: leave it out"),
}


@pytest.mark.parametrize("name", list(FLAG_CASES))
def test_a_flag_that_reaches_a_shell_or_is_coursectls_is_one_line_and_exit_2(tmp_path, name):
    flags, message = FLAG_CASES[name]
    listed = "".join(f"\n      - {json.dumps(flag)}" for flag in flags)
    path = write(tmp_path, edited("    source: hello.cu\n", f"    source: hello.cu\n    flags:{listed}\n"))
    before = sorted(tmp_path.rglob("*"))
    result = coursectl("build", "--all", "--manifest", path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: {path}:7: lesson 'hello': flags: flag {message}\n{HINT}"
    assert sorted(tmp_path.rglob("*")) == before


def test_the_flags_courses_use_still_load(tmp_path):
    """Flags with nothing a shell reads where nvcc puts them load as written, the quoted values with spaces,
    quotes and operators."""
    from orchestrator.manifest.load import load_manifest

    flags = ["-std=c++17", "-O3", "-lineinfo", "-Icommon", "-I", "../shared dir", "--include-path=inc",
             "-isystem", "/opt/x", "-include", "common/prelude.cuh", '-DGREETING="a b  \'c\' ;|&<> end"',
             "-D", "N=1,M=2", "-UNDEBUG", "-L/opt/lib", "-lcublas", "-Xcompiler", "-Wall,-Wextra,-fopenmp",
             "-Xcompiler=-march=native", "-Xptxas", "-v", "--ptxas-options=-O3", "-Xlinker", "--as-needed",
             "-ccbin", "/usr/bin/g++", "--expt-relaxed-constexpr", "-maxrregcount=64", "--use_fast_math",
             "-Wno-deprecated-gpu-targets", "-rdc=true", "-t", "2"]
    listed = "".join(f"\n      - {json.dumps(flag)}" for flag in flags)
    path = write(tmp_path, edited("    source: hello.cu\n", f"    source: hello.cu\n    flags:{listed}\n"))
    assert load_manifest(path).lessons[0].flags == flags


SANITIZER_CASES = {
    "log-file": (["--log-file", "/tmp/elsewhere.log"], "'--log-file' chooses what compute-sanitizer writes, or "
                 "where; its log and XML are coursectl's (the evidence): leave it out"),
    "save": (["--save=/tmp/x.xml"], "'--save=/tmp/x.xml' chooses what compute-sanitizer writes, or where; its log "
             "and XML are coursectl's (the evidence): leave it out"),
    "coredump": (["--generate-coredump"], "'--generate-coredump' chooses what compute-sanitizer writes, or where; "
                 "its log and XML are coursectl's (the evidence): leave it out"),
    "tool": (["--tool", "racecheck"], "'--tool' is coursectl's: it runs the tool the pass is named for, sets the "
             "exit code it reads and the report format it parses: leave it out"),
    "preload": (["--preload-library=/tmp/x.so"], "'--preload-library=/tmp/x.so' loads libraries into the lesson "
                "program from outside what coursectl builds: leave it out"),
    "read": (["--read", "old.xml"], "'--read' replays a saved record instead of running the lesson: leave it out"),
}


@pytest.mark.parametrize("name", list(SANITIZER_CASES))
def test_a_sanitizer_argument_that_is_coursectls_is_one_line_and_exit_2(tmp_path, name):
    args, message = SANITIZER_CASES[name]
    path = write(tmp_path, edited("    source: hello.cu\n",
                                  f"    source: hello.cu\n    sanitizers:\n      memcheck: {{args: {json.dumps(args)}}}\n"))
    result = coursectl("build", "--all", "--manifest", path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"coursectl: error: {path}:8: lesson 'hello': sanitizers.memcheck.args: argument {message}\n{HINT}"
