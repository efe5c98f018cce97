"""Whether recorded evidence still describes the course, and whether its meta.json agrees with itself.

Offline (`judge_currency(..., offline=True)`) evidence whose source, a
header the build reads, the flags or the rules it was recorded under
(judge/rules.py) changed since it was recorded is STALE: each change is
named in `stale` with the command that fixes it. On a GPU a changed source
is built, run and judged as it is today, so only the rules are checked.
Either way meta.json is checked against the transcript and the manifest
(`meta_problems`): a mismatch refuses the evidence, naming the field.
"""

from __future__ import annotations

from ..cuda.toolchain import arch_of, gpu_slug
from ..errors import EvidenceError, TranscriptError
from ..manifest.model import Lesson, Manifest
from .evidence import Recorded, describe_source_change, lesson_digest, list_gpus, source_changes
from .judging import ParsedEvidence, parse_evidence, sources_now
from .results import LessonResult
from .rules import check_rules
from ..words import command_line


def meta_problems(manifest: Manifest, lesson: Lesson, parsed: ParsedEvidence) -> list[str]:
    """What meta.json says that its transcript or the course contradicts, each naming its field."""
    meta, problems = parsed.evidence.meta, []
    if meta.exit_status != 0:
        problems.append(f"meta.json exit_status is {meta.exit_status}; record keeps only a run that exited 0")
    arch = arch_of(meta.compute_capability)
    if not (meta.arch.startswith(arch) and meta.arch[len(arch):] in ("", "a", "f")):
        problems.append(f"meta.json arch {meta.arch} is not the architecture of compute capability "
                        f"{meta.compute_capability}")
    if gpu_slug(meta.gpu_name) != meta.gpu_slug:
        problems.append(f"meta.json gpu_name {meta.gpu_name!r} is not the GPU of its folder {meta.gpu_slug}")
    values = {flat.path: flat.value for flat in parsed.flats}
    named = values.get("gpu")
    if isinstance(named, str) and gpu_slug(named) != meta.gpu_slug:
        problems.append(f"the transcript names GPU {named!r}, but meta.json gpu_slug is {meta.gpu_slug}")
    cc = values.get("cc")
    if isinstance(cc, str) and cc != meta.compute_capability:
        problems.append(f"the transcript says compute capability {cc}, but meta.json compute_capability is "
                        f"{meta.compute_capability}")
    return problems


def _changes(manifest: Manifest, lesson: Lesson, parsed: ParsedEvidence, out: LessonResult) -> list[str]:
    """What differs between what the evidence was recorded from and the course now: sources, headers, flags."""
    meta = parsed.evidence.meta
    changes = [describe_source_change(*change)
               for change in source_changes(meta.sources, sources_now(manifest, lesson, out.builds, meta.sources))]
    if not meta.sources and meta.source_sha256 != lesson_digest(manifest.source_path(lesson)):
        changes.append("the source changed since the evidence")
    flags = manifest.flags(lesson)
    if meta.flags != flags:
        changes.append(f"flags changed since the evidence: {' '.join(meta.flags) or '(none)'} -> "
                       f"{' '.join(flags) or '(none)'}")
    changes += [f"the recorded {tool} report is stale: the build changed after it was recorded"
                for tool in meta.stale_passes if tool in manifest.sanitizers(lesson)]
    return changes


def judge_currency(manifest: Manifest, lesson: Lesson, out: LessonResult, *, offline: bool,
                   recorded: Recorded | None = None) -> None:
    """Each GPU's evidence (on a GPU: that GPU's) against the course today: stale, refused, or rules unknown.

    With `recorded` (verify --offline's), the evidence judging already parsed is not read again."""
    if not offline:
        slugs = [out.gpu] if out.gpu else []
    else:
        slugs = recorded.slugs() if recorded is not None else list_gpus(manifest.root, lesson.id)
    for slug in slugs:
        try:
            parsed = parse_evidence(manifest, lesson, slug, recorded=recorded)
        except (EvidenceError, TranscriptError):
            continue   # judging says why it cannot be read, once
        if parsed is None:
            continue
        for problem in meta_problems(manifest, lesson, parsed):
            text = f"evidence for {slug} refused: {problem}"
            if text not in out.reasons:
                out.reasons.append(text)
        if offline:
            out.stale += [f"{slug}: {change} ({parsed.evidence.meta.date}); not judged offline: run "
                          f"`{command_line('coursectl', 'record', lesson.id)}` on a GPU" for change in _changes(manifest, lesson, parsed, out)]
        check_rules(manifest, lesson, slug, parsed.evidence.meta.rules, out)
