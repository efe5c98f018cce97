"""Everything coursectl shows a person: progress, tables, verdicts. Only the CLI calls it.

What is shown, by verbosity, in the manner of pytest and ctest:
- always: a line per lesson as it finishes (status, GPU, time, the one-line
  reason when not PASS), then the summary table, the failures' moved fields
  and failed claims (only those), and the tally;
- `-v`: also every stage change, and each lesson's claims;
- `-vv`: also every field against the evidence, and every command.
"""

from __future__ import annotations

import shlex
import threading
import time

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.live import Live
from rich.segment import Segments
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..judge.comparison import FieldResult, FieldStatus
from ..judge.results import Event, LessonResult, Status, Verdict, covered_words, is_unverified, shown, tally, why
from ..transcript.schema import LineItem, SectionItem, TableItem
from ..words import format_value, plural
from ..words import shown as shown_name
from ..judge.judging import claim_reason

STATUS_STYLE = {
    Status.PASS: "green", Status.FAIL: "bold red", Status.TIMEOUT: "bold red", Status.CRASH: "bold red",
    Status.UNSUPPORTED: "yellow", Status.NO_EVIDENCE: "yellow", Status.SKIPPED: "dim",
    Status.FLAKY: "bold yellow", Status.STALE: "bold yellow", Status.INCOMPLETE: "bold yellow",
}
FIELD_STYLE = {
    FieldStatus.same: "green", FieldStatus.within: "cyan", FieldStatus.moved: "bold red",
    FieldStatus.missing: "bold red", FieldStatus.new: "bold red", FieldStatus.volatile: "dim",
    FieldStatus.other_gpu: "dim", FieldStatus.ambiguous: "yellow", FieldStatus.untrusted: "yellow",
}
STATUS_WIDTH = max(len(status.value) for status in Status)


def print_table(console: Console, table: Table) -> None:
    """Print a table whole, however narrow the console or long its cells.

    Narrower than the table's longest words, rich ends cells in '…' and at last squeezes whole columns
    to nothing: at 40 columns the summary lost every column after the status, and a lesson id of 163
    characters did that in a 160-column CI log. Each column keeps at least its longest word (all of a
    cell that does not wrap), uncropped; a table whose words do not fit at all is laid out at its
    natural width, a row to a line, and the terminal folds its lines instead.
    """
    for column in table.columns:
        texts = [cell.plain if isinstance(cell, Text) else str(cell) for cell in (column.header, *column.cells)]
        words = texts if column.no_wrap else [word for text in texts for word in text.split()]
        column.min_width = max((cell_len(word) for word in words), default=0) or None
        column.overflow = "fold"   # rich's own narrowing may still undershoot a word: fold it, never cut it
    # The widest the table's minimum can be (each column its longest word, its padding and a rule, and the
    # edges): where that fits, rich is not asked to measure every cell first, which a 400-row summary felt.
    _, right, _, left = table.padding
    widest_minimum = sum((column.min_width or 0) + left + right + 1 for column in table.columns) + 2
    if widest_minimum <= console.width:
        natural = _natural_widths(table)
        if natural and sum(width + left + right + 1 for width in natural) + 2 <= console.width:
            # Every cell fits on its line: each column is as wide as its widest cell, which is what rich would
            # find by measuring every cell twice over. Told, it measures none (a third of a 400-row summary).
            for column, width in zip(table.columns, natural):
                column.width = width
            lines = _plain_lines(console, table, natural)
            if lines is not None:
                console.out("\n".join(lines), highlight=False)
                return
        console.print(table, crop=False)
        return
    width = console.measure(table, options=console.options.update_width(1_000_000))
    if width.minimum <= console.width:
        console.print(table, crop=False)
        return
    for line in console.render_lines(table, console.options.update_width(width.maximum), pad=False,
                                     new_lines=True):
        console.print(Segments(line), end="", soft_wrap=True)


def _natural_widths(table: Table) -> list[int] | None:
    """Each column's widest cell, its header's too, where every cell is plain Text of one line without tabs (as
    rich measures it: cell_len); None where one is not, or a column is empty, and rich must measure."""
    widths = []
    for column in table.columns:
        header = column.header if isinstance(column.header, Text) else Text(column.header) if (
            isinstance(column.header, str) and not any(c in column.header for c in "[]:")) else None
        if header is None or not all(isinstance(cell, Text) for cell in column.cells):
            return None
        plain = [header.plain, *(cell.plain for cell in column.cells)]
        if any("\n" in text or "\t" in text or "\r" in text for text in plain):
            return None
        widths.append(max(cell_len(text) for text in plain))
    return widths if widths and all(widths) else None


