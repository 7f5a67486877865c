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
from views import quantities as q
from views.common import Checks, safe_div
from views.context import Context

ID = "V1"
TITLE = "Time and SM activity"
QUANTITIES = ("time_ns", "cycles_active", "cycles_elapsed", "sm_throughput_pct", "sm_clock_hz",
              "max_gpu_frequency_khz", "clock_rate")
FIGURES = (
    Figure("time_ns", "time", "ns", LOWER, SUM, "gpu__time_duration.sum: the kernel's duration "
           "(a capture without it: the elapsed cycles over the SM clock)", summary=True,
           bounds=(0, None), reads=("time_ns",)),
    Figure("sm_throughput_pct", "SM throughput", "%", HIGHER, MEAN,
           "sm__throughput.avg.pct_of_peak_sustained_elapsed: the headline, what tools call SM "
           "utilization (the busiest of many SM unit throughputs)", summary=True, bounds=(0, 100),
           reads=("sm_throughput_pct",)),
    Figure("sm_active_pct", "SM active", "%", HIGHER, MEAN,
           "100 x sm__cycles_active.avg / sm__cycles_elapsed.avg: how much of the elapsed time the "
           "SMs had any work", summary=True, bounds=(0, 100), reads=("cycles_active", "cycles_elapsed")),
    Figure("sm_clock_ghz", "SM clock", "GHz", NEITHER, MEAN,
           "sm__cycles_elapsed.avg / gpu__time_duration.sum: the SM clock the kernel ran at",
           bounds=(0, None), reads=("cycles_elapsed", "time_ns")),
)

# The SM clock must lie between this share of the device's boost clock and the boost clock itself
# (+2 % for rounding). Seen on the H200: 1.57 to 1.97 GHz against 1.98. A wrong rollup (.sum, ×132)
# or unit (us for ns, ×1000) lands far outside; so does a kernel timed in another pass than counted.
CLOCK_FLOOR_SHARE = 0.3
CLOCK_CEILING_SHARE = 1.02


def time_ns(ctx: Context) -> np.ndarray:
    """gpu__time_duration.sum; a capture without it (an old details export): elapsed cycles over
    their rate."""
    return q.value(ctx, "time_ns")


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    elapsed = q.value(ctx, "cycles_elapsed")
    return pd.DataFrame({
        "time_ns": time_ns(ctx),
        "sm_throughput_pct": q.value(ctx, "sm_throughput_pct"),
        "sm_active_pct": 100 * safe_div(q.value(ctx, "cycles_active"), elapsed),
        # the clock needs a measured time and measured cycles: one from the other and the clock
        # rate would give back that rate
        "sm_clock_ghz": safe_div(q.measured(ctx, "cycles_elapsed"), q.measured(ctx, "time_ns")),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    clock = figures["sm_clock_ghz"].to_numpy()
    top = device.max_clock_hz(ctx) / 1e9
    low, high = CLOCK_FLOOR_SHARE * top, CLOCK_CEILING_SHARE * top
    checks = Checks(len(kernels))
    checks.na(np.isnan(clock) & q.read(ctx, "time_ns").derived,
              lambda s: f"no gpu__time_duration.sum: the time comes from {s}, which cannot check the "
              "clock it gives", q.source(ctx, "time_ns"))
    checks.na(np.isnan(clock) & q.read(ctx, "cycles_elapsed").derived,
              lambda s: f"no elapsed-cycles counter: the cycles come from {s}, which cannot check the "
              "clock they give", q.source(ctx, "cycles_elapsed"))
    checks.na(np.isnan(clock), "needs sm__cycles_elapsed.avg and gpu__time_duration.sum (ncu section SpeedOfLight)")
    checks.na(np.isnan(top), "the device's boost clock is unknown (no device__attribute_max_gpu_frequency_khz, "
                             "and its compute capability is not in the table)")
    inside = (clock >= low) & (clock <= high)
    checks.passed(inside)
    checks.failed(~inside, lambda c, lo, hi: f"SM clock {c:.3g} GHz (cycles/time) outside "
                  f"{lo:.2f} to {hi:.2f} GHz", clock, low, high)
    return checks.frame(kernels.index)
