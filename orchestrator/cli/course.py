"""The commands that run no lesson: check, new, compare, report merge, schema.

They register on common.app, use its options and its one error handler, and
print through common.console, which each command's handler sets when it starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from . import common, display
from .common import (lesson_ids_to_complete, Command, JsonOpt, JunitOpt, ManifestOpt, StrictOpt, app, handle_errors, json_to_stdout, load,
                     report_app, schema_app, write_reports)
from ..errors import RunFailed, UsageError
from ..manifest.jsonschema import schema_text
from ..manifest.selection import choose_lessons, select_lessons
from ..words import command_line, plural


@app.command(cls=Command)
@handle_errors
def check(lesson_id: str = typer.Argument(..., metavar="LESSON", autocompletion=lesson_ids_to_complete, help="The lesson whose schema and claims judge it."),
          transcript: Optional[str] = typer.Argument(None, metavar="[TRANSCRIPT | -]", show_default=False,
                                                     help="A transcript file, or - for standard input "
                                                          "(default: the recorded evidence)."),
          gpu: Optional[str] = typer.Option(None, "--gpu", metavar="SLUG",
                                            help="Check the evidence recorded on this GPU (default: the first)."),
          arch: Optional[str] = typer.Option(None, "--arch", metavar="sm_NN",
                                             help="Judge the claims over ptxas' report on a build for this "
                                                  "architecture (default: lessons.yaml's first)."),
          against: Optional[str] = typer.Option(None, "--against", metavar="T0",
                                                help="Also judge every field against this transcript's (a file, "
                                                     "or - for standard input) under the lesson's rules, as "
                                                     "verify judges a run against evidence; exit 1 when a field "
                                                     "is outside its rule."),
          manifest_path: Path = ManifestOpt) -> None:
    """Check a transcript against a lesson's output schema and claims, without a GPU.

    Prints the fields it parses into as a tree, then each claim's outcome;
    with --against T0, each field against T0's under its rule. Exits 0 when
    every gate holds (and every field is within its rule), 1 when one fails,
    2 when a transcript does not match the schema.
    """
    # deferred: 38 ms of imports (authoring, render, jinja2; 23 from .pyc) that --help and doctor never need
    from ..workflows.authoring import STDIN, check_lesson, read_transcript

    manifest = load(manifest_path)
    lesson = choose_lessons(manifest, [lesson_id], all_=False)[0]
    if transcript is not None and gpu is not None:
        raise UsageError("--gpu picks recorded evidence to check; leave it out when giving a TRANSCRIPT")
    if against == "-" and transcript == "-":
        raise UsageError("TRANSCRIPT and --against cannot both read standard input", hint="give one of them as a file")
    text = None if transcript is None else read_transcript(transcript)
    checked = check_lesson(manifest, lesson, text, STDIN if transcript == "-" else transcript or "", gpu, arch)
    judged = None
    if against is not None:
        from ..workflows.against import check_against
        judged = check_against(manifest, lesson, checked.transcript, checked.name, against)
    display.print_check(common.console, checked)
    if judged is not None:
        display.print_against(common.console, judged)
    if not checked.gates_held or (judged is not None and judged.failed):
        raise RunFailed()


@app.command(cls=Command)
@handle_errors
def new(lesson_id: str = typer.Argument(..., metavar="dayNN-name", help="The new lesson's id, such as day17-saxpy."),
        title: str = typer.Option(..., "--title", metavar="TEXT", help="The lesson's page title."),
        manifest_path: Path = ManifestOpt) -> None:
    """Scaffold a lesson: lessons/<id>/ with a program that builds and its prose, and its entry in lessons.yaml.

    The entry goes in day order, and its output schema and claims describe
    what the program prints. docs/authoring.md says what comes next.
    """
    # deferred: 38 ms of imports (authoring, render, jinja2; 23 from .pyc) that --help and doctor never need
    from ..workflows.authoring import new_lesson

    made = new_lesson(load(manifest_path), lesson_id, title)
    for name in made.files:
        common.console.print(f"wrote {name}" + (f" (the entry at line {made.line})" if name.endswith(".yaml") else ""),
                      markup=False, highlight=False, soft_wrap=True)   # a path whole on its line, never broken
    common.console.print(f"next: write the lesson, `{command_line('coursectl', 'build', made.lesson)}`, "
                  f"`{command_line('coursectl', 'check', made.lesson, 'TRANSCRIPT')}`, `coursectl render`; "
                  "docs/authoring.md walks through it", markup=False, highlight=False, soft_wrap=True)


@app.command(cls=Command)
@handle_errors
def compare(a: str = typer.Argument(..., metavar="A", help="One side: a GPU with evidence here (nvidia-h200), REV:SLUG "
                                    "(main:nvidia-h200) or a git revision (HEAD~3) of the other side's GPU."),
            b: str = typer.Argument(..., metavar="B", help="The other side, in the same forms."),
            lesson_ids: Optional[List[str]] = typer.Argument(None, metavar="LESSON", show_default=False,
                                                             autocompletion=lesson_ids_to_complete,
                                                             help="Lesson ids (default: every lesson)."),
            report_path: Optional[Path] = typer.Option(None, "--report", metavar="FILE.md",
                                                       help="Also write the comparison as Markdown here."),
            manifest_path: Path = ManifestOpt) -> None:
    """Set two GPUs' evidence, or two revisions of it, side by side: every field and its ratio.

    Exits 1 when a field moved beyond its rule (or is on one side only), 0 when every field is within it.
    """
    # deferred: 7 ms of imports (workflows/compare.py, judge/drift.py; 2 from .pyc) that --help never needs
    from ..workflows.compare import compare_evidence, moved_fields, resolve_sides, write_comparison

    manifest = load(manifest_path)
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import check_report_paths
    check_report_paths(manifest, {"--report": report_path})
    lessons = select_lessons(manifest, lesson_ids or [], all_=not lesson_ids)
    side_a, side_b = resolve_sides(manifest, a, b)
    compared = compare_evidence(manifest, lessons, side_a, side_b)
    display.print_comparison(common.console, side_a, side_b, compared)
    if report_path:
        write_comparison(report_path, side_a, side_b, compared)
    moved = moved_fields(compared)
    if moved:
        common.console.print(f"{plural(len(moved), 'field')} beyond {'its' if len(moved) == 1 else 'their'} rule: "
                             f"{', '.join(moved[:8])}" + (f" and {len(moved) - 8} more" if len(moved) > 8 else ""),
                             markup=False, highlight=False, soft_wrap=True)
        raise RunFailed()


@report_app.command("merge", cls=Command)
@handle_errors
def report_merge(reports: List[Path] = typer.Argument(..., metavar="REPORT", help="JSON reports of the shards, of any GPU models."),
                 *, allow_partial: bool = typer.Option(False, "--allow-partial",
                                                    help="Merge even with shards missing; the result says partial."),
                 strict: bool = StrictOpt, json_path: Optional[Path] = JsonOpt,
                 junit_path: Optional[Path] = JunitOpt) -> None:
    """Merge the JSON reports of every shard of one verify run, on one GPU model or several, into one report.

    Each GPU model's shards are counted on their own, each model with its own
    N. Exits 0 when the merged run passed; 1 when a lesson in it failed (with
    --strict: or was not verified, or shards are missing under --allow-partial),
    and when a lesson on a GPU is in two reports, the reports come from
    different manifests or one model's are shards of different splits; 2 (a
    usage error) when a model's shard of 1..N is missing without
    --allow-partial (naming the model and its missing shards), or a file is
    missing or is no coursectl JSON report.
    """
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .merge import merge_reports
    from .report import check_report_paths, read_json

    json_to_stdout(json_path)
    check_report_paths(None, {"--json": json_path, "--junit": junit_path}, stdout="--json")
    merged = merge_reports([read_json(p) for p in reports], allow_partial=allow_partial, strict=strict)
    display.print_summary(common.console, merged.results, f"merged {plural(len(reports), 'report')}" +
                          (" (partial: shards missing)" if merged.partial else ""))
    display.print_tally(common.console, merged.results, 0.0, merged.verdict())
    write_reports(merged, json_path, junit_path)


@schema_app.command("report", cls=Command)
@handle_errors
def schema_report() -> None:
    """The JSON Schema of `--json` reports."""
    # deferred: 5 ms of imports (cli/report.py; 2 from .pyc) that --help and doctor never need
    from .report import report_schema

    typer.echo(json.dumps(report_schema(), indent=2))


@schema_app.command("manifest", cls=Command)
@handle_errors
def schema_manifest() -> None:
    """The JSON Schema of lessons.yaml (orchestrator/schemas/lessons.schema.json)."""
    typer.echo(schema_text(), nl=False)
