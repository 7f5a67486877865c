"""V2 Tensor-pipe utilization: are the tensor cores doing the work?

`tensor_pipe_pct` is the share of active cycles the tensor pipe was busy; `tensor_ops` counts the
MMA work itself (one op is one FLOP). The path, wgmma (`gmma`) or mma.sync (`hmma`), is decided by
the op counters and not by instructions: ATen's bf16 elementwise kernels issue `HFMA2.MMA` on the
tensor pipe with no MMA ops at all. The validation turns the ops back into busy cycles at the
device's rate per path and type; they must match the pipe counter within 3 %.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device
from views.catalog import HIGHER, KERNEL, MEAN, MODE, NEITHER, SUM, Figure
from views.common import Checks, choose, metric, safe_div
from views.context import Context

ID = "V2"
TITLE = "Tensor-pipe utilization"

# (counter, path, input type). Dense only: sparse MMA is not what these workloads run.
OPS_COUNTERS = [
    ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum", "gmma", "16bit"),
    ("sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum", "gmma", "16bit"),
    ("sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum", "gmma", "tf32"),
    ("sm__ops_path_tensor_op_igmma_src_int8_sparsity_off.sum", "gmma", "8bit"),
    ("sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum", "hmma", "16bit"),
    ("sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_off.sum", "hmma", "16bit"),
    ("sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum", "hmma", "16bit"),
    ("sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum", "hmma", "tf32"),
    ("sm__ops_path_tensor_op_imma_src_int8_sparsity_off.sum", "hmma", "8bit"),
    # fp8 has no per-op counter: wgmma (QGMMA) on Hopper and later, mma.sync on Ada
    ("sm__ops_path_tensor_src_fp8_sparsity_off.sum", "by_cc", "8bit"),
]
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
TENSOR_PIPE_ELAPSED = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
HMMA_INST = "sm__inst_executed_pipe_tensor_op_hmma.sum"
GMMA_INST = "sm__inst_executed_pipe_tensor_op_gmma.sum"
HFMA2_INST = "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"
METRICS = ([TENSOR_PIPE, TENSOR_PIPE_ELAPSED, "sm__cycles_active.avg", "launch__sm_count",
            HMMA_INST, GMMA_INST, HFMA2_INST] + [c for c, _, _ in OPS_COUNTERS])
FIGURES = (
    Figure("tensor_pipe_pct", "tensor pipe", "%", HIGHER, MEAN,
           f"{TENSOR_PIPE}: the share of active cycles the tensor pipe was busy", summary=True),
    Figure("tensor_pipe_elapsed_pct", "tensor elapsed", "%", HIGHER, MEAN,
           f"{TENSOR_PIPE_ELAPSED}: the same share of elapsed cycles"),
    Figure("tensor_ops", "tensor ops", "ops", NEITHER, SUM,
           "the sum of the dense sm__ops_path_tensor_* counters: the MMA work (one op is one FLOP)",
           summary=True),
    Figure("mma_path", "MMA path", "text", NEITHER, MODE,
           "gmma when wgmma ops were counted, hmma when only mma.sync ops, none when neither",
           mode_fallback="none", summary=True),
    Figure("tensor_ops_per_cycle_per_sm", "ops per busy cycle per SM", "ops/cycle/SM", NEITHER, KERNEL,
           "tensor_ops / (tensor-pipe busy cycles summed over SMs): the rate the validation checks"),
)

# Bytes per input element of each input type (V7 weighs a GEMM's weights with it).
ELEMENT_BYTES = {"16bit": 2.0, "tf32": 4.0, "8bit": 1.0}

TOLERANCE = 0.03
ABS_TOLERANCE_PCT = 0.006  # ncu prints percentages to 0.01


def _paths(kernels: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The OPS_COUNTERS entries whose counter this table has ("by_cc" paths are resolved per row by
    the callers)."""
    return [(c, p, t) for c, p, t in OPS_COUNTERS if c in kernels.columns]


