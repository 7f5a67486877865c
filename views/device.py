"""Device constants for every kernel row: from the capture's own counters first (`launch__sm_count`,
`device__attribute_*`), from small per-compute-capability tables second.

The tables hold what the architecture fixes (warps, registers and shared memory per SM, FP32 lanes,
tensor ops per cycle by path and input type); what varies by product (SM count, clocks, memory)
comes from the counters, and the DRAM peak from the memory attributes or, for a capture without
them, the product's published peak. docs/VIEWS.md says where every number comes from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from views.common import categorical, first_metric, group_codes, metric

if TYPE_CHECKING:  # the context reads the quantities, which read the device: a type only here
    from views.context import Context

# Tensor ops (1 op = 1 FLOP; an int8 op is one multiply or one add) per tensor-pipe-busy cycle per
# SM, dense, by compute capability, MMA path and input type. The published peaks below are dense
# (no 2:4 sparsity) and divided by SMs x boost clock; "seen" is the measured ops per busy cycle per
# SM on the H200 (tests/data/h200_dtypes_raw.csv, h200_dtypes2_raw.csv, targeted_raw.csv).
#   8.0 A100 (datasheet: 312 TFLOP/s bf16/fp16, 156 tf32, 624 TOPS int8; 108 SMs at 1.41 GHz).
#   8.6 A40/A10 (GA102 whitepaper, A40: 149.7 TFLOP/s fp16 with fp32 accumulate, 74.8 tf32,
#       299.3 TOPS int8; 84 SMs at 1.74 GHz). GeForce GA10x parts halve fp32-accumulate MMA.
#   8.9 L4/L40S (Ada whitepaper, L4: 121 TFLOP/s bf16, 60 tf32, 242 fp8, 242 TOPS int8; 58 SMs at
#       2.04 GHz). GeForce Ada parts halve fp32-accumulate MMA.
#   9.0 H100 SXM (datasheet: 989 TFLOP/s bf16, 495 tf32, 1979 fp8, 1979 TOPS int8; 132 SMs at
#       1.83 GHz). Seen on the H200: wgmma bf16 4096, fp16 4096, tf32 2048, fp8 8192, int8 8192
#       (a Triton int8 GEMM; cuBLAS's _int_mm picks an sm80 IMMA kernel). The warp-level paths
#       (mma.sync: HMMA, IMMA), kept for sm80 kernels, run at 2/3 of wgmma: seen bf16 2731 (cuDNN's
#       sm80 SDPA) and int8 5461 (CUTLASS's sm80 IMMA GEMM); other types on them are not measured.
#   10.0 B200 (HGX B200 datasheet, per GPU: 2.25 PFLOP/s bf16, 1.1 tf32, 4.5 fp8, 4.5 POPS int8;
#       148 SMs, about 1.86 GHz): twice sm90 per SM per cycle, on tcgen05. Not measured here.
#   12.0 RTX 5090 (419 TFLOP/s fp16/bf16 dense; 170 SMs at 2.41 GHz): mma.sync bf16 1024. The
#       public capture (tests/data/public) agrees: 12.5 G ops in 224,652 cycles on 170 SMs are 32.05 %
#       of 1024, its sm__throughput says 32.10 %. Its other types are not taken from a source here.
TENSOR_RATES = {
    "8.0": {"hmma": {"bf16": 2048.0, "fp16": 2048.0, "tf32": 1024.0}, "imma": {"int8": 4096.0}},
    "8.6": {"hmma": {"bf16": 1024.0, "fp16": 1024.0, "tf32": 512.0}, "imma": {"int8": 2048.0}},
    "8.9": {"hmma": {"bf16": 1024.0, "fp16": 1024.0, "tf32": 512.0, "fp8": 2048.0},
            "imma": {"int8": 2048.0}},
    "9.0": {"gmma": {"bf16": 4096.0, "fp16": 4096.0, "tf32": 2048.0, "fp8": 8192.0, "int8": 8192.0},
            "hmma": {"bf16": 4096.0 * 2 / 3, "fp16": 4096.0 * 2 / 3},
            "imma": {"int8": 8192.0 * 2 / 3}},
    "10.0": {"tcgen05": {"bf16": 8192.0, "fp16": 8192.0, "tf32": 4096.0, "fp8": 16384.0,
                         "int8": 16384.0}},
    "12.0": {"hmma": {"bf16": 1024.0, "fp16": 1024.0}},
}
# The path an op counter without a path of its own (sm__ops_path_tensor_src_fp8, or any type where
# the capture has no per-path counter) ran on: the device's native one.
NATIVE_PATH = {"9.0": "gmma", "10.0": "tcgen05"}

# Per compute capability, from the CUDA C++ Programming Guide's table of technical specifications
# per compute capability: registers per SM, shared memory per SM (bytes), warps and blocks per SM,
# FP32 FLOPs per cycle per SM (2 x FP32 lanes), the highest boost clock of the family's data-centre
# parts (a ceiling for captures without device__attribute_max_gpu_frequency_khz).
ARCH = {
    "7.0": {"registers_per_sm": 65536, "shared_mem_per_sm": 98304, "max_warps_per_sm": 64,
            "max_blocks_per_sm": 32, "fp32_flops_per_cycle_per_sm": 128},
    "7.5": {"registers_per_sm": 65536, "shared_mem_per_sm": 65536, "max_warps_per_sm": 32,
            "max_blocks_per_sm": 16, "fp32_flops_per_cycle_per_sm": 128},
    "8.0": {"registers_per_sm": 65536, "shared_mem_per_sm": 167936, "max_warps_per_sm": 64,
            "max_blocks_per_sm": 32, "fp32_flops_per_cycle_per_sm": 128, "max_clock_hz": 1.41e9},
    "8.6": {"registers_per_sm": 65536, "shared_mem_per_sm": 102400, "max_warps_per_sm": 48,
            "max_blocks_per_sm": 16, "fp32_flops_per_cycle_per_sm": 256},
    "8.9": {"registers_per_sm": 65536, "shared_mem_per_sm": 102400, "max_warps_per_sm": 48,
            "max_blocks_per_sm": 24, "fp32_flops_per_cycle_per_sm": 256},
    "9.0": {"registers_per_sm": 65536, "shared_mem_per_sm": 233472, "max_warps_per_sm": 64,
            "max_blocks_per_sm": 32, "fp32_flops_per_cycle_per_sm": 256, "max_clock_hz": 1.98e9,
            "hfma2_mma_inst_per_cycle_per_sm": 2.0},
    "10.0": {"registers_per_sm": 65536, "shared_mem_per_sm": 233472, "max_warps_per_sm": 64,
             "max_blocks_per_sm": 32, "fp32_flops_per_cycle_per_sm": 256},
    "12.0": {"registers_per_sm": 65536, "shared_mem_per_sm": 102400, "max_warps_per_sm": 48,
             "max_blocks_per_sm": 24, "fp32_flops_per_cycle_per_sm": 256},
}
# hfma2_mma_inst_per_cycle_per_sm: a non-MMA instruction on the tensor pipe (HFMA2.MMA, issued by
# bf16 elementwise code) keeps it busy half a cycle. Seen on the H200: 0.497 busy cycles per
# instruction, median over 94 kernels with no MMA ops.

# How registers and shared memory are handed out (CUDA occupancy calculator, compute capability 7.0
# and later): registers per warp in units of 256, per SM sub-partition (4 per SM); shared memory per
# block in units of 128 bytes, the driver's reserved 1 KB per block included.
REGISTER_UNIT = 256
SUB_PARTITIONS = 4
SHARED_MEM_UNIT = 128
RESERVED_SHARED_MEM_PER_BLOCK = 1024
# Named barriers: seen on the H200, ncu's barrier limit is floor(64 / barriers per block).
BARRIERS_PER_SM = 64

# Published DRAM peaks (bytes/s) by the product name ncu gives (device__attribute_display_name), for
# captures without the memory clock and bus width: NVIDIA's datasheets.
PUBLISHED_DRAM_PEAK = {
    "H200": 4.8e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12, "H100 80GB HBM3": 3.35e12,
    "H100 SXM": 3.35e12, "A100-SXM4-80GB": 2.039e12, "A100 80GB PCIe": 1.935e12,
    "A100-SXM4-40GB": 1.555e12, "A100-PCIE-40GB": 1.555e12, "B200": 8.0e12, "L40S": 0.864e12,
    "L4": 0.3e12, "A40": 0.696e12, "A10": 0.6e12, "RTX 4090": 1.008e12, "RTX 5090": 1.792e12,
}

# The SM clock a kernel ran at, as ncu measured it: SpeedOfLight's "SM Frequency" is
# gpc__cycles_elapsed.avg.per_second; older sets give the SM's own rate; else cycles over duration.
SM_CLOCK_METRICS = ("gpc__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second",
                    "smsp__cycles_elapsed.avg.per_second")
DEVICE_METRICS = [
    "launch__sm_count",
    "device__attribute_multiprocessor_count",
    "device__attribute_max_warps_per_multiprocessor",
    "device__attribute_max_blocks_per_multiprocessor",
    "device__attribute_max_registers_per_multiprocessor",
    "device__attribute_max_shared_memory_per_multiprocessor",
    "device__attribute_max_gpu_frequency_khz",
    "device__attribute_clock_rate",
    "device__attribute_memory_clock_rate",
    "device__attribute_global_memory_bus_width",
    "device__attribute_l2_cache_size",
    "device__attribute_compute_capability_major",
    "device__attribute_compute_capability_minor",
    "device__attribute_display_name",
    "device__attribute_max_mem_frequency_khz",
    # ncu's measured clocks and its own DRAM peak (per cycle), where the capture has them
    *SM_CLOCK_METRICS,
    "dram__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "measured",
]

DEVICE_KEY_COLUMNS = ("run_id", "host", "device", "cc")
# Not measurements of a kernel: its identity, its launch's shape, its device's attributes.
_NOT_MEASURED = ("kernel_id", "process_id", "device", "context", "stream", "shape_m", "shape_n", "shape_k",
                 "grid_blocks", "block_threads", "rank", "comm_bytes", "comm_samples")


def measured(kernels: pd.DataFrame) -> np.ndarray:
    """Per row: did ncu measure this kernel? The ingest's `measured` column (False: every counter
    null, as ncu gives a kernel it could not read); for a store written before it, any number
    among the row's counters or figures."""
    if "measured" in kernels.columns:
        return kernels["measured"].fillna(True).to_numpy(dtype=bool)
    numeric = [c for c in kernels.columns if c not in _NOT_MEASURED and not str(c).startswith("device__attribute_")
               and pd.api.types.is_float_dtype(kernels[c].dtype)]
    if not numeric:
        return np.ones(len(kernels), dtype=bool)
    return kernels[numeric].notna().any(axis=1).to_numpy(dtype=bool)


