"""coursectl compare: two sets of recorded evidence side by side, field by field.

A side names one GPU's evidence, in the working tree or at a git revision:

- `SLUG`      evidence/<lesson>/SLUG/ as it is now (`nvidia-h200`);
- `REV:SLUG`  the same as committed at REV (`main:nvidia-h200`, `HEAD~3:tesla-t4`);
- `REV`       at REV, the GPU the other side names (`HEAD~3` beside `nvidia-h200`).

A plain word is a GPU when some lesson has evidence for it here, otherwise a
revision. A revision's files are read with `git show`, through
process.run_command, into a temporary folder and checked there as
evidence.load_evidence checks the working tree's.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from ..judge.comparison import FieldResult, FieldStatus, compare_fields, describe_rule, value_ratio
from ..judge.drift import markdown_table, provenance_changes, provenance_of
from ..errors import EvidenceError, TranscriptError, UsageError
from ..judge.evidence import list_gpus
from ..files import write_report, parse_json
from ..judge.judging import ParsedEvidence, parse_evidence
from ..manifest.model import Lesson, Manifest
from ..process import CommandResult, Runner, run_command
from ..judge.results import ProvenanceChange, shown
from ..transcript.fields import Compare
from ..markdown import code, md
from ..words import format_value

GIT_TIMEOUT = 60.0
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")   # a file name meta.json may list


class Side(BaseModel):
    """One side of a comparison: a GPU's evidence in the working tree or at a revision."""

    slug: str
    revision: str | None = None   # as written (HEAD~3); None: the working tree
    commit: str | None = None     # the commit it resolved to

    @property
    def label(self) -> str:
        return f"{self.revision}:{self.slug}" if self.revision else self.slug

    @property
    def where(self) -> str:
        if self.revision is None:
            return f"{self.slug} in the working tree"
        return f"{self.slug} at {self.revision} ({(self.commit or '')[:10]})"


class LessonComparison(BaseModel):
    """One lesson's evidence on both sides; `problem` says why it could not be compared."""

    lesson: str
    a_date: str | None = None
    b_date: str | None = None
    provenance: list[ProvenanceChange] = Field(default_factory=list)   # old: side A, new: side B
    fields: list[FieldResult] = Field(default_factory=list)   # old: side A, new: side B; ratio B / A
    problem: str | None = None


# -- the sides ----------------------------------------------------------------------------------
def _git(root: Path, args: list[str], runner: Runner) -> CommandResult | None:
    """git in the course's folder; None where git itself cannot be started."""
    try:
        return runner(["git", *args], timeout=GIT_TIMEOUT, cwd=root)
    except OSError:
        return None


def _commit(root: Path, revision: str, runner: Runner) -> str | None:
    if not revision or revision.startswith("-"):
        return None
    ran = _git(root, ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], runner)
    if ran is None or not ran.ok:
        return None
    return ran.stdout.decode("utf-8", "replace").strip() or None


def _slugs_at(root: Path, commit: str, runner: Runner) -> set[str]:
    """The GPUs with evidence for some lesson at a commit."""
    ran = _git(root, ["ls-tree", "-r", "--name-only", commit, "--", "evidence"], runner)
    if ran is None or not ran.ok:
        return set()
    slugs = set()
    for line in ran.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split("/")
        if len(parts) == 4 and parts[0] == "evidence" and parts[3] == "meta.json":
            slugs.add(parts[2])
    return slugs


def _listed(slugs: set[str]) -> str:
    return ", ".join(sorted(slugs)) or "none"


