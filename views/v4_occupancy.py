"""V4 Occupancy and its limiter.

Achieved occupancy is the warps resident per active cycle against the SM's maximum; theoretical is
what the launch allows, and the limiter is the resource that allows the fewest blocks per SM. The
validation recomputes ncu's theoretical value from the per-resource block limits and the block
size, and checks that achieved does not exceed it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device
from views.catalog import HIGHER, KERNEL, MEAN, MODE, NEITHER, Figure
from views.common import Checks, categorical, first_metric, metric, safe_div
from views.context import Context

ID = "V4"
TITLE = "Occupancy and its limiter"
LIMITS = ("registers", "shared_mem", "warps", "blocks", "barriers")
LIMIT_METRICS = [f"launch__occupancy_limit_{name}" for name in LIMITS]
ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
METRICS = [ACHIEVED, THEORETICAL, "launch__block_size", "device__attribute_max_warps_per_multiprocessor"
           ] + LIMIT_METRICS
FIGURES = (
    Figure("achieved_occupancy_pct", "occupancy", "%", HIGHER, MEAN,
           f"{ACHIEVED}: warps resident per active cycle against the SM's maximum", summary=True),
    Figure("theoretical_occupancy_pct", "theoretical", "%", NEITHER, MEAN,
           f"{THEORETICAL}: what the launch allows", summary=True),
    Figure("occupancy_limiter", "limiter", "text", NEITHER, MODE,
           "the resource of the launch__occupancy_limit_* counters that allows the fewest blocks "
           "per SM (ties joined with +)", summary=True),
    Figure("blocks_per_sm", "blocks per SM", "count", NEITHER, KERNEL,
           "the fewest blocks any resource allows per SM"),
)

ABS_TOLERANCE_PCT = 0.01  # ncu prints percentages to 0.01
ACHIEVED_SLACK_PCT = 1.0


def block_threads(kernels: pd.DataFrame) -> np.ndarray:
    return first_metric(kernels, "launch__block_size", "block_threads")


def blocks_per_sm(ctx: Context) -> np.ndarray:
    """The fewest blocks any resource allows per SM; NaN when no limit is known."""
    return ctx.once(_blocks_per_sm)


def _blocks_per_sm(ctx: Context) -> np.ndarray:
    out = np.full(len(ctx.kernels), np.nan)
    for name in LIMIT_METRICS:
        out = np.fmin(out, metric(ctx.kernels, name))  # fmin ignores NaN
    return out


def limiter(ctx: Context) -> pd.Categorical:
    """The resource(s) allowing the fewest blocks, ties joined with '+'; null without limits."""
    kernels = ctx.kernels
    low = blocks_per_sm(ctx)
    # a bit per resource -> a code; code 0 (no limit known) is null
    code = np.zeros(len(kernels), dtype=np.int64)
    for bit, name in enumerate(LIMIT_METRICS):
        code |= (metric(kernels, name) == low).astype(np.int64) << bit
    names = ["+".join(n for i, n in enumerate(LIMITS) if c >> i & 1) for c in range(1, 1 << len(LIMITS))]
    return categorical(code - 1, names)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    return pd.DataFrame({
        "achieved_occupancy_pct": metric(kernels, ACHIEVED),
        "theoretical_occupancy_pct": metric(kernels, THEORETICAL),
        "occupancy_limiter": limiter(ctx),
        "blocks_per_sm": blocks_per_sm(ctx),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    warps_per_block = np.ceil(block_threads(kernels) / 32)
    recomputed = np.minimum(100.0, 100 * safe_div(figures["blocks_per_sm"].to_numpy() * warps_per_block,
                                                  device.max_warps_per_sm(ctx)))
    theoretical = figures["theoretical_occupancy_pct"].to_numpy()
    achieved = figures["achieved_occupancy_pct"].to_numpy()
    checks = Checks(len(kernels))
    checks.na(np.isnan(theoretical) | np.isnan(achieved), f"needs {ACHIEVED} and {THEORETICAL}")
    checks.na(np.isnan(recomputed), "needs the launch__occupancy_limit_* counters, the block size "
                                    "and the device's warps per SM")
    agrees = np.abs(recomputed - theoretical) <= ABS_TOLERANCE_PCT
    checks.failed(~agrees, lambda t, r: f"theoretical {t:.2f} % from ncu, {r:.2f} % from the block "
                  "limits", theoretical, recomputed)
    within = achieved <= theoretical + ACHIEVED_SLACK_PCT
    checks.passed(within)
    checks.failed(~within, lambda a, t: f"achieved {a:.2f} % above theoretical {t:.2f} %",
                  achieved, theoretical)
    return checks.frame(kernels.index)
