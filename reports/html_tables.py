"""The report's tables: every cell is escaped here, and nowhere else is HTML built from data.

Columns, labels, definitions (each heading's tooltip), formats and the better direction of each
figure come from the views' catalog (views/registry.py). Wide tables scroll inside their own box
with their key columns and heading row sticky; the page's script sorts any table by a click on a
heading and filters the kernel table. A link `a.kl` (data-f="phase|role", or data-q: a search)
shows the kernels it names.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import pandas as pd

from reports.formatting import in_units, na_advice, value_text
from reports.html_text import (arrow, change_class, col, delta_pct, esc, fmt, fmt_bytes, fmt_time_ns,
                               group_keys, is_missing, na_reasons, numbers, short_name, sort_groups, view_status)
from views import gap as gap_figures, registry
from views.catalog import Figure
from views.top_kernels import range_label, work_ranges
from views.vocabulary import CHOSEN_KINDS, PHASE_ORDER

# --- tables (every cell escaped here, nowhere else) -----------------------------------------------

def _heading(header) -> str:
    """A heading: text, or (text, one-line definition shown as its tooltip)."""
    if isinstance(header, tuple):
        label, title = header
        return f'<th title="{esc(title)}">{esc(label)}</th>' if title else f"<th>{esc(label)}</th>"
    return f"<th>{esc(header)}</th>"


def html_table(headers: list, rows: list, cls: str = "", sticky: int = 0, scroll: bool = False,
               attrs: str = "", sortable: bool = True, totals: Optional[list] = None) -> str:
    """headers: text or (text, definition); rows: lists of cells already escaped (built by _cell).
    `sticky` key columns stay in view when the table scrolls sideways in its box; `scroll` also
    bounds its height (the heading row stays). `totals`: per row, whether it sums others (a phase's
    `all`): sorted, such rows stay after the rest, sorted among themselves."""
    head = "".join(_heading(h) for h in headers)
    totals = totals or [False] * len(rows)
    # a cell's and a row's end tags are implied by the next (HTML's rule): a tenth of the report
    body = "".join(('<tr class="total">' if total else "<tr>") + "".join(f"<td>{c}" for c in row)
                   for row, total in zip(rows, totals))
    classes = " ".join(filter(None, [cls, "sortable" if sortable else "", f"sticky{sticky}" if sticky else ""]))
    box = "tw scroll" if scroll else "tw"
    return (f'<div class="{box}"><table class="{esc(classes)}"{attrs}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


KERNEL_ANCHOR = "kernel-"  # a kernel's page in the report is #kernel-<id> (reports/kernel_page.py)


def kernel_page_link(text: str, kernel_id: Any) -> str:
    """`text` (escaped already) linking to the kernel's page."""
    return f'<a href="#{esc(KERNEL_ANCHOR)}{esc(kernel_id)}">{text}</a>'


def kernels_link(text: str, phase: Any = None, role: Any = None, query: Any = None) -> str:
    """`text` linking to the kernel table, filtered to a phase and role or to a search."""
    if query is not None:
        return f'<a class="kl" href="#kernels" data-q="{esc(query)}">{text}</a>'
    role = "" if role in (None, "all") else role
    return f'<a class="kl" href="#kernels" data-f="{esc(phase)}|{esc(role)}">{text}</a>'


NOT_IN_BASELINE = object()  # the baseline has no such group (not: has it, with a missing value)


def delta_cell(figure: str, current: Any, base: Any = None, formatter: Callable = fmt,
               compare: bool = False, why: str = "") -> str:
    """`value`, or with `compare` `value ▲ +x %`: the arrow says which way it moved, the colour
    whether that is better (green) or worse (red) by the catalog, beyond REGRESSION_PCT.
    `why`: the tooltip of a missing value."""
    text = esc(formatter(current))
    if why and is_missing(current):
        text = f'<span class="na" title="{esc(why)}">{text}</span>'
    if not compare:
        return text
    if base is NOT_IN_BASELINE:
        return f'{text} <span class="d">(not in baseline)</span>'
    delta = delta_pct(current, base)
    if delta is None:
        if is_missing(current) and is_missing(base):
            return text
        return f'{text} <span class="d">(baseline {esc(formatter(base))})</span>'
    return f"{text} {change_span(figure, current, base, formatter)}"