def _plain_lines(console: Console, table: Table, widths: list[int]) -> list[str] | None:
    """The lines rich prints for `table` at `widths` on a console without colour, where the table is drawn as
    print_summary draws one (its default box, no edge, a title of plain text) and each cell is printable ASCII;
    None otherwise, and rich lays it out. Rich took 0.4 s to lay out a 400-row summary for a log; its lines,
    told apart from the cells here, take a hundredth of that."""
    if console.color_system is not None or console.options.ascii_only or console.legacy_windows:
        return None
    plain = (table.box is box.HEAVY_HEAD and not table.show_edge and table.show_header and not table.show_footer
             and not table.show_lines and tuple(table.padding) == (0, 1, 0, 1) and table.pad_edge
             and not table.collapse_padding and not table.expand and not table.leading and not table.row_styles
             and table.caption is None and table.min_width is None
             and all(c.justify == "left" and not c.ratio for c in table.columns))
    title = table.title
    width = sum(widths) + 3 * len(widths) - 1
    if not plain or (title is not None and not (isinstance(title, str) and _printable(title) and len(title) <= width
                                                 and "[" not in title and table.title_justify == "left")):
        return None
    rows = [[str(column.header), *(cell.plain for cell in column.cells)] for column in table.columns]
    if not all(_printable(text) for column in rows for text in column):
        return None

    def line(cells: list[str], rule: str) -> str:
        return rule.join(f" {text.ljust(width)} " for text, width in zip(cells, widths))

    lines = [] if title is None else [title.ljust(width)]
    lines.append(line([column[0] for column in rows], "┃"))
    lines.append("╇".join("━" * (width + 2) for width in widths))
    lines += [line(cells, "│") for cells in list(zip(*rows))[1:]]
    return lines


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def finished_line(result: LessonResult) -> Text:
    """`PASS         day13-shared-memory  nvidia-h200  2.9 s`, and the reason when not PASS."""
    line = Text(f"{result.status.value:<{STATUS_WIDTH}}", style=STATUS_STYLE[result.status])
    line.append(f"  {result.lesson}  {result.gpu or 'offline'}  {result.seconds:.1f} s")
    reason = why(result)
    if reason:
        line.append(f"  {reason}", style="red" if result.status.is_failure else "yellow")
    return line


def _is_tty(console: Console) -> bool:
    """A real terminal, not only a forced one (--color always in a CI log keeps plain lines)."""
    isatty = getattr(console.file, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """A live table on a terminal, its clocks advancing; plain lines elsewhere.

    Each lesson prints one line as it finishes; with `stages`, every stage
    change is a line too (`[  1.2 s] LESSON: STAGE (DETAIL)`).
    """

    def __init__(self, console: Console, lessons: list[str], *, quiet: bool = False, stages: bool = False):
        self.console = console
        self.quiet = quiet
        self.stages = stages
        self.state = {lesson: ("queued", "", time.monotonic()) for lesson in lessons}
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.live: Live | None = None
        if console.is_terminal and _is_tty(console) and not quiet:
            self.live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._table)

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        with self.lock:
            state = list(self.state.items())
        for lesson, (stage, detail, since) in state:
            if stage != "done":
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
        if not event.lesson:   # the run's own line (how many sanitizer passes run at once): with stages alone
            if self.stages and not self.quiet:
                self.console.print(event.detail, highlight=False, markup=False, soft_wrap=True)
            return
        with self.lock:
            self.state[event.lesson] = (event.stage, event.detail, time.monotonic())
        if self.quiet:
            return
        if self.stages and not self.live:
            elapsed = time.monotonic() - self.start
            detail = f" ({event.detail})" if event.detail else ""
            self.console.print(f"[{elapsed:6.1f} s] {event.lesson}: {event.stage}{detail}",
                               highlight=False, markup=False, soft_wrap=True)
        if event.stage == "done" and event.result is not None:
            self.console.print(finished_line(event.result), highlight=False, soft_wrap=True)




def _shown_fields(result: LessonResult, verbosity: int) -> list[FieldResult]:
    if verbosity >= 2:
        return list(result.fields)
    if result.status.is_failure:
        return [f for f in result.fields if f.status.is_failure]
    return []


