"""The report's figures as plain plotly.js dicts (data, layout), from the views' frames.

Every label and hover text goes through `plot_text`; values are plain floats or None (missing is
a gap in the figure, never 0). A builder returns None when the views gave it nothing to draw.
Against a baseline every figure carries it: a bar chart marks each baseline value on its bar, a
stacked chart stands the baseline's stack beside the current one, a scatter plots the baseline's
kernels as hollow markers. Each mark carries `customdata`, the kernels it stands for ("phase|role"
or "#id"), which the page's script turns into a filter of the kernel table on click.
"""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from reports.html_text import (PHASE_ORDER, order_key, col, group_keys, group_label, is_missing, numbers,
                               plot_text, short_name, sort_groups)
from views import gap as gap_figures, registry
from views.ranks import across_ranks
from views.vocabulary import OUTSIDE_PHASES, STALL_FAMILIES

PHASE_COLORS = {"cold_prefill": "#4c78a8", "warm_prefill": "#72b7b2", "prefill": "#4c78a8",
                "decode": "#f58518", "other": "#9d9d9d"}
ROLE_COLORS = {"qkv_proj": "#4c78a8", "attention": "#e45756", "o_proj": "#72b7b2",
               "gate_up_proj": "#54a24b", "down_proj": "#eeca3b", "elementwise": "#b279a2",
               "gemm": "#ff9da6", "other": "#9d9d9d"}
LEVEL_COLORS = ("#9d9d9d", "#72b7b2", "#4c78a8", "#54a24b")
STALL_COLORS = {"memory": "#4c78a8", "compute": "#f58518", "tensor": "#54a24b", "sync": "#e45756",
                "scheduling": "#b279a2"}
BASELINE = "baseline"
BASELINE_COLOR = "#1d1d1f"


# --- figures (plain plotly dicts; every label through plot_text) ---------------------------------

def plot_layout(title: str, height: int = 380, **extra) -> dict:
    layout = {
        "title": {"text": plot_text(title), "font": {"size": 14}, "x": 0.01, "xref": "paper",
                  "y": 1.0, "yref": "container", "yanchor": "top", "pad": {"t": 10}},
        "height": height, "margin": {"l": 64, "r": 24, "t": 76, "b": 40},
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "traceorder": "normal"},
        # automargin makes room for the tick labels; standoff keeps the title off them
        "xaxis": {"gridcolor": "#eeeeee", "automargin": True, "zeroline": False,
                  "title": {"standoff": 12}},
        "yaxis": {"gridcolor": "#eeeeee", "automargin": True, "zeroline": False,
                  "title": {"standoff": 10}},
        "hoverlabel": {"namelength": -1},
    }
    for key, value in extra.items():
        if key[:5] in ("xaxis", "yaxis") and key not in layout:
            # a second axis (V3's right one) makes room for its ticks and keeps its title off them too
            layout[key] = {"automargin": True, "title": {"standoff": 10}}
        if isinstance(value, dict) and isinstance(layout.get(key), dict):
            merged = {**layout[key], **value}
            if isinstance(value.get("title"), dict) and isinstance(layout[key].get("title"), dict):
                merged["title"] = {**layout[key]["title"], **value["title"]}
            layout[key] = merged
        else:
            layout[key] = value
    return layout


def story(groups: pd.DataFrame) -> pd.DataFrame:
    """The groups a chart of the workload shows: no phase's `all` row (it sums the others), no
    setup (phases `setup` and `other`, OUTSIDE_PHASES) when the run has phases, and a
    tensor-parallel run's ranks merged (one bar per phase and role, not 38 of them; the ranks'
    own figures are the TP section's)."""
    if groups is None or groups.empty:
        return groups
    keep = col(groups, "role").astype("object") != "all"
    phases = set(col(groups, "phase").astype("object"))
    if phases & set(OUTSIDE_PHASES) and phases - set(OUTSIDE_PHASES):
        keep &= ~col(groups, "phase").astype("object").isin(OUTSIDE_PHASES)
    return sort_groups(across_ranks(groups[keep.to_numpy()], registry.figures()))