def change_span(figure: str, current: Any, base: Any, formatter: Callable = fmt) -> str:
    """`▲ +x %`: the arrow says which way the figure moved, the colour whether that is better
    (green) or worse (red) by the catalog's direction, beyond REGRESSION_PCT."""
    delta = delta_pct(current, base)
    if delta is None or abs(delta) < 0.05:  # prints as +0.0 %: no change worth a mark
        return ""
    verdict = change_class(figure, delta)
    title = {"good": "better than the baseline", "bad": "worse than the baseline (a regression)"}.get(
        verdict, "changed; this figure has no better direction" if abs(delta) > 0 else "unchanged")
    return (f'<span class="d {verdict}" title="{esc(title)} (baseline {esc(formatter(base))})">'
            f"{arrow(delta)}{delta:+.1f} %</span>")


def badge(status: str, detail: Any = None) -> str:
    cls = {"pass": "ok", "fail": "bad"}.get(status, "na")
    title = f' title="{esc(detail)}"' if status != "pass" and not is_missing(detail) and detail else ""
    # a bold element with a class, not a span: the kernel table holds 8 a kernel
    return f'<b class="{cls}"{title}>{esc(status)}</b>'


def validation_box(kernels: pd.DataFrame, views: Iterable[str], checks: pd.DataFrame,
                   max_failures: int = 8) -> str:
    """Each view's validation status beside its figure; failures with their discrepancy, and why
    the rest are n/a with what to do."""
    parts = []
    for view in views:
        st = view_status(kernels, view, checks)
        counts = f"{st.passed} pass \u00b7 {st.failed} fail \u00b7 {st.not_available} n/a"
        items = "".join(
            f"<li>kernel #{esc(kid)} <code>{esc(name)}</code>: {esc(detail)}</li>"
            for kid, name, detail in st.failures[:max_failures])
        more = (f"<li>and {len(st.failures) - max_failures} more (kernel table)</li>"
                if len(st.failures) > max_failures else "")
        failures = f"<ul>{items}{more}</ul>" if items else ""
        reasons = "".join(f"<li>{count} n/a: {esc(reason)}</li>" for count, reason in na_reasons(kernels, view, checks))
        reasons = f'<ul class="why">{reasons}</ul>' if reasons else ""
        parts.append(f'<div class="vrow" data-view="{esc(view)}">{badge(st.status)} '
                     f'<b>{esc(view)}</b> {esc(registry.title(view))}: {esc(counts)}{failures}{reasons}</div>')
    return f'<aside class="valid"><h4>Validation</h4>{"".join(parts)}</aside>'


def role_source_text(group) -> str:
    """Where the group's role came from; `guessed` when no role range named it (role_source
    `name`: the kernel-name classifier; `order`: an eager run's launch order)."""
    source = group.get("role_source")
    if not isinstance(source, str) or group.get("role") == "all":
        return ""
    return f"guessed ({source})" if source in ("name", "order") else "range"


def group_reasons(kernels: pd.DataFrame, checks: pd.DataFrame, views: Iterable[str]) -> dict:
    """(phase, role, view) -> why the view is n/a there (its commonest reason), for the tooltip of a
    missing group figure; (phase, "all", view) for a phase's total."""
    out: dict = {}
    if kernels is None or kernels.empty:
        return out
    for view in views:
        if view not in checks.columns:
            continue
        na = checks[view] == "n/a"
        frame = pd.DataFrame({"phase": col(kernels, "phase").astype(object)[na],
                              "role": col(kernels, "role").astype(object)[na],
                              "why": checks.loc[na, f"detail_{view}"].astype(object)})
        frame = frame[frame["why"].map(lambda r: not is_missing(r) and r != "").astype(bool).to_numpy()]
        for keys, whys in ((("phase", "role"), frame), (("phase",), frame)):
            for key, part in whys.groupby(list(keys), sort=False):
                key = key if isinstance(key, tuple) else (key,)
                label = key if len(key) == 2 else (key[0], "all")
                out[(*label, view)] = part["why"].value_counts().index[0]
    return out


def _why(reasons: dict, phase: Any, role: Any, column: str) -> str:
    figure = registry.figures().get(column)
    if figure is None:
        return ""
    reason = next((reasons[(phase, role, v)] for v in figure.vouched_by if (phase, role, v) in reasons), None)
    return f"n/a: {na_advice(reason)}" if reason else ""


