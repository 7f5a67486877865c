"""The gate's Mann-Whitney U test against a brute-force count of every split of the pooled runs."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from reports import gate_stats
from reports.gate_stats import mann_whitney_u, midranks, smallest_p_value


def brute_force_p(baseline, current, direction):
    """P-value by listing every way to pick len(current) of the pooled values: independent of the
    dynamic program in gate_stats (midranks recomputed here from scratch)."""
    pooled = list(current) + list(baseline)
    order = sorted(pooled)
    rank = {v: (order.index(v) + 1 + len(order) - order[::-1].index(v)) / 2 for v in set(pooled)}
    observed = sum(rank[v] for v in current)
    sums = [sum(rank[pooled[i]] for i in pick)
            for pick in itertools.combinations(range(len(pooled)), len(current))]
    upper = sum(s >= observed - 1e-9 for s in sums) / len(sums)
    lower = sum(s <= observed + 1e-9 for s in sums) / len(sums)
    return {"higher": upper, "lower": lower, "either": min(1.0, 2 * min(upper, lower))}[direction]


def test_complete_separation_of_three_runs_each_is_one_in_twenty():
    result = mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "higher")
    assert result.u_current == 9.0
    assert result.p_value == pytest.approx(1 / 20)
    assert result.method == "exact"
    assert mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "either").p_value == pytest.approx(0.1)
    # the other direction: nothing suggests current is lower
    assert mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "lower").p_value == pytest.approx(1.0)


def test_one_overlap_doubles_the_p_value():
    # U = 8 of 9: two of the 20 splits are as extreme
    result = mann_whitney_u([1.0, 2.0, 4.0], [3.0, 5.0, 6.0], "higher")
    assert result.u_current == 8.0
    assert result.p_value == pytest.approx(2 / 20)


def test_identical_samples_give_no_evidence():
    result = mann_whitney_u([7.0, 7.0, 7.0], [7.0, 7.0, 7.0], "higher")
    assert result.p_value == 1.0 and result.min_p_value == 1.0


@pytest.mark.parametrize("seed", range(12))
def test_exact_p_matches_brute_force_with_and_without_ties(seed):
    rng = np.random.default_rng(seed)
    n_base, n_cur = rng.integers(1, 7, size=2)
    digits = int(seed % 2)  # odd seeds round to integers: many ties
    base = list(np.round(rng.normal(0, 1, n_base), digits))
    cur = list(np.round(rng.normal(0.8, 1, n_cur), digits))
    for direction in ("higher", "lower", "either"):
        assert mann_whitney_u(base, cur, direction).p_value == \
            pytest.approx(brute_force_p(base, cur, direction), abs=1e-12)


def test_normal_approximation_agrees_with_exact_at_sixty_runs(monkeypatch):
    rng = np.random.default_rng(7)
    base = list(np.round(rng.normal(0, 1, 30), 1))
    cur = list(np.round(rng.normal(0.4, 1, 30), 1))
    exact = mann_whitney_u(base, cur, "higher")
    monkeypatch.setattr(gate_stats, "EXACT_LIMIT", 10)
    normal = mann_whitney_u(base, cur, "higher")
    assert exact.method == "exact" and normal.method == "normal"
    assert normal.u_current == exact.u_current
    assert normal.p_value == pytest.approx(exact.p_value, abs=0.005)
    assert exact.p_value < 0.05


def test_midranks_share_tied_ranks():
    assert list(midranks([10.0, 20.0, 20.0, 5.0])) == [2.0, 3.5, 3.5, 1.0]


def test_smallest_p_value_says_when_a_test_cannot_decide():
    assert smallest_p_value(1, 1) == 0.5
    assert smallest_p_value(2, 2) == pytest.approx(1 / 6)
    assert smallest_p_value(3, 3) == pytest.approx(0.05)
    assert smallest_p_value(3, 3, "either") == pytest.approx(0.1)
    assert smallest_p_value(5, 5) == pytest.approx(1 / math.comb(10, 5))


def test_bad_samples_are_refused():
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0], "higher")
    with pytest.raises(ValueError):
        mann_whitney_u([1.0, float("nan")], [1.0], "higher")
    with pytest.raises(ValueError):
        mann_whitney_u([1.0], [1.0], "worse")
