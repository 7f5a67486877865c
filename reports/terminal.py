"""Rich tables for `smlens views`: the verdict, the gap per phase and role, then each view.

Reads a views result (`.kernels`, `.groups`, `.gap`, `.selection`, `.devices`, `.view_ids`), the
verdict over it (views/verdict.py) and the views' catalog (views/registry.py): each table shows
figures with the catalog's labels and units, and a legend under it gives each column's one-line
definition. A missing figure prints as `n/a`, never as 0. Nothing is cut: a table wider than the
terminal is split into several tables of the same rows (the phase and role repeated in each), and
a heading wraps between words. Piped output is as wide as its widest table.
"""
from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from reports.formatting import is_missing, na_advice, number_text, value_text
from reports.ranks import COMM_LEGEND, collectives_table, communication_table, imbalance_table
from reports.verdict_text import group_text, setup_text, summary_text, verdict_document, waiting_text
from reports.tables import (PIPED_WIDTH, Column, CompactTable, Prose, Rows, compact_table, fit, output_console, pct,
                            ratio, share, short_name, si, text, us)
from views import gap as gap_module, registry
from views.catalog import KERNEL, Figure
from views.grouping import ROLE_ORDER
from views.top_kernels import top_kernels
from views.verdict import Verdict, verdict as make_verdict
from views.vocabulary import COLLECTIVE_ROLES, OUTSIDE_PHASES

MAX_FAILURES = 5
NO_CUT = 10**6  # a name's width limit that never cuts it
TOP_KERNELS = 10
# How a figure of each unit prints, and what its heading adds to the label.
_FORMATS: dict[str, Fmt] = {"%": pct, "share": share, "ratio": ratio, "ns": us, "GHz": ratio,
                            "bytes": lambda v: si(v, "B"), "ops": si, "FLOP": si, "text": text}
_HEADING_UNITS = {"%": "%", "share": "%", "ns": "µs", "GHz": "GHz"}


def heading(figure: Figure) -> str:
    unit = _HEADING_UNITS.get(figure.unit)
    return f"{figure.label} {unit}" if unit else figure.label


def formatter(figure: Figure) -> Fmt:
    if figure.is_text:
        return lambda v: "n/a" if is_missing(v) else value_text(figure.column, v)
    return _FORMATS.get(figure.unit, number_text)


def legend(columns: list[Column]) -> Prose:
    """Each column's definition, one line each."""
    lines = [f"{c.heading}: {c.definition}" for c in columns if c.definition]
    return Prose("\n".join(lines), style="dim")


def _grouped_rows(frame: pd.DataFrame) -> tuple[Rows, list[int]]:
    """Rows under a heading per phase; the frame's row positions, None on heading rows."""
    rows, positions, previous = Rows(), [], None
    ranks = frame["rank"].astype(object) if "rank" in frame.columns else [None] * len(frame)
    # a role no role range named (guessed from kernel names or launch order) is marked GUESSED
    sources = frame["role_source"].astype(object).tolist() if "role_source" in frame.columns else [None] * len(frame)
    phases = frame["phase"].astype(object).tolist()
    for position, (phase, role, rank) in enumerate(zip(phases, frame["role"].astype(object), ranks)):
        if phase != previous:
            rows.phase(_phase_title(str(phase), set(phases)))
            positions.append(None)
            previous = phase
        guessed = GUESSED if role != "all" and str(sources[position]) in ("name", "order") else ""
        rows.row(f"  {role}{guessed}{rank_suffix(rank)}", "bold" if role == "all" else None)
        positions.append(position)
    return rows, positions


def rank_suffix(rank) -> str:
    """` r<rank>` after a role in a tensor-parallel run's tables, nothing for a single-GPU run."""
    return "" if rank is None or is_missing(rank) else f" r{int(rank)}"


def _phase_title(phase: str, phases: set) -> str:
    if phase == "other" and len(phases) > 1:
        return "other (setup)"
    return phase


def _figure_column(figure: Figure, frame: pd.DataFrame, positions: list, label: str | None = None) -> Column:
    values = frame[figure.column].tolist() if figure.column in frame.columns else [None] * len(frame)
    show = formatter(figure)
    return Column(label or heading(figure), [None if p is None else show(values[p]) for p in positions],
                  "left" if figure.is_text else "right", figure.definition)


