"""Every verdict coursectl gives, each computed by exactly one function here.

- a run of a lesson (`judge_run`, several runs: `judge_runs`);
- a run's fields against recorded evidence (`compare_with_evidence`; before
  record replaces it: `compare_with_previous`), each status comparison.compare_fields';
- ptxas' report against the build evidence (`compare_build_evidence`);
- a compute-sanitizer pass, run now (`judge_sanitizer_run`) or recorded
  (`judge_recorded_pass`), and the program under it (`program_under_tool`):
  in judge/passes.py, re-exported here;
- a lesson's claims on one GPU's recorded evidence (`claims_on_evidence`), and
  over ptxas' report of today's builds (`build_claims`);
- recorded evidence on its own, without a GPU (`judge_evidence`);
- the text of a failed claim (`claim_reason`, judge/reasons.py).

verify, record, sanitize, render and the reports all call these. Nothing
here runs a program or writes a file.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..cuda.build import BuildResult
from ..transcript.claims import ClaimResult, evaluate_claim, evaluate_claims, resources_view, transcript_names, uses_resources
from .comparison import check_plausibility, compare_fields, spread_of_runs
from .tolerances import suggest_tolerances
from ..errors import CoursectlError, EvidenceError, TranscriptError
from ..files import relative
from .evidence import Evidence, Recorded, list_gpus, load_build_evidence, load_evidence, source_digests
from ..manifest.model import Lesson, Manifest
from ..process import CommandResult, tail_lines
from ..cuda.resources import BuildEvidence, compare_resources
from .results import LessonResult, PassResult, RunEnvironment, RunInfo
from .reasons import claim_reason
from .passes import (expectation_of, judge_recorded_pass, judge_recorded_passes, judge_sanitizer_run,  # noqa: F401
                     program_under_tool, resolve_snippets)
from ..manifest.snippets import Snippet, lesson_snippets
from ..cuda.toolchain import Gpu, GpuState
from ..transcript.parse import Flat, Scope, Transcript, decode_output, flatten, parse_transcript

MAX_MOVED_SHOWN = 8


# -- claims ---------------------------------------------------------------------------------
def _file_claims(claims: list[ClaimResult], out: LessonResult, prefix: str = "") -> None:
    """A failed gate is a reason, a failed prediction a note."""
    for claim in claims:
        if not claim.held:
            (out.reasons if claim.kind == "gate" else out.notes).append(claim_reason(claim, prefix))


# -- evidence -------------------------------------------------------------------------------
class ParsedEvidence(BaseModel):
    """One GPU's recorded evidence for a lesson, parsed with the lesson's schema."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    evidence: Evidence
    transcript: Transcript
    flats: list[Flat]

    @property
    def slug(self) -> str:
        return self.evidence.meta.gpu_slug


def parse_evidence(manifest: Manifest, lesson: Lesson, slug: str, root: Path | None = None,
                   recorded: Recorded | None = None) -> ParsedEvidence | None:
    """Load, check and parse one GPU's evidence; None if there is none.

    `root` holds the evidence/ folder when it is not the course's own (compare
    reads a git revision's evidence into a temporary folder). With `recorded`
    (the lesson's Recorded) each set is loaded and parsed once, however often
    it is asked for. Raises EvidenceError (untrustworthy files) or
    TranscriptError (the transcript no longer matches the schema).
    """
    if recorded is not None:
        return recorded.parse(slug, lambda evidence: _parsed(lesson, evidence, recorded.root))
    root = manifest.root if root is None else root
    return _parsed(lesson, load_evidence(root, lesson.id, slug), root)


def _parsed(lesson: Lesson, evidence: Evidence | None, root: Path) -> ParsedEvidence | None:
    if evidence is None:
        return None
    path = relative(evidence.directory / "transcript.txt", root)
    transcript = parse_transcript(lesson.output, evidence.transcript, path)
    return ParsedEvidence(evidence=evidence, transcript=transcript,
                          flats=list(flatten(lesson.output.items, transcript.scope)))