def group_table(groups: pd.DataFrame, figures: list, base: Optional[pd.DataFrame] = None,
                with_time: bool = True, reasons: Optional[dict] = None, time_label: str = "time") -> str:
    """One row per phase and role: figures as value, or value (delta %) against the baseline; the
    role links to its kernels; a missing value's tooltip says why."""
    if groups is None or groups.empty:
        return '<p class="na">No groups.</p>'
    groups = sort_groups(groups)
    compare = base is not None and not base.empty
    figures = [f for f in figures if f[0] in groups.columns]  # what the views did not give: no column
    lookup = {}
    if compare:
        lookup = {key: r for key, (_, r) in zip(group_keys(base), base.iterrows())}
    total = numbers(groups, "time_ns").sum()
    base_total = numbers(base, "time_ns").sum() if compare else 0.0
    catalog = registry.figures()
    # a column saying where roles came from, when any was guessed
    sourced = "role_source" in groups.columns and groups["role_source"].isin(["name", "order"]).any()
    headers = ["phase", "role"] + ([("role from", "range: a role range named it; guessed: the kernel "
                                     "names (name) or an eager run's launch order (order)")] if sourced else [])
    headers += ([("kernels", "kernel launches profiled"),
                 (time_label, catalog["time_ns"].definition),
                 ("share", "the group's share of the kernel time shown")] if with_time else [])
    headers += [(label, _definition(column)) for column, label, _ in figures]
    reasons = reasons or {}
    rows = []
    for key, (_, g) in zip(group_keys(groups), groups.iterrows()):
        b = lookup.get(key)

        def before(column):
            return b.get(column) if b is not None else NOT_IN_BASELINE

        phase, role = g.get("phase"), g.get("role")
        text = esc(role) + ("" if key[2] is None else f" r{key[2]}")  # a tensor-parallel rank's group
        role_cell = kernels_link(f"<b>{text}</b>" if role == "all" else text, phase, role)
        row = [esc(phase), role_cell] + ([esc(role_source_text(g))] if sourced else [])
        if with_time and "time_share_pct" in groups.columns:
            share, bshare = g.get("time_share_pct"), before("time_share_pct")
        elif with_time:
            share = g.get("time_ns") / total * 100 if total else None
            bshare = (before("time_ns") / base_total * 100 if b is not None and base_total
                      else NOT_IN_BASELINE)
        if with_time:
            row += [delta_cell("kernels", g.get("kernels"), before("kernels"), fmt, compare),
                    delta_cell("time_ns", g.get("time_ns"), before("time_ns"), fmt_time_ns, compare),
                    delta_cell("time_share_pct", share, bshare, _pct, compare)]
        for column, _, formatter in figures:
            row.append(delta_cell(column, g.get(column), before(column), formatter, compare,
                                   _why(reasons, phase, role, column)))
        rows.append(row)
    return html_table(headers, rows, "groups", sticky=2, totals=[k[1] == "all" for k in group_keys(groups)])


def _definition(column: str) -> str:
    figure = registry.figures().get(column)
    if figure is not None:
        return figure.definition
    return GAP_FACTOR_DEFINITIONS.get(column, "")


def mlp_table(mlp: Optional[pd.DataFrame]) -> str:
    """The activation's share of the MLP block's time, per phase (views/mlp.py); nothing without one."""
    if mlp is None or mlp.empty:
        return ""
    rows = [[esc(r["phase"]), _pct(r["activation_share_of_mlp_pct"]),
             fmt_time_ns(r["activation_time_ns"]), fmt_time_ns(r["mlp_time_ns"]),
             f'{int(r["activation_kernels"])} of {int(r["mlp_kernels"])}']
            for _, r in mlp.iterrows()]
    return ("<p>The activation's share of the MLP block's time: act(gate) &times; up and the "
            "other elementwise kernels between gate/up and down, what fusing them into a GEMM could "
            "save at most.</p>"
            + html_table(["phase", "activation share of MLP", "activation time", "MLP time", "kernels"],
                     rows, "mlp"))


def _pct(v: Any) -> str:
    return fmt(v, 3, " %")


def _factor(v: Any) -> str:
    return "\u2014" if is_missing(v) else f"\u00d7{float(v):.3g}"


def _text(v: Any) -> str:
    return "\u2014" if is_missing(v) else str(v)


def _flag(v: Any) -> str:
    return "\u2014" if is_missing(v) else ("yes" if bool(v) else "no")


def _share(v: Any) -> str:
    """A fraction shown as a percentage."""
    return "\u2014" if is_missing(v) else fmt(float(v) * 100, 3, " %")


