"""Tables that fit and sentences that wrap on a rich console, and the texts of their cells: what
the terminal's tables (terminal.py, ranks.py, gate_output.py) are built of."""
from __future__ import annotations

import functools
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from reports.formatting import NUMBER_UNIT_SPACE, in_units, is_missing, short_kernel_name


def pct(value) -> str:
    return "n/a" if is_missing(value) else f"{float(value):.1f}"


def share(value) -> str:
    """A fraction 0..1 as a percentage (under a `%` heading)."""
    return "n/a" if is_missing(value) else f"{100 * float(value):.0f}"


def ratio(value) -> str:
    return "n/a" if is_missing(value) else f"{float(value):.2f}"


def us(value) -> str:
    return "n/a" if is_missing(value) else f"{float(value) / 1000:,.1f}"


def si(value, unit: str = "") -> str:
    """1.26e7 -> 12.6 M."""
    if is_missing(value):
        return "n/a"
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""))
    return in_units(float(value), tuple((scale, f" {prefix}{unit}") for scale, prefix in prefixes)).rstrip()


def text(value) -> str:
    return "n/a" if is_missing(value) else str(value)


def short_name(name, width: int = 48) -> str:
    return short_kernel_name(name, width)


# Piped output (no terminal, no COLUMNS): wide enough that no table is split or cut.
PIPED_WIDTH = 1000


