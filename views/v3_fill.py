"""V3 Useful MMA work: how much of the tensor work is not padding.

fill (labelled "useful MMA share") = useful FLOPs (2·M·N·K for a GEMM; 4·B·H·Sq·Skv·D for
attention, halved when causal) / the tensor ops counted. Tensor cores work in whole tiles, so a
batch-4 decode GEMM on an 8-wide tile multiplies padding half the time. The validation predicts the
fill from the tile in the kernel's name (tiles.py) and the problem shape alone.
`useful_tensor_pct` = tensor_device_pct · fill: the useful MMA work as a share of what the device's
best path for its input type could do in the elapsed time, the figure the headline should have been.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import v2_tensor
from views.catalog import HIGHER, KERNEL, MEAN, NEITHER, RATIO, Figure
from views.common import Checks, metric, safe_div
from views.context import Context, geometry, kind_is, names, shapes

ID = "V3"
TITLE = "Useful MMA work"
QUANTITIES = ("tensor_pipe_active_pct", "grid_blocks", *v2_tensor.OPS_QUANTITIES)
FIGURES = (
    Figure("useful_flops", "useful FLOPs", "FLOP", NEITHER, KERNEL,
           "2·M·N·K for a GEMM; 4·B·H·Sq·Skv·D for attention (halved when causal); from the NVTX "
           "shapes", bounds=(0, None)),
    Figure("fill", "useful MMA share", "ratio", HIGHER, RATIO, "useful FLOPs / tensor ops: the share "
           "of the MMA work that was not padding (a tile reaching past the problem's edge multiplies "
           "zeros: 0.50 is half)", ratio_of=("useful_flops", "tensor_ops"),
           rests_on=("V2",), summary=True, bounds=(0, 1), reads_any=v2_tensor.OPS_QUANTITIES),
    Figure("predicted_fill", "predicted useful MMA share", "ratio", NEITHER, KERNEL,
           "M·N·K / the problem padded to whole tiles of the kernel's name: what the validation "
           "expects of a GEMM's useful MMA share"),
    Figure("useful_tensor_pct", "useful tensor", "%", HIGHER, MEAN,
           "tensor_device_pct x useful MMA share: the useful MMA work against what the device's best "
           "path for its input type does in the elapsed time, the figure the headline should have been",
           rests_on=("V1", "V2"), summary=True, bounds=(0, 100)),
)
FILL = next(f for f in FIGURES if f.column == "fill")

TOLERANCE = 0.05


def attention_flops(kernels: pd.DataFrame) -> np.ndarray:
    """4·B·H·Sq·Skv·D (QKᵀ and PV), halved when causal; NaN without an attention shape."""
    b, h, sq, skv, d, causal = (metric(kernels, c) for c in (
        "attn_batch", "attn_heads", "attn_q_len", "attn_kv_len", "attn_head_dim", "attn_causal"))
    return 4 * b * h * sq * skv * d * np.where(causal == 1, 0.5, 1.0)


def useful_flops(ctx: Context) -> np.ndarray:
    """2·M·N·K for a GEMM, attention_flops for an attention kernel with MMA ops; NaN otherwise or
    without a shape."""
    return ctx.once(_useful_flops)


def _useful_flops(ctx: Context) -> np.ndarray:
    m, n, k = shapes(ctx)
    # the attention's matrix work sits in its tensor kernel; a flash-decoding reduce has no MMA ops
    attention = kind_is(ctx, "attention") & (v2_tensor.tensor_ops(ctx) > 0)
    return np.where(kind_is(ctx, "gemm"), 2 * m * n * k,
                    np.where(attention, attention_flops(ctx.kernels), np.nan))


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    ops = v2_tensor.tensor_ops(ctx)
    at_best = v2_tensor.tensor_device_pct(ctx)
    m, n, k = shapes(ctx)
    gemm = kind_is(ctx, "gemm")
    useful = useful_flops(ctx)
    geo = geometry(ctx)
    padded = geo["padded_m"].to_numpy() * geo["padded_n"].to_numpy() * geo["padded_k"].to_numpy()
    fill = safe_div(useful, ops)
    # a share above 1 (a shape that is not the one that ran) fails V3 and makes no useful work
    possible = ~FILL.outside(fill)
    return pd.DataFrame({
        "useful_flops": useful,
        "fill": fill,
        "predicted_fill": np.where(gemm, safe_div(m * n * k, padded), np.nan),
        # no MMA ops: no useful tensor work, a measured zero (a GEMM on CUDA cores, an elementwise kernel)
        "useful_tensor_pct": np.where(ops == 0, 0.0, np.where(possible, at_best * fill, np.nan)),
    }, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    tile = names(ctx)["tile"]
    fill = figures["fill"].to_numpy()
    predicted = figures["predicted_fill"].to_numpy()
    m, _, _ = shapes(ctx)
    ops = v2_tensor.tensor_ops(ctx)
    checks = Checks(len(kernels))
    checks.na(kind_is(ctx, "attention"), "attention: no tile model predicts its useful MMA share "
                                         "(the figure itself comes from B, H, Sq, Skv, D)")
    checks.na(~kind_is(ctx, "gemm"), "not a GEMM")
    checks.na(np.isnan(m), "no problem shape: give M= N= K= in the role's NVTX range or --shapes")
    checks.na(np.isnan(ops), "no sm__ops_path_tensor_* counters")
    checks.na(ops == 0, "no tensor ops (a GEMM on CUDA cores)")
    checks.na(np.asarray(tile.isna()), "the kernel name gives no tile")
    checks.na(np.isnan(predicted), "the tile does not fit the grid (split-K factor unknown)")
    close = np.abs(safe_div(fill, predicted) - 1) <= TOLERANCE
    checks.passed(close)
    checks.failed(~close, lambda f, p, t: f"useful MMA share {f:.3f} measured, {p:.3f} predicted by the "
                                          f"{t} tile", fill, predicted, tile)
    return checks.frame(kernels.index)
