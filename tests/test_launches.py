"""A clean sanitizer report is not enough: the program must be seen to run its kernels under the tool.

compute-sanitizer's log and XML read the same for a program that launched no kernel as for one that
launched many, so a pass is clean only where the program's own output under the tool is the lesson's
(parsed by its schema, its gates held) and the pass's kernel filters take one of its kernels. Offline
that output is read from the evidence, where record keeps it beside each pass's report.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import GPU_SLUG, SANITIZER_DATA, coursectl, lines, statuses
from orchestrator.cuda.sanitizer import filter_problem, judge, kernels_checked, program_output_name
from orchestrator.cuda.sanitizer_output import build_report
from orchestrator.manifest.passes import Expectation, Tool

DAY14 = "day14-syncthreads"
DAY16 = "day16-tiled-matmul"
SANITIZERS = {DAY16: {"memcheck": {}}}
OFFLINE = ("verify", "--all", "--offline", "--arch", "sm_90", "-q")
KERNELS = ["_Z15reverseTileRacyPKfPfm", "_Z17reverseTileSyncedPKfPfm"]


# -- kernel filters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, checked", [
    ([], None),
    (["--launch-count", "20"], None),
    (["--kernel-name", "kns=Racy"], ["_Z15reverseTileRacyPKfPfm"]),
    (["--kernel-name=kns=Tile"], KERNELS),
    (["--kernel-name", "kne=_Z17reverseTileSyncedPKfPfm"], ["_Z17reverseTileSyncedPKfPfm"]),
    (["--kernel-name", "kne=reverseTileSynced"], []),          # kne is the whole mangled name
    (["--kernel-name", "regex=Racy|Synced"], KERNELS),          # a regex keeps its commas and bars
    (["--kernel-name", "kns=nothing,kns=Synced"], ["_Z17reverseTileSyncedPKfPfm"]),
    (["--kernel-name-exclude", "kns=Racy"], ["_Z17reverseTileSyncedPKfPfm"]),
    (["--kernel-name", "kns=Racy", "--kernel-name-exclude", "kns=reverse"], []),
])
def test_the_kernels_a_pass_checks_are_those_its_filters_take(args, checked):
    assert kernels_checked(args, KERNELS) == checked


def test_filters_that_take_no_kernel_are_a_pass_that_checks_no_launch():
    problem = filter_problem("racecheck", ["--kernel-name", "kns=reverseTileRaci"], KERNELS)
    assert problem == ("racecheck: its kernel filters (--kernel-name kns=reverseTileRaci) take none of the "
                       "program's 2 kernels (_Z15reverseTileRacyPKfPfm, _Z17reverseTileSyncedPKfPfm): "
                       "the pass would check no launch")
    assert filter_problem("racecheck", ["--kernel-name", "kns=Racy"], KERNELS) is None
    assert filter_problem("racecheck", ["--kernel-name", "kns=x"], []) is None   # no ptxas report: nothing known


# -- the log and the XML agree -----------------------------------------------------------------------
def test_a_log_that_counts_no_error_beside_an_xml_of_errors_is_a_problem():
    xml = SANITIZER_DATA / "oob.xml"   # 29 records as recorded on the H200; its log counted 29 errors
    report = build_report(Tool.MEMCHECK, 0, "========= ERROR SUMMARY: 0 errors\n", xml.read_text())
    assert report.findings and report.summary.errors == 0
    problems = judge(report, Expectation(tool=Tool.MEMCHECK, allow_other=True))
    assert any(p.startswith("memcheck: the summary counts 0 errors but the report holds ")
               and p.endswith("error findings: the log and the XML disagree") for p in problems), problems
    agreeing = build_report(Tool.MEMCHECK, 86, f"========= ERROR SUMMARY: {len(report.findings)} errors\n",
                            xml.read_text())
    assert not any("disagree" in p for p in judge(agreeing, Expectation(tool=Tool.MEMCHECK, allow_other=True)))


# -- the program's own output under the tool -------------------------------------------------------
def recorded(course, fake_sanitizer):
    made = course([DAY16], architectures=["sm_90"], sanitizers=SANITIZERS)
    result = coursectl("record", "--all", "-q")
    assert result.exit_code == 0, result.stdout
    return made


def rewrite(made, name: str, text: str | None) -> None:
    """Replace (or, with None, delete) one evidence file and keep meta.json's digest of it in step."""
    evidence = made.evidence(DAY16)
    meta = json.loads((evidence / "meta.json").read_text())
    if text is None:
        (evidence / name).unlink()
        meta["files"].pop(name)
    else:
        (evidence / name).write_text(text)
        meta["files"][name] = hashlib.sha256(text.encode()).hexdigest()
    (evidence / "meta.json").write_text(json.dumps(meta, indent=2))


def test_record_keeps_the_programs_output_under_each_pass(course, fake_sanitizer, prebuilt):
    made = recorded(course, fake_sanitizer)
    evidence = made.evidence(DAY16)
    kept = (evidence / program_output_name("memcheck")).read_text()
    assert kept == made.transcript(DAY16).read_text()   # the stand-in replays it, under the tool as alone
    assert program_output_name("memcheck") in json.loads((evidence / "meta.json").read_text())["files"]
    result = coursectl(*OFFLINE, "--strict")
    assert (result.exit_code, statuses(result.stdout, "verify --offline")) == (0, {DAY16: "PASS"}), result.stdout


def test_a_recorded_pass_without_the_programs_output_is_incomplete(course, fake_sanitizer, prebuilt):
    made = recorded(course, fake_sanitizer)
    rewrite(made, program_output_name("memcheck"), None)
    result = coursectl(*OFFLINE[:-1])
    assert statuses(result.stdout, "verify --offline") == {DAY16: "INCOMPLETE"}, result.stdout
    assert any(f"{GPU_SLUG}: the memcheck report recorded on {GPU_SLUG} keeps no program output beside it" in line
               for line in lines(result.stdout)), result.stdout
    assert coursectl(*OFFLINE, "--strict").exit_code == 1


def test_a_recorded_pass_whose_program_printed_nothing_fails(course, fake_sanitizer, prebuilt):
    # What a pass whose arguments skipped the work leaves: the tool's "0 errors", and no transcript.
    made = recorded(course, fake_sanitizer)
    rewrite(made, program_output_name("memcheck"), "")
    result = coursectl(*OFFLINE)
    assert (result.exit_code, statuses(result.stdout, "verify --offline")) == (1, {DAY16: "FAIL"})
    assert any(line.startswith(f"{DAY16}: {GPU_SLUG}: recorded memcheck: program output under the sanitizer:")
               for line in lines(result.stdout)), result.stdout


def test_a_program_line_that_starts_like_the_sanitizers_is_the_programs(course, fake_gpu, prebuilt):
    made = course([DAY16], architectures=["sm_90"])
    transcript = made.transcript(DAY16)
    text = transcript.read_text().splitlines(keepends=True)
    text.insert(len(text) // 2, "========= ERROR SUMMARY: 0 errors\n")   # the program printed it
    transcript.write_text("".join(text))
    result = coursectl("record", "--all", "-q")
    assert result.exit_code == 1
    assert any("found '========= ERROR SUMMARY: 0 errors'" in line for line in lines(result.stdout)), result.stdout
