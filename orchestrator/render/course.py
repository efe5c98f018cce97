"""The renderer: lesson pages, the README's lessons table and the sources' header lines.

Everything is computed before anything is written: `render_all` returns every
page with its old and new text, `diff_pages` shows what would change and
`write_pages` writes the changed ones, each through `atomic_write`. A page
depends only on the manifest, the templates, the sources, the prose and the
evidence (dates come from the evidence), so rendering twice gives the same
bytes.

Templates are Jinja2 with StrictUndefined. A lesson's page comes from
templates/lessons/<id>.md.j2 when that exists (it extends lesson.md.j2 and
names the snippets it shows), otherwise from templates/lesson.md.j2.
"""

from __future__ import annotations

import difflib
import math
import os
import shlex
import textwrap
from pathlib import Path
from typing import Any, Callable

import jinja2
from pydantic import BaseModel, Field

from ..cuda.build import display_command
from ..transcript.claims import ClaimResult
from ..errors import EvidenceError
from ..judge.evidence import Evidence, build_evidence_path, list_gpus
from .figures import (Chart, Figure, FigureTable, build_charts, build_figures, figure_tables, format_number,
                      nice_ceiling)
from ..files import TEXT_LIMIT, atomic_write, read_text, relative
from .godbolt import GODBOLT_ARCH, godbolt_link, page_link
from ..cuda.includes import local_headers
from ..manifest.model import Lesson, Manifest, SanitizerPass
from ..manifest.runs import runs_of
from ..judge.judging import claims_on_evidence, judge_recorded_pass, parse_evidence, resolve_snippets
from ..cuda.sanitizer import Finding, Report
from ..manifest.snippets import Snippet, lesson_snippets, with_declared
from .source_header import (NO_EVIDENCE_LINE, provenance, rewrite_header, source_header, stale_source_header,
                            without_verified)
from .navigation import INDEX_FILE, Navigation, link_days, link_to, navigation, rebase_links
from .index import index_region
from .pages import check_page_paths
from .program import ProgramFile, file_links, program_files
from ..markdown import code, fence, md
from .markup import TEMPLATES, Problem, banner, environment, render_template, with_banner
from .sandbox import template_method
from ..words import plural

__all__ = ["Page", "diff_pages", "format_number", "godbolt_link", "nice_ceiling", "plural", "render_all",
           "rewrite_header", "write_pages", "NO_EVIDENCE_LINE", "stale_source_header"]

LESSON_TEMPLATE = "lesson.md.j2"

# Compiler Explorer: the language, compiler and architecture its links ask for.


class Page(BaseModel):
    """One file render owns (or owns part of): its text now (None if absent) and as rendered."""

    path: Path        # absolute
    name: str         # relative to the course root, for diffs and listings
    old: str | None
    new: str

    @property
    def changed(self) -> bool:
        return self.old != self.new


# -- what a page shows -----------------------------------------------------------------
class GpuEvidence(BaseModel):
    """One GPU's evidence for a lesson, as a page shows it."""

    slug: str
    name: str
    compute_capability: str
    date: str                 # YYYY-MM-DD, from the evidence
    arch: str
    provenance: str           # NVIDIA H200 (compute capability 9.0), driver ..., CUDA ..., nvcc ...
    transcript: str
    transcript_path: str      # relative to the course root
    transcript_link: str      # relative to the page
    sanitizer_version: str | None = None
    build_evidence: str = ""  # ptxas' report for `arch`, relative to the course root
    unchecked: list[str] = Field(default_factory=list) # claims not judged here: those over ptxas' report, without it
    peak_gbps: float | None = None         # the GPU's peaks, recorded with the evidence
    peak_fp32_gflops: float | None = None
    # with record --repeat: each tolerance field's run-to-run spread
    spread: dict[str, float] = Field(default_factory=dict)


class ClaimRow(BaseModel):
    id: str
    kind: str
    says: str
    expression: str
    each: str | None
    where: str | None
    results: dict[str, ClaimResult]   # GPU slug -> result

    @template_method
    def missed(self) -> list[str]:
        """The GPUs on which it was judged and did not hold."""
        return [slug for slug, result in self.results.items() if not result.held]


class SanitizerRow(BaseModel):
    tool: str
    expects: str                      # Markdown
    gpu: str | None                   # None: no evidence yet
    recorded: bool = False
    findings: str = ""
    kernels: list[str] = Field(default_factory=list)
    places: list[str] = Field(default_factory=list)   # Markdown, file:line linked to the source
    verdict: str = ""


