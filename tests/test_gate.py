"""`smlens gate` over real H200 captures (tests/data/PROVENANCE.md): what passes, what is caught,
and what the gate refuses to judge."""
from __future__ import annotations

import pandas as pd
import pytest

from reports.gate import DEFAULT_RULES, Rule, Run, run_gate
from reports.gate_rules import parse_rules
from tests.gate_cases import capture_figures, find


@pytest.fixture(scope="module")
def targeted(targeted_capture) -> pd.DataFrame:
    from views.registry import compute_views

    return compute_views(targeted_capture.kernels).kernels


@pytest.fixture(scope="module")
def sections(sections_capture) -> pd.DataFrame:
    from views.registry import compute_views

    return compute_views(sections_capture.kernels).kernels


@pytest.fixture(scope="module")
def decode12(data_dir) -> pd.DataFrame:
    return capture_figures(data_dir / "decode12_raw.csv")


def test_a_capture_against_itself_passes_and_says_the_threshold_alone_decided(targeted):
    result = run_gate([Run("base", targeted)], [Run("head", targeted)])
    assert result.exit_code == 0 and result.verdict == "pass"
    assert "threshold alone decides" in result.method and "one run per side" in result.method
    assert not result.problems and not result.appeared and not result.disappeared
    assert {c.status for c in result.comparisons} <= {"pass", "n/a", "small"}
    # time per role sums the launches: decode attention = cuDNN SDPA 58,272 ns + lean reduction 25,440 ns
    decode_attention = find(result, "time per role", "decode/attention")
    assert decode_attention.baseline == [83712.0] and decode_attention.change == 0.0
    assert decode_attention.test == "threshold only (1 vs 1 run)"
    # fill compares where the views have it (the GEMMs) on groups of at least 3 % of the GPU time
    fill = {c.group_label for c in result.comparisons if c.rule.figure == "fill" and c.status == "pass"}
    assert fill == {"cold_prefill/gate_up_proj/cublaslt_nvjet", "warm_prefill/gate_up_proj/cublaslt_nvjet",
                    "cold_prefill/down_proj/cublaslt_nvjet", "warm_prefill/down_proj/cublaslt_nvjet",
                    "decode/gate_up_proj/cublaslt_nvjet"}
    assert find(result, "fill", "decode/gate_up_proj/cublaslt_nvjet").baseline_center == pytest.approx(0.5)
    small = find(result, "fill", "decode/qkv_proj/cublaslt_nvjet")
    assert small.status == "small" and small.note == "2.10% of the time, under 3%"


def test_two_separate_ncu_runs_of_one_workload_pass_on_the_figures_both_hold(targeted, sections):
    """targeted_raw and sections_raw are two ncu runs over the same program (different metric sets):
    their run-to-run noise must not fire any rule on the figures both captures carry."""
    shared = [r for r in DEFAULT_RULES
              if r.figure in ("time_ns", "achieved_occupancy_pct", "wave_efficiency")]
    result = run_gate([Run("targeted", targeted)], [Run("sections", sections)], shared)
    assert result.exit_code == 0, result.problems
    compared = [c for c in result.comparisons if c.status == "pass"]
    assert len(compared) >= 50
    assert not [c for c in result.comparisons if c.status in ("regression", "noise")]
    # the two runs really differ, only by less than the thresholds
    assert any(c.change for c in compared if c.rule.figure == "time_ns")


