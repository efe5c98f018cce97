"""What a run tells GitHub Actions: annotations at the lines they are about, and a Markdown step summary.

Annotations are workflow commands printed on standard output
(`::error file=F,line=N,title=T::message`): an error for each failed gate
(at the claim in lessons.yaml), each unexpected sanitizer finding (at its
line in the file of the lesson's program that holds it) and each moved field (at its schema item in
lessons.yaml), and for any other failure its one-line reason at the
lesson's entry in lessons.yaml; a warning for each failed prediction and
each lesson without evidence, or FLAKY. Values are escaped as the workflow-command rules require.
GitHub shows 10 errors and 10 warnings a step: past those, one notice says
how many more there are and that the step summary has them (`capped`).

The step summary is Markdown appended to $GITHUB_STEP_SUMMARY: the verdict
table, each failure's moved fields and failed claims, links to the lesson
pages. GitHub refuses a summary over 1 MiB; this one is cut well before.

While a workflow runs and prints its results, workflow commands are stopped
(`::stop-commands::TOKEN`, `commands_stopped`): the lines of a lesson's
output that a failure quotes are then text, whatever they hold, and only
coursectl's own annotations, printed after `::TOKEN::`, are commands.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Callable, Iterator

from ..cuda.includes import local_headers
from ..errors import CoursectlError
from ..files import relative
from ..judge.judging import expectation_of
from ..manifest.model import Lesson, Manifest, SanitizerPass
from ..markdown import cell
from ..judge.results import LessonResult, Status, why
from ..cuda.sanitizer import unexpected_findings
from ..transcript.schema import LineItem, SectionItem, TableItem

SUMMARY_LIMIT = 1024 * 1024 - 64 * 1024   # GitHub's 1 MiB, with room for the other steps' summaries
MAX_ROWS = 200                            # moved fields shown per lesson
# GitHub shows at most 10 error, 10 warning and 10 notice annotations of a step (and 50 of a job); the rest
# are dropped without a word: actions/toolkit, docs/problem-matchers.md, "Limitations"
# (https://github.com/actions/toolkit/blob/main/docs/problem-matchers.md#limitations).
ANNOTATIONS_PER_KIND = 10


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, file: str | None = None, line: int | None = None,
            title: str | None = None) -> str:
    """One workflow command: `::error file=lessons.yaml,line=12,title=...::message`."""
    props = [f"{name}={escape_property(str(value))}" for name, value in
             (("file", file), ("line", line), ("title", title)) if value is not None]
    return f"::{kind} {','.join(props)}::{escape_data(message)}" if props else f"::{kind}::{escape_data(message)}"


def repository_path(manifest: Manifest, path: Path) -> str:
    """A file of the course as GitHub names it, relative to the repository's checkout ($GITHUB_WORKSPACE).

    A course in a folder of the repository (course/lessons.yaml) has its files there, not at the top;
    a course outside the checkout is named relative to its own root, as before.
    """
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and Path(manifest.root).resolve().is_relative_to(Path(workspace).resolve()):
        return relative(path, Path(workspace))
    return relative(path, manifest.root)


def _item_lines(manifest: Manifest, index: int, lesson: Lesson) -> dict[str, int]:
    """Each top-level name of a lesson's output (field, table, note, section) -> its schema item's line."""
    found: dict[str, int] = {}
    for k, item in enumerate(lesson.output.items):
        line = manifest.line_of("lessons", index, "output", "items", k)
        if line is None:
            continue
        if isinstance(item, LineItem):
            names = list(item.names)
        elif isinstance(item, TableItem):
            names = [item.table, *(note.name for note in item.notes)]
        elif isinstance(item, SectionItem):
            names = [item.section]
        else:
            names = []
        found.update((name, line) for name in names)
    return found


def workflow_commands(manifest: Manifest, results: list[LessonResult]) -> list[str]:
    """The annotations of a run, in the order of its lessons."""
    out: list[str] = []
    manifest_file = repository_path(manifest, manifest.root / manifest.path.name)
    indices = {lesson.id: index for index, lesson in enumerate(manifest.lessons)}
    for result in results:
        if result.lesson not in indices:
            continue
        index = indices[result.lesson]
        lesson = manifest.lessons[index]
        start = len(out)
        claim_index = {claim.id: k for k, claim in enumerate(lesson.claims)}
        for claim in result.claims:
            if claim.held:
                continue
            base = claim.id.split(" [")[0]   # offline: "no-kernel-spills [sm_90]"
            line = manifest.line_of("lessons", index, "claims", *([claim_index[base]] if base in claim_index else []))
            kind = "error" if claim.kind == "gate" else "warning"
            what = "gate" if claim.kind == "gate" else "prediction"
            first = claim.failures[0] if claim.failures else claim.expression
            message = f"{claim.says}: {first}" if claim.says else first
            out.append(command(kind, message, manifest_file, line, f"{result.lesson}: {what} {claim.id} failed"))
        items = _item_lines(manifest, index, lesson)
        for field in result.fields:
            if field.status.is_failure:
                top = field.path.split("[")[0].split(".")[0]
                out.append(command("error", f"{field.status.value} [{field.rule}]: evidence {field.old!r}, "
                                            f"now {field.new!r}", manifest_file,
                                   items.get(top, manifest.line_of("lessons", index)),
                                   f"{result.lesson}: {field.path} {field.status.value}"))
        out += _sanitizer_commands(manifest, lesson, result)
        if result.status is Status.NO_EVIDENCE:
            out.append(command("warning", result.unverified or "no evidence", manifest_file,
                               manifest.line_of("lessons", index, "id"), f"{result.lesson}: no evidence"))
        if result.status in (Status.FLAKY, Status.STALE, Status.INCOMPLETE):
            out.append(command("warning", why(result), manifest_file, manifest.line_of("lessons", index, "id"),
                               f"{result.lesson}: {result.status.value}"))
        if result.status.is_failure and not any(line.startswith("::error") for line in out[start:]):
            # A failure with no line of its own (a build, a crash, evidence that cannot be trusted): its
            # reason, at the lesson's entry.
            out.append(command("error", why(result) or result.status.value, manifest_file,
                               manifest.line_of("lessons", index, "id"), f"{result.lesson}: {result.status.value}"))
    return out


def capped(commands: list[str], limit: int = ANNOTATIONS_PER_KIND) -> list[str]:
    """The first `limit` errors and `limit` warnings, in their order, then, if any were left out, one notice
    saying how many of each and where they all are (the step summary, the log): GitHub would drop them unsaid."""
    kept: list[str] = []
    left = {"error": 0, "warning": 0}
    shown = {"error": 0, "warning": 0}
    for line in commands:
        kind = line[2:].split(" ", 1)[0].split("::", 1)[0]
        if kind in shown and shown[kind] >= limit:
            left[kind] += 1
            continue
        shown[kind] = shown.get(kind, 0) + 1
        kept.append(line)
    if any(left.values()):
        more = " and ".join(f"{count} more {kind}{'s' if count > 1 else ''}" for kind, count in left.items() if count)
        kept.append(command("notice", f"{more} not annotated: GitHub shows {limit} errors and {limit} warnings a "
                                      "step; the step summary and the log above have every one",
                            title="coursectl: more annotations in the step summary"))
    return kept


def _sanitizer_commands(manifest: Manifest, lesson: Lesson, result: LessonResult) -> list[str]:
    out = []
    # Each file of the program by its name, as a finding names it: a finding in any of them is annotated there.
    units = manifest.source_paths(lesson)
    try:
        headers = [header for unit in units for header in local_headers(unit, manifest.flags(lesson), manifest.root)]
    except CoursectlError:   # the build says what is wrong with them
        headers = []
    files: dict[str, str] = {}
    for path in [*units, *headers]:
        files.setdefault(path.name, repository_path(manifest, path))
    declared = manifest.sanitizers(lesson)
    for outcome in result.sanitizers:
        if outcome.report is None or not outcome.problems:
            continue
        expectation = expectation_of(manifest, lesson, outcome.tool, declared.get(outcome.tool) or SanitizerPass())
        seen: set[tuple] = set()
        for finding in unexpected_findings(outcome.report, expectation):
            place = (finding.file, finding.line)
            if place in seen:
                continue
            seen.add(place)
            source = files.get(Path(finding.file.replace("\\", "/")).name) if finding.file is not None else None
            out.append(command("error", finding.text, source, finding.line if source else None,
                               f"{lesson.id}: {outcome.tool}: unexpected {finding.kind} in "
                               f"{finding.kernel or 'the program'}"))
    return out


# -- the step summary -------------------------------------------------------------------------
def page_link(manifest: Manifest, lesson: Lesson) -> str:
    """The lesson's page (where its page.path puts it): on GitHub, at the commit the run checked;
    elsewhere, relative to the course."""
    server, repo, sha = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"))
    if server and repo and sha:
        return f"{server}/{repo}/blob/{sha}/{repository_path(manifest, manifest.root / lesson.page_path)}"
    return lesson.page_path.as_posix()


def step_summary(manifest: Manifest, results: list[LessonResult], title: str, tally: str) -> str:
    """The Markdown summary of one run, cut to stay under GitHub's limit."""
    parts = [f"## coursectl {title}\n\n{tally}\n\n",
             "| lesson | status | GPU | time | why |\n| --- | --- | --- | ---: | --- |\n"]
    lessons = {lesson.id: lesson for lesson in manifest.lessons}
    for r in results:
        name = f"[{r.lesson}]({page_link(manifest, lessons[r.lesson])})" if r.lesson in lessons else r.lesson
        parts.append(f"| {name} | {r.status.value} | {r.gpu or 'offline'} "
                     f"| {r.seconds:.1f} s | {cell(why(r))} |\n")
    for r in results:
        if not r.status.is_failure:
            continue
        moved = [f for f in r.fields if f.status.is_failure]
        failed = [c for c in r.claims if not c.held]
        if not moved and not failed and not r.reasons:
            continue
        parts.append(f"\n### {r.lesson}: {r.status.value}\n\n")
        if moved:
            parts.append("| field | rule | evidence | now | result |\n| --- | --- | ---: | ---: | --- |\n")
            parts += [f"| `{cell(f.path)}` | {cell(f.rule)} | {f.old!r} | {f.new!r} | {f.status.value} |\n"
                      for f in moved[:MAX_ROWS]]
            if len(moved) > MAX_ROWS:
                parts.append(f"\n… and {len(moved) - MAX_ROWS} more fields.\n")
        for claim in failed:
            parts.append(f"- {claim.kind} `{claim.id}` failed" + (f": {claim.says}" if claim.says else "") + "\n")
        if not moved and not failed:
            parts.append("```\n" + "\n".join(r.reasons)[:4000].replace("```", "'''") + "\n```\n")
    text = ""
    for part in parts:
        if len((text + part).encode("utf-8")) > SUMMARY_LIMIT:
            return text + "\n… the rest is cut: GitHub keeps step summaries under 1 MiB; see the JSON report.\n"
        text += part
    return text


@contextlib.contextmanager
def commands_stopped(print_line: Callable[[str], None]) -> Iterator[None]:
    """Under GitHub Actions, nothing printed inside is taken for a workflow command.

    A lesson line quoted in a failure's reason (`::add-mask::...`,
    `::error::...`, `::stop-commands::...`) would otherwise be carried out by the runner.
    The token that resumes them is random, so no output can guess it.
    """
    if os.environ.get("GITHUB_ACTIONS") != "true":
        yield
        return
    token = secrets.token_hex(16)
    print_line(f"::stop-commands::{token}")
    try:
        yield
    finally:
        print_line(f"::{token}::")


def publish(manifest: Manifest, results: list[LessonResult], title: str, tally: str, print_line) -> None:
    """Under GitHub Actions: print the annotations, append the step summary."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    for line in capped(workflow_commands(manifest, results)):
        print_line(line)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(step_summary(manifest, results, title, tally))
