"""Validations that can fail, the gap's one basis, physical bounds, tails of persistent kernels and
the group's top stall, on the real H200 captures (tests/data/PROVENANCE.md).

Each view gets a deliberately wrong counter (scaled, swapped, in another unit) that must turn its
validation to `fail`: a check that passes whatever the counters say guards nothing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.formats.views_json import views_json
from tests.captures import kernels_of, views_of
from views.registry import compute_views

DATA = Path(__file__).parent / "data"
RUNS = sorted((DATA / "h200_runs").glob("*.csv.gz"))
# the Hugging Face models' and the FP8 decoder's captures (their PROVENANCE.md)
OTHER_RUNS = sorted((DATA / "h200_hf").glob("*.csv.gz")) + sorted((DATA / "h200_fp8").glob("*.csv.gz"))


@pytest.fixture(scope="module")
def targeted(targeted_capture):
    return compute_views(targeted_capture.kernels)


def _statuses(kernels: pd.DataFrame, view: str, mask=None) -> set:
    result = compute_views(kernels, [view]).kernels
    rows = result if mask is None else result[np.asarray(mask)]
    return set(rows[f"validation_{view}"])


def _decode(kernels: pd.DataFrame, role: str, kind: str = "gemm") -> np.ndarray:
    return ((kernels["phase"] == "decode") & (kernels["role"] == role) & (kernels["kind"] == kind)).to_numpy()


# --- a wrong counter fails each view ----------------------------------------------------------------


def test_v1_fails_elapsed_cycles_summed_over_the_sms(targeted_capture):
    kernels = targeted_capture.kernels.assign(**{"sm__cycles_elapsed.avg":
                                                 targeted_capture.kernels["sm__cycles_elapsed.avg"] * 132})
    assert _statuses(kernels, "V1") == {"fail"}


def test_v2_fails_the_active_and_elapsed_pipe_shares_swapped(targeted_capture):
    active = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    elapsed = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
    kernels = targeted_capture.kernels.rename(columns={active: elapsed, elapsed: active})
    before = compute_views(targeted_capture.kernels, ["V2"]).kernels
    # the GEMMs whose SMs idled more than 5 % of the time (where the two shares differ)
    gmma = ((before["mma_path"] == "gmma") & (before["sm_active_pct"] < 95)).to_numpy()
    assert gmma.sum() == 48 and _statuses(kernels, "V2", gmma) == {"fail"}


def test_v2_holds_small_shares_to_the_same_3_percent(targeted):
    """No absolute slack: a kernel whose pipe share is too coarse to check is n/a, not a pass."""
    k = targeted.kernels
    coarse = k[k["tensor_pipe_pct"] < 0.17]
    assert set(coarse["validation_V2"]) == {"pass", "n/a"}
    # the passes among them are kernels on which both counters read 0: no MMA, no other work
    assert (coarse.loc[coarse["validation_V2"] == "pass", "tensor_pipe_pct"] == 0).all()



def test_v2_fails_a_small_share_5_percent_off(targeted_capture):
    """Kernels with no MMA ops whose pipe is 0.18 to 0.24 % busy (HFMA2.MMA): 5 % fewer non-MMA
    instructions must fail, as on a busy GEMM; a slack of 0.006 points would pass 8 of these 10."""
    before = compute_views(targeted_capture.kernels, ["V2"]).kernels
    small = ((before["tensor_ops"] == 0) & before["tensor_pipe_pct"].between(0.17, 0.25)).to_numpy()
    assert small.sum() == 10 and set(before.loc[small, "validation_V2"]) == {"pass"}
    kernels = targeted_capture.kernels.copy()
    kernels.loc[small, "sm__inst_executed_pipe_tensor_op_hmma.sum"] *= 0.95
    result = compute_views(kernels, ["V2"]).kernels[small]
    assert set(result["validation_V2"]) == {"fail"}
    assert result["validation_detail_V2"].str.contains("no MMA ops, yet the tensor pipe is").all()

def test_v3_fails_a_shape_that_is_not_the_one_that_ran(targeted_capture):
    kernels = targeted_capture.kernels.copy()
    qkv = _decode(kernels, "qkv_proj")
    kernels.loc[qkv, "shape_k"] = 2 * 2048  # twice the K that ran: twice the useful FLOPs
    result = compute_views(kernels, ["V3"]).kernels[qkv]
    assert set(result["validation_V3"]) == {"fail"}
    # and the fill of 1.0 it implies on an 8-wide tile holding 4 tokens is flagged as impossible
    assert result["fill"].to_numpy() == pytest.approx(1.0)
    assert result["validation_detail_V3"].str.contains("useful MMA share 1.000 measured, 0.500 predicted").all()


def test_v4_fails_registers_per_thread_in_another_unit(targeted_capture):
    """Registers per warp read as registers per thread: the recomputed blocks per SM (not ncu's
    own limit columns, which stay as they were) disagree with ncu."""
    kernels = targeted_capture.kernels.assign(**{"launch__registers_per_thread":
                                                 targeted_capture.kernels["launch__registers_per_thread"] * 2})
    before = compute_views(targeted_capture.kernels, ["V4"]).kernels
    assert set(before["validation_V4"]) == {"pass"}
    # where registers alone limited the blocks (elsewhere another resource still binds)
    limited = (before["occupancy_limiter"].astype(str) == "registers").to_numpy()
    result = compute_views(kernels, ["V4"]).kernels[limited]
    assert limited.sum() == 32 and set(result["validation_V4"]) == {"fail"}
    assert result["validation_detail_V4"].str.contains("blocks per SM from registers").all()


def test_v5_fails_a_grid_read_in_the_wrong_unit(targeted_capture):
    kernels = targeted_capture.kernels.assign(launch__grid_size=targeted_capture.kernels["launch__grid_size"] * 2)
    result = compute_views(kernels, ["V5"]).kernels
    # all but grids so small that twice them rounds to the same 0.00 or 0.01 waves ncu prints
    visible = (result["waves"] >= 0.02).to_numpy()
    assert visible.sum() == 150 and set(result.loc[visible, "validation_V5"]) == {"fail"}



def test_v5_fails_when_the_recomputed_blocks_per_sm_are_wrong(targeted_capture):
    """Its waves come from the grid and V4's recomputation from the launch, not from ncu's limit
    columns (which stay as they were): registers per warp read as per thread change them."""
    before = compute_views(targeted_capture.kernels, ["V4", "V5"]).kernels
    limited = (before["occupancy_limiter"].astype(str) == "registers").to_numpy()
    kernels = targeted_capture.kernels.assign(**{"launch__registers_per_thread":
                                                 targeted_capture.kernels["launch__registers_per_thread"] * 2})
    result = compute_views(kernels, ["V5"]).kernels[limited]
    visible = (result["waves"] >= 0.02).to_numpy()  # a 0.01-wave grid is too coarse to tell
    assert visible.sum() == 18 and set(result.loc[visible, "validation_V5"]) == {"fail"}
    assert result["validation_detail_V5"][visible].str.contains("ncu says 1.60 waves, grid / (SMs × blocks "
                                                                "per SM) gives 4.000", regex=False).sum() == 10

def test_v6_fails_a_stall_reason_scaled(targeted_capture):
    reason = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
    kernels = targeted_capture.kernels.assign(**{reason: targeted_capture.kernels[reason] * 3})
    result = compute_views(kernels, ["V6"]).kernels
    qkv = result[_decode(kernels, "qkv_proj") & (result["time_ns"] >= 5000).to_numpy()]
    assert len(qkv) > 0 and set(qkv["validation_V6"]) == {"fail"}


def test_v7_fails_dram_bytes_in_another_unit_on_every_kernel(targeted_capture):
    """Every kernel's bytes in kB: the implied peak moves 1000-fold on all of them, which a check
    against the median of the same kernels could not see; the memory attributes do."""
    kernels = targeted_capture.kernels.copy()
    for column in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
        kernels[column] = kernels[column] / 1000
    result = compute_views(kernels, ["V7"]).kernels
    implied = result["implied_dram_peak_bytes_per_s"].notna()
    assert implied.sum() == 112 and set(result.loc[implied, "validation_V7"]) == {"fail"}
    assert result.loc[implied, "validation_detail_V7"].str.contains("the device's is 4.814 TB/s").all()



def test_v7_holds_a_capture_without_memory_attributes_to_the_published_peak(targeted_capture):
    """No memory clock or bus width: the H200's datasheet 4.8 TB/s, still independent of the
    kernels, passes the real bytes and fails them in kB."""
    kernels = targeted_capture.kernels.drop(columns=["device__attribute_memory_clock_rate",
                                                     "device__attribute_global_memory_bus_width"])
    result = compute_views(kernels, ["V7"])
    assert result.devices.iloc[0]["dram_peak_source"] == "table: published peak"
    implied = result.kernels["implied_dram_peak_bytes_per_s"].notna()
    assert implied.sum() == 112 and set(result.kernels.loc[implied, "validation_V7"]) == {"pass"}
    for column in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
        kernels[column] = kernels[column] / 1000
    k = compute_views(kernels, ["V7"]).kernels
    assert set(k.loc[implied, "validation_V7"]) == {"fail"}
    details = k.loc[implied, "validation_detail_V7"]
    assert details.str.contains("the device's is 4.800 TB/s (table: published peak", regex=False).all()

def test_v8_fails_a_persistent_grid_that_the_device_cannot_hold(targeted_capture):
    kernels = targeted_capture.kernels.copy()
    gate_up = ((kernels["phase"] == "cold_prefill") & (kernels["role"] == "gate_up_proj")
               & (kernels["kind"] == "gemm")).to_numpy()
    before = compute_views(kernels, ["V8"]).kernels[gate_up]
    assert before["persistent"].all() and set(before["validation_V8"]) == {"pass"}
    kernels.loc[gate_up, "launch__grid_size"] = 100  # neither the 132 that run at once nor a tile each
    kernels.loc[gate_up, "grid_blocks"] = 100
    after = compute_views(kernels, ["V8"]).kernels[gate_up]
    assert set(after["validation_V8"]) == {"fail"}
    assert after["validation_detail_V8"].str.contains("persistent, but 100 blocks for 660 tiles").all()



def test_v8_fails_a_persistent_grid_with_more_blocks_than_tiles(targeted_capture):
    """The grid the device holds at once (132) passes only over more tiles than that: with M=256
    the 192x192 tiles in 2x1 clusters number 120, and a full device grid is no longer explained."""
    kernels = targeted_capture.kernels.copy()
    gate_up = ((kernels["phase"] == "cold_prefill") & (kernels["role"] == "gate_up_proj")
               & (kernels["kind"] == "gemm")).to_numpy()
    kernels.loc[gate_up, "shape_m"] = 256
    after = compute_views(kernels, ["V8"]).kernels[gate_up]
    assert after["persistent"].all() and (after["tile_count"] == 120).all()
    assert set(after["validation_V8"]) == {"fail"}
    assert after["validation_detail_V8"].str.contains("persistent, but 132 blocks for 120 tiles: more "
                                                      "blocks than tiles").all()

# --- occupancy and waves from the launch, not from ncu's limits --------------------------------------


@pytest.mark.parametrize("path", RUNS[:4] + RUNS[-4:], ids=lambda p: p.name.split(".")[0])
def test_blocks_per_sm_recomputed_from_the_launch_equal_ncus_limits(path):
    from views import v4_occupancy
    from views.context import Context

    kernels = kernels_of(path)
    ctx = Context(kernels)
    recomputed = v4_occupancy.recomputed_limits(ctx)
    for name, column in zip(v4_occupancy.LIMITS, v4_occupancy.LIMIT_METRICS):
        assert (recomputed[name] == kernels[column].to_numpy()).all(), name
    result = compute_views(kernels, ["V4", "V5"]).kernels
    assert not result["validation_detail_V4"].str.contains("from registers|recomputed").any()
    assert set(result["validation_V5"]) == {"pass"}


# --- the gap: one basis, each step at most the one before -----------------------------------------------


@pytest.mark.parametrize("path", [DATA / "targeted_raw.csv", DATA / "decode12_raw.csv", *RUNS, *OTHER_RUNS],
                         ids=lambda p: p.name.split(".")[0])
def test_every_step_of_the_gap_is_at_most_the_one_before(path, targeted):
    gap = targeted.gap if path.name == "targeted_raw.csv" else views_of(path).gap
    steps = ["sm_active_pct", "tensor_pipe_elapsed_pct", "tensor_device_pct", "useful_tensor_pct"]
    values = gap[steps].to_numpy(dtype=float)
    known = ~np.isnan(values)
    assert (values[:, 0][known[:, 0]] <= 100).all()
    for a in range(3):
        both = known[:, a] & known[:, a + 1]
        assert (values[both, a + 1] <= values[both, a] * (1 + 1e-9) + 1e-12).all(), steps[a + 1]
    factors = gap[["activity_factor", "tensor_issue_factor", "path_factor", "fill_factor"]].to_numpy(dtype=float)
    assert (factors[~np.isnan(factors)] <= 1 + 1e-9).all()
    # the factors multiply out to the last step
    product = 100 * np.prod(factors, axis=1)
    whole = ~np.isnan(product)
    assert product[whole] == pytest.approx(values[whole, 3], rel=1e-9, abs=1e-12)


def test_llama_70b_decode_reads_memory_bound_not_as_tensor_headroom():
    gap = views_of(DATA / "h200_runs" / "llama-3.1-70b-b8-p512.csv.gz").gap
    decode = gap[gap["phase"] == "decode"].set_index("role")
    # the bound holds the group's time (V7: its kernels' bounds by time) at its DRAM share in those
    # kernels: 8 % of qkv's time is in kernels under the floor (latency), the rest at 76 % of peak
    for role, dram, share, in_bound in (("qkv_proj", 70.7, 0.922, 75.95), ("o_proj", 80.1, 1, 80.1),
                                        ("gate_up_proj", 88.2, 1, 88.2), ("down_proj", 83.5, 0.971, 85.8)):
        assert decode.loc[role, "bound"] == "memory", role
        assert decode.loc[role, "dram_pct"] == pytest.approx(dram, abs=0.05)
        assert decode.loc[role, "bound_time_share"] == pytest.approx(share, abs=0.0005)
        assert decode.loc[role, "bound_pct"] == pytest.approx(in_bound, abs=0.05)
        assert decode.loc[role, "tensor_pipe_elapsed_pct"] < 4  # not 25x headroom: DRAM is the wall
    from views.gap import sentence
    assert sentence(decode.loc["o_proj"]) == "memory-bound at 80 % of DRAM peak"
    assert sentence(decode.loc["qkv_proj"]) == "memory-bound in 92 % of its time at 76 % of DRAM peak"


def test_the_sm80_attention_path_costs_a_third_of_its_tensor_work(targeted):
    gap = targeted.gap.set_index(["phase", "role"])
    # decode attention runs cuDNN's sm80 mma.sync kernel at 2/3 of wgmma; its reduce none
    assert gap.loc[("decode", "attention"), "path_factor"] == pytest.approx(0.665, abs=0.002)
    assert gap.loc[("warm_prefill", "attention"), "path_factor"] == pytest.approx(1.0, abs=1e-3)
    k = targeted.kernels
    mma_sync = k[k["mma_path"] == "hmma"]
    assert mma_sync["ridge_flops_per_byte"].to_numpy() == pytest.approx(4096 * 2 / 3 * 132 * 1.98e9 / 4.814304e12)
    assert mma_sync["ridge_device_flops_per_byte"].to_numpy() == pytest.approx(4096 * 132 * 1.98e9 / 4.814304e12)



def test_the_roofline_against_the_best_path_counts_useful_work(targeted):
    """roofline_device_pct: useful FLOP/s against the device's best path for the type. The
    compute-bound prefill gate_up loses its padding (useful MMA share 0.948); the sm80 decode
    attention, on a path at 2/3 of wgmma, has its ridge at 148 against the device's 222 FLOP/byte
    and sits on the memory roof (12.3 %) on both."""
    k = targeted.kernels
    gate_up = k[(k["phase"] == "cold_prefill") & (k["role"] == "gate_up_proj") & (k["kind"] == "gemm")]
    assert gate_up["roofline_pct"].between(70.2, 70.5).all()
    assert gate_up["roofline_device_pct"].to_numpy() == pytest.approx(
        gate_up["roofline_pct"].to_numpy() * gate_up["fill"].to_numpy(), rel=1e-9)
    assert gate_up["fill"].to_numpy() == pytest.approx(0.948, abs=1e-3)
    attention = k[(k["phase"] == "decode") & (k["mma_path"] == "hmma")]
    assert len(attention) == 8  # 2 layers x 2 steps x 2 calls
    assert attention["ridge_flops_per_byte"].to_numpy() == pytest.approx(148.24, abs=0.01)
    assert attention["ridge_device_flops_per_byte"].to_numpy() == pytest.approx(222.36, abs=0.01)
    memory_share = 100 * attention["dram_bytes"] / (attention["time_ns"] * 1e-9) / attention["dram_peak_bytes_per_s"]
    assert attention["roofline_device_pct"].to_numpy() == pytest.approx(memory_share.to_numpy())
    assert attention["roofline_pct"].to_numpy() == pytest.approx(memory_share.to_numpy())


def test_off_the_memory_roof_an_older_path_reads_two_thirds_of_its_roofline_against_the_device(targeted_capture):
    """The decode attention's traffic cut 100-fold puts it under the compute roof: 1.67 % of its
    sm80 path's peak is 1.11 % of the device's best (the attention has no shape: executed FLOPs)."""
    kernels = targeted_capture.kernels.copy()
    for column in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
        kernels[column] = kernels[column] / 100
    k = compute_views(kernels, ["V7"]).kernels
    attention = k[(kernels["phase"] == "decode").to_numpy() & (k["mma_path"] == "hmma").to_numpy()]
    assert len(attention) == 8 and attention["roofline_pct"].between(1.5, 1.8).all()
    assert attention["roofline_device_pct"].to_numpy() == pytest.approx(
        attention["roofline_pct"].to_numpy() * 2 / 3, rel=1e-9)

# --- waves and tails --------------------------------------------------------------------------------------


def test_a_persistent_gemm_counts_its_tail_in_tiles():
    k = views_of(DATA / "decode12_raw.csv").kernels
    gate_up = k[k["shape_n"] == 28672].iloc[0]
    # 224 tiles on 132 blocks: waves say 1.0, the second round of tiles is 70 % full
    assert gate_up["persistent"] and gate_up["waves"] == pytest.approx(1.0)
    assert gate_up["work_units"] == 224 and gate_up["wave_efficiency"] == pytest.approx(224 / 264)
    # the SMs' own imbalance agrees: the counters see the same tail
    assert gate_up["sm_imbalance"] == pytest.approx(224 / 264, abs=0.02)


def test_below_one_wave_there_is_no_tail_and_coverage_says_what_idles(targeted):
    qkv = targeted.kernels[_decode(targeted.kernels, "qkv_proj")]
    # 48 blocks of 132 SMs x 1 block per SM: no tail (1.0, not waves 0.36), coverage 36 %
    assert (qkv["wave_efficiency"] == 1).all() and qkv["sm_coverage"].to_numpy() == pytest.approx(48 / 132)
    assert qkv["waves"].to_numpy() == pytest.approx(0.36, abs=0.005)


# --- the group's top stall -------------------------------------------------------------------------------


def test_a_groups_top_stall_is_the_largest_of_its_time_weighted_shares(targeted):
    groups = targeted.groups.set_index(["phase", "role"])
    o_proj = groups.loc[("cold_prefill", "o_proj")]
    # its longest kernels top on barrier; time-weighted, long_scoreboard leads, as the memory family does
    assert o_proj["top_stall"] == "long_scoreboard" and o_proj["top_stall_share"] == pytest.approx(0.348, abs=1e-3)
    assert o_proj["stall_memory_share"] > o_proj["stall_sync_share"]
    k = targeted.kernels
    rows = k[(k["phase"] == "cold_prefill") & (k["role"] == "o_proj")]
    longest = rows.groupby(rows["top_stall"].astype(str))["time_ns"].sum().idxmax()
    assert longest == "barrier"
    shares = {c[len("stall_"):-len("_share")]: o_proj[c] for c in groups.columns
              if c.startswith("stall_") and c.endswith("_share") and c[6:-6] not in
              ("memory", "compute", "tensor", "sync", "scheduling", "selected", "2", "3", "top")}
    assert max(shares, key=shares.get) == "long_scoreboard"


# --- physical bounds -----------------------------------------------------------------------------------------


def test_a_hit_rate_above_100_fails_with_its_raw_value_kept(targeted_capture):
    """On a long kernel an impossible hit rate is a wrong counter: it fails. On a short one it is
    how ncu accumulates L2 hits over its replay passes: n/a, with that reason."""
    kernels = targeted_capture.kernels.copy()
    assert kernels.loc[4, "gpu__time_duration.sum"] > 50_000 and kernels.loc[45, "gpu__time_duration.sum"] == 6976
    kernels.loc[4, "lts__t_sector_hit_rate.pct"] = 140.2
    kernels.loc[45, "lts__t_sector_hit_rate.pct"] = 140.2
    kernels.loc[46, "lts__t_sector_hit_rate.pct"] = 100.3  # within rounding
    result = compute_views(kernels, ["V7"]).kernels
    assert result.loc[4, "l2_hit_pct"] == 140.2  # kept, not clipped
    assert result.loc[4, "validation_V7"] == "fail"
    assert "l2_hit_pct 140.2 % is above 100 %: physically impossible" in result.loc[4, "validation_detail_V7"]
    assert result.loc[4, "out_of_bounds"] == "l2_hit_pct"
    assert result.loc[45, "l2_hit_pct"] == 140.2 and result.loc[45, "validation_V7"] == "n/a"
    assert result.loc[45, "validation_detail_V7"].startswith(
        "l2_hit_pct 140.2 % on a 6.98 us kernel: ncu accumulates it over its replay passes")
    assert result.loc[45, "out_of_bounds"] == "l2_hit_pct"  # still out of every group's mean
    assert result.loc[46, "validation_V7"] == "pass" and pd.isna(result.loc[46, "out_of_bounds"])


def test_a_hit_rate_in_another_unit_still_fails_on_every_long_kernel(targeted_capture):
    """A hit rate read as per-mille (x10): the short kernels' values are n/a as replay noise, but
    every long kernel above 10 % fails: a wrong unit is not hidden as noise."""
    kernels = targeted_capture.kernels.copy()
    kernels["lts__t_sector_hit_rate.pct"] = kernels["lts__t_sector_hit_rate.pct"] * 10
    result = compute_views(kernels, ["V7"]).kernels
    long = (result["time_ns"] >= 20_000) & (result["l2_hit_pct"] > 100.5)
    assert long.sum() > 20 and set(result.loc[long, "validation_V7"]) == {"fail"}
    short = (result["time_ns"] < 20_000) & (result["l2_hit_pct"] > 100.5)
    assert short.sum() > 20 and set(result.loc[short, "validation_V7"]) <= {"n/a", "fail"}


def test_a_useful_share_above_1_makes_no_useful_work_and_no_gap_step_above_the_one_before(targeted_capture):
    """A shape three times the K that ran (a wrong --shapes line) gives a useful MMA share of 1.5:
    it fails V3 with its raw value kept, but neither the kernel's useful tensor work nor its
    group's share is made of it (useful 2.2 % above the 1.47 % at the device's best rate)."""
    kernels = targeted_capture.kernels.copy()
    qkv = _decode(kernels, "qkv_proj")
    kernels.loc[qkv, "shape_k"] = 3 * 2048
    result = compute_views(kernels)
    k = result.kernels[qkv]
    assert k["fill"].to_numpy() == pytest.approx(1.5) and set(k["validation_V3"]) == {"fail"}
    assert set(k["out_of_bounds"]) == {"fill"} and k["useful_tensor_pct"].isna().all()
    gap = result.gap.set_index(["phase", "role"])
    row = gap.loc[("decode", "qkv_proj")]
    assert row["tensor_device_pct"] == pytest.approx(1.471, abs=1e-3)
    assert pd.isna(row["fill"]) and pd.isna(row["useful_tensor_pct"]) and pd.isna(row["fill_factor"])
    assert gap.loc[("decode", "o_proj"), "fill"] == pytest.approx(0.5)  # the other groups as before

def test_a_negative_time_and_active_above_elapsed_fail_v1(targeted_capture):
    kernels = targeted_capture.kernels.copy()
    kernels.loc[3, "gpu__time_duration.sum"] = -12138.0
    kernels.loc[4, "sm__cycles_active.avg"] = kernels.loc[4, "sm__cycles_elapsed.avg"] * 1.2
    result = compute_views(kernels, ["V1"]).kernels
    assert result.loc[3, "time_ns"] == -12138 and result.loc[3, "validation_V1"] == "fail"
    assert "time_ns -1.214e+04 is below 0" in result.loc[3, "validation_detail_V1"]
    assert result.loc[4, "validation_V1"] == "fail"
    assert "sm_active_pct 120 % is above 100 %" in result.loc[4, "validation_detail_V1"]


def test_impossible_l2_hit_rates_of_the_h200_decode_kernels_are_flagged_not_shown_as_fine():
    """Seen on every bundled batch-1 decode run: short kernels read L2 hit rates of 116 to 681 %."""
    result = views_of(DATA / "h200_runs" / "gate-b1-r1.csv.gz")
    k = result.kernels
    impossible = k["l2_hit_pct"] > 100.5
    assert impossible.sum() == 14 and k.loc[impossible, "l2_hit_pct"].max() == pytest.approx(469.8, abs=0.05)
    # all on kernels under 8 us: replay noise, n/a with the reason, not a failure
    assert k.loc[impossible, "time_ns"].max() < 8000
    assert (k.loc[impossible, "validation_V7"] == "n/a").all()
    assert k.loc[impossible, "validation_detail_V7"].str.contains("accumulates it over its replay passes").all()
    assert (k.loc[impossible, "out_of_bounds"] == "l2_hit_pct").all()
    # the DRAM bytes of those kernels are not blamed for it: the gate still trusts them
    from views.registry import failed_for
    assert not failed_for(k, "V7", "dram_bytes").any() and failed_for(k, "V7", "l2_hit_pct").sum() == 14


# --- where each role came from ----------------------------------------------------------------------------------


def test_role_source_is_in_the_json_and_guessed_roles_are_marked(targeted):
    document = json.loads(views_json(targeted, run="t"))
    sources = {k["role_source"] for k in document["kernels"]}
    assert sources == {"nvtx", "name"}
    guessed = [k for k in document["kernels"] if k["role_source"] == "name"]
    assert {k["role"] for k in guessed} == {"elementwise"} and len(guessed) == 64
    groups = {(g["phase"], g["role"]): g["role_source"] for g in document["groups"]}
    assert groups[("decode", "elementwise")] == "name" and groups[("decode", "qkv_proj")] == "nvtx"
    gap = {(g["phase"], g["role"]): g["role_source"] for g in document["gap"]}
    assert gap[("other", "elementwise")] == "name"