def _labels(groups: pd.DataFrame) -> list:
    return [plot_text(group_label(*key)) for key in group_keys(groups)]


def _keys(groups: pd.DataFrame) -> list:
    """Each group's kernels, for the click that filters the kernel table."""
    return [f"{p}|{r}" for p, r in zip(col(groups, "phase"), col(groups, "role"))]


def _values(series: pd.Series) -> list:
    return [None if is_missing(v) else float(v) for v in pd.to_numeric(series, errors="coerce")]


def _bar(groups: pd.DataFrame, name: str, values: pd.Series, color: str, hover_name: Optional[str] = None,
         value_format: str = "%{y:.3g} %") -> dict:
    """One bar per group; the hover says `hover_name` (default: `name`) and the value."""
    return {"type": "bar", "name": plot_text(name), "x": _labels(groups), "y": _values(values),
            "customdata": _keys(groups), "offsetgroup": plot_text(name), "marker": {"color": color},
            "hovertemplate": f"%{{x}}<br>{plot_text(hover_name or name)}: {value_format}<extra></extra>"}


def _baseline_marks(groups: pd.DataFrame, base: pd.DataFrame, name: str, column: str,
                    scale: float = 1.0, first: bool = True, value_format: str = "%{y:.3g} %") -> dict:
    """The baseline's value of `column` as a dash across the bar of the same name and group."""
    base = story(base)
    lookup = dict(zip(group_keys(base), numbers(base, column)))
    values = [lookup.get(key) for key in group_keys(groups)]
    return {"type": "scatter", "mode": "markers", "name": BASELINE, "legendgroup": BASELINE,
            "showlegend": first, "x": _labels(groups), "offsetgroup": plot_text(name),
            "y": [None if is_missing(v) else float(v) * scale for v in values], "customdata": _keys(groups),
            "marker": {"symbol": "line-ew-open", "size": 16, "color": BASELINE_COLOR,
                       "line": {"width": 3, "color": BASELINE_COLOR}},
            "hovertemplate": f"%{{x}}<br>baseline {plot_text(name)}: {value_format}<extra></extra>"}


