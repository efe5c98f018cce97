"""Everything coursectl shows a person: progress, tables, verdicts. Only the CLI calls it."""

from __future__ import annotations

import shlex
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .comparison import FieldStatus
from .results import Event, LessonResult, Status

STATUS_STYLE = {
    Status.PASS: "green", Status.FAIL: "bold red", Status.TIMEOUT: "bold red", Status.CRASH: "bold red",
    Status.UNSUPPORTED: "yellow", Status.NO_EVIDENCE: "yellow", Status.SKIPPED: "dim",
}
FIELD_STYLE = {
    FieldStatus.same: "green", FieldStatus.within: "cyan", FieldStatus.moved: "bold red",
    FieldStatus.missing: "bold red", FieldStatus.new: "bold red", FieldStatus.volatile: "dim",
    FieldStatus.other_gpu: "dim", FieldStatus.ambiguous: "yellow", FieldStatus.untrusted: "yellow",
}


class Progress:
    """A live line per lesson on a terminal; one plain line per stage change elsewhere."""

    def __init__(self, console: Console, lessons: list[str], quiet: bool = False):
        self.console = console
        self.quiet = quiet
        self.state = {lesson: ("queued", "", time.monotonic()) for lesson in lessons}
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.live: Live | None = None
        if console.is_terminal and not quiet:
            self.live = Live(self._table(), console=console, refresh_per_second=8, transient=True)

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for lesson, (stage, detail, since) in self.state.items():
            table.add_row(lesson, stage, detail, f"{now - since:5.1f} s")
        return table

    def __enter__(self) -> "Progress":
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, event: Event) -> None:
        with self.lock:
            self.state[event.lesson] = (event.stage, event.detail, time.monotonic())
            if self.live:
                self.live.update(self._table())
            elif not self.quiet:
                elapsed = time.monotonic() - self.start
                detail = f" ({event.detail})" if event.detail else ""
                self.console.print(f"[{elapsed:6.1f} s] {event.lesson}: {event.stage}{detail}",
                                   highlight=False, markup=False, soft_wrap=True)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_fields(console: Console, result: LessonResult, show_all: bool) -> None:
    """Each field's rule and result against the evidence (only moved ones unless show_all)."""
    if not result.fields:
        return
    rows = result.fields if show_all else [f for f in result.fields
                                           if f.status not in (FieldStatus.same, FieldStatus.volatile,
                                                               FieldStatus.other_gpu)]
    counts: dict[str, int] = {}
    for f in result.fields:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    title = f"{result.lesson}: {len(result.fields)} fields against {result.evidence} evidence ({summary})"
    if not rows:
        console.print(Text(title), highlight=False)
        return
    table = Table(title=title, title_justify="left", show_edge=False)
    columns = ["field", "rule", "evidence", "now" if result.runs == 1 else f"median of {result.runs}", "ratio"]
    if result.spread:
        columns.append("spread")
    columns.append("result")
    for column in columns:
        table.add_column(column, justify="left" if column in ("field", "rule", "result") else "right")
    for f in rows:
        cells = [Text(f.path), f.rule, _fmt(f.old), _fmt(f.new), f"{f.ratio:.3f}" if f.ratio is not None else ""]
        if result.spread:
            cells.append(f"{result.spread[f.path]:.1%}" if f.path in result.spread else "")
        cells.append(Text(f.status.value, style=FIELD_STYLE[f.status]))
        table.add_row(*cells)
    console.print(table)


def print_claims(console: Console, result: LessonResult) -> None:
    if not result.claims:
        return
    table = Table(title=f"{result.lesson}: claims", title_justify="left", show_edge=False)
    for column in ("claim", "kind", "checked", "held"):
        table.add_column(column)
    for claim in result.claims:
        held = Text("yes", style="green") if claim.held else Text(
            "NO", style="bold red" if claim.kind == "gate" else "yellow")
        table.add_row(Text(claim.id), claim.kind, str(claim.checked), held)
    console.print(table)


def print_summary(console: Console, results: list[LessonResult], title: str) -> None:
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in ("lesson", "status", "gpu", "evidence", "run", "sanitizers", "total"):
        table.add_column(column, no_wrap=column in ("lesson", "status"))
    for r in results:
        passes = ", ".join(f"{p.tool} {'ok' if p.ok else 'FAIL'} "
                           + ("(recorded)" if p.recorded else f"{p.seconds:.1f} s")
                           for p in r.sanitizers)
        run = f"{r.run.seconds:.2f} s" if r.run else "-"
        total = f"{r.seconds:.2f} s" if r.seconds else "-"
        status = r.status.value + (" (recorded)" if r.recorded else "")
        table.add_row(Text(r.lesson), Text(status, style=STATUS_STYLE[r.status]), r.gpu or "-",
                      r.evidence or "-", run, passes or "-", total)
    console.print(table)
    for r in results:
        for reason in r.reasons:
            console.print(Text(f"{r.lesson}: {reason}", style="red"), highlight=False, soft_wrap=True)
        for note in r.notes:
            console.print(Text(f"{r.lesson}: note: {note}", style="yellow"), highlight=False, soft_wrap=True)


def print_commands(console: Console, results: list[LessonResult]) -> None:
    for r in results:
        for build in r.builds:
            console.print(f"{r.lesson}: {'(cached) ' if build.cached else ''}{shlex.join(build.command)}",
                          highlight=False, markup=False, soft_wrap=True)
        if r.run:
            console.print(f"{r.lesson}: {shlex.join(r.run.command)}", highlight=False, markup=False, soft_wrap=True)
        for p in r.sanitizers:
            if p.command:
                console.print(f"{r.lesson}: {shlex.join(p.command)}", highlight=False, markup=False, soft_wrap=True)
