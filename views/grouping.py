"""Per phase and role figures, time-weighted by `gpu__time_duration.sum`.

How each figure combines is its catalog declaration's (views/catalog.py): a time-weighted mean,
a sum, a ratio of sums, or for a text figure the value that holds the most kernel time (with the
share of the group's time it holds, `<figure>_time_share`; for a bound, each value's share and the
bounding unit's mean over the kernels it bounds: see `prevailing`).
A group's figure is missing (NaN) when any of its kernels lacks it: a mean over the kernels that
happen to have a value would pass a part for the whole (the attention range's fill would be its
reduction kernel's). Sums follow the same rule; ratios (fill, intensity) are ratios of sums, over
the kernels that did some of the denominator's work.

The kernel rows are reduced once to per-(phase, role) sums (`partials`); the per-phase totals are
sums of those, so a million rows are read once. A tensor-parallel run (kernels that name their
`rank`) is grouped per rank as well, and its time shares are of each rank's own time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from views.common import STATUSES, argmax_label, group_codes
from views.vocabulary import KERNEL_ROLES, PHASE_ORDER

ALL = "all"
ROLE_ORDER = (*KERNEL_ROLES, ALL)
KEYS = ["phase", "role"]
RANK = "rank"  # an extra key, only for runs whose kernels name their rank


def keys_of(kernels: pd.DataFrame) -> list[str]:
    """phase and role, and rank when some kernel names one (a single-GPU run has none)."""
    ranked = RANK in kernels.columns and bool(kernels[RANK].notna().any())
    return KEYS + [RANK] if ranked else list(KEYS)


@dataclass
class GroupSpec:
    """The figure columns a group combines, by how."""

    means: list[str] = field(default_factory=list)  # time-weighted
    sums: list[str] = field(default_factory=list)
    ratios: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (numerator, denominator)
    # text: the value holding the most time; name -> a value that counts only where no other occurs
    modes: dict[str, str | None] = field(default_factory=dict)
    # text: name -> (kernel figure, group column): the figure's mean over the kernels holding the
    # group's value (catalog.Figure.mode_value)
    mode_values: dict[str, tuple[str, str]] = field(default_factory=dict)
    # text: every value's share of the group's time, the value held against the kernels with none
    mode_shares: list[str] = field(default_factory=list)
    # text: the largest of several means; name -> ((value, mean column), ...), floor, value column
    argmaxes: dict[str, tuple] = field(default_factory=dict)


def _codes(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    codes = group_codes(frame, keys)
    first = np.unique(codes, return_index=True)[1]
    labels = frame[keys].iloc[first].reset_index(drop=True)
    for key in keys:
        labels[key] = labels[key].astype(object)
    return codes, labels


def _bin(codes: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    # a NaN value makes its bin NaN: the strict rule above, for free
    return np.bincount(codes, weights=values, minlength=size)


def _with(labels: pd.DataFrame, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The group labels and their columns as one frame, built at once (a few hundred columns)."""
    return pd.concat([labels, pd.DataFrame(columns, index=labels.index)], axis=1)


