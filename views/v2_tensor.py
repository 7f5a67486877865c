"""V2 Tensor-pipe utilization: are the tensor cores doing the work, and at what rate?

`tensor_pipe_pct` is the share of active cycles the tensor pipe was busy (every MMA kind: HMMA,
HGMMA, QGMMA and IMMA), `tensor_pipe_elapsed_pct` the same share of elapsed cycles (the gap's
basis). `tensor_ops` counts the MMA work itself (one op is one FLOP), by input type and path:
the per-type counters (`sm__ops_path_tensor_src_<type>`) count every op of a type, the per-path
ones (`..._op_hgmma_...`, `..._op_hmma_...`) say which path ran it; FP8 on Hopper has no per-path
counter and runs on the device's native path. The path is decided by the op counters and not by
instructions: ATen's bf16 elementwise kernels issue `HFMA2.MMA` on the tensor pipe with no MMA
ops at all.

Each path has its own rate (device.TENSOR_RATES): an sm80 mma.sync kernel on an H200 runs at 2/3
of wgmma. The validation holds the ops at the path's rate against the pipe counter; the figures
also say what the same work would take on the device's best path for its type
(`tensor_device_pct`, `path_rate_share`): the cost of an older kernel as a number.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device
from views.catalog import HIGHER, KERNEL, MEAN, MODE, NEITHER, SUM, Figure
from views import quantities as q
from views.common import Checks, categorical, safe_div
from views.context import Context

ID = "V2"
TITLE = "Tensor-pipe utilization"

DTYPES = ("bf16", "fp16", "tf32", "fp8", "int8")
# In the order mma_path names them when a kernel ran several: the asynchronous paths first.
PATHS = ("gmma", "tcgen05", "hmma", "imma")
WARP_PATH = {"bf16": "hmma", "fp16": "hmma", "tf32": "hmma", "fp8": "hmma", "int8": "imma"}
# Bytes per input element of each type (V7 weighs a GEMM's weights with it).
ELEMENT_BYTES = {"bf16": 2.0, "fp16": 2.0, "tf32": 4.0, "fp8": 1.0, "int8": 1.0}

# The op counters by input type and by path and type (views/quantities.py names their metrics).
SOURCE_QUANTITIES = {d: q.tensor_source_quantity(d) for d in DTYPES}
PATH_QUANTITIES = [(path, dtype, q.tensor_path_quantity(path, key)) for path, dtype, key in q.TENSOR_PATHS]
OPS_QUANTITIES = (*SOURCE_QUANTITIES.values(), *(name for _, _, name in PATH_QUANTITIES))
PIPE_QUANTITIES = ("tensor_pipe_active_pct", "tensor_pipe_elapsed_pct", "tensor_pipe_imma_pct")
QUANTITIES = (*PIPE_QUANTITIES, "cycles_active", "cycles_elapsed", "sm_count", "hmma_inst", "gmma_inst",
              "hfma2_mma_inst", *OPS_QUANTITIES)
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"  # every MMA kind
FIGURES = (
    Figure("tensor_pipe_pct", "tensor pipe", "%", HIGHER, MEAN,
           f"{TENSOR_PIPE} (else the HMMA pipe's): the share of active cycles the tensor pipe was "
           "busy", summary=True, bounds=(0, 100), reads=("tensor_pipe_active_pct",)),
    Figure("tensor_pipe_elapsed_pct", "tensor pipe, elapsed", "%", HIGHER, MEAN,
           "tensor_pipe_pct x sm_active_pct / 100 (else "
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed): the share of elapsed "
           "cycles the tensor pipe was busy", rests_on=("V1",), summary=True, bounds=(0, 100),
           reads=("tensor_pipe_active_pct", "cycles_active", "cycles_elapsed")),
    Figure("tensor_device_pct", "tensor at best rate", "%", HIGHER, MEAN,
           "100 x Σ over input types of ops / (the device's best rate for the type x SMs x "
           "sm__cycles_elapsed.avg), at most tensor_pipe_elapsed_pct: the MMA work against the "
           "device's fastest path", rests_on=("V1",), summary=True, bounds=(0, 100),
           reads=("cycles_elapsed", "sm_count"), reads_any=OPS_QUANTITIES),
    Figure("tensor_ops", "tensor ops", "ops", NEITHER, SUM,
           "Σ sm__ops_path_tensor_src_<type> (else the per-path counters), dense: the MMA work "
           "(one op is one FLOP)", summary=True, bounds=(0, None), reads_any=OPS_QUANTITIES),
    Figure("tensor_dtype", "MMA type", "text", NEITHER, MODE,
           "the input type with the most ops: bf16, fp16, tf32, fp8 or int8; none without MMA ops",
           mode_fallback="none", summary=True, reads_any=OPS_QUANTITIES),
    Figure("mma_path", "MMA path", "text", NEITHER, MODE,
           "gmma (wgmma), tcgen05, hmma (mma.sync on floats) or imma (mma.sync on integers): the "
           "path with ops; none without MMA ops", mode_fallback="none", summary=True),
    Figure("tensor_ops_per_cycle_per_sm", "ops per busy cycle per SM", "ops/cycle/SM", NEITHER, KERNEL,
           "tensor_ops / (tensor-pipe busy cycles summed over SMs): the rate the validation checks"),
    Figure("path_ops_per_cycle_per_sm", "path rate", "ops/cycle/SM", NEITHER, KERNEL,
           "the rate of the kernel's path and input type (device.TENSOR_RATES; several: their "
           "op-weighted harmonic mean)"),
    Figure("best_ops_per_cycle_per_sm", "device's best rate", "ops/cycle/SM", NEITHER, KERNEL,
           "the device's fastest path for the kernel's input type"),
    Figure("path_rate_share", "path rate / best", "ratio", HIGHER, KERNEL,
           "path rate / the device's best rate: 0.67 for an sm80 mma.sync kernel on an sm90 device",
           bounds=(0, 1)),
)

TOLERANCE = 0.03
# ncu prints percentages to 0.01: a pipe share below this is too coarse to hold to 3 %.
PRINT_STEP_PCT = 0.01
MIN_CHECKED_PCT = PRINT_STEP_PCT / 2 / TOLERANCE


class Ops:
    """A kernel's MMA ops per (path, input type), and which input types the capture counts."""

    def __init__(self, by: dict[tuple[str, str], np.ndarray], seen: np.ndarray, uncounted: list[str]):
        self.by = by  # (path, dtype) -> ops per row, 0 where none
        self.seen = seen  # rows with any op counter
        self.uncounted = uncounted  # input types the capture has no counter for

    def _sum(self, keep) -> np.ndarray:
        total = np.zeros(len(self.seen))
        for key, values in self.by.items():
            if keep(*key):
                total = total + values
        return np.where(self.seen, total, np.nan)

    def path(self, path: str) -> np.ndarray:
        return self._sum(lambda p, d: p == path)

    def dtype(self, dtype: str) -> np.ndarray:
        return self._sum(lambda p, d: d == dtype)

    def total(self) -> np.ndarray:
        return self._sum(lambda p, d: True)