def claims_on_evidence(manifest: Manifest, lesson: Lesson, parsed: ParsedEvidence, builds: list[BuildResult] = (),
                       recorded: Recorded | None = None) -> tuple[list[ClaimResult], EvidenceError | None]:
    """A lesson's claims on one GPU's recorded evidence, and what kept its build evidence from being read.

    The transcript is judged with ptxas' report of the build it describes:
    the build evidence recorded for its architecture, or where none was
    recorded, today's build for that architecture among `builds`. Without
    either (or with build evidence that cannot be read) the claims over
    ptxas' report are left out. The page, verify --offline and the drift
    of a run all take a claim's outcome on the evidence from here.
    """
    arch, resources, unreadable = parsed.evidence.meta.arch, None, None
    try:
        kept = recorded.build(arch) if recorded is not None else load_build_evidence(manifest.root, lesson.id, arch)
        today = [b.resources for b in builds if b.arch == arch and b.variant == "plain"]
        resources = kept.kernels if kept is not None else (today[0] if today else None)
    except EvidenceError as exc:
        unreadable = exc
    return evaluate_claims(lesson.output, parsed.transcript, lesson.claims, resources), unreadable


# -- one run ---------------------------------------------------------------------------------
def judge_run(manifest: Manifest, lesson: Lesson, result: CommandResult, gpu_slug: str | None,
              arch: str | None, *, compare: bool = True, resources: dict | None = None,
              peaks: tuple | None = None, environment: RunEnvironment | None = None) -> LessonResult:
    """Turn one run of a lesson into a result: parse, claims, plausibility, evidence.

    The result is not settled: its status is results.settle's, called once by the scheduler
    after the workflow's last stage."""
    text = decode_output(result.stdout)
    info = RunInfo(command=result.argv, exit_status=result.returncode, signal=result.signal,
                   timed_out=result.timed_out, seconds=result.seconds,
                   stdout_truncated=result.stdout_truncated, stderr_tail=tail_lines(result.stderr))
    out = LessonResult(lesson=lesson.id, run=info, transcript=text, arch=arch, gpu=gpu_slug,
                       environment=environment or RunEnvironment())
    if out.environment.untrusted:
        out.notes.append(f"timings not trusted: {out.environment.untrusted}")
    out.notes += result.notes
    if result.timed_out:
        tail = tail_lines(result.stdout, 5) or "(no output)"
        out.reasons.append(f"killed after {result.seconds:.1f} s (timeout "
                           f"{manifest.timeout(lesson):g} s) with its process group; last output:\n{tail}")
        return out
    if result.signal:
        out.reasons.append(result.describe())
        return out
    if result.stdout_truncated:
        out.reasons.append("output exceeded the capture limit and was cut; the transcript is incomplete")
    try:
        transcript = parse_transcript(lesson.output, text, f"{lesson.id} stdout")
    except TranscriptError as exc:
        transcript = None
        out.reasons.append(str(exc))
    if transcript is not None:
        out.transcripts = {gpu_slug or "": transcript}
        out.claims = evaluate_claims(lesson.output, transcript, lesson.claims, resources)
        _file_claims(out.claims, out)
    if result.returncode != 0:
        out.reasons.append(result.describe())
    if transcript is not None:
        flats = out.flats = list(flatten(lesson.output.items, transcript.scope))
        if peaks:
            out.reasons += check_plausibility(flats, *peaks)
        if compare:
            compare_with_evidence(manifest, lesson, flats, gpu_slug, out)
    return out