# --- the verdict -----------------------------------------------------------------------------------

def _pct_text(value: float) -> str:
    return "n/a" if is_missing(value) else f"{value:.1f}"


def verdict_parts(verdict: Verdict, width: int) -> list:
    """The verdict's sentence, its phases as a table, the ranked opportunities and the setup."""
    parts: list = [Text("Verdict", style="bold"), Prose(summary_text(verdict))]
    if verdict.phases:
        rows = Rows()
        for phase in verdict.phases:
            rows.row(phase.phase)
        columns = [
            Column("share %", [_pct_text(p.share_pct) for p in verdict.phases],
                   definition="the phase's share of the workload's kernel time (setup left out)"),
            Column("time µs", [us(p.time_ns) for p in verdict.phases], definition="gpu__time_duration.sum, summed"),
            Column("bound, % of its time", [", ".join(f"{b} {s:.0f}" for b, s in p.bounds.items() if s >= 0.5)
                                            or "n/a" for p in verdict.phases], "left",
                   "what holds each phase and role back: the unit nearest its peak when at 60 % or more "
                   "(memory: DRAM, tensor: the tensor pipe, fp32: the FP32 pipes), else latency"),
            Column("DRAM %", [_pct_text(p.dram_pct) for p in verdict.phases],
                   definition="dram__throughput, % of peak, time-weighted"),
            Column("tensor %", [_pct_text(p.tensor_pct) for p in verdict.phases],
                   definition="tensor pipe busy, % of elapsed cycles, time-weighted"),
            Column("FP32 %", [_pct_text(p.fp32_pct) for p in verdict.phases],
                   definition="FP32 FLOP/s against the device's FP32 peak, time-weighted"),
            Column("SM active %", [_pct_text(p.sm_active_pct) for p in verdict.phases],
                   definition="share of elapsed cycles the SMs had work, time-weighted"),
        ]
        parts += fit("", "phase", rows, columns, width)
        parts.append(legend(columns))
    if verdict.opportunities:
        parts.append(Text(""))
        parts.append(Text("Where time can be won (time x headroom to the bound unit's peak):", style="bold"))
        for rank, group in enumerate(verdict.opportunities, 1):
            parts.append(Prose(f"{rank}. {group_text(group)}"))
    if verdict.setup is not None:
        parts.append(Prose(setup_text(verdict.setup), style="dim"))
    if getattr(verdict, "waiting", None) is not None:  # tensor parallel: apart, as the setup
        parts.append(Prose(waiting_text(verdict.waiting), style="dim"))
    return parts


# --- the gap ---------------------------------------------------------------------------------------

GUESSED = "?"  # a guessed role; `*` marks a changed choice in V8's table


def shares_of(phase_time_ns: dict) -> str:
    """What the time shares are of: the run's kernel time, or after a phase filter the phases'
    (registry.share_basis)."""
    if not phase_time_ns:
        return "the run's kernel time"
    return f"{' and '.join(phase_time_ns)}'s kernel time ({us(sum(phase_time_ns.values()))} µs)"


def _filtered_without_phase(result) -> bool:
    """A result filtered by role or kernel name, not by phase (ViewsResult.filter): its groups hold
    less than the whole run's time, which its gap's shares stay shares of."""
    if getattr(result, "phase_time_ns", None):
        return False
    total = float(getattr(result, "total_time_ns", float("nan")))
    groups = result.groups
    if groups is None or groups.empty or not np.isfinite(total):
        return False
    held = pd.to_numeric(groups.loc[groups["role"].astype(object) != "all", "time_ns"], errors="coerce").sum()
    return bool(held < total * (1 - 1e-9))


def share_basis_line(result) -> Optional[str]:
    """What a filtered result's time shares are of, said once above its verdict; None unfiltered."""
    phase_time_ns = getattr(result, "phase_time_ns", None)
    if phase_time_ns:
        return f"time shares are of {shares_of(phase_time_ns)}"
    if _filtered_without_phase(result):
        return f"time shares are of the run's kernel time ({us(result.total_time_ns)} µs), in the verdict as in the tables"
    return None


