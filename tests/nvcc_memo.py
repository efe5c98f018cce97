"""A compile memo for one test run, like ccache: the same nvcc compile in another folder is replayed.

    nvcc_memo.py MEMO_DIR REAL_NVCC ARGS...

The test session puts a small sh script named nvcc first on PATH (written by
write_wrapper below, installed by tests/conftest.py), so coursectl, the
background builds and every subprocess reach this memo. The script runs
the real nvcc at once for `--version` and where $COURSECTL_TEST_NVCC_MEMO is
0, and for a command that names no .cu file; otherwise it runs this file,
which runs the real nvcc at once (exec) for any command it does not understand.

It understands the one-source compile coursectl runs:

    nvcc FLAGS... -MD -MF DEPFILE -o OUTPUT SOURCE.cu

with FLAGS among those in SIMPLE_FLAGS / VALUE_FLAGS (anything else, a
library, a second input, a flag that writes files of its own: the real nvcc).

The key (sha256) holds the argument list with the output, the dependency
file and the working directory (where nvcc runs) made into placeholders,
the source's name and bytes, the real nvcc's path and the environment
that changes what nvcc does (NVCC_* variables, the host compiler found on
PATH, the include-path variables). A stored entry holds the binary, the
dependency list (every file relative to the working directory, but the
system's headers, SYSTEM_ROOTS, and CUDA's, beside the cuda_runtime.h nvcc
includes, which stay absolute), stdout, stderr (placeholders for the
working directory and the output) and the sha256 of every file the compile
read that is not the system's or CUDA's. A hit needs every such file to
exist now, relative to the new working directory, with the same sha256: a
header edited or gone is a miss, and the real nvcc runs. A binary that
holds the path of its folder (-lineinfo, -G, __FILE__ in a source) is
replayed only in that folder. A compile whose dependency list or output a
replay elsewhere would not reproduce exactly is not stored.

Only compiles that exited 0 are stored: a failure always runs the real nvcc.
A lock per key (flock) makes two processes asking for one compile at once
run nvcc once; the second replays. Entries are written to a temporary folder
and renamed into place. The memo is a folder in the test run's temporary
one: no run finds another's.

$COURSECTL_TEST_NVCC_MEMO_LOG, when set, names a file that gets one line per
command: "real KEY ARGS (exit N, wall and CPU seconds)", "replay KEY ARGS",
"pass - ARGS" (the real nvcc ran, not memoized) or "unstored KEY WHY" (after
a real run that succeeded).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FORMAT = 1
CWD = "\x00CWD\x00"   # placeholders in stored text
OUT = "\x00OUT\x00"
REL = "\x00REL\x00"   # a file outside the working directory, relative to it

# Flags that take no value, or whose value is joined to them (-O3, -std=c++17, -Ifoo).
SIMPLE_FLAGS = re.compile(
    r"-O[0-3s]?|-std=\S+|-arch=\S+|--gpu-architecture=\S+|-gencode=\S+|--generate-code=\S+|-code=\S+"
    r"|-D.+|--define-macro=.+|-U.+|--undefine-macro=.+|-I.+|--include-path=.+|-isystem.+|--system-include=.+"
    r"|-lineinfo|--generate-line-info|-G|--device-debug|-g|--debug|--resource-usage|-MD|-w|--disable-warnings"
    r"|-use_fast_math|--use_fast_math|--expt-relaxed-constexpr|--extended-lambda|--expt-extended-lambda"
    r"|-Xptxas=\S+|-Wno-deprecated-gpu-targets|-Werror=\S+|-rdc=(?:true|false)|-c|--compile"
    r"|--threads=\d+|-t\d+|-m64",
    re.DOTALL)
# Flags whose value is the next argument.
VALUE_FLAGS = {"-I", "--include-path", "-isystem", "--system-include", "-D", "--define-macro", "-U",
               "--undefine-macro", "-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code",
               "-std", "-Xptxas", "-t", "--threads"}
# Flags whose binaries embed the source's path: the working directory is part of their key.
PATH_FLAGS = {"-lineinfo", "--generate-line-info", "-G", "--device-debug", "-g", "--debug"}
# What else changes what nvcc does.
ENVIRONMENT = ["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH",
               "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "LANG", "LC_ALL"]
HOST_TOOLS = ["gcc", "g++", "cc", "c++", "cpp", "ld", "as"]


def write_wrapper(path: Path, real_nvcc: str, memo_dir: Path, python: str = sys.executable) -> Path:
    """The sh script, named nvcc, that sends compiles through this memo."""
    q = shlex.quote
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        "# nvcc through the test run's compile memo (tests/nvcc_memo.py); "
        "COURSECTL_TEST_NVCC_MEMO=0 runs the real one.\n"
        f"real={q(real_nvcc)}\n"
        'if [ "${COURSECTL_TEST_NVCC_MEMO:-1}" = 0 ]; then exec "$real" "$@"; fi\n'
        # Only a .cu compile can be memoized: anything else (the stand-ins' .cpp) skips Python.
        'for arg in "$@"; do case $arg in --version|-V) exec "$real" "$@";; *.cu) memo=1;; esac; done\n'
        '[ -n "${memo:-}" ] || exec "$real" "$@"\n'
        f'exec {q(python)} -I -S {q(str(Path(__file__).resolve()))} {q(str(memo_dir))} "$real" "$@"\n')
    path.chmod(0o755)
    return path


def log(what: str) -> None:
    path = os.environ.get("COURSECTL_TEST_NVCC_MEMO_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{what}\n".encode())
        finally:
            os.close(fd)


def sha256_file(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


class Command:
    """The parts of a compile command this memo understands, or None."""

    def __init__(self, args: list[str]):
        self.args, self.output, self.depfile, self.source = args, None, None, None
        self.path_dependent = False

    @classmethod
    def parse(cls, args: list[str]) -> "Command | None":
        command = cls(args)
        md = False
        index = 0
        while index < len(args):
            arg = args[index]
            if arg in ("-o", "-MF"):
                if index + 1 >= len(args) or (command.output if arg == "-o" else command.depfile) is not None:
                    return None
                if arg == "-o":
                    command.output = args[index + 1]
                else:
                    command.depfile = args[index + 1]
                index += 2
                continue
            if arg in VALUE_FLAGS:
                if index + 1 >= len(args):
                    return None
                index += 2
                continue
            if arg.startswith("-"):
                if not SIMPLE_FLAGS.fullmatch(arg):
                    return None
                md = md or arg == "-MD"
                command.path_dependent = command.path_dependent or arg in PATH_FLAGS
                index += 1
                continue
            if command.source is not None or not arg.endswith(".cu"):
                return None   # a second input, or one that is not CUDA source
            command.source = arg
            index += 1
        if not (md and command.output and command.depfile and command.source):
            return None
        return command


# The host compiler's and the C library's headers. CUDA's are where the cuda_runtime.h that
# nvcc includes in every compile is (see Memo.store). A file anywhere else is the test's.
SYSTEM_ROOTS = ["/usr/include/", "/usr/lib/", "/usr/lib64/", "/usr/local/include/"]


def _unescape(token: str) -> str:
    return re.sub(r"\\([ #])", r"\1", token).replace("$$", "$")


def _escape(path: str) -> str:
    return path.replace(" ", "\\ ")


def _dependencies(text: str) -> tuple[str, list[str]] | None:
    """(target, [dependency as nvcc wrote it]) of the make rule nvcc writes (`target : a.cu \\` ...)."""
    # orchestrator.cuda.build.parse_dependencies reads the same rule, but this script runs with
    # `-I -S` for every nvcc call, to start fast, and so cannot import the package; it also
    # needs the target and the tokens as written, to write the rule back on a replay.
    head, sep, rest = text.partition(" : ")
    if not sep or "\n" in head:
        return None
    joined = re.sub(r"\\\n", " ", rest)
    tokens = re.findall(r"(?:\\.|[^\s\\])+", joined)
    return head, tokens


class Memo:
    def __init__(self, folder: str, real_nvcc: str, command: Command):
        self.folder, self.real, self.command = Path(folder), real_nvcc, command
        self.cwd = os.getcwd()
        self.system = list(SYSTEM_ROOTS)

    # -- the key ----------------------------------------------------------------------------
    def _placeheld(self, arg: str) -> str:
        """An argument with the working directory made a placeholder."""
        if arg == self.cwd:
            return CWD
        return arg.replace(self.cwd.rstrip("/") + "/", CWD + "/")

    def key(self) -> str | None:
        command = self.command
        args = []
        for index, arg in enumerate(command.args):
            before = command.args[index - 1] if index else None
            if before == "-o":
                args.append(OUT)
            elif before == "-MF":
                args.append(OUT + ".d" if arg == command.output + ".d" else "-MF:" + os.path.basename(arg))
            else:
                args.append(self._placeheld(arg))
        try:
            source = Path(self.cwd, command.source).read_bytes()
        except OSError:
            return None
        material = {
            "format": FORMAT, "nvcc": self.real, "args": args, "output": os.path.basename(command.output),
            "source": [os.path.basename(command.source), hashlib.sha256(source).hexdigest()],
            "env": {name: os.environ.get(name) for name in ENVIRONMENT},
            "tools": {name: shutil.which(name) for name in HOST_TOOLS},
            "cwd": self.cwd if command.path_dependent else None,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]

    # -- dependencies -----------------------------------------------------------------------
    def _is_system(self, path: str) -> bool:
        return os.path.isabs(path) and any(os.path.normpath(path).startswith(root) for root in self.system)

    def _stored_dependency(self, token: str) -> tuple[str, str | None]:
        """(the token as stored, the path to check relative to the working directory, or None for the system's)."""
        path = _unescape(token)
        if not os.path.isabs(path):
            return token, path
        relative = os.path.relpath(path, self.cwd)
        if path.startswith(self.cwd.rstrip("/") + "/"):
            return CWD + "/" + _escape(path[len(self.cwd.rstrip("/")) + 1:]), relative
        if self._is_system(path):
            return token, None
        return REL + relative, relative

    def _restored_dependency(self, stored: str) -> str:
        if stored.startswith(REL):
            return _escape(os.path.normpath(os.path.join(self.cwd, stored[len(REL):])))
        return stored.replace(CWD, _escape(self.cwd.rstrip("/")))

    def _dependency_text(self, dependencies: list[str]) -> str:
        """The make rule nvcc writes: `OUTPUT : SOURCE \\`, then one file a line."""
        return self.command.output + " : " + " \\\n    ".join(map(self._restored_dependency, dependencies)) + "\n"

    def _text(self, text: str) -> str:
        """Stored text of stdout or stderr: the output's and working directory's paths as placeholders."""
        if os.path.isabs(self.command.output):
            text = text.replace(self.command.output, OUT)
        return text.replace(self.cwd.rstrip("/") + "/", CWD + "/")

    def _restored(self, text: str) -> str:
        return text.replace(OUT, self.command.output).replace(CWD, self.cwd.rstrip("/"))

    # -- lookup, replay, store -----------------------------------------------------------------
    def lookup(self, entries: Path) -> Path | None:
        try:
            variants = sorted(p for p in entries.iterdir() if not p.name.startswith("."))
        except OSError:
            return None
        for variant in variants:
            try:
                meta = json.loads((variant / "meta.json").read_text())
                cwd, files = meta["cwd"], dict(meta["files"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if cwd is not None and cwd != self.cwd:
                continue
            if all(sha256_file(os.path.join(self.cwd, path)) == digest for path, digest in files.items()):
                return variant
        return None

    def replay(self, variant: Path) -> int:
        meta = json.loads((variant / "meta.json").read_text())
        output = os.path.join(self.cwd, self.command.output)
        _write(output, (variant / "binary").read_bytes(), 0o777)
        text = self._dependency_text(meta["dependencies"])
        _write(os.path.join(self.cwd, self.command.depfile), text.encode("utf-8", "surrogateescape"), 0o666)
        sys.stdout.buffer.write(self._restored(meta["stdout"]).encode("utf-8", "surrogateescape"))
        sys.stdout.flush()
        sys.stderr.buffer.write(self._restored(meta["stderr"]).encode("utf-8", "surrogateescape"))
        sys.stderr.flush()
        return 0

    def store(self, entries: Path, stdout: bytes, stderr: bytes) -> str | None:
        """Keep a compile that succeeded, unless something in it cannot be replayed elsewhere: why not, if not."""
        command = self.command
        try:
            binary = Path(self.cwd, command.output).read_bytes()
            written = Path(self.cwd, command.depfile).read_text("utf-8", "surrogateescape")
        except OSError as exc:
            return f"no output: {exc}"
        parsed = _dependencies(written)
        if parsed is None or parsed[0] != command.output:
            return "a dependency file of another shape"
        out_text, err_text = (stream.decode("utf-8", "surrogateescape") for stream in (stdout, stderr))
        dependencies, files, outside = [], {}, []
        runtime = [_unescape(token) for token in parsed[1] if os.path.basename(_unescape(token)) == "cuda_runtime.h"]
        if runtime and os.path.isabs(runtime[0]):
            self.system.append(os.path.dirname(os.path.normpath(runtime[0])) + "/")
        for token in parsed[1]:
            stored, check = self._stored_dependency(token)
            dependencies.append(stored)
            if check is not None:
                digest = sha256_file(os.path.join(self.cwd, check))
                if digest is None:
                    return f"cannot read {check}"
                files[check] = digest
                absolute = os.path.normpath(os.path.join(self.cwd, check))
                if not absolute.startswith(self.cwd.rstrip("/") + "/"):
                    outside.append(os.path.dirname(absolute))
        if self._dependency_text(dependencies) != written:
            return "a replay would not write the dependency file nvcc wrote"
        temporary = os.environ.get("TMPDIR")
        for text in (out_text, err_text):
            if self._restored(self._text(text)) != text:
                return "output that the placeholders would change"
            # A path that the placeholders do not cover: not replayed elsewhere.
            if any(folder in text for folder in outside) or "tmpxft" in text or (temporary and temporary in text):
                return "output naming a path outside the working directory"
        # A binary that holds its folder's path is replayed in that folder only.
        folders = {self.cwd, os.path.realpath(self.cwd), *outside}
        bound = command.path_dependent or any(folder.encode() in binary for folder in folders if len(folder) > 1)
        meta = {"cwd": self.cwd if bound else None, "files": files, "dependencies": dependencies,
                "stdout": self._text(out_text), "stderr": self._text(err_text)}
        variant = hashlib.sha256(json.dumps([meta["cwd"], files], sort_keys=True).encode()).hexdigest()[:16]
        entries.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".store.", dir=entries))
        try:
            (work / "binary").write_bytes(binary)
            (work / "meta.json").write_text(json.dumps(meta))
            target = entries / variant
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)
            os.replace(work, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return None


def _write(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def run_real(real: str, args: list[str]) -> tuple[int, bytes, bytes]:
    """The real nvcc, its output captured; a signal this process gets is passed on to it."""
    proc = subprocess.Popen([real, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except OSError:
            pass
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    stdout, stderr = proc.communicate()
    return proc.returncode, stdout, stderr


def main(argv: list[str]) -> int:
    folder, real, args = argv[0], argv[1], argv[2:]
    command = Command.parse(args)
    memo = Memo(folder, real, command) if command is not None else None
    key = memo.key() if memo is not None else None
    if key is None:
        log(f"pass - {shlex.join(args)}")
        os.execv(real, [real, *args])
    entries = Path(folder) / "entries" / key
    locks = Path(folder) / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        variant = memo.lookup(entries)
        if variant is not None:
            try:
                status = memo.replay(variant)
                log(f"replay {key} {shlex.join(args)}")
                return status
            except (OSError, ValueError, KeyError):
                pass   # nvcc says what is wrong (an output folder that is not there), or writes it after all
        started = time.monotonic()
        status, stdout, stderr = run_real(real, args)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        log(f"real {key} {shlex.join(args)} (exit {status}, {time.monotonic() - started:.2f} s, "
            f"{used.ru_utime + used.ru_stime:.2f} s of CPU)")
        if status == 0 and (why := memo.store(entries, stdout, stderr)):
            log(f"unstored {key} {why}")
    sys.stdout.buffer.write(stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(stderr)
    sys.stderr.flush()
    if status < 0:   # ended by a signal: end by it too, as the real nvcc did
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
