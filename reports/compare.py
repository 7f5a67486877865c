"""Two runs side by side: the comparison verdict joined to its inputs, and times per token.

The matching of kernels and the verdict are pure and live in views/comparison.py (the kernel page
matches one kernel the same way); this module hands the verdict the gate's statistics and each
run's tokens.

Per token: each phase's figures that add up (time, bytes, FLOPs: the catalog's SUM figures) are
divided by the tokens the phase processed, the M of its GEMMs (one layer, one step: what smlens
profiles), else the run's batch and prompt tags.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np
import pandas as pd

from reports.gate_stats import mann_whitney_u
from views import registry
from views.comparison import (ADDED, KEY, MATCHED, REMOVED, ComparisonVerdict,  # noqa: F401 (one place to import them)
                              column as _column, comparison_verdict, kernel_baseline_time, kernel_changes,
                              match_keys, number as _number)


def compare_runs(current: pd.DataFrame, baseline: pd.DataFrame, current_run: Optional[dict] = None,
                 base_run: Optional[dict] = None, current_repeats=(), base_repeats=(),
                 differences=()) -> ComparisonVerdict:
    """The comparison verdict of two views' kernels tables (and each side's repeats, for the noise
    floor), per token where both runs' tokens are known."""
    tokens = tokens_per_phase(current, current_run or {})
    base_tokens = tokens_per_phase(baseline, base_run or {})
    return comparison_verdict(current, baseline, current_repeats, base_repeats,
                              tokens if not missing_tokens(current, tokens) else None,
                              base_tokens if not missing_tokens(baseline, base_tokens) else None,
                              registry.figures(), mann_whitney_u, differences)

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