def test_figures_a_capture_lacks_make_the_gate_refuse_and_name_what_is_missing(targeted, sections_capture):
    from views.registry import compute_views

    # without MemoryWorkloadAnalysis's DRAM rate and SpeedOfLight's DRAM throughput (the quantities
    # table derives the bytes from either: rate x time, or DRAM % x the DRAM peak x time): no DRAM bytes
    lacking = ["dram__bytes.sum.per_second", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    sections = compute_views(sections_capture.kernels.drop(columns=lacking)).kernels
    result = run_gate([Run("targeted", targeted)], [Run("sections", sections)])
    assert result.exit_code == 2 and result.verdict == "could not judge"
    text = "\n".join(result.problems)
    assert "fill: fill is n/a on the current side only" in text
    assert "dram_bytes: dram_bytes is n/a on the current side only (V7 needs dram__bytes_read.sum" in text
    assert "in 5 groups (cold_prefill/down_proj/cublaslt_nvjet, " in text  # the GEMMs over 3 % of the time
    assert "in 27 groups (cold_prefill/attention/cudnn_sdpa, " in text  # every group over 0.5 %
    # one line per cause, not one per group
    assert len(result.problems) < 10
    refused = [c for c in result.comparisons if c.status == "cannot judge"]
    assert {c.rule.figure for c in refused} == {"fill", "useful_tensor_pct", "dram_bytes"}


def test_a_validation_failing_on_one_side_blocks_the_figures_of_its_view(targeted, decode12):
    """The 5.2 us decode elementwise kernel of the targeted capture: its stall reasons add to 23.42
    warps per issue where ncu counts 26.31 (V6 fails). Against the Llama-8B decode capture, where
    V6 holds, a stall rule over that group cannot judge; other groups are compared."""
    rules = parse_rules({"defaults": {"min_time_share_pct": 0},
                         "rule": [{"figure": "top_stall_share", "worse": "higher"}]})
    baseline = targeted[targeted["phase"] == "decode"]
    result = run_gate([Run("small", baseline)], [Run("llama8b", decode12)], rules)
    assert result.exit_code == 2 and result.verdict == "could not judge"
    assert result.problems == ["top_stall_share: validation V6 failed on baseline run small in 1 group "
                               "(decode/elementwise/aten)"]
    blocked = find(result, "top_stall_share", "decode/elementwise/aten")
    assert blocked.status == "cannot judge" and "23.42" in blocked.note
    assert find(result, "top_stall_share", "decode/qkv_proj/cublaslt_nvjet").status in ("pass", "regression", "improved")
    warned = run_gate([Run("small", baseline)], [Run("llama8b", decode12)],
                      parse_rules({"defaults": {"min_time_share_pct": 0, "on_validation_fail": "warn"},
                                   "rule": [{"figure": "top_stall_share", "worse": "higher"}]}))
    # compared anyway: the 8B layer's elementwise kernels stall more on their top reason
    assert not warned.problems and warned.exit_code == 1
    assert find(warned, "top_stall_share", "decode/elementwise/aten").status == "regression"
    assert warned.warnings == ["top_stall_share: decode/elementwise/aten: validation V6 fails on the "
                               "baseline side, compared anyway (1 of 2 runs; stall reasons add to 23.42 "
                               "warps per issue, ncu counts 26.31 (-11.0 %))"]


def test_a_validation_failing_on_both_sides_is_compared_like_for_like_unless_strict(targeted):
    rule = {"figure": "top_stall_share", "worse": "higher", "min_time_share_pct": 0}
    result = run_gate([Run("base", targeted)], [Run("head", targeted)], parse_rules({"rule": [rule]}))
    assert result.exit_code == 0
    assert find(result, "top_stall_share", "decode/elementwise/aten").status == "pass"
    assert result.warnings == ["top_stall_share: decode/elementwise/aten: validation V6 fails on both "
                               "sides, compared like for like (2 of 2 runs; stall reasons add to 23.42 "
                               "warps per issue, ncu counts 26.31 (-11.0 %))"]
    strict = run_gate([Run("base", targeted)], [Run("head", targeted)],
                      parse_rules({"rule": [{**rule, "on_validation_fail": "strict"}]}))
    assert strict.exit_code == 2
    assert "validation V6 failed on baseline run base in 1 group (decode/elementwise/aten)" in strict.problems[0]


def test_another_model_is_caught_and_its_kernel_swaps_are_reported(targeted, decode12):
    """Baseline: the 2-layer hidden-2048 decode; current: one Llama-3.1-8B-shaped decode layer.
    cuBLASLt and cuDNN pick other kernels; the gate names them and still compares the rest."""
    baseline = targeted[targeted["phase"] == "decode"]
    result = run_gate([Run("small", baseline)], [Run("llama8b", decode12)])
    assert result.exit_code == 1 and result.verdict == "regression"
    regressions = {(c.rule.label, c.group_label) for c in result.by_status("regression")}
    # the 8B decode gate_up runs 224 tiles on a persistent grid of 132 blocks: its second round is
    # 70 % full (wave efficiency 224 / 264); the small model's fits in one wave
    assert ("wave_efficiency", "decode/gate_up_proj/cublaslt_nvjet") in regressions
    gate_up = find(result, "wave_efficiency", "decode/gate_up_proj/cublaslt_nvjet")
    assert gate_up.baseline_center == 1.0 and gate_up.current_center == pytest.approx(224 / 264)
    # decode attention runs below one wave on both: no tail to compare (its grid's reach is coverage)
    assert find(result, "wave_efficiency", "decode/attention/cudnn_sdpa").status != "regression"
    appeared = {(k["role"], k["kernel_name"]) for k in result.appeared}
    assert ("o_proj", "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT") in appeared
    disappeared = {(k["role"], k["kernel_name"].split("<")[0]) for k in result.disappeared}
    assert ("attention", "void cudnn::lean_reduction_kernel") in disappeared
    swapped = find(result, "time per kernel family", "decode/o_proj/splitk_reduce")
    assert swapped.status == "appeared" and swapped.current == [pytest.approx(3872.0)]


def test_a_side_without_runs_or_kernels_cannot_be_judged(targeted):
    assert run_gate([], [Run("head", targeted)]).problems == ["no baseline run given"]
    empty = run_gate([Run("base", targeted.iloc[0:0])], [Run("head", targeted)])
    assert empty.exit_code == 2 and empty.problems == ["baseline run base has no kernels"]
    no_family = run_gate([Run("base", targeted.drop(columns=["kernel_family"]))],
                         [Run("head", targeted)], [DEFAULT_RULES[0]])
    assert no_family.exit_code == 2
    assert "baseline run base has no kernel_family column to group by" in no_family.problems[0]


def test_a_written_rule_whose_figure_exists_nowhere_is_named(targeted):
    result = run_gate([Run("b", targeted)], [Run("c", targeted)],
                      parse_rules({"rule": [{"figure": "tensor_pipe_percent", "worse": "lower"}]}))
    assert result.exit_code == 2
    assert "no run has a tensor_pipe_percent column" in result.problems[0]


def test_a_rule_on_a_text_figure_flags_a_changed_choice(targeted, decode12):
    rules = [Rule("tile", "changed", by=("phase", "role"), min_time_share_pct=0, name="tile")]
    baseline = targeted[targeted["phase"] == "decode"]
    result = run_gate([Run("small", baseline)], [Run("llama8b", decode12)], rules)
    # the cuDNN decode attention tile went from 16x128x128 to 64x64x128; the GEMM tiles stayed
    assert {c.group_label for c in result.by_status("regression")} == {"decode/attention"}
    attention = find(result, "tile", "decode/attention")
    assert (attention.baseline_center, attention.current_center) == ("16x128x128", "64x64x128")
    assert find(result, "tile", "decode/qkv_proj").current_center == "64x8x64"


def test_a_small_group_that_grew_is_judged_not_skipped(targeted):
    """cold_prefill/o_proj/aten is 0.59 % of the capture's time: under a 1 % floor it is not gated,
    unless the current run's time for it crosses the floor."""
    rule = Rule("time_ns", "higher", relative_pct=10, min_effect=2000, min_time_share_pct=1, name="time")
    grown = targeted.copy()
    residual = (grown["phase"] == "cold_prefill") & (grown["role"] == "o_proj") & (grown["kernel_family"] == "aten")
    grown.loc[residual, "time_ns"] *= 5
    same = run_gate([Run("b", targeted)], [Run("c", targeted)], [rule])
    assert find(same, "time", "cold_prefill/o_proj/aten").status == "small"
    result = run_gate([Run("b", targeted)], [Run("c", grown)], [rule])
    slower = find(result, "time", "cold_prefill/o_proj/aten")
    assert slower.status == "regression" and slower.baseline_center == 15648.0
    assert slower.current_center == 5 * 15648.0 and result.exit_code == 1