def _with_base_groups(groups: pd.DataFrame, base: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The current groups, then any group only the baseline has (its bars are empty)."""
    if base is None or base.empty:
        return groups
    have = set(group_keys(groups))
    extra = story(base)
    extra = extra[[key not in have for key in group_keys(extra)]]
    if extra.empty:
        return groups
    keys = [c for c in ("phase", "role", "rank") if c in extra.columns]
    return sort_groups(pd.concat([groups, extra[keys]], ignore_index=True))


def _grouped_bars(groups: pd.DataFrame, base: Optional[pd.DataFrame], series: list) -> list:
    """(column, name, colour[, scale]) bars per group, and against a baseline a dash per bar."""
    traces = []
    for number, item in enumerate(series):
        column, name, color = item[:3]
        scale = item[3] if len(item) > 3 else 1.0
        traces.append(_bar(groups, name, numbers(groups, column) * scale, color))
        if base is not None and not base.empty:
            traces.append(_baseline_marks(groups, base, name, column, scale, first=number == 0))
    return traces


def fig_gap(groups: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    """The gap's steps per phase and role of the workload (setup and phase totals left out), each a
    share of elapsed time, the headline beside them in grey."""
    groups = story(groups)
    if groups is None or groups.empty:
        return None
    groups = _with_base_groups(groups, base)
    catalog = registry.figures()
    steps = [(gap_figures.HEADLINE, f"{catalog[gap_figures.HEADLINE].label} (headline)", "#d9d9d9")]
    steps += [(c, catalog[c].label, color) for c, color in zip(gap_figures.STEPS, LEVEL_COLORS) if c in catalog]
    return {"data": _grouped_bars(groups, base, steps), "layout": plot_layout(
        "The gap per phase and role: shares of elapsed time (time-weighted)", 440, barmode="group",
        scattermode="group", yaxis={"title": {"text": "% of elapsed time"}, "rangemode": "tozero"},
        xaxis={"tickangle": -30})}


def fig_time(groups: pd.DataFrame, base: Optional[pd.DataFrame] = None, unit: str = "ms",
             per: str = "") -> Optional[dict]:
    """Time per phase, split by role; against a baseline, its bar under each phase's. `per`: what
    the times are divided by (" per token")."""
    if groups is None or groups.empty or "time_ns" not in groups.columns:
        return None
    # a tensor-parallel run's ranks summed (their collectives are the TP section's): one bar a phase
    catalog = registry.figures()
    groups = sort_groups(across_ranks(groups[col(groups, "role").astype("object") != "all"], catalog))
    compare = base is not None and not base.empty and "time_ns" in base.columns
    if compare:
        base = sort_groups(across_ranks(base[col(base, "role").astype("object") != "all"], catalog))
    phases = list(dict.fromkeys(list(groups["phase"]) + (list(base["phase"]) if compare else [])))
    phases.sort(key=lambda p: order_key([p], PHASE_ORDER))
    scale = {"ms": 1e6, "µs": 1e3}[unit]

    def row_name(phase: str, baseline: bool = False) -> str:
        name = f"{phase} (setup)" if phase in OUTSIDE_PHASES and len(phases) > 1 else phase
        return plot_text(f"{name} \u00b7 baseline" if baseline else name)

    rows = [(p, False) for p in phases] if not compare else [r for p in phases for r in ((p, True), (p, False))]
    traces = []
    roles = list(dict.fromkeys(list(groups["role"]) + (list(base["role"]) if compare else [])))
    for role in roles:
        frames = {False: groups[groups["role"] == role], True: base[base["role"] == role] if compare else None}
        times = {side: dict(zip(f["phase"], numbers(f, "time_ns"))) for side, f in frames.items() if f is not None}
        traces.append({
            "type": "bar", "orientation": "h", "name": plot_text(role),
            "y": [row_name(p, b) for p, b in rows],
            "x": [None if is_missing(times[b].get(p)) else float(times[b][p]) / scale for p, b in rows],
            "customdata": [f"{p}|{role}" if not b else "" for p, b in rows],
            "marker": {"color": ROLE_COLORS.get(role, "#9d9d9d"),
                       "opacity": [0.45 if b else 1.0 for _, b in rows]},
            "hovertemplate": "%{y} \u00b7 " + plot_text(role) + f": %{{x:.4g}} {unit}{per}<extra></extra>"})
    if compare:  # an empty trace names the paler bars in the legend
        traces.append({"type": "bar", "orientation": "h", "name": BASELINE, "x": [None], "y": [row_name(*rows[0])],
                       "marker": {"color": "#c7c7cc"}, "hoverinfo": "skip"})
    return {"data": traces, "layout": plot_layout(
        "GPU time by phase and role" + (" (paler: the baseline)" if compare else ""),
        150 + 40 * len(rows), barmode="stack",
        xaxis={"title": {"text": f"kernel time{per} ({unit})"}}, yaxis={"autorange": "reversed"},
        margin={"b": 50})}


def fig_tensor(groups: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    """Tensor pipe and useful tensor work per group, both shares of elapsed time (as in the gap:
    the pipe's share of active cycles beside them would inflate it by 1 / SM active), with the
    useful MMA share on a second axis."""
    groups = story(groups)
    if groups is None or groups.empty:
        return None
    tensor = numbers(groups, "tensor_pipe_elapsed_pct")
    groups = groups[(tensor.notna() & (tensor > 0)).to_numpy()]
    if groups.empty:
        return None
    catalog = registry.figures()
    traces = _grouped_bars(groups, base, [
        ("tensor_pipe_elapsed_pct", catalog["tensor_pipe_elapsed_pct"].label, LEVEL_COLORS[2]),
        ("useful_tensor_pct", catalog["useful_tensor_pct"].label, LEVEL_COLORS[3])])
    fill = catalog["fill"].label
    traces.append({"type": "scatter", "mode": "markers", "name": f"{fill} (right axis)", "x": _labels(groups),
                   "y": _values(col(groups, "fill")), "yaxis": "y2", "customdata": _keys(groups),
                   "marker": {"symbol": "diamond", "size": 11, "color": "#e45756"},
                   "hovertemplate": f"%{{x}}<br>{plot_text(fill)}: %{{y:.3f}}<extra></extra>"})
    if base is not None and not base.empty:
        lookup = dict(zip(group_keys(story(base)), numbers(story(base), "fill")))
        values = [lookup.get(key) for key in group_keys(groups)]
        traces.append({"type": "scatter", "mode": "markers", "name": f"baseline {fill}", "x": _labels(groups),
                       "y": [None if is_missing(v) else float(v) for v in values], "yaxis": "y2",
                       "legendgroup": BASELINE, "customdata": _keys(groups),
                       "marker": {"symbol": "diamond-open", "size": 11, "color": BASELINE_COLOR},
                       "hovertemplate": f"%{{x}}<br>baseline {plot_text(fill)}: %{{y:.3f}}<extra></extra>"})
    return {"data": traces, "layout": plot_layout(
        f"Tensor pipe, {fill} and useful tensor work", 420, barmode="group", scattermode="group",
        yaxis={"title": {"text": "% of elapsed time"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": f"{fill} (useful / executed)"}, "overlaying": "y", "side": "right",
                "range": [0, 1.05], "dtick": 0.2, "tickformat": ".1f", "showgrid": False},
        xaxis={"tickangle": -30})}


def fig_occupancy(groups: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    groups = story(groups)
    if groups is None or groups.empty:
        return None
    groups = _with_base_groups(groups, base)
    traces = _grouped_bars(groups, base, [("theoretical_occupancy_pct", "theoretical", "#c6dbef"),
                                          ("achieved_occupancy_pct", "achieved", "#4c78a8")])
    return {"data": traces, "layout": plot_layout(
        "Achieved against theoretical occupancy (% of the SM's warps)", 400, barmode="group",
        scattermode="group", yaxis={"title": {"text": "% of max warps"}, "range": [0, 105]},
        xaxis={"tickangle": -30})}


def _kernel_hover(kernels: pd.DataFrame) -> list:
    return [plot_text(f"#{i} {short_name(n, 60)} ({p} \u00b7 {r})")
            for i, n, p, r in zip(col(kernels, "id"), col(kernels, "name"), col(kernels, "phase"),
                                  col(kernels, "role"))]


def _by_phase(kernels: pd.DataFrame):
    """(phase, row mask) for each phase present, in run order."""
    for phase in sorted(dict.fromkeys(kernels["phase"]), key=lambda p: order_key([p], PHASE_ORDER)):
        yield phase, kernels["phase"] == phase


def _kernel_markers(phase: str, rows: pd.DataFrame, x: pd.Series, y: pd.Series, opacity: float,
                    hovertemplate: str, setup: bool = False) -> dict:
    """One phase's kernels as markers sized by kernel time, with their names in the hover."""
    trace = {"type": "scatter", "mode": "markers", "name": plot_text(f"{phase} (setup)" if setup else phase),
             "x": _values(x), "y": _values(y), "text": _kernel_hover(rows),
             "customdata": [f"#{i}" for i in col(rows, "id")],
             "marker": {"size": _marker_sizes(rows), "color": PHASE_COLORS.get(phase, "#9d9d9d"),
                        "opacity": opacity, "line": {"width": 0.5, "color": "#333"}},
             "hovertemplate": hovertemplate}
    if setup:  # shown in the legend, drawn on a click: not part of the workload's story
        trace["visible"] = "legendonly"
    return trace


def _baseline_kernels(base: pd.DataFrame, x: pd.Series, y: pd.Series, hovertemplate: str) -> dict:
    return {"type": "scatter", "mode": "markers", "name": "baseline kernels", "legendgroup": BASELINE,
            "x": _values(x), "y": _values(y), "text": _kernel_hover(base),
            "marker": {"size": _marker_sizes(base), "symbol": "circle-open", "color": BASELINE_COLOR,
                       "opacity": 0.6, "line": {"width": 1.2}},
            "hovertemplate": "baseline " + hovertemplate}


def _marker_sizes(kernels: pd.DataFrame) -> list:
    time = numbers(kernels, "time_ns")
    top = time.max() if time.notna().any() else 1.0
    return [6.0 if is_missing(t) or not top else round(5 + 20 * math.sqrt(t / top), 1) for t in time]


def _wave_points(kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """(kernels with waves, waves, the share of block slots busy: below one wave, SM coverage)."""
    waves = numbers(kernels, "waves")
    kernels = kernels[(waves.notna() & (waves > 0)).to_numpy()]
    efficiency = numbers(kernels, "wave_efficiency")
    coverage = numbers(kernels, "sm_coverage")
    w = numbers(kernels, "waves")
    # Below one wave, what is idle is SMs with no block at all: coverage says it.
    return kernels, w, efficiency.where(w >= 1, coverage.fillna(efficiency))


def fig_waves(kernels: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    """Each kernel's waves against the share of block slots busy; left of one wave, SM coverage."""
    kernels, waves, busy = _wave_points(kernels)
    if kernels.empty:
        return None
    hover = "%{text}<br>waves: %{x:.3g}<br>busy share: %{y:.3f}<extra></extra>"
    phases = set(kernels["phase"])
    traces = [_kernel_markers(phase, kernels[mask], waves[mask], busy[mask], 0.7, hover,
                              setup=phase in OUTSIDE_PHASES and len(phases) > 1)
              for phase, mask in _by_phase(kernels)]
    if base is not None and not base.empty:
        base_kernels, base_waves, base_busy = _wave_points(base)
        if not base_kernels.empty:
            traces.append(_baseline_kernels(base_kernels, base_waves, base_busy, hover))
    return {"data": traces, "layout": plot_layout(
        "Waves and tail: share of SM block slots busy (size: kernel time)", 420,
        xaxis={"title": {"text": "waves per SM (log)"}, "type": "log", "dtick": 1},
        yaxis={"title": {"text": "wave efficiency / SM coverage"}, "range": [0, 1.05]},
        shapes=[{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"dash": "dot", "color": "#999", "width": 1}}])}


def stall_columns(frame: pd.DataFrame) -> dict:
    """family -> the column holding its share of the stalls (V6)."""
    return {family: f"stall_{family}_share" for family in STALL_FAMILIES
            if frame is not None and f"stall_{family}_share" in frame.columns}


def fig_stalls(groups: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    groups = story(groups)
    if groups is None or groups.empty:
        return None
    columns = stall_columns(groups)
    if not columns:
        return None
    compare = base is not None and not base.empty and bool(stall_columns(base))
    groups = _with_base_groups(groups, base) if compare else groups
    base = story(base) if compare else base
    labels, keys = _labels(groups), _keys(groups)
    traces = []
    sides = [("this run", groups, 1.0)]
    if compare:
        lookup = {key: row for key, (_, row) in zip(group_keys(base), base.iterrows())}
        aligned = pd.DataFrame([lookup.get(key, pd.Series(dtype=float))
                                for key in group_keys(groups)]).reset_index(drop=True)
        sides.append((BASELINE, aligned, 0.45))
    for side, frame, opacity in sides:
        below = pd.Series(0.0, index=range(len(groups)))
        for family, column in columns.items():
            values = (numbers(frame, column).reset_index(drop=True) * 100)  # shares as percent
            traces.append({"type": "bar", "name": plot_text(family if side != BASELINE else f"baseline {family}"),
                           "x": labels, "y": _values(values), "base": _values(below), "customdata": keys,
                           "offsetgroup": side, "legendgroup": BASELINE if side == BASELINE else family,
                           "showlegend": side != BASELINE or family == next(iter(columns)),
                           "marker": {"color": STALL_COLORS[family], "opacity": opacity},
                           "hovertemplate": f"%{{x}}<br>{plot_text(side)} {plot_text(family)}: "
                                            "%{y:.3g} %<extra></extra>"})
            below = below + values.fillna(0)
        if side == BASELINE:
            traces[-len(columns)]["name"] = "baseline (paler, right of each)"
    return {"data": traces, "layout": plot_layout(
        "Why resident warps do not issue: stall shares by family", 420,
        barmode="group" if compare else "stack",
        yaxis={"title": {"text": "% of stalled warp-cycles"}, "range": [0, 101]},
        xaxis={"tickangle": -30})}


PATH_CEILING_NAMES = {"gmma": "tensor, wgmma", "tcgen05": "tensor, tcgen05", "hmma": "tensor, mma.sync",
                      "imma": "tensor, int mma.sync", "none": "FP32 CUDA cores"}


def device_ceilings(kernels: pd.DataFrame, device: dict) -> dict:
    """The roofline's ceilings: DRAM bytes/s and FLOP/s per path (tensor wgmma, mma.sync, FP32).

    Taken from the device when given, else from V7's per-kernel columns (`dram_peak_bytes_per_s`,
    the DRAM peak of the kernel's device; `ridge_flops_per_byte` times it, the FLOP/s peak of the
    path the kernel took)."""
    peak_bw = device.get("peak_dram_bytes_per_s")
    if is_missing(peak_bw) or not peak_bw:
        peaks = numbers(kernels, "dram_peak_bytes_per_s").dropna()
        peak_bw = float(peaks.median()) if not peaks.empty else None
    flops = dict(device.get("peak_flops_per_s_by_path") or {})
    if not flops and peak_bw:
        per_kernel = numbers(kernels, "ridge_flops_per_byte") * numbers(kernels, "dram_peak_bytes_per_s")
        paths = col(kernels, "mma_path").astype("object")
        for path in ("gmma", "tcgen05", "hmma", "imma", "none"):
            values = per_kernel[(paths == path) & per_kernel.notna()]
            if not values.empty:
                flops[path] = float(values.median())
    return {"peak_dram_bytes_per_s": peak_bw, "peak_flops_per_s_by_path": flops}


def _roofline_points(kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    intensity = numbers(kernels, "intensity")
    rate = numbers(kernels, "flops") / (numbers(kernels, "time_ns") * 1e-9)
    ok = (intensity.notna() & (intensity > 0) & rate.notna() & (rate > 0)).to_numpy()
    return kernels[ok], intensity[ok], rate[ok]


def fig_roofline(kernels: pd.DataFrame, device: dict, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    ceilings = device_ceilings(kernels, device)
    kernels, intensity, rate = _roofline_points(kernels)
    if kernels.empty:
        return None
    hover = "%{text}<br>%{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>"
    phases = set(kernels["phase"])
    traces = [_kernel_markers(phase, kernels[mask], intensity[mask], rate[mask] / 1e12, 0.75, hover,
                              setup=phase in OUTSIDE_PHASES and len(phases) > 1)
              for phase, mask in _by_phase(kernels)]
    lo = float(min(intensity.min(), 0.1)) / 2
    if base is not None and not base.empty:
        base_kernels, base_intensity, base_rate = _roofline_points(base)
        if not base_kernels.empty:
            traces.append(_baseline_kernels(base_kernels, base_intensity, base_rate / 1e12, hover))
            lo = min(lo, float(base_intensity.min()) / 2)
    # the useful work (2·M·N·K where the shape is known) of the same kernels, below their executed
    # FLOPs by their padding: open markers
    useful = numbers(kernels, "useful_work_flops")
    seconds = numbers(kernels, "time_ns") * 1e-9
    useful_intensity = useful / numbers(kernels, "dram_bytes")
    shown = useful.notna() & (useful > 0) & (useful < numbers(kernels, "flops")) & (useful_intensity > 0)
    if shown.any():
        traces.append({"type": "scatter", "mode": "markers", "name": "useful FLOPs (open)",
                       "x": _values(useful_intensity[shown]), "y": _values(useful[shown] / seconds[shown] / 1e12),
                       "text": _kernel_hover(kernels[shown]),
                       "marker": {"size": _marker_sizes(kernels[shown]), "symbol": "circle-open",
                                  "color": "#333", "line": {"width": 1}},
                       "hovertemplate": "%{text}<br>useful: %{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>"})
    bw = ceilings["peak_dram_bytes_per_s"]
    peaks = ceilings["peak_flops_per_s_by_path"]
    hi = float(max(intensity.max(), *(p / bw * 4 for p in peaks.values()))) if bw and peaks else \
        float(intensity.max()) * 4
    if bw:
        top = max(peaks.values()) if peaks else hi * bw
        xs = [lo, top / bw]
        traces.append({"type": "scatter", "mode": "lines", "name": f"DRAM {bw / 1e12:.2f} TB/s",
                       "x": xs, "y": [x * bw / 1e12 for x in xs],
                       "line": {"color": "#333", "width": 2}, "hoverinfo": "name"})
        for (path, peak), dash in zip(sorted(peaks.items(), key=lambda kv: -kv[1]),
                                      ("dash", "dot", "dashdot")):
            name = f"{PATH_CEILING_NAMES.get(path, path)} {peak / 1e12:,.0f} TFLOP/s"
            traces.append({"type": "scatter", "mode": "lines", "name": plot_text(name),
                           "x": [peak / bw, hi], "y": [peak / 1e12, peak / 1e12],
                           "line": {"color": "#333", "width": 1.5, "dash": dash}, "hoverinfo": "name"})
    return {"data": traces, "layout": plot_layout(
        "Roofline: each kernel under the device's ceilings (size: kernel time)", 480,
        # beside the plot, as wide as its names: plotly widens the right margin to fit it
        legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top", "xanchor": "left"},
        xaxis={"title": {"text": "arithmetic intensity (FLOP / DRAM byte, log)"}, "type": "log", "dtick": 1},
        yaxis={"title": {"text": "TFLOP/s (log)"}, "type": "log", "dtick": 1})}


def fig_time_compare(groups: pd.DataFrame, base: pd.DataFrame, unit: str = "ms",
                     per: str = "") -> Optional[dict]:
    """Baseline against current time per phase and role (`per`: as fig_time's)."""
    if groups is None or groups.empty or base is None or base.empty:
        return None
    groups = _with_base_groups(story(groups), base)
    scale = {"ms": 1e-6, "µs": 1e-3}[unit]
    traces = [_bar(groups, "this run", numbers(groups, "time_ns") * scale, "#4c78a8",
                   value_format=f"%{{y:.4g}} {unit}{per}"),
              _baseline_marks(groups, base, "this run", "time_ns", scale, value_format=f"%{{y:.4g}} {unit}{per}")]
    return {"data": traces, "layout": plot_layout(
        "Time per phase and role against the baseline (dash: the baseline)", 400, barmode="group",
        scattermode="group", yaxis={"title": {"text": f"kernel time{per} ({unit})"}}, xaxis={"tickangle": -30})}
