"""A sweep in the terminal and as JSON: the findings in sentences first, then per phase and role
one row per point with the figures the sweep follows (views/sweep.py), labels, units and
definitions from the catalog."""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd
from rich.console import Console

from reports.formatting import is_missing
from reports.sweep_text import changes_told, findings_told, point_label
from reports.tables import Column, Prose, Rows, fit, output_console, ratio, text
from reports.terminal import heading, legend
from views import registry
from views import sweep as sweep_view

# The columns of a sweep's table, in order: the sweep's own first (time per token), the gap's
# steps, then what explains them.
COLUMNS = ("time_per_token_ns", *sweep_view.GAP_STEPS, "fill", "main_waves", "wave_efficiency",
           "achieved_occupancy_pct", "occupancy_limiter", "top_stall_family", "dram_pct", "bound",
           "main_kernel")
FINDINGS_SHOWN = 12   # in the terminal; the JSON and the report hold all


def catalog() -> dict:
    """Every figure a sweep shows, by column: the views' catalog and the sweep's own."""
    return {**registry.figures(), **{f.column: f for f in sweep_view.FIGURES}}


def _cell(value, unit: str) -> str:
    if unit == "text":
        return text(value) if isinstance(value, str) else "n/a"
    if is_missing(value):
        return "n/a"
    if unit == "ns":
        return f"{float(value) / 1000:.3g}"
    if unit == "%":
        return f"{float(value):.1f}"
    return ratio(value)


def _heading(figure) -> str:
    return f"{figure.label} µs" if figure.unit == "ns" else heading(figure)


def sweep_tables(result: sweep_view.SweepResult, width: int, phase=None, role=None):
    """The tables (split to fit `width`) and their columns, for the legend."""
    series = result.series
    if series.empty:
        return [], []
    if phase:
        series = series[series["phase"].isin([phase] if isinstance(phase, str) else phase)]
    if role:
        series = series[series["role"].isin([role] if isinstance(role, str) else role)]
    figures = catalog()
    rows, cells = Rows(), {c: [] for c in COLUMNS}
    current = None
    for row in series.to_dict("records"):
        group = f"{row['phase']} · {row['role']}"
        if group != current:
            rows.phase(group)
            for c in COLUMNS:
                cells[c].append(None)
            current = group
        status = "" if row["status"] == sweep_view.COMPLETE else f" ({row['status']})"
        rows.row(f"  {point_label(row)}{status}")
        for c in COLUMNS:
            cells[c].append(_cell(row.get(c), figures[c].unit))
    columns = [Column(_heading(figures[c]), cells[c], "left" if figures[c].unit == "text" else "right",
                      figures[c].definition) for c in COLUMNS]
    return fit("sweep", "phase · role / point", rows, columns, width), columns


def print_sweep(result: sweep_view.SweepResult, sweep_id: Optional[str] = None,
                console: Optional[Console] = None, phase=None, role=None) -> None:
    console = console or output_console()
    points = result.points
    complete = int((points["status"] == sweep_view.COMPLETE).sum())
    title = (f"sweep{' ' + sweep_id if sweep_id else ''}: {len(points)} point(s), {complete} measured whole; "
             + ", ".join(f"{axis} {', '.join(str(v) for v in result.axis_values(axis))}"
                         for axis in sweep_view.AXES))
    models = [m for m in dict.fromkeys(points["model"]) if isinstance(m, str)]
    if models:
        title += f"; {', '.join(models)}"
    console.print(Prose(title, style="bold"))
    shown = findings_told(result.findings[:FINDINGS_SHOWN])
    for finding in shown:
        console.print(Prose(f"- {finding['text']}"))
    if len(result.findings) > len(shown):
        console.print(Prose(f"({len(result.findings) - len(shown)} more finding(s) in --format json and "
                            "the report)", style="dim"))
    if not result.findings:
        console.print(Prose("nothing changes between neighbouring points: the bound, the kernels "
                            "chosen, the wave counts and the useful MMA shares hold across the sweep"))
    console.print()
    tables, columns = sweep_tables(result, console.width, phase, role)
    for table in tables:
        console.print(table)
    if columns:
        console.print(legend(columns))


def _plain(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


def _records(frame: pd.DataFrame) -> list[dict]:
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def sweep_json(result: sweep_view.SweepResult, sweep_id: Optional[str] = None) -> dict:
    """The sweep as one JSON document: points, findings, per point the followed figures, the
    changes, and each figure's label, unit and direction."""
    figures = catalog()
    columns = [c for c in ("model", "batch", "prompt", "run_id", "status", "phase", "role", *COLUMNS,
                           "time_ns", "time_share_pct", "bound_pct") if c in result.series.columns]
    return {
        "sweep": sweep_id,
        "axes": {axis: result.axis_values(axis) for axis in sweep_view.AXES},
        "models": [m for m in dict.fromkeys(result.points["model"]) if isinstance(m, str)],
        "points": _records(result.points),
        "findings": [{k: _plain(v) for k, v in f.items()} for f in findings_told(result.findings)],
        "series": _records(result.series[columns]) if len(result.series) else [],
        "changes": _records(changes_told(result.changes)),
        "figures": {c: {"label": figures[c].label, "unit": figures[c].unit, "better": figures[c].better,
                        "definition": figures[c].definition} for c in COLUMNS},
    }