def _to_hz(values: np.ndarray) -> np.ndarray:
    # CUDA reports clocks in kHz; a store may have scaled them to Hz. A GPU clock is 0.1 to 10 GHz:
    # 1e5..1e7 in kHz, 1e8..1e10 in Hz, so the two cannot be confused.
    return np.where(values < 1e8, values * 1e3, values)


def _cc_codes(ctx: Context) -> tuple[np.ndarray, list[str]]:
    """Compute capability per row as codes into a short list of texts ("9.0"; "" when unknown)."""
    return ctx.once(_read_cc_codes)


def _read_cc_codes(ctx: Context) -> tuple[np.ndarray, list[str]]:
    kernels = ctx.kernels
    if "cc" in kernels.columns:
        codes, uniques = pd.factorize(kernels["cc"], use_na_sentinel=True)
        names = [str(u).strip() for u in uniques]
    else:
        major = metric(kernels, "device__attribute_compute_capability_major")
        minor = metric(kernels, "device__attribute_compute_capability_minor")
        joined = pd.Series(major * 1000 + minor)
        codes, uniques = pd.factorize(joined, use_na_sentinel=True)
        names = [f"{int(u // 1000)}.{int(u % 1000)}" for u in uniques]
    # the same capability spelled twice ("9.0", " 9.0") is one
    distinct = list(dict.fromkeys(n for n in names if n))
    remap = np.array([distinct.index(n) if n else len(distinct) for n in names] + [len(distinct)])
    return remap[np.where(codes < 0, len(names), codes)], distinct + [""]


