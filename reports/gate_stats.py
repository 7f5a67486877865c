"""The Mann-Whitney U test that `smlens gate` uses to tell a change from run-to-run noise.

Why Mann-Whitney U and not a bootstrap interval or a t-test: a CI gate sees a handful of runs per
side (3 to 10; each is a full ncu replay), and the figures are neither normal nor continuous (fill,
waves and occupancy are the same on every run; a clock dip makes one run of many slow).
- The U test is distribution-free and rank-based, so one outlier run cannot carry the verdict.
- Its p-value is *exact* at these sizes: the null distribution of the rank sum is counted over all
  ways of splitting the pooled runs (midranks for ties, so tied and identical figures are exact too).
  A bootstrap interval over 3 runs has 10 distinct resamples and no stated error rate.
- It says up front when a decision is impossible: with n1 and n2 runs the smallest one-sided
  p-value is 1 / C(n1 + n2, n1) (3 vs 3: 0.05; 2 vs 2: 0.17), so the gate knows when only the
  threshold can decide and says so instead of pretending.
Beyond `EXACT_LIMIT` pooled runs the normal approximation with tie and continuity correction is used.
asv (airspeed velocity) made the same choice for the same reasons.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Pooled sample sizes up to this get the exact distribution (a table of C(N, n1) splits by rank sum,
# built by dynamic programming in O(N * n1 * N^2); N = 60 takes milliseconds).
EXACT_LIMIT = 60


@dataclass(frozen=True)
class UTest:
    """One Mann-Whitney U test of `current` against `baseline`."""

    u_current: float   # U of the current sample: how many (current, baseline) pairs have current larger (ties 1/2)
    p_value: float     # in the direction asked ("higher", "lower" or "either" = two-sided)
    method: str        # "exact" or "normal"
    min_p_value: float  # the smallest p-value these sample sizes (and ties) could ever give


def midranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..N of `values`, tied values sharing the mean of their ranks."""
    data = np.asarray(values, dtype=float)
    order = np.argsort(data, kind="mergesort")
    ranks = np.empty(len(data), dtype=float)
    sorted_values = data[order]
    start = 0
    while start < len(data):
        end = start
        while end + 1 < len(data) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def _rank_sum_distribution(doubled_ranks: np.ndarray, n_pick: int) -> np.ndarray:
    """counts[s] = number of n_pick-subsets of the pooled runs whose doubled rank sum is s.

    Doubled midranks are integers, so ties need no special case: this is the exact conditional
    null distribution given the ties.
    """
    total = int(doubled_ranks.sum())
    # table[k, s]: subsets of size k of the items seen so far with doubled rank sum s
    table = np.zeros((n_pick + 1, total + 1), dtype=float)
    table[0, 0] = 1.0
    for rank in doubled_ranks.astype(int):
        for k in range(n_pick, 0, -1):
            table[k, rank:] += table[k - 1, :total + 1 - rank]
    return table[n_pick]


def _tail_p(counts: np.ndarray, observed: int, direction: str) -> tuple[float, float]:
    """(p-value, smallest possible p-value) from the exact rank-sum distribution."""
    total = counts.sum()
    support = np.nonzero(counts)[0]
    upper = counts[observed:].sum() / total
    lower = counts[:observed + 1].sum() / total
    min_upper = counts[support[-1]] / total
    min_lower = counts[support[0]] / total
    if direction == "higher":
        return float(upper), float(min_upper)
    if direction == "lower":
        return float(lower), float(min_lower)
    return float(min(1.0, 2 * min(upper, lower))), float(min(1.0, 2 * min(min_upper, min_lower)))


def _normal_p(u: float, n1: int, n2: int, ranks: np.ndarray, direction: str) -> tuple[float, float]:
    """Normal approximation with tie correction and continuity correction."""
    n = n1 + n2
    mean = n1 * n2 / 2.0
    _, tie_counts = np.unique(ranks, return_counts=True)
    tie_term = float(((tie_counts ** 3) - tie_counts).sum()) / (n * (n - 1))
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:  # every value equal: no evidence either way
        return 1.0, 1.0

    def upper(x: float) -> float:
        return 0.5 * math.erfc((x - mean - 0.5) / math.sqrt(2 * variance))

    def lower(x: float) -> float:
        return 0.5 * math.erfc((mean - x - 0.5) / math.sqrt(2 * variance))

    extreme = n1 * n2
    if direction == "higher":
        return min(1.0, upper(u)), min(1.0, upper(extreme))
    if direction == "lower":
        return min(1.0, lower(u)), min(1.0, lower(0))
    return min(1.0, 2 * min(upper(u), lower(u))), min(1.0, 2 * upper(extreme))


def mann_whitney_u(baseline: Sequence[float], current: Sequence[float], direction: str) -> UTest:
    """Is `current` stochastically `direction` ("higher", "lower", "either") than `baseline`?

    Returns U for the current sample and the one-sided (two-sided for "either") p-value.
    """
    if direction not in ("higher", "lower", "either"):
        raise ValueError(f"direction must be higher, lower or either, not {direction!r}")
    base = [float(v) for v in baseline]
    cur = [float(v) for v in current]
    if not base or not cur:
        raise ValueError("both samples need at least one value")
    if any(math.isnan(v) for v in base + cur):
        raise ValueError("samples must not hold NaN")
    n1, n2 = len(cur), len(base)
    ranks = midranks(cur + base)
    rank_sum_current = ranks[:n1].sum()
    u_current = rank_sum_current - n1 * (n1 + 1) / 2.0
    if n1 + n2 <= EXACT_LIMIT:
        method = "exact"
        counts = _rank_sum_distribution(np.rint(2 * ranks).astype(int), n1)
        p_value, min_p = _tail_p(counts, int(round(2 * rank_sum_current)), direction)
    else:
        method = "normal"
        p_value, min_p = _normal_p(float(u_current), n1, n2, ranks, direction)
    return UTest(u_current=float(u_current), p_value=p_value, method=method, min_p_value=min_p)


def smallest_p_value(n_baseline: int, n_current: int, direction: str = "higher") -> float:
    """The smallest p-value any data could give with these sample sizes and no ties."""
    splits = math.comb(n_baseline + n_current, n_current)
    return min(1.0, (2.0 if direction == "either" else 1.0) / splits)
