"""orchestrator.cuda.sanitizer against compute-sanitizer output recorded on an H200.

tests/data/sanitizer/README.md says where each file came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.errors import EvidenceError
from orchestrator.cuda.sanitizer import Access, Finding, Report, Summary, judge, sanitizer_command
from orchestrator.manifest.passes import Expectation, ExpectedFinding, Tool
from orchestrator.cuda.sanitizer_output import (
    build_report,
    has_program_failed,
    parse_log,
    parse_version,
    parse_xml,
)

DATA = Path(__file__).parent / "data" / "sanitizer"

# The last lines of the text logs of the runs that wrote race.xml and oob.xml.
RACE_LOG = "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
OOB_LOG = "========= ERROR SUMMARY: 29 errors\n"

RACY_SIGNATURE = "reverseTileRacy(const float *, float *, unsigned long)"
API_ERROR = ('Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" '
             "on CUDA API call to cudaDeviceSynchronize.")


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def race_report(exit_status: int = 86) -> Report:
    return build_report(Tool.RACECHECK, exit_status, RACE_LOG, read("race.xml"))


def oob_report(exit_status: int = 86) -> Report:
    return build_report(Tool.MEMCHECK, exit_status, OOB_LOG, read("oob.xml"))


def syncthreads_report(exit_status: int = 86) -> Report:
    return build_report(Tool.RACECHECK, exit_status, read("syncthreads.racecheck.txt"))


def tiled_report(exit_status: int = 0) -> Report:
    return build_report(Tool.MEMCHECK, exit_status, read("tiled_matmul.memcheck.txt"))


# --- the command ------------------------------------------------------------


def test_racecheck_command_asks_for_the_log_the_xml_and_the_analysis_report():
    command = sanitizer_command("compute-sanitizer", Tool.RACECHECK, ["build/syncthreads", "--quick"],
                                Path("out/racecheck.log"), Path("out/racecheck.xml"))
    assert command == [
        "compute-sanitizer",
        "--tool", "racecheck",
        "--log-file", "out/racecheck.log",
        "--xml", "--save", "out/racecheck.xml",
        "--error-exitcode", "86",
        "--racecheck-report", "analysis",
        "build/syncthreads", "--quick",
    ]


def test_memcheck_command_puts_extra_options_before_the_program():
    command = sanitizer_command("/usr/local/cuda/bin/compute-sanitizer", Tool.MEMCHECK,
                                ["./tiled_matmul"], Path("m.log"), Path("m.xml"),
                                error_exitcode=99, extra=["--leak-check", "full"])
    assert command == [
        "/usr/local/cuda/bin/compute-sanitizer",
        "--tool", "memcheck",
        "--log-file", "m.log",
        "--xml", "--save", "m.xml",
        "--error-exitcode", "99",
        "--leak-check", "full",
        "./tiled_matmul",
    ]


def test_command_refuses_an_empty_program_and_a_zero_error_exit_code():
    with pytest.raises(ValueError, match="no program to run under the sanitizer"):
        sanitizer_command("compute-sanitizer", Tool.MEMCHECK, [], Path("l"), Path("x"))
    with pytest.raises(ValueError, match=r"error exit code 0 is not in 1\.\.255"):
        sanitizer_command("compute-sanitizer", Tool.MEMCHECK, ["./a"], Path("l"), Path("x"),
                          error_exitcode=0)


# --- XML --------------------------------------------------------------------


def test_oob_xml_has_28_out_of_bounds_writes_and_one_api_error():
    findings = parse_xml(read("oob.xml"), Tool.MEMCHECK, DATA / "oob.xml")

    assert len(findings) == 29
    writes, api = findings[:28], findings[28]
    for finding in writes:
        assert finding.model_dump(exclude={"thread"}) == {
            "tool": Tool.MEMCHECK, "kind": "Precise", "severity": "error",
            "text": "Invalid __global__ write of size 4 bytes is out of bounds",
            "kernel": "wr", "signature": "wr", "file": "oob.cu", "line": 2, "pc": "0x90",
            "block": (0, 0, 0), "hazards": None, "source": None, "destination": None,
        }
    assert [finding.thread for finding in writes] == [(x, 0, 0) for x in range(100, 128)]
    assert api == Finding(tool=Tool.MEMCHECK, kind="Api", severity="error", text=API_ERROR)
    assert api.kernel is None


def test_race_xml_has_one_write_read_race_in_rev():
    findings = parse_xml(read("race.xml"), Tool.RACECHECK)

    assert findings == [Finding(
        tool=Tool.RACECHECK, kind="Analysis", severity="error", text="Race condition",
        kernel="rev", signature="rev", file="race.cu", line=2, pc="0xb0", hazards=2048,
        source=Access(direction="Write", kernel="rev", file="race.cu", line=2, pc="0xb0"),
        destination=Access(direction="Read", kernel="rev", file="race.cu", line=2, pc="0xc0"),
    )]


def test_truncated_xml_names_the_file_and_the_line(tmp_path):
    truncated = tmp_path / "oob.xml"
    truncated.write_text("".join(read("oob.xml").splitlines(keepends=True)[:40]), encoding="utf-8")

    with pytest.raises(EvidenceError) as caught:
        parse_xml(truncated.read_text(encoding="utf-8"), Tool.MEMCHECK, truncated)

    assert (caught.value.path, caught.value.line) == (str(truncated), 41)
    assert str(caught.value) == f"{truncated}:41: malformed sanitizer XML: no element found"


def test_empty_xml_is_a_parse_error_at_line_1():
    with pytest.raises(EvidenceError) as caught:
        parse_xml("", Tool.RACECHECK, "out/racecheck.xml")
    assert str(caught.value) == "out/racecheck.xml:1: malformed sanitizer XML: no element found"


# --- the text log -----------------------------------------------------------


def test_racecheck_log_has_four_races_in_reverse_tile_racy():
    summary, findings = parse_log(read("syncthreads.racecheck.txt"), Tool.RACECHECK)

    assert summary == Summary(tool=Tool.RACECHECK, errors=3, warnings=1, hazards_displayed=4)
    assert [finding.severity for finding in findings] == ["warning", "error", "error", "error"]
    for finding in findings:
        assert finding.model_dump(exclude={"severity"}) == {
            "tool": Tool.RACECHECK, "kind": "Race",
            "text": f"Race reported between Write access at {RACY_SIGNATURE}+0x150 in syncthreads.cu:150"
                    f" and Read access at {RACY_SIGNATURE}+0x1a0 in syncthreads.cu:156",
            "kernel": "reverseTileRacy", "signature": RACY_SIGNATURE,
            "file": "syncthreads.cu", "line": 150, "pc": "0x150",
            "thread": None, "block": None, "hazards": 1051020,
            "source": {"direction": "Write", "kernel": "reverseTileRacy",
                       "file": "syncthreads.cu", "line": 150, "pc": "0x150"},
            "destination": {"direction": "Read", "kernel": "reverseTileRacy",
                            "file": "syncthreads.cu", "line": 156, "pc": "0x1a0"},
        }


def test_clean_memcheck_log_has_zero_errors_and_no_findings():
    summary, findings = parse_log(read("tiled_matmul.memcheck.txt"), Tool.MEMCHECK)

    assert summary == Summary(tool=Tool.MEMCHECK, errors=0)
    assert findings == []
    assert not has_program_failed(read("tiled_matmul.memcheck.txt"))
    assert not has_program_failed(read("syncthreads.racecheck.txt"))


def test_summary_lines_in_the_singular_and_the_plural():
    assert parse_log(RACE_LOG, Tool.RACECHECK) == (
        Summary(tool=Tool.RACECHECK, errors=1, warnings=0, hazards_displayed=1), [])
    assert parse_log(OOB_LOG, Tool.MEMCHECK) == (Summary(tool=Tool.MEMCHECK, errors=29), [])


def test_a_log_without_a_summary_line_has_no_counts():
    program_only = "".join(line for line in read("tiled_matmul.memcheck.txt").splitlines(keepends=True)
                           if not line.startswith("========="))
    assert parse_log(program_only, Tool.MEMCHECK) == (Summary(tool=Tool.MEMCHECK), [])


def test_parse_version_finds_nothing_in_a_log():
    assert parse_version(read("tiled_matmul.memcheck.txt")) is None
    assert parse_version("") is None


# --- reports and judging ----------------------------------------------------


def test_report_takes_the_summary_from_the_log_and_the_findings_from_the_xml():
    report = oob_report()
    assert report.summary == Summary(tool=Tool.MEMCHECK, errors=29)
    assert len(report.findings) == 29
    assert (report.exit_status, report.error_exitcode, report.program_failed) == (86, 86, False)


def test_expected_race_passes():
    expectation = Expectation(tool=Tool.RACECHECK,
                              findings=[ExpectedFinding(kernel="rev", file="race.cu", line=2)])
    assert judge(race_report(), expectation) == []


def test_kind_race_matches_the_xml_analysis_record():
    expectation = Expectation(tool=Tool.RACECHECK,
                              findings=[ExpectedFinding(kernel="rev", kind="Race", severity="error")])
    assert judge(race_report(), expectation) == []


def test_unexpected_race_fails():
    assert judge(race_report(), Expectation(tool=Tool.RACECHECK)) == [  # a lesson that says nothing of racecheck
        "racecheck: unexpected race in rev at race.cu:2 (2048 hazards)"]


def test_repeated_races_make_one_sentence():
    assert judge(syncthreads_report(), Expectation(tool=Tool.RACECHECK)) == [  # a lesson that says nothing of racecheck
        "racecheck: unexpected race in reverseTileRacy at syncthreads.cu:150 "
        "(1051020 hazards, 4 reports)"]


def test_expected_races_in_the_log_pass_at_either_end():
    for line in (None, 150, 156):
        expectation = Expectation(tool=Tool.RACECHECK, findings=[
            ExpectedFinding(kernel="reverseTileRacy", kind="race", file="syncthreads.cu", line=line)])
        assert judge(syncthreads_report(), expectation) == []


def test_expected_finding_that_never_came_fails():
    expectation = Expectation(tool=Tool.RACECHECK, findings=[
        ExpectedFinding(kernel="reverseTileRacy"), ExpectedFinding(kernel="reverseTileSynced")])
    assert judge(syncthreads_report(), expectation) == [
        "racecheck: expected a finding in reverseTileSynced, none reported"]


def test_a_race_on_another_line_fails_both_ways():
    expectation = Expectation(tool=Tool.RACECHECK, findings=[
        ExpectedFinding(kernel="reverseTileRacy", severity="error", file="syncthreads.cu", line=151)])
    assert judge(syncthreads_report(), expectation) == [
        "racecheck: unexpected race in reverseTileRacy at syncthreads.cu:150 "
        "(1051020 hazards, 4 reports)",
        "racecheck: expected a finding in reverseTileRacy at syncthreads.cu:151 (severity error), "
        "none reported",
    ]


def test_a_long_line_of_the_sanitizer_is_quoted_short():
    log = f"========= Program hit cudaErrorInvalidValue {'x' * 5000}\n========= ERROR SUMMARY: 1 error\n"
    assert judge(build_report(Tool.MEMCHECK, 0, log), Expectation(tool=Tool.MEMCHECK)) == [
        f"memcheck: unexpected API error: Program hit cudaErrorInvalidValue {'x' * 166}… (5,034 characters)"]
    with pytest.raises(EvidenceError) as caught:
        parse_log(f"========= ERROR SUMMARY: {'9' * 5000}x\n", Tool.MEMCHECK)
    assert str(caught.value) == (f"<log>:1: unrecognised sanitizer summary line 'ERROR SUMMARY: {'9' * 185}'… "
                                 "(5,016 characters)")


def test_clean_memcheck_passes_the_default_expectation():
    assert Expectation(tool=Tool.MEMCHECK) == Expectation(tool=Tool.MEMCHECK, findings=[],
                                                             allow_other=False)
    assert judge(tiled_report(), Expectation(tool=Tool.MEMCHECK)) == []


def test_clean_memcheck_fails_an_expected_finding():
    expectation = Expectation(tool=Tool.MEMCHECK, findings=[ExpectedFinding(kernel="wr")])
    assert judge(tiled_report(), expectation) == ["memcheck: expected a finding in wr, none reported"]


def test_out_of_bounds_writes_fail_the_clean_expectation():
    assert judge(oob_report(), Expectation(tool=Tool.MEMCHECK)) == [
        "memcheck: unexpected error in wr at oob.cu:2 (28 reports): "
        "Invalid __global__ write of size 4 bytes is out of bounds",
        f"memcheck: unexpected API error: {API_ERROR}",
    ]


def test_expected_out_of_bounds_writes_still_leave_the_api_error():
    expectation = Expectation(tool=Tool.MEMCHECK,
                              findings=[ExpectedFinding(kernel="wr", kind="Precise", line=2)])
    assert judge(oob_report(), expectation) == [f"memcheck: unexpected API error: {API_ERROR}"]
    allowing = expectation.model_copy(update={"allow_other": True})
    assert judge(oob_report(), allowing) == []


def test_exit_status_other_than_0_or_the_error_exit_code_fails():
    assert judge(tiled_report(exit_status=255), Expectation(tool=Tool.MEMCHECK)) == [
        "memcheck: exit status 255, expected 0 or 86"]
    assert judge(tiled_report(exit_status=-9), Expectation(tool=Tool.MEMCHECK)) == [
        "memcheck: killed by signal 9, expected 0 or 86"]
    failed = tiled_report(exit_status=1).model_copy(update={"program_failed": True})
    assert judge(failed, Expectation(tool=Tool.MEMCHECK)) == [
        "memcheck: exit status 1, expected 0 or 86; the program itself returned an error"]


def test_counts_without_findings_fail():
    summary_only = build_report(Tool.RACECHECK, 86, RACE_LOG)
    assert judge(summary_only, Expectation(tool=Tool.RACECHECK)) == [  # a lesson that says nothing of racecheck
        "racecheck: the summary counts 1 error, 0 warnings but no finding was reported"]
    assert judge(tiled_report(exit_status=86), Expectation(tool=Tool.MEMCHECK)) == [
        "memcheck: exit status 86 says the sanitizer found errors, but no finding was reported"]


def test_judging_against_another_tools_expectation_is_a_mistake():
    with pytest.raises(ValueError, match="a memcheck report judged against a racecheck expectation"):
        judge(tiled_report(), Expectation(tool=Tool.RACECHECK))


def test_expectations_refuse_unknown_keys():
    with pytest.raises(ValidationError):
        Expectation.model_validate({"tool": "racecheck", "findings": [{"kernel": "rev", "lines": 2}]})


def test_a_finding_comes_before_the_program_s_own_error():
    # The one-line reason is the first problem: the finding with its file:line, not "the program returned an error".
    failed = race_report().model_copy(update={"program_failed": True})
    problems = judge(failed, Expectation(tool=Tool.RACECHECK))
    assert problems[0] == "racecheck: unexpected race in rev at race.cu:2 (2048 hazards)"
    assert problems[1:] and "the program itself returned an error" in problems[-1]