def _si(v: Any, unit: str = "") -> str:
    """51,539,607,552 -> 51.5 G."""
    if is_missing(v):
        return "\u2014"
    return in_units(float(v), ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k"), (1, " "))).rstrip() \
        + (f" {unit}" if unit else "")


def _ratio(v: Any) -> str:
    return "\u2014" if is_missing(v) else f"{float(v):.2f}"


# How a figure of each unit reads in a cell (the label says what it is, the cell its unit).
_FORMATS: dict[str, Callable[[Any], str]] = {
    "%": _pct, "share": _share, "ratio": _ratio, "ns": fmt_time_ns, "bytes": fmt_bytes, "text": _text,
    "flag": _flag, "GHz": lambda v: fmt(v, 3, " GHz"), "ops": lambda v: _si(v), "FLOP": lambda v: _si(v, "FLOP"),
    "bytes/s": lambda v: "\u2014" if is_missing(v) else fmt_bytes(v) + "/s", "GB/s": lambda v: fmt(v, 3, " GB/s")}


def figure_format(figure: Figure) -> Callable[[Any], str]:
    if figure.is_text:
        return lambda v: "\u2014" if is_missing(v) else value_text(figure.column, v)
    return _FORMATS.get(figure.unit, fmt)


def columns_of(figures: Iterable[Figure], suffix: Callable[[Figure], str] = lambda f: "") -> list:
    """(column, label, formatter) of each figure, for group_table and kernel_table."""
    return [(f.column, f.label + suffix(f), figure_format(f)) for f in figures]


GAP_FACTOR_DEFINITIONS = {f.column: f.definition for f in gap_figures.FIGURES}


def gap_columns() -> list:
    """The headline, the gap's steps with the factor each loses to the step before, the memory
    side, and the figures of the views that explain the steps (their view in the label)."""
    catalog = registry.figures()
    factors = {step: factor for factor, step in
               zip(registry.gap_figures().values(), gap_figures.STEPS)}
    out = columns_of([catalog[gap_figures.HEADLINE]], lambda f: " (headline, no step)")
    for step in gap_figures.STEPS:
        if step not in catalog:
            continue
        out += columns_of([catalog[step]])
        out.append((factors[step].column, factors[step].label, _factor))
    return out + columns_of([catalog[c] for c in gap_figures.MEMORY + gap_figures.EXPLAINERS if c in catalog],
                            lambda f: f" ({f.view})")


def gap_table(gap: pd.DataFrame, base: Optional[pd.DataFrame], reasons: Optional[dict] = None,
              time_label: str = "time") -> str:
    """Per phase and role (and each phase's `all`): headline -> active -> tensor -> useful, the
    factor of each step, and the figures that explain it."""
    if gap is None or gap.empty:
        return '<p class="na">No kernels.</p>'
    return group_table(gap, gap_columns(), base, with_time="time_ns" in gap.columns, reasons=reasons,
                       time_label=time_label)


def shares_table(kernels: pd.DataFrame, figure: Figure) -> str:
    """A text figure per phase and role: each value with its share of the time."""
    if kernels.empty or figure.column not in kernels.columns:
        return ""
    rows = []
    frame = kernels.assign(_t=numbers(kernels, "time_ns").fillna(0))
    show = figure_format(figure)
    for (phase, role), g in sort_groups(frame).groupby(["phase", "role"], sort=False, observed=True):
        shares = g.groupby(g[figure.column].astype("object").map(
            lambda v: "n/a" if is_missing(v) else show(v)), observed=True)["_t"].sum()
        total = shares.sum()
        text = ", ".join(f"{name} {share / total * 100:.0f} %" if total else name
                         for name, share in shares.sort_values(ascending=False).items())
        rows.append([esc(phase), kernels_link(esc(role), phase, role), esc(text)])
    return html_table(["phase", "role", (f"{figure.label} (share of time)", figure.definition)], rows, "shares",
                  sticky=2)


# --- launch statistics -------------------------------------------------------------------------------

# Per kernel: (heading, definition, how to read it from the kernels table).
def registers_per_thread(kernels: pd.DataFrame) -> pd.Series:
    return numbers(kernels, "launch__registers_per_thread")


def shared_memory_per_block(kernels: pd.DataFrame) -> pd.Series:
    """Static + dynamic shared memory per block (bytes), as the launch asked for it."""
    static, dynamic = numbers(kernels, "launch__shared_mem_per_block_static"), numbers(kernels, "launch__shared_mem_per_block_dynamic")
    total = static.fillna(0) + dynamic.fillna(0)
    return total.where(static.notna() | dynamic.notna(), numbers(kernels, "launch__shared_mem_per_block"))


def grid_blocks(kernels: pd.DataFrame) -> pd.Series:
    # grid_blocks is Int64 with gaps (a kernel ncu could not read): as floats, to fill floats
    return numbers(kernels, "launch__grid_size").fillna(numbers(kernels, "grid_blocks").astype(float))


def block_threads(kernels: pd.DataFrame) -> pd.Series:
    # block_threads is Int64 with gaps (a kernel ncu could not read): as floats, to fill floats
    return numbers(kernels, "launch__block_size").fillna(numbers(kernels, "block_threads").astype(float))


LAUNCH = (("registers", "launch__registers_per_thread: registers per thread"),
          ("shared memory", "static + dynamic shared memory per block (launch__shared_mem_per_block_*)"),
          ("grid \u00d7 block", "blocks in the grid \u00d7 threads per block (launch__grid_size, launch__block_size)"))


def _launch_cells(kernels: pd.DataFrame) -> list[list[str]]:
    """Per kernel: registers per thread, shared memory per block, grid x block."""
    regs, smem = registers_per_thread(kernels), shared_memory_per_block(kernels)
    grid, block = grid_blocks(kernels), block_threads(kernels)
    return [[esc(fmt(r)), esc(fmt_bytes(s)),
             "\u2014" if is_missing(g) or is_missing(b) else f"{g:,.0f} \u00d7 {b:,.0f}"]
            for r, s, g, b in zip(regs, smem, grid, block)]


def _span(values: pd.Series, formatter: Callable = fmt) -> str:
    values = values.dropna()
    if values.empty:
        return "\u2014"
    low, high = values.min(), values.max()
    return formatter(low) if low == high else f"{formatter(low)} to {formatter(high)}"


def launch_table(kernels: pd.DataFrame) -> str:
    """Where the occupancy limiter is named: per phase and role, the limiter and the launch's
    registers per thread, shared memory per block, block size and grid (ranges over its kernels)."""
    if kernels.empty or "occupancy_limiter" not in kernels.columns:
        return ""
    frame = kernels.assign(_regs=registers_per_thread(kernels), _smem=shared_memory_per_block(kernels),
                           _grid=grid_blocks(kernels), _block=block_threads(kernels),
                           _t=numbers(kernels, "time_ns").fillna(0))
    limiter = registry.figures()["occupancy_limiter"]
    rows = []
    for (phase, role), g in sort_groups(frame).groupby(["phase", "role"], sort=False, observed=True):
        limits = g.groupby(g["occupancy_limiter"].astype(object).map(
            lambda v: "n/a" if is_missing(v) else value_text("occupancy_limiter", v)))["_t"].sum()
        total = limits.sum()
        named = ", ".join(f"{name} {share / total * 100:.0f} %" if total else name
                          for name, share in limits.sort_values(ascending=False).items())
        rows.append([esc(phase), kernels_link(esc(role), phase, role), esc(named or "\u2014"),
                     esc(_span(g["_regs"])), esc(_span(g["_smem"], fmt_bytes)), esc(_span(g["_block"])),
                     esc(_span(g["_grid"]))])
    headers = ["phase", "role", (f"{limiter.label} (share of time)", limiter.definition), LAUNCH[0], LAUNCH[1],
               ("threads per block", "launch__block_size"), ("grid blocks", "launch__grid_size")]
    return html_table(headers, rows, "launch", sticky=2)


# --- kernel selection --------------------------------------------------------------------------------

# What ran, as V8 (and V2's counters) name it.
SELECTION_COLUMNS = ("kernel_family", "tile", "split_k", "arch_path", "mma_path")


def _selection_text(kernels: pd.DataFrame, column: str) -> pd.Series:
    """One selection column as display text (split-K with its factor)."""
    values = col(kernels, column).astype("object")
    if column == "split_k":
        factor = numbers(kernels, "split_k_factor")
        return pd.Series([
            "\u2014" if is_missing(v) else ("no" if not bool(v) else
                                           (f"yes, {int(f)}-way" if not is_missing(f) and f > 1 else "yes"))
            for v, f in zip(values, factor)], index=kernels.index)
    return values.map(lambda v: "\u2014" if is_missing(v) else value_text(column, v))


def _choices(kernels: pd.DataFrame, columns: list) -> pd.DataFrame:
    kinds = col(kernels, "kind")
    frame = kernels[kinds.isin(CHOSEN_KINDS).to_numpy()] if kinds.notna().any() else kernels
    keys = pd.DataFrame({c: _selection_text(frame, c) for c in columns}, index=frame.index)
    keys["_behind"] = col(frame, "arch_behind_device").map(lambda v: not is_missing(v) and bool(v))
    keys["phase"], keys["role"] = frame["phase"], frame["role"]
    keys["_t"] = numbers(frame, "time_ns").fillna(0)
    return keys


def selection_table(kernels: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> str:
    """What the libraries chose per role and phase, and what changed from the role's phase before;
    against a baseline, what the baseline ran there."""
    columns = [c for c in SELECTION_COLUMNS if c in kernels.columns]
    if kernels.empty or not columns:
        return '<p class="na">No kernel-selection figures in these results.</p>'
    keys = _choices(kernels, columns)
    if keys.empty:
        return '<p class="na">No GEMM or attention kernels.</p>'
    chosen = (keys.groupby(["role", "phase"] + columns + ["_behind"], sort=False, dropna=False, observed=True)
              .agg(kernels=("_t", "size"), time=("_t", "sum")).reset_index())
    chosen = sort_groups(chosen, role_first=True)
    baseline = {}
    if base is not None and not base.empty and all(c in base.columns for c in columns):
        base_keys = _choices(base, columns)
        for (role, phase), g in base_keys.groupby(["role", "phase"], sort=False, observed=True):
            baseline[(role, phase)] = {tuple(r[c] for c in columns) for _, r in g.iterrows()}
    rows, previous_by_role = [], {}
    for (role, phase), g in chosen.groupby(["role", "phase"], sort=False, observed=True):
        g = g.sort_values("time", ascending=False)
        choices = {tuple(r[c] for c in columns) for _, r in g.iterrows()}
        previous = previous_by_role.get(role)
        change = ""
        if previous is not None and previous[1] != choices:
            change = f"differs from {previous[0]}: " + _describe_change(previous[1], choices, columns)
        previous_by_role[role] = (phase, choices)
        against = ""
        if base is not None:
            before = baseline.get((role, phase))
            # read as the other changes: what the baseline ran -> what this run runs
            against = ("not in the baseline" if before is None else "the same" if before == choices
                       else _describe_change(before, choices, columns))
        for i, (_, r) in enumerate(g.iterrows()):
            notes = [change] if i == 0 and change else []
            if r["_behind"]:
                notes.append("built for an older architecture than the device")
            cells = [esc(role) if i == 0 else "", kernels_link(esc(phase), phase, role) if i == 0 else ""]
            cells += [esc(r[c]) for c in columns]
            cells += [esc(r["kernels"]), esc(fmt_time_ns(r["time"])),
                      f'<span class="chg">{esc("; ".join(notes))}</span>' if notes else ""]
            if base is not None:
                cells.append(esc(against) if i == 0 else "")
            rows.append(cells)
    catalog = registry.figures()
    headers = ["role", "phase"] + [(catalog[c].label, catalog[c].definition) for c in columns]
    headers += ["kernels", "time", "what changed"]
    headers += [(BASELINE_TO_RUN, "what the baseline ran in this role and phase \u2192 what this run runs")] \
        if base is not None else []
    return html_table(headers, rows, "selection", sortable=False)


BASELINE_TO_RUN = "baseline \u2192 this run"


def _describe_change(before: set, after: set, columns: list) -> str:
    parts = []
    catalog = registry.figures()
    for i, column in enumerate(columns):
        old = sorted({k[i] for k in before})
        new = sorted({k[i] for k in after})
        if old != new:
            parts.append(f"{catalog[column].label} {'/'.join(old)} \u2192 {'/'.join(new)}")
    return "; ".join(parts) or "another mix of the same choices"


# --- kernels -----------------------------------------------------------------------------------------

# The kernel table's figures, most telling first; then the rest of the catalog's summary figures.
KERNEL_FIRST = ("time_ns", "sm_active_pct", "tensor_pipe_pct", "dram_pct", "achieved_occupancy_pct")


def kernel_table(kernels: pd.DataFrame, checks: pd.DataFrame, view_ids: list[str],
                 base_time: Optional[pd.Series] = None, time_label: str = "time",
                 quiet: Optional[list] = None) -> str:
    """Every kernel, compactly: its id, a click on which opens its page (reports/kernel_page.py:
    every figure, its counters, the baseline's; a link in each row would add 4 kB), a short name
    (full names are listed once below), the figures that tell most (time, SM active, tensor, DRAM,
    occupancy, the launch), and each view's validation badge with the discrepancy of a failure (or
    the reason of an n/a) in its tooltip. `base_time`: each kernel's baseline time per launch;
    `quiet`: per kernel, its change is within the run-to-run noise (grey)."""
    if kernels.empty:
        return '<p class="na">No kernels.</p>'
    catalog = registry.figures()
    first = [catalog[c] for c in KERNEL_FIRST if c in catalog and c in kernels.columns]
    headers = [("#", "the kernel's id: click it for every figure of the kernel, with its counters"),
               ("kernel", "the kernel's name without its namespace, template arguments and "
                               "parameters (full names below)"), "phase", "role"]
    headers += [(time_label if f.column == "time_ns" else f.label, f.definition) for f in first]
    headers += list(LAUNCH)
    # Column by column (each a list of escaped cells), then zipped into rows: no per-cell lookups.
    names = {n: _name_cell(n) for n in col(kernels, "name").dropna().unique()}
    columns = [[esc(v) for v in col(kernels, "id")], [names.get(n, "") for n in col(kernels, "name")]]
    columns += [[esc(v) for v in col(kernels, c)] for c in ("phase", "role")]
    for figure in first:
        show = figure_format(figure)
        columns.append([esc(show(v)) for v in kernels[figure.column]])
    columns += [list(c) for c in zip(*_launch_cells(kernels))]
    if base_time is not None:
        headers.append(("\u0394 time", "against the baseline's mean time per launch of the kernel matched to "
                                       "this one (same phase, role, family and weights)"))
        grey = quiet if quiet is not None else [False] * len(kernels)
        columns.append([('<span class="d">not in baseline</span>' if is_missing(b) else
                         noise_span(t, b, fmt_time_ns) if q else change_span("time_ns", t, b, fmt_time_ns))
                        for t, b, q in zip(numbers(kernels, "time_ns"), base_time, grey)])
    headers += [("kind", "what the kernel is, from its name"), ("NVTX", "the innermost NVTX ranges open at launch")]
    columns.append([esc(v) for v in col(kernels, "kind")])
    columns.append([esc(_nvtx_text(v)) for v in col(kernels, "nvtx_stack")])
    for view in view_ids:
        headers.append((view, f"{registry.title(view)}: validation (hover a badge for the detail)"))
        columns.append([badge(st, detail) for st, detail in zip(checks[view], checks[f"detail_{view}"])])
    return html_table(headers, [list(row) for row in zip(*columns)], "kernels", sticky=2, scroll=True,
                  attrs=' id="kernel-table"')


NAME_WIDTH = 48  # characters of a kernel's short name in a table cell; the whole in its tooltip


def _name_cell(name: Any) -> str:
    short = short_name(name)
    if len(short) <= NAME_WIDTH:
        return f"<code>{esc(short)}</code>"
    return f'<code title="{esc(short)}">{esc(short[:NAME_WIDTH - 1])}\u2026</code>'


def _nvtx_text(stack: Any) -> str:
    """The innermost range's message: the outer ones repeat the phase."""
    return " / ".join(work_ranges(stack)[-2:])


def top_kernels_table(kernels: pd.DataFrame, limit: int = 12, time_label: str = "total time") -> str:
    """The kernels that take the most time, by name summed over their launches, with the figures
    that say why and where they ran; each links to its launches in the kernel table, its count of
    launches to the longest one's page."""
    if kernels.empty or "name" not in kernels.columns:
        return ""
    frame = kernels.assign(_t=numbers(kernels, "time_ns").fillna(0), _name=col(kernels, "name").astype(object),
                           _op=col(kernels, "nvtx_stack").map(range_label))
    total = frame["_t"].sum()
    catalog = registry.figures()
    shown = [catalog[c] for c in KERNEL_FIRST[1:] if c in catalog and c in kernels.columns]
    rows = []
    # by name and the operation its range names: one name may run several operations
    ranked = frame.groupby(["_name", "_op"], sort=False)["_t"].sum().sort_values(ascending=False)
    for rank, ((name, op), time) in enumerate(ranked.head(limit).items(), 1):
        g = frame[((frame["_name"] == name) & (frame["_op"] == op)).to_numpy()]
        weights = g["_t"] if g["_t"].sum() > 0 else None
        # the full name in the tooltip: two kernels of one short name and range (silu, then the
        # multiply of silu_mul) differ in their template arguments
        label = (f'<code title="{esc(name)}">{esc(short_name(name))}</code>'
                 + (f' <span class="d">{esc(op)}</span>' if op else ""))
        cells = [esc(rank), kernels_link(label, query=f"op={op}" if op else short_name(name)),
                 esc(fmt_time_ns(time)), esc(_pct(100 * time / total if total else None)),
                 kernel_page_link(esc(len(g)), g.loc[g["_t"].idxmax(), "id"]) if "id" in g else esc(len(g)),
                 esc(fmt_time_ns(time / len(g)))]
        for figure in shown:
            values = numbers(g, figure.column)
            ok = values.notna()
            mean = (values[ok] * weights[ok]).sum() / weights[ok].sum() if weights is not None and ok.all() else None
            cells.append(esc(figure_format(figure)(mean)))
        roles = "/".join(dict.fromkeys(str(r) for r in g["role"]))
        phases = "/".join(sorted(dict.fromkeys(str(p) for p in g["phase"]), key=lambda p: _order(p)))
        rows.append(cells + _launch_cells(g.iloc[:1])[0] + [esc(f"{roles} in {phases}")])
    headers = ["#", ("kernel", "its name, and the operation its NVTX range names (op=) where one does"),
               (time_label, "gpu__time_duration.sum over its launches"),
               ("share", "of the kernel time shown"), ("launches", "kernel launches profiled; click for the longest one's page"),
               ("per launch", "mean time per launch")]
    headers += [(f.label, f.definition + " (time-weighted over its launches)") for f in shown] + list(LAUNCH)
    headers.append(("ran as", "its roles, and the phases it ran in"))
    return html_table(headers, rows, "top", sticky=2)


def _order(phase: str) -> int:
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)


def names_table(kernels: pd.DataFrame) -> str:
    """Each distinct full kernel name once, with its count and time."""
    if kernels.empty or "name" not in kernels.columns:
        return ""
    frame = kernels.assign(_t=numbers(kernels, "time_ns").fillna(0))
    agg = frame.groupby("name", sort=False, observed=True).agg(count=("_t", "size"), time=("_t", "sum"))
    agg = agg.sort_values("time", ascending=False)
    rows = [[esc(count), esc(fmt_time_ns(time)), f"<code>{esc(name)}</code>"]
            for name, count, time in zip(agg.index, agg["count"], agg["time"])]
    return html_table(["kernels", "time", "full name (as ncu printed it)"], rows, "names")


# --- kernels matched between two runs ------------------------------------------------------------------

def noise_span(current: Any, base: Any, formatter: Callable = fmt) -> str:
    """A time change within the run-to-run noise: its arrow and size, grey (neither better nor worse)."""
    delta = delta_pct(current, base)
    if delta is None:
        return ""
    return (f'<span class="d" title="within the run-to-run noise of the repeats (baseline '
            f'{esc(formatter(base))})">{arrow(delta)}{delta:+.1f} %</span>')


def changes_table(changes: pd.DataFrame, time_label: str = "time", significance: Optional[dict] = None) -> str:
    """compare.kernel_changes as a table: matched kernels with their time change, then those added
    and removed. `significance`: each key's from the comparison verdict (views/comparison.py); a
    change within the noise is grey."""
    if changes is None or changes.empty:
        return '<p class="na">No kernels.</p>'
    rows = []
    for _, r in changes.iterrows():
        status = r["status"]
        key = tuple(str(r[k]) for k in ("phase", "role", "kernel", "weights"))
        quiet = (significance or {}).get(key) == "noise"
        change = ("" if status != "matched" else noise_span(r["time_ns"], r["time_ns_base"], fmt_time_ns) if quiet
                  else change_span("time_ns", r["time_ns"], r["time_ns_base"], fmt_time_ns))
        tokens = r["tokens_base"] if r["tokens_base"] == r["tokens"] or status != "matched" else \
            f"{r['tokens_base'] or '?'} \u2192 {r['tokens'] or '?'}"
        tile = r["tile_base"] if r["tile_base"] == r["tile"] or status != "matched" else \
            f"{r['tile_base'] or '?'} \u2192 {r['tile'] or '?'}"
        if status == "added":
            tokens, tile = r["tokens"], r["tile"]
        launches = (_count(r["launches"]) if status == "added" else _count(r["launches_base"]) if status == "removed"
                    else _count(r["launches"]) if r["launches"] == r["launches_base"]
                    else f"{_count(r['launches_base'])} \u2192 {_count(r['launches'])}")
        cells = [f'<span class="st {esc(status)}">{esc(status)}</span>', esc(r["phase"]),
                 kernels_link(esc(r["role"]), r["phase"], r["role"]), f"<code>{esc(r['kernel'])}</code>",
                 esc(fmt_time_ns(r["time_ns_base"])), esc(fmt_time_ns(r["time_ns"])), change, esc(launches),
                 esc(r["weights"]), esc(tokens), esc(tile)]
        rows.append(cells)
    headers = ["", "phase", "role", ("kernel", "the kernel family (GEMMs, attention) or short name"),
               f"baseline {time_label}", time_label,
               ("change", "time against the baseline; green: faster, red: slower, grey: within the "
                          "run-to-run noise of the repeats"),
               ("launches", "kernel launches profiled (baseline \u2192 this run)"),
               ("weights", "the fixed dimensions the match is made on: a GEMM's N and K, attention's heads "
                           "H and head size D"),
               ("tokens (M)", "the GEMM's M, the tokens of the step; not part of the match"),
               ("tile", "the tile its name says")]
    return html_table(headers, rows, "changes")


def _count(value: Any) -> str:
    return "\u2014" if is_missing(value) else f"{int(value)}"
