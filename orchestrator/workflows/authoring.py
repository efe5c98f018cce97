"""Writing a lesson without a GPU: a transcript checked against its lesson (`check_lesson`), and a new
lesson scaffolded in the course's conventions (`new_lesson`).

`check_lesson` parses a transcript (a file, standard input, or the recorded
evidence) with the lesson's output schema and evaluates every claim, those
over ptxas' report on a build of the lesson. `new_lesson` writes
lessons/<id>/ (a program that builds and prints what its entry describes,
and its prose) and inserts the lesson's entry into lessons.yaml in day order,
as text, so the file keeps its comments and layout. Nothing here prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from string import Template

import yaml
from pydantic import BaseModel, ConfigDict

from ..cuda.build import BuildResult, build_lesson, display_command
from ..transcript.claims import ClaimResult, evaluate_claims, uses_resources
from ..errors import CoursectlError, ManifestError, SchemaMismatch, TranscriptError, UsageError
from ..judge.evidence import list_gpus
from ..files import TEXT_LIMIT, check_inside, read_file, read_stream, read_text
from ..judge.judging import parse_evidence, relative
from ..manifest.model import Lesson, Manifest
from ..manifest.load import load_manifest
from ..names import check_arch
from ..process import DEFAULT_OUTPUT_LIMIT, Runner, run_command
from ..render.source_header import NO_EVIDENCE_LINE
from ..manifest.shorthand import LESSON_FOLDER, PROSE
from ..cuda.toolchain import Toolchain, find_tool, nvcc_version
from ..transcript.parse import Transcript, decode_output, parse_transcript
from ..manifest.yamlfile import manifest_text

SKELETON = Path(__file__).resolve().parent.parent / "skeleton"
NEW_ID = re.compile(r"day(\d+)-([a-z0-9]+(?:-[a-z0-9]+)*)")
SPDX = re.compile(r"^//\s*SPDX-License-Identifier:\s*(\S.*?)\s*$")


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


STDIN = "<stdin>"   # standard input, as messages name it


def read_transcript(path: str) -> str:
    """A transcript file, or standard input for `-`, as text; a usage error for anything else.

    A transcript is read as a run's output is captured: up to 16 MiB
    (process.DEFAULT_OUTPUT_LIMIT), and only from a regular file or standard
    input, so that /dev/zero, a FIFO or `yes |` is one error, never a hang or
    all the machine's memory.
    """
    if path == "-":
        data = read_stream(sys.stdin.buffer, DEFAULT_OUTPUT_LIMIT, "a transcript", STDIN, UsageError)
    else:
        data = read_file(Path(path), DEFAULT_OUTPUT_LIMIT, "a transcript", UsageError, shown=path)
        if data is None:
            raise UsageError(f"no transcript {path}: no such file")
    return decode_output(data)


def check_lesson(manifest: Manifest, lesson: Lesson, text: str | None, name: str, gpu: str | None = None,
                 arch: str | None = None, runner: Runner = run_command) -> Checked:
    """Parse a transcript with the lesson's schema and evaluate every claim.

    `text` is the transcript, named `name` in messages; None checks the
    recorded evidence, `gpu`'s or the first GPU's. The claims over ptxas'
    report (`resources`) are judged on a build for `arch`, by default the
    manifest's first architecture; the build is cached as every build is.
    A transcript that does not match the schema raises SchemaMismatch naming
    its line and the line of the schema item in lessons.yaml.
    """
    if arch is not None:
        check_arch(arch)
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


def _build(manifest: Manifest, lesson: Lesson, arch: str, runner: Runner) -> BuildResult:
    nvcc = find_tool("nvcc")
    toolchain = Toolchain(nvcc=nvcc, nvcc_version=nvcc_version(nvcc, runner) if nvcc else None)
    return build_lesson(manifest, lesson, arch, toolchain.require_nvcc(), toolchain.nvcc_version, runner=runner)


# -- new --------------------------------------------------------------------------------------
# What the skeleton prints, as the printf formats of its source: the program and sample_transcript
# format with the same strings, so the sample is what the program prints.
FORMATS = {
    "gpu_format": "GPU: %s (compute capability %d.%d)\n",
    "size_format": "n = %d floats, %d threads per block\n\n",
    "header_format": "%-10s %11s %11s\n",
    "row_format": "%-10s %11.3f %11.1f\n",
    "failed_format": "\nFAILED %s: first wrong element at %d: got %.9g, want %.9g\n",
    "matched_format": "\nall %d elements match the CPU reference\n",
}
N = 1 << 20
THREADS = 256

GPU_ITEM = '- line: "GPU: {gpu:device} (compute capability {cc:word:device})"\n'
ENTRY = """\
- ${id}: ${title}
  output:
