"""Tables that fit and sentences that wrap on a rich console, and the texts of their cells: what
the terminal's tables (terminal.py, ranks.py, gate_output.py) are built of."""
from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
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

    def phase(self, name: str) -> None:
        self.keys.append(name)
        self.headings.append(True)
        self.styles.append(None)

    def row(self, key: str, style: Optional[str] = None) -> None:
        self.keys.append(key)
        self.headings.append(False)
        self.styles.append(style)


def _wrapped(heading: str, cells: list) -> str:
    """The heading in lines no wider than the column's cells (never narrower than a word)."""
    widest = max([len(c) for c in cells if c is not None] + [max(len(w) for w in heading.split() or [""])])
    return "\n".join(textwrap.wrap(heading, widest, break_long_words=False)) or heading


def compact_table(title: str, key_heading: str, rows: Rows, columns: list[Column]) -> Table:
    """Compact: one space between columns, no outer edge, no cell ever cut or wrapped."""
    table = Table(title=title or None, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column(key_heading, justify="left", no_wrap=True)
    for column in columns:
        table.add_column(_wrapped(column.heading, column.cells), justify=column.justify, no_wrap=True)
    for index, key in enumerate(rows.keys):
        if rows.headings[index]:
            table.add_row(Text(key, style="bold"), *[""] * len(columns))
            continue
        cells = [column.cells[index] for column in columns]
        table.add_row(key, *[Text(c, style="dim") if c == "n/a" else c for c in cells],
                      style=rows.styles[index])
    return table


def _natural_width(table: Table) -> int:
    """The width `table` takes when nothing is cut."""
    probe = Console(width=10_000, file=io.StringIO())
    return Measurement.get(probe, probe.options, table).maximum


def fit(title: str, key_heading: str, rows: Rows, columns: list[Column], width: int) -> list[Table]:
    """One table, or several of the same rows when the columns do not fit in `width`: the key
    column in each, the columns in their order, none cut."""
    parts: list[list[Column]] = [[]]
    for column in columns:
        if parts[-1] and _natural_width(compact_table("", key_heading, rows, parts[-1] + [column])) > width:
            parts.append([])
        parts[-1].append(column)
    return [compact_table(title if number == 0 else f"{title.split(':')[0]} (continued)", key_heading, rows, part)
            for number, part in enumerate(parts)]
