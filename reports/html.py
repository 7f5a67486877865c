"""One self-contained HTML report per run or comparison (plotly.js inlined, no network).

The input is plain DataFrames under the names of VIEWS.md's machine-readable form (kernels: `id`,
`name`, `phase`, `role`, `time_ns`, figures, `validation_V1`..`V8`, `validation_detail_V*`; groups:
`phase`, `role`, `time_ns`, `kernels`, time-weighted figures; gap: one row per phase and role).
`from_views(result, run)` adapts a `views.registry.ViewsResult`; nothing here imports `profiler`.

Every string that came from a capture (kernel names, NVTX messages, even phase and role names) is
untrusted: HTML gets `html.escape`, JSON inside <script> gets `<`, `>`, `&`, U+2028 and U+2029 as
`\\uXXXX`, and text handed to plotly (which reads a little HTML in its labels) gets entities.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import pandas as pd

PHASE_ORDER = ("cold_prefill", "warm_prefill", "prefill", "decode", "other")
ROLE_ORDER = ("qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "elementwise", "gemm",
              "other")
VIEW_IDS = tuple(f"V{i}" for i in range(1, 9))
VIEW_TITLES = {
    "V1": "Time and SM activity", "V2": "Tensor pipe", "V3": "Fragment fill",
    "V4": "Occupancy", "V5": "Waves and tail", "V6": "Stall signature",
    "V7": "Memory and roofline", "V8": "Kernel selection",
}
STALL_FAMILIES = ("memory", "compute", "tensor", "sync", "scheduling")

# Which way is better for each figure, to mark a regression against a baseline. A change worse than
# REGRESSION_PCT percent is marked; the CI gate (reports/gate.py) owns real statistics.
HIGHER_IS_BETTER = {
    "sm_active_pct", "sm_throughput_pct", "tensor_pipe_pct", "fill", "useful_tensor_pct",
    "achieved_occupancy_pct", "wave_efficiency", "sm_coverage", "issue_active_pct", "intensity",
    "roofline_pct", "dram_pct",
}
LOWER_IS_BETTER = {"time_ns", "dram_bytes", "time_share_pct"}
REGRESSION_PCT = 5.0

PHASE_COLORS = {"cold_prefill": "#4c78a8", "warm_prefill": "#72b7b2", "prefill": "#4c78a8",
                "decode": "#f58518", "other": "#9d9d9d"}
ROLE_COLORS = {"qkv_proj": "#4c78a8", "attention": "#e45756", "o_proj": "#72b7b2",
               "gate_up_proj": "#54a24b", "down_proj": "#eeca3b", "elementwise": "#b279a2",
               "gemm": "#ff9da6", "other": "#9d9d9d"}
LEVEL_COLORS = ("#9d9d9d", "#72b7b2", "#4c78a8", "#54a24b")
STALL_COLORS = {"memory": "#4c78a8", "compute": "#f58518", "tensor": "#54a24b", "sync": "#e45756",
                "scheduling": "#b279a2"}


# --- escaping -------------------------------------------------------------------------------------

def esc(value: Any) -> str:
    """Text for HTML content or a quoted attribute; missing values are an em dash."""
    if is_missing(value):
        return "\u2014"
    return html.escape(str(value), quote=True)


def plot_text(value: Any) -> str:
    """Text for a plotly label or hover: plotly reads <br>, <b>, <a href> and entities in labels,
    so markup is turned into entities that plotly shows as the characters themselves."""
    if is_missing(value):
        return "\u2014"
    return html.escape(str(value), quote=False)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                  "\u2029": "\\u2029"}


def script_json(obj: Any) -> str:
    """JSON that is safe inside <script>: no `</script>`, `<!--` or line separators can appear,
    NaN and infinities become null."""
    text = json.dumps(_plain(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group(0)], text)


def _plain(obj: Any) -> Any:
    """Python containers and numbers only, with NaN and +-inf as None, floats rounded to 5
    significant digits (the report shows 3; this keeps per-kernel data small)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return _plain(obj.tolist())
    if obj is None or obj is pd.NA or obj is pd.NaT:
        return None
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.5g}")
    if hasattr(obj, "item"):  # numpy scalar
        return _plain(obj.item())
    return str(obj)


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    try:
        return bool(pd.isna(value)) if not isinstance(value, (list, tuple, dict, str)) else False
    except (TypeError, ValueError):
        return False


# --- the input ------------------------------------------------------------------------------------

@dataclass
class ReportInput:
    """One run's view results as plain frames, plus what is known about the run and device."""

    run: dict
    kernels: pd.DataFrame
    groups: pd.DataFrame
    gap: pd.DataFrame = field(default_factory=pd.DataFrame)
    device: dict = field(default_factory=dict)  # peak_flops_per_s, peak_dram_bytes_per_s, ...


# ViewsResult.kernels may keep the kernels table's names; the report reads VIEWS.md's JSON names.
_KERNEL_RENAMES = {
    "kernel_id": "id", "kernel_name": "name", "gpu__time_duration.sum": "time_ns",
}


