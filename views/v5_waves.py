"""V5 Wave quantization and tail.

A grid runs in waves of (SMs × blocks per SM) blocks; the last wave is partly empty, and a grid
smaller than one wave leaves SMs idle for the whole kernel (a batch-4 decode GEMM of 48 blocks
covers 36 % of the H200's 132 SMs). The validation recomputes ncu's waves from the grid, the SM
count and the occupancy limits.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device, v4_occupancy
from views.catalog import HIGHER, KERNEL, MEAN, NEITHER, Figure
from views.common import Checks, metric, safe_div
from views.context import Context, grid_blocks

ID = "V5"
TITLE = "Wave quantization and tail"
WAVES = "launch__waves_per_multiprocessor"
METRICS = [WAVES, "launch__grid_size", "launch__sm_count", "launch__cluster_size",
           "sm__cycles_active.avg", "sm__cycles_active.max"] + v4_occupancy.LIMIT_METRICS
FIGURES = (
    Figure("waves", "waves", "waves", NEITHER, KERNEL, f"{WAVES}: the grid in waves of (SMs x "
           "blocks per SM) blocks", summary=True),
    Figure("wave_efficiency", "wave efficiency", "ratio", HIGHER, MEAN,
           "waves / ceil(waves): the average share of block slots busy across the waves",
           summary=True),
    Figure("sm_coverage", "SM coverage", "share", HIGHER, MEAN,
           "min(1, grid blocks / SMs): the share of SMs a grid of less than one wave reaches"),
    Figure("sm_imbalance", "SM balance", "ratio", HIGHER, MEAN,
           "sm__cycles_active.avg / sm__cycles_active.max: 1 when every SM was busy as long"),
    Figure("waves_recomputed", "waves recomputed", "waves", NEITHER, KERNEL,
           "grid blocks / (SMs x blocks per SM): what the validation holds ncu's waves against"),
)

# ncu prints waves to 0.01; a few more digits of slack for large wave counts
ABS_TOLERANCE = 0.0051
REL_TOLERANCE = 0.001


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    sms = device.sm_count(ctx)
    grid = grid_blocks(ctx)
    recomputed = safe_div(grid, sms * v4_occupancy.blocks_per_sm(ctx))
    waves = metric(kernels, WAVES)
    # ncu's waves are rounded to 0.01 (a 2-block grid shows 0.00): use the exact count when known
    exact = np.where(np.isnan(recomputed), waves, recomputed)
    return pd.DataFrame({
        "waves": waves,
        "wave_efficiency": safe_div(exact, np.ceil(exact)),
        "sm_coverage": np.minimum(1.0, safe_div(grid, sms)),
        "sm_imbalance": safe_div(metric(kernels, "sm__cycles_active.avg"),
                                 metric(kernels, "sm__cycles_active.max")),
        "waves_recomputed": recomputed,
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    waves = figures["waves"].to_numpy()
    recomputed = figures["waves_recomputed"].to_numpy()
    cluster = metric(kernels, "launch__cluster_size")
    checks = Checks(len(kernels))
    checks.na(np.isnan(waves), f"needs {WAVES}")
    checks.na(np.isnan(recomputed), "needs the grid size, launch__sm_count and the occupancy limits")
    agrees = np.abs(recomputed - waves) <= ABS_TOLERANCE + REL_TOLERANCE * np.abs(waves)
    checks.passed(agrees)
    checks.failed(~agrees, lambda w, r, c: f"ncu says {w:.2f} waves, grid / (SMs × blocks per SM) "
                  f"gives {r:.3f}" + (f" (clusters of {c:.0f} blocks)" if c > 1 else ""),
                  waves, recomputed, np.nan_to_num(cluster))
    return checks.frame(kernels.index)
