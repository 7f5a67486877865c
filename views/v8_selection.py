"""V8 Kernel selection: what the libraries chose.

Per kernel: the family, tile, split-K and architecture path its name says (kernel_names.py).
Validations: (a) the path the name claims agrees with the counters: an sm90/wgmma kernel shows
gmma instructions, an sm80/wmma one hmma and no gmma. Seen: decode attention on the H200 ran
cuDNN's `..._sm80_flash_fprop_wmma_...`, an Ampere kernel, where prefill ran an sm90 wgmma one;
such a kernel passes (its counters agree with its name) and is flagged `arch_behind_device`.
(b) the grid agrees with the tile and the problem shape: one block per tile (times the split-K
factor), or, for a persistent kernel, as many blocks as the device holds at once.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views import device, v2_tensor, v4_occupancy
from views.catalog import KERNEL, NEITHER, Figure
from views.common import Checks, combine, metric
from views.context import Context, geometry, grid_blocks, kind_is, names, shapes
from views.vocabulary import PHASE_ORDER

ID = "V8"
TITLE = "Kernel selection"
METRICS = [v2_tensor.GMMA_INST, v2_tensor.HMMA_INST, "launch__grid_size", "launch__cluster_size",
           "launch__sm_count"] + v4_occupancy.LIMIT_METRICS + [c for c, _, _ in v2_tensor.OPS_COUNTERS]
FIGURES = (
    Figure("kernel_family", "kernel family", "text", NEITHER, KERNEL,
           "the library the name says: cublaslt_nvjet, cutlass, cudnn_sdpa, flash_attention, ...",
           summary=True),
    Figure("tile", "tile", "text", NEITHER, KERNEL, "the tile the name says, in the library's terms",
           summary=True),
    Figure("split_k", "split-K", "flag", NEITHER, KERNEL,
           "a GEMM whose name says split-K, or that a split-K reduce follows", summary=True),
    Figure("split_k_factor", "split-K factor", "count", NEITHER, KERNEL,
           "grid blocks / tiles, when the name says split-K"),
    Figure("persistent", "persistent", "flag", NEITHER, KERNEL,
           "a GEMM whose name says so, or whose grid is the device's co-resident capacity"),
    Figure("arch_path", "architecture path", "text", NEITHER, KERNEL,
           "the architecture and MMA instruction the name says, e.g. sm90 wgmma", summary=True),
    Figure("arch_behind_device", "older than the device", "flag", NEITHER, KERNEL,
           "built for an older architecture than the device it ran on"),
    Figure("claimed_path", "claimed MMA path", "text", NEITHER, KERNEL,
           "the tensor path (gmma, hmma) the name's MMA instruction implies"),
    Figure("tile_count", "tiles", "count", NEITHER, KERNEL,
           "the tiles (times the split-K factor) that cover the problem shape"),
    Figure("grid_matches_tiles", "grid matches tiles", "flag", NEITHER, KERNEL,
           "1 when the grid is one block per tile, in either orientation"),
)
SELECTION_KINDS = ("gemm", "attention", "splitk_reduce")
SELECTION_COLUMNS = ["phase", "role", "kind", "choice", "kernels", "time_ns", "changed"]


def reduce_follows(kernels: pd.DataFrame, family: pd.Categorical) -> np.ndarray:
    """True where the next kernel launched (same process, phase and role) is a split-K reduce."""
    order = (np.argsort(kernels["kernel_id"].to_numpy(), kind="stable") if "kernel_id" in kernels
             else np.arange(len(kernels)))
    is_reduce = np.asarray(family == "splitk_reduce", dtype=bool)[order]
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
    for column in ("process_id", "phase", "role"):
        if column in kernels.columns:
            codes = pd.factorize(kernels[column], use_na_sentinel=False)[0][order]
            same &= codes[1:] == codes[:-1]
    follows = np.zeros(len(order), dtype=bool)
    follows[:-1] = same & is_reduce[1:]
    out = np.zeros(len(order), dtype=bool)
    out[order] = follows
    return out


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    parsed = names(ctx)
    gemm = kind_is(ctx, "gemm")
    geo = geometry(ctx)
    split = np.asarray(parsed["name_split_k"], dtype=bool) | reduce_follows(kernels, parsed["kernel_family"])
    arch = parsed["arch_number"].to_numpy()
    device_arch = device.cc_number(ctx)
    behind = pd.arrays.BooleanArray(arch < device_arch, np.isnan(arch) | np.isnan(device_arch))
    flag = lambda values: pd.arrays.BooleanArray(values, ~gemm)  # noqa: E731 (GEMMs only)
    # persistent: the name says so, or the grid is the device's co-resident capacity (to a cluster)
    # and smaller than the tile count (seen: decode12's 224-tile gate_up on 132 blocks, no "coop")
    grid = grid_blocks(ctx)
    capacity = device.sm_count(ctx) * v4_occupancy.blocks_per_sm(ctx)
    cluster = np.nan_to_num(metric(kernels, "launch__cluster_size"), nan=1.0)
    tile_count = geo["tile_count"].to_numpy()
    fills_device = (grid < tile_count) & (grid <= capacity) & (grid > capacity - np.maximum(cluster, 1))
    persistent = np.asarray(parsed["persistent"], dtype=bool) | fills_device
    return pd.DataFrame({
        "kernel_family": parsed["kernel_family"],
        "tile": parsed["tile"],
        "split_k": flag(split),
        "split_k_factor": np.where(gemm, geo["split_k_factor"].to_numpy(), np.nan),
        "persistent": flag(persistent),
        "arch_path": parsed["arch_path"],
        "arch_behind_device": behind,
        "claimed_path": parsed["claimed_path"],
        "tile_count": geo["tile_count"].to_numpy(),
        "grid_matches_tiles": geo["grid_matches_tiles"].to_numpy(),
    }, index=kernels.index, copy=False)


def _true(flags: pd.Series) -> np.ndarray:
    return flags.to_numpy(dtype=bool, na_value=False)


def _path_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    claimed = figures["claimed_path"]
    gmma_inst, hmma_inst = metric(kernels, v2_tensor.GMMA_INST), metric(kernels, v2_tensor.HMMA_INST)
    gmma_ops, hmma_ops = v2_tensor.ops_by_path(ctx)
    # instructions when collected, else the op counters
    shows_gmma = np.where(np.isnan(gmma_inst), gmma_ops > 0, gmma_inst > 0)
    shows_hmma = np.where(np.isnan(hmma_inst), hmma_ops > 0, hmma_inst > 0) & ~shows_gmma
    unknown = np.isnan(gmma_inst) & np.isnan(gmma_ops)
    behind = _true(figures["arch_behind_device"])
    claims_gmma = np.asarray(claimed == "gmma", dtype=bool)
    shown = np.where(shows_gmma, 0, np.where(shows_hmma, 1, 2))
    checks = Checks(len(kernels))
    checks.na(np.asarray(claimed.isna(), dtype=bool), "")
    checks.na(unknown, "needs the gmma/hmma instruction or op counters")
    agrees = np.where(claims_gmma, shows_gmma, shows_hmma)
    checks.passed(agrees & behind, lambda a, c, s: f"{a} kernel on a {c} device: the counters show "
                  + ("gmma" if s == 0 else "hmma and no gmma"), figures["arch_path"], device.cc(ctx), shown)
    checks.passed(agrees)
    checks.failed(~agrees, lambda a, s: f"the name says {a}, the counters show "
                  + ("gmma", "hmma", "no MMA")[s], figures["arch_path"], shown)
    return checks.frame(kernels.index, leftover="")


def _grid_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    tiles_needed = figures["tile_count"].to_numpy()
    grid = grid_blocks(ctx)
    persistent = _true(figures["persistent"])
    matches = figures["grid_matches_tiles"].to_numpy() == 1
    m, n, _ = shapes(ctx)
    checks = Checks(len(kernels))
    checks.na(np.isnan(tiles_needed) | np.isnan(grid), "")
    checks.passed(matches)
    checks.passed(persistent & (grid <= tiles_needed), lambda g, t: f"persistent: {g:.0f} blocks "
                  f"over {t:.0f} tiles", grid, tiles_needed)
    checks.failed(np.ones(len(kernels), dtype=bool), lambda g, t, mm, nn, c: f"grid of {g:.0f} "
                  f"blocks, but {t} tiles over M={mm:.0f} N={nn:.0f} make {c:.0f}",
                  grid, figures["tile"], m, n, tiles_needed)
    return checks.frame(kernels.index, leftover="")


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    return combine(ctx.kernels.index, _path_check(ctx, figures), _grid_check(ctx, figures))


def _choice(row) -> str:
    text = row.kernel_family if isinstance(row.kernel_family, str) else "unknown"
    if isinstance(row.tile, str):
        text += f" {row.tile}"
    if not pd.isna(row.split_k) and bool(row.split_k):
        text += f" split-K {row.split_k_factor:.0f}" if row.split_k_factor >= 2 else " split-K"
    if isinstance(row.arch_path, str):
        text += f" ({row.arch_path})"
    return text


def selection(result_kernels: pd.DataFrame) -> pd.DataFrame:
    """Per role and phase, the kernels the libraries chose for its GEMMs and attention, with
    `changed`: the role's first phase did not run this."""
    keys = ["role", "phase", "kind", "kernel_family", "tile", "split_k", "split_k_factor", "arch_path"]
    wanted = result_kernels["kind"].isin(SELECTION_KINDS).to_numpy(dtype=bool, na_value=False)
    table = result_kernels[keys + ["time_ns"]][wanted]
    if table.empty:
        return pd.DataFrame(columns=SELECTION_COLUMNS)
    # group first (few distinct combinations), then name each choice once
    grouped = (table.groupby(keys, sort=False, dropna=False, observed=True)
               .agg(kernels=("time_ns", "size"), timed=("time_ns", "count"), time_ns=("time_ns", "sum"))
               .reset_index())
    grouped["time_ns"] = grouped["time_ns"].where(grouped["timed"] == grouped["kernels"])  # unknown: NaN
    grouped["choice"] = [_choice(row) for row in grouped.itertuples(index=False)]
    grouped = (grouped.groupby(["role", "phase", "kind", "choice"], sort=False, observed=True)
               .agg(kernels=("kernels", "sum"), time_ns=("time_ns", lambda t: t.sum(min_count=len(t))))
               .reset_index())
    for column in ("role", "phase", "kind"):
        grouped[column] = grouped[column].astype(object)
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    grouped["phase_rank"] = grouped["phase"].map(rank).fillna(len(rank))
    grouped = grouped.sort_values(["role", "phase_rank", "kind"], kind="stable")
    # what the role ran in its first phase; anything else later is a change
    first_phase = grouped.groupby("role", observed=True)["phase_rank"].transform("min")
    first_choices = grouped[grouped["phase_rank"] == first_phase].groupby("role", observed=True)["choice"].agg(frozenset)
    firsts = grouped["role"].map(first_choices)
    grouped["changed"] = [c not in f for c, f in zip(grouped["choice"], firsts)]
    return grouped[SELECTION_COLUMNS].reset_index(drop=True)
