"""Device constants for every kernel row: from the capture's own counters first (`launch__sm_count`,
`device__attribute_*`), from a small per-compute-capability table second.

The table holds only what the architecture fixes (warps per SM, FP32 lanes, tensor ops per cycle);
what varies by product (SM count, clocks, memory) must come from the counters, and is NaN without
them. The per-kernel DRAM peak implied by `dram__throughput` lives in V7, which measures it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.common import categorical, first_metric, group_codes, metric
from views.context import Context

# Tensor ops (1 op = 1 FLOP) per tensor-pipe-active cycle per SM, dense 16-bit inputs (bf16, fp16)
# with fp32 accumulate, by the path the MMA took. 9.0 gmma: 4096, seen on the H200 (4092 to 4101 on
# every wgmma kernel). 9.0 hmma: an Ampere-style mma.sync kernel on Hopper fills the pipe at 2/3 of
# that, seen (the decode SDPA kernel: 2731). 8.0: A100's 312 TFLOP/s over 108 SMs at 1.41 GHz.
ARCH = {
    "8.0": {"max_warps_per_sm": 64, "fp32_flops_per_cycle_per_sm": 128, "max_clock_hz": 1.41e9,
            "tensor_ops_per_cycle_per_sm": {"hmma": 2048.0}},
    "8.6": {"max_warps_per_sm": 48, "fp32_flops_per_cycle_per_sm": 256},
    "8.9": {"max_warps_per_sm": 48, "fp32_flops_per_cycle_per_sm": 256},
    "9.0": {"max_warps_per_sm": 64, "fp32_flops_per_cycle_per_sm": 256, "max_clock_hz": 1.98e9,
            "tensor_ops_per_cycle_per_sm": {"gmma": 4096.0, "hmma": 4096.0 * 2 / 3},
            "hfma2_mma_inst_per_cycle_per_sm": 2.0},
}
# max_clock_hz: the highest boost clock of the family's data-centre parts (A100; H100 SXM, H200), a
# ceiling for captures that carry no device__attribute_max_gpu_frequency_khz (a details export).
# hfma2_mma_inst_per_cycle_per_sm: a non-MMA instruction on the tensor pipe (HFMA2.MMA, issued by
# bf16 elementwise code) keeps it busy half a cycle. Seen on the H200: 0.497 busy cycles per
# instruction, median over 94 kernels with no MMA ops.

# Input type -> ops per cycle relative to 16-bit (tf32 runs at half rate, fp8 and int8 at double).
DTYPE_RATE = {"16bit": 1.0, "tf32": 0.5, "8bit": 2.0}

DEVICE_METRICS = [
    "launch__sm_count",
    "device__attribute_multiprocessor_count",
    "device__attribute_max_warps_per_multiprocessor",
    "device__attribute_max_gpu_frequency_khz",
    "device__attribute_clock_rate",
    "device__attribute_memory_clock_rate",
    "device__attribute_global_memory_bus_width",
    "device__attribute_l2_cache_size",
    "device__attribute_compute_capability_major",
    "device__attribute_compute_capability_minor",
    "device__attribute_display_name",
]

DEVICE_KEY_COLUMNS = ("run_id", "host", "device", "cc")


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


def _arch_lookup(ctx: Context, pick) -> np.ndarray:
    """A per-CC table value per row, NaN for capabilities the table does not know."""
    codes, names = _cc_codes(ctx)
    values = np.array([float(pick(ARCH.get(n, {}))) for n in names])
    return values[codes]


def sm_count(ctx: Context) -> np.ndarray:
    return ctx.once(_sm_count)


def _sm_count(ctx: Context) -> np.ndarray:
    return first_metric(ctx.kernels, "launch__sm_count", "device__attribute_multiprocessor_count")


def max_warps_per_sm(ctx: Context) -> np.ndarray:
    counted = metric(ctx.kernels, "device__attribute_max_warps_per_multiprocessor")
    table = _arch_lookup(ctx, lambda a: a.get("max_warps_per_sm", np.nan))
    return np.where(np.isnan(counted), table, counted)


def max_clock_hz(ctx: Context) -> np.ndarray:
    return ctx.once(_max_clock_hz)


def _max_clock_hz(ctx: Context) -> np.ndarray:
    counted = _to_hz(first_metric(ctx.kernels, "device__attribute_max_gpu_frequency_khz",
                                  "device__attribute_clock_rate"))
    return np.where(np.isnan(counted), _arch_lookup(ctx, lambda a: a.get("max_clock_hz", np.nan)), counted)


def dram_peak_from_attributes(ctx: Context) -> np.ndarray:
    """Bytes per second: memory clock × bus width × 2 (double data rate). 4.815 TB/s on the H200,
    within 0.3 % of what dram__throughput implies."""
    clock = _to_hz(metric(ctx.kernels, "device__attribute_memory_clock_rate"))
    width_bits = metric(ctx.kernels, "device__attribute_global_memory_bus_width")
    return clock * width_bits * 2 / 8


def tensor_rate(ctx: Context, path: str) -> np.ndarray:
    """16-bit tensor ops per active cycle per SM on `path` ("gmma" or "hmma"), NaN if unknown."""
    return _arch_lookup(ctx, lambda a: a.get("tensor_ops_per_cycle_per_sm", {}).get(path, np.nan))


def hfma2_rate(ctx: Context) -> np.ndarray:
    return _arch_lookup(ctx, lambda a: a.get("hfma2_mma_inst_per_cycle_per_sm", np.nan))


def fp32_flops_per_cycle_per_sm(ctx: Context) -> np.ndarray:
    return _arch_lookup(ctx, lambda a: a.get("fp32_flops_per_cycle_per_sm", np.nan))


def device_key(ctx: Context) -> np.ndarray:
    """An integer per row naming its device (run, host, device index, CC), for per-device medians."""
    return ctx.once(_device_key)


def _device_key(ctx: Context) -> np.ndarray:
    return group_codes(ctx.kernels, [c for c in DEVICE_KEY_COLUMNS if c in ctx.kernels.columns])