def print_fields(console: Console, result: LessonResult, rows: list[FieldResult]) -> None:
    """Each field's rule and result against the evidence, for the rows given."""
    if not result.fields or not rows:
        return
    counts: dict[str, int] = {}
    for f in result.fields:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    title = f"{result.lesson}: {len(result.fields)} fields against {result.evidence} evidence ({summary})"
    table = Table(title=title, title_justify="left", show_edge=False)
    columns = ["field", "rule", "evidence", "now" if result.runs == 1 else f"median of {result.runs}", "ratio"]
    if result.spread:
        columns.append("spread")
    columns.append("result")
    for column in columns:
        table.add_column(column, justify="left" if column in ("field", "rule", "result") else "right")
    for f in rows:
        cells = [Text(shown_name(f.path)), f.rule, format_value(f.old), format_value(f.new),
                 f"{f.ratio:.3f}" if f.ratio is not None else ""]
        if result.spread:
            cells.append(f"{result.spread[f.path]:.1%}" if f.path in result.spread else "")
        cells.append(Text(f.status.value, style=FIELD_STYLE[f.status]))
        table.add_row(*cells)
    print_table(console, table)


def print_provenance(console: Console, result: LessonResult) -> None:
    """What changed underneath since the evidence, one line each, above the field table."""
    for change in result.provenance:
        console.print(Text(f"{result.lesson}: {change.text}"), highlight=False, soft_wrap=True)


def print_claims(console: Console, result: LessonResult, *, failed_only: bool = False) -> None:
    claims = [c for c in result.claims if not (failed_only and c.held)]
    if not claims:
        return
    table = Table(title=f"{result.lesson}: claims", title_justify="left", show_edge=False)
    for column in ("claim", "kind", "checked", "held"):
        table.add_column(column)
    for claim in claims:
        held = Text("yes", style="green") if claim.held else Text(
            "NO", style="bold red" if claim.kind == "gate" else "yellow")
        table.add_row(Text(claim.id), claim.kind, str(claim.checked), held)
    print_table(console, table)


def print_details(console: Console, results: list[LessonResult], verbosity: int) -> None:
    """Claims and fields: all of them as verbosity asks, and a failure's broken ones always."""
    for result in results:
        if verbosity >= 1 or result.status.is_failure:
            print_claims(console, result, failed_only=verbosity == 0)
        if verbosity >= 1:
            console.print(Text(f"{result.lesson}: covered: {covered_words(result.covered)}"), highlight=False,
                          soft_wrap=True)
        print_provenance(console, result)
        print_fields(console, result, _shown_fields(result, verbosity))


def print_summary(console: Console, results: list[LessonResult], title: str) -> None:
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in ("lesson", "status", "gpu", "evidence", "run", "sanitizers", "total"):
        table.add_column(column, no_wrap=column in ("lesson", "status"))
    for r in results:
        passes = ", ".join(f"{p.tool} not run" if p.not_run else
                           f"{p.tool} {p.verdict} "
                           + ("(recorded)" if p.recorded else "(cached)" if p.cached else f"{p.seconds:.1f} s")
                           for p in r.sanitizers)
        run = f"{r.run.seconds:.2f} s" if r.run else "-"
        total = f"{r.seconds:.2f} s" if r.seconds else "-"
        status = r.status.value + (" (recorded)" if r.recorded else "")
        table.add_row(Text(r.lesson), Text(status, style=STATUS_STYLE[r.status]), Text(r.gpu or "-"),
                      Text(r.evidence or "-"), Text(run), Text(passes or "-"), Text(total))
    print_table(console, table)
    said = Text()   # every lesson's lines, printed at once: a print each cost more than the table of 400 rows
    for r in results:
        lines = [(f"{r.lesson}: {reason}", "red" if r.status.is_failure else "yellow") for reason in r.reasons]
        lines += [(f"{r.lesson}: {r.unverified}", "yellow")] if r.unverified else []
        lines += [(f"{r.lesson}: stale: {change}", "yellow") for change in r.stale]
        lines += [(f"{r.lesson}: note: {note}", "yellow") for note in r.notes]
        for text, style in lines:
            said.append(text, style=style)
            said.append("\n")
    if said:
        said.right_crop(1)
        console.print(said, highlight=False, soft_wrap=True)


def selection_of(manifest, lesson_ids: list[str] | None, keyword: str | None, shard: str | None, lessons: list):
    """What the JSON report and the tally say of the selection: the ids, -k, --shard, and how many were left out."""
    from .report import Selection   # deferred, as make_report is: 5 ms of imports --help never needs

    return Selection(ids=list(lesson_ids or []), keyword=keyword, shard=shard, lessons=[l.id for l in lessons],
                     deselected=len(manifest.lessons) - len(lessons))