def from_views(result: Any, run: dict, device: Optional[dict] = None) -> ReportInput:
    """Adapt a views result (`.kernels`, `.groups`, `.gap`) without importing it."""
    kernels = result.kernels.copy()
    for old, new in _KERNEL_RENAMES.items():
        if old in kernels.columns and new not in kernels.columns:
            kernels = kernels.rename(columns={old: new})
    groups = result.groups.copy() if getattr(result, "groups", None) is not None else pd.DataFrame()
    gap = result.gap.copy() if getattr(result, "gap", None) is not None else pd.DataFrame()
    dev = dict(getattr(result, "device", None) or {})
    dev.update(device or {})
    return ReportInput(run=dict(run), kernels=kernels, groups=groups, gap=gap, device=dev)


def filter_input(data: ReportInput, phase: Optional[str] = None,
                 role: Optional[str] = None) -> ReportInput:
    """Keep the kernels and groups of one phase and/or role."""

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if frame is None or frame.empty:
            return frame
        mask = pd.Series(True, index=frame.index)
        if phase and "phase" in frame.columns:
            mask &= frame["phase"] == phase
        if role and "role" in frame.columns:
            mask &= frame["role"] == role
        return frame[mask]

    return ReportInput(run=data.run, kernels=keep(data.kernels), groups=keep(data.groups),
                       gap=keep(data.gap), device=data.device)


# --- small helpers --------------------------------------------------------------------------------

def _order_key(values: Iterable, order: tuple) -> list:
    rank = {v: i for i, v in enumerate(order)}
    return [rank.get(v, len(order)) for v in values]


def sort_groups(frame: pd.DataFrame) -> pd.DataFrame:
    if frame is None or frame.empty or "phase" not in frame.columns:
        return frame
    out = frame.copy()
    out["_p"] = _order_key(out["phase"], PHASE_ORDER)
    out["_r"] = _order_key(out["role"], ROLE_ORDER) if "role" in out.columns else 0
    return out.sort_values(["_p", "_r"]).drop(columns=["_p", "_r"])


def group_label(phase: Any, role: Any) -> str:
    return f"{phase} \u00b7 {role}"


def short_name(name: Any, limit: int = 80) -> str:
    """`void ns::kernel<...>(...)` -> `ns::kernel`: the part that tells kernels apart at a glance."""
    if is_missing(name):
        return ""
    text = str(name)
    stripped = text[5:] if text.startswith("void ") else text
    # Drop template arguments and the parameter list, innermost first.
    for _ in range(20):
        new = re.sub(r"<[^<>]*>", "", stripped)
        if new == stripped:
            break
        stripped = new
    stripped = re.sub(r"\(.*$", "", stripped).strip()
    if not stripped:
        stripped = text
    return stripped if len(stripped) <= limit else stripped[: limit - 1] + "\u2026"