def judge_runs(manifest: Manifest, lesson: Lesson, runs: list[CommandResult], gpu: Gpu, arch: str,
               *, compare: bool, resources: dict | None,
               environment: RunEnvironment | None, recorded: Recorded | None = None) -> tuple[LessonResult, int]:
    """Judge one or more runs; tolerance fields by their median; returns (result, chosen run).

    Every run must pass its gates. With several runs, each tolerance field is
    judged by its median and its spread is reported; a spread wider than the
    field's own tolerance makes the field AMBIGUOUS instead of PASS or FAIL.
    The chosen run is the one closest to the medians (what record stores).
    """
    peaks = (gpu.peak_gbps, gpu.peak_fp32_gflops)
    judged = [judge_run(manifest, lesson, run, gpu.slug, arch, compare=False, resources=resources,
                        peaks=peaks, environment=environment) for run in runs]
    parsed = [(index, result.flats) for index, result in enumerate(judged) if result.flats is not None]
    chosen, medians, spread, ambiguous = 0, {}, {}, set()
    if len(parsed) > 1:
        medians, spread, ambiguous = spread_of_runs([flats for _, flats in parsed])

        def distance(flats: list[Flat]) -> float:
            return sum(abs(float(f.value) - medians[f.path]) / (abs(medians[f.path]) or 1.0)
                       for f in flats if f.path in medians and isinstance(f.value, (int, float)))
        chosen = min(parsed, key=lambda item: distance(item[1]))[0]
    result = judged[chosen]
    for index, other in enumerate(judged):
        if index != chosen and other.reasons:   # a run that timed out or died says so in its reasons too
            result.reasons += [f"run {index + 1} of {len(runs)}: {r}" for r in other.reasons]
    result.runs = len(runs)
    result.spread = spread
    result.ambiguous = sorted(ambiguous)
    result.suggestions = suggest_tolerances([flats for _, flats in parsed]) if len(parsed) > 1 else []
    if compare and parsed:
        flats = dict(parsed).get(chosen) or parsed[0][1]
        if medians:
            flats = [f.model_copy(update={"value": medians[f.path]}) if f.path in medians else f for f in flats]
        compare_with_evidence(manifest, lesson, flats, gpu.slug, result, recorded)
    if not lesson.output.items and not lesson.claims:
        result.reasons.append("the lesson checks nothing: its output: declares no items and it makes no claims; "
                              "build and run it, then write its output schema from the transcript")
    return result, chosen


def describe_environment(before: GpuState | None, after: GpuState | None) -> RunEnvironment:
    """Clocks and throttling around the runs; `untrusted` says why timings cannot be trusted."""
    problems = []
    for label, state in (("before", before), ("after", after)):
        if state is not None and state.throttled:
            problems.append(f"GPU throttled {label} the run (clocks event reasons {state.throttle_reasons:#x})")
    if before is not None and before.processes:
        problems.append(f"other processes on the GPU: {', '.join(map(str, before.processes))}")
    return RunEnvironment(before=before, after=after, untrusted="; ".join(problems) or None)


# -- against evidence ----------------------------------------------------------------------------
def compare_with_evidence(manifest: Manifest, lesson: Lesson, new: list[Flat], gpu_slug: str | None,
                          out: LessonResult, recorded: Recorded | None = None) -> None:
    """Each field against this GPU's evidence (or another GPU's exact fields); moves are reasons.

    The fields' statuses are compare_fields', given the run's ambiguous fields and whether its timings are
    trusted. With `recorded` (the turn's), evidence another stage read is not read again.
    """
    slugs = recorded.slugs() if recorded is not None else list_gpus(manifest.root, lesson.id)
    slug = gpu_slug if gpu_slug in slugs else (slugs[0] if slugs else None)
    if slug is None:
        return
    try:
        old = parse_evidence(manifest, lesson, slug, recorded=recorded)
        assert old is not None
    except (EvidenceError, TranscriptError) as exc:
        out.reasons.append(f"evidence: {exc}")
        return
    out.evidence = slug
    out.fields = compare_fields(new, old.flats, same_gpu=slug == gpu_slug, ambiguous=out.ambiguous,
                                untrusted=bool(out.environment.untrusted))
    moved = [f for f in out.fields if f.status.is_failure]
    if moved:
        lines = [f"{len(moved)} field(s) differ from the {slug} evidence:"]
        for f in moved[:MAX_MOVED_SHOWN]:
            lines.append(f"  {f.path} [{f.rule}]: {f.status.value}: evidence {f.old!r}, now {f.new!r}")
        if len(moved) > MAX_MOVED_SHOWN:
            lines.append(f"  ... and {len(moved) - MAX_MOVED_SHOWN} more")
        out.reasons.append("\n".join(lines))


