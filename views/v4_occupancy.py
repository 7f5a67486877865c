"""V4 Occupancy and its limiter.

Achieved occupancy is the warps resident per active cycle against the SM's maximum; theoretical is
what the launch allows. Here the blocks an SM can hold are recomputed from what the launch asks
(registers per thread, shared memory per block, threads per block, named barriers) and what the
device has (registers, shared memory, warps and blocks per SM), the way the CUDA occupancy
calculator does; the limiter is the resource that allows the fewest. The validation holds that
recomputation against ncu's own block limits and theoretical occupancy, and checks that achieved
does not exceed theoretical.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device
from views.catalog import HIGHER, KERNEL, MEAN, MODE, NEITHER, Figure
from views import quantities as q
from views.common import Checks, categorical, combine, safe_div
from views.context import Context

ID = "V4"
TITLE = "Occupancy and its limiter"
LIMITS = ("registers", "shared_mem", "warps", "blocks", "barriers")
LIMIT_QUANTITIES = [f"occupancy_limit_{name}_blocks" for name in LIMITS]
LIMIT_METRICS = [q.QUANTITIES[name].columns[0] for name in LIMIT_QUANTITIES]  # launch__occupancy_limit_*
ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
SHARED_MEM = "launch__shared_mem_per_block"  # static + dynamic + the driver's reserve
# static, dynamic and the driver's reserve, where the whole is not given
SHARED_MEM_PARTS = ["shared_mem_static_bytes", "shared_mem_dynamic_bytes", "shared_mem_driver_bytes"]
# What the blocks per SM are recomputed from (V5 and V8 read them too): the launch's request (the
# carveout: the shared memory the driver configured for it) and the device's limits.
LAUNCH_QUANTITIES = ("block_threads", "registers_per_thread", "shared_mem_per_block_bytes",
                     "shared_mem_config_bytes", "barrier_count", "max_warps_per_multiprocessor",
                     "max_blocks_per_multiprocessor", "max_registers_per_multiprocessor",
                     "max_shared_memory_per_multiprocessor", *SHARED_MEM_PARTS, *LIMIT_QUANTITIES)
QUANTITIES = ("achieved_occupancy_pct", "theoretical_occupancy_pct", *LAUNCH_QUANTITIES)
FIGURES = (
    Figure("achieved_occupancy_pct", "occupancy", "%", HIGHER, MEAN,
           f"{ACHIEVED}: warps resident per active cycle against the SM's maximum", summary=True,
           bounds=(0, 100), reads=("achieved_occupancy_pct",)),
    Figure("theoretical_occupancy_pct", "theoretical", "%", NEITHER, MEAN,
           f"{THEORETICAL}: what the launch allows", summary=True, bounds=(0, 100),
           reads=("theoretical_occupancy_pct",)),
    Figure("occupancy_limiter", "limiter", "text", NEITHER, MODE,
           "the resource that allows the fewest blocks per SM (ties joined with +): registers, "
           "shared_mem, warps, blocks or barriers, recomputed from the launch (else ncu's "
           "launch__occupancy_limit_*)", summary=True),
    Figure("blocks_per_sm", "blocks per SM", "count", NEITHER, KERNEL,
           "the fewest blocks any resource allows per SM, recomputed from registers per thread, "
           "shared memory per block, block size and the device's limits (else ncu's limits)",
           bounds=(0, None)),
    Figure("theoretical_recomputed_pct", "theoretical recomputed", "%", NEITHER, KERNEL,
           "blocks_per_sm x warps per block / the SM's maximum warps: what the validation holds "
           "ncu's theoretical occupancy against", bounds=(0, 100)),
)

ABS_TOLERANCE_PCT = 0.01  # ncu prints percentages to 0.01
ACHIEVED_SLACK_PCT = 1.0


def block_threads(ctx: Context) -> np.ndarray:
    return q.value(ctx, "block_threads")


def recomputed_limits(ctx: Context) -> dict[str, np.ndarray]:
    """Blocks per SM each resource allows (LIMITS), from the launch and the device; NaN where an
    input is missing."""
    return ctx.once(_recomputed_limits)


def _recomputed_limits(ctx: Context) -> dict[str, np.ndarray]:
    kernels = ctx.kernels
    warps = np.ceil(block_threads(ctx) / 32)
    # registers: whole units of 256 per warp, each of the SM's 4 sub-partitions holding a quarter of
    # the register file; a thread using none (never seen) leaves the others to decide
    registers = q.value(ctx, "registers_per_thread")
    per_warp = np.ceil(registers * 32 / device.REGISTER_UNIT) * device.REGISTER_UNIT
    warps_by_registers = np.floor(safe_div(device.registers_per_sm(ctx) / device.SUB_PARTITIONS,
                                           per_warp)) * device.SUB_PARTITIONS
    blocks = device.max_blocks_per_sm(ctx)
    by_registers = np.where(registers == 0, blocks, np.floor(warps_by_registers / warps))
    # shared memory: the block's whole request (with the driver's reserve) in 128-byte units, out of
    # the carveout the driver configured for this launch (else all the SM has)
    parts = [q.value(ctx, c) for c in SHARED_MEM_PARTS]
    reserve = np.where(np.isnan(parts[2]), device.RESERVED_SHARED_MEM_PER_BLOCK, parts[2])
    requested = q.value(ctx, "shared_mem_per_block_bytes")
    requested = np.where(np.isnan(requested), parts[0] + parts[1] + reserve, requested)
    allocated = np.ceil(requested / device.SHARED_MEM_UNIT) * device.SHARED_MEM_UNIT
    carveout = q.value(ctx, "shared_mem_config_bytes")
    carveout = np.where(np.isnan(carveout), device.shared_mem_per_sm(ctx), carveout)
    barriers = q.value(ctx, "barrier_count")
    return {
        "registers": by_registers,
        "shared_mem": np.floor(safe_div(carveout, allocated)),
        "warps": np.floor(device.max_warps_per_sm(ctx) / warps),
        "blocks": blocks,
        # a capture without the barrier count: no limit known, the others decide
        "barriers": np.where(barriers > 0, np.fmin(np.floor(safe_div(device.BARRIERS_PER_SM, barriers)),
                                                   blocks), blocks),
    }


def _fewest(limits: dict[str, np.ndarray], n: int, strict: bool) -> np.ndarray:
    """The fewest blocks; `strict`: NaN when any limit is unknown, else the known ones decide."""
    out = np.full(n, np.nan) if not strict else np.full(n, np.inf)
    for values in limits.values():
        out = np.minimum(out, values) if strict else np.fmin(out, values)
    return np.where(np.isinf(out), np.nan, out)


def ncu_blocks_per_sm(ctx: Context) -> np.ndarray:
    """The fewest blocks of ncu's launch__occupancy_limit_* columns."""
    return _fewest({n: q.value(ctx, c) for n, c in zip(LIMITS, LIMIT_QUANTITIES)}, len(ctx.kernels), False)