def partials(kernels: pd.DataFrame, spec: GroupSpec, view_ids: list[str], keys: list[str] = KEYS
             ) -> pd.DataFrame:
    """Per (phase, role[, rank]): kernel count, time, Σ time·figure, sums, ratio parts, time per
    text value, status counts."""
    codes, labels = _codes(kernels, keys)
    size = len(labels)
    weight = kernels["time_ns"].to_numpy(dtype=float)
    out = {"kernels": np.bincount(codes, minlength=size), "time_ns": _bin(codes, weight, size)}
    for name in spec.means:
        if name in kernels.columns:
            out[f"{name}__weighted"] = _bin(codes, kernels[name].to_numpy(dtype=float) * weight, size)
    for name in spec.sums:
        if name in kernels.columns:
            out[name] = _bin(codes, kernels[name].to_numpy(dtype=float), size)
    for name, (numerator, denominator) in spec.ratios.items():
        if numerator in kernels.columns and denominator in kernels.columns:
            den = kernels[denominator].to_numpy(dtype=float)
            takes_part = den != 0  # NaN counts: an unknown denominator makes the ratio unknown
            out[f"{name}__num"] = _bin(codes, np.where(takes_part, kernels[numerator].to_numpy(dtype=float), 0.0), size)
            out[f"{name}__den"] = _bin(codes, np.where(takes_part, den, 0.0), size)
    for name in spec.modes:
        if name not in kernels.columns:
            continue
        values = kernels[name].astype("category")
        categories = list(values.cat.categories)
        value_codes = values.cat.codes.to_numpy().astype(np.int64)
        known = value_codes >= 0
        width = len(categories)
        # one pass: time per (group, value)
        times = np.bincount(codes[known] * width + value_codes[known], weights=weight[known],
                            minlength=size * width).reshape(size, width)
        for index, value in enumerate(categories):
            out[f"{name}={value}__time"] = times[:, index]
        source = spec.mode_values.get(name, (None,))[0]
        if source in kernels.columns:  # Σ time x figure per (group, value)
            timed = weight[known] * kernels[source].to_numpy(dtype=float)[known]
            sums = np.bincount(codes[known] * width + value_codes[known], weights=timed,
                               minlength=size * width).reshape(size, width)
            for index, value in enumerate(categories):
                out[f"{name}={value}__value"] = sums[:, index]
    for view in view_ids:
        column = f"validation_{view}"
        if column in kernels.columns:
            status = kernels[column].cat.codes.to_numpy()  # categories are STATUSES
            counts = np.bincount(codes * len(STATUSES) + status, minlength=size * len(STATUSES))
            for index, value in enumerate(STATUSES):
                out[f"{view}_{value}"] = counts[index::len(STATUSES)]
    return _with(labels, out)