${gpu_item}    - line: "n = {n:int} floats, {threads:int} threads per block"
    - table: kernels
      header: "kernel time (ms) GB/s"
      keys: [saxpy]
      columns:
        kernel: word
        ms: {type: float, compare: tolerance, rel: 0.25, abs: 0.003, unit: ms, label: time}
        gbps: {type: float, compare: tolerance, rel: 0.25, unit: GB/s, label: bandwidth}
    - line: "all {elements:int} elements match the CPU reference"
      optional: true
    - table: failures
      anywhere: true
      row: "FAILED {kernel:word}: first wrong element at {element:int}: got {got}, want {want}"
  claims:
    - saxpy-matches: every element matches the CPU reference
      gate: len(failures) == 0 and elements == n
    - saxpy-needs-no-shared-memory: the kernel reads and writes global memory only
      gate: resources['saxpy'].smem == 0
    - saxpy-streams: SAXPY streams at more than 100 GB/s (a prediction)
      expect: kernels['saxpy'].gbps > 100
"""


class Scaffold(BaseModel):
    """What `new_lesson` wrote."""

    lesson: str
    files: list[str]      # relative to the course root
    line: int             # the entry's first line in lessons.yaml


def sample_transcript(gpu: str = "NVIDIA H200", cc: tuple[int, int] = (9, 0), ms: float = 0.012,
                      wrong: tuple[int, float, float] | None = None) -> str:
    """What the skeleton prints on a GPU: `wrong` (element, got, want) for a run whose check failed."""
    gbps = 3.0 * 4 * N / (ms * 1.0e-3) / 1.0e9
    text = (FORMATS["gpu_format"] % (gpu, *cc) + FORMATS["size_format"] % (N, THREADS)
            + FORMATS["header_format"] % ("kernel", "time (ms)", "GB/s") + FORMATS["row_format"] % ("saxpy", ms, gbps))
    if wrong is not None:
        return text + FORMATS["failed_format"] % ("saxpy", *wrong)
    return text + FORMATS["matched_format"] % N


def _title_text(title: str) -> str:
    """The title as the user typed it. Under a C or POSIX locale without UTF-8 mode (LC_ALL=C PYTHONUTF8=0)
    Python hands the command line's bytes over as surrogate escapes, which no file can hold: read them as
    the UTF-8 they are. A title that is not UTF-8 either is refused, in one line."""
    if not any("\udc80" <= char <= "\udcff" for char in title):
        return title
    try:
        return os.fsencode(title).decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise UsageError("--title is not UTF-8 text; write it in UTF-8 (lessons.yaml and the lesson's files "
                         "are UTF-8)") from None


def new_lesson(manifest: Manifest, lesson_id: str, title: str) -> Scaffold:
    """Write lessons/<id>/ and insert the lesson's entry into lessons.yaml in day order.

    The entry is checked before anything is kept: the new manifest must load
    and the skeleton's transcript must parse and hold every claim that needs
    no build; otherwise nothing is written.
    """
    match = NEW_ID.fullmatch(lesson_id)
    if match is None:
        raise UsageError(f"lesson id {lesson_id!r} must look like dayNN-name: 'day', the day's number, a dash, "
                         f"then lower-case words joined by dashes (day17-saxpy)")
    day = int(match.group(1))
    title = " ".join(_title_text(title).split())
    if not title:
        raise UsageError("--title must say something: it is the lesson's page title")
    for index, other in enumerate(manifest.lessons):
        if other.id == lesson_id:
            raise UsageError(f"lesson {lesson_id!r} already exists ({manifest.path}:"
                             f"{manifest.line_of('lessons', index)})")
        if other.day == day:
            raise UsageError(f"day {day} already has lesson {other.id!r} ({manifest.path}:"
                             f"{manifest.line_of('lessons', index)})",
                             hint="one lesson a day: pick another day")
    folder = manifest.root / LESSON_FOLDER / lesson_id
    if manifest.path.is_symlink():
        raise UsageError(f"is a link to {manifest.path.resolve()}; `new` writes the lesson into lessons.yaml and "
                         f"its folder beside it, so it edits only a manifest that is a file of the course",
                         path=manifest.path, hint="run `new` in the course the link leads to, or put the file "
                                                 "itself in place of the link")
    check_inside(folder, manifest.root, UsageError)   # lessons/ linked out of the course
    if folder.exists():
        raise UsageError(f"{LESSON_FOLDER}/{lesson_id}/ already exists; move it away or pick another id")

    text = manifest_text(manifest.path)
    entry = Template(ENTRY).substitute(id=lesson_id, title=_yaml_scalar(title),
                                       gpu_item="" if manifest.defaults.output else "    " + GPU_ITEM)
    new_text, line = _insert(text, manifest, day, entry)
    stem = match.group(2).replace("-", "_")
    source, prose = folder / f"{stem}.cu", folder / PROSE
    made_parent = not folder.parent.exists()
    folder.mkdir(parents=True)
    staged = None
    try:
        prose.write_text(Template((SKELETON / PROSE).read_text(encoding="utf-8")).substitute(title=title),
                         encoding="utf-8")
        source.write_text("", encoding="utf-8")   # so that the staged manifest finds its source
        fd, staged = tempfile.mkstemp(prefix=".lessons.", suffix=".yaml", dir=manifest.root)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(new_text)
        staged_manifest = load_manifest(Path(staged))
        lesson = staged_manifest.lesson(lesson_id)
        source.write_text(_source(staged_manifest, lesson, day, title), encoding="utf-8")
        _check_skeleton(staged_manifest, lesson)
        os.chmod(staged, manifest.path.stat().st_mode & 0o777)
        os.replace(staged, manifest.path)
        staged = None
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)
        if made_parent:
            shutil.rmtree(folder.parent, ignore_errors=True)
        if isinstance(exc, CoursectlError) and staged is not None and exc.path == staged:
            exc.path = str(manifest.path)   # the lines are those of lessons.yaml with the entry in it
        raise
    finally:
        if staged is not None and os.path.exists(staged):
            os.unlink(staged)
    files = [source, prose, manifest.path]
    return Scaffold(lesson=lesson_id, files=[relative(f, manifest.root) for f in files], line=line)


def _yaml_scalar(text: str) -> str:
    """`text` as a YAML value after `key: `: plain where YAML reads it back as itself, else double-quoted."""
    try:
        if yaml.safe_load(f"key: {text}") == {"key": text}:
            return text
    except yaml.YAMLError:
        pass
    return json.dumps(text, ensure_ascii=False)


def _insert(text: str, manifest: Manifest, day: int, entry: str) -> tuple[str, int]:
    """lessons.yaml with `entry` (unindented) placed before the first lesson of a later day, or after the
    last lesson; the entry's first line (1-based)."""
    rows = text.splitlines(keepends=True)
    if rows and not rows[-1].endswith("\n"):
        rows[-1] += "\n"
    starts = [manifest.line_of("lessons", index) for index in range(len(manifest.lessons))]
    if not starts:
        at = next((n for n, row in enumerate(rows) if re.match(r"lessons:\s*\[\s*\]\s*(#.*)?$", row)), None)
        if at is None:
            raise UsageError(f"cannot find where the lessons of {manifest.path} are listed; add the entry by hand")
        rows[at] = "lessons:\n"
        body = _indented(entry, 2)
        return "".join(rows[:at + 1] + body + rows[at + 1:]), at + 2
    first = rows[starts[0] - 1]
    indent = len(first) - len(first.lstrip(" "))
    body = _indented(entry, indent)
    later = [start for lesson, start in zip(manifest.lessons, starts) if lesson.day > day]
    if later:
        at = later[0] - 1
        while at > 0 and rows[at - 1].strip().startswith("#"):   # the comments above an entry belong to it
            at -= 1
        return "".join(rows[:at] + body + ["\n"] + rows[at:]), at + 1
    at = max(starts)
    while at < len(rows) and (not rows[at].strip() or rows[at][0] in " #-"):
        at += 1                                                  # the end of the last entry
    while at > max(starts) and (not rows[at - 1].strip() or rows[at - 1].startswith("#")):
        at -= 1                                                  # blank lines and the next key's comments
    return "".join(rows[:at] + ["\n"] + body + rows[at:]), at + 2


