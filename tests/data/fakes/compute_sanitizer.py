"""Stand-in for compute-sanitizer on a machine without a GPU.

It takes the argument list coursectl builds (orchestrator.cuda.sanitizer.sanitizer_command):

    --tool T --log-file L --xml --save X --error-exitcode N
    [--racecheck-report analysis] [EXTRA...] PROGRAM ARGS...

runs PROGRAM for its stdout, as the real tool does with --log-file, and
writes into L and X what the real tool wrote on the GPU machine: the files
that $FAKE_SANITIZER_<TOOL>_LOG and $FAKE_SANITIZER_<TOOL>_XML name (TOOL in
capitals). Without a log recording it writes a clean log; without an XML
recording it writes no XML. $FAKE_SANITIZER_<TOOL>_SLEEP makes it sleep
that many seconds first, as a pass that runs too long. It exits with N when
the recording holds findings, else with the program's own status. Any other argument shape is
an error (exit 2), so the tests notice when coursectl's command changes.

With $FAKE_SANITIZER_RUNS set it appends "PID start T TOOL CUDA_VISIBLE_DEVICES
ARGUMENT" as it starts and the same with "end" once the program and its files
are done, T in seconds of CLOCK_MONOTONIC and ARGUMENT the program's first
argument (for the replaying stand-in, the transcript, which names the lesson),
one write() each, so tests can see which passes ran when and on which GPU;
the program then runs without $STANDIN_LOG, which keeps to the timed runs.
With $FAKE_SANITIZER_GATE set the program takes up to a minute, until that
file exists (the replaying stand-in's STANDIN_SLEEP and STANDIN_GATE), so a
test can hold passes running for as long as it needs.
"""

import os
import re
import shutil
import subprocess
import sys
import time

VERSION = """NVIDIA (R) Compute Sanitizer
Copyright (c) 2020-2025 NVIDIA Corporation
Version 2025.3.1.0 (build 36399005) (public-release)
"""

CLEAN = {
    "memcheck": "========= ERROR SUMMARY: 0 errors\n",
    "racecheck": "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n",
    "synccheck": "========= ERROR SUMMARY: 0 errors\n",
    "initcheck": "========= ERROR SUMMARY: 0 errors\n",
}


def fail(message):
    sys.stderr.write(f"fake compute-sanitizer: {message}\n")
    sys.exit(2)


def log_run(what, tool, program):
    path = os.environ.get("FAKE_SANITIZER_RUNS")
    if not path:
        return
    line = (f"{os.getpid()} {what} {time.monotonic():.6f} {tool} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} "
            f"{program[1] if len(program) > 1 else '-'}\n")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def main(argv):
    if argv == ["--version"]:
        sys.stdout.write(VERSION)
        return 0
    if len(argv) < 10 or argv[0] != "--tool" or argv[2] != "--log-file" or argv[4:6] != ["--xml", "--save"] \
            or argv[7] != "--error-exitcode":
        fail(f"unexpected arguments: {argv}")
    tool, log_file, xml_file, error_exitcode = argv[1], argv[3], argv[6], int(argv[8])
    if tool not in CLEAN:
        fail(f"unknown tool {tool!r}")
    rest = argv[9:]
    if tool == "racecheck":
        if rest[:2] != ["--racecheck-report", "analysis"]:
            fail(f"racecheck without --racecheck-report analysis: {argv}")
        rest = rest[2:]
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    if not rest:
        fail("no program to run")
    log_run("start", tool, rest)
    status = run(tool, rest, log_file, xml_file, error_exitcode)
    log_run("end", tool, rest)
    return status


def run(tool, rest, log_file, xml_file, error_exitcode):
    env = dict(os.environ)
    if env.get("FAKE_SANITIZER_RUNS"):
        env.pop("STANDIN_LOG", None)
    if env.get("FAKE_SANITIZER_GATE"):
        env.update(STANDIN_SLEEP="60", STANDIN_GATE=env["FAKE_SANITIZER_GATE"])
    time.sleep(float(os.environ.get(f"FAKE_SANITIZER_{tool.upper()}_SLEEP", "0")))
    status = subprocess.call(rest, env=env)
    log = os.environ.get(f"FAKE_SANITIZER_{tool.upper()}_LOG")
    xml = os.environ.get(f"FAKE_SANITIZER_{tool.upper()}_XML")
    if log:
        shutil.copyfile(log, log_file)
        with open(log, encoding="utf-8") as handle:
            log_text = handle.read()
    else:
        log_text = CLEAN[tool]
        with open(log_file, "w", encoding="utf-8") as handle:
            handle.write(log_text)
    found = bool(re.search(r"SUMMARY: [1-9]", log_text))
    if xml:
        shutil.copyfile(xml, xml_file)
        with open(xml, encoding="utf-8") as handle:
            found = found or "<record>" in handle.read()
    if found:
        return error_exitcode
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
