"""Rich tables for `smlens views`: first the gap per phase and role, then each view.

Reads a views result (`.kernels`, `.groups`, `.gap`, `.selection`, `.devices`, `.view_ids`) without
importing the views package. A missing figure prints as `n/a`, never as 0. Every view's table ends
with its validations: counts, the failures with their discrepancy, and why the rest are n/a.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from reports.formatting import in_units, is_missing, short_kernel_name

TITLES = {"V1": "Time and SM activity", "V2": "Tensor-pipe utilization", "V3": "Fragment fill",
          "V4": "Occupancy and its limiter", "V5": "Wave quantization and tail",
          "V6": "Stall signature", "V7": "Memory traffic and roofline", "V8": "Kernel selection"}
MAX_FAILURES = 5

Fmt = Callable[[Any], str]


def num(value, digits: int = 3) -> str:
    """3 significant digits, thousands grouped above 1000; n/a when missing."""
    if is_missing(value):
        return "n/a"
    value = float(value)
    if value != 0 and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


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


def rank_suffix(row) -> str:
    """` r<rank>` after a role in a tensor-parallel run's tables, nothing for a single-GPU run."""
    rank = row.get("rank")
    return "" if rank is None or is_missing(rank) else f" r{int(rank)}"


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
        cells = [f"  {role}{rank_suffix(row)}", pct(row.get("time_share_pct")), pct(row.get("sm_throughput_pct")),
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


def _mode(kernels: pd.DataFrame, column: str, unless: Optional[str] = None) -> dict:
    """The time-weighted most frequent value of a text figure per (phase, role); `unless` only
    where nothing else occurs (a GEMM's range is `gmma` even if its elementwise kernels run longer)."""
    if column not in kernels.columns or kernels.empty:
        return {}
    frame = pd.DataFrame({"phase": kernels["phase"].astype(object), "role": kernels["role"].astype(object),
                          "value": kernels[column].astype(object), "time": kernels["time_ns"].fillna(0)})
    frame = frame[frame["value"].notna()]
    if unless is not None:
        frame = frame.assign(time=frame["time"] + np.where(frame["value"] == unless, 0.0, 1e30))
    if frame.empty:
        return {}
    weights = frame.groupby(["phase", "role", "value"], sort=False, observed=True)["time"].sum().reset_index()
    best = weights.sort_values("time", ascending=False, kind="stable").drop_duplicates(["phase", "role"])
    return {(p, r): v for p, r, v in zip(best["phase"], best["role"], best["value"])}


# view -> [(heading, group column or ("mode", kernel column), formatter)]
VIEW_COLUMNS: dict[str, list[tuple[str, Any, Fmt]]] = {
    "V1": [("time µs", "time_ns", us), ("time %", "time_share_pct", pct),
           ("headline %", "sm_throughput_pct", pct), ("SM active %", "sm_active_pct", pct),
           ("SM GHz", "sm_clock_ghz", ratio)],
    "V2": [("tensor %", "tensor_pipe_pct", pct), ("of elapsed %", "tensor_pipe_elapsed_pct", pct),
           ("tensor ops", "tensor_ops", si), ("path", ("mode", "mma_path", "none"), text)],
    "V3": [("fill", "fill", ratio), ("tensor %", "tensor_pipe_pct", pct),
           ("useful %", "useful_tensor_pct", pct)],
    "V4": [("achieved %", "achieved_occupancy_pct", pct), ("theoretical %", "theoretical_occupancy_pct", pct),
           ("limiter", ("mode", "occupancy_limiter"), text)],
    "V5": [("wave eff.", "wave_efficiency", ratio), ("SM coverage", "sm_coverage", share),
           ("SM balance", "sm_imbalance", ratio)],
    "V6": [("issue %", "issue_active_pct", pct), ("top stall", "top_stall", text),
           ("memory", "stall_memory_share", share), ("compute", "stall_compute_share", share),
           ("tensor", "stall_tensor_share", share)],
    "V7": [("DRAM %", "dram_pct", pct), ("L2 hit %", "l2_hit_pct", pct), ("DRAM bytes", "dram_bytes", si),
           ("FLOP/B", "intensity", num), ("bound", ("mode", "bound"), text)],
}


def _checks(row, view: str) -> str:
    counts = [row.get(f"{view}_{s}") for s in ("pass", "fail", "n/a")]
    if any(is_missing(c) for c in counts):
        return "n/a"
    passed, failed, na = (int(c) for c in counts)
    return f"{passed}/{failed}/{na}"


def view_table(result, view: str) -> Table:
    columns = VIEW_COLUMNS[view]
    modes = {spec[1]: _mode(result.kernels, *spec[1:]) for _, spec, _ in columns if isinstance(spec, tuple)}
    table = _table(f"{view} {TITLES.get(view, '')}",
                   [("phase / role", "left")] + [(h, "left" if f is text else "right") for h, _, f in columns]
                   + [("pass/fail/n/a", "right")])
    previous = None
    for _, row in result.groups.iterrows():
        phase, role = _group_label(row)
        previous = _phase_heading(table, phase, previous)
        cells = [f"  {role}{rank_suffix(row)}"]
        for _, spec, fmt in columns:
            value = modes[spec[1]].get((phase, role)) if isinstance(spec, tuple) else row.get(spec)
            cells.append(fmt(value))
        cells.append(_checks(row, view))
        table.add_row(*[_cell(c) for c in cells])
    return table


def selection_table(selection: pd.DataFrame) -> Table:
    table = _table(f"V8 {TITLES['V8']}: what ran per phase and role (* changed from the role's first phase)",
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
        table.add_row(view, TITLES.get(view, ""), *[str(c) for c in counts], style=style)
    return table


def device_line(devices: pd.DataFrame) -> Optional[str]:
    if devices is None or devices.empty:
        return None
    parts = []
    for _, d in devices.iterrows():
        peak, source = d.get("dram_peak_bytes_per_s"), d.get("dram_peak_source")
        if is_missing(peak) and not is_missing(d.get("dram_peak_from_attributes_bytes_per_s")):
            peak, source = d.get("dram_peak_from_attributes_bytes_per_s"), "device attributes"
        parts.append(f"{text(d.get('name'))}: CC {text(d.get('cc'))}, {num(d.get('sm_count'))} SMs, "
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
    _print_ranks(result, console)
    console.print()
    console.print(summary_table(result))
    for view in result.view_ids:
        console.print()
        if view == "V8":
            console.print(selection_table(result.selection))
        else:
            console.print(view_table(result, view))
        for text_line in validation_lines(result, view):
            console.print(text_line)


def _print_ranks(result, console: Console) -> None:
    """Tensor parallel: communication per phase and rank, and the imbalance between ranks."""
    from reports.ranks import COMM_LEGEND, communication_table, imbalance_table
    comm, imbalance = getattr(result, "communication", None), getattr(result, "imbalance", None)
    if comm is not None and not comm.empty:
        console.print()
        console.print(communication_table(comm))
        console.print(Text(COMM_LEGEND, style="dim"))
    if imbalance is not None and not imbalance.empty:
        console.print()
        console.print(imbalance_table(imbalance))


def kernels_csv(result) -> str:
    """The per-kernel table (identity, figures, validations) as CSV; the NVTX stack joined by ' > '."""
    frame = result.kernels
    if "nvtx_stack" in frame.columns:
        frame = frame.assign(nvtx_stack=[" > ".join(s) if isinstance(s, (list, tuple, np.ndarray)) else ""
                                         for s in frame["nvtx_stack"]])
    return frame.to_csv(index=False)
