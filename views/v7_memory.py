"""V7 Memory traffic and roofline.

DRAM bytes, L2 hit rate, FLOPs (tensor ops plus CUDA-core FP32) and their ratio, the arithmetic
intensity, placed against the device's ridge point. The DRAM peak is read from the counters: each
kernel implies one (bytes / time / dram__throughput share), and the median over a device's kernels
is its peak (4.80 TB/s on the H200, where memory clock × bus width gives 4.815). Validations:
(a) every kernel's implied peak agrees with that median within 5 %; (b) a GEMM with a known shape
reads at least 95 % of its weights from DRAM (ncu flushes the caches before each kernel by default).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device, v2_tensor
from views.catalog import HIGHER, KERNEL, LOWER, MEAN, MODE, NEITHER, RATIO, SUM, Figure
from views.common import Checks, categorical, combine, metric, safe_div
from views.context import Context, kind_is, shapes

ID = "V7"
TITLE = "Memory traffic and roofline"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2_HIT = "lts__t_sector_hit_rate.pct"
FP32_COUNTERS = {"ffma": ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2.0),
                 "fadd": ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1.0),
                 "fmul": ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1.0)}
METRICS = ([DRAM_READ, DRAM_WRITE, DRAM_PCT, L2_HIT, "gpu__time_duration.sum", "launch__sm_count",
            "device__attribute_max_gpu_frequency_khz", "device__attribute_memory_clock_rate",
            "device__attribute_global_memory_bus_width"]
           + [c for c, _ in FP32_COUNTERS.values()] + [c for c, _, _ in v2_tensor.OPS_COUNTERS])
FIGURES = (
    Figure("dram_bytes", "DRAM bytes", "bytes", LOWER, SUM, f"{DRAM_READ} + {DRAM_WRITE}", summary=True),
    Figure("dram_read_bytes", "DRAM read", "bytes", LOWER, KERNEL, DRAM_READ),
    Figure("dram_pct", "DRAM busy", "%", HIGHER, MEAN, f"{DRAM_PCT}: DRAM throughput against its peak"),
    Figure("l2_hit_pct", "L2 hit", "%", HIGHER, MEAN, L2_HIT),
    Figure("flops", "FLOPs", "FLOP", NEITHER, SUM,
           "tensor ops + 2 x FP32 FMA + FP32 add + FP32 multiply (sm__sass_thread_inst_executed_op_*)"),
    Figure("intensity", "intensity", "FLOP/byte", HIGHER, RATIO, "FLOPs / DRAM bytes",
           ratio_of=("flops", "dram_bytes"), summary=True),
    Figure("ridge_flops_per_byte", "ridge", "FLOP/byte", NEITHER, KERNEL,
           "the device's peak FLOP/s on the kernel's path / its DRAM peak"),
    Figure("bound", "bound", "text", NEITHER, MODE,
           "memory below the ridge, compute at or above it", summary=True),
    Figure("roofline_pct", "of roofline", "%", HIGHER, KERNEL,
           "the FLOP/s (compute-bound) or DRAM bytes/s (memory-bound) attained against the roof"),
    Figure("implied_dram_peak_bytes_per_s", "implied DRAM peak", "bytes/s", NEITHER, KERNEL,
           "DRAM bytes / time / (DRAM busy / 100), where DRAM is at least 1 % busy"),
    Figure("dram_peak_bytes_per_s", "DRAM peak", "bytes/s", NEITHER, KERNEL,
           "the median implied peak of the kernel's device, else memory clock x bus width x 2"),
)

PEAK_TOLERANCE = 0.05
# Below 1 % of peak, a percentage printed to 0.01 is too coarse to imply a peak (±0.5 % at 1 %).
MIN_DRAM_PCT = 1.0
WEIGHT_READ_SHARE = 0.95


def implied_peak(dram_bytes: np.ndarray, time_ns: np.ndarray, dram_pct: np.ndarray) -> np.ndarray:
    """Bytes per second at 100 % of dram__throughput, where the percentage is precise enough."""
    peak = safe_div(dram_bytes / (time_ns * 1e-9), dram_pct / 100)
    return np.where(dram_pct >= MIN_DRAM_PCT, peak, np.nan)


def _implied_peak(ctx: Context) -> np.ndarray:
    kernels = ctx.kernels
    return implied_peak(metric(kernels, DRAM_READ) + metric(kernels, DRAM_WRITE),
                        metric(kernels, "gpu__time_duration.sum"), metric(kernels, DRAM_PCT))


def device_dram_peak(ctx: Context) -> tuple[np.ndarray, pd.Categorical]:
    """(peak bytes/s per row, its source): the median implied peak of the row's device, else the
    memory clock and bus width attributes."""
    return ctx.once(_device_dram_peak)


def _device_dram_peak(ctx: Context) -> tuple[np.ndarray, pd.Categorical]:
    key = device.device_key(ctx)
    median = pd.Series(ctx.once(_implied_peak)).groupby(key, observed=True).transform("median").to_numpy()
    attributes = device.dram_peak_from_attributes(ctx)
    source = categorical(np.where(~np.isnan(median), 0, np.where(~np.isnan(attributes), 1, -1)),
                         ["dram__throughput", "device attributes"])
    return np.where(np.isnan(median), attributes, median), source


def peak_flops(ctx: Context, path: pd.Categorical) -> np.ndarray:
    """FLOP/s at the boost clock on the path the kernel took: tensor cores or FP32 CUDA cores."""
    gmma, hmma, none = (np.asarray(path == p, dtype=bool) for p in ("gmma", "hmma", "none"))
    per_cycle = np.where(gmma, device.tensor_rate(ctx, "gmma"),
                         np.where(hmma, device.tensor_rate(ctx, "hmma"),
                                  np.where(none, device.fp32_flops_per_cycle_per_sm(ctx), np.nan)))
    return per_cycle * device.sm_count(ctx) * device.max_clock_hz(ctx)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    read, write = metric(kernels, DRAM_READ), metric(kernels, DRAM_WRITE)
    dram_bytes = read + write
    time_ns = metric(kernels, "gpu__time_duration.sum")
    dram_pct = metric(kernels, DRAM_PCT)
    flops = v2_tensor.tensor_ops(ctx)
    for column, weight in FP32_COUNTERS.values():
        flops = flops + weight * metric(kernels, column)
    implied = ctx.once(_implied_peak)
    dram_peak, _ = device_dram_peak(ctx)
    flops_peak = peak_flops(ctx, v2_tensor.mma_path(ctx))
    ridge = safe_div(flops_peak, dram_peak)
    intensity = safe_div(flops, dram_bytes)
    compute_bound = (intensity >= ridge) | ((dram_bytes == 0) & (flops > 0))
    known = ~np.isnan(ridge) & ~np.isnan(flops) & ~np.isnan(dram_bytes) & ((flops > 0) | (dram_bytes > 0))
    bound = categorical(np.where(known, compute_bound.astype(int), -1), ["memory", "compute"])
    seconds = time_ns * 1e-9
    attained = np.where(compute_bound, safe_div(flops / seconds, flops_peak),
                        safe_div(dram_bytes / seconds, dram_peak))
    return pd.DataFrame({
        "dram_bytes": dram_bytes,
        "dram_read_bytes": read,
        "dram_pct": dram_pct,
        "l2_hit_pct": metric(kernels, L2_HIT),
        "flops": flops,
        "intensity": intensity,
        "ridge_flops_per_byte": ridge,
        "bound": bound,
        "roofline_pct": np.where(known, 100 * attained, np.nan),
        "implied_dram_peak_bytes_per_s": implied,
        "dram_peak_bytes_per_s": dram_peak,
    }, index=kernels.index, copy=False)


def _peak_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    implied = figures["implied_dram_peak_bytes_per_s"].to_numpy()
    peak = figures["dram_peak_bytes_per_s"].to_numpy()
    dram_pct = figures["dram_pct"].to_numpy()
    checks = Checks(len(kernels))
    checks.na(np.isnan(dram_pct) | np.isnan(figures["dram_bytes"].to_numpy()),
              f"needs {DRAM_READ}, {DRAM_WRITE} and {DRAM_PCT}")
    checks.na(dram_pct < MIN_DRAM_PCT, "DRAM under 1 % busy: too little traffic to imply a peak")
    ratio = safe_div(implied, peak)
    close = np.abs(ratio - 1) <= PEAK_TOLERANCE
    checks.passed(close)
    checks.failed(~close, lambda i, p: f"implies a DRAM peak of {i / 1e12:.3f} TB/s, the device's is "
                  f"{p / 1e12:.3f} TB/s ({100 * (i / p - 1):+.1f} %)", implied, peak)
    return checks.frame(kernels.index)


def _weights_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    _, n, k = shapes(ctx)
    weight_bytes = n * k * v2_tensor.element_bytes(kernels)
    read = figures["dram_read_bytes"].to_numpy()
    gemm = kind_is(ctx, "gemm")
    checks = Checks(len(kernels))
    checks.na(~gemm, "")
    checks.na(np.isnan(weight_bytes) | np.isnan(read), "")
    enough = read >= WEIGHT_READ_SHARE * weight_bytes
    checks.passed(enough)
    checks.failed(~enough, lambda r, w: f"reads {r / 1e6:.2f} MB from DRAM for {w / 1e6:.2f} MB of "
                  "weights (weights kept in L2: profiled with --cache-control none?)", read, weight_bytes)
    return checks.frame(kernels.index, leftover="")


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    return combine(ctx.kernels.index, _peak_check(ctx, figures), _weights_check(ctx, figures))
