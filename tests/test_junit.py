"""orchestrator.cli.report.junit_xml: every report is valid against junit-10.xsd and says what really ran.

The schema is the one pytest validates its own JUnit XML with (tests/data/junit-10.xsd).
Most tests build results by hand, one per status; three go through coursectl itself:
an offline verify re-judging recorded sanitizer reports, a lesson printing a NUL, and
one printing megabytes of them.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import DATA, GPU_SLUG, GPU_UUID, coursectl
from orchestrator import __version__
from orchestrator.judge.results import LessonResult, PassResult, RunInfo, Status
from orchestrator.cli.report import _NOT_XML, VerifyReport, junit_xml, write_junit
from orchestrator.cuda.toolchain import Gpu, Toolchain

etree = pytest.importorskip("lxml.etree")

SCHEMA = DATA / "junit-10.xsd"
DATE = "2026-11-29T10:00:00+00:00"
H200 = Gpu(index=0, name="NVIDIA H200", uuid=GPU_UUID, compute_capability="9.0")
TOOLCHAIN = Toolchain(nvcc="/usr/local/cuda/bin/nvcc", nvcc_version="13.0.88", driver_version="580.159.04",
                      cuda_version="13.0", gpus=[H200], gpu_source="nvidia-smi",
                      sanitizer="/usr/local/cuda/bin/compute-sanitizer", sanitizer_version="2025.3.1.0")
MEMCHECK = ["compute-sanitizer", "--tool", "memcheck", "./lesson"]


def valid(text: str) -> ET.Element:
    """`text` checked against junit-10.xsd; its root element."""
    schema = etree.XMLSchema(etree.parse(str(SCHEMA)))
    document = etree.fromstring(text.encode("utf-8"))
    assert schema.validate(document), "\n".join(str(e) for e in schema.error_log)
    return ET.fromstring(text)


def a_pass(tool: str, seconds: float = 0.0, problems: list[str] | None = None, command=None) -> PassResult:
    """A sanitizer pass as the pipeline judges it: run now, or (command []) its recorded report re-judged."""
    return PassResult(tool=tool, command=MEMCHECK if command is None else command, seconds=seconds,
                      exit_status=0 if command is None else None, errors=0, warnings=0, problems=problems or [],
                      recorded=command == [])


NOT_RUN = "no GPU here and no racecheck report recorded on nvidia-h200; record it on a GPU"
OFFLINE_NO_EVIDENCE = ("never recorded on a GPU: the build and what needs no transcript were checked, the output "
                       "was not; run `coursectl record {}` on a GPU")


def report_of(*results: LessonResult, offline: bool = False, toolchain=TOOLCHAIN, **kwargs) -> VerifyReport:
    command = "verify --offline" if offline else "verify"
    return VerifyReport(command=command, date=DATE, offline=offline, toolchain=toolchain, results=list(results),
                        **kwargs)


def cases(suite: ET.Element) -> list[tuple]:
    """(name, time, [(child tag, type, message)]) for each testcase."""
    return [(c.get("name"), c.get("time"),
             [(e.tag, e.get("type"), e.get("message")) for e in c if e.tag in ("failure", "skipped")])
            for c in suite.findall("testcase")]


def counts(suite: ET.Element) -> tuple:
    return tuple(suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time"))


# -- statuses --------------------------------------------------------------------------------
def test_every_status_on_a_gpu():
    run = RunInfo(command=["./lesson"], exit_status=0, seconds=0.4)
    suite = valid(junit_xml(report_of(
        LessonResult(lesson="pass", status=Status.PASS, gpu=GPU_SLUG, run=run, transcript="ok\n", seconds=7.5,
                     evidence=GPU_SLUG, sanitizers=[a_pass("memcheck", 6.0)]),
        LessonResult(lesson="fail", status=Status.FAIL, gpu=GPU_SLUG, run=run, seconds=1.25,
                     reasons=["1 field(s) differ from the nvidia-h200 evidence:\n  x: moved", "exit status 1"]),
        LessonResult(lesson="crash", status=Status.CRASH, gpu=GPU_SLUG, seconds=0.5,
                     reasons=["$ ./crash\nkilled by signal 11 (SIGSEGV)"]),
        LessonResult(lesson="hang", status=Status.TIMEOUT, gpu=GPU_SLUG, seconds=30.0,
                     reasons=["killed after 30.0 s (timeout 30 s) with its process group; last output:\n..."]),
        LessonResult(lesson="new", status=Status.UNSUPPORTED, gpu=GPU_SLUG,
                     reasons=["needs compute capability 10.0; NVIDIA H200 has 9.0"]),
        LessonResult(lesson="later", status=Status.SKIPPED, gpu=GPU_SLUG),
        LessonResult(lesson="fresh", status=Status.NO_EVIDENCE, gpu=GPU_SLUG, run=run, seconds=2.0,
                     unverified="no evidence for nvidia-h200 yet"),
        LessonResult(lesson="racy", status=Status.FAIL, gpu=GPU_SLUG, seconds=9.0,
                     reasons=["racecheck: expected a finding in reverseTileRacy, none reported"],
                     sanitizers=[a_pass("memcheck", 1.5),
                                 a_pass("racecheck", 6.5, ["racecheck: expected a finding in reverseTileRacy, "
                                                           "none reported"])]))))
    assert (suite.tag, suite.get("name"), suite.get("timestamp")) == ("testsuite", "coursectl verify", DATE)
    assert counts(suite) == ("11", "5", "0", "3", "50.250")
    no_evidence = "no evidence for nvidia-h200 yet"
    assert cases(suite) == [
        ("pass", "1.500", []),
        ("pass [memcheck]", "6.000", []),
        ("fail", "1.250", [("failure", "FAIL", "1 field(s) differ from the nvidia-h200 evidence:")]),
        ("crash", "0.500", [("failure", "CRASH", "$ ./crash")]),
        ("hang", "30.000", [("failure", "TIMEOUT", "killed after 30.0 s (timeout 30 s) with its process group; "
                                                   "last output:")]),
        ("new", "0.000", [("skipped", "UNSUPPORTED", "needs compute capability 10.0; NVIDIA H200 has 9.0")]),
        ("later", "0.000", [("skipped", "SKIPPED", "SKIPPED")]),
        ("fresh", "2.000", [("skipped", "NO_EVIDENCE", no_evidence)]),
        ("racy", "1.000", [("failure", "FAIL", "racecheck: expected a finding in reverseTileRacy, none reported")]),
        ("racy [memcheck]", "1.500", []),
        ("racy [racecheck]", "6.500", [("failure", "SANITIZER",
                                        "racecheck: expected a finding in reverseTileRacy, none reported")]),
    ]
    assert [c.get("classname") for c in suite.findall("testcase")] == ["coursectl.nvidia-h200"] * 11
    fail = suite.findall("testcase")[2]
    assert fail.findtext("failure") == ("1 field(s) differ from the nvidia-h200 evidence:\n  x: moved\n\n"
                                        "exit status 1")
    assert suite.findall("testcase")[0].findtext("system-out") == "ok\n"


def test_under_strict_what_fails_the_exit_status_is_a_failure():
    """--strict exits 1 for a lesson neither passed nor failed; its JUnit called them <skipped>, 0 failures."""
    run = RunInfo(command=["./lesson"], exit_status=0, seconds=0.4)
    results = [
        LessonResult(lesson="pass", status=Status.PASS, gpu=GPU_SLUG, run=run, seconds=1.0, evidence=GPU_SLUG),
        LessonResult(lesson="new", status=Status.UNSUPPORTED, gpu=GPU_SLUG,
                     reasons=["needs compute capability 10.0; NVIDIA H200 has 9.0"]),
        LessonResult(lesson="later", status=Status.SKIPPED, gpu=GPU_SLUG),
        LessonResult(lesson="fresh", status=Status.NO_EVIDENCE, gpu=GPU_SLUG, run=run, seconds=2.0,
                     unverified="no evidence for nvidia-h200 yet\nrun `coursectl record fresh`")]
    lenient = valid(junit_xml(report_of(*results)))
    assert counts(lenient)[:4] == ("4", "0", "0", "3")
    strict = valid(junit_xml(report_of(*results, strict=True)))
    assert counts(strict)[:4] == ("4", "3", "0", "0")
    counted = "--strict: not verified, counted as failed: "
    assert cases(strict) == [
        ("pass", "1.000", []),
        ("new", "0.000", [("failure", "UNSUPPORTED", counted + "needs compute capability 10.0; NVIDIA H200 has 9.0")]),
        ("later", "0.000", [("failure", "SKIPPED", counted + "SKIPPED")]),
        ("fresh", "2.000", [("failure", "NO_EVIDENCE", counted + "no evidence for nvidia-h200 yet")]),
    ]
    assert strict.findall("testcase")[3].findtext("failure") == ("no evidence for nvidia-h200 yet\n"
                                                                 "run `coursectl record fresh`")


@pytest.mark.parametrize("strict", [False, True])
def test_under_strict_a_partial_merge_or_an_empty_run_is_a_failing_case(strict):
    passed = LessonResult(lesson="pass", status=Status.PASS, gpu=GPU_SLUG, seconds=1.0, evidence=GPU_SLUG)
    partial = valid(junit_xml(report_of(passed, shards=["1/3"], partial=True, strict=strict)))
    empty = valid(junit_xml(report_of(strict=strict)))
    if not strict:
        assert (counts(partial)[:4], counts(empty)[:4]) == (("1", "0", "0", "0"), ("0", "0", "0", "0"))
        return
    assert counts(partial)[:4] == ("2", "1", "0", "0")
    assert cases(partial)[1] == ("--strict", "0.000", [
        ("failure", "STRICT", "a partial merge (shards 2, 3 of 3 missing), counted as failed")])
    assert cases(empty) == [("--strict", "0.000", [("failure", "STRICT", "an empty selection, counted as failed")])]


def test_the_properties_name_the_gpu_and_every_tool_version():
    suite = valid(junit_xml(report_of(LessonResult(lesson="pass", status=Status.PASS), shard="1/2")))
    assert [(p.get("name"), p.get("value")) for p in suite.find("properties")] == [
        ("coursectl", __version__), ("command", "coursectl verify"), ("offline", "false"), ("shard", "1/2"),
        ("gpu.0", f"NVIDIA H200, compute capability 9.0, {GPU_UUID}"), ("driver", "580.159.04"),
        ("cuda", "13.0"), ("nvcc", "13.0.88"), ("compute-sanitizer", "2025.3.1.0"), ("covered.pass", "not recorded")]


def test_a_merged_report_without_a_toolchain_says_unknown():
    suite = valid(junit_xml(report_of(LessonResult(lesson="pass", status=Status.PASS), toolchain=None)))
    assert [(p.get("name"), p.get("value")) for p in suite.find("properties")][2:] == [
        ("offline", "false"), ("gpu", "unknown"), ("driver", "unknown"), ("cuda", "unknown"),
        ("nvcc", "unknown"), ("compute-sanitizer", "unknown"), ("covered.pass", "not recorded")]


# -- offline ---------------------------------------------------------------------------------
def test_offline_recorded_passes_count_and_say_so():
    toolchain = Toolchain(nvcc="/usr/local/bin/nvcc", nvcc_version="13.0.88",
                          notes=["NVML bindings (pynvml) not installed", "nvidia-smi not on PATH"])
    suite = valid(junit_xml(report_of(
        LessonResult(lesson="day14", status=Status.PASS, evidence=GPU_SLUG,
                     sanitizers=[a_pass("memcheck", command=[]), a_pass("racecheck", command=[])]),
        LessonResult(lesson="day13", status=Status.FAIL, evidence=GPU_SLUG,
                     reasons=["nvidia-h200: recorded memcheck: unexpected error in wr at oob.cu:2"],
                     sanitizers=[a_pass("memcheck", command=[],
                                        problems=["memcheck: unexpected error in wr at oob.cu:2"]),
                                 PassResult(tool="racecheck", not_run=NOT_RUN)],
                     notes=[f"{GPU_SLUG}: the source changed since this evidence was recorded (2026-11-01); "
                            "re-record it on that GPU"]),
        LessonResult(lesson="day71", status=Status.NO_EVIDENCE, unverified=OFFLINE_NO_EVIDENCE.format("day71")),
        offline=True, toolchain=toolchain)))
    assert counts(suite) == ("7", "2", "0", "2", "0.000")
    assert cases(suite) == [
        ("day14", "0.000", []),
        ("day14 [memcheck] (recorded)", "0.000", []),
        ("day14 [racecheck] (recorded)", "0.000", []),
        ("day13", "0.000", [("failure", "FAIL", "nvidia-h200: recorded memcheck: unexpected error in wr at oob.cu:2")]),
        ("day13 [memcheck] (recorded)", "0.000", [("failure", "SANITIZER",
                                                   "memcheck: unexpected error in wr at oob.cu:2")]),
        ("day13 [racecheck]", "0.000", [("skipped", "NOT_RUN", "not run: no GPU here and no racecheck report "
                                                               "recorded on nvidia-h200; record it on a GPU")]),
        ("day71", "0.000", [("skipped", "NO_EVIDENCE", OFFLINE_NO_EVIDENCE.format("day71"))]),
    ]
    assert {c.get("classname") for c in suite.findall("testcase")} == {"coursectl.offline"}
    assert [(p.get("name"), p.get("value")) for p in suite.find("properties")][2:] == [
        ("offline", "true"), ("gpu", "none"), ("driver", "not found"), ("cuda", "not found"),
        ("nvcc", "13.0.88"), ("compute-sanitizer", "not found"), ("covered.day14", "not recorded")]


def test_a_pass_from_the_sanitizer_cache_says_so_and_takes_no_time():
    """Named "(cached)"; 0 s, since it did not run now; the lesson keeps the seconds of the pass that did."""
    cached = a_pass("racecheck", seconds=6.7).model_copy(update={"cached": True})
    suite = valid(junit_xml(report_of(
        LessonResult(lesson="day14", status=Status.PASS, evidence=GPU_SLUG, seconds=2.5,
                     sanitizers=[a_pass("memcheck", seconds=0.8), cached]))))
    assert counts(suite) == ("3", "0", "0", "0", "2.500")
    assert cases(suite) == [("day14", "1.700", []), ("day14 [memcheck]", "0.800", []),
                            ("day14 [racecheck] (cached)", "0.000", [])]


# -- bytes a program prints ------------------------------------------------------------------
def test_control_characters_from_a_lesson_become_visible_text(tmp_path):
    text = "row 1\x00\x07\x1b[31mred\x1b[0m\ttab\r\nbad \ud800 end \ufffe é\n"
    shown = "row 1\\x00\\x07\\x1b[31mred\\x1b[0m\ttab\nbad \\ud800 end \\ufffe é\n"   # \r\n read back as \n
    result = LessonResult(lesson="bin\x01ary", status=Status.FAIL, gpu=GPU_SLUG, transcript=text,
                          reasons=["binary output\x00 here"],
                          run=RunInfo(command=["./lesson"], exit_status=1, seconds=0.1, stderr_tail="warn\x0c\n"),
                          sanitizers=[a_pass("memcheck", 0.2, ["memcheck: \x1b[1mbold\x1b[0m"])])
    path = tmp_path / "report.xml"
    write_junit(report_of(result), path)
    suite = valid(path.read_text(encoding="utf-8"))
    lesson, memcheck = suite.findall("testcase")
    assert (lesson.get("name"), lesson.findtext("system-out"), lesson.findtext("system-err")) == (
        "bin\\x01ary", shown, "warn\\x0c\n")
    assert (lesson.find("failure").get("message"), lesson.findtext("failure")) == (
        "binary output\\x00 here", "binary output\\x00 here")
    assert memcheck.find("failure").get("message") == "memcheck: \\x1b[1mbold\\x1b[0m"
    assert ET.parse(path).getroot().tag == "testsuite"


# -- through coursectl ------------------------------------------------------------------------
def test_offline_verify_writes_a_valid_junit(course, monkeypatch, gpu_bin, sanitizer_bin, prebuilt, tmp_path):
    """Recorded memcheck re-judged (recorded), racecheck declared later (not run), a lesson without evidence."""
    made = course(["day14-syncthreads", "day16-tiled-matmul"], architectures=["sm_90"],
                  sanitizers={"day14-syncthreads": {"memcheck": {}}})
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", os.pathsep.join([str(gpu_bin), str(sanitizer_bin), path]))
    assert coursectl("record", "day14-syncthreads", "-q").exit_code == 0
    monkeypatch.setenv("PATH", path)
    manifest = yaml.safe_load(made.manifest.read_text())
    manifest["lessons"][0]["sanitizers"]["racecheck"] = {}
    made.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False, width=1000))
    junit = tmp_path / "offline.xml"
    result = coursectl("verify", "--all", "--offline", "-q", "--junit", junit)
    assert result.exit_code == 0, result.stdout + result.stderr
    suite = valid(junit.read_text(encoding="utf-8"))
    assert counts(suite)[:4] == ("4", "0", "0", "3")   # day14 INCOMPLETE: racecheck neither ran nor was recorded
    assert [(name, found) for name, _, found in cases(suite)] == [
        ("day14-syncthreads", [("skipped", "INCOMPLETE", "declared sanitizer pass not run: racecheck: no GPU here "
                                                         "and no racecheck report recorded on nvidia-h200; record it "
                                                         "on a GPU")]),
        ("day14-syncthreads [memcheck] (recorded)", []),
        ("day14-syncthreads [racecheck]", [("skipped", "NOT_RUN", "not run: no GPU here and no racecheck report "
                                                                  "recorded on nvidia-h200; record it on a GPU")]),
        ("day16-tiled-matmul", [("skipped", "NO_EVIDENCE", OFFLINE_NO_EVIDENCE.format("day16-tiled-matmul"))]),
    ]


def test_a_nul_byte_in_a_transcript_keeps_the_junit_readable(course, fake_gpu, prebuilt, tmp_path):
    made = course(["day16-tiled-matmul"])
    transcript = made.transcript("day16-tiled-matmul")
    transcript.write_bytes(transcript.read_bytes().replace(b"naive", b"na\x00ive", 1))
    junit, report = tmp_path / "report.xml", tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--junit", junit, "--json", report)
    assert result.exit_code == 1
    [lesson] = json.loads(report.read_text())["results"]
    assert "\x00" in lesson["transcript"]
    suite = valid(junit.read_text(encoding="utf-8"))
    [case] = suite.findall("testcase")
    assert case.find("failure").get("type") == "FAIL"
    assert "na\\x00ive" in case.findtext("system-out")
    assert "\x00" not in junit.read_text(encoding="utf-8")


def test_a_lesson_printing_megabytes_leaves_reports_that_their_readers_take(course, fake_gpu, prebuilt, tmp_path):
    """NUL bytes past the capture limit (16 MiB kept): the JUnit XML parses with libxml2's default limits (10 MB a
    text node) and `report merge` reads the JSON report verify wrote; both keep the head of the transcript
    and say how much was cut."""
    made = course(["day16-tiled-matmul"])
    made.transcript("day16-tiled-matmul").write_bytes(b"GPU: NVIDIA H200 (compute capability 9.0)\n"
                                                      + b"\x00" * (16 * 2**20))
    junit, report = tmp_path / "report.xml", tmp_path / "report.json"
    result = coursectl("verify", "--all", "-q", "--junit", junit, "--json", report)
    assert result.exit_code == 1, result.stdout + result.stderr
    [case] = valid(junit.read_text(encoding="utf-8")).findall("testcase")
    out = case.findtext("system-out")
    assert out.startswith("GPU: NVIDIA H200 (compute capability 9.0)\n\\x00\\x00")
    assert out.endswith("\n… cut: the transcript holds 16,777,216 characters; the report keeps the first 262,144\n")
    [lesson] = json.loads(report.read_text())["results"]
    assert lesson["transcript"].endswith("\n… cut: the transcript holds 16,777,216 characters; the report keeps "
                                         "the first 262,144\n")
    merged = coursectl("report", "merge", report)
    assert (merged.exit_code, merged.stderr) == (1, "")


def test_what_is_escaped_is_exactly_what_xml_1_0_forbids():
    """XML 1.0's Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; every other code point
    is written out, and none of those."""
    def allowed(c: int) -> bool:
        return c in (0x9, 0xA, 0xD) or 0x20 <= c <= 0xD7FF or 0xE000 <= c <= 0xFFFD or 0x10000 <= c <= 0x10FFFF

    every = "".join(map(chr, range(0x110000)))
    assert [ord(c) for c in _NOT_XML.findall(every)] == [c for c in range(0x110000) if not allowed(c)]


def test_a_flaky_lesson_passes_with_its_attempts_or_fails_under_strict():
    run = RunInfo(command=["./lesson"], exit_status=0, seconds=0.4, stderr_tail="a warning\n")
    flaky = LessonResult(lesson="day13", status=Status.FLAKY, gpu="nvidia-h200", run=run, seconds=1.0,
                         retried=["attempt 1: CRASH: killed by signal 6 (SIGABRT)"])
    lenient = valid(junit_xml(report_of(flaky)))
    assert cases(lenient) == [("day13", "1.000", [])]
    assert counts(lenient)[:4] == ("1", "0", "0", "0")
    assert lenient.find("testcase/system-err").text == ("passed on a retry, after:\n"
                                                        "attempt 1: CRASH: killed by signal 6 (SIGABRT)\na warning\n")
    strict = valid(junit_xml(report_of(flaky, strict=True)))
    assert cases(strict) == [("day13", "1.000", [("failure", "FLAKY", "--strict: flaky, counted as failed: passed on "
                                                  "retry 1, after attempt 1: CRASH: killed by signal 6 (SIGABRT)")])]
    assert counts(strict)[:4] == ("1", "1", "0", "0")
