"""What a lesson's nvcc `flags` may hold: nothing a shell reads, no output, no architecture, no program run.

coursectl starts nvcc without a shell, but nvcc does not start its own steps
(the host compiler, cicc, ptxas, nvlink, the linker) that way: it writes
each as one command line and hands it to /bin/sh. `nvcc -dryrun` prints
those lines (CUDA 13.0). What reaches them, and how:

- nvcc first reads each option's value itself: a backslash escapes the
  next character (`\\\\` is one backslash), double quotes group (`"a,b"`)
  and a comma splits a list (`-DA=1,B=2`).
- The values of -D, -U, -I, -isystem, -L and -include (and their long
  names) are written inside double quotes, `-D "X=a b"`, a `"` in them as
  `\\"`. Inside double quotes a shell still reads `$`, a backquote and a
  backslash; a value that ends in a backslash ends the quotes themselves:
  `-DX=a\\\\` then `-DY=;touch /tmp/f;#` ran `touch`.
- Every other value is written bare, as given: `-Xcompiler '-Wall;touch f'`,
  `-l'm;touch f'` and the values of -Xlinker, -Xptxas, -Xnvlink,
  -Xarchive, -ccbin, ... reach the shell as shell text, where a space,
  quote, `;`, `|`, `&`, `<`, `>`, `(`, `*`, `?`, `[`, `~`, `#`, `{` ... mean something.

So a flag holds no `$`, backquote, backslash or control character anywhere;
the quoted values above may hold any other character (a space, quotes,
`;|&<>`); everything else only letters, digits and `_-+=.,/:@%`, which no
shell reads as anything but themselves.

Outputs and the architecture are coursectl's: it names the binary, its
dependency list and its temporary folder, and builds for the architectures
of `architectures:` (or the GPU's). Flags that choose another output, write
a file beside it, run the program or read more flags from a file are refused.
"""

from __future__ import annotations

import re

# Every nvcc option that takes a value, each spelling -> the long name (nvcc --help, CUDA 13.0). A value is
# the next argument or follows `=`; -D, -U, -I, -L, -l, -O and -t also take it attached (`-DX=1`).
_VALUED = {
    "--output-file": "-o", "--pre-include": "-include", "--library": "-l", "--define-macro": "-D",
    "--undefine-macro": "-U", "--include-path": "-I", "--system-include": "-isystem", "--library-path": "-L",
    "--output-directory": "-odir", "--compiler-bindir": "-ccbin", "--archiver-binary": "-arbin",
    "--cudart": "-cudart", "--cudadevrt": "-cudadevrt", "--libdevice-directory": "-ldir",
    "--target-directory": "-target-dir", "--optimization-info": "-opt-info", "--optimize": "-O",
    "--Ofast-compile": "-Ofc", "--dopt": "-dopt", "--ftemplate-backtrace-limit": "-ftemplate-backtrace-limit",
    "--ftemplate-depth": "-ftemplate-depth", "--x": "-x", "--std": "-std", "--machine": "-m",
    "--compiler-options": "-Xcompiler", "--linker-options": "-Xlinker", "--archive-options": "-Xarchive",
    "--ptxas-options": "-Xptxas", "--nvlink-options": "-Xnvlink",
    "--static-global-template-stub": "-static-global-template-stub",
    "--device-entity-has-hidden-visibility": "-device-entity-has-hidden-visibility", "--threads": "-t",
    "--split-compile": "-split-compile", "--split-compile-extended": "-split-compile-extended",
    "--fdevice-time-trace": "-fdevice-time-trace", "--keep-dir": "-keep-dir", "--time": "-time",
    "--run-args": "-run-args", "--input-drive-prefix": "-idp", "--dependency-drive-prefix": "-ddp",
    "--drive-prefix": "-dp", "--dependency-target-name": "-MT", "--dependency-output": "-MF",
    "--gpu-architecture": "-arch", "--gpu-code": "-code", "--generate-code": "-gencode",
    "--relocatable-device-code": "-rdc", "--entries": "-e", "--maxrregcount": "-maxrregcount", "--ftz": "-ftz",
    "--prec-div": "-prec-div", "--prec-sqrt": "-prec-sqrt", "--fmad": "-fmad", "--default-stream": "-default-stream",
    "--Werror": "-Werror", "--diag-error": "-diag-error", "--diag-suppress": "-diag-suppress",
    "--diag-warn": "-diag-warn", "--host-linker-script": "-hls", "--brief-diagnostics": "-brief-diag",
    "--jump-table-density": "-jtd", "--device-stack-protector": "-device-stack-protector",
    "--compress-mode": "-compress-mode", "--frandom-seed": "-frandom-seed", "--sanitize": "-sanitize",
    "--options-file": "-optf",
}
_LONG = {short: long for long, short in _VALUED.items()}
_ATTACHED = ("-D", "-U", "-I", "-L", "-l", "-O", "-t")

