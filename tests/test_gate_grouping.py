"""The gate combines a group's kernels by the views' own rule (views/grouping.py by way of
registry.group_figures) and each figure as the catalog declares it, on the committed H200 runs:
the same figure for the same group as the views' tables, a ratio of sums, n/a for a figure one
kernel lacks, the top stall as the largest of the group's stall means."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reports.gate import Rule, Run, run_gate
from tests.conftest import DATA
from tests.gate_cases import capture_figures, find
from views import registry
from views.registry import compute_views

RUNS = DATA / "h200_runs"
FIGURES = ("time_ns", "useful_tensor_pct", "fill", "achieved_occupancy_pct", "wave_efficiency", "dram_bytes")


def _same(a, b) -> bool:
    return (a is None or (isinstance(a, float) and math.isnan(a))) and (b is None or math.isnan(b)) \
        or a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("capture", ["gate-b1-r1", "llama-3.1-8b-b8-p512", "graph-decode-llama-3.1-8b-b4"])
def test_the_gate_groups_a_phase_and_role_as_the_views_table_does(capture):
    """One rule for both: the gate's per-run figure of a phase and role is the views' group figure."""
    from profiler.ingest.capture import read_capture

    views = compute_views(read_capture(RUNS / f"{capture}.csv.gz").kernels)
    rules = [Rule(f, by=("phase", "role"), min_time_share_pct=0, name=f) for f in FIGURES]
    result = run_gate([Run("b", views.kernels)], [Run("c", views.kernels)], rules)
    compared = 0
    for row in views.groups.itertuples():
        for figure in FIGURES:
            gated = find(result, figure, f"{row.phase}/{row.role}").baseline[0]
            assert _same(gated, float(getattr(row, figure))), (capture, row.phase, row.role, figure)
            compared += not math.isnan(float(getattr(row, figure)))
    assert compared >= 3 * len(views.groups)  # real numbers, not n/a against n/a


def test_fill_is_a_ratio_of_sums_not_a_mean_of_ratios():
    """Per phase, decode mixes GEMM tiles a quarter full (batch 1 in 8-row tiles: 0.125) with the
    attention kernel's 0.042: the phase's fill is its useful FLOPs over its tensor FLOPs, as the
    catalog declares (ratio_of), which a time-weighted mean of the kernels' fills is not."""
    kernels = capture_figures(RUNS / "gate-b1-r1.csv.gz")
    result = run_gate([Run("b", kernels)], [Run("c", kernels)],
                      [Rule("fill", by=("phase",), min_time_share_pct=0, name="fill")])
    gated = find(result, "fill", "decode").baseline[0]
    numerator, denominator = registry.figures()["fill"].ratio_of
    decode = kernels[(kernels["phase"] == "decode") & (kernels[denominator].fillna(1) != 0)]
    assert gated == pytest.approx(decode[numerator].sum() / decode[denominator].sum())
    has_fill = decode[decode["fill"].notna()]
    weighted_mean = np.average(has_fill["fill"], weights=has_fill["time_ns"])
    assert abs(gated - weighted_mean) > 0.002  # the rule the gate had before
    assert sorted(set(has_fill["fill"].round(4))) == [0.0423, 0.125]


def test_a_group_one_kernel_of_which_lacks_the_figure_is_na_not_the_mean_of_the_rest():
    """The CUDA-graph capture's decode attention: 3 cuDNN kernels, only the first with a shape, so
    useful tensor work is known for one of three. The gate took that one for the group (0.12 %);
    by the views' rule the group's figure is n/a on both sides, so nothing is judged on it."""
    kernels = capture_figures(RUNS / "graph-decode-llama-3.1-8b-b4.csv.gz")
    group = kernels[(kernels["phase"] == "decode") & (kernels["role"] == "attention")]
    assert group["useful_tensor_pct"].notna().tolist() == [True, False, False]
    result = run_gate([Run("b", kernels)], [Run("c", kernels)],
                      [Rule("useful_tensor_pct", min_time_share_pct=0, name="useful")])
    attention = find(result, "useful", "decode/attention/cudnn_sdpa")
    assert attention.status == "n/a" and math.isnan(attention.baseline[0])


def test_a_top_stall_is_the_largest_of_the_groups_stall_means():
    """The graph capture's 4 split-K reduce kernels: 2 stall mostly on long scoreboard and hold the
    more time, 2 on no instruction; over the group no instruction is the larger share (23.2 % of
    the stall samples against 21.5 %). The gate named the kernels' most-time value; the catalog
    declares the top stall as the largest of the group's means (ARGMAX), as the views' tables show."""
    kernels = capture_figures(RUNS / "graph-decode-llama-3.1-8b-b4.csv.gz")
    reduce = kernels[(kernels["phase"] == "decode") & (kernels["role"] == "gemm")
                     & (kernels["kernel_family"] == "splitk_reduce")]
    means = {label: np.average(reduce[column], weights=reduce["time_ns"])
             for label, column in registry.figures()["top_stall"].argmax_of}
    assert max(means, key=means.get) == "no_instruction"
    assert sorted(reduce["top_stall"]) == ["long_scoreboard", "long_scoreboard", "no_instruction", "no_instruction"]
    result = run_gate([Run("b", kernels)], [Run("c", kernels)],
                      [Rule("top_stall", min_time_share_pct=0, name="stall")])
    assert find(result, "stall", "decode/gemm/splitk_reduce").baseline == ["no_instruction"]


def test_an_impossible_occupancy_is_not_averaged_into_its_group():
    """3 of the 12 warm-prefill elementwise kernels of the batch-1 Llama-3.1-8B run report an
    achieved occupancy of 109.5 %: the gate averaged them in (88.1 %); now the group's figure is
    n/a, as in the views' tables, and the failed V4 validation says why the gate cannot judge."""
    base = capture_figures(RUNS / "llama-3.1-8b-b1-p512.csv.gz")
    current = capture_figures(RUNS / "llama-3.1-8b-b8-p512.csv.gz")
    result = run_gate([Run("b1", base)], [Run("b8", current)],
                      [Rule("achieved_occupancy_pct", min_time_share_pct=3, name="occupancy")])
    group = find(result, "occupancy", "warm_prefill/elementwise/aten")
    assert group.status == "cannot judge" and math.isnan(group.baseline[0])
    assert group.current[0] == pytest.approx(88.275, abs=1e-3)
    assert "validation V4 failed on baseline run b1" in group.note and "109.52 %" in group.note
    assert result.exit_code == 2
