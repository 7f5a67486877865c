"""The gate over captures `smlens profile` made on the H200 (tests/data/h200_runs/PROVENANCE.md):
three separate ncu runs of one workload (Llama-3.1-8B shapes, 1 layer, decode step 1, batch 1),
one at batch 4, and the 4-layer Llama-3.1-8B model at batch 1 and 8.

What must hold: the repeated runs pass the default rules in every split and no rule fires on their
noise; the batch change is caught with exit 1 and the figures that moved are named; a validation
that fails on one side only makes the gate refuse (exit 2) and names it."""
from __future__ import annotations

import itertools

import pandas as pd
import pytest

from reports.gate import Run, run_gate
from tests.conftest import DATA
from tests.gate_cases import capture_figures, find
from views.vocabulary import GEMM_ROLES

RUNS = DATA / "h200_runs"
REPEATS = ("gate-b1-r1", "gate-b1-r2", "gate-b1-r3")
OPEN = {"regression", "noise", "improved", "cannot judge"}  # anything but pass, n/a, small


def figures(name: str) -> pd.DataFrame:
    return capture_figures(RUNS / f"{name}.csv.gz")


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    names = REPEATS + ("gate-b4-r1",)
    return {name: Run(name, figures(name)) for name in names}


def splits():
    """Every way to gate one repeat against one other, or against the two others."""
    for current in REPEATS:
        others = [r for r in REPEATS if r != current]
        yield others, [current]
        for other in others:
            yield [other], [current]


@pytest.mark.parametrize("baseline, current", list(splits()), ids=lambda names: "+".join(names))
def test_repeated_captures_pass_the_default_rules(runs, baseline, current):
    result = run_gate([runs[n] for n in baseline], [runs[n] for n in current])
    assert result.exit_code == 0, result.problems
    assert not [(c.rule.label, c.group_label, c.status) for c in result.comparisons if c.status in OPEN]
    assert not result.appeared and not result.disappeared
    # every rule found something to compare in each of these runs
    compared = {c.rule.label for c in result.comparisons if c.status == "pass"}
    assert compared == {"time per kernel family", "time per role", "useful_tensor_pct", "fill",
                        "achieved_occupancy_pct", "wave_efficiency", "dram_bytes"}
    assert "threshold alone decides" in result.method
    # the o_proj GEMM's occupancy check fails in every run alike: compared like for like, said so
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("achieved_occupancy_pct: decode/o_proj/cublaslt_nvjet: "
                                         "validation V4 fails on both sides, compared like for like "
                                         f"({len(baseline) + len(current)} of {len(baseline) + len(current)} "
                                         "runs; achieved 2")
    assert result.warnings[0].endswith(" % above theoretical 18.75 %)")


def test_three_repeats_against_themselves_go_through_the_mann_whitney_test(runs):
    repeats = [runs[n] for n in REPEATS]
    result = run_gate(repeats, repeats)
    assert result.exit_code == 0
    assert "Mann-Whitney U test" in result.method and "3 baseline vs 3 current runs" in result.method
    tested = [c for c in result.comparisons if c.status == "pass"]
    assert tested and all(c.test.startswith("Mann-Whitney U exact") for c in tested)
    assert min(c.p_value for c in tested) >= 0.5
    time = find(result, "time per role", "decode/gate_up_proj")
    assert len(time.baseline) == 3 and time.baseline == time.current


def test_batch_4_against_three_batch_1_runs_is_caught_and_named(runs):
    result = run_gate([runs[n] for n in REPEATS], [runs["gate-b4-r1"]])
    assert result.exit_code == 1 and result.verdict == "regression"
    assert "3 baseline vs 1 current run: the threshold alone decides" in result.method
    regressions = {(c.rule.label, c.group_label) for c in result.by_status("regression")}
    assert regressions == {("time per kernel family", "decode/elementwise/aten"),
                           ("time per role", "decode/elementwise"),
                           ("dram_bytes", "decode/attention/cudnn_sdpa")}
    # four sequences fill 4 of the 8 token rows of the GEMM tiles instead of 1
    for role in GEMM_ROLES:
        fill = find(result, "fill", f"decode/{role}/cublaslt_nvjet")
        assert fill.status == "improved"
        assert (fill.baseline_center, fill.current_center) == (0.125, 0.5)
    kv_reads = find(result, "dram_bytes", "decode/attention/cudnn_sdpa")
    assert kv_reads.baseline_center < 30e3 and kv_reads.current_center > 1e6
    assert [k["kernel_name"].split("<")[0] for k in result.appeared] == ["void at::elementwise_kernel"]


def test_batch_1_against_batch_4_names_the_fill_it_lost(runs):
    result = run_gate([runs["gate-b4-r1"]], [runs[n] for n in REPEATS])
    assert result.exit_code == 1
    lost = {c.group_label for c in result.by_status("regression") if c.rule.figure == "fill"}
    assert lost == {f"decode/{role}/cublaslt_nvjet" for role in GEMM_ROLES}
    # below one wave on both sides: no tail, wave efficiency 1 (batch 1's smaller attention grid
    # reaches fewer SMs, which is coverage, not a tail)
    attention = find(result, "wave_efficiency", "decode/attention/cudnn_sdpa")
    assert attention.status == "pass" and attention.baseline_center == attention.current_center == 1.0


def test_a_batch_8_model_run_with_a_one_sided_validation_failure_is_refused_and_named():
    """Llama-3.1-8B, 4 layers, batch 1 against batch 8: prefill time grows several-fold, but the
    batch-1 run's warm-prefill elementwise kernels fail V4 where the batch-8 run's pass: the gate
    will not convict on an occupancy it cannot trust, and says which."""
    result = run_gate([Run("b1", figures("llama-3.1-8b-b1-p512"))],
                      [Run("b8", figures("llama-3.1-8b-b8-p512"))])
    assert result.exit_code == 2 and result.verdict == "could not judge"
    assert result.problems == ["achieved_occupancy_pct: validation V4 failed on baseline run b1 in 1 "
                               "group (warm_prefill/elementwise/aten)"]
    # everything else was still compared, and the regressions are reported beside the refusal
    gate_up = find(result, "time per role", "warm_prefill/gate_up_proj")
    assert gate_up.status == "regression" and gate_up.current_center > 5 * gate_up.baseline_center
    swapped = {(k["phase"], k["role"]) for k in result.appeared}
    assert {(p, r) for p, r in itertools.product(("cold_prefill", "warm_prefill"),
                                                 GEMM_ROLES)} <= swapped