# The options whose values nvcc writes inside double quotes for the shell.
_QUOTED = {"--define-macro", "--undefine-macro", "--include-path", "--system-include", "--library-path",
           "--pre-include"}

# The options whose values nvcc hands on, item by item (split at commas), to another program.
_PASSED_ON = {"--compiler-options": "the host compiler", "--linker-options": "the host linker",
              "--archive-options": "the archiver", "--ptxas-options": "ptxas", "--nvlink-options": "nvlink"}

_OUTPUT = "chooses what nvcc writes, or where; the outputs are coursectl's (the binary, its dependency list " \
          "and its temporary files go into the build cache): leave it out"
_REFUSED = {
    **{name: _OUTPUT for name in (
        "--output-file", "--output-directory", "--keep", "--keep-dir", "--save-temps", "--clean-targets",
        "--objdir-as-tempdir", "--dependency-output", "--generate-dependencies", "--generate-nonsystem-dependencies",
        "--generate-dependencies-with-compile", "--generate-nonsystem-dependencies-with-compile",
        "--generate-dependency-targets", "--dependency-target-name", "--time", "--fdevice-time-trace",
        "--cuda", "--cubin", "--fatbin", "--ptx", "--optix-ir", "--ltoir", "--preprocess", "--compile",
        "--device-c", "--device-w", "--device-link", "--lib", "--shared", "--dryrun")},
    **{name: "runs the program nvcc builds; coursectl runs each lesson itself, with its `args` and its "
             "`timeout`: leave it out" for name in ("--run", "--run-args")},
    **{name: "chooses the GPU architecture, which is coursectl's: list the architectures to build for in "
             "`architectures:` (with a GPU present, coursectl builds for it)"
       for name in ("--gpu-architecture", "--gpu-code", "--generate-code")},
    "--options-file": "reads more flags from a file, which coursectl does not check: write them in "
                      "lessons.yaml itself",
}
# The flags of the refused options without a value, each spelling -> the long name.
_SWITCHES = {"-keep": "--keep", "-save-temps": "--save-temps", "-clean": "--clean-targets",
             "-objtemp": "--objdir-as-tempdir", "-M": "--generate-dependencies",
             "-MM": "--generate-nonsystem-dependencies", "-MD": "--generate-dependencies-with-compile",
             "-MMD": "--generate-nonsystem-dependencies-with-compile", "-MP": "--generate-dependency-targets",
             "-cuda": "--cuda", "-cubin": "--cubin", "-fatbin": "--fatbin", "-ptx": "--ptx",
             "-optix-ir": "--optix-ir", "-ltoir": "--ltoir", "-E": "--preprocess", "-c": "--compile",
             "-dc": "--device-c", "-dw": "--device-w", "-dlink": "--device-link", "-lib": "--lib",
             "-shared": "--shared", "-run": "--run", "-dryrun": "--dryrun"}

# What an item handed on to the host compiler, linker, ptxas or nvlink may not be: an output of its own.
_OUTPUT_ITEM = re.compile(r"-o.*|--output.*|--?Map(=.*)?|-M[DF]?|-MMD|-save-temps.*|-dumpdir")

