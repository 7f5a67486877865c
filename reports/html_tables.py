"""The report's tables: every cell is escaped here, and nowhere else is HTML built from data.

Columns, labels and formats come from the views' catalog (views/registry.py)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import pandas as pd

from reports.html_text import (col, delta_pct, esc, fmt, fmt_bytes, fmt_time_ns, is_missing,
                               is_regression, numbers, short_name, sort_groups, view_status)
from views import gap as gap_figures, registry
from views.catalog import Figure

# --- tables (every cell escaped here, nowhere else) -----------------------------------------------

def _table(headers: list, rows: list, cls: str = "") -> str:
    """headers: plain text; rows: lists of cells already escaped (built by _cell)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<div class="tw"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


NOT_IN_BASELINE = object()  # the baseline has no such group (not: has it, with a missing value)


def _delta_cell(figure: str, current: Any, base: Any = None, formatter: Callable = fmt,
                compare: bool = False) -> str:
    """`value`, or with `compare` `value (delta %)`, marked when the change is a regression."""
    text = esc(formatter(current))
    if not compare:
        return text
    if base is NOT_IN_BASELINE:
        return f'{text} <span class="d">(not in baseline)</span>'
    delta = delta_pct(current, base)
    if delta is None:
        if is_missing(current) and is_missing(base):
            return text
        return f'{text} <span class="d">(baseline {esc(formatter(base))})</span>'
    regression = is_regression(figure, delta)
    mark = ' <span class="regmark" title="regression against the baseline">\u25bc</span>' if regression else ""
    return f'{text} <span class="d{" reg" if regression else ""}">({delta:+.1f} %)</span>{mark}'


def badge(status: str, detail: Any = None) -> str:
    cls = {"pass": "ok", "fail": "bad"}.get(status, "na")
    title = f' title="{esc(detail)}"' if status == "fail" and not is_missing(detail) else ""
    return f'<span class="b {cls}"{title}>{esc(status)}</span>'


def validation_box(kernels: pd.DataFrame, views: Iterable[str], checks: pd.DataFrame,
                   max_failures: int = 8) -> str:
    """Each view's validation status beside its figure; failures with their discrepancy."""
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
        parts.append(f'<div class="vrow" data-view="{esc(view)}">{badge(st.status)} '
                     f'<b>{esc(view)}</b> {esc(registry.title(view))}: {esc(counts)}{failures}</div>')
    return f'<aside class="valid"><h4>Validation</h4>{"".join(parts)}</aside>'


def group_table(groups: pd.DataFrame, figures: list, base: Optional[pd.DataFrame] = None,
                with_time: bool = True) -> str:
    """One row per phase and role: figures as value, or value (delta %) against the baseline."""
    if groups is None or groups.empty:
        return '<p class="na">No groups.</p>'
    groups = sort_groups(groups)
    compare = base is not None and not base.empty
    figures = [f for f in figures if f[0] in groups.columns]  # what the views did not give: no column
    lookup = {}
    if compare:
        lookup = {(r["phase"], r["role"]): r for _, r in base.iterrows()}
    total = numbers(groups, "time_ns").sum()
    base_total = numbers(base, "time_ns").sum() if compare else 0.0
    headers = ["phase", "role"] + (["kernels", "time", "share"] if with_time else [])
    headers += [label for _, label, _ in figures]
    rows = []
    for _, g in groups.iterrows():
        b = lookup.get((g.get("phase"), g.get("role")))

        def before(column):
            return b.get(column) if b is not None else NOT_IN_BASELINE

        row = [esc(g.get("phase")), esc(g.get("role"))]
        if with_time and "time_share_pct" in groups.columns:  # the views' share of the whole run
            share, bshare = g.get("time_share_pct"), before("time_share_pct")
        elif with_time:
            share = g.get("time_ns") / total * 100 if total else None
            bshare = (before("time_ns") / base_total * 100 if b is not None and base_total
                      else NOT_IN_BASELINE)
        if with_time:
            row += [_delta_cell("kernels", g.get("kernels"), before("kernels"), fmt, compare),
                    _delta_cell("time_ns", g.get("time_ns"), before("time_ns"), fmt_time_ns, compare),
                    _delta_cell("time_share_pct", share, bshare, _pct, compare)]
        for column, _, formatter in figures:
            row.append(_delta_cell(column, g.get(column), before(column), formatter, compare))
        rows.append(row)
    return _table(headers, rows, "groups")


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


