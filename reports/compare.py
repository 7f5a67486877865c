"""Two runs side by side: their kernels matched, and times per token.

Kernels are matched by what they do, not by their position in the run: the phase and role, the
kernel family (for GEMMs and attention; other kernels by their short name) and the problem's fixed
dimensions, a GEMM's N and K (its weights) or attention's heads and head size. The token
dimension (M: batch x sequence) stays out of the key, so batch 8 is compared with batch 1 kernel
for kernel; it is shown beside. The launches of one key are summed per run; a key only one run
has is a kernel added or removed.

Per token: each phase's figures that add up (time, bytes, FLOPs: the catalog's SUM figures) are
divided by the tokens the phase processed, the M of its GEMMs (one layer, one step: what smlens
profiles), else the run's batch and prompt tags.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np
import pandas as pd

from reports.formatting import is_missing, short_kernel_name
from views.vocabulary import CHOSEN_KINDS

MATCHED, ADDED, REMOVED = "matched", "added", "removed"
KEY = ["phase", "role", "kernel", "weights"]


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return frame[name].astype(object)
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def _number(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(_column(frame, name), errors="coerce")


def _dims(*pairs) -> str:
    return " ".join(f"{label}={value:.0f}" for label, value in pairs if not is_missing(value))


def match_keys(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: phase, role, kernel (family or short name), weights (the fixed dimensions),
    tokens (M) and tile."""
    kind = _column(kernels, "kind")
    family = _column(kernels, "kernel_family")
    names = _column(kernels, "name" if "name" in kernels.columns else "kernel_name")
    by_family = kind.isin(CHOSEN_KINDS) & family.notna()
    kernel = [f if use else short_kernel_name(n, 80, missing="unknown")
              for f, n, use in zip(family, names, by_family)]
    n, k = _number(kernels, "shape_n"), _number(kernels, "shape_k")
    heads, dim = _number(kernels, "attn_heads"), _number(kernels, "attn_head_dim")
    weights = [_dims(("N", a), ("K", b)) if not (is_missing(a) and is_missing(b)) else _dims(("H", h), ("D", d))
               for a, b, h, d in zip(n, k, heads, dim)]
    return pd.DataFrame({"phase": _column(kernels, "phase").to_numpy(), "role": _column(kernels, "role").to_numpy(),
                         "kernel": kernel, "weights": weights,
                         "tokens": _number(kernels, "shape_m").to_numpy(),
                         "tile": _column(kernels, "tile").to_numpy(),
                         "time_ns": _number(kernels, "time_ns").to_numpy()}, index=kernels.index)


def _summed(keys: pd.DataFrame) -> pd.DataFrame:
    def joined(values):
        distinct = sorted({str(v) for v in values if not is_missing(v)})
        return "/".join(distinct)

    def tokens(values):
        distinct = sorted({int(v) for v in values if not is_missing(v)})
        return "/".join(str(v) for v in distinct)

    return (keys.groupby(KEY, sort=False, dropna=False)
            .agg(launches=("time_ns", "size"), time_ns=("time_ns", lambda t: t.sum(min_count=len(t))),
                 tokens=("tokens", tokens), tile=("tile", joined))
            .reset_index())


def kernel_changes(current: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """One row per key of either run: launches, time, tokens (M) and tile on each side, the time
    change in %, and `status` (matched, added, removed). Matched first, by baseline time."""
    cur, base = _summed(match_keys(current)), _summed(match_keys(baseline))
    merged = cur.merge(base, on=KEY, how="outer", suffixes=("", "_base"), indicator=True)
    merged["status"] = merged["_merge"].map({"both": MATCHED, "left_only": ADDED, "right_only": REMOVED})
    with np.errstate(divide="ignore", invalid="ignore"):
        change = 100 * (merged["time_ns"] - merged["time_ns_base"]) / merged["time_ns_base"]
    merged["change_pct"] = change.where(np.isfinite(change))
    order = {MATCHED: 0, ADDED: 1, REMOVED: 2}
    merged["_o"] = merged["status"].map(order)
    merged["_t"] = merged["time_ns_base"].fillna(merged["time_ns"])
    merged = merged.sort_values(["_o", "_t"], ascending=[True, False], kind="stable")
    return merged.drop(columns=["_merge", "_o", "_t"]).reset_index(drop=True)


def kernel_baseline_time(current: pd.DataFrame, baseline: pd.DataFrame) -> pd.Series:
    """Per current kernel: the baseline's mean time per launch of its key (NaN: no such key)."""
    base = _summed(match_keys(baseline))
    base["mean_ns"] = base["time_ns"] / base["launches"]
    lookup = {tuple(k): v for k, v in zip(base[KEY].itertuples(index=False, name=None), base["mean_ns"])}
    keys = match_keys(current)
    return pd.Series([lookup.get(tuple(k), np.nan) for k in keys[KEY].itertuples(index=False, name=None)],
                     index=current.index, dtype=float)


# --- per token --------------------------------------------------------------------------------------

def tokens_per_phase(kernels: pd.DataFrame, run: dict) -> dict[str, tuple[float, str]]:
    """phase -> (tokens one profiled layer step processes, where the number comes from)."""
    out: dict[str, tuple[float, str]] = {}
    gemm = _column(kernels, "kind") == "gemm"
    m = _number(kernels, "shape_m")
    phases = _column(kernels, "phase")
    for phase in dict.fromkeys(phases):
        values = m[(phases == phase) & gemm].dropna()
        if len(values):
            out[phase] = (float(values.median()), "the M of its GEMMs")
    tags = run.get("tags") or {}
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            tags = {}
    try:
        batch = float(tags.get("batch"))
        prompt = float(tags.get("prompt", "nan"))
    except (TypeError, ValueError):
        return out
    for phase in dict.fromkeys(phases):
        if phase in out or phase == "other":
            continue
        if phase == "decode":
            out[phase] = (batch, "the run's batch tag")
        elif "prefill" in str(phase) and not np.isnan(prompt):
            out[phase] = (batch * prompt, "the run's batch x prompt tags")
    return out


def missing_tokens(kernels: pd.DataFrame, tokens: dict) -> list[str]:
    """The phases (setup aside) whose token count is unknown."""
    return [p for p in dict.fromkeys(_column(kernels, "phase")) if p not in tokens and p != "other"]


def per_token(frame: Optional[pd.DataFrame], tokens: dict, columns: list[str]) -> Optional[pd.DataFrame]:
    """`frame` with `columns` divided by its phase's tokens (rows of other phases: NaN)."""
    if frame is None or frame.empty or "phase" not in frame.columns:
        return frame
    divisor = frame["phase"].astype(object).map(lambda p: tokens[p][0] if p in tokens else np.nan).astype(float)
    out = frame.copy()
    for column in columns:
        if column in out.columns:
            out[column] = pd.to_numeric(out[column], errors="coerce") / divisor.to_numpy()
    return out
