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

from typing import NamedTuple

import numpy as np
import pandas as pd

from views import device, v2_tensor, v4_occupancy
from views.catalog import KERNEL, NEITHER, Figure
from views import quantities as q
from views.common import Checks, combine, group_codes, safe_div
from views.context import Context, geometry, grid_blocks, kind_is, names, shapes, split_k
from views.vocabulary import CHOSEN_KINDS, PHASE_ORDER

ID = "V8"
TITLE = "Kernel selection"
QUANTITIES = ("gmma_inst", "hmma_inst", "imma_inst", "grid_blocks", "cluster_size", "sm_count",
              *v4_occupancy.LAUNCH_QUANTITIES, *v2_tensor.OPS_QUANTITIES)
FIGURES = (
    Figure("kernel_family", "kernel family", "text", NEITHER, KERNEL,
           "the library the name says: cublaslt_nvjet, cutlass, cudnn_sdpa, flash_attention, ...",
           summary=True),
    Figure("tile", "tile", "text", NEITHER, KERNEL, "the tile the name says, in the library's terms",
           summary=True),
    Figure("split_k", "split-K", "flag", NEITHER, KERNEL,
           "a GEMM whose name says split-K, or that a split-K reduce follows", summary=True),
    Figure("split_k_factor", "split-K factor", "count", NEITHER, KERNEL,
           "grid blocks / tiles, for a split-K GEMM"),
    Figure("persistent", "persistent", "flag", NEITHER, KERNEL,
           "a GEMM whose name says so (cooperative, ping-pong), or whose grid is the blocks the device "
           "holds at once (V4) and fewer than its tiles"),
    Figure("arch_path", "architecture path", "text", NEITHER, KERNEL,
           "the architecture and MMA instruction the name says, e.g. sm90 wgmma", summary=True),
    Figure("arch_behind_device", "older than the device", "flag", NEITHER, KERNEL,
           "built for an older architecture than the device it ran on"),
    Figure("claimed_path", "claimed MMA path", "text", NEITHER, KERNEL,
           "the tensor path the name's MMA instruction implies: gmma, tcgen05, hmma, imma, or none "
           "for an FP32 (ffma) GEMM"),
    Figure("tile_count", "tiles", "count", NEITHER, KERNEL,
           "the tiles (times the split-K factor) that cover the problem shape"),
    Figure("grid_matches_tiles", "grid matches tiles", "flag", NEITHER, KERNEL,
           "1 when the grid is one block per tile, in either orientation"),
)
SELECTION_COLUMNS = ["phase", "role", "kind", "choice", "kernels", "time_ns", "changed"]


def persistent(ctx: Context) -> np.ndarray:
    """A GEMM whose name says persistent (cooperative, ping-pong), or whose grid is the device's
    co-resident capacity (to a cluster) and smaller than its tile count (seen: decode12's 224-tile
    gate_up on 132 blocks, no "coop" in its name); False where not known to be."""
    return ctx.once(_persistent)


def _persistent(ctx: Context) -> np.ndarray:
    grid = grid_blocks(ctx)
    capacity = co_resident_blocks(ctx)
    cluster = np.nan_to_num(q.value(ctx, "cluster_size"), nan=1.0)
    tile_count = geometry(ctx)["tile_count"].to_numpy()
    fills_device = (grid < tile_count) & (grid <= capacity) & (grid > capacity - np.maximum(cluster, 1))
    return (np.asarray(names(ctx)["persistent"], dtype=bool) | fills_device) & kind_is(ctx, "gemm")


def co_resident_blocks(ctx: Context) -> np.ndarray:
    """SMs x blocks per SM (recomputed from the launch, V4): the blocks that run at once."""
    return device.sm_count(ctx) * v4_occupancy.blocks_per_sm(ctx)


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    parsed = names(ctx)
    gemm = kind_is(ctx, "gemm")
    geo = geometry(ctx)
    split = split_k(ctx)
    arch = parsed["arch_number"].to_numpy()
    device_arch = device.cc_number(ctx)
    behind = pd.arrays.BooleanArray(arch < device_arch, np.isnan(arch) | np.isnan(device_arch))
    flag = lambda values: pd.arrays.BooleanArray(values, ~gemm)  # noqa: E731 (GEMMs only)
    return pd.DataFrame({
        "kernel_family": parsed["kernel_family"],
        "tile": parsed["tile"],
        "split_k": flag(split),
        "split_k_factor": np.where(gemm, geo["split_k_factor"].to_numpy(), np.nan),
        "persistent": flag(persistent(ctx)),
        "arch_path": parsed["arch_path"],
        "arch_behind_device": behind,
        "claimed_path": parsed["claimed_path"],
        "tile_count": geo["tile_count"].to_numpy(),
        "grid_matches_tiles": geo["grid_matches_tiles"].to_numpy(),
    }, index=kernels.index, copy=False)