def sources_now(manifest: Manifest, lesson: Lesson, builds: list[BuildResult],
                recorded: dict[str, str] | None = None) -> dict[str, str | None]:
    """The local files of a lesson's build now, by course path, with their digests as the evidence records them.

    The files are those the build read (the first of `builds`); without a
    build, those the evidence names.
    """
    files = list(builds[0].sources) if builds else list(recorded or {})
    source = relative(manifest.source_path(lesson), manifest.root)
    return source_digests(manifest.root, source, files or [source])


def compare_with_previous(manifest: Manifest, lesson: Lesson, out: LessonResult, slug: str,
                          recorded: Recorded | None = None) -> None:
    """What moved since the evidence that record is about to replace (notes, never reasons)."""
    try:
        previous = parse_evidence(manifest, lesson, slug, recorded=recorded)
    except EvidenceError as exc:
        out.notes.append(f"previous evidence was unreadable and is replaced: {exc}")
        return
    except TranscriptError as exc:
        out.notes.append(f"previous evidence no longer parses ({exc}); nothing to compare")
        return
    if previous is not None:
        out.fields = compare_fields(out.flats or [], previous.flats, same_gpu=True, ambiguous=out.ambiguous,
                                    untrusted=bool(out.environment.untrusted))
        out.evidence = slug


def build_evidence_of(manifest: Manifest, lesson: Lesson, build: BuildResult, nvcc_version: str | None) -> BuildEvidence:
    """What a build says about its kernels, as build evidence is stored."""
    return BuildEvidence(lesson=lesson.id, arch=build.arch, nvcc_version=nvcc_version,
                         flags=manifest.flags(lesson), kernels=build.resources)


def compare_build_evidence(manifest: Manifest, lesson: Lesson, build: BuildResult, nvcc_version: str | None,
                           out: LessonResult, recorded: Recorded | None = None) -> None:
    """A kernel that now spills, or whose shared memory moved, fails before any GPU is involved."""
    try:
        old = recorded.build(build.arch) if recorded is not None else \
            load_build_evidence(manifest.root, lesson.id, build.arch)
    except EvidenceError as exc:
        if str(exc) not in out.reasons:   # judge_evidence may have said it, judging the evidence's claims
            out.reasons.append(str(exc))
        return
    if old is None:
        return
    new = build_evidence_of(manifest, lesson, build, nvcc_version)
    if old.flags != new.flags:
        out.notes.append(f"{build.arch}: flags changed since the build evidence; resources not compared")
        return
    failures, notes = compare_resources(old, new)
    if failures:
        out.reasons.append("build evidence: " + "; ".join(failures))
    if notes:
        out.notes.append(f"build evidence (nvcc {old.nvcc_version} -> {new.nvcc_version}): " + "; ".join(notes))


