"""The kernels that take the most time, as `ncu --print-summary` lists them: one row per distinct
kernel of a phase and role (its name, NVTX range, grid, block and registers), its launches, time and
share. A kernel is named by its NVTX range where the range says what it computes (`op=silu_mul`,
`module=model.layers.0.mlp.act_fn`), the rank's and the libraries' ranges left out (a TP run's
innermost range is often its rank marker or NCCL's): PyTorch runs silu-and-multiply, rotary embedding and the KV
cache copy through the same `at::elementwise_kernel`, which its name cannot tell apart.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np
import pandas as pd

from views import quantities as q
from views.vocabulary import LIBRARY_DOMAINS, RANK_DOMAIN

LIMIT = 10
COLUMNS = ("label", "kernel_name", "phase", "role", "rank", "launches", "time_ns", "share_pct", "mean_ns",
           "grid_blocks", "block_threads", "registers_per_thread")
_OP = re.compile(r"(?:^|\s)op=(\S+)")
_MODULE = re.compile(r"(?:^|\s)module=(\S+)")
_LAYER_PATH = re.compile(r"^.*?\.\d+\.")  # `model.layers.0.` before a module's own name
# ranges around a rank's whole run or inside a library: they say nothing of what a kernel computes
_NOT_THE_WORK = tuple(f"{domain}:" for domain in (RANK_DOMAIN, *LIBRARY_DOMAINS))


def work_ranges(stack) -> list[str]:
    """A kernel's NVTX stack (outermost first; a list, an array, one string, or missing) without
    the rank's and the libraries' ranges: the ranges that say what the program was doing."""
    if not isinstance(stack, (str, list, tuple)) and not hasattr(stack, "tolist"):
        return []  # None, NaN, pd.NA: no ranges
    items = [stack] if isinstance(stack, str) else list(stack.tolist() if hasattr(stack, "tolist") else stack)
    return [str(s) for s in items if not str(s).startswith(_NOT_THE_WORK)]


def range_label(stack) -> str:
    """What the innermost NVTX range of the work (work_ranges) says the kernel computes: its `op=`
    (the built-in decoder's elementwise ranges), else its module below the layer list (a program's
    ranges), else ''."""
    ranges = work_ranges(stack)
    if not ranges:
        return ""
    innermost = ranges[-1]
    found = _OP.search(innermost)
    if found:
        return found.group(1)
    found = _MODULE.search(innermost)
    return _LAYER_PATH.sub("", found.group(1)) if found else ""


def _registers(kernels: pd.DataFrame, raw: Optional[pd.DataFrame]) -> np.ndarray:
    """Registers per thread of each kernel, from the capture's columns (the views keep none)."""
    missing = np.full(len(kernels), np.nan)
    if raw is None or "kernel_id" not in raw.columns or "kernel_id" not in kernels.columns:
        return missing
    column = next((c for c in q.QUANTITIES["registers_per_thread"].columns if c in raw.columns), None)
    ids = raw["kernel_id"]
    if column is None or ids.duplicated().any():  # ranks that number kernels alike: not joinable
        return missing
    by_id = pd.Series(pd.to_numeric(raw[column], errors="coerce").to_numpy(), index=ids.to_numpy())
    return by_id.reindex(kernels["kernel_id"].to_numpy()).to_numpy(dtype=float)


def top_kernels(kernels: pd.DataFrame, total_time_ns: float, raw: Optional[pd.DataFrame] = None,
                limit: int = LIMIT, rank_time_ns: Optional[dict] = None) -> pd.DataFrame:
    """The `limit` distinct kernels of most time: kernels alike in phase, role, rank, NVTX label,
    name, grid, block and registers are one row, their time summed; `share_pct` is of
    `total_time_ns`, or of its rank's time in `rank_time_ns` (a tensor-parallel run), as the gap's
    shares are. Registers come from `raw` (the capture's kernels, joined on kernel_id), NaN where
    it lacks them."""
    if kernels.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    frame = pd.DataFrame({
        "label": [range_label(s) for s in kernels["nvtx_stack"]] if "nvtx_stack" in kernels else "",
        "kernel_name": kernels["kernel_name"].astype(object).fillna("").astype(str).to_numpy(),
        "phase": kernels["phase"].astype(object).to_numpy(),
        "role": kernels["role"].astype(object).to_numpy(),
        "rank": kernels["rank"].astype(float).to_numpy() if "rank" in kernels else np.nan,
        "time_ns": pd.to_numeric(kernels["time_ns"], errors="coerce").to_numpy(dtype=float),
        "grid_blocks": pd.to_numeric(kernels.get("grid_blocks"), errors="coerce"),
        "block_threads": pd.to_numeric(kernels.get("block_threads"), errors="coerce"),
        "registers_per_thread": _registers(kernels, raw),
    })
    keys = ["phase", "role", "rank", "label", "kernel_name", "grid_blocks", "block_threads",
            "registers_per_thread"]
    times = frame.groupby(keys, dropna=False, sort=False)["time_ns"]
    grouped = pd.concat([times.size().rename("launches"), times.sum(min_count=1)], axis=1).reset_index()
    grouped = grouped.sort_values("time_ns", ascending=False, kind="stable", na_position="last").head(limit)
    base = np.full(len(grouped), total_time_ns if total_time_ns > 0 else np.nan)
    if rank_time_ns:
        base = grouped["rank"].map({float(k): v for k, v in rank_time_ns.items()}).to_numpy(dtype=float)
    grouped["share_pct"] = 100 * grouped["time_ns"].to_numpy() / base
    grouped["mean_ns"] = grouped["time_ns"] / grouped["launches"]
    return grouped[list(COLUMNS)].reset_index(drop=True)
