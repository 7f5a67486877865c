"""One kernel in depth, as Nsight Compute's details page shows one: every figure the views computed
for it, grouped by view in the catalog's order, each with the metric or derivation that gave it
(views/quantities.py names it per kernel) and the raw counters it was read from, each view's
validation, and who the kernel is: its full name, NVTX range, shapes and launch.

Against a baseline the kernel is matched the way the comparison matches kernels
(views/comparison.py: phase, role, family and the problem's fixed dimensions; the same key's launch
of the same order), and every figure gets the matched kernel's value and the change beside it.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from views import quantities as q
from views.common import plain
from views import registry
from views.comparison import matched_launches, name_column
from views.kernel_names import short_kernel_name

SHAPES = (("M", "shape_m"), ("N", "shape_n"), ("K", "shape_k"), ("B", "attn_batch"), ("H", "attn_heads"),
          ("KV heads", "attn_kv_heads"), ("Sq", "attn_q_len"), ("Skv", "attn_kv_len"), ("D", "attn_head_dim"),
          ("causal", "attn_causal"))
LAUNCH = (("grid", "grid_blocks"), ("block", "block_threads"), ("registers per thread", "registers_per_thread"),
          ("shared memory per block (bytes)", "shared_mem_per_block_bytes"), ("cluster", "cluster_size"))


@dataclass(frozen=True)
class FigureValue:
    """One figure of the kernel, what gave it, and the baseline's."""

    column: str
    label: str
    unit: str
    better: str
    value: object  # a number, a text, or None when the kernel has no such figure
    source: Optional[str]  # the metric or derivation that gave it (None: computed from other figures)
    counters: dict  # the raw counters it reads that this kernel carries: metric -> value
    base_value: object = None
    change_pct: float = float("nan")


@dataclass(frozen=True)
class ViewDetail:
    view: str
    title: str
    status: str  # the view's validation on this kernel: pass, fail, n/a
    detail: str
    figures: list


@dataclass
class KernelDetail:
    id: object
    name: str
    short_name: str
    phase: str
    role: str
    role_source: Optional[str]
    kind: Optional[str]
    nvtx: list  # the NVTX range stack, outermost first
    shapes: dict  # M, N, K or B, H, Sq, Skv, D: what the range (or --shapes) said
    launch: dict
    time_ns: float
    views: list = field(default_factory=list)
    out_of_bounds: list = field(default_factory=list)  # figures outside their physical range
    baseline: Optional[dict] = None  # the matched kernel: id, name, time_ns; None when unmatched

    def to_dict(self) -> dict:
        return plain(asdict(self))


def _cell(row: Optional[dict], name: str):
    value = row.get(name) if row is not None else None
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _nvtx(stack) -> list:
    if stack is None or (isinstance(stack, float) and math.isnan(stack)):
        return []
    if isinstance(stack, str):
        return [stack]
    return [str(s) for s in stack]


def _change(value, base) -> float:
    if isinstance(value, (bool, str)) or isinstance(base, (bool, str)) or value is None or base is None:
        return float("nan")
    try:
        value, base = float(value), float(base)
    except (TypeError, ValueError):
        return float("nan")
    return 100 * (value - base) / abs(base) if base else float("nan")


@functools.lru_cache(maxsize=None)
def _candidates(column: str) -> tuple[str, ...]:
    """Every column the figure's quantities may be read from (their derivations' included)."""
    figure = registry.figures()[column]
    return tuple(q.read_columns([*figure.reads, *figure.reads_any]))


@functools.lru_cache(maxsize=4096)
def _named(source: str, name: str) -> bool:
    """Does the source name the counter whole, not as the start of a longer metric (`.avg` of
    `.avg.per_second`)?"""
    return re.search(re.escape(name) + r"(?![\w.])", source) is not None


def _counters(column: str, raw: Optional[dict], source: Optional[str]) -> dict:
    """The raw counters that gave the figure on this kernel: those of the quantities it reads that
    its source names (a derivation names each input's own source), with their values."""
    if raw is None or not source:
        return {}
    out = {}
    for name in _candidates(column):
        if name in source and _named(source, name):
            value = _cell(raw, name)
            if value is not None:
                out[name] = value
    return out


def position(kernels: pd.DataFrame, kernel_id) -> Optional[int]:
    """The row of the kernel with this id (the kernels table's `kernel_id`, the report's `id`);
    None when no kernel has it."""
    ids = kernels[_id_column(kernels)]
    text = str(kernel_id).strip()
    hits = np.flatnonzero(ids.astype(str).to_numpy() == text)
    return int(hits[0]) if len(hits) else None


def _id_column(kernels: pd.DataFrame) -> str:
    return "kernel_id" if "kernel_id" in kernels.columns else "id"


def _records(frame: Optional[pd.DataFrame], columns) -> Optional[list[dict]]:
    """The rows as dicts of the columns the pages read (a row of a pandas frame is slow to index)."""
    if frame is None:
        return None
    return frame[[c for c in dict.fromkeys(columns) if c in frame.columns]].to_dict("records")