# -- offline: the evidence on its own ---------------------------------------------------------------
def judge_evidence(manifest: Manifest, lesson: Lesson, out: LessonResult, recorded: Recorded | None = None,
                   snippets: dict[str, Snippet] | None = None) -> None:
    """Parse each GPU's evidence, check its gates and recorded passes, and that exact fields agree across GPUs.

    Its claims are judged as the page shows them (`claims_on_evidence`); the
    claims over ptxas' report of today's builds (out.builds) on its transcript beside them.
    `snippets`: the source's, where judge_source read them.
    """
    parsed: dict[str, list[Flat]] = {}
    for slug in recorded.slugs() if recorded is not None else list_gpus(manifest.root, lesson.id):
        try:
            item = parse_evidence(manifest, lesson, slug, recorded=recorded)
            assert item is not None
        except (EvidenceError, TranscriptError) as exc:
            out.reasons.append(f"evidence for {slug}: {exc}")
            continue
        out.evidence = out.evidence or slug
        out.transcripts[slug] = item.transcript
        meta = item.evidence.meta
        claims, unreadable = claims_on_evidence(manifest, lesson, item, out.builds, recorded)
        if unreadable is not None and str(unreadable) not in out.reasons:
            out.reasons.append(str(unreadable))
        claims = _beside_today(claims, build_claims(lesson, out.builds, item.transcript), meta.arch)
        out.claims = out.claims or claims
        _file_claims(claims, out, f"{slug}: ")
        parsed[slug] = item.flats
        judge_recorded_passes(manifest, lesson, item.evidence, out, snippets)
        out.reasons += [f"{slug}: {problem}" for problem in check_plausibility(
            item.flats, item.evidence.meta.peak_gbps, item.evidence.meta.peak_fp32_gflops)]
    if out.evidence is None:
        judge_build_claims(lesson, out)
        out.sanitizers += [PassResult(tool=tool, not_run="no GPU here and no report recorded on any GPU")
                           for tool in manifest.sanitizers(lesson)]
    slugs = list(parsed)
    for other in slugs[1:]:
        for field in compare_fields(parsed[other], parsed[slugs[0]], same_gpu=False):
            if field.status.is_failure:
                out.reasons.append(f"exact field {field.path} differs between GPUs: "
                                   f"{slugs[0]} {field.old!r}, {other} {field.new!r}")


def _beside_today(claims: list[ClaimResult], today: list[ClaimResult], arch: str) -> list[ClaimResult]:
    """The evidence's claims, then today's builds' claims over ptxas' report on its transcript.

    A claim whose outcome on the evidence today's build of the evidence's
    architecture repeats is listed once, as that build's (`no-kernel-spills [sm_90]`).
    """
    twins = {claim.id: claim for claim in today}

    def repeated(claim: ClaimResult) -> bool:
        twin = twins.get(f"{claim.id} [{arch}]")
        return twin is not None and twin.model_copy(update={"id": claim.id}) == claim
    return [claim for claim in claims if not repeated(claim)] + today


def build_claims(lesson: Lesson, builds: list[BuildResult], transcript: Transcript | None = None) -> list[ClaimResult]:
    """The claims over ptxas' report of today's builds, once per architecture (`no-kernel-spills [sm_90]`).

    Judged on a recorded transcript where there is one; without it, a claim
    that also names a printed field is left out.
    """
    claims = [c for c in lesson.claims if uses_resources(c) and (transcript is not None or not transcript_names(c))]
    transcript = transcript if transcript is not None else Transcript(scope=Scope(), line_count=0)
    return [evaluate_claim(lesson.output, transcript, claim, {"resources": resources_view(build.resources)})
            .model_copy(update={"id": f"{claim.id} [{build.arch}]"}) for build in builds for claim in claims]


def judge_build_claims(lesson: Lesson, out: LessonResult) -> None:
    """For a lesson never recorded: the claims over ptxas' report alone, once per architecture built.

    A claim that also names a printed field needs a transcript; it is listed
    as not checked, never counted as held.
    """
    out.notes += [f"{claim.kind} {claim.id!r} not checked: it needs a recorded transcript "
                  f"({', '.join(sorted(transcript_names(claim)))})"
                  for claim in lesson.claims if uses_resources(claim) and transcript_names(claim)]
    order = [f"{claim.id} [{build.arch}]" for claim in lesson.claims for build in out.builds]
    claims = sorted(build_claims(lesson, out.builds), key=lambda claim: order.index(claim.id))
    out.claims += claims
    _file_claims(claims, out)


def judge_source(manifest: Manifest, lesson: Lesson, out: LessonResult) -> dict[str, Snippet] | None:
    """What the source alone can show: its snippet markers are well formed. Returns its snippets (None: they
    cannot be read), which the recorded passes' expectations then take instead of reading them again."""
    try:
        return lesson_snippets(manifest.source_paths(lesson), lesson.source_files)
    except CoursectlError as exc:
        out.reasons.append(str(exc))
        return None
