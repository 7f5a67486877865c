"""The table of quantities (views/quantities.py) on real captures: every figure whose quantity a
capture holds, under whatever name its ncu version, set or export gave it, is shown and names the
metric that gave it; what a capture lacks is said, with the ncu section that carries it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from views import quantities as q
from views.registry import compute_views, support

DATA = Path(__file__).parent / "data"
KEY_FIGURES = ("time_ns", "sm_active_pct", "tensor_pipe_pct", "dram_pct", "bound", "achieved_occupancy_pct",
               "waves", "top_stall", "intensity")


def _read(path: Path, shapes=None):
    from profiler.ingest.capture import read_capture

    return read_capture(path, shapes=shapes).kernels


@pytest.fixture(scope="module")
def a100pcie():
    kernels = _read(DATA / "public" / "a100pcie_cutlass_b2b_gemm.ncu-rep.gz")
    return kernels, compute_views(kernels).kernels


def _known_pct(result) -> float:
    return 100 * float(np.mean([result[f].notna().mean() for f in KEY_FIGURES]))


# the share of key figures known, per capture: before the table (main at fbd0b1c) 33.3, 33.3,
# 66.7, 45.0 and 56.5 %; what is still unknown is not in the files (no SM active cycles in the
# 2021 A100 export, no stall reasons or tensor pipe on a details page, no FLOP counters without
# the roofline sections, no op counters in ncu 2024.1's full set on the A100)
@pytest.mark.parametrize("name, known", [
    ("public/a100_bert_fmha_details.csv.gz", 33.3),
    ("public/rtx5090_cutlass_bf16_gemm_details.csv", 44.4),
    ("public/a100pcie_cutlass_b2b_gemm.ncu-rep.gz", 88.9),
    ("full_details.csv.gz", 56.1),
    ("sections_raw.csv", 79.3),
    ("targeted_raw.csv", 100.0),
])
def test_the_share_of_key_figures_known_on_real_captures(name, known):
    assert _known_pct(compute_views(_read(DATA / name)).kernels) == pytest.approx(known, abs=0.05)


def test_a_full_set_report_gives_dram_and_the_bound_from_speed_of_light(a100pcie):
    """ncu 2024.1's SpeedOfLight names DRAM throughput gpu__dram_throughput: DRAM % and the bound
    come from it (they were n/a on every .ncu-rep made with the standard sections)."""
    _, k = a100pcie
    assert k["dram_pct"].round(2).tolist() == [6.25, 6.44, 3.03]
    assert set(k["source_dram_pct"]) == {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"}
    assert k["bound"].tolist() == ["latency"] * 3  # tensor pipe 15 to 18 % of elapsed, DRAM 3 to 6 %
    assert set(k["source_bound"]) == {
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed; "
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active; "
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed x smsp__cycles_elapsed.avg"}


def test_fp32_work_comes_from_the_roofline_charts_per_cycle_counters(a100pcie):
    """The roofline section gives FP32 instructions per elapsed cycle of a sub-partition: times
    those cycles, the count (1,179,648 FFMA threads in the fused kernel: a whole 2^20 + 2^17)."""
    kernels, k = a100pcie
    from views.context import Context

    ctx = Context(kernels)
    assert q.value(ctx, "ffma_thread_inst").tolist() == [0.0, 0.0, 1179648.0]
    assert str(q.source(ctx, "ffma_thread_inst")[2]) == (
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed x smsp__cycles_elapsed.avg")
    assert k["fp32_pct"].iloc[2] > 0


def test_time_from_cycles_is_named_so_and_checks_no_clock():
    kernels = _read(DATA / "public" / "a100_bert_fmha_details.csv.gz")
    k = compute_views(kernels).kernels
    assert set(k["source_time_ns"]) == {"sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second"}
    assert k["sm_clock_ghz"].isna().all()
    # the launch's shared memory parts come from the details page's labels
    from views.context import Context

    ctx = Context(kernels)
    assert set(q.source(ctx, "shared_mem_config_bytes")) == {"Launch Statistics: Shared Memory Configuration Size"}


def test_support_names_the_missing_quantity_and_its_section():
    kernels = _read(DATA / "public" / "rtx5090_cutlass_bf16_gemm_details.csv")
    table = support(kernels).set_index("view")
    assert table.loc["V1", "status"] == "supported" and table.loc["V3", "status"] == "supported"
    assert table.loc["V6", "status"] == "cannot"
    assert ("top_stall's counters: smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio "
            "or its kind (ncu section WarpStateStats)") in table.loc["V6", "missing"]
    assert table.loc["V2", "status"] == "partial" and table.loc["V2", "figures_shown"] == 2
    assert ("sm_count: launch__sm_count (ncu section LaunchStats)") in table.loc["V2", "missing"]


def test_the_asked_metrics_are_each_quantitys_first_way_and_fallbacks_are_never_asked():
    asked = q.asked_metrics(list(q.QUANTITIES))
    for quantity in q.QUANTITIES.values():
        first = quantity.ways[0]
        if quantity.ask and isinstance(first, str):
            assert first in asked, quantity.name
        for later in quantity.columns[1:]:
            assert later not in asked or any(later == o.ways[0] for o in q.QUANTITIES.values()), later
    # a derivation first: its inputs' first ways
    assert q.asked_metrics(["dram_bytes"]) == ["dram__bytes_read.sum", "dram__bytes_write.sum"]
    assert q.asked_metrics(["sm_clock_hz"]) == []  # read where a capture has it, never asked