def col(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column, or all-missing when the views did not produce it."""
    if frame is not None and name in frame.columns:
        return frame[name]
    return pd.Series([float("nan")] * (0 if frame is None else len(frame)),
                     index=None if frame is None else frame.index, dtype="float64")


def num(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(col(frame, name), errors="coerce")


def fmt(value: Any, digits: int = 3, unit: str = "") -> str:
    """A number with `digits` significant digits (thousands separated), or an em dash."""
    if is_missing(value):
        return "\u2014"
    if isinstance(value, str):
        return value
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return "\u2014"
    if v != 0 and abs(v) >= 10 ** digits:
        text = f"{v:,.0f}"
    else:
        text = f"{v:.{digits}g}"
    return text + unit


def fmt_time_ns(ns: Any) -> str:
    if is_missing(ns):
        return "\u2014"
    ns = float(ns)
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} \u00b5s"
    return f"{ns:.3g} ns"


def fmt_bytes(b: Any) -> str:
    if is_missing(b):
        return "\u2014"
    b = float(b)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.3g} B"


def delta_pct(current: Any, base: Any) -> Optional[float]:
    if is_missing(current) or is_missing(base):
        return None
    current, base = float(current), float(base)
    if base == 0:
        return None
    return (current - base) / abs(base) * 100.0


def is_regression(figure: str, delta: Optional[float]) -> bool:
    if delta is None:
        return False
    if figure in HIGHER_IS_BETTER:
        return delta < -REGRESSION_PCT
    if figure in LOWER_IS_BETTER:
        return delta > REGRESSION_PCT
    return False


# --- validation status ----------------------------------------------------------------------------

def validation_frame(kernels: pd.DataFrame) -> pd.DataFrame:
    """Columns `V1`..`V8` (pass / fail / n/a) and `detail_V1`.. per kernel, from either the
    `validation_V*` columns or a `validations` mapping column (JSON form)."""
    out = pd.DataFrame(index=kernels.index)
    mapping = kernels["validations"] if "validations" in kernels.columns else None
    for view in VIEW_IDS:
        if f"validation_{view}" in kernels.columns:
            status = kernels[f"validation_{view}"]
        elif mapping is not None:
            status = mapping.map(lambda m, v=view: m.get(v) if isinstance(m, dict) else None)
        else:
            status = pd.Series([None] * len(kernels), index=kernels.index, dtype="object")
        out[view] = status.map(lambda s: "n/a" if is_missing(s) or s not in ("pass", "fail") else s)
        out[f"detail_{view}"] = col(kernels, f"validation_detail_{view}").astype("object")
    return out


@dataclass
class ViewStatus:
    view: str
    passed: int
    failed: int
    not_available: int
    failures: list  # (kernel id, short name, detail)

    @property
    def status(self) -> str:
        if self.failed:
            return "fail"
        return "pass" if self.passed else "n/a"


def view_status(kernels: pd.DataFrame, view: str, checks: Optional[pd.DataFrame] = None
                ) -> ViewStatus:
    checks = validation_frame(kernels) if checks is None else checks
    status = checks[view] if view in checks.columns else pd.Series(dtype="object")
    failures = []
    for idx in status.index[status == "fail"]:
        failures.append((kernels.at[idx, "id"] if "id" in kernels.columns else idx,
                         short_name(kernels.at[idx, "name"]) if "name" in kernels.columns else "",
                         checks.at[idx, f"detail_{view}"]))
    return ViewStatus(view, int((status == "pass").sum()), int((status == "fail").sum()),
                      int((status == "n/a").sum()), failures)


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


def fig_gap(groups: pd.DataFrame) -> Optional[dict]:
    """Headline SM throughput against SM active, tensor pipe and useful tensor work, per group."""
    if groups is None or groups.empty:
        return None
    groups = sort_groups(groups)
    labels = _labels(groups)
    levels = (("sm_throughput_pct", "SM throughput (headline)"), ("sm_active_pct", "SM active"),
              ("tensor_pipe_pct", "tensor pipe"), ("useful_tensor_pct", "useful tensor work"))
    traces = []
    for (column, name), color in zip(levels, LEVEL_COLORS):
        traces.append({"type": "bar", "name": plot_text(name), "x": labels,
                       "y": _values(col(groups, column)), "marker": {"color": color},
                       "hovertemplate": "%{x}<br>" + plot_text(name) + ": %{y:.3g} %<extra></extra>"})
    return {"data": traces, "layout": _layout(
        "From the headline to useful tensor work, per phase and role (time-weighted)", 420,
        barmode="group", yaxis={"title": {"text": "% of peak"}, "rangemode": "tozero"},
        xaxis={"tickangle": -30})}


def fig_time(groups: pd.DataFrame) -> Optional[dict]:
    """Time per phase, split by role."""
    if groups is None or groups.empty or "time_ns" not in groups.columns:
        return None
    groups = sort_groups(groups)
    phases = [p for p in dict.fromkeys(groups["phase"])]
    traces = []
    for role in dict.fromkeys(sort_groups(groups.assign())["role"]):
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
    tensor = num(groups, "tensor_pipe_pct")
    groups = groups[tensor.notna() & (tensor > 0)]
    if groups.empty:
        return None
    labels = _labels(groups)
    traces = [
        {"type": "bar", "name": "tensor pipe", "x": labels, "y": _values(col(groups, "tensor_pipe_pct")),
         "marker": {"color": LEVEL_COLORS[2]},
         "hovertemplate": "%{x}<br>tensor pipe: %{y:.3g} %<extra></extra>"},
        {"type": "bar", "name": "useful tensor work", "x": labels,
         "y": _values(col(groups, "useful_tensor_pct")), "marker": {"color": LEVEL_COLORS[3]},
         "hovertemplate": "%{x}<br>useful: %{y:.3g} %<extra></extra>"},
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
    traces = [
        {"type": "bar", "name": "theoretical", "x": labels,
         "y": _values(col(groups, "theoretical_occupancy_pct")), "marker": {"color": "#c6dbef"},
         "hovertemplate": "%{x}<br>theoretical: %{y:.3g} %<extra></extra>"},
        {"type": "bar", "name": "achieved", "x": labels,
         "y": _values(col(groups, "achieved_occupancy_pct")), "marker": {"color": "#4c78a8"},
         "hovertemplate": "%{x}<br>achieved: %{y:.3g} %<extra></extra>"},
    ]
    return {"data": traces, "layout": _layout(
        "Achieved against theoretical occupancy (% of 64 warps per SM)", 380, barmode="group",
        yaxis={"title": {"text": "% of max warps"}, "range": [0, 105]}, xaxis={"tickangle": -30})}


def _kernel_hover(kernels: pd.DataFrame) -> list:
    return [plot_text(f"#{i} {short_name(n, 60)} ({p} \u00b7 {r})")
            for i, n, p, r in zip(col(kernels, "id"), col(kernels, "name"), col(kernels, "phase"),
                                  col(kernels, "role"))]


def _marker_sizes(kernels: pd.DataFrame) -> list:
    time = num(kernels, "time_ns")
    top = time.max() if time.notna().any() else 1.0
    return [6.0 if is_missing(t) or not top else round(5 + 20 * math.sqrt(t / top), 1) for t in time]


def fig_waves(kernels: pd.DataFrame) -> Optional[dict]:
    """Each kernel's waves against the share of block slots busy; left of one wave, SM coverage."""
    waves = num(kernels, "waves")
    kernels = kernels[waves.notna() & (waves > 0)]
    if kernels.empty:
        return None
    traces = []
    for phase in sorted(dict.fromkeys(kernels["phase"]), key=lambda p: _order_key([p], PHASE_ORDER)):
        rows = kernels[kernels["phase"] == phase]
        efficiency = num(rows, "wave_efficiency")
        coverage = num(rows, "sm_coverage")
        w = num(rows, "waves")
        # Below one wave, what is idle is SMs with no block at all: coverage says it.
        y = efficiency.where(w >= 1, coverage.fillna(efficiency))
        traces.append({
            "type": "scatter", "mode": "markers", "name": plot_text(phase),
            "x": _values(w), "y": _values(y), "text": _kernel_hover(rows),
            "marker": {"size": _marker_sizes(rows), "color": PHASE_COLORS.get(phase, "#9d9d9d"),
                       "opacity": 0.7, "line": {"width": 0.5, "color": "#333"}},
            "hovertemplate": "%{text}<br>waves: %{x:.3g}<br>busy share: %{y:.3f}<extra></extra>"})
    return {"data": traces, "layout": _layout(
        "Waves and tail: share of SM block slots busy (size: kernel time)", 400,
        xaxis={"title": {"text": "waves per SM (log)"}, "type": "log"},
        yaxis={"title": {"text": "wave efficiency / SM coverage"}, "range": [0, 1.05]},
        shapes=[{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"dash": "dot", "color": "#999", "width": 1}}])}


