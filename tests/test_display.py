"""What display prints for a person or a log, however narrow the terminal or long a lesson id."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.cli import display
from orchestrator.judge.results import LessonResult, Status, run_verdict

LONG_ID = "day18-" + "very-long-lesson-name-" * 7 + "end"   # 163 characters


def printed(width: int, results: list[LessonResult]) -> list[str]:
    out = io.StringIO()
    display.print_summary(Console(file=out, width=width, highlight=False, color_system=None), results, "verify")
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_summary_keeps_every_column_in_a_narrow_terminal():
    """At 40 columns rich squeezed every column after the status to nothing: no GPU, evidence or time."""
    rows = printed(40, [LessonResult(lesson="day14-syncthreads", status=Status.PASS, gpu="nvidia-h200",
                                     evidence="nvidia-h200", seconds=1.94)])
    assert [cell.strip() for cell in rows[1].split("┃")] == ["lesson", "status", "gpu", "evidence", "run",
                                                             "sanitizers", "total"]
    assert [cell.strip() for cell in rows[3].split("│")] == ["day14-syncthreads", "PASS", "nvidia-h200",
                                                            "nvidia-h200", "-", "-", "1.94 s"]


def test_a_lesson_id_longer_than_a_log_line_keeps_its_row_whole():
    """A 163-character id in a 160-column log cut the id and the status ('NO_…') and dropped the rest."""
    rows = printed(160, [LessonResult(lesson=LONG_ID, status=Status.NO_EVIDENCE, seconds=0.01)])
    assert [cell.strip() for cell in rows[3].split("│")] == [LONG_ID, "NO_EVIDENCE", "-", "-", "-", "-", "0.01 s"]


def test_a_table_that_fits_is_printed_as_before():
    rows = printed(80, [LessonResult(lesson="day14-syncthreads", status=Status.PASS, seconds=1.94)])
    assert rows[1:] == [
        " lesson            ┃ status ┃ gpu ┃ evidence ┃ run ┃ sanitizers ┃ total",
        "━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━╇━━━━━━━━━━╇━━━━━╇━━━━━━━━━━━━╇━━━━━━━━",
        " day14-syncthreads │ PASS   │ -   │ -        │ -   │ -          │ 1.94 s"]


def _table(pick: random.Random, title: str | None, words: list[str], headers: list[str], most_columns: int,
           most_rows: int, joiner: str, most_words: int) -> Table:
    """A table of random cells drawn from `words`, styled at random, as print_summary draws one."""
    table = Table(title=title, title_justify="left", show_edge=False)
    columns = pick.randint(1, most_columns)
    for _ in range(columns):
        table.add_column(pick.choice(headers), no_wrap=pick.random() < 0.3)
    for _ in range(pick.randint(0, most_rows)):
        table.add_row(*[Text(joiner.join(pick.choice(words) for _ in range(pick.randint(1, most_words))),
                             style=pick.choice(["", "red", "bold green"])) for _ in range(columns)])
    return table


def _random_table(seed: int) -> Table:
    words = ["a", "ok", "memcheck", "PASS", "1.20 s", "nvidia-h200", "día", "全角", "-", "x" * 12]
    return _table(random.Random(seed), "t", words, ["lesson", "status", "gpu", "sanitizers", "é"], 6, 8, " ", 5)


@pytest.mark.parametrize("seed", range(40))
def test_a_table_whose_cells_fit_prints_as_rich_lays_it_out_itself(seed, monkeypatch):
    """print_table tells rich the widths of a table whose every cell fits on its line, so that rich measures no
    cell: the table printed is the one printed where rich measures them, at widths that fit and that do not."""
    def printed(width: int) -> str:
        out = io.StringIO()
        display.print_table(Console(file=out, width=width, color_system="standard", force_terminal=True),
                            _random_table(seed))
        return out.getvalue()

    told = {width: printed(width) for width in (30, 60, 160)}
    monkeypatch.setattr(display, "_natural_widths", lambda table: None)
    assert told == {width: printed(width) for width in (30, 60, 160)}


def _ascii_table(seed: int) -> Table:
    pick = random.Random(seed)
    title = pick.choice([None, "verify", "record on nvidia-h200", "t" * pick.randint(1, 90)])
    words = ["a", "ok", "memcheck PASS 1.2 s", "NO_EVIDENCE", "nvidia-h200", "-", "x" * pick.randint(1, 40), "(cached)"]
    return _table(pick, title, words, ["lesson", "status", "gpu", "sanitizers", "total"], 7, 30, ", ", 3)


@pytest.mark.parametrize("seed", range(60))
def test_a_plain_table_for_a_log_is_the_table_rich_prints(seed, monkeypatch):
    """Without colour, a table whose cells fit is written out line by line (a 400-row summary took rich 0.4 s):
    the same characters rich prints, title, rules and padding, at widths that fit and that do not."""
    taken = []
    plain_lines = display._plain_lines

    def spy(*args):
        lines = plain_lines(*args)
        taken.append(lines is not None)
        return lines

    def printed(width: int) -> str:
        out = io.StringIO()
        display.print_table(Console(file=out, width=width, color_system=None), _ascii_table(seed))
        return out.getvalue()

    monkeypatch.setattr(display, "_plain_lines", spy)
    written = {width: printed(width) for width in (40, 80, 200)}
    monkeypatch.setattr(display, "_plain_lines", lambda *args: None)
    assert written == {width: printed(width) for width in (40, 80, 200)}
    if seed == 0:
        assert any(taken)


def test_a_table_in_colour_or_with_other_text_is_left_to_rich():
    table = Table(title="verify", title_justify="left", show_edge=False)
    table.add_column("lesson")
    table.add_row(Text("day14"))
    colour = Console(file=io.StringIO(), width=80, color_system="standard", force_terminal=True)
    plain = Console(file=io.StringIO(), width=80, color_system=None)
    assert display._plain_lines(colour, table, [6]) is None
    assert display._plain_lines(plain, table, [6]) == ["verify  ", " lesson ", "━━━━━━━━", " day14  "]
    table.add_row(Text("día"))
    assert display._plain_lines(plain, table, [6]) is None


def test_the_widths_are_told_only_where_every_cell_is_plain_text_of_one_line():
    table = Table()
    table.add_column("lesson")
    table.add_row(Text("day14"))
    assert display._natural_widths(table) == [6]
    table.add_row(Text("two\nlines"))
    assert display._natural_widths(table) is None
    markup = Table()
    markup.add_column("lesson")
    markup.add_row("[bold]day14[/bold]")   # rich's markup: only rich knows how wide it prints
    assert display._natural_widths(markup) is None


@pytest.mark.parametrize("statuses, strict, partial, style, reason", [
    ([Status.PASS], False, "", "green", ""),
    ([Status.PASS, Status.NO_EVIDENCE], False, "", "yellow", ""),
    ([Status.PASS, Status.NO_EVIDENCE], True, "", "bold red", "; --strict: 1 not verified, counted as failed"),
    ([Status.PASS, Status.FAIL], False, "", "bold red", ""),
    ([Status.PASS], True, "shard 2 of 2 missing", "bold red",
     "; --strict: a partial merge (shard 2 of 2 missing), counted as failed"),
])
def test_the_tally_is_red_and_says_why_whenever_the_run_fails(statuses, strict, partial, style, reason):
    """A strict partial merge of passed lessons printed a green `1 passed, 0 failed` and exited 1."""
    results = [LessonResult(lesson=f"l{i}", status=s) for i, s in enumerate(statuses)]
    verdict = run_verdict(results, strict=strict, partial=partial)
    console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="standard")
    with console.capture() as printed:
        line = display.print_tally(console, results, 1.0, verdict)
    assert line.endswith(" in 1.0 s" + reason)
    with console.capture() as expected:
        console.print(Text(line, style=style), highlight=False, soft_wrap=True)
    assert printed.get() == expected.get()
