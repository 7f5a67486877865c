"""V7 Memory traffic, roofline and bound.

DRAM bytes, L2 hit rate, FLOPs and their ratio, the arithmetic intensity, placed against the
device's roofs. FLOPs come twice: executed (tensor ops plus CUDA-core FP32, padding included) and
useful (the problem's 2·M·N·K where the shape is known: a batch-1 decode GEMM executes 8 times its
useful work). Each kernel gets a ridge and a share of the roofline on its own MMA path and on the
device's best path for its input type (an sm80 kernel on an H200 has the lower roof of the two).

The bound says which unit limits the kernel: the one nearest its peak among DRAM (`dram_pct`),
the tensor pipe (busy share of elapsed) and FP32, or `latency` when none reaches 60 % (ncu's
speed-of-light guidance: below that no unit is saturated, and the kernel waits on latency). A
decode GEMM that keeps DRAM 80 % busy is memory-bound, not a tensor pipe with headroom.

A group's bound (a phase and role, a phase) is its kernels' bounds weighted by their time: the
bound holding the most of its time, with that share and each bound's, and `bound_pct` the
bounding unit's mean over the kernels it bounds. Not the units of the group's time-weighted means
against the floor: a bound is a kernel's, and averaging the units of kernels bound by different
ones reads none at its peak. A batch-8 decode spends 59 % of its time in GEMMs with DRAM at 85 %
and 41 % in small elementwise kernels; its mean DRAM share is 51 %, which would call the phase
latency-bound though most of its time is memory-bound. The verdict, the gap table, the report and
the gate read these; nothing else decides a bound.

The DRAM peak is the device's: memory clock × bus width × 2 from its attributes, else the
product's published peak. Validations: (a) the peak each kernel's counters imply (bytes / time /
dram__throughput share) agrees with it within 5 %; (b) a GEMM with a known shape reads at least
95 % of its weights from DRAM (ncu flushes the caches before each kernel by default).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device, v1_time, v2_tensor, v3_fill
from views.catalog import HIGHER, KERNEL, LOWER, MEAN, MODE, NEITHER, RATIO, SUM, Figure
from views import quantities as q
from views.common import Checks, argmax_label, categorical, combine, safe_div
from views.context import Context, kind_is, shapes

ID = "V7"
TITLE = "Memory traffic and roofline"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_TOTAL = "dram__bytes.sum"  # an older metric list's, without the split
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2_HIT = "lts__t_sector_hit_rate.pct"
# FP32 thread instructions and the FLOPs each is
FP32_QUANTITIES = {"ffma_thread_inst": 2.0, "fadd_thread_inst": 1.0, "fmul_thread_inst": 1.0}
QUANTITIES = ("dram_bytes", "dram_read_bytes", "dram_write_bytes", "dram_pct", "l2_hit_pct", "time_ns",
              "sm_count", "cycles_elapsed", "max_gpu_frequency_khz", "memory_clock_rate",
              "global_memory_bus_width", "display_name", *FP32_QUANTITIES, *v2_tensor.OPS_QUANTITIES)
# Below this share of its peak no unit limits the kernel: it is latency-bound.
BOUND_FLOOR_PCT = 60.0
# The units a kernel can be bound by, each with the figure that is its share of its peak (all three
# of the kernel's elapsed time), and the bounds: the units, and latency.
UNITS = (("memory", "dram_pct"), ("tensor", "tensor_pipe_elapsed_pct"), ("fp32", "fp32_pct"))
LATENCY = "latency"
BOUNDS = (*(unit for unit, _ in UNITS), LATENCY)
FIGURES = (
    Figure("dram_bytes", "DRAM bytes", "bytes", LOWER, SUM,
           f"{DRAM_READ} + {DRAM_WRITE} (else {DRAM_TOTAL}, else dram__bytes.sum.per_second x "
           "gpu__time_duration.sum, else DRAM % x the DRAM peak x the time)",
           summary=True, bounds=(0, None), reads=("dram_bytes",)),
    Figure("dram_read_bytes", "DRAM read", "bytes", LOWER, KERNEL, DRAM_READ, bounds=(0, None),
           reads=("dram_read_bytes",)),
    Figure("dram_pct", "DRAM", "%", HIGHER, MEAN, f"{DRAM_PCT} (else gpu__dram_throughput's): DRAM "
           "throughput against its peak", summary=True, bounds=(0, 100), reads=("dram_pct",)),
    Figure("l2_hit_pct", "L2 hit", "%", HIGHER, MEAN, L2_HIT, bounds=(0, 100), reads=("l2_hit_pct",),
           replay_noise=True),
    Figure("flops", "FLOPs executed", "FLOP", NEITHER, SUM,
           "tensor ops + 2 x FP32 FMA + FP32 add + FP32 multiply (sm__sass_thread_inst_executed_op_*): "
           "the work done, padding included", bounds=(0, None),
           reads_any=(*FP32_QUANTITIES, *v2_tensor.OPS_QUANTITIES)),
    Figure("useful_work_flops", "FLOPs useful", "FLOP", NEITHER, SUM,
           "V3's useful FLOPs (2·M·N·K; attention's) where the shape is known; a kernel with no "
           "tensor ops: its FP32 FLOPs (nothing pads them); else null", rests_on=("V3",),
           bounds=(0, None)),
    Figure("fp32_pct", "FP32", "%", HIGHER, MEAN,
           "100 x FP32 FLOPs / (sm__cycles_elapsed.avg x SMs x the device's FP32 FLOPs per cycle "
           "per SM): the CUDA cores' share of their peak", bounds=(0, 100)),
    Figure("intensity", "intensity", "FLOP/byte", HIGHER, RATIO, "FLOPs executed / DRAM bytes",
           ratio_of=("flops", "dram_bytes"), summary=True, bounds=(0, None), reads=("dram_bytes",),
           reads_any=(*FP32_QUANTITIES, *v2_tensor.OPS_QUANTITIES)),
    Figure("useful_intensity", "useful intensity", "FLOP/byte", HIGHER, RATIO,
           "useful FLOPs / DRAM bytes: where the kernel's real work sits on the roofline",
           ratio_of=("useful_work_flops", "dram_bytes"), rests_on=("V3",), summary=True,
           bounds=(0, None)),
    Figure("ridge_flops_per_byte", "ridge", "FLOP/byte", NEITHER, KERNEL,
           "peak FLOP/s on the kernel's path and input type (CUDA cores: FP32) / the DRAM peak",
           rests_on=("V2",)),
    Figure("ridge_device_flops_per_byte", "ridge on the best path", "FLOP/byte", NEITHER, KERNEL,
           "peak FLOP/s on the device's best path for the kernel's input type / the DRAM peak",
           rests_on=("V2",)),
    Figure("bound", "bound", "text", NEITHER, MODE,
           "the unit nearest its peak: memory (DRAM %), tensor (tensor pipe busy share of elapsed "
           f"cycles), fp32 (FP32 %); latency when none reaches {BOUND_FLOOR_PCT:.0f} %. A group's: the "
           "bound holding the most of its kernels' time (`bound_time_share`; each bound's share in "
           "`bound_<bound>_time_share`), unknown where its kernels of unknown bound hold more",
           summary=True, mode_value=("bound_pct", "bound_pct"), mode_shares=True, rests_on=("V2",),
           reads=("dram_pct", "tensor_pipe_active_pct"), reads_any=tuple(FP32_QUANTITIES)),
    Figure("bound_pct", "bound at", "%", NEITHER, KERNEL,
           "the bounding unit's share of its peak (for latency: the highest of the three); a "
           "group's: its time-weighted mean over the kernels holding the group's bound",
           bounds=(0, 100)),
    Figure("roofline_pct", "of roofline", "%", HIGHER, KERNEL,
           "100 x max(FLOP/s executed / peak FLOP/s on the kernel's path, DRAM bytes/s / DRAM "
           "peak): the attained share of the roof at the kernel's intensity", rests_on=("V2",),
           bounds=(0, 100)),
    Figure("roofline_device_pct", "of the best roofline", "%", HIGHER, KERNEL,
           "100 x max(useful FLOP/s (else executed) / peak FLOP/s on the device's best path, DRAM "
           "bytes/s / DRAM peak): the useful work against what the device allows",
           rests_on=("V2", "V3"), bounds=(0, 100)),
    Figure("implied_dram_peak_bytes_per_s", "implied DRAM peak", "bytes/s", NEITHER, KERNEL,
           "DRAM bytes / time / (DRAM busy / 100), where DRAM is at least 1 % busy", bounds=(0, None)),
    Figure("dram_peak_bytes_per_s", "DRAM peak", "bytes/s", NEITHER, KERNEL,
           "memory clock x bus width x 2 (device attributes), else the product's published peak, "
           "else the median implied peak of the kernel's device"),
)

PEAK_TOLERANCE = 0.05
# Below 1 % of peak, a percentage printed to 0.01 is too coarse to imply a peak (±0.5 % at 1 %).
MIN_DRAM_PCT = 1.0
WEIGHT_READ_SHARE = 0.95
PEAK_SOURCES = ("capture: dram__bytes.sum.peak_sustained",
                "capture: device__attribute_memory_clock_rate x bus width", "table: published peak",
                "implied by dram__throughput")


def dram_bytes(ctx: Context) -> np.ndarray:
    return q.value(ctx, "dram_bytes")


def implied_peak(bytes_: np.ndarray, time_ns: np.ndarray, dram_pct: np.ndarray) -> np.ndarray:
    """Bytes per second at 100 % of dram__throughput, where the percentage is precise enough."""
    peak = safe_div(bytes_ / (time_ns * 1e-9), dram_pct / 100)
    return np.where(dram_pct >= MIN_DRAM_PCT, peak, np.nan)


def _implied_peak(ctx: Context) -> np.ndarray:
    implied = implied_peak(dram_bytes(ctx), v1_time.time_ns(ctx), q.value(ctx, "dram_pct"))
    # bytes from the percentage and the peak, or the percentage from the bytes and the peak,
    # give that peak back: nothing is implied
    bytes_source = q.source(ctx, "dram_bytes")
    by_peak = np.array(["DRAM peak" in t for t in bytes_source.categories] + [False])
    from_peak = q.read(ctx, "dram_pct").derived | by_peak[bytes_source.codes]
    return np.where(from_peak, np.nan, implied)


def device_dram_peak(ctx: Context) -> tuple[np.ndarray, pd.Categorical]:
    """(peak bytes/s per row, its source, PEAK_SOURCES): ncu's own peak, else the memory
    attributes, else the product's published peak, else the median peak the device's kernels imply."""
    return ctx.once(_device_dram_peak)


def _device_dram_peak(ctx: Context) -> tuple[np.ndarray, pd.Categorical]:
    candidates = [device.dram_peak_from_capture(ctx), device.dram_peak_from_attributes(ctx),
                  device.published_dram_peak(ctx),
                  pd.Series(ctx.once(_implied_peak)).groupby(device.device_key(ctx), observed=True)
                  .transform("median").to_numpy()]
    peak = np.full(len(ctx.kernels), np.nan)
    source = np.full(len(ctx.kernels), -1)
    for code, values in enumerate(candidates):
        take = np.isnan(peak) & ~np.isnan(values)
        peak[take], source[take] = values[take], code
    return peak, categorical(source, PEAK_SOURCES)


def _fp32_flops(ctx: Context) -> np.ndarray:
    return sum(weight * q.value(ctx, name) for name, weight in FP32_QUANTITIES.items())


def _peak_flops(ctx: Context, tensor_rate: np.ndarray) -> np.ndarray:
    """FLOP/s at the boost clock: at `tensor_rate` ops per cycle per SM for a kernel with tensor
    ops, on the FP32 CUDA cores for one without."""
    ops = v2_tensor.tensor_ops(ctx)
    per_cycle = np.where(ops > 0, tensor_rate,
                         np.where(ops == 0, device.fp32_flops_per_cycle_per_sm(ctx), np.nan))
    return per_cycle * device.sm_count(ctx) * device.max_clock_hz(ctx)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    bytes_ = dram_bytes(ctx)
    seconds = v1_time.time_ns(ctx) * 1e-9
    dram_pct = q.value(ctx, "dram_pct")
    ops = v2_tensor.tensor_ops(ctx)
    fp32 = _fp32_flops(ctx)
    flops = ops + fp32
    useful = v3_fill.useful_flops(ctx)
    useful = np.where(np.isnan(useful) & (ops == 0), fp32, useful)
    dram_peak, _ = device_dram_peak(ctx)
    sms = device.sm_count(ctx)
    fp32_pct = 100 * safe_div(fp32, q.value(ctx, "cycles_elapsed") * sms
                              * device.fp32_flops_per_cycle_per_sm(ctx))
    with_ops = np.where(ops > 0, ops, np.nan)
    path_peak = _peak_flops(ctx, safe_div(with_ops, v2_tensor.path_busy_cycles(ctx)))
    best_peak = _peak_flops(ctx, safe_div(with_ops, v2_tensor.best_busy_cycles(ctx)))
    tensor = v2_tensor.tensor_pipe_elapsed_pct(ctx)
    shares = {"dram_pct": dram_pct, "tensor_pipe_elapsed_pct": tensor, "fp32_pct": fp32_pct}
    bound, bound_pct = argmax_label([shares[column] for _, column in UNITS], [unit for unit, _ in UNITS],
                                    (BOUND_FLOOR_PCT, LATENCY))
    memory_share = safe_div(bytes_ / seconds, dram_peak)
    roofline = np.maximum(safe_div(flops / seconds, path_peak), memory_share)
    useful_rate = np.where(np.isnan(useful), flops, useful) / seconds
    roofline_device = np.maximum(safe_div(useful_rate, best_peak), memory_share)
    return pd.DataFrame({
        "dram_bytes": bytes_,
        "dram_read_bytes": q.value(ctx, "dram_read_bytes"),
        "dram_pct": dram_pct,
        "l2_hit_pct": q.value(ctx, "l2_hit_pct"),
        "flops": flops,
        "useful_work_flops": useful,
        "fp32_pct": fp32_pct,
        "intensity": safe_div(flops, bytes_),
        "useful_intensity": safe_div(useful, bytes_),
        "ridge_flops_per_byte": safe_div(path_peak, dram_peak),
        "ridge_device_flops_per_byte": safe_div(best_peak, dram_peak),
        "bound": bound,
        "bound_pct": bound_pct,
        "roofline_pct": 100 * roofline,
        "roofline_device_pct": 100 * roofline_device,
        "implied_dram_peak_bytes_per_s": ctx.once(_implied_peak),
        "dram_peak_bytes_per_s": dram_peak,
    }, index=kernels.index, copy=False)


def _peak_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    implied = figures["implied_dram_peak_bytes_per_s"].to_numpy()
    peak, source = device_dram_peak(ctx)
    independent = np.asarray(source != PEAK_SOURCES[-1], dtype=bool) & ~np.isnan(peak)
    dram_pct = figures["dram_pct"].to_numpy()
    checks = Checks(len(kernels))
    checks.na(np.isnan(dram_pct) | np.isnan(figures["dram_bytes"].to_numpy()),
              f"needs {DRAM_READ}, {DRAM_WRITE} and {DRAM_PCT} (ncu sections {q.MWA}, {q.SOL})")
    checks.na(np.isnan(figures["implied_dram_peak_bytes_per_s"].to_numpy()) & (dram_pct >= MIN_DRAM_PCT),
              lambda s: f"the DRAM figures come from the device's peak ({s}): they cannot check it",
              q.source(ctx, "dram_pct"))
    checks.na(dram_pct < MIN_DRAM_PCT, "DRAM under 1 % busy: too little traffic to imply a peak")
    checks.na(~independent, "no memory clock and bus width and no published peak for this device: "
                            "nothing independent to hold the implied DRAM peak against")
    ratio = safe_div(implied, peak)
    close = np.abs(ratio - 1) <= PEAK_TOLERANCE
    checks.passed(close)
    checks.failed(~close, lambda i, p, s: f"implies a DRAM peak of {i / 1e12:.3f} TB/s, the device's "
                  f"is {p / 1e12:.3f} TB/s ({s}; {100 * (i / p - 1):+.1f} %)", implied, peak, source)
    return checks.frame(kernels.index)


def _weights_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    _, n, k = shapes(ctx)
    weight_bytes = n * k * v2_tensor.element_bytes(ctx)
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