# How a figure of each unit reads in a cell (the label says what it is, the cell its unit).
_FORMATS: dict[str, Callable[[Any], str]] = {
    "%": _pct, "share": _share, "ns": fmt_time_ns, "bytes": fmt_bytes, "text": _text, "flag": _flag,
    "GHz": lambda v: fmt(v, 3, " GHz"), "bytes/s": lambda v: "\u2014" if is_missing(v) else fmt_bytes(v) + "/s"}


def columns_of(figures: Iterable[Figure], suffix: Callable[[Figure], str] = lambda f: "") -> list:
    """(column, label, formatter) of each figure, for group_table and kernel_table."""
    return [(f.column, f.label + suffix(f), _FORMATS.get(f.unit, fmt)) for f in figures]


def gap_columns() -> list:
    """The gap's steps, the factor between each two, and the figures of the views that explain
    them (their view in the label)."""
    catalog = registry.figures()
    factors = {figure: (factor, before) for factor, (figure, before) in gap_figures.FACTORS.items()}
    out = []
    for step in gap_figures.STEPS:
        out += columns_of([catalog[step]])
        if step in factors:
            factor, before = factors[step]
            out.append((factor, f"\u00d7 {catalog[step].label} / {catalog[before].label}", _factor))
    return out + columns_of([catalog[c] for c in gap_figures.EXPLAINERS], lambda f: f" ({f.view})")


def gap_table(gap: pd.DataFrame, base: Optional[pd.DataFrame]) -> str:
    """Per phase and role (and each phase's `all`): headline -> active -> tensor -> useful, the
    factor of each step, and the figures that explain it."""
    if gap is None or gap.empty:
        return '<p class="na">No kernels.</p>'
    return group_table(gap, gap_columns(), base, with_time="time_ns" in gap.columns)


def shares_table(kernels: pd.DataFrame, figure: Figure) -> str:
    """A text figure per phase and role: each value with its share of the time."""
    if kernels.empty or figure.column not in kernels.columns:
        return ""
    rows = []
    frame = kernels.assign(_t=numbers(kernels, "time_ns").fillna(0))
    for (phase, role), g in sort_groups(frame).groupby(["phase", "role"], sort=False, observed=True):
        shares = g.groupby(g[figure.column].astype("object").map(
            lambda v: "n/a" if is_missing(v) else str(v)), observed=True)["_t"].sum()
        total = shares.sum()
        text = ", ".join(f"{name} {share / total * 100:.0f} %" if total else name
                         for name, share in shares.sort_values(ascending=False).items())
        rows.append([esc(phase), esc(role), esc(text)])
    return _table(["phase", "role", f"{figure.label} (share of time)"], rows, "shares")


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
    return values.map(lambda v: "\u2014" if is_missing(v) else str(v))


def selection_table(kernels: pd.DataFrame) -> str:
    """What the libraries chose per role and phase, and what changed from the role's phase before."""
    columns = [c for c in SELECTION_COLUMNS if c in kernels.columns]
    if kernels.empty or not columns:
        return '<p class="na">No kernel-selection figures in these results.</p>'
    kinds = col(kernels, "kind")
    frame = kernels[~kinds.isin(["elementwise", "other"])] if kinds.notna().any() else kernels
    if frame.empty:
        return '<p class="na">No GEMM or attention kernels.</p>'
    keys = pd.DataFrame({c: _selection_text(frame, c) for c in columns}, index=frame.index)
    keys["_behind"] = col(frame, "arch_behind_device").map(lambda v: not is_missing(v) and bool(v))
    keys["phase"], keys["role"] = frame["phase"], frame["role"]
    keys["_t"] = numbers(frame, "time_ns").fillna(0)
    chosen = (keys.groupby(["role", "phase"] + columns + ["_behind"], sort=False, dropna=False, observed=True)
              .agg(kernels=("_t", "size"), time=("_t", "sum")).reset_index())
    chosen = sort_groups(chosen, role_first=True)
    rows, previous_by_role = [], {}
    for (role, phase), g in chosen.groupby(["role", "phase"], sort=False, observed=True):
        g = g.sort_values("time", ascending=False)
        choices = {tuple(r[c] for c in columns) for _, r in g.iterrows()}
        previous = previous_by_role.get(role)
        change = ""
        if previous is not None and previous[1] != choices:
            change = f"differs from {previous[0]}: " + _describe_change(previous[1], choices, columns)
        previous_by_role[role] = (phase, choices)
        for i, (_, r) in enumerate(g.iterrows()):
            notes = [change] if i == 0 and change else []
            if r["_behind"]:
                notes.append("built for an older architecture than the device")
            cells = [esc(role) if i == 0 else "", esc(phase) if i == 0 else ""]
            cells += [esc(r[c]) for c in columns]
            cells += [esc(r["kernels"]), esc(fmt_time_ns(r["time"])),
                      f'<span class="chg">{esc("; ".join(notes))}</span>' if notes else ""]
            rows.append(cells)
    catalog = registry.figures()
    headers = ["role", "phase"] + [catalog[c].label for c in columns]
    return _table(headers + ["kernels", "time", "what changed"], rows, "selection")