class SourceFolder(BaseModel):
    """The folder of a lesson's source, where its commands are typed, when its page lies elsewhere."""

    name: str                         # relative to the course root, ending in /
    link: str                         # relative to the page


class LessonModel(BaseModel):
    """Everything a lesson page and its index row show."""

    lesson: Lesson
    page: str                         # relative to the course root
    source_name: str
    source_link: str                  # relative to the page
    # a program of several files: each file (its name) -> its link from the page
    units: dict[str, str] = Field(default_factory=dict)
    # a program of several files: each file whole, as its section shows it
    files: list[ProgramFile] = Field(default_factory=list)
    source_folder: SourceFolder | None  # None: the page lies beside the source
    template: str                     # the template's name under templates/
    banner: str
    prose: str | None
    arch: str
    arch_from: str | None             # the GPU the architecture comes from, None: lessons.yaml
    build: str
    run: str
    sanitizer_build: str | None
    sanitizer_runs: list[str]
    godbolt: str                      # "": no link, and godbolt_note says why
    godbolt_options: str
    godbolt_files: list[str]          # the headers the link carries beside the source
    godbolt_note: str | None
    gpus: list[GpuEvidence]
    snippets: dict[str, Snippet]
    figures: list[Figure]
    figure_tables: list[FigureTable]
    peak_notes: list[str]             # which peaks the figures' percentages are of
    charts: list[Chart]
    nav: Navigation
    claims: list[ClaimRow]
    sanitizers: list[SanitizerRow]
    source_new: str
    source_old: str


# -- the API ---------------------------------------------------------------------------
def render_all(manifest: Manifest, templates: Path | None = None) -> list[Page]:
    """Every page render owns, old and new text, in a fixed order; nothing is written.

    Per lesson: its page and its source (whose Build/Run/Verified lines
    follow the manifest and the evidence; not with `source_header: false`);
    then the top README.md, whose text between the lessons markers is the
    course index.
    """
    root = manifest.root
    folder = Path(templates) if templates is not None else root / TEMPLATES
    check_page_paths(manifest)
    env = environment(folder)
    pages: list[Page] = []
    models: list[LessonModel] = []
    runs_of_page: dict[str, list[LessonModel]] = {}
    for lesson in manifest.lessons:
        if lesson.group and lesson.run != next(iter(lesson.runs)):
            continue   # the runs of a lesson share its page, written with its first run
        model = _lesson_model(manifest, lesson, folder)
        context = _lesson_context(model)
        if lesson.group:   # each run's command, recorded output and claims, side by side
            runs = [model] + [_lesson_model(manifest, other, folder) for other in manifest.lessons
                              if other.group == lesson.group and other is not lesson]
            runs_of_page[model.page] = runs
            context["runs"] = [{"name": m.lesson.run, "run": m.run, "gpus": m.gpus, "claims": m.claims,
                                "tally": _tally(m)} for m in runs]
        text = render_template(env, folder, root, model.template, context)
        page_path = root / model.page
        pages.append(Page(path=page_path, name=model.page, old=_read(page_path, model.page),
                          new=with_banner(model.banner, text)))
        if lesson.source_header:
            source = manifest.source_path(lesson)
            pages.append(Page(path=source, name=lesson.source.as_posix(), old=model.source_old,
                              new=model.source_new))
        models.append(model)
    pages.append(_index_page(manifest, env, folder, models, runs_of_page))
    return pages