def _true(flags: pd.Series) -> np.ndarray:
    return flags.to_numpy(dtype=bool, na_value=False)


# What the counters show, in the order a kernel that shows several is named by.
SHOWN = ("gmma", "tcgen05", "imma", "hmma")
SHOWN_TEXT = {"gmma": "gmma", "tcgen05": "tcgen05", "imma": "imma and no gmma",
              "hmma": "hmma and no gmma", "none": "no MMA"}


def _path_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    claimed = figures["claimed_path"]
    counted = v2_tensor.ops(ctx)
    instructions = {"gmma": q.value(ctx, "gmma_inst"), "hmma": q.value(ctx, "hmma_inst"),
                    "imma": q.value(ctx, "imma_inst"), "tcgen05": np.full(len(kernels), np.nan)}
    # the op counters when collected (they count MMA work only), else the instructions (the hmma
    # and imma ones count HGMMA, IGMMA and HFMA2.MMA too, so they show their path only without
    # gmma), else the path V2 reads from the IMMA pipe (an Ampere full set has no op counters)
    from_pipe = v2_tensor.mma_path(ctx)
    shows = {p: np.where(counted.seen, counted.path(p) > 0,
                         np.where(np.isnan(instructions[p]), np.asarray(from_pipe == p, dtype=bool),
                                  instructions[p] > 0)) for p in SHOWN}
    for path in ("imma", "hmma"):
        shows[path] &= ~shows["gmma"]
    unknown = np.isnan(instructions["gmma"]) & ~counted.seen & np.asarray(from_pipe.isna(), dtype=bool)
    shown = np.select([shows[p] for p in SHOWN], list(range(len(SHOWN))), len(SHOWN))
    shown_text = [SHOWN_TEXT[p] for p in (*SHOWN, "none")]
    agrees = np.asarray(claimed == "none", dtype=bool) & (shown == len(SHOWN))  # FP32 CUDA cores
    for path in SHOWN:
        agrees |= np.asarray(claimed == path, dtype=bool) & shows[path]
    behind = _true(figures["arch_behind_device"])
    share = safe_div(v2_tensor.best_busy_cycles(ctx), v2_tensor.path_busy_cycles(ctx))
    checks = Checks(len(kernels))
    checks.na(np.asarray(claimed.isna(), dtype=bool), "")
    checks.na(unknown, "needs the gmma/hmma instruction or op counters")
    checks.passed(agrees & behind, lambda a, c, s, r: f"{a} kernel on a {c} device: the counters show "
                  f"{shown_text[s]}" + (f"; its path runs at {r:.2f} of the device's best rate"
                                        if r < 1 else ""),
                  figures["arch_path"], device.cc(ctx), shown, np.round(share, 2))
    checks.passed(agrees)
    checks.failed(~agrees, lambda a, s: f"the name says {a}, the counters show {shown_text[s]}",
                  figures["arch_path"], shown)
    return checks.frame(kernels.index, leftover="")


