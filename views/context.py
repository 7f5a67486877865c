"""One computation of the views over one kernels table, and what several views derive from it.

Several views read the same intermediates (the parsed kernel names, the grid, the tile geometry,
the device constants, the op counts). A `Context` holds the kernels table and derives each of
them once, the first time a view asks: `ctx.once(derive)` keys the result by the function that
derives it, so there are no names to collide and nothing outlives the computation. A new table
gets a new context, so nothing is ever served stale.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import numpy as np
import pandas as pd

from views import kernel_names, quantities, tiles
from views.common import equals, metric

T = TypeVar("T")


class Context:
    """A kernels table (docs/SCHEMA.md) and its derived intermediates."""

    def __init__(self, kernels: pd.DataFrame):
        self.kernels = kernels
        self._derived: dict[tuple, Any] = {}

    def once(self, derive: Callable[..., T], *args) -> T:
        """`derive(self, *args)`, computed the first time it is asked for in this context."""
        key = (derive, *args)
        if key not in self._derived:
            self._derived[key] = derive(self, *args)
        return self._derived[key]


def names(ctx: Context) -> pd.DataFrame:
    """The parsed kernel names (kernel_names.parse_names), one parse per computation."""
    return ctx.once(_parse_names)


def _parse_names(ctx: Context) -> pd.DataFrame:
    return kernel_names.parse_names(ctx.kernels["kernel_name"])


def kind_is(ctx: Context, *kinds: str) -> np.ndarray:
    """The kernels table's `kind` is one of `kinds`; without a `kind` column, the kind the name
    parser gives (the one ingest stores)."""
    return ctx.once(_kind_is, kinds)


def _kind_is(ctx: Context, kinds: tuple[str, ...]) -> np.ndarray:
    if "kind" in ctx.kernels.columns:
        return equals(ctx.kernels, "kind", *kinds)
    return np.asarray(names(ctx)["kind"].isin(kinds), dtype=bool)


def grid_blocks(ctx: Context) -> np.ndarray:
    """launch__grid_size, else the identity column grid_blocks (the product of ncu's Grid Size)."""
    return ctx.once(_grid_blocks)


def _grid_blocks(ctx: Context) -> np.ndarray:
    return quantities.value(ctx, "grid_blocks")


def geometry(ctx: Context) -> pd.DataFrame:
    """How each GEMM's tile covers its problem (tiles.GEOMETRY)."""
    return ctx.once(_geometry)


def _geometry(ctx: Context) -> pd.DataFrame:
    return tiles.geometry(ctx.kernels, names(ctx), grid_blocks(ctx), split_k(ctx))


def split_k(ctx: Context) -> np.ndarray:
    """A GEMM whose name says split-K, or that a split-K reduce follows in the same range."""
    return ctx.once(_split_k)


def _split_k(ctx: Context) -> np.ndarray:
    parsed = names(ctx)
    return np.asarray(parsed["name_split_k"], dtype=bool) | tiles.reduce_follows(ctx.kernels, parsed["kernel_family"])


def shapes(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A GEMM's problem shape M, N, K per row (NaN where no NVTX range or --shapes gave one)."""
    return tuple(metric(ctx.kernels, c) for c in ("shape_m", "shape_n", "shape_k"))
