"""The report's figures as plain plotly.js dicts (data, layout), from the views' frames.

Every label and hover text goes through `plot_text`; values are plain floats or None (missing is
a gap in the figure, never 0). A builder returns None when the views gave it nothing to draw.
"""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from reports.html_text import (PHASE_ORDER, _order_key, col, group_label, is_missing, numbers,
                               plot_text, short_name, sort_groups)
from views import gap as gap_figures, registry
from views.vocabulary import STALL_FAMILIES

PHASE_COLORS = {"cold_prefill": "#4c78a8", "warm_prefill": "#72b7b2", "prefill": "#4c78a8",
                "decode": "#f58518", "other": "#9d9d9d"}
ROLE_COLORS = {"qkv_proj": "#4c78a8", "attention": "#e45756", "o_proj": "#72b7b2",
               "gate_up_proj": "#54a24b", "down_proj": "#eeca3b", "elementwise": "#b279a2",
               "gemm": "#ff9da6", "other": "#9d9d9d"}
LEVEL_COLORS = ("#9d9d9d", "#72b7b2", "#4c78a8", "#54a24b")
STALL_COLORS = {"memory": "#4c78a8", "compute": "#f58518", "tensor": "#54a24b", "sync": "#e45756",
                "scheduling": "#b279a2"}


# --- figures (plain plotly dicts; every label through plot_text) ---------------------------------

def _layout(title: str, height: int = 380, **extra) -> dict:
    layout = {
        "title": {"text": plot_text(title), "font": {"size": 14}, "x": 0.01, "xref": "paper",
                  "y": 1.0, "yref": "container", "yanchor": "top", "pad": {"t": 10}},
        "height": height, "margin": {"l": 64, "r": 24, "t": 76, "b": 40},
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "traceorder": "normal"},
        "xaxis": {"gridcolor": "#eeeeee", "automargin": True, "zeroline": False},
        "yaxis": {"gridcolor": "#eeeeee", "automargin": True, "zeroline": False},
        "hoverlabel": {"namelength": -1},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(layout.get(key), dict):
            layout[key] = {**layout[key], **value}
        else:
            layout[key] = value
    return layout


def _labels(groups: pd.DataFrame) -> list:
    return [plot_text(group_label(p, r)) for p, r in zip(col(groups, "phase"), col(groups, "role"))]


def _values(series: pd.Series) -> list:
    return [None if is_missing(v) else float(v) for v in pd.to_numeric(series, errors="coerce")]


def _bar(labels: list, name: str, values: pd.Series, color: str, hover_name: Optional[str] = None,
         value_format: str = "%{y:.3g} %") -> dict:
    """One bar per group; the hover says `hover_name` (default: `name`) and the value."""
    return {"type": "bar", "name": plot_text(name), "x": labels, "y": _values(values),
            "marker": {"color": color},
            "hovertemplate": f"%{{x}}<br>{plot_text(hover_name or name)}: {value_format}<extra></extra>"}


def fig_gap(groups: pd.DataFrame) -> Optional[dict]:
    """Headline SM throughput against SM active, tensor pipe and useful tensor work, per group."""
    if groups is None or groups.empty:
        return None
    groups = sort_groups(groups)
    labels = _labels(groups)
    catalog = registry.figures()
    traces = [_bar(labels, catalog[column].label, col(groups, column), color)
              for column, color in zip(gap_figures.STEPS, LEVEL_COLORS)]
    return {"data": traces, "layout": _layout(
        "From the headline to useful tensor work, per phase and role (time-weighted)", 420,
        barmode="group", yaxis={"title": {"text": "% of peak"}, "rangemode": "tozero"},
        xaxis={"tickangle": -30})}


def fig_time(groups: pd.DataFrame) -> Optional[dict]:
    """Time per phase, split by role."""
    if groups is None or groups.empty or "time_ns" not in groups.columns:
        return None
    groups = sort_groups(groups)
    phases = list(dict.fromkeys(groups["phase"]))
    traces = []
    for role in dict.fromkeys(groups["role"]):
        rows = groups[groups["role"] == role]
        by_phase = dict(zip(rows["phase"], pd.to_numeric(rows["time_ns"], errors="coerce")))
        traces.append({
            "type": "bar", "orientation": "h", "name": plot_text(role),
            "y": [plot_text(p) for p in phases],
            "x": [None if is_missing(by_phase.get(p)) else float(by_phase[p]) / 1e6 for p in phases],
            "marker": {"color": ROLE_COLORS.get(role, "#9d9d9d")},
            "hovertemplate": "%{y} \u00b7 " + plot_text(role) + ": %{x:.4g} ms<extra></extra>"})
    return {"data": traces, "layout": _layout(
        "GPU time by phase and role", 140 + 44 * len(phases), barmode="stack",
        xaxis={"title": {"text": "kernel time (ms)"}}, yaxis={"autorange": "reversed"},
        margin={"b": 50})}


