"""Rich tables for `smlens views`: first the gap per phase and role, then each view.

Reads a views result (`.kernels`, `.groups`, `.gap`, `.selection`, `.devices`, `.view_ids`) and the
views' catalog (views/registry.py): each view's table shows its figures that combine over a group,
with the catalog's labels and units. A missing figure prints as `n/a`, never as 0. Every view's
table ends with its validations: counts, the failures with their discrepancy, and why the rest are n/a.
"""
from __future__ import annotations

import io
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from reports.formatting import in_units, is_missing, number_text, short_kernel_name
from views import registry
from views.catalog import KERNEL, Figure

MAX_FAILURES = 5

Fmt = Callable[[Any], str]


def pct(value) -> str:
    return "n/a" if is_missing(value) else f"{float(value):.1f}"


def share(value) -> str:
    return "n/a" if is_missing(value) else f"{100 * float(value):.0f}%"


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


# How a figure of each unit prints, and what its heading adds to the label.
_FORMATS: dict[str, Fmt] = {"%": pct, "share": share, "ratio": ratio, "ns": us, "GHz": ratio,
                            "bytes": lambda v: si(v, "B"), "ops": si, "FLOP": si, "text": text}
_HEADING_UNITS = {"%": "%", "ns": "µs", "GHz": "GHz"}


def heading(figure: Figure) -> str:
    unit = _HEADING_UNITS.get(figure.unit)
    return f"{figure.label} {unit}" if unit else figure.label


def formatter(figure: Figure) -> Fmt:
    return _FORMATS.get(figure.unit, number_text)


def _cell(rendered: str) -> Text:
    return Text(rendered, style="dim") if rendered == "n/a" else Text(rendered)


def _table(title: str, columns: list[tuple[str, str]], wrap: tuple[str, ...] = ()) -> Table:
    """Compact: one space between columns, no outer edge; only the `wrap` columns may wrap."""
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for heading, justify in columns:
        table.add_column(heading, justify=justify, no_wrap=heading not in wrap, min_width=len(heading),
                         overflow="fold" if heading in wrap else "ellipsis")
    return table


def _group_label(row) -> tuple[str, str]:
    return str(row["phase"]), str(row["role"])


def _phase_heading(table: Table, phase: str, previous: Optional[str]) -> str:
    """Rows are grouped under a heading row per phase (saves a column on narrow terminals)."""
    if phase != previous:
        table.add_row(Text(phase, style="bold underline"), *[""] * (len(table.columns) - 1))
    return phase


# --- the gap ---------------------------------------------------------------------------------------

GAP_COLUMNS = [
    ("phase / role", "left"), ("time%", "right"), ("headline", "right"), ("active", "right"),
    ("tensor", "right"), ("useful", "right"), ("cover", "right"), ("occup", "right"), ("fill", "right"),
    ("top stall", "left")]


def gap_table(gap: pd.DataFrame) -> Table:
    """headline sm__throughput -> SM active -> tensor pipe -> useful tensor, and what explains each."""
    table = _table("The gap (%): headline SM throughput -> SM active -> tensor pipe -> useful tensor work",
                   GAP_COLUMNS)
    previous = None
    for _, row in gap.iterrows():
        phase, role = _group_label(row)
        previous = _phase_heading(table, phase, previous)
        style = "bold" if role == "all" else None
        cells = [f"  {role}", pct(row.get("time_share_pct")), pct(row.get("sm_throughput_pct")),
                 pct(row.get("sm_active_pct")), pct(row.get("tensor_pipe_pct")),
                 pct(row.get("useful_tensor_pct")), share(row.get("sm_coverage")),
                 pct(row.get("achieved_occupancy_pct")), ratio(row.get("fill")), text(row.get("top_stall"))]
        table.add_row(*[_cell(c) for c in cells], style=style)
    return table


GAP_LEGEND = ("headline: sm__throughput, what tools call SM utilization. active: share of elapsed cycles "
              "the SMs had work (explained by cover, the SMs the grid reaches, and waves, V5). tensor: "
              "tensor-pipe busy share of active cycles (explained by occup(ancy), V4, and stalls, V6). "
              "useful: tensor x fill, the tensor work that was not padding (V3).")


# --- one table per view ------------------------------------------------------------------------------


def _checks(row, view: str) -> str:
    counts = [row.get(f"{view}_{s}") for s in ("pass", "fail", "n/a")]
    if any(is_missing(c) for c in counts):
        return "n/a"
    passed, failed, na = (int(c) for c in counts)
    return f"{passed}/{failed}/{na}"


def _group_figures(result, view: str) -> list[Figure]:
    """The view's figures that combine over a group, in its order (per-kernel ones are left to
    --format json and csv)."""
    return [f for f in registry.view_figures(view)
            if f.aggregate != KERNEL and f.column in result.groups.columns]


def view_tables(result, view: str, width: int = 80) -> list[Table]:
    """The view's group figures per phase and role, then its checks per group; as several tables
    of the same rows when its figures do not fit in `width` columns."""
    shown = _group_figures(result, view)
    if not shown:  # a view whose figures are all per kernel (V8: its selection table says it)
        return []
    rows = [(str(row["phase"]), str(row["role"]), row) for _, row in result.groups.iterrows()]
    cells = {f.column: [formatter(f)(row.get(f.column)) for _, _, row in rows] for f in shown}
    checks = [_checks(row, view) for _, _, row in rows]

    def table(number: int, figures: list[Figure]) -> Table:
        title = f"{view} (continued)" if number else f"{view} {registry.title(view)}"
        out = _table(title, [("phase / role", "left")]
                     + [(heading(f), "left" if f.is_text else "right") for f in figures]
                     + ([("checks", "right")] if number == 0 else []))  # pass/fail/n/a
        previous = None
        for index, (phase, role, _) in enumerate(rows):
            previous = _phase_heading(out, phase, previous)
            row_cells = [f"  {role}"] + [cells[f.column][index] for f in figures]
            out.add_row(*[_cell(c) for c in row_cells + ([checks[index]] if number == 0 else [])])
        return out

    parts: list[list[Figure]] = [[]]
    for figure in shown:
        if parts[-1] and _natural_width(table(len(parts) - 1, parts[-1] + [figure])) > width:
            parts.append([])
        parts[-1].append(figure)
    return [table(number, figures) for number, figures in enumerate(parts)]