def stall_columns(frame: pd.DataFrame) -> dict:
    """family -> the column holding its share, whatever suffix the views used."""
    found = {}
    for family in STALL_FAMILIES:
        for name in (f"stall_{family}_share", f"stall_{family}_pct", f"stall_share_{family}",
                     f"{family}_stall_share", f"stall_{family}"):
            if frame is not None and name in frame.columns:
                found[family] = name
                break
    return found


def fig_stalls(groups: pd.DataFrame) -> Optional[dict]:
    if groups is None or groups.empty:
        return None
    columns = stall_columns(groups)
    if not columns:
        return None
    groups = sort_groups(groups)
    values = {f: num(groups, c) for f, c in columns.items()}
    # Shares may come as fractions or percent; show percent.
    scale = 100.0 if max((v.max() for v in values.values() if v.notna().any()), default=0) <= 1.0 else 1.0
    labels = _labels(groups)
    traces = [{"type": "bar", "name": plot_text(f), "x": labels, "y": _values(v * scale),
               "marker": {"color": STALL_COLORS[f]},
               "hovertemplate": "%{x}<br>" + plot_text(f) + ": %{y:.3g} %<extra></extra>"}
              for f, v in values.items()]
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
        peaks = num(kernels, "dram_peak_bytes_per_s").dropna()
        peak_bw = float(peaks.median()) if not peaks.empty else None
    flops = dict(device.get("peak_flops_per_s_by_path") or {})
    if not flops and peak_bw:
        per_kernel = num(kernels, "ridge_flops_per_byte") * num(kernels, "dram_peak_bytes_per_s")
        paths = col(kernels, "mma_path").astype("object")
        for path in ("gmma", "hmma", "none"):
            values = per_kernel[(paths == path) & per_kernel.notna()]
            if not values.empty:
                flops[path] = float(values.median())
    return {"peak_dram_bytes_per_s": peak_bw, "peak_flops_per_s_by_path": flops}


def fig_roofline(kernels: pd.DataFrame, device: dict) -> Optional[dict]:
    intensity = num(kernels, "intensity")
    rate = num(kernels, "flops") / (num(kernels, "time_ns") * 1e-9)
    ok = intensity.notna() & (intensity > 0) & rate.notna() & (rate > 0)
    if not ok.any():
        return None
    ceilings = device_ceilings(kernels, device)
    kernels, intensity, rate = kernels[ok], intensity[ok], rate[ok]
    traces = []
    for phase in sorted(dict.fromkeys(kernels["phase"]), key=lambda p: _order_key([p], PHASE_ORDER)):
        mask = kernels["phase"] == phase
        rows = kernels[mask]
        traces.append({
            "type": "scatter", "mode": "markers", "name": plot_text(phase),
            "x": _values(intensity[mask]), "y": _values(rate[mask] / 1e12),
            "text": _kernel_hover(rows),
            "marker": {"size": _marker_sizes(rows), "color": PHASE_COLORS.get(phase, "#9d9d9d"),
                       "opacity": 0.75, "line": {"width": 0.5, "color": "#333"}},
            "hovertemplate": "%{text}<br>%{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>"})
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
        xaxis={"title": {"text": "arithmetic intensity (FLOP / DRAM byte, log)"}, "type": "log"},
        yaxis={"title": {"text": "TFLOP/s (log)"}, "type": "log"})}


def fig_time_compare(groups: pd.DataFrame, base: pd.DataFrame) -> Optional[dict]:
    """Baseline against current time per phase and role."""
    if groups is None or groups.empty or base is None or base.empty:
        return None
    merged = _merge_groups(groups, base)
    labels = _labels(merged)
    traces = [
        {"type": "bar", "name": "baseline", "x": labels, "y": _values(num(merged, "time_ns_base") / 1e6),
         "marker": {"color": "#c6dbef"}, "hovertemplate": "%{x}<br>baseline: %{y:.4g} ms<extra></extra>"},
        {"type": "bar", "name": "this run", "x": labels, "y": _values(num(merged, "time_ns") / 1e6),
         "marker": {"color": "#4c78a8"}, "hovertemplate": "%{x}<br>this run: %{y:.4g} ms<extra></extra>"},
    ]
    return {"data": traces, "layout": _layout(
        "Time per phase and role against the baseline", 400, barmode="group",
        yaxis={"title": {"text": "kernel time (ms)"}}, xaxis={"tickangle": -30})}