def output_console() -> Console:
    """The console for stdout: the terminal's width, or, piped, as wide as the output needs."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPED_WIDTH, soft_wrap=True)


# --- sentences that wrap ---------------------------------------------------------------------------

def _wrapped_lines(line: Text, width: int) -> list[Text]:
    """`line` cut after spaces into lines of at most `width` cells (a word longer stays whole), never
    at the space between a number and its unit."""
    plain = line.plain
    glued = {match.end(1) for match in NUMBER_UNIT_SPACE.finditer(plain)}
    breaks, start, space = [], 0, None
    for index, char in enumerate(plain):
        if char == " " and index not in glued:
            space = index
        if index - start >= width and space is not None and space >= start:
            breaks.append(space + 1)
            start, space = space + 1, None
    parts = line.divide(breaks) if breaks else [line]
    for part in parts:
        part.rstrip()
        part.end = "\n"
    return list(parts)


class Prose:
    """Sentences (a verdict, a legend, a validation's reason) wrapped between words at the console's
    width. Rich would also break between a number and its unit, at any space, a no-break one
    included; this never does."""

    def __init__(self, text: "Text | str", style: str = ""):
        self.text = Text(text, style=style) if isinstance(text, str) else text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.text.split("\n", allow_blank=True):
            yield from _wrapped_lines(line, options.max_width)


# --- tables that fit -------------------------------------------------------------------------------

@dataclass
class Column:
    heading: str
    cells: list  # one text per row; None on a phase's heading row
    justify: str = "right"
    definition: str = ""  # the legend's line


@dataclass
class Rows:
    """The key column of a table: each row's text, and which rows head a phase."""

    keys: list = field(default_factory=list)
    headings: list = field(default_factory=list)  # True: a phase heading row
    styles: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # under the row on lines of its own: a text, facts, None

    def phase(self, name: str) -> None:
        self.keys.append(name)
        self.headings.append(True)
        self.styles.append(None)
        self.notes.append(None)

    def row(self, key: str, style: Optional[str] = None, note: "str | tuple | None" = None) -> None:
        self.keys.append(key)
        self.headings.append(False)
        self.styles.append(style)
        self.notes.append(note)


NOTE_INDENT = "    "


def note_lines(note: "str | tuple", width: int) -> list[str]:
    """A row's note in lines of at most `width` cells: a text broken as broken_lines breaks it, or
    facts (a tuple of texts) two spaces apart, each whole unless it alone is wider than a line."""
    if isinstance(note, str):
        return broken_lines(note, width)
    lines, line = [], ""
    for fact in note:
        if line and cell_len(line) + 2 + cell_len(fact) > width:
            lines.append(line)
            line = ""
        if cell_len(fact) > width:
            *whole, line = broken_lines(f"{line}  {fact}" if line else fact, width)
            lines += whole
            continue
        line = f"{line}  {fact}" if line else fact
    return [*lines, line] if line else lines


def broken_lines(text: str, width: int, after: str = " /_:,") -> list[str]:
    """`text` in lines of at most `width` cells, each broken after one of the `after` characters
    (between a path's folders, a kernel name's parts, words), within a part only where a part alone
    is wider than `width`; a space a line ends with is dropped."""
    parts = [p for p in re.split(f"(?<=[{re.escape(after)}])", text) if p]
    lines, line = [], ""
    for part in parts:
        while cell_len(part) > width > 0:  # a part wider than a line: split where the line ends
            room = width - cell_len(line)
            lines.append(line + part[:room])
            line, part = "", part[room:]
        if line and cell_len(line + part.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += part
    return [*lines, line.rstrip()] if line or not lines else lines


def _wrapped(heading: str, cells: list) -> str:
    """The heading in lines no wider than the column's cells (never narrower than a word)."""
    widest = max([len(c) for c in cells if c is not None] + [max(len(w) for w in heading.split() or [""])])
    return _wrapped_to(heading, widest)


@functools.lru_cache(maxsize=1024)
def _wrapped_to(heading: str, width: int) -> str:  # a heading wraps alike in every table it heads
    return "\n".join(textwrap.wrap(heading, width, break_long_words=False)) or heading


def _heading_lines(column: Column, wrap: bool = True) -> list[str]:
    return (_wrapped(column.heading, column.cells) if wrap else column.heading).split("\n")


def _key_width(key_heading: str, rows: Rows) -> int:
    return max([cell_len(key_heading)] + [cell_len(k) for k in rows.keys])


def _column_width(column: Column, lines: list[str]) -> int:
    """As wide as its widest heading line or cell."""
    return max([cell_len(line) for line in lines] + [cell_len(c) for c in column.cells if c is not None])


class CompactTable:
    """A table with one space between columns, no outer edge, a rule under its heading, and no cell
    ever cut or wrapped: each column is as wide as its widest text, so its lines are written
    directly (rich's Table measures and lays out every cell: 2.3 s for the 62 tables of `smlens
    views`). On a console narrower than the table it is rich's Table, which shrinks what it must."""

    # how a subclass drawn as some other rich Table was differs: the title's style (None: rich's
    # table.title, bold), headings wrapped to their cells or whole, "n/a" dim or plain
    TITLE_STYLE: Optional[str] = None
    WRAP_HEADINGS = True
    DIM_MISSING = True

    def __init__(self, title: str, key_heading: str, rows: Rows, columns: list[Column]):
        self.title, self.key_heading, self.rows, self.columns = title, key_heading, rows, columns
        self.headings = [[key_heading]] + [_heading_lines(c, self.WRAP_HEADINGS) for c in columns]
        self.widths = [_key_width(key_heading, rows)] + [_column_width(c, lines)
                                                         for c, lines in zip(columns, self.headings[1:])]
        self.justify = ["left"] + [c.justify for c in columns]
        self.width = sum(self.widths) + 2 * (len(self.widths) - 1)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)

    def _line(self, cells: list, styles: list, row_style: Style) -> list[Segment]:
        segments, plain = [], []
        for index, (cell, width) in enumerate(zip(cells, self.widths)):
            pad = " " * (width - cell_len(cell))
            text = cell + pad if self.justify[index] == "left" else pad + cell
            gap = "  " if index < len(cells) - 1 else ""
            if row_style:
                segments += [Segment(text, row_style + styles[index] if styles[index] else row_style),
                             Segment(gap, row_style)]
                continue
            # text without a style is written as it is: a run of such cells is one segment (the
            # same bytes, a tenth of the segments for rich to pass on: BENCHMARKS.md)
            if styles[index]:
                segments += [Segment("".join(plain), row_style), Segment(text, styles[index])]
                plain = [gap]
            else:
                plain += [text, gap]
        if plain:
            segments.append(Segment("".join(plain), row_style))
        return segments + [Segment.line()]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.width > options.max_width:
            yield self.rich_table()
            return
        if self.title:
            style = (console.get_style(self.TITLE_STYLE) if self.TITLE_STYLE
                     else console.get_style("table.title") + Style(bold=True))
            yield from console.render(Text(self.title, style=style), options.update(width=self.width, justify="left"))
        header = console.get_style("table.header")
        tallest = max(len(lines) for lines in self.headings)
        for line in range(tallest):  # headings end on the rule
            cells = [lines[line - tallest + len(lines)] if line >= tallest - len(lines) else ""
                     for lines in self.headings]
            yield from self._line(cells, [None] * len(cells), header)
        yield Segment("\u2500" * self.width)
        yield Segment.line()
        bold, dim, plain = Style(bold=True), Style(dim=True), Style()
        for index, key in enumerate(self.rows.keys):
            if self.rows.headings[index]:
                yield from self._line([key] + [""] * len(self.columns), [bold] + [None] * len(self.columns), plain)
                continue
            cells = [key] + [column.cells[index] or "" for column in self.columns]
            style = self.rows.styles[index]
            yield from self._line(cells, [dim if c == "n/a" and self.DIM_MISSING else None for c in cells],
                                  console.get_style(style) if style else plain)
            note = self.rows.notes[index] if index < len(self.rows.notes) else None
            for line in note_lines(note, options.max_width - len(NOTE_INDENT)) if note else []:
                yield from (Segment(NOTE_INDENT + line, dim), Segment.line())

    def rich_table(self) -> Table:
        table = Table(title=self.title or None, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
        for lines, justify in zip(self.headings, self.justify):
            table.add_column("\n".join(lines), justify=justify, no_wrap=True)
        for index, key in enumerate(self.rows.keys):
            if self.rows.headings[index]:
                table.add_row(Text(key, style="bold"), *[""] * len(self.columns))
                continue
            cells = [column.cells[index] for column in self.columns]
            # Text, not markup: a kernel name's `[...]` is shown as it is
            table.add_row(Text(key), *[Text(c or "", style="dim" if c == "n/a" else "") for c in cells],
                          style=self.rows.styles[index])
            note = self.rows.notes[index] if index < len(self.rows.notes) else None
            if note:
                table.add_row(Text(NOTE_INDENT + "  ".join(note_lines(note, 10**6)), style="dim"),
                              *[""] * len(self.columns))
        return table


def compact_table(title: str, key_heading: str, rows: Rows, columns: list[Column]) -> CompactTable:
    """Compact: one space between columns, no outer edge, no cell ever cut or wrapped."""
    return CompactTable(title, key_heading, rows, columns)


def fit(title: str, key_heading: str, rows: Rows, columns: list[Column], width: int) -> list[CompactTable]:
    """One table, or several of the same rows when the columns do not fit in `width`: the key
    column in each, the columns in their order, none cut."""
    # a column is as wide in every part: each is measured once (measuring each part anew as it grew
    # measured a table of n columns n times over)
    parts: list[list[Column]] = [[]]
    key = used = _key_width(key_heading, rows)
    for column in columns:
        column_width = _column_width(column, _heading_lines(column))
        if parts[-1] and used + 2 + column_width > width:
            parts.append([])
            used = key
        parts[-1].append(column)
        used += 2 + column_width
    return [compact_table(title if number == 0 else f"{title.split(':')[0]} (continued)", key_heading, rows, part)
            for number, part in enumerate(parts)]