def _describe_change(before: set, after: set, columns: list) -> str:
    parts = []
    catalog = registry.figures()
    for i, column in enumerate(columns):
        old = sorted({k[i] for k in before})
        new = sorted({k[i] for k in after})
        if old != new:
            parts.append(f"{catalog[column].label} {'/'.join(old)} \u2192 {'/'.join(new)}")
    return "; ".join(parts) or "another mix of the same choices"


def kernel_table(kernels: pd.DataFrame, checks: pd.DataFrame, view_ids: list[str]) -> str:
    """Every kernel, compactly: a short name (full names are listed once below), the figures that
    sum up a kernel (the catalog's summary figures), and each view's validation badge with the
    discrepancy of a failure in its tooltip."""
    if kernels.empty:
        return '<p class="na">No kernels.</p>'
    summary = [f for f in registry.figures().values() if f.summary and f.column in kernels.columns]
    present = columns_of(summary)
    headers = ["#", "phase", "role", "kind", "kernel", "NVTX"] + [l for _, l, _ in present] + list(view_ids)
    # Column by column (each a list of escaped cells), then zipped into rows: no per-cell lookups.
    names = {n: f"<code>{esc(short_name(n))}</code>" for n in col(kernels, "name").dropna().unique()}
    columns = [[esc(v) for v in col(kernels, c)] for c in ("id", "phase", "role", "kind")]
    columns.append([names.get(n, "") for n in col(kernels, "name")])
    columns.append([esc(_nvtx_text(v)) for v in col(kernels, "nvtx_stack")])
    for column, _, formatter in present:
        columns.append([esc(formatter(v)) for v in kernels[column]])
    for view in view_ids:
        columns.append([badge(st, detail) for st, detail in zip(checks[view], checks[f"detail_{view}"])])
    return _table(headers, [list(row) for row in zip(*columns)], "kernels")


def _nvtx_text(stack: Any) -> str:
    """The innermost range's message: the outer ones repeat the phase."""
    if stack is None or (not isinstance(stack, (list, tuple)) and not hasattr(stack, "tolist")
                         and is_missing(stack)):
        return ""
    items = list(stack.tolist() if hasattr(stack, "tolist") else stack) if not isinstance(stack, str) else [stack]
    return " / ".join(str(s) for s in items[-2:]) if items else ""


def names_table(kernels: pd.DataFrame) -> str:
    """Each distinct full kernel name once, with its count and time."""
    if kernels.empty or "name" not in kernels.columns:
        return ""
    frame = kernels.assign(_t=numbers(kernels, "time_ns").fillna(0))
    agg = frame.groupby("name", sort=False, observed=True).agg(count=("_t", "size"), time=("_t", "sum"))
    agg = agg.sort_values("time", ascending=False)
    rows = [[esc(count), esc(fmt_time_ns(time)), f"<code>{esc(name)}</code>"]
            for name, count, time in zip(agg.index, agg["count"], agg["time"])]
    return _table(["kernels", "time", "full name (as ncu printed it)"], rows, "names")