def resolve_sides(manifest: Manifest, a: str, b: str, runner: Runner = run_command) -> tuple[Side, Side]:
    """The two sides as the command line names them; UsageError (one line) for a name that is neither."""
    root = manifest.root
    here = {slug for lesson in manifest.lessons for slug in list_gpus(root, lesson.id)}
    parsed: list[tuple[str | None, str | None]] = []   # (revision, slug); slug None: the other side's
    for text in (a, b):
        if ":" in text:
            revision, slug = text.rsplit(":", 1)
            if not revision:
                raise UsageError(f"compare: {text!r}: name a revision before the colon (HEAD~3:{slug or 'SLUG'})")
            parsed.append((revision, slug or None))
        elif text in here:
            parsed.append((None, text))
        else:
            parsed.append((text, None))
    if parsed[0][1] is None and parsed[1][1] is None:
        raise UsageError(f"compare: name a GPU on at least one side: {a!r} and {b!r} name none "
                         f"(GPUs with evidence here: {_listed(here)})")
    sides = []
    for (revision, slug), (_, other), text in zip(parsed, reversed(parsed), (a, b)):
        slug = slug or other
        assert slug is not None
        if revision is None:
            sides.append(Side(slug=slug))
            continue
        commit = _commit(root, revision, runner)
        if commit is None:
            if ":" in text:
                raise UsageError(f"compare: {revision!r} is not a git revision (in {text!r})")
            raise UsageError(f"compare: {text!r} is neither a GPU with evidence here ({_listed(here)}) "
                             "nor a git revision")
        there = _slugs_at(root, commit, runner)
        if slug not in there:
            raise UsageError(f"compare: no evidence for {slug!r} at {revision} (it has {_listed(there)})")
        sides.append(Side(slug=slug, revision=revision, commit=commit))
    return sides[0], sides[1]


# -- reading a side -------------------------------------------------------------------------------
def _show(root: Path, commit: str, path: str, runner: Runner) -> bytes | None:
    ran = _git(root, ["show", f"{commit}:./{path}"], runner)
    return ran.stdout if ran is not None and ran.ok else None


def _materialize(root: Path, side: Side, lesson: Lesson, into: Path, runner: Runner) -> bool:
    """Copy a revision's evidence for one lesson into `into`/evidence/...; False if it has none."""
    folder = f"evidence/{lesson.id}/{side.slug}"
    meta = _show(root, side.commit or "", f"{folder}/meta.json", runner)
    if meta is None:
        return False
    target = into / folder
    target.mkdir(parents=True, exist_ok=True)
    (target / "meta.json").write_bytes(meta)
    try:
        listed = parse_json(meta).get("files") or {}
        names = [name for name in listed if isinstance(name, str) and SAFE_NAME.match(name)]
    except (ValueError, AttributeError, TypeError):
        names = []   # load_evidence says what is wrong with it
    for name in ["transcript.txt", *names]:
        data = _show(root, side.commit or "", f"{folder}/{name}", runner)
        if data is not None:
            (target / name).write_bytes(data)
    return True


def _load(manifest: Manifest, lesson: Lesson, side: Side, scratch: Path, runner: Runner) -> ParsedEvidence | None:
    if side.commit is None:
        return parse_evidence(manifest, lesson, side.slug)
    into = scratch / re.sub(r"[^A-Za-z0-9]+", "-", side.label)
    if not _materialize(manifest.root, side, lesson, into, runner):
        return None
    try:
        return parse_evidence(manifest, lesson, side.slug, root=into)
    except (EvidenceError, TranscriptError) as exc:
        # Name the file as it lies in the revision, not in the scratch folder.
        text = str(exc).replace(f"{into.resolve()}/", f"{side.revision}:").replace(f"{into}/", f"{side.revision}:")
        if text.startswith("evidence/"):
            text = f"{side.revision}:{text}"
        raise type(exc)(text) from None


