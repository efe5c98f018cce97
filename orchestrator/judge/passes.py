"""A compute-sanitizer pass's verdict: run now (`judge_sanitizer_run`) or recorded with the evidence
(`judge_recorded_pass`, offline `judge_recorded_passes`), and the program's own output under the tool
(`program_under_tool`), which is what shows the pass checked the program as the lesson runs it.
"""

from __future__ import annotations

from pathlib import Path

from ..cuda.build import mangled_kernels
from ..cuda.sanitizer import Report, bounding_hint, filter_problem, judge, program_output_name
from ..cuda.sanitizer_output import build_report
from ..errors import CoursectlError, EvidenceError, TranscriptError
from ..files import relative
from ..manifest.model import Lesson, Manifest, SanitizerPass
from ..manifest.passes import Expectation, ExpectedFinding, Tool
from ..manifest.snippets import Snippet, lesson_snippets
from ..process import CommandResult
from ..transcript.claims import evaluate_claims
from ..transcript.parse import decode_output, parse_transcript
from .evidence import Evidence
from .reasons import claim_reason
from .results import LessonResult, PassResult


def resolve_snippets(findings: list[ExpectedFinding], snippets: dict[str, Snippet],
                     source_name: str, *, by_file: bool = False) -> list[ExpectedFinding]:
    """`snippet: NAME` in expected findings -> that snippet's line range in the lesson's source (`by_file`: in
    the file of the program's that marks it)."""
    resolved = []
    for finding in findings:
        if finding.snippet and finding.snippet in snippets:
            snippet = snippets[finding.snippet]
            finding = finding.model_copy(update={"line_range": (snippet.first_line, snippet.last_line),
                                                 "file": finding.file or (Path(snippet.path).name if by_file else source_name)})
        resolved.append(finding)
    return resolved


def expectation_of(manifest: Manifest, lesson: Lesson, tool: str, spec: SanitizerPass,
                   snippets: dict[str, Snippet] | None = None) -> Expectation:
    """What a lesson expects of one tool; snippets are read from its source unless given."""
    source = manifest.source_path(lesson)
    if snippets is None:
        snippets = (lesson_snippets(manifest.source_paths(lesson), lesson.source_files)
                    if any(f.snippet for f in spec.findings) else {})
    return Expectation(tool=Tool(tool), findings=resolve_snippets(spec.findings, snippets, source.name,
                                                                  by_file=len(lesson.source_files) > 1),
                       allow_other=spec.allow_other)


def _judge_report(outcome: PassResult, report: Report, expectation: Expectation, root: Path) -> None:
    """Fill a pass's counts from its report and judge it against the expectation (its files named from `root`)."""
    outcome.problems += judge(report, expectation, root=root)
    outcome.errors = report.summary.errors
    outcome.warnings = report.summary.warnings
    outcome.findings = len(report.findings)
    outcome.kernels = sorted({f.kernel for f in report.findings if f.kernel})


def judge_sanitizer_run(manifest: Manifest, lesson: Lesson, tool: str, spec: SanitizerPass,
                        run: CommandResult, log: bytes, xml: bytes | None, version: str | None,
                        timeout: float, kernels: list[str] = ()) -> PassResult:
    """One pass run now: the tool's report against the expectation, and the lesson's gates under it.

    `kernels` are the mangled names of the program's kernels (ptxas' report): kernel filters that take none
    of them make a pass that checks no launch.
    """
    outcome = PassResult(tool=tool, command=run.argv, seconds=round(run.seconds, 3),
                         exit_status=run.returncode, timed_out=run.timed_out)
    if run.timed_out:
        outcome.problems.append(f"{tool}: timed out: killed after {run.seconds:.1f} s (timeout {timeout:g} s) "
                                f"with its process group; {bounding_hint(tool)}")
        return outcome
    try:
        report = build_report(Tool(tool), run.returncode if run.returncode is not None else -1,
                              log.decode("utf-8", "replace"), xml.decode("utf-8", "replace") if xml else None,
                              version=version, log_path=f"{lesson.id} {tool}.log", xml_path=f"{lesson.id} {tool}.xml")
        _judge_report(outcome, report, expectation_of(manifest, lesson, tool, spec), manifest.root)
        outcome.report = report
    except CoursectlError as exc:
        outcome.problems.append(f"{tool}: {exc}")
    # The tool writes to its log (--log-file): stdout is the program's own, every line of it.
    outcome.problems += program_under_tool(lesson, tool, spec, decode_output(run.stdout), kernels)
    return outcome