def cc(ctx: Context) -> pd.Categorical:
    """Compute capability per row as text, "9.0"; null when unknown."""
    codes, names = _cc_codes(ctx)
    return categorical(np.where(codes == len(names) - 1, -1, codes), names[:-1])


def _cc_part(name: str, index: int) -> float:
    parts = name.split(".")
    return float(parts[index]) if len(parts) > index and parts[index].isdigit() else np.nan


def cc_major(ctx: Context) -> np.ndarray:
    codes, names = _cc_codes(ctx)
    return np.array([_cc_part(n, 0) for n in names])[codes]


def cc_number(ctx: Context) -> np.ndarray:
    """9.0 -> 90, 8.6 -> 86: comparable with the sm numbers in kernel names."""
    codes, names = _cc_codes(ctx)
    return np.array([_cc_part(n, 0) * 10 + _cc_part(n, 1) for n in names])[codes]


def _per_cc(ctx: Context, pick) -> np.ndarray:
    """`pick(compute capability)` per row (a number; NaN for an unknown capability)."""
    codes, names = _cc_codes(ctx)
    return np.array([float(pick(n)) for n in names])[codes]


def _arch_lookup(ctx: Context, key: str) -> np.ndarray:
    """A per-CC table value per row, NaN for capabilities the table does not know."""
    return _per_cc(ctx, lambda n: ARCH.get(n, {}).get(key, np.nan))