# -- comparing --------------------------------------------------------------------------------------
def compare_evidence(manifest: Manifest, lessons: list[Lesson], a: Side, b: Side,
                     runner: Runner = run_command) -> list[LessonComparison]:
    """Each lesson's fields on side A and side B, every field but volatile ones, ratio B / A."""
    out = []
    with tempfile.TemporaryDirectory(prefix="coursectl-compare-") as tmp:
        for lesson in lessons:
            row = LessonComparison(lesson=lesson.id)
            out.append(row)
            try:
                left = _load(manifest, lesson, a, Path(tmp), runner)
                right = _load(manifest, lesson, b, Path(tmp), runner)
            except (EvidenceError, TranscriptError) as exc:
                row.problem = str(exc)
                continue
            if left is None or right is None:
                absent = [side.label for side, got in ((a, left), (b, right)) if got is None]
                row.problem = f"no evidence on {' or '.join(absent)}"
                continue
            row.a_date, row.b_date = left.evidence.meta.date, right.evidence.meta.date
            row.provenance = provenance_changes(provenance_of(left.evidence.meta), provenance_of(right.evidence.meta))
            row.fields = _side_by_side(left, right, same_gpu=a.slug == b.slug)
    return out


def _side_by_side(left: ParsedEvidence, right: ParsedEvidence, *, same_gpu: bool) -> list[FieldResult]:
    """B's fields against A's, each status as verify and record decide it (compare_fields).

    B stands where verify's run does: timings B recorded on a throttled or shared GPU are untrusted. The
    evidence keeps no per-field ambiguity of a --repeat (only its rounded spread), so none is given.
    """
    untrusted = bool(right.evidence.meta.environment.get("untrusted"))
    fields = [f for f in compare_fields(right.flats, left.flats, same_gpu=same_gpu, untrusted=untrusted)
              if f.status is not FieldStatus.volatile]
    for field in fields:
        if field.ratio is None:
            field.ratio = value_ratio(field.old, field.new)
    # compare_fields leaves out another GPU's device and tolerance fields that this side lacks.
    seen = {f.path for f in fields}
    fields += [FieldResult(path=f.path, rule=describe_rule(f.spec), old=f.value, status=FieldStatus.missing)
               for f in left.flats if f.path not in seen and f.spec.compare is not Compare.volatile]
    return fields


# -- the Markdown report ---------------------------------------------------------------------------
def moved_fields(compared: list[LessonComparison]) -> list[str]:
    """`day16-tiled-matmul: cases[...].ms` for each field beyond its rule (compare_fields' failures): what makes
    `coursectl compare` exit 1."""
    return [f"{row.lesson}: {f.path}" for row in compared for f in row.fields if f.status.is_failure]


def comparison_markdown(a: Side, b: Side, compared: list[LessonComparison]) -> str:
    lines = [f"<!-- Generated by coursectl compare {a.label} {b.label} from the evidence on both sides. -->",
             f"## Evidence compared: {md(a.label)} and {md(b.label)}", "",
             f"A is {md(a.where)}; B is {md(b.where)}. Ratios are B / A.", ""]
    for row in compared:
        lines += [f"### {md(row.lesson)}", ""]
        if row.problem:
            lines += [f"Not compared: {md(row.problem)}.", ""]
            continue
        underneath = [["recorded", (row.a_date or "")[:10], (row.b_date or "")[:10]]]
        underneath += [[md(c.what), md(shown(c.old, "not recorded")),
                        md(shown(c.new, "not recorded"))] for c in row.provenance]
        lines += markdown_table(["", "A", "B"], underneath) + [""]
        lines += markdown_table(
            ["field", "rule", f"A: {md(a.label)}", f"B: {md(b.label)}", "ratio", "result"],
            [[code(f.path), md(f.rule), md(format_value(f.old)), md(format_value(f.new)),
              f"{f.ratio:.3f}" if f.ratio is not None else "-",
              f"**{f.status.value}**" if f.status.is_failure else f.status.value] for f in row.fields],
            ["---", "---", "---:", "---:", "---:", "---"], "more fields") + [""]
    return "\n".join(lines)


def write_comparison(path: Path, a: Side, b: Side, compared: list[LessonComparison]) -> None:
    write_report(path, comparison_markdown(a, b, compared))
