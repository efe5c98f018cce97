"""Writing a lesson without a GPU: a transcript checked against its lesson (`check_lesson`).

`check_lesson` parses a transcript (a file, standard input, or the recorded
evidence) with the lesson's output schema and evaluates every claim, those
over ptxas' report on a build of the lesson. Nothing here prints.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .build import BuildResult, build_lesson
from .claims import ClaimResult, evaluate_claims, uses_resources
from .errors import SchemaMismatch, TranscriptError, UsageError
from .evidence import list_gpus
from .judging import parse_evidence, relative
from .manifest import Lesson, Manifest
from .names import ARCH
from .process import run_command
from .toolchain import Toolchain, find_tool, nvcc_version
from .transcript import Transcript, decode_output, parse_transcript


# -- check ------------------------------------------------------------------------------------
class Checked(BaseModel):
    """A transcript parsed with its lesson's schema, and every claim's outcome."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    lesson: Lesson
    name: str                         # the transcript, as the messages name it
    gpu: str | None = None            # the GPU slug, for recorded evidence
    transcript: Transcript
    claims: list[ClaimResult]
    build: BuildResult | None = None  # the build whose ptxas report the `resources` claims read

    @property
    def gates_held(self) -> bool:
        return all(claim.held for claim in self.claims if claim.kind == "gate")


def read_transcript(path: str) -> str:
    """A transcript file (`-` is read by the caller), as text; a missing one is a usage error."""
    try:
        return decode_output(Path(path).read_bytes())
    except FileNotFoundError:
        raise UsageError(f"no transcript {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"no transcript {path}: it is a folder") from None


def check_lesson(manifest: Manifest, lesson: Lesson, text: str | None, name: str, gpu: str | None = None,
                 arch: str | None = None, runner=run_command) -> Checked:
    """Parse a transcript with the lesson's schema and evaluate every claim.

    `text` is the transcript, named `name` in messages; None checks the
    recorded evidence, `gpu`'s or the first GPU's. The claims over ptxas'
    report (`resources`) are judged on a build for `arch`, by default the
    manifest's first architecture; the build is cached as every build is.
    A transcript that does not match the schema raises SchemaMismatch naming
    its line and the line of the schema item in lessons.yaml.
    """
    if arch is not None and not ARCH.fullmatch(arch):
        raise UsageError(f"--arch {arch!r} must look like sm_90")
    try:
        if text is None:
            gpu = _recorded_gpu(manifest, lesson, gpu)
            parsed = parse_evidence(manifest, lesson, gpu)
            assert parsed is not None
            transcript = parsed.transcript
            name = relative(parsed.evidence.directory / "transcript.txt", manifest.root)
        else:
            transcript = parse_transcript(lesson.output, text, name)
    except TranscriptError as exc:
        raise schema_mismatch(manifest, lesson, exc) from None
    build = None
    if any(uses_resources(claim) for claim in lesson.claims):
        build = _build(manifest, lesson, arch or manifest.architectures[0], runner)
    claims = evaluate_claims(lesson.output, transcript, lesson.claims, build.resources if build else None)
    return Checked(lesson=lesson, name=name, gpu=gpu if text is None else None, transcript=transcript,
                   claims=claims, build=build)


def schema_mismatch(manifest: Manifest, lesson: Lesson, exc: TranscriptError) -> SchemaMismatch:
    """The transcript's error, and on a second line the schema item it is about, at its line in lessons.yaml."""
    message = exc.message
    if exc.item is not None:
        path, role = exc.item
        index = next(i for i, other in enumerate(manifest.lessons) if other is lesson)
        line = manifest.line_of("lessons", index, "output", *path)
        where = "output" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
        message += f"\n{manifest.path}:{line}: lesson {lesson.id!r}: {where} is {role}"
    return SchemaMismatch(message, path=exc.path, line=exc.line)


def _recorded_gpu(manifest: Manifest, lesson: Lesson, gpu: str | None) -> str:
    slugs = list_gpus(manifest.root, lesson.id)
    if not slugs:
        raise UsageError(f"lesson {lesson.id!r} has no recorded evidence to check",
                         hint="give a transcript file, or - to read one from standard input")
    if gpu is None:
        return slugs[0]
    if gpu not in slugs:
        raise UsageError(f"lesson {lesson.id!r} has no evidence recorded on {gpu!r}",
                         hint=f"it has evidence for: {', '.join(slugs)}")
    return gpu


def _build(manifest: Manifest, lesson: Lesson, arch: str, runner) -> BuildResult:
    nvcc = find_tool("nvcc")
    toolchain = Toolchain(nvcc=nvcc, nvcc_version=nvcc_version(nvcc, runner) if nvcc else None)
    return build_lesson(manifest, lesson, arch, toolchain.require_nvcc(), toolchain.nvcc_version, runner=runner)