def ops(ctx: Context) -> Ops:
    return ctx.once(_ops)


def _ops(ctx: Context) -> Ops:
    kernels = ctx.kernels
    n = len(kernels)
    native = np.array(PATHS)[device.native_path_codes(ctx, PATHS, "hmma")]
    by: dict[tuple[str, str], np.ndarray] = {}
    seen = np.zeros(n, dtype=bool)
    uncounted = []
    for dtype in DTYPES:
        source = SOURCE_QUANTITIES[dtype] if q.collected(kernels, SOURCE_QUANTITIES[dtype]) else None
        paths: dict[str, np.ndarray] = {}
        for path, d, name in PATH_QUANTITIES:
            if d == dtype and q.collected(kernels, name):
                values = q.value(ctx, name)
                paths[path] = np.nan_to_num(paths.get(path, 0.0)) + np.nan_to_num(values)
                seen |= ~np.isnan(values)
        if source is None and not paths:
            uncounted.append(dtype)
            continue
        for path, values in paths.items():
            by[(path, dtype)] = values
        if source is None:
            continue
        total = q.value(ctx, source)
        seen |= ~np.isnan(total)
        named = sum(paths.values()) if paths else np.zeros(n)
        rest = np.maximum(np.nan_to_num(total) - named, 0.0)
        # ops no per-path counter names ran on the native path when the capture cannot count that
        # path for this type (fp8 on Hopper), else on the warp-level one
        warp = WARP_PATH[dtype]
        target = np.where(np.isin(native, list(paths)), warp, native)
        if dtype == "int8":  # no float path takes int8, and no int8 path is called hmma
            target = np.where(target == "hmma", "imma", target)
        for path in PATHS:
            share = np.where(target == path, rest, 0.0)
            if share.any():
                by[(path, dtype)] = by.get((path, dtype), 0.0) + share
    return Ops(by, seen, uncounted)


def tensor_ops(ctx: Context) -> np.ndarray:
    return ctx.once(_tensor_ops)