def _grid_check(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    tiles_needed = figures["tile_count"].to_numpy()
    grid = grid_blocks(ctx)
    persistent = _true(figures["persistent"])
    matches = figures["grid_matches_tiles"].to_numpy() == 1
    m, n, _ = shapes(ctx)
    capacity = co_resident_blocks(ctx)
    cluster = np.maximum(np.nan_to_num(q.value(ctx, "cluster_size"), nan=1.0), 1.0)
    # a persistent kernel launches the blocks that run at once (to a whole cluster), or one per
    # tile when it has fewer tiles than that
    fills = (grid <= capacity) & (grid > capacity - cluster)
    checks = Checks(len(kernels))
    checks.na(np.isnan(tiles_needed) | np.isnan(grid), "")
    checks.passed(matches)
    checks.na(persistent & np.isnan(capacity), "persistent: needs the blocks per SM (V4) to check "
                                               "its grid against the device's capacity")
    checks.passed(persistent & (grid < tiles_needed) & fills, lambda g, t: f"persistent: {g:.0f} "
                  f"blocks over {t:.0f} tiles", grid, tiles_needed)
    checks.failed(persistent & (grid > tiles_needed), lambda g, t: f"persistent, but {g:.0f} blocks for "
                  f"{t:.0f} tiles: more blocks than tiles (a wrong shape or tile?)", grid, tiles_needed)
    checks.failed(persistent, lambda g, t, c: f"persistent, but {g:.0f} blocks for {t:.0f} tiles: "
                  f"neither the {c:.0f} blocks the device holds at once nor one per tile",
                  grid, tiles_needed, capacity)
    checks.failed(np.ones(len(kernels), dtype=bool), lambda g, t, mm, nn, c: f"grid of {g:.0f} "
                  f"blocks, but {t} tiles over M={mm:.0f} N={nn:.0f} make {c:.0f}",
                  grid, figures["tile"], m, n, tiles_needed)
    return checks.frame(kernels.index, leftover="")


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    return combine(ctx.kernels.index, _path_check(ctx, figures), _grid_check(ctx, figures))


def choice_text(kernel_family, tile, split_k, split_k_factor, arch_path) -> str:
    """What a library chose, as V8's table says it: `cublaslt_nvjet 64x8x64 split-K 3 (sm90 wgmma)`."""
    text = kernel_family if isinstance(kernel_family, str) else "unknown"
    if isinstance(tile, str):
        text += f" {tile}"
    if not pd.isna(split_k) and bool(split_k):
        text += f" split-K {split_k_factor:.0f}" if split_k_factor >= 2 else " split-K"
    if isinstance(arch_path, str):
        text += f" ({arch_path})"
    return text


class _Choice(NamedTuple):
    """One row of V8's table while it is built: sorted by role, phase (in run order) and kind."""
    role: object
    phase_rank: int
    kind: object
    phase: object
    choice: str
    kernels: int
    time_ns: float


def _first_appearance(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group numbers 0..k-1 in the order each group first appears, and each group's first row."""
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    number = np.empty(len(order), dtype=np.int64)
    number[order] = np.arange(len(order))
    return number[inverse.reshape(-1)], first[order]


def selection(result_kernels: pd.DataFrame) -> pd.DataFrame:
    """Per role and phase, the kernels the libraries chose for its GEMMs and attention, with
    `changed`: the role's first phase did not run this."""
    keys = ["role", "phase", "kind", "kernel_family", "tile", "split_k", "split_k_factor", "arch_path"]
    wanted = result_kernels["kind"].isin(CHOSEN_KINDS).to_numpy(dtype=bool, na_value=False)
    table = result_kernels[keys + ["time_ns"]][wanted]
    if table.empty:
        return pd.DataFrame(columns=SELECTION_COLUMNS)
    # group first (few distinct combinations, numbered as they first appear), then name each
    # choice once; the few groups are then rows of Python (two groupbys and a sort of them cost
    # `smlens views` 30 ms: BENCHMARKS.md)
    group, first = _first_appearance(group_codes(table, keys))
    time_ns = table["time_ns"].to_numpy(dtype=float)
    kernels = np.bincount(group, minlength=len(first))
    timed = np.bincount(group, weights=~np.isnan(time_ns), minlength=len(first))
    summed = pd.Series(time_ns).groupby(group).sum().to_numpy()  # pandas' compensated sum
    summed = np.where(timed == kernels, summed, np.nan)  # a kernel's time unknown: the group's
    combos = table.iloc[first]
    choices = [choice_text(*values) for values in zip(*(combos[c].tolist() for c in keys[3:]))]
    identity = zip(*(combos[c].astype(object) for c in ("role", "phase", "kind")), choices)
    members: dict[tuple, list[int]] = {}
    for index, label in enumerate(identity):  # one row per role, phase, kind and choice
        members.setdefault(label, []).append(index)
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    rows = sorted((_Choice(role, rank.get(phase, len(rank)), kind, phase, choice, int(kernels[at].sum()),
                           np.sum(summed[at])) for (role, phase, kind, choice), at in members.items()),
                  key=lambda row: (row.role, row.phase_rank, row.kind))
    # what the role ran in its first phase; anything else later is a change
    first_rank = {}
    for row in rows:
        first_rank[row.role] = min(first_rank.get(row.role, row.phase_rank), row.phase_rank)
    firsts: dict = {}
    for row in rows:
        if row.phase_rank == first_rank[row.role]:
            firsts.setdefault(row.role, set()).add(row.choice)
    return pd.DataFrame({"phase": pd.Series([row.phase for row in rows], dtype=object),
                         "role": pd.Series([row.role for row in rows], dtype=object),
                         "kind": pd.Series([row.kind for row in rows], dtype=object),
                         "choice": [row.choice for row in rows],
                         "kernels": np.array([row.kernels for row in rows], dtype=np.int64),
                         "time_ns": np.array([row.time_ns for row in rows], dtype=float),
                         "changed": [row.choice not in firsts[row.role] for row in rows]}, columns=SELECTION_COLUMNS)