def fig_tensor(groups: pd.DataFrame) -> Optional[dict]:
    """Tensor pipe and useful tensor work per group, with fill on a second axis."""
    if groups is None or groups.empty:
        return None
    groups = sort_groups(groups)
    tensor = numbers(groups, "tensor_pipe_pct")
    groups = groups[tensor.notna() & (tensor > 0)]
    if groups.empty:
        return None
    labels = _labels(groups)
    catalog = registry.figures()
    traces = [
        _bar(labels, catalog["tensor_pipe_pct"].label, col(groups, "tensor_pipe_pct"), LEVEL_COLORS[2]),
        _bar(labels, catalog["useful_tensor_pct"].label, col(groups, "useful_tensor_pct"), LEVEL_COLORS[3]),
        {"type": "scatter", "mode": "markers", "name": "fill (right axis)", "x": labels,
         "y": _values(col(groups, "fill")), "yaxis": "y2",
         "marker": {"symbol": "diamond", "size": 11, "color": "#e45756"},
         "hovertemplate": "%{x}<br>fill: %{y:.3f}<extra></extra>"},
    ]
    return {"data": traces, "layout": _layout(
        "Tensor pipe, fill and useful tensor work", 400, barmode="group",
        yaxis={"title": {"text": "% of peak"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "fill (useful / executed)"}, "overlaying": "y", "side": "right",
                "range": [0, 1.05], "showgrid": False},
        xaxis={"tickangle": -30})}


def fig_occupancy(groups: pd.DataFrame) -> Optional[dict]:
    if groups is None or groups.empty:
        return None
    groups = sort_groups(groups)
    labels = _labels(groups)
    traces = [_bar(labels, "theoretical", col(groups, "theoretical_occupancy_pct"), "#c6dbef"),
              _bar(labels, "achieved", col(groups, "achieved_occupancy_pct"), "#4c78a8")]
    return {"data": traces, "layout": _layout(
        "Achieved against theoretical occupancy (% of 64 warps per SM)", 380, barmode="group",
        yaxis={"title": {"text": "% of max warps"}, "range": [0, 105]}, xaxis={"tickangle": -30})}


def _kernel_hover(kernels: pd.DataFrame) -> list:
    return [plot_text(f"#{i} {short_name(n, 60)} ({p} \u00b7 {r})")
            for i, n, p, r in zip(col(kernels, "id"), col(kernels, "name"), col(kernels, "phase"),
                                  col(kernels, "role"))]


def _by_phase(kernels: pd.DataFrame):
    """(phase, row mask) for each phase present, in run order."""
    for phase in sorted(dict.fromkeys(kernels["phase"]), key=lambda p: _order_key([p], PHASE_ORDER)):
        yield phase, kernels["phase"] == phase


def _kernel_markers(phase: str, rows: pd.DataFrame, x: pd.Series, y: pd.Series, opacity: float,
                    hovertemplate: str) -> dict:
    """One phase's kernels as markers sized by kernel time, with their names in the hover."""
    return {"type": "scatter", "mode": "markers", "name": plot_text(phase), "x": _values(x),
            "y": _values(y), "text": _kernel_hover(rows),
            "marker": {"size": _marker_sizes(rows), "color": PHASE_COLORS.get(phase, "#9d9d9d"),
                       "opacity": opacity, "line": {"width": 0.5, "color": "#333"}},
            "hovertemplate": hovertemplate}


def _marker_sizes(kernels: pd.DataFrame) -> list:
    time = numbers(kernels, "time_ns")
    top = time.max() if time.notna().any() else 1.0
    return [6.0 if is_missing(t) or not top else round(5 + 20 * math.sqrt(t / top), 1) for t in time]