def _indented(entry: str, indent: int) -> list[str]:
    return [" " * indent + row if row.strip() else row for row in entry.splitlines(keepends=True)]


def _source(manifest: Manifest, lesson: Lesson, day: int, title: str) -> str:
    """The skeleton's source, its Build and Run lines as render writes them."""
    spdx = _licence(manifest)
    build = shlex.join(display_command(manifest, lesson, manifest.architectures[0]))
    run = shlex.join([f"./{lesson.binary_name}", *lesson.args])
    formats = {key: json.dumps(value) for key, value in FORMATS.items()}
    return Template((SKELETON / "lesson.cu").read_text(encoding="utf-8")).substitute(
        spdx=f"// SPDX-License-Identifier: {spdx}\n//\n" if spdx else "", heading=f"Day {day}: {title}",
        build=f"// Build: {build}", run=f"// Run:   {run}", verified=NO_EVIDENCE_LINE, **formats)


def _licence(manifest: Manifest) -> str | None:
    """The SPDX licence the course's lessons declare, the most common one; None if none declares one."""
    found: dict[str, int] = {}
    for lesson in manifest.lessons:
        try:
            head = (read_text(manifest.source_path(lesson), TEXT_LIMIT, "a lesson's source", errors="replace")
                    or "").splitlines()[:5]
        except CoursectlError:
            continue
        for row in head:
            match = SPDX.match(row)
            if match:
                found[match.group(1)] = found.get(match.group(1), 0) + 1
                break
    return max(found, key=lambda name: found[name]) if found else None


def _check_skeleton(manifest: Manifest, lesson: Lesson) -> None:
    """The skeleton's transcript parses with the new entry and holds its claims; else a bug here."""
    try:
        transcript = parse_transcript(lesson.output, sample_transcript(), "the skeleton's transcript")
    except TranscriptError as exc:
        raise ManifestError(f"the new lesson's entry does not parse what its program prints ({exc}); "
                            f"does defaults.output expect more than a GPU line?", path=str(manifest.path)) from None
    failed = [claim.id for claim in evaluate_claims(lesson.output, transcript, lesson.claims) if not claim.held]
    if failed:
        raise ManifestError(f"the new lesson's program fails the claims {', '.join(failed)}; does "
                            f"defaults.claims claim more than every lesson can?", path=str(manifest.path))