def rollup(parts: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Partials summed over fewer keys (NaN stays NaN)."""
    codes, labels = _codes(parts, keys)
    size = len(labels)
    counts = ("kernels", *(c for c in parts.columns if c.endswith(tuple(f"_{s}" for s in STATUSES))))
    out = {}
    names = [c for c in parts.columns if c not in KEYS and c != RANK]
    for column, values in zip(names, _numbers(parts, names).T):
        out[column] = _bin(codes, values, size)
        if column in counts:
            out[column] = out[column].astype(int)
    return _with(labels, out)


def _numbers(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """The columns as one float array, a column each: read at once, where a frame of a few hundred
    columns read a column (or a list of them) at a time cost `smlens views` 20 ms (BENCHMARKS.md)."""
    return frame[columns].to_numpy(dtype=float) if columns else np.empty((len(frame), 0))


def prevailing(times: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Per row of `times` (time per value, one column a value), the column of the value holding the
    most time, or -1 where no value holds any or the time `total` leaves without a value is larger
    (a group mostly of kernels whose bound is unknown has no bound). The one rule for a bound of a
    group of kernels: the verdict's phases over ranks apply it to their groups' times."""
    times = np.atleast_2d(np.asarray(times, dtype=float))
    if times.shape[1] == 0:
        return np.full(len(times), -1)
    best = times.argmax(axis=1)
    top = times[np.arange(len(times)), best]
    unknown = np.asarray(total, dtype=float) - times.sum(axis=1)
    # a relative margin: the values' times summed against the group's time, both in float
    return np.where((top > 0) & (top >= unknown - 1e-9 * np.abs(total)), best, -1)


def finish(parts: pd.DataFrame, total_time: float, modes: dict[str, str | None],
           argmaxes: dict[str, tuple] | None = None, mode_values: dict[str, tuple[str, str]] | None = None,
           mode_shares: list[str] | tuple = ()) -> pd.DataFrame:
    """Partials -> figures: means, shares, ratios, the text value holding the most time (with a
    figure's mean over its kernels, and every value's share), and the text naming the largest of
    several means (with that mean)."""
    names = [c for c in parts.columns if c == "time_ns" or c.endswith(("__weighted", "__num", "__den", "__time",
                                                                        "__value"))]
    at = {name: index for index, name in enumerate(names)}
    matrix = _numbers(parts, names)

    def numbers(*columns: str) -> np.ndarray:
        return matrix[:, [at[c] for c in columns]]

    time_ns = numbers("time_ns")[:, 0]
    positive = np.where(time_ns > 0, time_ns, np.nan)
    out = {"time_share_pct": 100 * time_ns / total_time if total_time and total_time > 0
           else np.full(len(parts), np.nan)}
    for column in names:
        if column.endswith("__weighted"):
            out[column[: -len("__weighted")]] = numbers(column)[:, 0] / positive
        elif column.endswith("__num"):
            name = column[: -len("__num")]
            num, den = numbers(column, f"{name}__den").T
            with np.errstate(divide="ignore", invalid="ignore"):
                out[name] = np.where(den > 0, num / den, np.nan)
    for name, fallback in modes.items():
        value_columns = [c for c in names if c.startswith(f"{name}=") and c.endswith("__time")]
        if not value_columns:
            continue
        times = numbers(*value_columns)
        values = np.array([c[len(name) + 1: -len("__time")] for c in value_columns], dtype=object)
        found = times.max(axis=1) > 0
        ranked = times
        if fallback in values:  # any other value with some time outranks the fallback
            ranked = np.where(values == fallback, times, times + np.where(times > 0, 1e30, 0.0))
        best = ranked.argmax(axis=1)
        if name in mode_shares:
            best = prevailing(times, time_ns)
            found = best >= 0
            best = np.maximum(best, 0)
            for index, value in enumerate(values):
                out[f"{name}_{value}_time_share"] = times[:, index] / positive
        rows = np.arange(len(times))
        out[name] = np.where(found, values[best], None)
        out[f"{name}_time_share"] = np.where(found, times[rows, best] / positive, np.nan)
        source, target = (mode_values or {}).get(name, (None, None))
        sums = [f"{name}={value}__value" for value in values]
        if target and all(c in at for c in sums):
            held = numbers(*sums)[rows, best]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[target] = np.where(found, held / times[rows, best], np.nan)
    for name, (candidates, floor, value_column) in (argmaxes or {}).items():
        columns = [(label, out[column]) for label, column in candidates if column in out]
        if not columns:
            continue
        labels, top = argmax_label([c for _, c in columns], [label for label, _ in columns], floor)
        out[name] = np.array([None if pd.isna(v) else v for v in labels.astype(object)], dtype=object)
        if value_column:
            out[value_column] = top
    return _with(parts[[c for c in parts.columns if "__" not in c]], out)


def order(groups: pd.DataFrame) -> pd.DataFrame:
    """Phases in run order, roles in layer order, anything unknown after."""
    if groups.empty:
        return groups
    # a group is a row: the order is found over the rows' keys in Python, and the frame taken once
    # (four sorts of frames of a hundred columns cost `smlens views` 25 ms: BENCHMARKS.md)
    phase_rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    role_rank = {r: i for i, r in enumerate(ROLE_ORDER)}
    keys = [groups["phase"].astype(object).tolist(), groups["role"].astype(object).tolist()]
    if RANK in groups.columns:
        keys.append(groups[RANK].astype(object).tolist())

    def key(row: int) -> tuple:
        phase, role, *rank = (column[row] for column in keys)
        # as a stable sort of the frame by them, a missing value after every other
        return (phase_rank.get(phase, len(PHASE_ORDER)), role_rank.get(role, len(ROLE_ORDER)),
                *((True, 0) if pd.isna(v) else (False, v) for v in (phase, role, *rank)))

    return groups.take(sorted(range(len(groups)), key=key)).reset_index(drop=True)


def groups_and_phases(kernels: pd.DataFrame, spec: GroupSpec, view_ids: list[str],
                      total_time_ns: float, rank_time_ns: dict | None = None
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per phase and role, per phase with role 'all'), both in display order, and per rank for a
    run with ranks. Time shares are of `total_time_ns`, the whole run's (these kernels may be a
    selection of it), or per rank of `rank_time_ns[rank]`, that rank's whole time."""
    keys = keys_of(kernels)
    if kernels.empty:
        empty = pd.DataFrame(columns=keys + ["kernels", "time_ns", "time_share_pct"])
        return empty, empty.copy()
    parts = partials(kernels, spec, view_ids, keys)
    per_phase = rollup(parts, [k for k in keys if k != "role"])
    per_phase.insert(1, "role", ALL)
    groups = finish(parts, total_time_ns, spec.modes, spec.argmaxes, spec.mode_values, spec.mode_shares)
    phases = finish(per_phase, total_time_ns, spec.modes, spec.argmaxes, spec.mode_values, spec.mode_shares)
    if RANK in keys and rank_time_ns:
        for frame in (groups, phases):
            base = frame[RANK].map(rank_time_ns).to_numpy(dtype=float, na_value=np.nan)
            frame["time_share_pct"] = 100 * frame["time_ns"].to_numpy(dtype=float) / base
    return order(groups), order(phases)