def _columns(kernels: pd.DataFrame, view_ids: list) -> list[str]:
    figures = [f.column for v in view_ids for f in registry.view_figures(v) if f.column in kernels.columns]
    return [*figures, *(registry.SOURCE_PREFIX + c for c in figures),
            *(f"{prefix}{v}" for v in view_ids for prefix in ("validation_", "validation_detail_")),
            _id_column(kernels), name_column(kernels), "phase", "role", "role_source", "kind", "nvtx_stack",
            "out_of_bounds", "time_ns", *(c for _, c in SHAPES), *(c for _, c in LAUNCH)]


def _raw_columns(kernels: pd.DataFrame, view_ids: list) -> list[str]:
    figures = [f.column for v in view_ids for f in registry.view_figures(v) if f.column in kernels.columns]
    launch = [w for _, name in LAUNCH if name in q.QUANTITIES for w in q.QUANTITIES[name].columns]
    return ["nvtx_stack", *launch, *(c for f in figures for c in _candidates(f))]


def kernel_details(kernels: pd.DataFrame, raw: Optional[pd.DataFrame] = None,
                   baseline: Optional[pd.DataFrame] = None, view_ids: Optional[list] = None,
                   rows: Optional[list] = None) -> list[KernelDetail]:
    """Each kernel's detail (of the positions `rows`, or all), the baseline matched once for all.
    `raw`: the kernels table the views ran over, row for row (its counters); `baseline`: the
    baseline's views' kernels, whose matched launch stands beside each kernel."""
    ids = view_ids or [v for v in registry.VIEWS if f"validation_{v}" in kernels.columns] or list(registry.VIEWS)
    rows = list(range(len(kernels))) if rows is None else list(rows)
    records = _records(kernels.iloc[rows], _columns(kernels, ids))
    raw_records = (_records(raw.iloc[rows], _raw_columns(kernels, ids))
                   if raw is not None and len(raw) == len(kernels) else [None] * len(rows))
    matched, base_records = [-1] * len(rows), []
    if baseline is not None:
        # the launches before a kernel say which of its key's launches it is
        matched = list(matched_launches(kernels.iloc[: max(rows) + 1], baseline)[rows]) if rows else []
        base_records = _records(baseline, _columns(baseline, ids))
    base_id = _id_column(baseline) if baseline is not None else "id"
    return [_detail(row, raw_row, base_records[at] if at >= 0 else None, ids, _id_column(kernels),
                    name_column(kernels), base_id, name_column(baseline) if baseline is not None else "name")
            for row, raw_row, at in zip(records, raw_records, matched)]


def kernel_detail(kernels: pd.DataFrame, at: int, raw: Optional[pd.DataFrame] = None,
                  baseline: Optional[pd.DataFrame] = None, view_ids: Optional[list] = None) -> KernelDetail:
    """The kernel at row `at` of a views' kernels table (kernel_details of that row)."""
    return kernel_details(kernels, raw, baseline, view_ids, rows=[at])[0]


def _detail(row: dict, raw_row: Optional[dict], base_row: Optional[dict], ids: list, id_column: str,
            name: str, base_id: str, base_name: str) -> KernelDetail:
    views = []
    for view in ids:
        figures = []
        for figure in registry.view_figures(view):
            if figure.column not in row:
                continue
            value = _cell(row, figure.column)
            base = _cell(base_row, figure.column)
            source = _cell(row, registry.SOURCE_PREFIX + figure.column)
            source = None if source is None else str(source)
            figures.append(FigureValue(figure.column, figure.label, figure.unit, figure.better, value, source,
                                       _counters(figure.column, raw_row, source), base, _change(value, base)))
        views.append(ViewDetail(view, registry.title(view), str(_cell(row, f"validation_{view}") or "n/a"),
                                str(_cell(row, f"validation_detail_{view}") or ""), figures))
    full_name = str(_cell(row, name) or "")
    stack = _cell(raw_row, "nvtx_stack") if _cell(raw_row, "nvtx_stack") is not None else _cell(row, "nvtx_stack")
    bounds = _cell(row, "out_of_bounds")
    matched = None
    if base_row is not None:
        matched = {"id": _cell(base_row, base_id), "name": _cell(base_row, base_name),
                   "time_ns": _cell(base_row, "time_ns"), "phase": _cell(base_row, "phase"),
                   "role": _cell(base_row, "role"),
                   "shapes": {k: v for k, c in SHAPES if (v := _cell(base_row, c)) is not None}}
    return KernelDetail(
        id=_cell(row, id_column), name=full_name, short_name=short_kernel_name(full_name, 80),
        phase=str(_cell(row, "phase")), role=str(_cell(row, "role")), role_source=_cell(row, "role_source"),
        kind=_cell(row, "kind"), nvtx=_nvtx(stack),
        shapes={k: v for k, c in SHAPES if (v := _cell(row, c)) is not None},
        launch=_launch(row, raw_row), time_ns=float(_cell(row, "time_ns") or float("nan")), views=views,
        out_of_bounds=bounds.split(", ") if isinstance(bounds, str) else [], baseline=matched)


def _launch(row: dict, raw: Optional[dict]) -> dict:
    out = {}
    for label, name in LAUNCH:
        value = _cell(row, name)
        if value is None and raw is not None and name in q.QUANTITIES:
            for way in q.QUANTITIES[name].columns:
                value = _cell(raw, way)
                if value is not None:
                    break
        if value is not None:
            out[label] = value
    return out
