"""V5 Wave quantization and tail.

A grid runs in waves of (SMs × blocks per SM) blocks; when the work does not fill the last wave,
part of the device idles while it runs (the tail). The work is counted in the units that are
scheduled: blocks for an ordinary grid, tiles for a persistent kernel, whose grid is the device's
capacity and whose blocks loop over the tiles (decode gate_up of Llama-3.1-8B: 224 tiles on 132
blocks run in two rounds, the second 70 % full: wave efficiency 224 / 264 = 0.85, where waves say 1.0).
A grid smaller than one wave has no tail: all of it runs at once, and what it leaves idle is SMs
it does not reach (`sm_coverage`) and block slots it does not fill (V4's occupancy).
The validation recomputes ncu's waves from the grid, the SM count and the blocks per SM that V4
recomputes from the launch's registers, shared memory and block size.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device, v4_occupancy, v8_selection
from views.catalog import HIGHER, KERNEL, MEAN, NEITHER, Figure
from views import quantities as q
from views.common import Checks, safe_div
from views.context import Context, geometry, grid_blocks

ID = "V5"
TITLE = "Wave quantization and tail"
WAVES = "launch__waves_per_multiprocessor"
QUANTITIES = ("waves", "grid_blocks", "sm_count", "cluster_size", "cycles_active", "cycles_active_max",
              *v4_occupancy.LAUNCH_QUANTITIES)
FIGURES = (
    Figure("waves", "waves", "waves", NEITHER, KERNEL, f"{WAVES}: the grid in waves of (SMs x "
           "blocks per SM) blocks", summary=True, bounds=(0, None), reads=("waves",)),
    Figure("work_units", "work units", "count", NEITHER, KERNEL,
           "what is scheduled: the tiles of a persistent GEMM (V8), else the grid's blocks",
           bounds=(0, None)),
    Figure("wave_efficiency", "wave efficiency", "ratio", HIGHER, MEAN,
           "work units / (ceil(work units / slots) x slots), slots = min(grid, SMs x blocks per SM): "
           "the share of the slots' time the last round leaves busy; 1 below one wave (no tail)",
           summary=True, rests_on=("V8",), bounds=(0, 1)),
    Figure("sm_coverage", "SM coverage", "share", HIGHER, MEAN,
           "min(1, grid blocks / SMs): the share of SMs a grid of less than one wave reaches",
           bounds=(0, 1)),
    Figure("sm_imbalance", "SM balance", "ratio", HIGHER, MEAN,
           "sm__cycles_active.avg / sm__cycles_active.max: 1 when every SM was busy as long",
           bounds=(0, 1), reads=("cycles_active", "cycles_active_max")),
    Figure("waves_recomputed", "waves recomputed", "waves", NEITHER, KERNEL,
           "grid blocks / (SMs x the blocks per SM V4 recomputes from the launch): what the "
           "validation holds ncu's waves against", rests_on=("V4",), bounds=(0, None)),
)

# ncu prints waves to 0.01; a few more digits of slack for large wave counts
ABS_TOLERANCE = 0.0051
REL_TOLERANCE = 0.001


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    sms = device.sm_count(ctx)
    grid = grid_blocks(ctx)
    recomputed = safe_div(grid, sms * v4_occupancy.recomputed_blocks_per_sm(ctx))
    waves = q.value(ctx, "waves")
    capacity = v8_selection.co_resident_blocks(ctx)
    persistent = v8_selection.persistent(ctx)
    tiles = geometry(ctx)["tile_count"].to_numpy()
    units = np.where(persistent, tiles, grid)
    slots = np.minimum(grid, capacity)
    # without the blocks per SM: ncu's waves (rounded to 0.01: a 2-block grid shows 0.00); below
    # one wave there is no tail
    by_waves = np.where(waves <= 1, np.where(waves >= 0, 1.0, np.nan), safe_div(waves, np.ceil(waves)))
    efficiency = np.where(np.isnan(slots) & ~persistent, by_waves,
                          safe_div(units, np.ceil(safe_div(units, slots)) * slots))
    return pd.DataFrame({
        "waves": waves,
        "work_units": units,
        "wave_efficiency": efficiency,
        "sm_coverage": np.minimum(1.0, safe_div(grid, sms)),
        "sm_imbalance": safe_div(q.value(ctx, "cycles_active"), q.value(ctx, "cycles_active_max")),
        "waves_recomputed": recomputed,
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    waves = figures["waves"].to_numpy()
    recomputed = figures["waves_recomputed"].to_numpy()
    cluster = q.value(ctx, "cluster_size")
    checks = Checks(len(kernels))
    checks.na(np.isnan(waves), f"needs {WAVES} (ncu section {q.LAUNCH})")
    checks.na(np.isnan(recomputed), "needs the grid size, launch__sm_count and the launch's "
                                    "registers, shared memory and block size (V4)")
    agrees = np.abs(recomputed - waves) <= ABS_TOLERANCE + REL_TOLERANCE * np.abs(waves)
    checks.passed(agrees)
    checks.failed(~agrees, lambda w, r, c: f"ncu says {w:.2f} waves, grid / (SMs × blocks per SM) "
                  f"gives {r:.3f}" + (f" (clusters of {c:.0f} blocks)" if c > 1 else ""),
                  waves, recomputed, np.nan_to_num(cluster))
    return checks.frame(kernels.index)