def program_under_tool(lesson: Lesson, tool: str, spec: SanitizerPass, stdout: str, kernels=()) -> list[str]:
    """What shows that a pass did not check the program as the lesson runs it: kernel filters that take
    none of its kernels, or its output under the tool that is not the lesson's (it stopped early, its
    arguments skipped the work) or fails a gate.

    The tool's log and XML say nothing of launches (they read the same for a program that launched none);
    the program's own transcript, parsed by the lesson's schema, is what shows it ran its kernels.
    """
    problems = [problem] if (problem := filter_problem(tool, spec.args, list(kernels))) else []
    try:
        transcript = parse_transcript(lesson.output, stdout, f"{lesson.id} stdout under {tool}")
        # Only the gates: an expect under the tool is never said (its times are the tool's), so it is not
        # evaluated either.
        for claim in evaluate_claims(lesson.output, transcript, [c for c in lesson.claims if c.kind == "gate"]):
            if not claim.held:
                problems.append(claim_reason(claim, f"{tool}: ", " under the sanitizer"))
    except TranscriptError as exc:
        problems.append(f"{tool}: program output under the sanitizer: {exc}")
    return problems


def judge_recorded_pass(manifest: Manifest, lesson: Lesson, evidence: Evidence, tool: str, spec: SanitizerPass,
                        snippets: dict[str, Snippet] | None = None) -> tuple[PassResult, Report | None] | None:
    """A pass recorded with the evidence, judged against today's expectation; None if none was recorded."""
    log = evidence.directory / f"{tool}.log"
    xml = evidence.directory / f"{tool}.xml"
    outcome = PassResult(tool=tool, recorded=True)
    try:
        log_text = evidence.extra(log.name)   # through the evidence reader: a folder there is a problem
        if log_text is None:
            return None
        report = build_report(Tool(tool), 0, log_text, evidence.extra(xml.name),
                              version=evidence.meta.sanitizer_version,
                              log_path=relative(log, manifest.root), xml_path=relative(xml, manifest.root))
        _judge_report(outcome, report, expectation_of(manifest, lesson, tool, spec, snippets), manifest.root)
    except CoursectlError as exc:
        outcome.problems = [str(exc)]
        return outcome, None
    return outcome, report


def judge_recorded_passes(manifest: Manifest, lesson: Lesson, evidence: Evidence, out: LessonResult,
                          snippets: dict[str, Snippet] | None = None) -> None:
    """Each declared pass's recorded report and the program's output under it, judged; offline. `snippets`:
    the source's, where judge_source read them (else each pass's expectation reads them)."""
    slug = evidence.meta.gpu_slug
    kernels = mangled_kernels(out.builds)
    for tool, spec in manifest.sanitizers(lesson).items():
        judged = judge_recorded_pass(manifest, lesson, evidence, tool, spec, snippets)
        if judged is None:
            out.sanitizers.append(PassResult(tool=tool, not_run=f"no GPU here and no {tool} report recorded on "
                                                                f"{slug}; record it on a GPU"))
            out.notes.append(f"{slug}: no recorded {tool} report; record on a GPU to add one")
            continue
        outcome, _ = judged
        try:
            stdout = evidence.extra(program_output_name(tool))
        except EvidenceError as exc:   # the file is there but cannot be trusted: that is the problem
            outcome.problems.append(str(exc))
        else:
            if stdout is None:
                why = (f"the {tool} report recorded on {slug} keeps no program output beside it: nothing shows "
                       f"the program ran its kernels under {tool}; record it on a GPU")
                out.sanitizers.append(PassResult(tool=tool, not_run=why))
                out.notes.append(f"{slug}: {why}")
                continue
            outcome.problems += program_under_tool(lesson, tool, spec, stdout, kernels)
        out.reasons += [f"{slug}: recorded {p}" for p in outcome.problems]
        out.sanitizers.append(outcome)