def ops_by_path(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(gmma ops, hmma ops) per row; NaN where no op counter is present."""
    return ctx.once(_ops_by_path)


def _ops_by_path(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    kernels = ctx.kernels
    n = len(kernels)
    gmma, hmma = np.zeros(n), np.zeros(n)
    seen = np.zeros(n, dtype=bool)
    hopper = None
    for column, path, _ in _paths(kernels):
        values = metric(kernels, column)
        seen |= ~np.isnan(values)
        values = np.nan_to_num(values)
        if path == "by_cc":
            hopper = device.cc_major(ctx) >= 9 if hopper is None else hopper
            gmma += np.where(hopper, values, 0.0)
            hmma += np.where(hopper, 0.0, values)
        elif path == "gmma":
            gmma += values
        else:
            hmma += values
    gmma[~seen], hmma[~seen] = np.nan, np.nan
    return gmma, hmma


def tensor_ops(ctx: Context) -> np.ndarray:
    return ctx.once(_tensor_ops)


def _tensor_ops(ctx: Context) -> np.ndarray:
    gmma, hmma = ops_by_path(ctx)
    return gmma + hmma


def mma_path(ctx: Context) -> pd.Categorical:
    """gmma when wgmma ops were counted, hmma when only mma.sync ops, none when neither; null
    when the op counters are missing."""
    return ctx.once(_mma_path)


def _mma_path(ctx: Context) -> pd.Categorical:
    gmma, hmma = ops_by_path(ctx)
    return choose([gmma > 0, hmma > 0, (gmma == 0) & (hmma == 0)], ["gmma", "hmma", "none"])


def element_bytes(kernels: pd.DataFrame) -> np.ndarray:
    """Bytes per input element of the MMA this kernel ran (2 for bf16/fp16, 4 tf32, 1 fp8/int8)."""
    out = np.full(len(kernels), np.nan)
    for column, _, dtype in _paths(kernels):
        out = np.where(np.isnan(out) & (metric(kernels, column) > 0), ELEMENT_BYTES[dtype], out)
    return out


def expected_busy_cycles(ctx: Context) -> np.ndarray:
    """Tensor-pipe busy cycles summed over SMs that the counted ops need at the device's rates."""
    kernels = ctx.kernels
    total = np.zeros(len(kernels))
    seen = np.zeros(len(kernels), dtype=bool)
    rates = {"gmma": device.tensor_rate(ctx, "gmma"), "hmma": device.tensor_rate(ctx, "hmma")}
    hopper = device.cc_major(ctx) >= 9
    for column, path, dtype in _paths(kernels):
        values = metric(kernels, column)
        seen |= ~np.isnan(values)
        rate = (np.where(hopper, rates["gmma"], rates["hmma"]) if path == "by_cc" else rates[path])
        rate = rate * device.DTYPE_RATE[dtype]
        # zero ops need no rate: a device the table lacks still checks its idle kernels
        total += np.where(np.nan_to_num(values) > 0, values / rate, 0.0)
    total[~seen] = np.nan
    return total


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    ops = tensor_ops(ctx)
    pipe = metric(kernels, TENSOR_PIPE)
    busy_cycles = pipe / 100 * metric(kernels, "sm__cycles_active.avg") * device.sm_count(ctx)
    return pd.DataFrame({
        "tensor_pipe_pct": pipe,
        "tensor_pipe_elapsed_pct": metric(kernels, TENSOR_PIPE_ELAPSED),
        "tensor_ops": ops,
        "mma_path": mma_path(ctx),
        "tensor_ops_per_cycle_per_sm": safe_div(np.where(ops > 0, ops, np.nan), busy_cycles),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    pipe = figures["tensor_pipe_pct"].to_numpy()
    ops = figures["tensor_ops"].to_numpy()
    capacity = metric(kernels, "sm__cycles_active.avg") * device.sm_count(ctx)
    predicted = 100 * safe_div(expected_busy_cycles(ctx), capacity)
    # With no MMA ops the pipe can still be busy with HFMA2.MMA: the hfma2 counter when collected,
    # else the hmma-pipe instructions that are not wgmma.
    hfma2 = metric(kernels, HFMA2_INST)
    non_mma = np.where(np.isnan(hfma2),
                       metric(kernels, HMMA_INST) - np.nan_to_num(metric(kernels, GMMA_INST)), hfma2)
    predicted_idle = 100 * safe_div(non_mma / device.hfma2_rate(ctx), capacity)
    predicted_idle = np.where(non_mma == 0, 0.0, predicted_idle)
    idle = ops == 0
    predicted = np.where(idle, predicted_idle, predicted)
    rate = figures["tensor_ops_per_cycle_per_sm"].to_numpy()

    checks = Checks(len(kernels))
    checks.na(np.isnan(pipe) | np.isnan(ops), f"needs {TENSOR_PIPE} and the sm__ops_path_tensor_* counters")
    checks.passed(idle & (pipe <= ABS_TOLERANCE_PCT))
    checks.na(idle & np.isnan(predicted), "no MMA ops, and the rate at which this device's tensor "
                                          "pipe runs other instructions is unknown")
    checks.na(np.isnan(predicted), "no tensor rate known for this device's compute capability, or no "
                                   "sm__cycles_active.avg / launch__sm_count")
    close = np.abs(predicted - pipe) <= np.maximum(TOLERANCE * pipe, ABS_TOLERANCE_PCT)
    checks.passed(close & idle, "no MMA ops: the pipe's busy cycles are its non-MMA instructions "
                                "(HFMA2.MMA) at the device's rate")
    checks.passed(close)
    checks.failed(idle, lambda p, n, q: f"no MMA ops, yet the tensor pipe is {p:.2f} % busy; "
                  f"{n:,.0f} non-MMA instructions explain {q:.2f} %", pipe, non_mma, predicted)
    checks.failed(~close, lambda q, p, r: f"ops imply {q:.2f} % tensor-pipe busy, counter says "
                  f"{p:.2f} % ({r:,.0f} ops per busy cycle per SM)", predicted, pipe, rate)
    return checks.frame(kernels.index)