def _tensor_ops(ctx: Context) -> np.ndarray:
    return ops(ctx).total()


def mma_path(ctx: Context) -> pd.Categorical:
    """The path with ops (PATHS order), none without MMA ops; null when the op counters are missing
    (an Ampere-or-older capture with only pipe counters: imma when the IMMA pipe was busy)."""
    return ctx.once(_mma_path)


def _mma_path(ctx: Context) -> pd.Categorical:
    counted = ops(ctx)
    by_path = [counted.path(p) for p in PATHS]
    total = counted.total()
    imma_pipe = (q.value(ctx, "tensor_pipe_imma_pct") > 0) & ~counted.seen & (device.cc_major(ctx) < 9)
    return categorical(np.select([v > 0 for v in by_path] + [total == 0, imma_pipe],
                                 list(range(len(PATHS))) + [len(PATHS), PATHS.index("imma")], -1),
                       list(PATHS) + ["none"])


def tensor_dtype(ctx: Context) -> pd.Categorical:
    counted = ops(ctx)
    table = np.column_stack([counted.dtype(d) for d in DTYPES])
    total = counted.total()
    best = np.argmax(np.nan_to_num(table, nan=-1.0), axis=1)
    return categorical(np.where(total > 0, best, np.where(total == 0, len(DTYPES), -1)),
                       list(DTYPES) + ["none"])


def element_bytes(ctx: Context) -> np.ndarray:
    """Bytes per input element of the MMA this kernel ran (2 bf16/fp16, 4 tf32, 1 fp8/int8)."""
    kinds = tensor_dtype(ctx)
    return np.array([ELEMENT_BYTES.get(d, np.nan) for d in kinds.categories] + [np.nan])[
        np.where(kinds.codes < 0, len(kinds.categories), kinds.codes)]


def busy_cycles(ctx: Context, rate) -> np.ndarray:
    """Tensor-pipe busy cycles summed over SMs that the counted ops need at `rate(path, dtype)`
    ops per cycle per SM; NaN where an op ran at a rate not known."""
    counted = ops(ctx)
    total = np.zeros(len(ctx.kernels))
    for (path, dtype), values in counted.by.items():
        # zero ops need no rate: a device the table lacks still checks its idle kernels
        total = total + np.where(values > 0, values / rate(path, dtype), 0.0)
    return np.where(counted.seen, total, np.nan)


def path_busy_cycles(ctx: Context) -> np.ndarray:
    return ctx.once(_path_busy_cycles)


def _path_busy_cycles(ctx: Context) -> np.ndarray:
    return busy_cycles(ctx, lambda path, dtype: device.tensor_rate(ctx, path, dtype))


def best_busy_cycles(ctx: Context) -> np.ndarray:
    return ctx.once(_best_busy_cycles)


def _best_busy_cycles(ctx: Context) -> np.ndarray:
    return busy_cycles(ctx, lambda path, dtype: device.best_tensor_rate(ctx, dtype))


def tensor_pipe_pct(ctx: Context) -> np.ndarray:
    """Busy share of active cycles: the whole tensor pipe, else its HMMA part, else the elapsed
    share scaled to active cycles."""
    return q.value(ctx, "tensor_pipe_active_pct")


def tensor_pipe_elapsed_pct(ctx: Context) -> np.ndarray:
    """Busy share of elapsed cycles: tensor_pipe_pct x sm_active_pct / 100 (so that it never
    exceeds SM active), else the elapsed counter."""
    return ctx.once(_tensor_pipe_elapsed_pct)


def _tensor_pipe_elapsed_pct(ctx: Context) -> np.ndarray:
    scaled = tensor_pipe_pct(ctx) * safe_div(q.value(ctx, "cycles_active"), q.value(ctx, "cycles_elapsed"))
    return np.where(np.isnan(scaled), q.value(ctx, "tensor_pipe_elapsed_pct"), scaled)


def tensor_device_pct(ctx: Context) -> np.ndarray:
    """The MMA work at the device's best rate for its input type, as a share of elapsed cycles; 0
    without MMA ops."""
    return ctx.once(_tensor_device_pct)