def deselected(selection) -> str:
    """`2 deselected by -k 'day1'`, `1 deselected by --shard 1/2`; empty when the run took every lesson."""
    if selection is None or not selection.deselected:
        return ""
    by = [f"-k {selection.keyword!r}"] if selection.keyword else []
    by += [f"--shard {selection.shard}"] if selection.shard else []
    by += ["the ids given"] if selection.ids and not by else []
    return f"{selection.deselected} deselected" + (f" by {' and '.join(by)}" if by else "")


def print_tally(console: Console, results: list[LessonResult], seconds: float, verdict: Verdict,
                deselected: str = "") -> str:
    """The tally, the lessons the selection left out (`2 deselected by -k 'day1'`), and why --strict failed the
    run when it did; red whenever the run failed (exit 1)."""
    line = tally(results, seconds)
    if deselected and results:   # none selected: the line below says so
        line += f"; {deselected}"
    if not results:
        line += "; no lesson was selected, nothing was verified"
    if verdict.reasons:
        line += f"; --strict: {'; '.join(verdict.reasons)}"
    unverified = any(is_unverified(r.status) for r in results)
    console.print(Text(line, style="bold red" if verdict.failed else "yellow" if unverified else "green"),
                  highlight=False, soft_wrap=True)
    return line


def print_commands(console: Console, results: list[LessonResult]) -> None:
    for r in results:
        for build in r.builds:
            console.print(f"{r.lesson}: {'(cached) ' if build.cached else ''}{shlex.join(build.command)}",
                          highlight=False, markup=False, soft_wrap=True)
        if r.run:
            console.print(f"{r.lesson}: {shlex.join(r.run.command)}", highlight=False, markup=False, soft_wrap=True)
        for p in r.sanitizers:
            if p.command:
                console.print(f"{r.lesson}: {'(cached) ' if p.cached else ''}{shlex.join(p.command)}",
                              highlight=False, markup=False, soft_wrap=True)


# -- check --------------------------------------------------------------------------------------
def check_tree(checked) -> Tree:
    """The fields a transcript parsed into, as its schema arranges them: lines, tables with their rows by
    key, sections with their blocks; each with its line in the transcript."""
    title = f"{checked.lesson.id}: {checked.name}" + (f" (recorded on {checked.gpu})" if checked.gpu else "")
    tree = Tree(Text(title, style="bold"))
    _scope_nodes(tree, checked.lesson.output.items, checked.transcript.scope)
    return tree


def _at(line: int | None) -> Text:
    return Text(f"  line {line}" if line else "  absent", style="dim")


def _values(values: dict, skip: tuple = ()) -> str:
    return ", ".join(f"{name} = {format_value(value)}" for name, value in values.items() if name not in skip)


def _scope_nodes(node: Tree, items: list, scope) -> None:

    for item in items:
        if isinstance(item, LineItem):
            if not item.names:
                continue
            line = next((scope.lines[name] for name in item.names if name in scope.lines), None)
            node.add(Text(_values({name: scope.values.get(name) for name in item.names})) + _at(line))
        elif isinstance(item, TableItem):
            rows = scope.tables.get(item.table, [])
            table = node.add(Text(f"{item.table}: table, {plural(len(rows), 'row')}"))
            for row in rows:
                values = _values(row.values, tuple(item.key_columns))
                table.add(Text(f"[{shown_name(row.key)}] {values}") + _at(row.line))
            for note in item.notes:
                notes = scope.tables.get(note.name, [])
                below = node.add(Text(f"{note.name}: notes of {item.table}, {plural(len(notes), 'row')}"))
                for row in notes:
                    below.add(Text(f"[{shown_name(row.key)}] {_values(row.values)}") + _at(row.line))
        elif isinstance(item, SectionItem):
            blocks = scope.sections.get(item.section, [])
            section = node.add(Text(f"{item.section}: section, {plural(len(blocks), 'block')}"))
            for block in blocks:
                _scope_nodes(section.add(Text(f"[{shown_name(block.key)}]") + _at(block.line)), item.items, block.scope)