def _merge_groups(groups: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    base = base.rename(columns={c: f"{c}_base" for c in base.columns if c not in ("phase", "role")})
    return sort_groups(groups.merge(base, on=["phase", "role"], how="outer"))


# --- tables (every cell escaped here, nowhere else) -----------------------------------------------

def _table(headers: list, rows: list, cls: str = "") -> str:
    """headers: plain text; rows: lists of cells already escaped (built by _cell)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<div class="tw"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _delta_cell(figure: str, current: Any, base: Any = None, formatter: Callable = fmt,
                compare: bool = False) -> str:
    """`value`, or with `compare` `value (delta %)`, marked when the change is a regression."""
    text = esc(formatter(current))
    if not compare:
        return text
    delta = delta_pct(current, base)
    if delta is None:
        return f'{text} <span class="d">({"new" if is_missing(base) else "base " + esc(formatter(base))})</span>'
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
                     f'<b>{esc(view)}</b> {esc(VIEW_TITLES.get(view, ""))}: {esc(counts)}{failures}</div>')
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
    total = num(groups, "time_ns").sum()
    base_total = num(base, "time_ns").sum() if compare else 0.0
    headers = ["phase", "role"] + (["kernels", "time", "share"] if with_time else [])
    headers += [label for _, label, _ in figures]
    rows = []
    for _, g in groups.iterrows():
        b = lookup.get((g.get("phase"), g.get("role")))

        def before(column):
            return b.get(column) if b is not None else None

        row = [esc(g.get("phase")), esc(g.get("role"))]
        if with_time:
            share = g.get("time_ns") / total * 100 if total else None
            bshare = before("time_ns") / base_total * 100 if b is not None and base_total else None
            row += [_delta_cell("kernels", g.get("kernels"), before("kernels"), fmt, compare),
                    _delta_cell("time_ns", g.get("time_ns"), before("time_ns"), fmt_time_ns, compare),
                    _delta_cell("time_share_pct", share, bshare, _pct, compare)]
        for column, _, formatter in figures:
            row.append(_delta_cell(column, g.get(column), before(column), formatter, compare))
        rows.append(row)
    return _table(headers, rows, "groups")


def _pct(v: Any) -> str:
    return fmt(v, 3, " %")


GAP_FIGURES = [("sm_throughput_pct", "SM throughput", _pct), ("sm_active_pct", "SM active", _pct),
               ("tensor_pipe_pct", "tensor pipe", _pct), ("fill", "fill", lambda v: fmt(v, 3)),
               ("useful_tensor_pct", "useful tensor", _pct)]


def gap_table(gap: pd.DataFrame, groups: pd.DataFrame, base: Optional[pd.DataFrame]) -> str:
    """The decomposition the views computed (gap.py), every column it has; else the four levels."""
    frame = gap if gap is not None and not gap.empty else groups
    if frame is None or frame.empty:
        return '<p class="na">No kernels.</p>'
    known = {c for c, _, _ in GAP_FIGURES} | {"phase", "role", "time_ns", "kernels"}
    extra = [c for c in frame.columns if c not in known and _is_numeric(frame[c])]
    figures = [f for f in GAP_FIGURES if f[0] in frame.columns]
    figures += [(c, c.replace("_", " "), lambda v: fmt(v, 3)) for c in extra]
    base_frame = None
    if base is not None and not base.empty:
        base_frame = base
    return group_table(frame, figures, base_frame, with_time="time_ns" in frame.columns)


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def limiter_table(kernels: pd.DataFrame) -> str:
    """Per phase and role, which resource limits occupancy, by share of time."""
    if kernels.empty or "occupancy_limiter" not in kernels.columns:
        return '<p class="na">No occupancy limiter in these results.</p>'
    rows = []
    frame = kernels.assign(_t=num(kernels, "time_ns").fillna(0))
    for (phase, role), g in sort_groups(frame).groupby(["phase", "role"], sort=False):
        shares = g.groupby(g["occupancy_limiter"].astype("object").map(
            lambda v: "n/a" if is_missing(v) else str(v)))["_t"].sum()
        total = shares.sum()
        text = ", ".join(f"{name} {share / total * 100:.0f} %" if total else name
                         for name, share in shares.sort_values(ascending=False).items())
        rows.append([esc(phase), esc(role), esc(text)])
    return _table(["phase", "role", "limiter (share of time)"], rows, "limiters")


SELECTION_COLUMNS = (("kernel_family", "family"), ("tile", "tile"), ("split_k", "split-K"),
                     ("name_arch", "architecture (name)"), ("arch_path", "architecture path"),
                     ("name_mma", "MMA (name)"), ("mma_path", "MMA path (counters)"))


def _selection_key(row: pd.Series, columns: list) -> tuple:
    return tuple("\u2014" if is_missing(row.get(c)) else str(row.get(c)) for c in columns)


def selection_table(kernels: pd.DataFrame) -> str:
    """What the libraries chose per phase and role, and what changed from the phase before."""
    columns = [c for c, _ in SELECTION_COLUMNS if c in kernels.columns]
    if kernels.empty or not columns:
        return '<p class="na">No kernel-selection figures in these results.</p>'
    kinds = col(kernels, "kind")
    frame = kernels[~kinds.isin(["elementwise", "other"])] if kinds.notna().any() else kernels
    if frame.empty:
        return '<p class="na">No GEMM or attention kernels.</p>'
    frame = sort_groups(frame.assign(_t=num(frame, "time_ns").fillna(0)))
    rows = []
    previous_by_role: dict = {}
    for (phase, role), g in frame.groupby(["phase", "role"], sort=False):
        choices = {}
        for _, k in g.iterrows():
            key = _selection_key(k, columns)
            count, time = choices.get(key, (0, 0.0))
            choices[key] = (count + 1, time + k["_t"])
        ordered = sorted(choices.items(), key=lambda kv: -kv[1][1])
        previous = previous_by_role.get(role)
        change = ""
        if previous is not None:
            before, after = set(previous[1]), set(choices)
            if before != after:
                change = f"differs from {previous[0]}: " + _describe_change(before, after, columns)
        previous_by_role[role] = (phase, choices)
        for i, (key, (count, time)) in enumerate(ordered):
            cells = [esc(phase) if i == 0 else "", esc(role) if i == 0 else ""]
            cells += [esc(v) for v in key]
            cells += [esc(count), esc(fmt_time_ns(time))]
            cells.append(f'<span class="chg">{esc(change)}</span>' if i == 0 and change else "")
            rows.append(cells)
    headers = ["phase", "role"] + [label for c, label in SELECTION_COLUMNS if c in columns]
    return _table(headers + ["kernels", "time", "change between phases"], rows, "selection")


def _describe_change(before: set, after: set, columns: list) -> str:
    parts = []
    for i, column in enumerate(columns):
        old = sorted({k[i] for k in before})
        new = sorted({k[i] for k in after})
        if old != new:
            parts.append(f"{dict(SELECTION_COLUMNS)[column]} {'/'.join(old)} \u2192 {'/'.join(new)}")
    return "; ".join(parts) or "another mix of the same choices"


KERNEL_COLUMNS = [
    ("time_ns", "time", fmt_time_ns), ("sm_throughput_pct", "SM thr %", fmt),
    ("tensor_pipe_pct", "tensor %", fmt), ("fill", "fill", fmt), ("useful_tensor_pct", "useful %", fmt),
    ("achieved_occupancy_pct", "occ ach %", fmt), ("theoretical_occupancy_pct", "occ theo %", fmt),
    ("occupancy_limiter", "limiter", str), ("waves", "waves", fmt), ("wave_efficiency", "wave eff", fmt),
    ("top_stall", "top stall", str), ("dram_bytes", "DRAM", fmt_bytes),
    ("intensity", "FLOP/B", fmt), ("kernel_family", "family", str), ("tile", "tile", str),
    ("split_k", "split-K", str),
]


def kernel_table(kernels: pd.DataFrame, checks: pd.DataFrame) -> str:
    """Every kernel, compactly: a short name (full names are listed once below), figures, and the
    eight validation badges with the discrepancy of each failure in its tooltip."""
    if kernels.empty:
        return '<p class="na">No kernels.</p>'
    present = [(c, label, f) for c, label, f in KERNEL_COLUMNS if c in kernels.columns]
    headers = ["#", "phase", "role", "kind", "kernel", "NVTX"] + [l for _, l, _ in present] + list(VIEW_IDS)
    rows = []
    for idx, k in kernels.iterrows():
        row = [esc(k.get("id")), esc(k.get("phase")), esc(k.get("role")), esc(k.get("kind")),
               f"<code>{esc(short_name(k.get('name')))}</code>", esc(_nvtx_text(k.get("nvtx_stack")))]
        for column, _, formatter in present:
            value = k.get(column)
            row.append(esc("\u2014" if is_missing(value) else formatter(value)))
        row += [badge(checks.at[idx, v], checks.at[idx, f"detail_{v}"]) for v in VIEW_IDS]
        rows.append(row)
    return _table(headers, rows, "kernels")


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
    frame = kernels.assign(_t=num(kernels, "time_ns").fillna(0))
    agg = frame.groupby("name", sort=False).agg(count=("_t", "size"), time=("_t", "sum"))
    agg = agg.sort_values("time", ascending=False)
    rows = [[esc(count), esc(fmt_time_ns(time)), f"<code>{esc(name)}</code>"]
            for name, count, time in zip(agg.index, agg["count"], agg["time"])]
    return _table(["kernels", "time", "full name (as ncu printed it)"], rows, "names")


# --- the page -------------------------------------------------------------------------------------

CSS = """
:root{--fg:#1d1d1f;--mute:#6e6e73;--line:#e5e5ea;--ok:#1e7b34;--bad:#b3261e;--na:#8e8e93}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:#fafafa}
header{padding:18px 28px;background:#fff;border-bottom:1px solid var(--line)}h1{font-size:20px;margin:0 0 4px}
.meta{color:var(--mute);font-size:13px}.meta b{color:var(--fg);font-weight:600}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);font-size:13px;position:sticky;top:0;z-index:5}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
main{padding:8px 28px 40px;max-width:1500px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px}
section h2{font-size:17px;margin:0 0 4px}.lead{color:var(--mute);margin:0 0 10px;max-width:110ch}
.row{display:grid;grid-template-columns:minmax(0,1fr) 330px;gap:18px}@media(max-width:1000px){.row{grid-template-columns:1fr}}
.fig{min-height:200px}
aside.valid{border-left:3px solid var(--line);padding:0 0 0 12px;font-size:12.5px}aside.valid h4{margin:2px 0 6px;font-size:13px}
.vrow{margin:0 0 8px}.vrow ul{margin:4px 0 0 0;padding-left:18px;color:var(--bad)}.vrow li{word-break:break-word}
.b{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;color:#fff;min-width:30px;text-align:center}
.b.ok{background:var(--ok)}.b.bad{background:var(--bad);cursor:help}.b.na{background:var(--na)}
.tw{overflow-x:auto;margin:8px 0}table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f5f5f7;font-weight:600;position:sticky;top:0}
table.kernels td,table.names td{font-size:12px}table.names td:last-child{white-space:normal;word-break:break-all}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.d{color:var(--mute);font-size:11.5px}.d.reg{color:var(--bad);font-weight:600}.regmark{color:var(--bad)}
.chg{color:#a15c00;white-space:normal}.na{color:var(--mute)}
details summary{cursor:pointer;color:#0b57d0;margin:6px 0}
.sum td{white-space:normal}
footer{color:var(--mute);font-size:12px;padding:0 28px 30px}
"""

RENDER_JS = """
(function(){
  var figs = JSON.parse(document.getElementById('smlens-figures').textContent);
  Object.keys(figs).forEach(function(id){
    var el = document.getElementById(id);
    Plotly.newPlot(el, figs[id].data, figs[id].layout,
                   {displaylogo:false, responsive:true, modeBarButtonsToRemove:['select2d','lasso2d']});
  });
})();
"""


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    source = get_plotlyjs()
    # The bundle goes inside <script>; it must not be able to close it.
    if "</script" in source.lower():
        source = re.sub(r"</(script)", r"<\\/\1", source, flags=re.I)
    return source


@dataclass
class Section:
    anchor: str
    title: str
    lead: str
    figure: Optional[dict]
    body: str
    views: tuple
    empty_note: str = ""
    second_figure: Optional[dict] = None  # drawn below the first (the baseline comparison)


def _sections(data: ReportInput, base: Optional[ReportInput]) -> list:
    k, g = data.kernels, data.groups
    bg = base.groups if base is not None else None
    device = device_ceilings(k, data.device)
    sections = [
        Section("gap", "The gap: headline against useful tensor work",
                "Nsight Compute's SM throughput (the figure usually quoted) against the share of cycles "
                "the SMs were active, the tensor pipe was busy, and the tensor work that was useful "
                "(not padding). Each step down is a factor one view explains.",
                fig_gap(g), gap_table(data.gap, g, base.gap if base is not None and not base.gap.empty else bg),
                ("V1", "V2", "V3")),
        Section("time", "Time by phase and role", "Where GPU time goes, summed kernel durations.",
                fig_time(g), group_table(g, [], bg), ("V1",),
                second_figure=fig_time_compare(g, bg)),
        Section("tensor", "Tensor pipe and fill",
                "Tensor pipe busy share, the fill (useful FLOPs over executed tensor ops: the rest "
                "multiplies padding), and their product.",
                fig_tensor(g), group_table(g, [("tensor_pipe_pct", "tensor pipe", _pct),
                                               ("fill", "fill", fmt),
                                               ("useful_tensor_pct", "useful tensor", _pct)], bg, False),
                ("V2", "V3")),
        Section("occupancy", "Occupancy and its limiter",
                "Warps resident per SM against what the launch allows, and the resource that limits it.",
                fig_occupancy(g), group_table(g, [("achieved_occupancy_pct", "achieved", _pct),
                                                  ("theoretical_occupancy_pct", "theoretical", _pct)],
                                              bg, False) + limiter_table(k), ("V4",)),
        Section("waves", "Waves and tail",
                "Blocks per SM slot: a fraction of a wave leaves SMs idle, a partial last wave leaves "
                "a tail.",
                fig_waves(k), group_table(g, [("waves", "waves", fmt),
                                              ("wave_efficiency", "wave efficiency", fmt),
                                              ("sm_coverage", "SM coverage", fmt),
                                              ("sm_imbalance", "SM balance", fmt)], bg, False), ("V5",)),
        Section("stalls", "Stall signature",
                "Why resident warps did not issue, as shares of stalled warp-cycles per family.",
                fig_stalls(g), group_table(g, [(c, f, fmt) for f, c in stall_columns(g).items()]
                                           + [("issue_active_pct", "issue active", _pct)], bg, False),
                ("V6",), "No stall figures in these results."),
        Section("roofline", "Memory traffic and roofline",
                f"Each kernel's FLOP/s against its arithmetic intensity, under the device's ceilings "
                f"({_ceiling_text(device)}).",
                fig_roofline(k, data.device),
                group_table(g, [("dram_bytes", "DRAM bytes", fmt_bytes), ("dram_pct", "DRAM busy", _pct),
                                ("l2_hit_pct", "L2 hit", _pct), ("flops", "FLOPs", fmt),
                                ("intensity", "FLOP/byte", fmt)], bg, False), ("V7",),
                "No kernel has both DRAM traffic and FLOPs."),
        Section("selection", "Kernel selection",
                "What the libraries chose for each phase and role: family, tile, split-K, "
                "architecture path, and what changed between phases.",
                None, selection_table(k), ("V8",)),
    ]
    return sections


def _ceiling_text(ceilings: dict) -> str:
    parts = []
    if ceilings.get("peak_dram_bytes_per_s"):
        parts.append(f"DRAM {ceilings['peak_dram_bytes_per_s'] / 1e12:.2f} TB/s")
    for path, peak in sorted(ceilings.get("peak_flops_per_s_by_path", {}).items(), key=lambda kv: -kv[1]):
        parts.append(f"{PATH_CEILING_NAMES.get(path, path)} {peak / 1e12:,.0f} TFLOP/s")
    return ", ".join(parts) or "none known"


def _header(data: ReportInput, base: Optional[ReportInput], phase, role) -> str:
    run = data.run

    def describe(r: dict) -> str:
        bits = [f"<b>{esc(r.get('name') or r.get('id'))}</b>"]
        if r.get("id") and r.get("name"):
            bits.append(f"run {esc(r.get('id'))}")
        for key, label in (("device_name", ""), ("ncu_version", "ncu "), ("created", ""),
                           ("source", "from ")):
            if not is_missing(r.get(key)) and r.get(key):
                bits.append(esc(f"{label}{r.get(key)}"))
        return " \u00b7 ".join(bits)

    k = data.kernels
    lines = [f'<div class="meta">{describe(run)} \u00b7 {len(k)} kernels \u00b7 '
             f'{esc(fmt_time_ns(num(k, "time_ns").sum()))} kernel time</div>']
    if base is not None:
        lines.append(f'<div class="meta">against baseline {describe(base.run)}: figures show '
                     f'value (\u0394 %), <span class="d reg">regressions</span> \u25bc beyond '
                     f'{REGRESSION_PCT:g} %</div>')
    if phase or role:
        lines.append(f'<div class="meta">only phase {esc(phase or "any")}, role {esc(role or "any")}</div>')
    title = esc(run.get("name") or run.get("id") or "run")
    return f"<header><h1>smlens report: {title}</h1>{''.join(lines)}</header>"


def _summary(data: ReportInput, checks: pd.DataFrame) -> str:
    rows = []
    for view in VIEW_IDS:
        st = view_status(data.kernels, view, checks)
        rows.append([badge(st.status), esc(view), esc(VIEW_TITLES[view]), esc(st.passed),
                     esc(st.failed), esc(st.not_available)])
    return ('<section id="validation"><h2>Validation</h2><p class="lead">Every figure is checked '
            'against an independent counter or formula (VIEWS.md). A failed check keeps its figure '
            'but says by how much it disagrees; n/a means the inputs were missing.</p>'
            + _table(["status", "view", "", "pass", "fail", "n/a"], rows, "sum") + "</section>")


def render_report(data: ReportInput, baseline: Optional[ReportInput] = None,
                  phase: Optional[str] = None, role: Optional[str] = None) -> str:
    """The whole report as one HTML string."""
    data = filter_input(data, phase, role)
    if baseline is not None:
        baseline = filter_input(baseline, phase, role)
    checks = validation_frame(data.kernels)
    figures: dict = {}
    parts = []
    nav = []
    for s in _sections(data, baseline):
        nav.append(f'<a href="#{esc(s.anchor)}">{esc(s.title.split(":")[0])}</a>')
        if s.figure is not None:
            figures[f"fig-{s.anchor}"] = s.figure
            figure = f'<div class="fig" id="fig-{esc(s.anchor)}"></div>'
        else:
            figure = f'<p class="na">{esc(s.empty_note)}</p>' if s.empty_note else ""
        if s.second_figure is not None:
            figures[f"fig-{s.anchor}-2"] = s.second_figure
            figure += f'<div class="fig" id="fig-{esc(s.anchor)}-2"></div>'
        parts.append(
            f'<section id="{esc(s.anchor)}"><h2>{esc(s.title)}</h2><p class="lead">{esc(s.lead)}</p>'
            f'<div class="row"><div>{figure}{s.body}</div>'
            f'{validation_box(data.kernels, s.views, checks)}</div></section>')
    nav.append('<a href="#kernels">Kernels</a><a href="#validation">Validation</a>')
    kernels_section = (
        '<section id="kernels"><h2>Kernels</h2><p class="lead">Every profiled kernel launch. '
        'Hover a red badge for the discrepancy.</p>' + kernel_table(data.kernels, checks)
        + f'<details><summary>Full kernel names ({data.kernels["name"].nunique() if "name" in data.kernels.columns else 0})'
        '</summary>' + names_table(data.kernels) + "</details></section>")
    title = esc(f"smlens report: {data.run.get('name') or data.run.get('id') or 'run'}")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        # Nothing in the report may reach the network.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:\">"
        f"<title>{title}</title><style>{CSS}</style>"
        f"<script>{_plotly_js()}</script></head><body>"
        + _header(data, baseline, phase, role)
        + f"<nav>{''.join(nav)}</nav><main>" + "".join(parts) + kernels_section
        + _summary(data, checks) + "</main>"
        "<footer>Made by smlens from Nsight Compute counters. Figures of groups are weighted by "
        "kernel time. Badges: <span class=\"b ok\">pass</span> <span class=\"b bad\">fail</span> "
        "<span class=\"b na\">n/a</span>.</footer>"
        f"<script type=\"application/json\" id=\"smlens-figures\">{script_json(figures)}</script>"
        f"<script>{RENDER_JS}</script></body></html>\n")


def write_report(path: Path | str, text: str) -> int:
    """Write atomically (a reader never sees half a report); returns the size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".smlens-report-", suffix=".html", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(data)