def _natural_width(table: Table) -> int:
    """The width `table` takes when nothing is cut."""
    probe = Console(width=10_000, file=io.StringIO())
    return Measurement.get(probe, probe.options, table).maximum


def selection_table(selection: pd.DataFrame) -> Table:
    view = registry.SELECTION_VIEW
    table = _table(f"{view} {registry.title(view)}: what ran per phase and role (* changed from the role's first phase)",
                   [("role", "left"), ("phase", "left"), ("kind", "left"), ("choice", "left"),
                    ("kernels", "right"), ("time µs", "right")], wrap=("choice",))
    previous = None
    for _, row in selection.iterrows():
        if previous is not None and row["role"] != previous:
            table.add_section()
        previous = row["role"]
        marker = "* " if bool(row["changed"]) else ""
        table.add_row(str(row["role"]), str(row["phase"]), str(row["kind"]), marker + str(row["choice"]),
                      str(int(row["kernels"])), us(row["time_ns"]))
    return table


def validation_lines(result, view: str, limit: int = MAX_FAILURES) -> list[Text]:
    """The failures with their discrepancy (first `limit`), then why the rest are n/a."""
    k = result.kernels
    status_column, detail_column = f"validation_{view}", f"validation_detail_{view}"
    if status_column not in k.columns:
        return []
    status = k[status_column]
    lines = []
    failed = k[(status == "fail").to_numpy(dtype=bool, na_value=False)]
    for _, row in failed.head(limit).iterrows():
        lines.append(Text.assemble(("  fail ", "bold red"), f"kernel {row.get('kernel_id', '?')} "
                                   f"{short_name(row.get('kernel_name'), 40)} ({row['phase']}/{row['role']}): ",
                                   str(row[detail_column])))
    if len(failed) > limit:
        lines.append(Text(f"  ... and {len(failed) - limit} more failures (--format json lists them all)"))
    na = k[(status == "n/a").to_numpy(dtype=bool, na_value=False)]
    if len(na):
        reasons = na[detail_column].astype(object).value_counts()
        for reason, count in reasons[reasons.index != ""].head(3).items():
            lines.append(Text(f"  n/a  {count} kernels: {reason}", style="dim"))
    return lines


def summary_table(result) -> Table:
    table = _table("Validations (kernels)", [("view", "left"), ("", "left"), ("pass", "right"),
                                             ("fail", "right"), ("n/a", "right")])
    for view in result.view_ids:
        status = result.kernels[f"validation_{view}"]
        counts = [int((status == s).sum()) for s in ("pass", "fail", "n/a")]
        style = "red" if counts[1] else None
        table.add_row(view, registry.title(view), *[str(c) for c in counts], style=style)
    return table


def device_line(devices: pd.DataFrame) -> Optional[str]:
    if devices is None or devices.empty:
        return None
    parts = []
    for _, d in devices.iterrows():
        peak, source = d.get("dram_peak_bytes_per_s"), d.get("dram_peak_source")
        if is_missing(peak) and not is_missing(d.get("dram_peak_from_attributes_bytes_per_s")):
            peak, source = d.get("dram_peak_from_attributes_bytes_per_s"), "device attributes"
        parts.append(f"{text(d.get('name'))}: CC {text(d.get('cc'))}, {number_text(d.get('sm_count'))} SMs, "
                     f"{si(d.get('max_clock_hz'), 'Hz')}, DRAM peak {si(peak, 'B/s')}"
                     + (f" ({source})" if not is_missing(source) else ""))
    return "; ".join(parts)


def print_views(result, run: Optional[dict] = None, console: Optional[Console] = None) -> None:
    """The gap first, then the validations, then each view's table with its checks."""
    console = console or Console()
    run = run or {}
    title = " ".join(str(x) for x in (run.get("name"), f"run {run['id']}" if run.get("id") else None) if x)
    if title:
        console.print(Text(title, style="bold"))
    line = device_line(getattr(result, "devices", None))
    if line:
        console.print(line)
    if result.kernels.empty:
        console.print("no kernels")
        return
    console.print()
    console.print(gap_table(result.gap))
    console.print(Text(GAP_LEGEND, style="dim"))
    console.print()
    console.print(summary_table(result))
    for view in result.view_ids:
        console.print()
        for table in view_tables(result, view, console.width):
            console.print(table)
        if view == registry.SELECTION_VIEW:
            console.print(selection_table(result.selection))
        for text_line in validation_lines(result, view):
            console.print(text_line)


def kernels_csv(result) -> str:
    """The per-kernel table (identity, figures, validations) as CSV; the NVTX stack joined by ' > '."""
    frame = result.kernels
    if "nvtx_stack" in frame.columns:
        frame = frame.assign(nvtx_stack=[" > ".join(s) if isinstance(s, (list, tuple, np.ndarray)) else ""
                                         for s in frame["nvtx_stack"]])
    return frame.to_csv(index=False)