def verdict_of(result) -> Verdict:
    """The verdict with the gap's shares: after a role or kernel filter, of the whole run's time
    (the verdict alone would take the kernels shown for the workload: "44 % of the workload" for
    a phase's attention, where the gap says 0.9 %)."""
    if _filtered_without_phase(result):
        result = replace(result, phase_time_ns={"run": float(result.total_time_ns)})
    return make_verdict(result)


# --- the kernels of most time ------------------------------------------------------------------------

def _kernel_text(label, name) -> str:
    """A kernel as the table names it: its NVTX range's name where known, its own name beside."""
    short = short_name(name, NO_CUT) if name else "n/a"
    return f"{label} ({short})" if label else short


def _count(value) -> str:
    return "n/a" if is_missing(value) else f"{int(value):,}"


def top_kernels_tables(top: pd.DataFrame, width: int, basis: str = "the run's kernel time") -> list:
    """The kernels of most time (views/top_kernels.py), one row each; their names in a column when
    the table fits in `width`, else each on lines of its own under its row (never cut)."""
    if top.empty:
        return []
    rows = Rows()
    for rank in range(1, len(top) + 1):
        rows.row(str(rank))
    ranks = [rank_suffix(r) for r in top["rank"]] if "rank" in top else [""] * len(top)
    columns = [
        Column("time µs", [us(v) for v in top["time_ns"]], definition="gpu__time_duration.sum over its launches"),
        Column("share %", [pct(v) for v in top["share_pct"]], definition=f"of {basis}"),
        Column("launches", [_count(v) for v in top["launches"]], definition="kernel launches profiled"),
        Column("grid", [_count(v) for v in top["grid_blocks"]], definition="launch__grid_size: blocks"),
        Column("block", [_count(v) for v in top["block_threads"]], definition="launch__block_size: threads"),
        Column("registers", [_count(v) for v in top["registers_per_thread"]],
               definition="launch__registers_per_thread"),
        Column("phase", [_phase_title(text(v), set(top["phase"])) for v in top["phase"]], "left"),
        Column("role", [f"{text(r)}{k}" for r, k in zip(top["role"], ranks)], "left"),
    ]
    names = [_kernel_text(label, name) for label, name in zip(top["label"], top["kernel_name"])]
    title = "Kernels of most time (named by their NVTX range where known)"
    whole = CompactTable(title, "#", rows, columns + [Column("kernel", names, "left")])
    if whole.width <= width:
        return [whole]
    tables = fit(title, "#", replace(rows, notes=names), columns, width)  # narrower still: continued
    for table in tables[1:]:
        table.rows = rows  # the names once, under the first part's rows
    return tables


def top_kernels_of(result, raw: Optional[pd.DataFrame] = None, limit: int = TOP_KERNELS) -> pd.DataFrame:
    """The result's kernels of most time, their shares on the gap's basis."""
    phase_time_ns = getattr(result, "phase_time_ns", None)
    total = sum(phase_time_ns.values()) if phase_time_ns else float(getattr(result, "total_time_ns", float("nan")))
    return top_kernels(result.kernels, total, raw, limit, getattr(result, "rank_time_ns", None))


def gap_tables(gap: pd.DataFrame, width: int = 80, phase_time_ns: Optional[dict] = None
               ) -> tuple[list[CompactTable], list[Column]]:
    """The gap per phase and role on one basis, every step a share of elapsed time and each at most
    the one before (the headline beside, no step), the factor each step loses, the memory side and
    the figures that explain the steps, with the catalog's labels: (tables, their columns)."""
    catalog = {**registry.figures(), **registry.gap_figures()}
    rows, positions = _grouped_rows(gap)
    share_column = Column("time %", [None if p is None else pct(gap["time_share_pct"].iloc[p]) for p in positions],
                          definition=f"the group's share of {shares_of(phase_time_ns or {})}")
    shown = (gap_module.HEADLINE, *gap_module.STEPS, *gap_module.FACTORS, *gap_module.MEMORY,
             *gap_module.EXPLAINERS)
    columns = [share_column] + [_figure_column(catalog[c], gap, positions) for c in shown if c in catalog]
    title = "The gap: shares of elapsed time from SM active to useful tensor work, beside the headline"
    return fit(title, "phase / role", rows, columns, width), columns