def diff_pages(pages: list[Page]) -> str:
    """A unified diff of every page that would change; empty when all are up to date."""
    out: list[str] = []
    for page in pages:
        if not page.changed:
            continue
        before = "/dev/null" if page.old is None else f"a/{page.name}"
        for line in difflib.unified_diff((page.old or "").splitlines(keepends=True),
                                         page.new.splitlines(keepends=True), before, f"b/{page.name}"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def write_pages(pages: list[Page]) -> list[Page]:
    """Write the pages that changed, each atomically; return them."""
    written = [page for page in pages if page.changed]
    for page in written:
        atomic_write(page.path, page.new)
    return written


# -- one lesson ------------------------------------------------------------------------
def _lesson_model(manifest: Manifest, lesson: Lesson, templates: Path) -> LessonModel:
    root = manifest.root
    page_rel = lesson.page_path.as_posix()
    page_dir = (root / page_rel).parent
    source_path = manifest.source_path(lesson)
    source_rel = lesson.source.as_posix()
    source_folder = None
    if source_path.parent.resolve() != page_dir.resolve():
        source_folder = SourceFolder(name=relative(source_path.parent, root) + "/",
                                     link=link_to(source_path.parent, page_dir) + "/")

    recorded = [item for item in (parse_evidence(manifest, lesson, slug) for slug in list_gpus(root, lesson.id))
                if item is not None]
    evidence = [item.evidence for item in recorded]
    gpus = [_gpu(root, page_dir, e) for e in evidence]
    header = source_header(manifest, lesson, evidence)
    arch, build, run = header.arch, header.build, header.run

    source_old = _read_text(source_path, source_rel, "a lesson's source", root)
    source_new = rewrite_header(source_old, header.lines) if lesson.source_header else source_old
    units = manifest.source_paths(lesson)
    snippets = lesson_snippets(units, lesson.source_files, [source_new] + [None] * (len(units) - 1))
    snippets = with_declared(snippets, lesson.snippets, source_path, source_rel, source_new, root)

    passes = manifest.sanitizers(lesson)
    sanitizer_build = shlex.join(display_command(manifest, lesson, arch, "lineinfo")) if passes else None
    sanitizer_runs = [shlex.join(["compute-sanitizer", "--tool", tool, *spec.args,
                                  f"./{lesson.binary_name}", *lesson.args, *spec.program_args])
                      for tool, spec in passes.items()]

    options = " ".join([*manifest.flags(lesson), f"-arch={GODBOLT_ARCH}"])
    headers = list(dict.fromkeys(header for unit in units for header in local_headers(unit, manifest.flags(lesson), root)))
    godbolt, godbolt_note, godbolt_files = page_link(source_path, without_verified(source_new), options,
                                                     [*units[1:], *headers], root)

    parsed = {item.slug: item.transcript for item in recorded}
    figures = build_figures(lesson.output, lesson.page, parsed)
    claims = [ClaimRow(id=c.id, kind=c.kind, says=c.says, expression=c.expression, each=c.each,
                       where=c.where, results={}) for c in lesson.claims]
    for item in recorded:
        # As verify --offline judges the evidence; with no build here, claims over ptxas' report only where
        # build evidence for that architecture exists.
        results, unreadable = claims_on_evidence(manifest, lesson, item)
        if unreadable is not None:
            raise unreadable
        by_id = {result.id: result for result in results}
        for row in claims:
            if row.id in by_id:
                row.results[item.slug] = by_id[row.id]
    for gpu in gpus:
        gpu.unchecked = [row.id for row in claims if gpu.slug not in row.results]

    own = f"lessons/{lesson.group or lesson.id}.md.j2"   # a lesson with runs: its own id's
    # Anything in the lesson's own template's place is its template: a device or a named pipe there is
    # refused when read (files.read_file), never passed over for the course's.
    template = own if os.path.lexists(templates / own) else LESSON_TEMPLATE
    used = [f"{TEMPLATES}/{own}"] if template == own else []
    inputs = [*used, f"{TEMPLATES}/{LESSON_TEMPLATE}", relative(manifest.path, root)]
    if lesson.prose is not None:
        inputs.append(lesson.prose.as_posix())
    inputs += [*(unit.as_posix() for unit in lesson.source_files), *(relative(header, root) for header in headers),
               *(f"evidence/{run.id}/"
                 for run in (runs_of(manifest, lesson.group) if lesson.group else [lesson]))]

    tables, peak_notes = figure_tables(figures, gpus)
    prose = None
    if lesson.prose is not None:
        text = rebase_links(_read_text(root / lesson.prose, lesson.prose.as_posix(), "a lesson's prose", root),
                            (root / lesson.prose).parent, page_dir)
        prose = link_days(text, lesson.prose.as_posix(), manifest, lesson, page_dir).strip()

    return LessonModel(
        lesson=lesson, page=page_rel, source_name=source_path.name,
        source_link=link_to(source_path, page_dir), source_folder=source_folder, template=template,
        units={relative(unit, root): link_to(unit, page_dir) for unit in units} if len(units) > 1 else {},
        files=program_files(manifest, lesson, units, headers, source_new, page_dir),
        banner=banner(inputs, "this file"), prose=prose,
        arch=arch, arch_from=gpus[0].name if gpus else None, build=build, run=run,
        sanitizer_build=sanitizer_build, sanitizer_runs=sanitizer_runs,
        godbolt=godbolt, godbolt_options=options, godbolt_files=godbolt_files, godbolt_note=godbolt_note,
        gpus=gpus, snippets=snippets, figures=figures,
        figure_tables=tables, peak_notes=[md(note) for note in peak_notes],
        charts=build_charts(lesson.output, lesson.page, parsed, figures, gpus),
        nav=navigation(manifest, lesson, page_dir),
        claims=claims, sanitizers=_sanitizer_rows(manifest, lesson, passes, evidence, snippets, source_path.name,
                                                   file_links([*units, *headers], page_dir)),
        source_new=source_new, source_old=source_old)


def _spread(repeat: dict) -> dict[str, float]:
    """meta.json's repeat.spread (record --repeat), its finite numbers only."""
    spread = repeat.get("spread") if isinstance(repeat, dict) else None
    if not isinstance(spread, dict):
        return {}
    return {path: float(value) for path, value in spread.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0}


def _gpu(root: Path, page_dir: Path, evidence: Evidence) -> GpuEvidence:
    meta = evidence.meta
    transcript = evidence.directory / "transcript.txt"
    build = build_evidence_path(root, meta.lesson, meta.arch)
    return GpuEvidence(slug=meta.gpu_slug, name=meta.gpu_name, compute_capability=meta.compute_capability,
                       date=meta.date[:10], arch=meta.arch, provenance=provenance(meta),
                       transcript=evidence.transcript, transcript_path=relative(transcript, root),
                       transcript_link=link_to(transcript, page_dir), sanitizer_version=meta.sanitizer_version,
                       build_evidence=relative(build, root), peak_gbps=meta.peak_gbps,
                       peak_fp32_gflops=meta.peak_fp32_gflops, spread=_spread(meta.repeat))



# -- sanitizers --------------------------------------------------------------------------
def _sanitizer_rows(manifest: Manifest, lesson: Lesson, passes: dict[str, SanitizerPass],
                    evidence: list[Evidence], snippets: dict[str, Snippet], source_name: str,
                    links: dict[str, str]) -> list[SanitizerRow]:
    rows: list[SanitizerRow] = []
    for tool, spec in passes.items():
        expected = resolve_snippets(spec.findings, snippets, source_name, by_file=len(lesson.source_files) > 1)
        expects = "; ".join(f"a finding {f.describe()}" for f in expected) or "nothing"
        if expected:
            expects += " (and may find more)" if spec.allow_other else ", and nothing else"
        if not evidence:
            rows.append(SanitizerRow(tool=tool, expects=expects, gpu=None))
            continue
        for item in evidence:
            judged = judge_recorded_pass(manifest, lesson, item, tool, spec, snippets)
            if judged is None:
                rows.append(SanitizerRow(tool=tool, expects=expects, gpu=item.meta.gpu_name))
                continue
            outcome, report = judged
            if report is None:
                raise EvidenceError("; ".join(outcome.problems))
            rows.append(SanitizerRow(
                tool=tool, expects=expects, gpu=item.meta.gpu_name, recorded=True,
                findings=_count_findings(report), kernels=outcome.kernels,
                places=_places(report.findings, links),
                verdict="; ".join(p.removeprefix(f"{tool}: ") for p in outcome.problems) or "as expected"))
    return rows


def _count_findings(report: Report) -> str:
    if not report.findings:
        return "no findings"
    by_severity: dict[str, int] = {}
    for finding in report.findings:
        by_severity[finding.severity] = by_severity.get(finding.severity, 0) + 1
    counts = ", ".join(plural(n, s) for s, n in sorted(by_severity.items()))
    return f"{plural(len(report.findings), 'finding')} ({counts})"


def _places(findings: list[Finding], links: dict[str, str]) -> list[str]:
    """Where each distinct finding lies, races as write -> read, with how many reports it stands for."""
    seen: dict[str, int] = {}
    for finding in findings:
        if finding.is_race and finding.source is not None and finding.destination is not None:
            ends = [finding.source, finding.destination]
            text = " → ".join(f"{end.direction.lower()} at {_place(end.file, end.line, links)}"
                              for end in ends)
            if finding.hazards is not None:
                text += f" ({finding.hazards:,} hazard{'' if finding.hazards == 1 else 's'})"
        elif finding.file or finding.line:
            text = _place(finding.file, finding.line, links)
        else:
            text = md(finding.text)
        seen[text] = seen.get(text, 0) + 1
    return [text + (f", reported {count} times" if count > 1 else "") for text, count in seen.items()]


def _place(file: str | None, line: int | None, links: dict[str, str]) -> str:
    """`file:line`, linked to that line of the program's file of that name (any of its files)."""
    name = Path(file.replace("\\", "/")).name if file else "?"
    shown = f"{name}:{line}" if line is not None else name
    if name in links and line is not None:
        return f"[{shown}]({links[name]}#L{line})"
    return md(shown)



# -- the index -------------------------------------------------------------------------
def _index_page(manifest: Manifest, env: jinja2.Environment, templates: Path, models: list[LessonModel],
                runs: dict[str, list[LessonModel]]) -> Page:
    """One row a lesson, in day order, as the pages link them; a lesson with runs names itself and lists its
    runs (`runs`: the models of each page's runs), each with its tally."""
    rows = [{"lesson": _named(model.lesson), "page": model.page, "verified": _tally(model),
             "runs": [{"name": run.lesson.run, "id": run.lesson.id, "verified": _tally(run)}
                      for run in runs.get(model.page, [])]}
            for model in sorted(models, key=lambda model: model.lesson.day)]
    old, new = index_region(manifest, env, templates, rows)
    return Page(path=manifest.root / INDEX_FILE, name=INDEX_FILE, old=old, new=new)


def _named(lesson: Lesson) -> Lesson:
    """A lesson as its page and the index name it: a lesson with runs by its own id, not its first run's."""
    return lesson.model_copy(update={"id": lesson.group}) if lesson.group else lesson


def _tally(model: LessonModel) -> list[dict[str, Any]]:
    """Per GPU: how many gates and predictions were judged and held, and how many claims were not judged."""
    verified = []
    for gpu in model.gpus:
        gates = [c.results[gpu.slug] for c in model.claims if c.kind == "gate" and gpu.slug in c.results]
        expects = [c.results[gpu.slug] for c in model.claims if c.kind == "expect" and gpu.slug in c.results]
        verified.append({"gpu": gpu, "gates_held": sum(r.held for r in gates), "gates": len(gates),
                         "expects_held": sum(r.held for r in expects), "expects": len(expects),
                         "unchecked": len(gpu.unchecked)})
    return verified


def _lesson_context(model: LessonModel) -> dict[str, Any]:
    ordered = sorted(model.snippets.values(), key=lambda s: s.first_line)
    return {
        "lesson": _named(model.lesson), "prose": model.prose, "arch": model.arch, "arch_from": model.arch_from,
        "source_folder": model.source_folder, "units": model.units, "files": model.files,
        "build": model.build, "run": model.run, "sanitizer_build": model.sanitizer_build,
        "sanitizer_runs": model.sanitizer_runs, "godbolt": model.godbolt,
        "godbolt_options": model.godbolt_options, "godbolt_files": model.godbolt_files,
        "godbolt_note": model.godbolt_note, "gpus": model.gpus, "figures": model.figures,
        "figure_tables": model.figure_tables, "peak_notes": model.peak_notes, "charts": model.charts,
        "nav": model.nav, "tally": _tally(model), "claims": model.claims,
        "sanitizers": model.sanitizers, "source_name": model.source_name,
        "snippet_names": [s.name for s in ordered],
        "runs": [],   # a lesson with runs: each run's (render_all)
        "snippet": _snippet_function(model),
    }


def _snippet_function(model: LessonModel) -> Callable[[str], str]:
    def snippet(name: str) -> str:
        """A snippet of the lesson's source: a link to its lines, then its code."""
        found = model.snippets.get(name)
        if found is None:
            have = ", ".join(sorted(model.snippets)) or "none"
            raise Problem(f"no snippet {name!r} in {model.lesson.source.as_posix()} (it has {have})")
        span = f"#L{found.first_line}-L{found.last_line}"
        caption = (f"[{code(Path(found.path).name)}, lines {found.first_line}-{found.last_line}]"
                   f"({model.units.get(found.path, model.source_link)}{span})")
        return f"{caption}\n\n{fence(textwrap.dedent(found.text), 'cuda')}"
    return snippet


# -- paths ---------------------------------------------------------------------------------
def _read(path: Path, name: str) -> str | None:
    """A page render writes as a whole, as it is now; None if there is none.

    Bytes in it that are not UTF-8 only make it differ from the page rendered,
    which replaces it; a page that is no regular file is refused.
    """
    return read_text(path, TEXT_LIMIT, "a page", shown=name, errors="replace")


def _read_text(path: Path, name: str, what: str, root: Path) -> str:
    """A file a page is made from (a lesson's source or prose), as text; CoursectlError naming it if it cannot be,
    or if it is reached through a link that leads out of the course."""
    return read_text(path, TEXT_LIMIT, what, shown=name, required=True, root=root)