def blocks_per_sm(ctx: Context) -> np.ndarray:
    """The fewest blocks any resource allows per SM: recomputed, else ncu's limits."""
    return ctx.once(_blocks_per_sm)


def _blocks_per_sm(ctx: Context) -> np.ndarray:
    recomputed = recomputed_blocks_per_sm(ctx)
    return np.where(np.isnan(recomputed), ncu_blocks_per_sm(ctx), recomputed)


def recomputed_blocks_per_sm(ctx: Context) -> np.ndarray:
    """The fewest blocks per SM from the launch and the device alone; NaN without them."""
    return _fewest(recomputed_limits(ctx), len(ctx.kernels), True)


def limiter(ctx: Context) -> pd.Categorical:
    """The resource(s) allowing the fewest blocks, ties joined with '+'; null without limits."""
    kernels = ctx.kernels
    recomputed = recomputed_limits(ctx)
    known = ~np.isnan(recomputed_blocks_per_sm(ctx))
    low = blocks_per_sm(ctx)
    # a bit per resource -> a code; code 0 (no limit known) is null
    code = np.zeros(len(kernels), dtype=np.int64)
    for bit, (name, column) in enumerate(zip(LIMITS, LIMIT_QUANTITIES)):
        values = np.where(known, recomputed[name], q.value(ctx, column))
        code |= (values == low).astype(np.int64) << bit
    names = ["+".join(n for i, n in enumerate(LIMITS) if c >> i & 1) for c in range(1, 1 << len(LIMITS))]
    return categorical(code - 1, names)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    recomputed = recomputed_blocks_per_sm(ctx)
    warps = np.ceil(block_threads(ctx) / 32)
    return pd.DataFrame({
        "achieved_occupancy_pct": q.value(ctx, "achieved_occupancy_pct"),
        "theoretical_occupancy_pct": q.value(ctx, "theoretical_occupancy_pct"),
        "occupancy_limiter": limiter(ctx),
        "blocks_per_sm": blocks_per_sm(ctx),
        "theoretical_recomputed_pct": np.minimum(
            100.0, 100 * safe_div(recomputed * warps, device.max_warps_per_sm(ctx))),
    }, index=kernels.index, copy=False)


def _recomputed_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    recomputed = figures["theoretical_recomputed_pct"].to_numpy()
    theoretical = figures["theoretical_occupancy_pct"].to_numpy()
    blocks = recomputed_blocks_per_sm(ctx)
    ncu_blocks = ncu_blocks_per_sm(ctx)
    checks = Checks(len(kernels))
    checks.na(np.isnan(recomputed), f"needs {REGISTERS}, {SHARED_MEM}, the block size and the "
                                    "device's limits to recompute the blocks per SM")
    checks.failed((blocks != ncu_blocks) & ~np.isnan(ncu_blocks), lambda b, n: f"{b:.0f} blocks per SM from registers, shared "
                  f"memory, warps and blocks; ncu's limits allow {n:.0f}", blocks, ncu_blocks)
    checks.na(np.isnan(theoretical), f"needs {THEORETICAL}")
    agrees = np.abs(recomputed - theoretical) <= ABS_TOLERANCE_PCT
    checks.passed(agrees)
    checks.failed(~agrees, lambda t, r: f"theoretical {t:.2f} % from ncu, {r:.2f} % recomputed from "
                  "the launch's registers, shared memory and block size", theoretical, recomputed)
    return checks.frame(kernels.index, leftover="")


def _achieved_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    theoretical = figures["theoretical_occupancy_pct"].to_numpy()
    achieved = figures["achieved_occupancy_pct"].to_numpy()
    checks = Checks(len(ctx.kernels))
    checks.na(np.isnan(theoretical) | np.isnan(achieved), f"needs {ACHIEVED} and {THEORETICAL}")
    within = achieved <= theoretical + ACHIEVED_SLACK_PCT
    checks.passed(within)
    checks.failed(~within, lambda a, t: f"achieved {a:.2f} % above theoretical {t:.2f} %",
                  achieved, theoretical)
    return checks.frame(ctx.kernels.index)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    return combine(ctx.kernels.index, _recomputed_check(ctx, figures), _achieved_check(ctx, figures))