def print_check(console: Console, checked) -> None:
    """What `coursectl check` shows: the tree of fields, then each claim's outcome and the tally."""

    console.print(check_tree(checked), highlight=False)
    if not checked.claims:
        return
    where = f" (resources: ptxas' report of a build for {checked.build.arch})" if checked.build else ""
    console.print(Text(f"claims{where}:"), highlight=False)
    for claim in checked.claims:
        if claim.held:
            text = f"{claim.kind} {claim.id!r} held" + (f" ({claim.says})" if claim.says else "")
            console.print(Text(f"  {text}", style="green"), highlight=False, soft_wrap=True)
        else:
            style = "bold red" if claim.kind == "gate" else "yellow"
            for row in claim_reason(claim).splitlines():
                console.print(Text(f"  {row}", style=style), highlight=False, soft_wrap=True)
    parts = []
    for kind, noun in (("gate", "gate"), ("expect", "prediction")):
        claims = [c for c in checked.claims if c.kind == kind]
        if claims:
            parts.append(f"{sum(c.held for c in claims)} of {plural(len(claims), noun)} held")
    console.print(Text(", ".join(parts), style="green" if checked.gates_held else "bold red"), highlight=False)


def print_comparison(console: Console, a, b, compared: list) -> None:
    """coursectl compare: per lesson what differs underneath, then every field of sides `a` and `b`."""
    console.print(Text(f"A: {a.where}; B: {b.where}; ratios are B / A"), highlight=False, soft_wrap=True)
    for row in compared:
        if row.problem:
            console.print(Text(f"{row.lesson}: not compared: {row.problem}", style="yellow"), highlight=False,
                          soft_wrap=True)
            continue
        dates = f"recorded {(row.a_date or '-')[:10]} (A), {(row.b_date or '-')[:10]} (B)"
        console.print(Text(f"{row.lesson}: {dates}"), highlight=False, soft_wrap=True)
        for change in row.provenance:
            console.print(Text(f"{row.lesson}: {change.what} {shown(change.old, 'not recorded')} (A), "
                               f"{shown(change.new, 'not recorded')} (B)"), highlight=False, soft_wrap=True)
        counts: dict[str, int] = {}
        for f in row.fields:
            counts[f.status.value] = counts.get(f.status.value, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        table = Table(title=f"{row.lesson}: {len(row.fields)} fields ({summary})", title_justify="left",
                      show_edge=False)
        for column in ("field", "rule", f"A: {a.label}", f"B: {b.label}", "ratio", "result"):
            table.add_column(column, justify="left" if column in ("field", "rule", "result") else "right")
        for f in row.fields:
            ratio = f"{f.ratio:.3f}" if f.ratio is not None else ""
            table.add_row(Text(f.path), f.rule, format_value(f.old), format_value(f.new), ratio,
                          Text(f.status.value, style=FIELD_STYLE[f.status]))
        print_table(console, table)


def print_suggestions(console: Console, result: LessonResult) -> None:
    """record --repeat: the tolerance each moving field's spread suggests; lessons.yaml is left as it is."""
    if not result.suggestions:
        return
    console.print(Text(f"{result.lesson}: tolerances suggested by the spread of {result.runs} runs "
                       f"(lessons.yaml is not changed; docs/authoring.md, Tolerances):"), highlight=False,
                  soft_wrap=True)
    for s in result.suggestions:
        held = "holds every run" if s.holds else "does not hold every run"
        console.print(Text(f"  {s.path}: {format_value(s.low)} to {format_value(s.high)}, median "
                           f"{format_value(s.median)}, furthest run {s.deviation:.1%} from it; now {s.rule} "
                           f"({held}); suggest {s.suggested}", style=None if s.holds else "yellow"),
                      highlight=False, soft_wrap=True)


def print_against(console: Console, against) -> None:
    """check --against: each field of the transcript against the reference transcript's, as verify judges."""
    counts: dict[str, int] = {}
    for f in against.fields:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    table = Table(title=f"{len(against.fields)} fields of {against.name} against {against.reference} ({summary})",
                  title_justify="left", show_edge=False)
    for column in ("field", "rule", against.reference, against.name, "ratio", "result"):
        table.add_column(column, justify="left" if column in ("field", "rule", "result") else "right")
    for f in against.fields:
        table.add_row(Text(shown_name(f.path)), f.rule, format_value(f.old), format_value(f.new),
                      f"{f.ratio:.3f}" if f.ratio is not None else "", Text(f.status.value, style=FIELD_STYLE[f.status]))
    print_table(console, table)
    failed = [f for f in against.fields if f.status.is_failure]
    verdict = f"{len(failed)} of {plural(len(against.fields), 'field')} outside its rule" if failed else \
        "every field within its rule"
    console.print(Text(verdict, style="bold red" if failed else "green"), highlight=False)
