"""The gap: from the headline figure to the useful one, per phase and role.

    sm_throughput_pct  ->  sm_active_pct  ->  tensor_pipe_pct  ->  useful_tensor_pct
    (headline, V1)         (V1)               (V2)                 (V3)

Each step has a factor (the next figure over the previous one) and the figures of the view that
explains it: how much of the elapsed time the SMs had work (coverage and waves, V5, and their
balance); how much of the active time the tensor pipe was busy (occupancy V4, stalls V6); how much
of the tensor work was useful (fill, V3).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.common import safe_div

STEPS = ("sm_throughput_pct", "sm_active_pct", "tensor_pipe_pct", "useful_tensor_pct")
# Each step's factor: (the figure, the one before it).
FACTORS = {"active_vs_headline": ("sm_active_pct", "sm_throughput_pct"),
           "tensor_vs_active": ("tensor_pipe_pct", "sm_active_pct"),
           "useful_vs_tensor": ("useful_tensor_pct", "tensor_pipe_pct")}
EXPLAINERS = ("sm_coverage", "wave_efficiency", "sm_imbalance", "achieved_occupancy_pct",
              "theoretical_occupancy_pct", "issue_active_pct", "top_stall", "fill")
COLUMNS = (["phase", "role", "kernels", "time_ns", "time_share_pct"] + list(STEPS) + list(FACTORS)
           + list(EXPLAINERS))


def gap(groups: pd.DataFrame) -> pd.DataFrame:
    """The decomposition for each group row (phase and role, or a phase's `all`)."""
    out = pd.DataFrame(index=groups.index)
    for column in COLUMNS:
        out[column] = groups[column] if column in groups else np.nan
    for factor, (figure, before) in FACTORS.items():
        out[factor] = safe_div(out[figure], out[before])
    if "top_stall" in out:
        out["top_stall"] = out["top_stall"].astype(object).where(out["top_stall"].notna(), None)
    return out.reset_index(drop=True)