def _counted_else_table(ctx: Context, attribute: str, key: str) -> np.ndarray:
    counted = metric(ctx.kernels, attribute)
    return np.where(np.isnan(counted), _arch_lookup(ctx, key), counted)


def sm_count(ctx: Context) -> np.ndarray:
    return ctx.once(_sm_count)


def _sm_count(ctx: Context) -> np.ndarray:
    return first_metric(ctx.kernels, "launch__sm_count", "device__attribute_multiprocessor_count")


def max_warps_per_sm(ctx: Context) -> np.ndarray:
    return _counted_else_table(ctx, "device__attribute_max_warps_per_multiprocessor", "max_warps_per_sm")


def max_blocks_per_sm(ctx: Context) -> np.ndarray:
    return _counted_else_table(ctx, "device__attribute_max_blocks_per_multiprocessor", "max_blocks_per_sm")


def registers_per_sm(ctx: Context) -> np.ndarray:
    return _counted_else_table(ctx, "device__attribute_max_registers_per_multiprocessor", "registers_per_sm")


def shared_mem_per_sm(ctx: Context) -> np.ndarray:
    return _counted_else_table(ctx, "device__attribute_max_shared_memory_per_multiprocessor",
                               "shared_mem_per_sm")


CYCLES_OVER_TIME = "sm__cycles_elapsed.avg / gpu__time_duration.sum"
MAX_CLOCK_ATTRIBUTES = ("device__attribute_max_gpu_frequency_khz", "device__attribute_clock_rate")
# Measured over maximum SM clock below which the clocks were held down. ncu's default
# `--clock-control base` locks them to base: seen 0.59 of 1.59 GHz (T4), 1.04 of 1.41 (A100 PCIe,
# tests/data/public), 0.93-0.98 of 1.41 (A100, 2021 export). Free clocks reach 0.97-1.0 of the maximum
# on their faster kernels (the H200 captures here, p90); heavy GEMMs throttle to 0.83 (h200_dtypes2).
LOCKED_BELOW = 0.8
CLOCK_QUANTILE = 90  # a device's clock: its faster kernels' (short or power-heavy ones run slower)