def _tensor_device_pct(ctx: Context) -> np.ndarray:
    capacity = q.value(ctx, "cycles_elapsed") * device.sm_count(ctx)
    # the device's rate can only shrink the busy share, never raise it above (ops and pipe counter
    # agree to 3 %, V2's check, not exactly)
    at_best = np.minimum(100 * safe_div(best_busy_cycles(ctx), capacity), tensor_pipe_elapsed_pct(ctx))
    return np.where(tensor_ops(ctx) == 0, 0.0, at_best)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    total = tensor_ops(ctx)
    pipe = tensor_pipe_pct(ctx)
    with_ops = np.where(total > 0, total, np.nan)
    best, path = best_busy_cycles(ctx), path_busy_cycles(ctx)
    return pd.DataFrame({
        "tensor_pipe_pct": pipe,
        "tensor_pipe_elapsed_pct": tensor_pipe_elapsed_pct(ctx),
        "tensor_device_pct": tensor_device_pct(ctx),
        "tensor_ops": total,
        "tensor_dtype": tensor_dtype(ctx),
        "mma_path": mma_path(ctx),
        "tensor_ops_per_cycle_per_sm": safe_div(
            with_ops, pipe / 100 * q.value(ctx, "cycles_active") * device.sm_count(ctx)),
        "path_ops_per_cycle_per_sm": safe_div(with_ops, path),
        "best_ops_per_cycle_per_sm": safe_div(with_ops, best),
        "path_rate_share": safe_div(np.where(total > 0, best, np.nan), path),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    pipe = figures["tensor_pipe_pct"].to_numpy()
    total = figures["tensor_ops"].to_numpy()
    capacity = q.value(ctx, "cycles_active") * device.sm_count(ctx)
    predicted = 100 * safe_div(path_busy_cycles(ctx), capacity)
    # With no MMA ops the pipe can still be busy with HFMA2.MMA: the hfma2 counter when collected,
    # else the hmma-pipe instructions that are not wgmma.
    hfma2 = q.value(ctx, "hfma2_mma_inst")
    non_mma = np.where(np.isnan(hfma2),
                       q.value(ctx, "hmma_inst") - np.nan_to_num(q.value(ctx, "gmma_inst")), hfma2)
    predicted_idle = 100 * safe_div(non_mma / device.hfma2_rate(ctx), capacity)
    predicted_idle = np.where(non_mma == 0, 0.0, predicted_idle)
    idle = total == 0
    predicted = np.where(idle, predicted_idle, predicted)
    rate = figures["tensor_ops_per_cycle_per_sm"].to_numpy()
    uncounted = ops(ctx).uncounted

    checks = Checks(len(kernels))
    checks.na(np.isnan(pipe) | np.isnan(total), f"needs {TENSOR_PIPE} (ncu section {q.CWA}) and the sm__ops_path_tensor_* counters "
              f"({q.TENSOR_ROOFLINE})")
    # both counters say nothing ran: an agreement, down to ncu's printing
    checks.passed(idle & (predicted == 0) & (pipe <= PRINT_STEP_PCT / 2),
                  "no MMA ops and no other work on the tensor pipe, which reads 0")
    missing = f" (the capture counts no {', '.join(uncounted)} ops)" if uncounted else ""
    gmma_inst = q.value(ctx, "gmma_inst")
    checks.failed(idle & (gmma_inst > 0), lambda g: f"{g:,.0f} wgmma instructions ran, yet no op "
                  f"counter counts their work{missing}", gmma_inst)
    checks.na(idle & np.isnan(predicted), "no MMA ops, and the rate at which this device's tensor "
                                          "pipe runs other instructions is unknown")
    checks.na(np.isnan(predicted), "no tensor rate known for this device's compute capability, path "
                                   "and input type, or no sm__cycles_active.avg / launch__sm_count")
    gap = np.abs(predicted - pipe)
    close = gap <= TOLERANCE * np.maximum(pipe, predicted)
    coarse = np.maximum(pipe, predicted) < MIN_CHECKED_PCT
    checks.na(coarse & (gap <= PRINT_STEP_PCT), f"under {MIN_CHECKED_PCT:.2f} % busy: ncu's 0.01 % "
              "steps are coarser than the 3 % the check holds to")
    checks.passed(close & idle, "no MMA ops: the pipe's busy cycles are its non-MMA instructions "
                                "(HFMA2.MMA) at the device's rate")
    checks.passed(close)
    checks.failed(idle, lambda p, n, q: f"no MMA ops, yet the tensor pipe is {p:.2f} % busy; "
                  f"{n:,.0f} non-MMA instructions explain {q:.2f} %{missing}", pipe, non_mma, predicted)
    checks.failed(~close, lambda q, p, r: f"ops imply {q:.2f} % tensor-pipe busy, counter says "
                  f"{p:.2f} % ({r:,.0f} ops per busy cycle per SM)", predicted, pipe, rate)
    return checks.frame(kernels.index)
