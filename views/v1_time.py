"""V1 Time and SM activity: where the time goes, and the headline figure.

The headline, `sm__throughput`, is what people quote as "SM utilization"; `sm_active_pct` says
how much of the elapsed time the SMs had any work at all. The validation reads the SM clock out of
two counters from different passes (cycles and time): it must be a clock this device can run.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device
from views.catalog import HIGHER, LOWER, MEAN, NEITHER, SUM, Figure
from views.common import Checks, metric, safe_div
from views.context import Context

ID = "V1"
TITLE = "Time and SM activity"
ELAPSED_RATE = "sm__cycles_elapsed.avg.per_second"
METRICS = [
    "gpu__time_duration.sum",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "device__attribute_max_gpu_frequency_khz",
    "device__attribute_clock_rate",
]
# Read when a capture has them, never asked of ncu (an old details export has no duration).
FALLBACK_METRICS = [ELAPSED_RATE]
FIGURES = (
    Figure("time_ns", "time", "ns", LOWER, SUM, "gpu__time_duration.sum: the kernel's duration "
           f"(a capture without it: sm__cycles_elapsed.avg / {ELAPSED_RATE})", summary=True,
           bounds=(0, None)),
    Figure("sm_throughput_pct", "SM throughput", "%", HIGHER, MEAN,
           "sm__throughput.avg.pct_of_peak_sustained_elapsed: the headline, what tools call SM "
           "utilization (the busiest of many SM unit throughputs)", summary=True, bounds=(0, 100)),
    Figure("sm_active_pct", "SM active", "%", HIGHER, MEAN,
           "100 x sm__cycles_active.avg / sm__cycles_elapsed.avg: how much of the elapsed time the "
           "SMs had any work", summary=True, bounds=(0, 100)),
    Figure("sm_clock_ghz", "SM clock", "GHz", NEITHER, MEAN,
           "sm__cycles_elapsed.avg / gpu__time_duration.sum: the SM clock the kernel ran at",
           bounds=(0, None)),
)

# The SM clock must lie between this share of the device's boost clock and the boost clock itself
# (+2 % for rounding). Seen on the H200: 1.57 to 1.97 GHz against 1.98. A wrong rollup (.sum, ×132)
# or unit (us for ns, ×1000) lands far outside; so does a kernel timed in another pass than counted.
CLOCK_FLOOR_SHARE = 0.3
CLOCK_CEILING_SHARE = 1.02


def time_ns(ctx: Context) -> np.ndarray:
    """gpu__time_duration.sum; a capture without it (an old details export): elapsed cycles over
    their rate."""
    return ctx.once(_time_ns)


def _time_ns(ctx: Context) -> np.ndarray:
    kernels = ctx.kernels
    counted = metric(kernels, "gpu__time_duration.sum")
    derived = 1e9 * safe_div(metric(kernels, "sm__cycles_elapsed.avg"), metric(kernels, ELAPSED_RATE))
    return np.where(np.isnan(counted), derived, counted)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    elapsed = metric(kernels, "sm__cycles_elapsed.avg")
    return pd.DataFrame({
        "time_ns": time_ns(ctx),
        "sm_throughput_pct": metric(kernels, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "sm_active_pct": 100 * safe_div(metric(kernels, "sm__cycles_active.avg"), elapsed),
        # the clock needs a measured time: one derived from the cycles would give back their rate
        "sm_clock_ghz": safe_div(elapsed, metric(kernels, "gpu__time_duration.sum")),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    clock = figures["sm_clock_ghz"].to_numpy()
    top = device.max_clock_hz(ctx) / 1e9
    low, high = CLOCK_FLOOR_SHARE * top, CLOCK_CEILING_SHARE * top
    checks = Checks(len(kernels))
    checks.na(np.isnan(clock) & ~np.isnan(metric(kernels, ELAPSED_RATE)),
              f"no gpu__time_duration.sum: the time comes from the cycles and {ELAPSED_RATE}, which "
              "cannot check the clock they give")
    checks.na(np.isnan(clock), "needs sm__cycles_elapsed.avg and gpu__time_duration.sum")
    checks.na(np.isnan(top), "the device's boost clock is unknown (no device__attribute_max_gpu_frequency_khz, "
                             "and its compute capability is not in the table)")
    inside = (clock >= low) & (clock <= high)
    checks.passed(inside)
    checks.failed(~inside, lambda c, lo, hi: f"SM clock {c:.3g} GHz (cycles/time) outside "
                  f"{lo:.2f} to {hi:.2f} GHz", clock, low, high)
    return checks.frame(kernels.index)
