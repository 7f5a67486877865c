"""The gap: from elapsed time to useful tensor work, per phase and role, on one basis.

Every step is a share of the group's elapsed cycles, and each is at most the one before:

    100 %  ->  sm_active_pct  ->  tensor_pipe_elapsed_pct  ->  tensor_device_pct  ->  useful_tensor_pct
    elapsed    SMs had work       tensor pipe busy             MMA work at the         MMA work that was
               (V1)               (V2)                         device's best rate (V2) not padding (V3)

so each factor between two steps is at most 1 and says what it loses: SM activity (coverage, waves
and tail, balance: V5), tensor issue (occupancy V4, stalls V6, the kernel's other work), the MMA
path (an older path's rate against the device's best for the type, and non-MMA work on the pipe:
V2, V8), the useful MMA share (padding: V3). The headline, `sm__throughput`, is shown beside and is
no step: it is the busiest of many SM units and can sit above or below SM active. The memory side
says whether a low tensor share is headroom at all: DRAM's share of its peak and the bound (V7's,
the verdict's too: the bound holding the most of the group's kernel time, `bound_time_share`, and
`bound_pct` its unit's share of its peak in those kernels), e.g. a decode GEMM memory-bound at 80 %
of the DRAM peak.

A group's figures are time-weighted means of its kernels' (each a share of the kernel's elapsed
time), so they are shares of the group's elapsed time and the factors multiply out exactly.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.catalog import GROUP, HIGHER, Figure
from views.common import safe_div

HEADLINE = "sm_throughput_pct"
STEPS = ("sm_active_pct", "tensor_pipe_elapsed_pct", "tensor_device_pct", "useful_tensor_pct")
# Each factor: the step over the one before (sm_active_pct over the whole elapsed time, 100 %).
FIGURES = (
    Figure("activity_factor", "× SM activity", "ratio", HIGHER, GROUP,
           "sm_active_pct / 100: the share of elapsed time the SMs had work (lost to coverage, "
           "waves and tail, imbalance: V5)", ratio_of=("sm_active_pct", ""), rests_on=("V1", "V5"),
           bounds=(0, 1)),
    Figure("tensor_issue_factor", "× tensor issue", "ratio", HIGHER, GROUP,
           "tensor_pipe_elapsed_pct / sm_active_pct: the share of active time the tensor pipe was "
           "busy (lost to occupancy V4, stalls V6, the kernels' other work)",
           ratio_of=("tensor_pipe_elapsed_pct", "sm_active_pct"), rests_on=("V2", "V4", "V6"),
           bounds=(0, 1)),
    Figure("path_factor", "× MMA path", "ratio", HIGHER, GROUP,
           "tensor_device_pct / tensor_pipe_elapsed_pct: the busy pipe's MMA work at the device's "
           "best rate for its type (lost to an older path, e.g. sm80 mma.sync on sm90 at 0.67, and to "
           "non-MMA instructions on the pipe: V2, V8)",
           ratio_of=("tensor_device_pct", "tensor_pipe_elapsed_pct"), rests_on=("V2", "V8"),
           bounds=(0, 1)),
    Figure("fill_factor", "× useful MMA share", "ratio", HIGHER, GROUP,
           "useful_tensor_pct / tensor_device_pct: the share of the MMA work that was not padding (V3)",
           ratio_of=("useful_tensor_pct", "tensor_device_pct"), rests_on=("V3",), bounds=(0, 1)),
)
FACTORS = {f.column: f.ratio_of for f in FIGURES}
# The memory side: is the kernel limited by DRAM, the tensor pipe, FP32 or latency (V7).
MEMORY = ("dram_pct", "bound", "bound_pct")
EXPLAINERS = ("sm_coverage", "wave_efficiency", "sm_imbalance", "achieved_occupancy_pct",
              "theoretical_occupancy_pct", "issue_active_pct", "top_stall", "mma_path",
              "tensor_dtype", "fill")
COLUMNS = (["phase", "role", "role_source", "kernels", "time_ns", "time_share_pct", HEADLINE]
           + list(STEPS) + list(FACTORS) + list(MEMORY) + ["bound_time_share"] + list(EXPLAINERS))
TEXT = ("top_stall", "mma_path", "tensor_dtype", "bound", "role_source")


def gap(groups: pd.DataFrame) -> pd.DataFrame:
    """The decomposition for each group row (phase and role, or a phase's `all`)."""
    # the columns first, the frame once (a frame grown a column at a time cost `smlens views` 10 ms)
    out = {column: groups[column] if column in groups else np.full(len(groups), np.nan) for column in COLUMNS}
    for factor, (figure, before) in FACTORS.items():
        out[factor] = safe_div(out[figure], out[before] if before else 100.0)
    if "rank" in groups:  # tensor parallel: one row per rank, after phase and role
        out = {**dict(list(out.items())[:2]), "rank": groups["rank"], **dict(list(out.items())[2:])}
    for column in TEXT:
        values = pd.Series(out[column], index=groups.index)
        out[column] = values.astype(object).where(values.notna(), None)
    return pd.DataFrame(out, index=groups.index).reset_index(drop=True)


def sentence(row) -> str | None:
    """What bounds the group, in words: `memory-bound at 80 % of DRAM peak`, and `in 57 % of its
    time` where its kernels are bound by more than one."""
    bound, pct, share = row.get("bound"), row.get("bound_pct"), row.get("bound_time_share")
    if not isinstance(bound, str) or pd.isna(pct):
        return None
    part = f" in {100 * share:.0f} % of its time" if share is not None and not pd.isna(share) \
        and share < 0.995 else ""
    if bound == "latency":
        return f"latency-bound{part}: no unit above {pct:.0f} % of its peak"
    unit = {"memory": "DRAM", "tensor": "tensor pipe", "fp32": "FP32"}.get(bound, bound)
    return f"{bound}-bound{part} at {pct:.0f} % of {unit} peak"
