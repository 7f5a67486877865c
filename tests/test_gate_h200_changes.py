"""The gate on two real changes captured on the H200, with repeats where they were made:

- a deterministic FP32-FMA GEMM in place of cuBLAS bf16 (tests/data/h200_det: `smlens profile
  --workload det-gemm`, one run each): caught (exit 1) and named per phase and role;
- batch 4 against batch 1 with three separate ncu runs on each side (tests/data/h200_runs:
  gate-b1-r1..r3, gate-b4-r1..r3): caught through the exact Mann-Whitney U test, not the threshold
  alone, and the batch-4 repeats pass against each other."""
from __future__ import annotations

import pytest

from reports.gate import Run, run_gate
from tests.conftest import DATA
from tests.gate_cases import capture_figures
from views.vocabulary import GEMM_ROLES


def figures(path) -> Run:
    return Run(path.name.split(".")[0], capture_figures(path))


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    found = {}
    for impl in ("det", "cublas_bf16"):
        run = figures(DATA / "h200_det" / f"det-gemm-{impl}.csv.gz")
        found[impl] = run
    for batch in (1, 4):
        for repeat in (1, 2, 3):
            run = figures(DATA / "h200_runs" / f"gate-b{batch}-r{repeat}.csv.gz")
            found[run.label] = run
    return found


def test_det_in_place_of_cublas_is_caught_and_named(runs):
    result = run_gate([runs["cublas_bf16"]], [runs["det"]])
    assert result.exit_code == 1 and result.verdict == "regression"
    assert not result.problems  # every validation the rules lean on holds on both sides
    assert "1 baseline vs 1 current run: the threshold alone decides" in result.method
    slower = {c.group_label: c for c in result.by_status("regression") if c.rule.label == "time per role"}
    assert set(slower) == {f"{p}/{r}" for p in ("decode", "warm_prefill") for r in GEMM_ROLES}
    # prefill: FP32 FMA against bf16 tensor cores, over 14x the time in every projection
    for role in GEMM_ROLES:
        comp = slower[f"warm_prefill/{role}"]
        assert comp.current_center > 14 * comp.baseline_center
    # decode (M = 1 and 16 together): det's M = 16 is FMA-bound where cuBLAS stays DRAM-bound
    for role in GEMM_ROLES:
        comp = slower[f"decode/{role}"]
        assert 1.1 * comp.baseline_center < comp.current_center < 2 * comp.baseline_center
    # the kernel swap is reported, not crashed on: det's kernels appear, cuBLAS's nvjet ones go
    appeared = {k["kernel_name"].split("<")[0] for k in result.appeared}
    assert {"det_gemv_fma_kernel", "det_fold_splitk_reduce_kernel", "det_gemm_fma_kernel"} <= appeared
    gone = {k["kernel_name"].split("<")[0].split("_")[0] for k in result.disappeared}
    assert gone == {"nvjet", "void at::vectorized", "void cublasLt::splitKreduce"}


def test_cublas_in_place_of_det_is_no_time_regression(runs):
    result = run_gate([runs["det"]], [runs["cublas_bf16"]])
    times = {c.group_label: c.status for c in result.comparisons if c.rule.label == "time per role"}
    assert len(times) == 8 and "regression" not in times.values()
    assert {times[f"warm_prefill/{r}"] for r in GEMM_ROLES} == {"improved"}


@pytest.mark.parametrize("baseline, current", [(["gate-b4-r1"], ["gate-b4-r2"]),
                                               (["gate-b4-r2"], ["gate-b4-r3"]),
                                               (["gate-b4-r1", "gate-b4-r2"], ["gate-b4-r3"])])
def test_the_batch_4_repeats_pass_against_each_other(runs, baseline, current):
    result = run_gate([runs[n] for n in baseline], [runs[n] for n in current])
    assert result.exit_code == 0, result.problems
    assert not [c for c in result.comparisons if c.status in ("regression", "improved", "noise")]
    assert not result.appeared and not result.disappeared


def test_batch_4_against_batch_1_three_runs_each_goes_through_the_mann_whitney_test(runs):
    result = run_gate([runs[f"gate-b1-r{i}"] for i in (1, 2, 3)],
                      [runs[f"gate-b4-r{i}"] for i in (1, 2, 3)])
    assert result.exit_code == 1 and result.verdict == "regression"
    assert "3 baseline vs 3 current runs" in result.method and "Mann-Whitney U test" in result.method
    regressions = result.by_status("regression")
    assert {(c.rule.label, c.group_label) for c in regressions} == {
        ("time per kernel family", "decode/elementwise/aten"),
        ("time per role", "decode/elementwise"),
        ("dram_bytes", "decode/attention/cudnn_sdpa")}
    # three runs against three: every run of one side beyond every run of the other is the
    # smallest one-sided exact p there is, 1 / C(6, 3) = 0.05, which alpha 0.05 admits
    for comp in regressions:
        assert comp.test.startswith("Mann-Whitney U exact") and comp.p_value == pytest.approx(0.05)
        assert len(comp.baseline) == 3 and len(comp.current) == 3
        assert min(comp.current) > max(comp.baseline)
    # the GEMM tiles: 4 of 8 rows useful instead of 1, in every run
    fills = {c.group_label: c for c in result.comparisons if c.rule.figure == "fill"}
    for role in GEMM_ROLES:
        fill = fills[f"decode/{role}/cublaslt_nvjet"]
        assert fill.status == "improved" and fill.baseline == [0.125] * 3 and fill.current == [0.5] * 3
