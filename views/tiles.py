"""A GEMM's tile geometry: how a parsed tile covers a problem of shape M x N x K.

The library's tile is `tile_m` x `tile_n` (kernel_names.py); which of them runs along the problem's
N (outputs) and which along M (tokens) is read from the grid: the orientation whose tile count
(times the split-K factor) equals the launched blocks wins, else the cuBLAS one (tile_m along N,
as PyTorch calls cuBLAS). Clusters pad the tile count to whole clusters; split-K gives each split
a whole number of K tiles. Seen on the H200: gate_up 192x192 tiles in 2x1 clusters, M=2048,
N=11264 -> fill 0.948 predicted and measured; a 3-way split-K over K=5632 -> 0.489.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.common import categorical, metric

GEOMETRY = ("tile_count", "split_k_factor", "tile_along_n", "padded_m", "padded_n", "padded_k",
            "grid_matches_tiles")


def _padded(extent, tile, cluster):
    group = tile * cluster
    return np.ceil(extent / group) * group


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


def geometry(kernels: pd.DataFrame, names: pd.DataFrame, grid_blocks: np.ndarray,
             split_k: np.ndarray | None = None) -> pd.DataFrame:
    """GEOMETRY per row; NaN where the tile or the shape is unknown. `split_k`: the kernels known
    to split K (the name says so, or a split-K reduce follows); default: the name's word."""
    m, n, k = (metric(kernels, c) for c in ("shape_m", "shape_n", "shape_k"))
    tm, tn, tk = (metric(names, c) for c in ("tile_m", "tile_n", "tile_k"))
    # no cluster in the name: one block
    cm, cn = (np.where(np.isnan(c), 1.0, c) for c in (metric(names, "cluster_m"), metric(names, "cluster_n")))
    split_named = np.asarray(names["name_split_k"] if split_k is None else split_k, dtype=bool)

    # orientation A: tile_m along N; B: tile_m along M
    pad_n_a, pad_m_a = _padded(n, tm, cm), _padded(m, tn, cn)
    pad_n_b, pad_m_b = _padded(n, tn, cn), _padded(m, tm, cm)
    tiles_a = (pad_n_a / tm) * (pad_m_a / tn)
    tiles_b = (pad_n_b / tn) * (pad_m_b / tm)

    def split_for(tiles):
        ratio = grid_blocks / tiles
        whole = (ratio >= 2) & (np.abs(ratio - np.round(ratio)) < 1e-9)
        return np.where(split_named & whole, np.round(ratio), np.where(split_named, np.nan, 1.0))

    split_a, split_b = split_for(tiles_a), split_for(tiles_b)
    match_a = tiles_a * split_a == grid_blocks
    match_b = tiles_b * split_b == grid_blocks
    use_b = match_b & ~match_a
    tiles = np.where(use_b, tiles_b, tiles_a)
    split = np.where(use_b, split_b, split_a)
    padded_n = np.where(use_b, pad_n_b, pad_n_a)
    padded_m = np.where(use_b, pad_m_b, pad_m_a)
    k_tiles = np.ceil(k / tk)
    # a split-K of unknown factor still pads K to whole tiles
    per_split = np.ceil(k_tiles / np.where(np.isnan(split), 1.0, split))
    padded_k = np.where(np.isnan(tk), k, per_split * np.where(np.isnan(split), 1.0, split) * tk)
    return pd.DataFrame({
        "tile_count": tiles,
        "split_k_factor": split,
        "tile_along_n": categorical(np.where(np.isnan(tiles), -1, use_b.astype(int)), ["tile_m", "tile_n"]),
        "padded_m": padded_m, "padded_n": padded_n, "padded_k": padded_k,
        "grid_matches_tiles": np.where(np.isnan(tiles), np.nan, (match_a | match_b).astype(float)),
    }, index=kernels.index, copy=False)