# --- one table per view ------------------------------------------------------------------------------


def _checks(groups: pd.DataFrame, view: str) -> list[str]:
    """Each group's `passed/failed/n/a` kernels of the view, n/a where a count is missing."""
    names = [f"{view}_{s}" for s in ("pass", "fail", "n/a")]
    counts = zip(*[groups[n].tolist() if n in groups.columns else [None] * len(groups) for n in names])
    return ["n/a" if any(is_missing(c) for c in row) else "/".join(str(int(c)) for c in row) for row in counts]


CHECKS_DEFINITION = "kernels whose validation passed / failed / was n/a"


def _group_figures(result, view: str) -> list[Figure]:
    """The view's figures that combine over a group, in its order (per-kernel ones are left to
    --format json and csv)."""
    return [f for f in registry.view_figures(view)
            if f.aggregate != KERNEL and f.column in result.groups.columns]


def view_tables(result, view: str, width: int = 80) -> tuple[list[CompactTable], list[Column]]:
    """The view's group figures per phase and role, and its checks per group; several tables of
    the same rows when they do not fit in `width` columns."""
    shown = _group_figures(result, view)
    if not shown:  # a view whose figures are all per kernel (V8: its selection table says it)
        return [], []
    groups = result.groups.reset_index(drop=True)
    rows, positions = _grouped_rows(groups)
    columns = [_figure_column(f, groups, positions) for f in shown]
    checks = _checks(groups, view)
    columns.append(Column("checks", [None if p is None else checks[p] for p in positions],
                          definition=CHECKS_DEFINITION))
    return fit(f"{view} {registry.title(view)}", "phase / role", rows, columns, width), columns


SELECTION_HEADINGS = (("role", "left"), ("phase", "left"), ("kind", "left"), ("choice", "left"),
                      ("kernels", "right"), ("time µs", "right"))