_ANYWHERE = re.compile(r"[$`\\\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BARE_OK = re.compile(r"[A-Za-z0-9_\-+=.,/:@%]*")
_BARE_SAFE = "letters, digits and _-+=.,/:@%"


def flag_problem(flags: list[str]) -> str | None:
    """Why `flags` cannot be handed to nvcc, naming the first flag at fault; None when they can."""
    index = 0
    while index < len(flags):
        flag = flags[index]
        name, option, value = _option(flag)
        shown = flag
        if name in _VALUED and value is None and index + 1 < len(flags):
            index += 1
            value = flags[index]
            shown = f"{flag} {value}"
        problem = _characters(option, name, value) or _refused(name, value)
        if problem:
            return f"flag {_quoted(shown)} {problem}"
        index += 1
    return None


def _quoted(text: str) -> str:
    """A flag in quotes as lessons.yaml gives it (a backslash is one backslash), a control character escaped."""
    return repr(text) if _CONTROL.search(text) or "'" in text else f"'{text}'"


def _option(flag: str) -> tuple[str | None, str, str | None]:
    """(the long name of the nvcc option `flag` is, or None; the option as written; its value where the flag
    holds it, else None). `-Wl,...` (with --forward-unknown-to-host-compiler) counts as -Xlinker."""
    head, equals, tail = flag.partition("=")
    if head in _VALUED or head in _LONG:
        return _LONG.get(head, head), head + equals, tail if equals else None
    if head in _SWITCHES or head in _REFUSED:
        return _SWITCHES.get(head, head), flag, None
    if flag.startswith("-Wl,"):
        return "--linker-options", "-Wl,", flag[4:]
    for short in _ATTACHED:
        if flag.startswith(short) and len(flag) > len(short) and not flag.startswith(("-lib", "-ldir", "-link")):
            return _LONG[short], short, flag[len(short):]
    return None, flag, None


def _characters(option: str, name: str | None, value: str | None) -> str | None:
    """What in an option or its value a shell would read, where nvcc puts it."""
    for text in (option, value or ""):
        found = _ANYWHERE.search(text)
        if found is None:
            continue
        char = found.group()
        if char in "$`":
            return ("holds '$' or '`', which nvcc's own host-compiler step would expand in a shell; write the "
                    "value without them")
        if char == "\\":
            return ("holds a backslash: nvcc passes its values on to a shell, where a backslash can end the "
                    "quotes around a value and let the rest run as a command; write the value without it")
        return f"holds the control character {char!r}; a flag is one line of text"
    where = _where(name)
    for text, quoted in ((option, False), (value or "", name in _QUOTED)):
        if not quoted and not _BARE_OK.fullmatch(text):
            char = next(c for c in text if not _BARE_OK.fullmatch(c))
            tip = " (a list of options is written with commas: -Xcompiler -Wall,-Wextra)" if char == " " else ""
            return (f"holds {char!r}, which nvcc writes unquoted into a command line that a shell reads{where}: "
                    f"there a flag may hold only {_BARE_SAFE}{tip}; spaces, quotes and other characters only in "
                    f"the values of -D, -U, -I, -isystem, -L and -include, which nvcc quotes")
    return None


def _where(name: str | None) -> str:
    if name in _PASSED_ON:
        return f" ({_PASSED_ON[name]}'s)"
    return ""


def _refused(name: str | None, value: str | None) -> str | None:
    if name in _REFUSED:
        return _REFUSED[name]
    if name in _PASSED_ON and value is not None:
        for item in value.split(","):
            if _OUTPUT_ITEM.fullmatch(item):
                return (f"makes {_PASSED_ON[name]} write a file of its own ({item}); the outputs are "
                        f"coursectl's: leave it out")
    return None


# -- a sanitizer pass's `args` ---------------------------------------------------------------------------------
# compute-sanitizer starts the lesson from an argument list (no shell), but some of its options are coursectl's:
# where its log and XML go, which tool runs and how a finding is reported; others write files or load libraries.
_SANITIZER_OWN = ("chooses what compute-sanitizer writes, or where; its log and XML are coursectl's (the "
                  "evidence): leave it out")
_SANITIZER_REFUSED = {
    **{name: _SANITIZER_OWN for name in ("--log-file", "--save", "--xml", "--save-session-details",
                                         "--generate-coredump", "--coredump-name", "--coredump-behavior")},
    "--read": "replays a saved record instead of running the lesson: leave it out",
    **{name: "is coursectl's: it runs the tool the pass is named for, sets the exit code it reads and the "
             "report format it parses: leave it out" for name in ("--tool", "--error-exitcode",
                                                                   "--racecheck-report")},
    **{name: "loads libraries into the lesson program from outside what coursectl builds: leave it out"
       for name in ("--injection-path", "--injection-path32", "--preload-library")},
}


def sanitizer_arg_problem(args: list[str]) -> str | None:
    """Why a sanitizer pass's `args` cannot be handed to compute-sanitizer, naming the first at fault; or None."""
    for arg in args:
        name = arg.partition("=")[0]
        if name in _SANITIZER_REFUSED:
            return f"argument {_quoted(arg)} {_SANITIZER_REFUSED[name]}"
    return None