def fig_waves(kernels: pd.DataFrame) -> Optional[dict]:
    """Each kernel's waves against the share of block slots busy; left of one wave, SM coverage."""
    waves = numbers(kernels, "waves")
    kernels = kernels[waves.notna() & (waves > 0)]
    if kernels.empty:
        return None
    traces = []
    for phase, mask in _by_phase(kernels):
        rows = kernels[mask]
        efficiency = numbers(rows, "wave_efficiency")
        coverage = numbers(rows, "sm_coverage")
        w = numbers(rows, "waves")
        # Below one wave, what is idle is SMs with no block at all: coverage says it.
        y = efficiency.where(w >= 1, coverage.fillna(efficiency))
        traces.append(_kernel_markers(
            phase, rows, w, y, 0.7, "%{text}<br>waves: %{x:.3g}<br>busy share: %{y:.3f}<extra></extra>"))
    return {"data": traces, "layout": _layout(
        "Waves and tail: share of SM block slots busy (size: kernel time)", 400,
        xaxis={"title": {"text": "waves per SM (log)"}, "type": "log"},
        yaxis={"title": {"text": "wave efficiency / SM coverage"}, "range": [0, 1.05]},
        shapes=[{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"dash": "dot", "color": "#999", "width": 1}}])}


def stall_columns(frame: pd.DataFrame) -> dict:
    """family -> the column holding its share of the stalls (V6)."""
    return {family: f"stall_{family}_share" for family in STALL_FAMILIES
            if frame is not None and f"stall_{family}_share" in frame.columns}


def fig_stalls(groups: pd.DataFrame) -> Optional[dict]:
    if groups is None or groups.empty:
        return None
    columns = stall_columns(groups)
    if not columns:
        return None
    groups = sort_groups(groups)
    values = {f: numbers(groups, c) for f, c in columns.items()}
    labels = _labels(groups)
    traces = [_bar(labels, f, v * 100, STALL_COLORS[f]) for f, v in values.items()]  # shares as percent
    return {"data": traces, "layout": _layout(
        "Why resident warps do not issue: stall shares by family", 400, barmode="stack",
        yaxis={"title": {"text": "% of stalled warp-cycles"}, "range": [0, 101]},
        xaxis={"tickangle": -30})}


PATH_CEILING_NAMES = {"gmma": "tensor, wgmma", "hmma": "tensor, mma.sync", "none": "FP32 CUDA cores"}


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
        for path in ("gmma", "hmma", "none"):
            values = per_kernel[(paths == path) & per_kernel.notna()]
            if not values.empty:
                flops[path] = float(values.median())
    return {"peak_dram_bytes_per_s": peak_bw, "peak_flops_per_s_by_path": flops}


def fig_roofline(kernels: pd.DataFrame, device: dict) -> Optional[dict]:
    intensity = numbers(kernels, "intensity")
    rate = numbers(kernels, "flops") / (numbers(kernels, "time_ns") * 1e-9)
    ok = intensity.notna() & (intensity > 0) & rate.notna() & (rate > 0)
    if not ok.any():
        return None
    ceilings = device_ceilings(kernels, device)
    kernels, intensity, rate = kernels[ok], intensity[ok], rate[ok]
    traces = []
    for phase, mask in _by_phase(kernels):
        traces.append(_kernel_markers(
            phase, kernels[mask], intensity[mask], rate[mask] / 1e12, 0.75,
            "%{text}<br>%{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>"))
    bw = ceilings["peak_dram_bytes_per_s"]
    peaks = ceilings["peak_flops_per_s_by_path"]
    lo = float(min(intensity.min(), 0.1)) / 2
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
    return {"data": traces, "layout": _layout(
        "Roofline: each kernel under the device's ceilings (size: kernel time)", 460,
        legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top", "xanchor": "left"},
        margin={"r": 230},
        xaxis={"title": {"text": "arithmetic intensity (FLOP / DRAM byte, log)"}, "type": "log"},
        yaxis={"title": {"text": "TFLOP/s (log)"}, "type": "log"})}


def fig_time_compare(groups: pd.DataFrame, base: pd.DataFrame) -> Optional[dict]:
    """Baseline against current time per phase and role."""
    if groups is None or groups.empty or base is None or base.empty:
        return None
    merged = _merge_groups(groups, base)
    labels = _labels(merged)
    traces = [_bar(labels, "baseline", numbers(merged, "time_ns_base") / 1e6, "#c6dbef", value_format="%{y:.4g} ms"),
              _bar(labels, "this run", numbers(merged, "time_ns") / 1e6, "#4c78a8", value_format="%{y:.4g} ms")]
    return {"data": traces, "layout": _layout(
        "Time per phase and role against the baseline", 400, barmode="group",
        yaxis={"title": {"text": "kernel time (ms)"}}, xaxis={"tickangle": -30})}


def _merge_groups(groups: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    base = base.rename(columns={c: f"{c}_base" for c in base.columns if c not in ("phase", "role")})
    return sort_groups(groups.merge(base, on=["phase", "role"], how="outer"))