class SelectionTable(CompactTable):
    """V8's choices per role and phase, a blank line between roles, as rich's Table draws them
    (headings whole, n/a plain, a bold title), written directly where it fits (rich measured its
    every cell: 20 to 50 ms of `smlens views`, BENCHMARKS.md); narrower, rich's Table, which
    wraps the choices."""

    TITLE_STYLE = "bold"
    WRAP_HEADINGS = False
    DIM_MISSING = False

    def __init__(self, selection: pd.DataFrame):
        self.selection = selection
        rows, cells = Rows(), [[] for _ in SELECTION_HEADINGS[1:]]
        for index, row in enumerate(_selection_rows(selection)):
            if index and row[0] != rows.keys[-1]:  # a new role: rich's section, a line of spaces
                rows.row("")
                for column in cells:
                    column.append("")
            rows.row(row[0])
            for column, cell in zip(cells, row[1:]):
                column.append(cell)
        view = registry.SELECTION_VIEW
        super().__init__(f"{view} {registry.title(view)}: what ran per phase and role (* changed from the "
                         "role's first phase)", SELECTION_HEADINGS[0][0], rows,
                         [Column(h, c, justify) for (h, justify), c in zip(SELECTION_HEADINGS[1:], cells)])

    def rich_table(self) -> Table:
        table = Table(title=self.title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
        for name, justify in SELECTION_HEADINGS:
            table.add_column(name, justify=justify, no_wrap=name != "choice", overflow="fold")
        previous = None
        for row in _selection_rows(self.selection):
            if previous is not None and row[0] != previous:
                table.add_section()
            previous = row[0]
            table.add_row(*row)
        return table


def _selection_rows(selection: pd.DataFrame) -> list[tuple]:
    """The selection's rows as the table's texts."""
    return [(str(role), str(phase), str(kind), ("* " if bool(changed) else "") + str(choice), str(int(kernels)),
             us(time_ns))
            for role, phase, kind, choice, kernels, time_ns, changed in
            zip(*(selection[c].tolist() for c in ("role", "phase", "kind", "choice", "kernels", "time_ns",
                                                  "changed")))]


def selection_table(selection: pd.DataFrame) -> SelectionTable:
    return SelectionTable(selection)


def validation_lines(result, view: str, limit: int = MAX_FAILURES) -> list[Text]:
    """The failures with their discrepancy (first `limit`), then why the rest are n/a and what to do.
    Kernel names are whole (the line wraps between words instead)."""
    k = result.kernels
    status_column, detail_column = f"validation_{view}", f"validation_detail_{view}"
    if status_column not in k.columns:
        return []
    status = k[status_column].to_numpy(dtype=object)
    lines = []
    failed = np.flatnonzero(status == "fail")

    def cells(column: str, at) -> list:  # the rows `at` only: a view's kernels table is wide
        return k[column].iloc[at].tolist() if column in k.columns else [None] * len(at)

    shown = failed[:limit]
    for kernel_id, name, phase, role, detail in zip(*[cells(c, shown) for c in (
            "kernel_id", "kernel_name", "phase", "role", detail_column)]) if len(shown) else ():
        lines.append(Text.assemble(("  fail ", "bold red"), f"kernel {'?' if is_missing(kernel_id) else kernel_id} "
                                   f"{short_name(name, NO_CUT)} ({phase}/{role}): ", str(detail)))
    if len(failed) > limit:
        lines.append(Text(f"  ... and {len(failed) - limit} more failures (--format json lists them all)"))
    not_applicable = np.flatnonzero(status == "n/a")
    if not len(not_applicable):
        return lines
    reasons = pd.Series(cells(detail_column, not_applicable), dtype=object).value_counts()
    for reason, count in reasons[reasons.index != ""].head(3).items():
        lines.append(Text(f"  n/a  {count} kernels: {na_advice(reason)}", style="dim"))
    return lines


def summary_table(result) -> Table:
    rows = Rows()
    counts = {s: [] for s in ("pass", "fail", "n/a")}
    for view in result.view_ids:
        status = result.kernels[f"validation_{view}"]
        for s in counts:
            counts[s].append(str(int((status == s).sum())))
        rows.row(view, "red" if counts["fail"][-1] != "0" else None)
    titles = Column("", [registry.title(v) for v in result.view_ids], "left")
    return compact_table("Validations (kernels)", "view", rows, [titles] + [Column(s, counts[s]) for s in counts])


def _sourced(text: str, source) -> str:
    """A constant and where it came from (`capture: <metric>`, `table: CC 9.0`)."""
    return text if is_missing(source) else f"{text} ({source})"


def device_line(devices: pd.DataFrame) -> Optional[str]:
    if devices is None or devices.empty:
        return None
    parts = []
    for _, d in devices.iterrows():
        peak, source = d.get("dram_peak_bytes_per_s"), d.get("dram_peak_source")
        if is_missing(peak) and not is_missing(d.get("dram_peak_from_attributes_bytes_per_s")):
            peak, source = d.get("dram_peak_from_attributes_bytes_per_s"), "capture: device attributes"
        # a details-page export may name no device and carry none of its attributes (seen: an RTX
        # 5090's): say what the capture lacks rather than print a bare n/a
        sm_count, clock_hz, name = d.get("sm_count"), d.get("max_clock_hz"), d.get("name")
        facts = ["CC not in the capture" if is_missing(d.get("cc")) else f"CC {d.get('cc')}",
                 "SM count not in the capture" if is_missing(sm_count)
                 else _sourced(f"{number_text(sm_count)} SMs", d.get("sm_count_source")),
                 "clock not in the capture" if is_missing(clock_hz)
                 else _sourced(f"{'clock' if 'measured' in str(d.get('max_clock_source')) else 'max clock'} "
                               f"{si(clock_hz, 'Hz')}", d.get("max_clock_source")),
                 "DRAM peak not known" if is_missing(peak) else _sourced(f"DRAM peak {si(peak, 'B/s')}", source)]
        parts.append(f"{'device not named in the capture' if is_missing(name) else name}: " + ", ".join(facts))
    # one line per kind of GPU: a tensor-parallel run's ranks on the same model are "2 x ..."
    counts = {part: parts.count(part) for part in parts}
    return "; ".join(part if n == 1 else f"{n} x {part}" for part, n in counts.items())


def clock_text(measured_hz, max_hz, state) -> Optional[str]:
    """How the clocks ran during the capture (views.device.clock_state), or None when not measured."""
    if is_missing(measured_hz):
        return None
    seen = f"SM clock {si(measured_hz, 'Hz')} measured"
    if is_missing(max_hz) or is_missing(state):
        return seen + " (the maximum is not known: locked clocks cannot be told)"
    share = f"{100 * measured_hz / max_hz:.0f} % of its {si(max_hz, 'Hz')} maximum"
    if state == "locked":
        return (f"{seen}, {share}: clocks locked below boost (ncu's default --clock-control base); every "
                "time is at that clock, longer than the program's own: compare with --clock-control none")
    return f"{seen}, {share}: clocks not locked"


def capture_line(devices: Optional[pd.DataFrame], kernels: Optional[pd.DataFrame] = None,
                 run: Optional[dict] = None) -> Optional[str]:
    """How the capture was made, as far as it says: the clocks per device, the kernels ncu could not
    measure, the replay passes and the ncu version."""
    parts = []
    for _, d in (devices if devices is not None else pd.DataFrame()).iterrows():
        clock = clock_text(d.get("sm_clock_measured_hz"), d.get("max_clock_hz"), d.get("clocks"))
        if clock:
            parts.append(clock)
    if kernels is not None and "measured" in kernels:
        lost = kernels.loc[~kernels["measured"].fillna(True).astype(bool), "kernel_id"].tolist() \
            if "kernel_id" in kernels else []
        if lost:
            shown = ", ".join(str(i) for i in lost[:5]) + (" ..." if len(lost) > 5 else "")
            parts.append(f"{len(lost)} kernel(s) ncu could not measure (ID {shown}): kept, n/a, left out of the sums")
    facts = (run or {}).get("capture")
    facts = facts if isinstance(facts, dict) else {}
    if not is_missing(facts.get("replay_passes")):
        parts.append(f"{number_text(facts['replay_passes'])} replay passes per kernel")
    version = (run or {}).get("ncu_version")
    parts.append(f"ncu {version}" if not is_missing(version) else "ncu version not in the capture")
    return "Capture: " + "; ".join(parts) if parts else None


def mlp_lines(mlp: Optional[pd.DataFrame]) -> list[str]:
    """The activation's share of the MLP block's time, one line per phase (views/mlp.py)."""
    if mlp is None or mlp.empty:
        return []
    lines = ["MLP: the activation's share of the MLP block's time (act(gate) x up)"]
    for _, row in mlp.iterrows():
        lines.append(f"  {text(row['phase']):<13} {pct(row['activation_share_of_mlp_pct']):>5} %  "
                     f"({us(row['activation_time_ns'])} of {us(row['mlp_time_ns'])} us, "
                     f"{int(row['activation_kernels'])} of {int(row['mlp_kernels'])} kernels)")
    return lines


def _with_capture(run: dict) -> dict:
    """A runs-table row with its `capture` facts decoded (a JSON text in the table)."""
    facts = run.get("capture")
    if isinstance(facts, str):
        try:
            return {**run, "capture": json.loads(facts)}
        except ValueError:
            return {**run, "capture": {}}
    return run


def run_title(run: dict) -> str:
    return " ".join(str(x) for x in (run.get("name"), f"run {run['id']}" if run.get("id") else None) if x)


def print_views(result, run: Optional[dict] = None, console: Optional[Console] = None,
                verdict: Optional[Verdict] = None, raw: Optional[pd.DataFrame] = None,
                only_views: bool = False) -> None:
    """The verdict first, then the gap, the kernels of most time (`raw`: the capture's kernels, for
    their registers), the validations, and each view's table with its checks. `only_views`
    (`--view V8`): the run's title and the views of the result alone."""
    console = console or output_console()
    width = console.width
    run = run or {}
    title = run_title(run)
    if title:
        console.print(Text(title, style="bold"))
    if only_views and not result.kernels.empty:
        _print_each_view(result, console)
        return
    for line in (device_line(getattr(result, "devices", None)),
                 capture_line(getattr(result, "devices", None), result.kernels, _with_capture(run))):
        if line:
            console.print(Prose(line))
    if result.kernels.empty:
        console.print("no kernels")
        return
    phase_time_ns = getattr(result, "phase_time_ns", None)
    basis = share_basis_line(result)
    if basis:
        console.print(Prose(basis, style="dim"))
    console.print()
    for part in verdict_parts(verdict or verdict_of(result), width):
        console.print(part)
    console.print()
    tables, columns = gap_tables(result.gap, width, phase_time_ns)
    for table in tables:
        console.print(table)
    console.print(legend(columns))
    console.print(Prose(f"{GUESSED} after a role: guessed from kernel names or launch order (no role range). "
                       "docs/VIEWS.md defines every figure.", style="dim"))
    for line in mlp_lines(getattr(result, "mlp", None)):
        console.print(Prose(line))
    _print_ranks(result, console)
    console.print()
    tables = top_kernels_tables(top_kernels_of(result, raw), width, shares_of(phase_time_ns or {}))
    for table in tables:
        console.print(table)
    if tables:  # its columns say what they are: a line of their sources
        console.print(Prose("; ".join(f"{c.heading}: {c.definition}" for c in tables[0].columns if c.definition),
                            style="dim"))
    console.print()
    console.print(summary_table(result))
    _print_each_view(result, console)


def _print_each_view(result, console: Console) -> None:
    for view in result.view_ids:
        console.print()
        tables, columns = view_tables(result, view, console.width)
        for table in tables:
            console.print(table)
        if view == registry.SELECTION_VIEW:
            console.print(selection_table(result.selection))
        if columns:
            console.print(legend(columns))
        for text_line in validation_lines(result, view):
            console.print(Prose(text_line))


# --- one screen: `smlens views --brief` ----------------------------------------------------------------

BRIEF_LINES = 40  # a screen: what --brief prints at most
BRIEF_GROUP_COLUMNS = ("phase", "role", "rank", "kernels", "time_ns", "time_share_pct", "bound", "sm_throughput_pct")


def _role_key(role, rank) -> tuple:
    order = list(ROLE_ORDER)
    return (order.index(role) if role in order else len(order), str(role),
            -1 if is_missing(rank) else int(rank))


def phase_role_table(gap: pd.DataFrame, width: int, basis: str = "the run's kernel time") -> list:
    """Each role (a row) in each phase (a column): its share of the time and its bound, one cell,
    setup left out as in the verdict; and the line that says what the cells hold."""
    if gap is None or gap.empty:
        return []
    phases = gap["phase"].astype(object)
    frame = gap[~phases.isin(OUTSIDE_PHASES).to_numpy()] if (~phases.isin(OUTSIDE_PHASES)).any() else gap
    ranks = frame["rank"].astype(object).tolist() if "rank" in frame.columns else [None] * len(frame)
    cells = {(p, r, None if is_missing(k) else int(k)): (share, bound) for p, r, k, share, bound in
             zip(frame["phase"].astype(object), frame["role"].astype(object), ranks, frame["time_share_pct"],
                 frame["bound"].astype(object) if "bound" in frame.columns else [None] * len(frame))}
    keys = sorted(dict.fromkeys((r, k) for _, r, k in cells), key=lambda key: _role_key(*key))
    rows = Rows()
    for role, rank in keys:
        rows.row(f"{role}{rank_suffix(rank)}", "bold" if role == "all" else None)
    columns = []
    for phase in dict.fromkeys(p for p, _, _ in cells):
        texts = []
        for role, rank in keys:
            share_pct, bound = cells.get((phase, role, rank), (None, None))
            if is_missing(bound) and role in COLLECTIVE_ROLES:
                bound = "collective"  # timed without replay: no counters, its time is communication
            texts.append("" if share_pct is None else f"{pct(share_pct):>5} {text(bound)}")
        columns.append(Column(str(phase), texts, "left"))
    table = compact_table("Time % and bound per phase and role", "role", rows, columns)
    return [*fit(table.title, "role", rows, columns, width),
            Prose(f"time %: of {basis}; bound (V7): the unit nearest its peak when at 60 % or more, else "
                  "latency", style="dim")]


def _line_count(parts: list, width: int) -> int:
    probe = Console(width=width, file=io.StringIO(), color_system=None)
    for part in parts:
        probe.print(part)
    return probe.file.getvalue().count("\n")


def brief_parts(result, run: Optional[dict] = None, width: int = 80, verdict: Optional[Verdict] = None,
                raw: Optional[pd.DataFrame] = None, lines: int = BRIEF_LINES) -> list:
    """One screen (at most `lines` lines at `width` columns): the run, the verdict's sentence, each
    phase and role's time and bound, and as many of the kernels of most time (up to ten) as fit."""
    run = run or {}
    head: list = [Text(run_title(run), style="bold")] if run_title(run) else []
    if result.kernels.empty:
        return head + [Text("no kernels")]
    basis = share_basis_line(result)
    basis_text = shares_of(getattr(result, "phase_time_ns", None) or {})
    head += [Prose(basis, style="dim")] if basis else []
    head += [Prose(summary_text(verdict or verdict_of(result))), Text("")]
    table = phase_role_table(result.gap, width, basis_text)
    footer = [Prose("without --brief: the gap and the eight views; --view V4: one view alone", style="dim")]
    if _line_count(head + table + footer, width) <= lines - 5:
        head += table + [Text("")]
    elif table:  # a longer table (a run of many ranks): the full output has it
        head += [Prose("each phase and role's time and bound: too many rows for one screen (smlens views "
                       "has them)", style="dim"), Text("")]
    for limit in range(TOP_KERNELS, 0, -1):
        parts = head + top_kernels_tables(top_kernels_of(result, raw, limit), width, basis_text) + footer
        if _line_count(parts, width) <= lines:
            return parts
    return head + footer


def print_brief(result, run: Optional[dict] = None, console: Optional[Console] = None,
                verdict: Optional[Verdict] = None, raw: Optional[pd.DataFrame] = None) -> None:
    """`smlens views --brief`: brief_parts at the console's width."""
    console = console or output_console()
    width = console.width if console.width < PIPED_WIDTH else 200  # piped: as wide as a wide terminal
    for part in brief_parts(result, run, width, verdict, raw):
        console.print(part)


def _records(frame: pd.DataFrame) -> list[dict]:
    return json.loads(frame.to_json(orient="records"))


def brief_document(result, run_id=None, verdict: Optional[Verdict] = None,
                   raw: Optional[pd.DataFrame] = None) -> dict:
    """`smlens views --brief --format json`: the verdict, each phase and role's time, bound and
    headline, and the ten kernels of most time (their short names and NVTX labels beside)."""
    phase_time_ns = getattr(result, "phase_time_ns", None)
    gap = result.gap if result.gap is not None else pd.DataFrame()
    top = top_kernels_of(result, raw)
    top = top.assign(short_name=[short_name(n, NO_CUT) for n in top["kernel_name"]])
    return {"run": run_id,
            "time_shares_of": {"time_ns": sum(phase_time_ns.values()), "phase_time_ns": phase_time_ns}
            if phase_time_ns else {"time_ns": float(getattr(result, "total_time_ns", float("nan"))),
                                   "phase_time_ns": None},
            "verdict": verdict_document(verdict or verdict_of(result)),
            "groups": _records(gap[[c for c in BRIEF_GROUP_COLUMNS if c in gap.columns]]),
            "top_kernels": _records(top)}


def _print_ranks(result, console: Console) -> None:
    """Tensor parallel: communication per phase and rank, each timed collective, and the imbalance
    between ranks."""
    comm, imbalance = getattr(result, "communication", None), getattr(result, "imbalance", None)
    collectives = getattr(result, "collectives", None)
    if comm is not None and not comm.empty:
        console.print()
        for table in communication_table(comm, console.width):
            console.print(table)
        console.print(Prose(COMM_LEGEND, style="dim"))
    if collectives is not None and not collectives.empty:
        console.print()
        for table in collectives_table(collectives, console.width):
            console.print(table)
    if imbalance is not None and not imbalance.empty:
        console.print()
        for table in imbalance_table(imbalance, console.width):
            console.print(table)