def sm_clock_measured(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(Hz per row, the index into SM_CLOCK_METRICS + (CYCLES_OVER_TIME,) that gave it; -1 none)."""
    return ctx.once(_sm_clock_measured)


def _sm_clock_measured(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    kernels = ctx.kernels
    cycles_per_ns = metric(kernels, "sm__cycles_elapsed.avg") / metric(kernels, "gpu__time_duration.sum")
    hz, source = np.full(len(kernels), np.nan), np.full(len(kernels), -1)
    for code, values in enumerate([metric(kernels, n) for n in SM_CLOCK_METRICS] + [cycles_per_ns * 1e9]):
        take = np.isnan(hz) & np.isfinite(values) & (values > 0)
        hz[take], source[take] = values[take], code
    return hz, source


def device_sm_clock_hz(ctx: Context) -> np.ndarray:
    """Per row, its device's measured SM clock (the CLOCK_QUANTILE of its measured kernels)."""
    return ctx.once(_device_sm_clock_hz)


def _device_sm_clock_hz(ctx: Context) -> np.ndarray:
    hz, _ = sm_clock_measured(ctx)
    keyed = pd.Series(np.where(measured(ctx.kernels), hz, np.nan))
    return keyed.groupby(device_key(ctx)).transform(lambda v: np.nanpercentile(v, CLOCK_QUANTILE)
                                                    if v.notna().any() else np.nan).to_numpy()


def max_clock_hz(ctx: Context) -> np.ndarray:
    return ctx.once(_max_clock)[0]


def max_clock_source(ctx: Context) -> pd.Categorical:
    """Where max_clock_hz came from: `capture: <attribute>`, `capture: <metric> (measured)` or
    `table: CC <cc>`."""
    return ctx.once(_max_clock)[1]


def _max_clock(ctx: Context) -> tuple[np.ndarray, pd.Categorical]:
    """The device's maximum SM clock: its attribute in the capture; else, for a capture without one
    (a details export), the clock it measured when that is near the CC table's ceiling, so the
    part's own boost (an H100 PCIe's 1.76 GHz, not the table's 1.98 GHz, the SXM part's); else the
    table (a measured clock far below it is a locked one)."""
    counted = [_to_hz(metric(ctx.kernels, n)) for n in MAX_CLOCK_ATTRIBUTES]
    table = _arch_lookup(ctx, "max_clock_hz")
    seen = device_sm_clock_hz(ctx)
    _, seen_source = sm_clock_measured(ctx)
    # without a ceiling a measured clock may be a locked one: it is no maximum then
    own_boost = np.isfinite(seen) & (seen >= LOCKED_BELOW * table)
    codes, names = _cc_codes(ctx)
    labels = ([f"capture: {n}" for n in MAX_CLOCK_ATTRIBUTES]
              + [f"capture: {n} (measured)" for n in (*SM_CLOCK_METRICS, CYCLES_OVER_TIME)]
              + [f"table: CC {n}" for n in names[:-1]])
    hz, source = np.full(len(ctx.kernels), np.nan), np.full(len(ctx.kernels), -1)
    for code, values in enumerate(counted):
        take = np.isnan(hz) & np.isfinite(values)
        hz[take], source[take] = values[take], code
    take = np.isnan(hz) & own_boost
    hz[take], source[take] = seen[take], len(counted) + _device_mode(ctx, seen_source)[take]
    take = np.isnan(hz) & np.isfinite(table)
    hz[take], source[take] = table[take], len(counted) + len(SM_CLOCK_METRICS) + 1 + codes[take]
    return hz, categorical(source, labels)


def _device_mode(ctx: Context, codes: np.ndarray) -> np.ndarray:
    """Per row, the most common non-negative code among its device's rows (0 when none)."""
    frame = pd.DataFrame({"key": device_key(ctx), "code": np.where(codes < 0, np.nan, codes)})
    mode = frame.groupby("key")["code"].transform(lambda v: v.mode().iloc[0] if v.notna().any() else 0)
    return mode.to_numpy(dtype=int)


def clock_state(ctx: Context) -> pd.Categorical:
    """Per row, `locked` when its device's measured SM clock is below LOCKED_BELOW of its maximum
    (ncu's default --clock-control base: every time is at base clock), `free` when not, null when
    the capture measured no clock or the maximum is unknown."""
    return ctx.once(_clock_state)


def _clock_state(ctx: Context) -> pd.Categorical:
    counted = first_metric(ctx.kernels, *MAX_CLOCK_ATTRIBUTES)
    ceiling = np.where(np.isnan(counted), _arch_lookup(ctx, "max_clock_hz"), _to_hz(counted))
    ratio = device_sm_clock_hz(ctx) / ceiling
    codes = np.where(np.isnan(ratio), -1, np.where(ratio < LOCKED_BELOW, 0, 1))
    return categorical(codes, ("locked", "free"))


def sm_count_source(ctx: Context) -> pd.Categorical:
    names = ("launch__sm_count", "device__attribute_multiprocessor_count")
    codes = np.full(len(ctx.kernels), -1)
    for code, name in reversed(list(enumerate(names))):
        codes = np.where(np.isfinite(metric(ctx.kernels, name)), code, codes)
    return categorical(codes, [f"capture: {n}" for n in names])


def dram_peak_from_capture(ctx: Context) -> np.ndarray:
    """Bytes per second: ncu's own peak, dram__bytes.sum.peak_sustained (bytes per DRAM cycle), at
    the DRAM clock it measured (else the maximum memory clock). 1.93 TB/s on the public A100 PCIe
    report (1280 B x 1.507 GHz), its datasheet's 1.935."""
    per_cycle = metric(ctx.kernels, "dram__bytes.sum.peak_sustained")
    clock = first_metric(ctx.kernels, "dram__cycles_elapsed.avg.per_second")
    clock = np.where(np.isnan(clock), _to_hz(metric(ctx.kernels, "device__attribute_max_mem_frequency_khz")), clock)
    return per_cycle * clock


def dram_peak_from_attributes(ctx: Context) -> np.ndarray:
    """Bytes per second: memory clock × bus width × 2 (double data rate). 4.815 TB/s on the H200,
    within 0.3 % of what dram__throughput implies."""
    clock = _to_hz(metric(ctx.kernels, "device__attribute_memory_clock_rate"))
    width_bits = metric(ctx.kernels, "device__attribute_global_memory_bus_width")
    return clock * width_bits * 2 / 8


def published_dram_peak(ctx: Context) -> np.ndarray:
    """The product's published DRAM peak (bytes/s) from its name; NaN for a name the table lacks
    (the longest matching product name wins: "H100 NVL" before "H100")."""
    if "device__attribute_display_name" not in ctx.kernels.columns:
        return np.full(len(ctx.kernels), np.nan)
    codes, names = pd.factorize(ctx.kernels["device__attribute_display_name"], use_na_sentinel=True)

    def lookup(name) -> float:
        found = [k for k in PUBLISHED_DRAM_PEAK if isinstance(name, str) and k in name]
        return PUBLISHED_DRAM_PEAK[max(found, key=len)] if found else np.nan

    values = np.array([lookup(n) for n in names] + [np.nan])
    return values[np.where(codes < 0, len(names), codes)]


# --- tensor rates ------------------------------------------------------------------------------------


def tensor_rate(ctx: Context, path: str, dtype: str) -> np.ndarray:
    """Dense tensor ops per busy cycle per SM on `path` for input type `dtype`, NaN if unknown."""
    return ctx.once(_tensor_rate, path, dtype)


def _tensor_rate(ctx: Context, path: str, dtype: str) -> np.ndarray:
    return _per_cc(ctx, lambda n: TENSOR_RATES.get(n, {}).get(path, {}).get(dtype, np.nan))


def best_tensor_rate(ctx: Context, dtype: str) -> np.ndarray:
    """The device's fastest path for `dtype`: ops per busy cycle per SM, NaN if unknown."""
    return ctx.once(_best_tensor_rate, dtype)


def _best_tensor_rate(ctx: Context, dtype: str) -> np.ndarray:
    def best(name: str) -> float:
        rates = [paths[dtype] for paths in TENSOR_RATES.get(name, {}).values() if dtype in paths]
        return max(rates) if rates else np.nan
    return _per_cc(ctx, best)


def native_path_codes(ctx: Context, paths: tuple[str, ...], warp_path: str) -> np.ndarray:
    """Per row, the index into `paths` of the path an op counter without a path of its own ran on:
    the device's native asynchronous path (9.0 gmma, 10.0 tcgen05), else `warp_path`."""
    codes, names = _cc_codes(ctx)
    return np.array([paths.index(NATIVE_PATH.get(n, warp_path)) for n in names])[codes]


def hfma2_rate(ctx: Context) -> np.ndarray:
    return _arch_lookup(ctx, "hfma2_mma_inst_per_cycle_per_sm")


def fp32_flops_per_cycle_per_sm(ctx: Context) -> np.ndarray:
    return _arch_lookup(ctx, "fp32_flops_per_cycle_per_sm")


def device_key(ctx: Context) -> np.ndarray:
    """An integer per row naming its device (run, host, device index, CC), for per-device medians."""
    return ctx.once(_device_key)


def _device_key(ctx: Context) -> np.ndarray:
    return group_codes(ctx.kernels, [c for c in DEVICE_KEY_COLUMNS if c in ctx.kernels.columns])
