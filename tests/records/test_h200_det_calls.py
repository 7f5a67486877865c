"""What the H200 said of the CUDA C++ deterministic kernels, call by call: the committed records in
tests/data/h200_det (sweeps, ncu counters, SASS) read back against the tables the code adopts now.
Call 6: the bits kept, nothing fast enough to adopt; call 7: the bits kept, the tile kernel adopted at
prefill, faster than the Gluon kernel, still short of LayerCast; call 8: the same tiles with an
mbarrier ring instead of a barrier per tile, faster again, still just short; call 13: the decode
kernels' FMAs in another order, 2-6 % faster at M = 16, still above 1.5x cuBLAS bf16; calls 14-16:
folds, spreads, one-warp programs, a planned and a balanced kernel, none adopted. Nothing here builds
or runs a kernel (tests/test_det_cuda.py does, where nvcc is); every test is marked `record`."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

pytest.importorskip("torch")

from profiler.workloads.deterministic import cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402
from tests.test_det_cuda import CALL7_CHOICE, DATA, LLAMA_8B  # noqa: E402

SWEEP6 = DATA / "sweep6.json"
PREFILL7 = [DATA / "prefill7a.json", DATA / "prefill7b.json", DATA / "prefill7c.json"]
PREFILL8 = [DATA / "prefill8a.json", DATA / "prefill8b.json"]
PREFILL13WS = {call: DATA / f"prefill13{call}.json" for call in "abcde"}   # det_prefill_ws.cu
SWEEP7 = {call: DATA / f"sweep7{call}.json" for call in "abc"}  # decode
SWEEP8 = {call: DATA / f"sweep8{call}.json" for call in "ab"}    # decode, call 8 (nothing adopted)
SWEEP13 = {call: DATA / f"sweep13{call}.json" for call in "ab"}  # decode, call 13 (FMA orders)
ROLES = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
PREFILL13 = [[DATA / f"prefill13o-{call}{run}.json" for run in "ab"] for call in "1234"]
# the prefill kernels adopted in turn: call 7's, call 8's (the mbarrier ring), call 13's (FMA order,
# float4 totals, the early ring)
CALL7_TILE = cuda_gemm.CudaTileConfig(128, 128, 8, 8, 16, True, 2, True, 0)
CALL8_TILE = cuda_gemm.CudaTileConfig(128, 128, 8, 8, 16, True, 2, True, 4)
CALL13_TILE = cuda_gemm.CudaTileConfig(128, 128, 8, 8, 16, True, 2, True, 284)


# --- what the H200 said (call 6, tests/data/h200_det/sweep6.json) ----------------------------------

def _tile_rows(sweep):
    return [r for r in sweep["sweep"] if r.get("config", {}).get("kind") in ("cuda_tile", "cuda_ws")]


def _assert_tile_sweep_bit_exact(sweep, extra_rows=()):
    """A device call's sweep file: built for sm_90, every tile configuration (and extra_rows) with
    the Gluon default's whole outputs and the emulation's sampled rows on the four projections,
    every one equal to both on the edge shape."""
    build = sweep["build"]
    assert build["arch"] == "90" and build["error"] is None
    tile = _tile_rows(sweep)
    assert len(tile) == 4 * len(build["configs"]) and {r["role"] for r in tile} == ROLES
    for r in [*tile, *extra_rows]:
        assert r["same_as_default"] is True and r["emulation_mismatches"] == 0, r["variant"]
    edge = sweep["edge"]["rows"]
    assert edge["gluon_vs_emulation_mismatches"] == 0
    for name in build["configs"]:
        assert edge[name] == {"ran": True, "same_as_gluon": True, "emulation_mismatches": 0}


@pytest.fixture(scope="module")
def sweep6():
    return json.loads(SWEEP6.read_text())


def test_h200_cuda_kernels_kept_every_bit(sweep6):
    """Every CUDA configuration, built on the H200 by nvcc 13.0 for sm_90: the whole output equal to
    the Gluon default's (M = 100 and 2048 at prefill, two M per decode bucket) on the four
    Llama-3.1-8B projections, sampled rows equal to the CPU emulation, and every tail of the edge
    shape (M 300, N 520, K 544, bias) equal to both; no spilled register on the device either."""
    assert all(info["error"] == 0 and info["local_bytes"] == 0 for info in sweep6["build"]["configs"].values())
    gemv = [r for r in sweep6["decode"] if r.get("config", {}).get("kind") == "cuda_gemv"]
    assert len(gemv) == 4 * len(cuda_gemm.compiled_gemv_configs())
    _assert_tile_sweep_bit_exact(sweep6, extra_rows=gemv)


def test_h200_call6_adopted_nothing_and_the_data_says_why(sweep6):
    """Adopted only where a target is met: no CUDA tile configuration reached LayerCast's time on all
    four projections (the best, 128 x 128 with the running total in shared memory, is 1.13x its
    time), and no decode configuration came within 1.5x of cuBLAS bf16 at M = 16 (best 2.16x)."""
    lc = {r["role"]: r["median_us"] for r in sweep6["sweep"] if r["variant"] == "layercast"}
    worst = {}
    for r in sweep6["sweep"]:
        if r.get("config", {}).get("kind") == "cuda_tile":
            worst[r["variant"]] = max(worst.get(r["variant"], 0.0), r["median_us"] / lc[r["role"]])
    assert min(worst, key=worst.get) == "128x128x8_8x8_smem_b2" and 1.1 < min(worst.values()) < 1.2
    cub = {r["role"]: r["median_us"] for r in sweep6["decode"] if r["bucket"] == 16 and r["variant"] == "cublas_bf16"}
    worst16 = {}
    for r in sweep6["decode"]:
        if r["bucket"] == 16 and r["variant"] != "cublas_bf16":
            worst16[r["variant"]] = max(worst16.get(r["variant"], 0.0), r["median_us"] / cub[r["role"]])
    assert 2.1 < min(worst16.values()) < 2.2 < worst16["gluon_default"]
    assert det.CUDA_GEMV_CONFIGS == {}


# --- what the H200 said (call 7, prefill: tests/data/h200_det/prefill7*.json, ncu7_prefill.json) ------

@pytest.fixture(scope="module")
def prefill7():
    return [json.loads(p.read_text()) for p in PREFILL7]


def test_h200_call7_prefill_kept_every_bit(prefill7):
    """All three call-7 tables (28 configurations): every whole output equal to the Gluon
    default's at M = 100 and 2048 on the four projections, sampled rows equal to the CPU
    emulation, every tail of the edge shape equal to both."""
    for sweep in prefill7:
        _assert_tile_sweep_bit_exact(sweep)


def test_h200_call7_prefill_adopted_its_winner_which_beats_gluon_but_not_layercast(prefill7):
    """The committed table is the one call 7c built and measured; kernels.py adopts the configuration
    with the smallest worst ratio to LayerCast, which is faster than the Gluon default on every
    projection (the adoption rule) and still 4-5 % slower than LayerCast (the issue's target missed)."""
    last = prefill7[-1]
    assert set(last["build"]["configs"]) <= {c.name for c in cuda_gemm.compiled_configs()}
    assert all(i["error"] == 0 and i["local_bytes"] == 0 for i in last["build"]["configs"].values())
    times = {(r["variant"], r["role"]): r["median_us"] for r in last["sweep"]}
    worst = {}
    for r in _tile_rows(last):
        worst[r["variant"]] = max(worst.get(r["variant"], 0.0), r["median_us"] / times[("layercast", r["role"])])
    best = min(worst, key=worst.get)
    # calls 8 and 13 kept these tiles (the ring, another FMA order: flags only)
    assert best == last["winner"]["variant"] == CALL7_TILE.name
    assert 1.0 < worst[best] < 1.06
    for role in ROLES:
        assert times[(best, role)] < 0.96 * times[("gluon_default", role)]
    assert det.choose_config(512, 6144, 4096) == det.TILE_CONFIG


def test_h200_call7_prefill_fma_order_won_and_the_loads_before_the_barrier_did_not_lose(prefill7):
    """The two kernel changes the data credits: the columns-outer FMA order (`_no`) made every
    configuration faster on every projection (call 7c); the next tile's loads issued before the
    barrier lifted the one-program-per-SM configuration from call 6's 27 to 40 TFLOP/s."""
    last = {(r["variant"], r["role"]): r["median_us"] for r in _tile_rows(prefill7[-1])}
    names = {v for v, _ in last}
    pairs = sorted(v for v in names if v + "_no" in names)
    assert len(pairs) == 3
    for v in pairs:
        for role in ROLES:
            assert last[(v + "_no", role)] < last[(v, role)], (v, role)
    call6 = {(r["variant"], r["role"]): r["TFLOPs"] for r in _tile_rows(json.loads(SWEEP6.read_text()))}
    first = {(r["variant"], r["role"]): r["TFLOPs"] for r in _tile_rows(prefill7[0])}
    for role in ROLES:
        assert call6[("128x128x8_8x8_reg_b1", role)] < 28 < 39 < first[("128x128x8_8x8_reg_b1", role)]


def test_h200_call7_ncu_same_fmas_as_cublas_fewer_cycles_issuing():
    """ncu on qkv at M = 2048: the adopted kernel executes the FFMAs cuBLAS's SGEMM executes (M N K
    thread FFMAs) in about as many warp instructions, but issues on fewer cycles (81 % against
    90 %): the gap to LayerCast is stalls (barrier, wait, dispatch), not work."""
    rows = json.loads((DATA / "ncu7_prefill.json").read_text())["call7c"]
    mine = next(r for r in rows if "det_sgemm_kernelILi128ELi128ELi8ELi8ELi16ELb1ELi2ELb1E" in r["kernel"])
    cub = next(r for r in rows if r["kernel"].startswith("sm80_xmma_gemm_f32f32"))
    ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
    assert mine[ffma] == 2048 * 6144 * 4096
    assert abs(cub[ffma] / mine[ffma] - 1) < 0.001
    assert abs(mine["smsp__inst_executed.sum"] / cub["smsp__inst_executed.sum"] - 1) < 0.03
    issue = "smsp__issue_active.avg.pct_of_peak_sustained_active"
    assert 78 < mine[issue] < 84 < 88 < cub[issue]
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    for reason in ("barrier", "wait"):
        assert mine[stall.format(reason)] > 1.5 * cub.get(stall.format(reason), 0.0)
    assert mine["launch__registers_per_thread"] == 239 and mine["launch__block_size"] == 128
# --- what the H200 said (call 8, prefill: tests/data/h200_det/prefill8{a,b}.json, ncu8_prefill.json) ---

@pytest.fixture(scope="module")
def prefill8():
    return [json.loads(p.read_text()) for p in PREFILL8]


def _worst_ratio_to_layercast(sweep) -> dict[str, float]:
    times = {(r["variant"], r["role"]): r["median_us"] for r in sweep["sweep"]}
    worst = {}
    for r in _tile_rows(sweep):
        worst[r["variant"]] = max(worst.get(r["variant"], 0.0), r["median_us"] / times[("layercast", r["role"])])
    return worst


def test_h200_call8_prefill_kept_every_bit(prefill8):
    """Both call-8 runs (the ring, the late stores, BK 16, with call 7's kernel as the baseline):
    every whole output equal to the Gluon default's, sampled rows to the emulation, the edge shape."""
    for sweep in prefill8:
        _assert_tile_sweep_bit_exact(sweep)
        assert set(sweep["build"]["configs"]) <= {c.name for c in cuda_gemm.compiled_configs()}


def test_h200_call8_adopted_the_mbarrier_ring_faster_everywhere_still_short_of_layercast(prefill8):
    """In both runs the 128 x 128 x 8 tiles with the mbarrier ring had the smallest worst ratio to
    LayerCast and took less time than call 7's kernel (the same tiles with a barrier per tile) on
    every projection; kernels.py adopts them; the target (>= LayerCast) is still missed by < 3.5 %."""
    adopted, call7 = CALL8_TILE, CALL7_TILE
    for sweep in prefill8:
        worst = _worst_ratio_to_layercast(sweep)
        assert min(worst, key=worst.get) == sweep["winner"]["variant"] == adopted.name
        assert 1.0 < worst[adopted.name] < 1.035 < worst[call7.name]
        times = {(r["variant"], r["role"]): r["median_us"] for r in _tile_rows(sweep)}
        for role in ROLES:
            assert times[(adopted.name, role)] < 0.985 * times[(call7.name, role)], role


def test_h200_call8a_late_stores_and_bk16_with_a_barrier_lost(prefill8):
    """Run a: the next tile stored after the barrier (`_late`) and 16 k per barrier took more time than
    call 7's kernel on every projection; only the ring helped BK 16."""
    times = {(r["variant"], r["role"]): r["median_us"] for r in _tile_rows(prefill8[0])}
    base = "128x128x8_8x16_smem_b2_no"
    for role in ROLES:
        for loser in (base + "_late", "128x128x16_8x16_smem_b2_no", "128x128x16_8x16_smem_b2_no_late"):
            assert times[(loser, role)] > times[(base, role)], (loser, role)
        assert times[("128x128x16_8x16_smem_b2_no_mbar3", role)] < times[(base, role)]


def test_h200_call8_ncu_the_ring_has_no_barrier_stall_and_issues_more():
    """ncu on qkv at M = 2048: the ring kernel executes the same M N K FFMAs with no barrier stall
    (call 7's kernel: 0.15 per issue) and issues on more cycles (83-84 % against 81 %), LayerCast's
    cuBLAS SGEMM still on 90 %."""
    rows = json.loads((DATA / "ncu8_prefill.json").read_text())
    call7 = next(r for r in json.loads((DATA / "ncu7_prefill.json").read_text())["call7c"]
                 if "det_sgemm_kernelILi128ELi128ELi8ELi8ELi16ELb1ELi2ELb1E" in r["kernel"])
    issue = "smsp__issue_active.avg.pct_of_peak_sustained_active"
    barrier = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
    ring_kernel = "det_sgemm_kernelILi128ELi128ELi8ELi8ELi16ELb1ELi2ELb1ELi4EEE"   # the adopted one
    for call in ("call8a", "call8b"):
        ring = next(r for r in rows[call] if ring_kernel in r["kernel"])
        cub = next(r for r in rows[call] if r["kernel"].startswith("sm80_xmma_gemm_f32f32"))
        assert ring["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 2048 * 6144 * 4096
        assert ring.get(barrier, 0.0) < 0.01 < 0.1 < call7[barrier]
        assert call7[issue] < 82 < 83 < ring[issue] < 85 < 89 < cub[issue]
        assert ring["launch__registers_per_thread"] == 203


# --- what the H200 said (call 13, prefill FMA orders: prefill13o-{1..4}{a,b}.json, ncu13o-{1,2}.csv) ----

@pytest.fixture(scope="module")
def prefill13():
    return [[json.loads(p.read_text()) for p in runs] for runs in PREFILL13]


def test_h200_call13_prefill_orders_kept_every_bit(prefill13):
    """Four calls, two sweeps each, 33 configurations (FMA orders, float4 totals, BK 16, the early
    ring): every whole output equal to the Gluon default's, sampled rows and the edge shape to the
    emulation. The orders move registers only."""
    for runs in prefill13:
        for sweep in runs:
            _assert_tile_sweep_bit_exact(sweep)
    names = {n for runs in prefill13 for sweep in runs for n in sweep["build"]["configs"]}
    assert len(names) == 33 and CALL8_TILE.name in names and CALL13_TILE.name in names


def test_h200_call13_adopted_the_only_configuration_at_least_layercast_everywhere(prefill13):
    """In both sweeps of the call that ran it, flags 284 (columns-outer snake, float4 totals, the
    early ring) had the smallest worst ratio to LayerCast and took less time than LayerCast on all
    four projections, and 3.5 % less than call 8's kernel; no other configuration of the four calls
    beat LayerCast on all four in any sweep. kernels.py adopted it from bucket 1024 (until
    det_prefill_ws.cu's kernel, below)."""
    assert CALL13_TILE in cuda_gemm.compiled_configs()
    for i, runs in enumerate(prefill13):
        for sweep in runs:
            worst = _worst_ratio_to_layercast(sweep)
            times = {(r["variant"], r["role"]): r["median_us"] for r in sweep["sweep"]}
            if CALL13_TILE.name in worst:
                assert i == 3 and min(worst, key=worst.get) == CALL13_TILE.name
                assert worst[CALL13_TILE.name] < 0.995
                for role in ROLES:
                    assert times[(CALL13_TILE.name, role)] < 0.965 * times[(CALL8_TILE.name, role)], role
            assert all(w > 1.0 for name, w in worst.items() if name != CALL13_TILE.name), i


def test_h200_call13_the_order_alone_moved_the_time_by_up_to_8_percent(prefill13):
    """The same tiles, ring and loop length with another FMA order: rows outer as a snake (o7) was
    faster than call 8's kernel on every projection in all eight sweeps; row pairs with float4 totals
    (o3_v4, call 4) were 4-5 % slower: the allocation matters, and float4 totals alone helped only with
    some orders (o7_v4 lost to o7 in call 2)."""
    base = CALL8_TILE.name
    for i, runs in enumerate(prefill13):
        for sweep in runs:
            times = {(r["variant"], r["role"]): r["median_us"] for r in _tile_rows(sweep)}
            for role in ROLES:
                assert times[(base + "_o7", role)] < 0.995 * times[(base, role)], (i, role)
                if i == 1:
                    assert times[(base + "_o7_v4", role)] > times[(base + "_o7", role)]
                if i == 3:
                    assert times[(base + "_o3_v4", role)] > 1.035 * times[(base, role)]


def test_h200_call13_ncu_snake_order_issues_more_with_fewer_dispatch_stalls():
    """ncu on qkv (call 2): the o7 kernel executes the same FFMAs as call 8's with dispatch stalls
    down from 0.19 to 0.16 per issue and issue active up to 86 % (call 8: 83.6 %), cuBLAS's SGEMM
    still at 90 %."""
    import csv
    rows = list(csv.reader((DATA / "ncu13o-2.csv").read_text().splitlines()))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    col = {name: i for i, name in enumerate(rows[head])}

    def num(row, metric):
        return float(row[col[metric]].replace(",", ""))
    o7 = next(r for r in rows[head + 2:] if "ELi116EEE" in r[col["Kernel Name"]])
    cub = next(r for r in rows[head + 2:] if "cublas" in r[col["Kernel Name"]])
    issue = "smsp__issue_active.avg.pct_of_peak_sustained_active"
    dispatch = "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio"
    assert num(o7, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum") == 2048 * 6144 * 4096
    assert 85 < num(o7, issue) < 88 < num(cub, issue)
    assert num(cub, dispatch) < num(o7, dispatch) < 0.18


# --- what the H200 said in call 13 (prefill, det_prefill_ws.cu: prefill13{a..e}.json, ncu13_prefill.json) ---

@pytest.fixture(scope="module")
def prefill13ws():
    return {call: json.loads(path.read_text()) for call, path in PREFILL13WS.items()}


def _times(sweep) -> dict[tuple[str, str], float]:
    return {(r["variant"], r["role"]): r["median_us"] for r in _tile_rows(sweep)}


def test_h200_call13ws_prefill_kept_every_bit(prefill13ws):
    """The five runs (call 8's kernel, in run e also flags 284, and two to four warp-specialized
    configurations each): every whole output equal to the Gluon default's, sampled rows to the
    emulation, the edge shape; at M = 1024 the best one's whole outputs equal to the baseline's.
    The warp-specialized builds: 168 registers at launch (setmaxnreg moves them), nothing spilled,
    one 384-thread program per SM."""
    for sweep in prefill13ws.values():
        _assert_tile_sweep_bit_exact(sweep)
        ws = [name for name in sweep["build"]["configs"] if name.startswith("ws")]
        assert len(ws) >= 2 and sum(r["config"]["kind"] == "cuda_ws" for r in _tile_rows(sweep)) == 4 * len(ws)
        for name, info in sweep["build"]["configs"].items():
            assert info["error"] == 0 and info["local_bytes"] == 0, name
            if name in ws:
                assert info["registers"] == 168 and info["blocks_per_sm"] == 1 and info["threads"] == 384
        assert len(sweep["small_m"]) == 4 and all(r["same"] for r in sweep["small_m"])


def test_h200_call13ws_adopted_the_warp_specialized_kernel_over_flags_284(prefill13ws):
    """Run e, head to head with the tile kernel adopted before (flags 284) and call 8's: the
    warp-specialized kernel with 8 k per tile and a ring of 6 buffers had the smallest worst ratio
    to LayerCast and took the least time on every projection, 1.3-1.6 % less than flags 284 at
    M = 2048 and 1024 and 5 % less than call 8's kernel, less than LayerCast on all four (1.03-1.05x
    its speed); it also won runs a-c. kernels.py adopts it from bucket 1024 on."""
    adopted = det.CUDA_TILE_CONFIG
    assert adopted == cuda_gemm.CudaWsConfig(8, 6, True) and adopted in cuda_gemm.compiled_ws_configs()
    e = prefill13ws["e"]
    worst = _worst_ratio_to_layercast(e)
    assert min(worst, key=worst.get) == e["winner"]["variant"] == adopted.name
    assert worst[adopted.name] < 0.975 < worst[CALL13_TILE.name] < 0.99 < 1.02 < worst[CALL8_TILE.name]
    times = _times(e)
    for role in ROLES:
        mine = times[(adopted.name, role)]
        assert mine == min(t for (v, r), t in times.items() if r == role), role
        assert mine < 0.988 * times[(CALL13_TILE.name, role)], role
        assert mine < 0.95 * times[(CALL8_TILE.name, role)], role
    for r in e["small_m"]:      # `adopted_us`: flags 284's
        assert r["variant"] == adopted.name and r["ws_us"] < 0.988 * r["adopted_us"], r["role"]
    for call in "abc":
        assert prefill13ws[call]["winner"]["variant"] == adopted.name
    assert det.CUDA_TILE_MIN_M == 1024
    assert det.choose_config(1024, 6144, 4096) == det.choose_config(2048, 4096, 14336) == adopted
    assert det.choose_config(512, 6144, 4096) == det.TILE_CONFIG


def test_h200_call13ws_one_tile_of_loads_in_flight_needed_a_ring_of_exactly_six(prefill13ws):
    """With one tile of loads in flight per producer thread, the ring of 6 buffers won runs a-c and
    every other depth (4, 5, 7, 8), the rows-outer order and 16 k per tile took > 1.5 % more time on
    every projection; with two tiles in flight (run d) rings of 4, 6 and 8 were within 0.7 % of each
    other and of the ring of 6 with one (the ring of 4 had d's smallest worst ratio, by 0.15 %; in
    run e it was 0.5-0.9 % slower than the ring of 6 with one)."""
    ring6 = cuda_gemm.CudaWsConfig(8, 6, True).name
    for call in "abc":
        sweep = prefill13ws[call]
        assert sweep["winner"]["variant"] == ring6
        times = _times(sweep)
        losers = {v for v, _ in times if v.startswith("ws") and v != ring6}
        assert len(losers) == 3
        for v in losers:
            for role in ROLES:
                assert times[(v, role)] > 1.015 * times[(ring6, role)], (call, v, role)
    times = _times(prefill13ws["d"])
    for role in ROLES:
        ws = [t for (v, r), t in times.items() if r == role and v.startswith("ws")]
        assert len(ws) == 4 and max(ws) < 1.007 * min(ws), role


def test_h200_call13ws_ncu_the_consumers_issue_as_often_as_cublas():
    """ncu on qkv at M = 2048: the warp-specialized kernels (the adopted ring of 6, runs a, b, c, e;
    the ring of 4 with two tiles of loads in flight, run d) execute the same M N K FFMAs as call 8's
    kernel with fewer instructions, issue on 88.5-89.5 % of active cycles (call 8's: 84 %, flags
    284: 87.2 %, LayerCast's cuBLAS SGEMM: 90 %) and keep the FMA pipe busier than that SGEMM (79.7-80.1 %
    against 79.1 %); flags 284 took 1.3 % more time in run e."""
    rows = json.loads((DATA / "ncu13_prefill.json").read_text())
    issue = "smsp__issue_active.avg.pct_of_peak_sustained_active"
    pipe = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
    insts = "smsp__inst_executed.sum"
    time = "gpu__time_duration.sum"
    ring6 = "ILi8ELi6ELb1EEE"       # before the lookahead parameter existed
    mine = {"call13a": ring6, "call13b": ring6, "call13c": ring6, "call13d": "ILi8ELi4ELb1ELi2EEE",
            "call13e": "ILi8ELi6ELb1ELi1EEE"}
    for call, tag in mine.items():
        ws = next(r for r in rows[call] if "det_ws_kernel" + tag in r["kernel"])
        call8 = next(r for r in rows[call] if "det_sgemm_kernelILi128ELi128ELi8ELi8ELi16ELb1ELi2ELb1ELi4E" in r["kernel"])
        cub = next(r for r in rows[call] if r["kernel"].startswith("sm80_xmma_gemm_f32f32"))
        for r in (ws, call8):
            assert r["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 2048 * 6144 * 4096
        assert ws[insts] < 0.998 * call8[insts]
        assert call8[issue] < 84 < 88.5 < ws[issue] < 89.5 < cub[issue]
        assert call8[pipe] < 76 < 79 < cub[pipe] < 79.5 < ws[pipe] < 80.1
        assert ws["launch__registers_per_thread"] == 168 and ws["launch__block_size"] == 384
        assert ws[time] < 0.96 * call8[time]
    call13 = next(r for r in rows["call13e"] if "det_sgemm_kernelILi128ELi128ELi8ELi8ELi16ELb1ELi2ELb1ELi284E" in r["kernel"])
    ws = next(r for r in rows["call13e"] if "det_ws_kernel" + mine["call13e"] in r["kernel"])
    assert 87 < call13[issue] < 87.5 < ws[issue] and call13["launch__registers_per_thread"] == 213
    assert ws[time] < 0.99 * call13[time]


# --- what the H200 said in call 7 (det_decode.cu, tests/data/h200_det/sweep7{a,b,c}.json) ---------------

@pytest.fixture(scope="module")
def sweep7():
    return {call: json.loads(path.read_text()) for call, path in SWEEP7.items()}


def test_h200_call7_decode_kernels_kept_every_bit(sweep7):
    """Every det_decode.cu configuration of calls 7a-7c, built by nvcc 13.0 for sm_90: the edge shape
    (M = its rows and 13, N 3072, K 544: a last chain of 32 k, a bias) equal to the Gluon kernel and
    the CPU emulation, and on the four projections the whole output equal to the Gluon default's at
    two M per bucket (M = 9 and 16 also through blocks of 8 rows), rows 0-1 equal to the emulation.
    The only rows without a result are the 6-warp configuration's on N = 4096 and 28672 (not
    multiples of its 768 columns: declined, the Gluon kernel would run)."""
    for call, data in sweep7.items():
        assert data["build"]["arch"] == "90" and data["build"]["error"] is None
        edge = data["edge"]["rows"]
        exact = {"ran": True, "same_as_gluon": True, "emulation_mismatches": 0}
        assert edge and all(r == exact for r in edge.values())
        rows = [r for r in data["decode"] if r["variant"] != "cublas_bf16"]
        for r in rows:
            if "error" in r:
                assert "declined" in r["error"] and r["config"]["warps"] == 6, (call, r["variant"])
                continue
            assert r["same_as_default"] is True and r["emulation_mismatches"] == 0, (call, r["variant"])
        assert sum("error" in r for r in rows) == (3 if call == "b" else 0)


def test_h200_call7c_adopted_the_fastest_exact_configuration_per_projection(sweep7):
    """Call 7's rules picked, per bucket and projection, the bit-exact configuration call 7c measured
    fastest (or within 1 % of it), faster than the Gluon default everywhere; M = 8 meets 1.5x cuBLAS
    bf16 (worst 1.10x), M = 16 does not (worst 1.75x, gate_up; it was 2.38x)."""
    rows = sweep7["c"]["decode"]
    worst = {}
    for bucket, M in ((8, 8), (16, 16)):
        for role in LLAMA_8B:
            mine = {r["variant"]: r for r in rows
                    if r["bucket"] == bucket and r["role"] == role and "median_us" in r}
            cub = mine.pop("cublas_bf16")["median_us"]
            exact = {n: r["median_us"] for n, r in mine.items() if r["same_as_default"] and r["emulation_mismatches"] == 0}
            chosen = exact[CALL7_CHOICE[bucket][role]]
            assert chosen <= 1.01 * min(exact.values()) and chosen < exact["gluon_default"], (bucket, role)
            worst[bucket] = max(worst.get(bucket, 0.0), chosen / cub)
            worst[("gluon", bucket)] = max(worst.get(("gluon", bucket), 0.0), exact["gluon_default"] / cub)
    assert 1.0 < worst[8] < 1.15 < 1.4 < worst[("gluon", 8)]
    assert 1.7 < worst[16] < 1.8 < 2.3 < worst[("gluon", 16)]


# --- what the H200 said in call 8 (det_decode.cu's flags that lost, tests/data/h200_det/sweep8{a,b}.json) ---

CALL8_SUFFIXES = ("_co", "_st", "_fused")    # the flags' names (cuda_gemm at commit 71b1d27)


@pytest.fixture(scope="module")
def sweep8():
    return {call: json.loads(path.read_text()) for call, path in SWEEP8.items()}


def _call8_new(name: str) -> bool:
    return any(suffix in name for suffix in CALL8_SUFFIXES) or "_w1_" in name


def test_h200_call8_decode_variants_kept_every_bit(sweep8):
    """Call 8's decode variants (8a: FMAs column by column, the stage loop unrolled by the ring's
    slots, a 1-warp 8-column program; 8b: the fold inside the kernel through an epoch counter) and the
    adopted baselines: the edge shape and both buckets' projections equal to the Gluon default's
    whole outputs and the emulation's rows, every row with a time."""
    for call, data in sweep8.items():
        assert data["build"]["arch"] == "90" and data["build"]["error"] is None
        edge = data["edge"]["rows"]
        exact = {"ran": True, "same_as_gluon": True, "emulation_mismatches": 0}
        assert edge and all(r == exact for r in edge.values()), call
        rows = [r for r in data["decode"] if r["variant"] != "cublas_bf16"]
        new = {r["variant"] for r in rows if _call8_new(r["variant"])}
        assert len(new) == (11 if call == "a" else 5), call
        for r in rows:
            assert "median_us" in r and r["same_as_default"] is True and r["emulation_mismatches"] == 0, (call, r["variant"])


def test_h200_call8_found_nothing_faster_than_the_adopted_rules(sweep8):
    """Why CUDA_DECODE_RULES did not change in call 8: per call, bucket and projection, the
    configuration call 7's rules chose is within 1 % of the fastest bit-exact one measured (every call-8
    variant lost or tied), and M = 16 stays above 1.5x cuBLAS bf16 on qkv, gate_up and down."""
    for call, data in sweep8.items():
        rows = data["decode"]
        for bucket in (8, 16):
            for role in LLAMA_8B:
                mine = {r["variant"]: r["median_us"] for r in rows if r["bucket"] == bucket and r["role"] == role}
                cub = mine.pop("cublas_bf16")
                chosen = mine[CALL7_CHOICE[bucket][role]]
                assert chosen <= 1.01 * min(mine.values()), (call, bucket, role)
                if bucket == 16:
                    assert (chosen / cub < 1.5) == (role == "o_proj"), (call, role)


def test_h200_call8_ncu_says_why_the_variants_lost():
    """gate_up at M = 16 under ncu. 8a: the FMAs column by column (flag 4) raise the dispatch stalls
    of the 8-row kernel and lower its FMA pipe (with the unrolled loop, flag 8, more so). 8b: the
    fold inside the kernel (flag 16) costs more than the same configuration's partials plus the
    fold kernel, with more barrier and long-scoreboard stalls (programs waiting for their tile)."""
    def rows(call):
        data = json.loads((DATA / f"ncu8{call}_gate_up_m16.json").read_text())["targets"]["gate_up_proj:16"]
        return {r["kernel"].split("<")[-1].rstrip(">"): r for r in data if "det_decode_kernel" in r["kernel"]}, data

    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    fma = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
    a, _ = rows("a")
    plain, co, co_st = a["8, 4, 4, 8, 3, 6, 3"], a["8, 4, 4, 8, 3, 6, 7"], a["8, 4, 4, 8, 3, 6, 15"]
    dispatch = [r[stall.format("dispatch_stall")] for r in (plain, co, co_st)]
    assert dispatch == sorted(dispatch) and dispatch[2] > 1.3 * dispatch[0]
    assert plain[fma] > co[fma] > co_st[fma]
    b, data = rows("b")
    plain, fused = b["8, 4, 4, 8, 3, 6, 3"], b["8, 4, 4, 8, 3, 6, 19"]
    fold_ns = max(r["gpu__time_duration.sum"] for r in data if "fold" in r["kernel"])
    assert fused["gpu__time_duration.sum"] > plain["gpu__time_duration.sum"] + fold_ns
    for reason in ("barrier", "long_scoreboard"):
        assert fused[stall.format(reason)] > 2.5 * plain[stall.format(reason)], reason
    assert fused[fma] < plain[fma] - 5


# --- what the H200 said in call 13 (det_decode.cu's FMA orders, tests/data/h200_det/sweep13{a,b}.json) ---

@pytest.fixture(scope="module")
def sweep13():
    return {call: json.loads(path.read_text()) for call, path in SWEEP13.items()}


def _order(name: str) -> int:
    """The FMA order of a decode configuration's name (flags >> 2; 0 without an `_o` suffix)."""
    m = re.search(r"_o(\d+)$", name)
    return int(m.group(1)) if m else 0


def test_h200_call13_fma_orders_kept_every_bit(sweep13):
    """Call 13's configurations, the same shapes with a W^T row's FMAs written in other orders (13a:
    7, 13b: 17) and the adopted baselines, built by nvcc 13.0 for sm_90: the edge shape equal to the
    Gluon kernel and the emulation, the four projections' whole outputs equal to the Gluon default's
    (M = 9, 13 and 16, 5 and 8) and rows 0-1 to the emulation, every row with a time."""
    for call, data in sweep13.items():
        assert data["build"]["arch"] == "90" and data["build"]["error"] is None
        edge = data["edge"]["rows"]
        exact = {"ran": True, "same_as_gluon": True, "emulation_mismatches": 0}
        assert len(edge) == (19 if call == "a" else 29) and all(r == exact for r in edge.values()), call
        rows = [r for r in data["decode"] if r["variant"] != "cublas_bf16"]
        assert len({r["variant"] for r in rows if _order(r["variant"])}) == (7 if call == "a" else 17), call
        for r in rows:
            ok = "median_us" in r and r["same_as_default"] is True and r["emulation_mismatches"] == 0
            assert ok, (call, r["variant"])


def test_h200_call13_adopted_the_fastest_exact_orders_still_above_1_5x_cublas(sweep13):
    """CUDA_DECODE_RULES at M = 16 take, per projection, a configuration within 1 % of the fastest
    bit-exact one of each call that measured it, at least 1.5 % faster than call 7's choice measured
    in the same call (gate_up 4.6-5.6 %, o 5.2 %, qkv 2.4 %, down 2.2-2.3 %); qkv, gate_up and down
    stay above 1.5x cuBLAS bf16 (1.56-1.65x), o below (1.24x). M = 8 keeps call 7's rules."""
    measured = 0
    for call, data in sweep13.items():
        for role, (N, K) in LLAMA_8B.items():
            mine = {r["variant"]: r["median_us"] for r in data["decode"] if r["bucket"] == 16 and r["role"] == role}
            cub = mine.pop("cublas_bf16")
            name = det.choose_config(16, N, K).name
            assert _order(name) and det.choose_config(9, N, K).name == name
            assert det.choose_config(8, N, K).name == CALL7_CHOICE[8][role]
            if name not in mine:            # 13a did not have qkv's and o's 16-row stages
                assert call == "a" and role in ("qkv_proj", "o_proj")
                continue
            measured += 1
            assert mine[name] <= 1.01 * min(mine.values()), (call, role)
            assert mine[name] < 0.985 * mine[CALL7_CHOICE[16][role]], (call, role)
            assert (mine[name] / cub < 1.5) == (role == "o_proj"), (call, role)
    assert measured == 6


def test_h200_call13_ncu_the_snake_order_dispatches_more_ffma():
    """gate_up at M = 16 under ncu, both calls: the adopted kernel (rows in turn, 8-row stages, every
    other row's columns backwards) against call 7's (4-row stages, columns in order): fewer dispatch
    stalls per issue, more issue slots used, a busier FMA pipe and less time, the same FFMA count."""
    stall = "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio"
    issue = "smsp__issue_active.avg.pct_of_peak_sustained_active"
    fma = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
    for call in "ab":
        data = json.loads((DATA / f"ncu13{call}_gate_up_m16.json").read_text())["targets"]["gate_up_proj:16"]
        rows = {r["kernel"].split("<")[-1].split(">")[0]: r for r in data if "det_decode_kernel" in r["kernel"]}
        old, new = rows["16, 4, 4, 4, 4, 4, 3"], rows["16, 4, 4, 8, 3, 4, 7"]
        assert new[stall] < 0.9 * old[stall]
        assert new[issue] > old[issue] + 1 and new[fma] > old[fma] + 2
        assert new["gpu__time_duration.sum"] < 0.96 * old["gpu__time_duration.sum"]
        ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
        assert new[ffma] == old[ffma]


def test_h200_call13c_every_compiled_decode_kernel_at_m16_kept_the_choice():
    """Call 13c (sweep13c.json): det_call7_decode.py over every compiled decode configuration at the
    committed source, M = 8 and 16, bits checked. The adopted M = 16 rules are within 3 % of the fastest
    exact rows on every projection (on down qkv's rule ran 2.5 % faster here, 0.4 % in 13b: not
    switched, both above 1.5x); down's 224 programs on 132 SMs are not what holds it: the M = 8
    kernels as two row blocks (448 programs) took 12-25 % more time."""
    sweep = json.loads((DATA / "sweep13c.json").read_text())
    rows = [r for r in sweep["decode"] if r["bucket"] == 16 and r["variant"] != "cublas_bf16"]
    assert rows and all(r["same_as_default"] and r["emulation_mismatches"] == 0 for r in rows)
    times = {(r["variant"], r["role"]): r["median_us"] for r in rows}
    for role, (N, K) in LLAMA_8B.items():
        adopted = times[(det.choose_config(16, N, K).name, role)]
        assert adopted <= 1.03 * min(t for (v, r), t in times.items() if r == role), role
    down = times[(det.choose_config(16, 4096, 14336).name, "down_proj")]
    for name in ("dec8_8c_w4_d4_ring3_b4_ef", "dec8_8c_w4_d8_ring2_b4_ef"):
        assert times[(name, "down_proj")] > 1.12 * down


# --- call 14: the fold kernel, the waves, the SPREAD attempt (benchmarks/DETERMINISM_NOTES.md) -------

CALL14 = {name: DATA / f"{name}.json" for name in ("fold14a", "fold14b", "spread14c", "fold14d")}


@pytest.fixture(scope="module")
def call14():
    return {name: json.loads(path.read_text()) for name, path in CALL14.items()}


def _times14(data, bucket, role):
    """{(config, fold): [median us of each round]} of one call-14 sweep."""
    out: dict = {}
    for r in data["decode"]:
        if r["bucket"] == bucket and r["role"] == role and "median_us" in r:
            out.setdefault((r["config"], r.get("fold")), []).append(r["median_us"])
    return out


def test_h200_call14_every_fold_kept_every_bit(call14):
    """Four device calls, each fold (the Triton kernel; det_decode.cu's in floats or float4s, after
    the decode kernel, as its programmatic dependent, or per column tile on counters) and each
    decode kernel (the SPREAD ones too): the edge shape's whole output equal to the Triton fold's
    and to the emulation at M = 1 ... 16, the projections' whole outputs equal to the adopted
    kernel's and their sampled rows to the emulation; the tile counters left at zero."""
    for name, data in call14.items():
        assert data["edge"] and all(r["ran"] and r["same_as_triton_fold"] and r["emulation_mismatches"] == 0
                                    for r in data["edge"]), name
        checked = [r for r in data["decode"] if r["config"] != "cublas_bf16" and r["round"] == 0]
        assert checked and all("error" not in r and r["same_as_triton_fold"] and r["emulation_mismatches"] == 0
                               for r in checked), name
        assert data.get("tile_counters_left_nonzero", 0) == 0
    assert {r["fold"] for r in call14["fold14d"]["decode"] if "fold" in r} == {"triton", "after8", "wait8",
                                                                              "after16", "wait16"}


def test_h200_call14d_the_adopted_fold_is_the_programmatic_one_with_16_loads(call14):
    """Call 14d: det_decode.cu's fold as the decode kernel's programmatic dependent with 16 partials
    in flight (the adopted CUDA_FOLD_MODE) took less time than the Triton fold at M = 16 on qkv, o and
    gate_up in both rounds and was within 1 % of it on down (56 partials per output); launched after
    the decode kernel with 8 in flight it was no faster than Triton's."""
    assert det.CUDA_FOLD_MODE == cuda_gemm.FOLD_WAIT | cuda_gemm.FOLD_DEEP
    data = call14["fold14d"]
    for role, (N, K) in LLAMA_8B.items():
        t = _times14(data, 16, role)
        cfg = det.choose_config(16, N, K).name
        triton, adopted = t[(cfg, "triton")], t[(cfg, "wait16")]
        if role == "down_proj":
            assert all(abs(a / b - 1) < 0.01 for a, b in zip(adopted, triton))
        else:
            assert all(a < b for a, b in zip(adopted, triton)), role
        assert min(t[(cfg, "after8")]) >= 0.995 * min(triton), role


def test_h200_call14_waves_cost_the_16_column_kernel_its_gate_up_time(call14):
    """Calls 14b-d's wave probes (the partials alone at M = 16): the 16 x 8 kernel (three programs per
    SM, 396 at once) reached 43-45 TFLOP/s where its programs filled whole waves (396, 792) and
    under 38 at gate_up's 448 (1.13 waves); the 16 x 4 kernel (four per SM, 528 at once) moved by
    under 5 % between 1.0, 1.7 and 2.0 waves: why gate_up runs the narrower block."""
    for name in ("fold14b", "spread14c", "fold14d"):
        tf = {(r["config"], r["programs"]): r["tflops"] for r in call14[name]["waves"]}
        wide, narrow = "dec16_8c_w4_d8_ring2_b3_ef_o5", "dec16_4c_w4_d8_ring3_b4_ef_wide_o1"
        assert tf[(wide, 448)] < 38 < 43 < min(tf[(wide, 396)], tf[(wide, 792)])
        assert max(tf[(narrow, p)] for p in (528, 896, 1056)) < 1.05 * min(tf[(narrow, p)] for p in (528, 896, 1056))


def test_h200_call14c_spread_kept_the_bits_and_lost_the_time(call14):
    """Call 14c (branch call14-spread): SPREAD, min_blocks programs per SM each taking an equal share
    of the units' stages (a unit cut between two programs hands its accumulators over, so every
    output's FMAs stay in k order). Bit-exact, but slower than the adopted kernels on gate_up and down
    in both rounds: with nothing to split (396 units on 396 programs) its 16 x 8 form ran 13 % under
    the plain kernel's TFLOP/s, a register allocation with twice the same-bank FFMA operands."""
    data = call14["spread14c"]
    for role in ("gate_up_proj", "down_proj"):
        t = _times14(data, 16, role)
        adopted = t[(det.choose_config(16, *LLAMA_8B[role]).name, "triton")]
        spread = {c: v for (c, f), v in t.items() if c.endswith("_spread") and f == "triton"}
        assert spread and all(min(v) > max(adopted) for v in spread.values()), role
    tf = {(r["config"], r["programs"]): r["tflops"] for r in data["waves"]}
    assert tf[("dec16_8c_w4_d8_ring2_b3_ef_o5_spread", 396)] < 0.9 * tf[("dec16_8c_w4_d8_ring2_b3_ef_o5", 396)]


def test_h200_call14e_spread_as_pieces_kept_the_bits_and_lost_more():
    """Call 14e (branch piece-spread): SPREAD as one piece per program, bit-exact against the adopted
    kernels at M = 9 and 16 and the emulation, the handoff flags left at zero; and slower than the
    adopted kernel by over 15 % on gate_up and down in both rounds (and than its plain form, where
    that ran too)."""
    data = json.loads((DATA / "piece14e.json").read_text())
    assert data["flags_left_nonzero"] == 0
    rows = [r for r in data["rows"] if r["config"] != "cublas_bf16"]
    assert all("error" not in r for r in rows)
    assert all(r["same_as_adopted"] and r["emulation_mismatches"] == 0 for r in rows if r["round"] == 0)
    for role, (N, K) in LLAMA_8B.items():
        mine = [r for r in rows if r["role"] == role]
        if not mine:
            continue
        t = {}
        for r in mine:
            t.setdefault(r["config"], []).append(r["median_us"])
        adopted = max(t[det.choose_config(16, N, K).name])
        for name, times in t.items():
            if name.endswith("_spread"):
                assert min(times) > 1.15 * adopted, name
                plain = t.get(name.removesuffix("_spread"))
                assert plain is None or min(times) > max(plain), name


# --- call 15: one-warp programs and the planned kernel (branch call15-plan; DETERMINISM_NOTES.md) ----

def _sweep_times(rows) -> dict:
    """{(role, config): [median us of each round]} of a sweep (calls 15 and 16)."""
    out: dict = {}
    for r in rows:
        if "median_us" in r:
            out.setdefault((r["role"], r["config"]), []).append(r["median_us"])
    return out


def _sweep_exact(data) -> tuple[int, int]:
    """Asserts that every edge row of a sweep (calls 15 and 16) ran bit-exact against the adopted
    kernel and the emulation, and every projection row of its first round too; returns (edge rows,
    checked projection rows)."""
    assert all(r["ran"] and r["same_as_adopted"] and r["emulation_mismatches"] == 0 for r in data["edge"])
    checked = [r for r in data["decode"] if r["config"] != "cublas_bf16" and r["round"] == 0]
    assert all(r["same_as_adopted"] and r["emulation_mismatches"] == 0 for r in checked)
    return len(data["edge"]), len(checked)


def _ncu_m16(call: str) -> dict:
    """{role: {kernel template arguments: counters}} of a call's ncu runs at M = 16 ("15a": ncu15a_m16.json),
    decode kernels only."""
    data = json.loads((DATA / f"ncu{call}_m16.json").read_text())["targets"]
    return {t.split(":")[0]: {r["kernel"].split("<", 1)[1].split(">(")[0]: r for r in rows if "fold" not in r["kernel"]}
            for t, rows in data.items()}


def test_h200_call15a_programs_of_one_or_two_warps_kept_the_bits_and_won_nothing():
    """Call 15a (sweep15a.json): ten configurations of one or two warps per program (16 x 8 and
    16 x 4 blocks, 7-9 programs per SM, so that down's 896 one-warp programs fit in one wave and
    gate_up's fill 1.94 waves). Every one bit-exact (the edge shape with a bias at M = 1 ... 16; whole
    outputs and the emulation's rows on the projections), none more than 1 % faster than the adopted
    kernel on any projection (down: a tie), and all slower on qkv, o and gate_up."""
    data = json.loads((DATA / "sweep15a.json").read_text())
    assert _sweep_exact(data) == (50, 4 * 11)
    assert data["info"]["dec16_8c_w1_d8_ring2_b7_ef_o5"]["blocks_per_sm"] >= 7
    t = _sweep_times(data["decode"])
    for role, (N, K) in LLAMA_8B.items():
        adopted = min(t[(role, det.choose_config(16, N, K).name)])
        new = {c: min(v) for (r, c), v in t.items() if r == role and ("_w1_" in c or "_w2_" in c)}
        assert len(new) == 10 and min(new.values()) > 0.99 * adopted, role
        if role != "down_proj":
            assert min(new.values()) > 1.03 * adopted, role


def test_h200_call15a_counters_the_time_is_the_busiest_sub_partitions_instructions():
    """Why one-warp programs balance nothing (ncu15a): a program's warps sit one per SM sub-partition,
    and each warp's unit is the same 16 x TN x 256 FMAs whatever the program's shape, so the busiest
    sub-partition holds ceil(units / (4 x 132)) units. The counters fit that: down's adopted kernel
    (896 warp units: 2 on the busiest) takes the time of 2 units' instructions at 70-78 % issue, gate_up's
    (3584 units of 16 x 4: 7) that of 7 at 76-84 %; down's one-warp kernel executes the same
    instructions (within 3 %) in the same time (within 2 %)."""
    ncu = _ncu_m16("15a")
    inst, clock = "smsp__inst_executed.sum", "sm__cycles_elapsed.avg.per_second"

    def issue_rate(r, units, busiest):
        cycles = r["gpu__time_duration.sum"] * 1e-9 * r[clock]
        return r[inst] / units * busiest / cycles

    down, gate_up = ncu["down_proj"], ncu["gate_up_proj"]
    adopted, one_warp = down["16, 8, 4, 8, 2, 3, 21"], down["16, 8, 1, 8, 2, 7, 21"]
    assert 0.70 < issue_rate(adopted, 896, 2) < 0.78
    assert 0.76 < issue_rate(gate_up["16, 4, 4, 8, 3, 4, 7"], 3584, 7) < 0.84
    assert abs(one_warp[inst] / adopted[inst] - 1) < 0.03
    assert abs(one_warp["gpu__time_duration.sum"] / adopted["gpu__time_duration.sum"] - 1) < 0.02


def test_h200_call15c_deeper_rings_do_not_feed_the_m16_kernels_faster():
    """Call 15c (sweep15c.json, branch call15c): the adopted M = 16 blocks with rings of 3, 4 and 6
    stages and 16-row stages, bit-exact everywhere. None is 2 % faster than the adopted kernel on any
    projection; every 16 x 8 form is slower on down. The long-scoreboard stalls are not the ring's
    wait for DRAM (ncu15c): the ring of 3 raised them on down (0.13 -> 0.18 per issue) and lost."""
    data = json.loads((DATA / "sweep15c.json").read_text())
    assert _sweep_exact(data)[1] == 4 * 8
    t = _sweep_times(data["decode"])
    for role, (N, K) in LLAMA_8B.items():
        adopted = det.choose_config(16, N, K).name
        new = {c: min(v) for (r, c), v in t.items() if r == role and c not in (adopted, "cublas_bf16")}
        assert len(new) == 7 and min(new.values()) > 0.98 * min(t[(role, adopted)]), role
    down = {c: min(v) for (r, c), v in t.items() if r == "down_proj" and c.startswith("dec16_8c")}
    assert min(down, key=down.get) == det.choose_config(16, *LLAMA_8B["down_proj"]).name
    ncu = _ncu_m16("15c")["down_proj"]
    stall = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
    ring2, ring3 = ncu["16, 8, 4, 8, 2, 3, 21"], ncu["16, 8, 4, 8, 3, 3, 21"]
    assert ring3[stall] > ring2[stall] and ring3["gpu__time_duration.sum"] > ring2["gpu__time_duration.sum"]


def test_h200_call15e_the_hoisted_ring_address_is_a_tie():
    """Call 15e (sweep15e.json, branch call15d): the forms of 15d that ran (the ring's shared address
    computed once, flag 64, on gate_up's 16 x 4 and qkv's 8 x 4 blocks), bit-exact, tied with the same
    block without the flag on their own projection: the best rounds within 1 %, single rounds
    within 2.5 % (gate_up's second round of the plain block was 2.1 % slow)."""
    data = json.loads((DATA / "sweep15e.json").read_text())
    _sweep_exact(data)
    t = _sweep_times(data["decode"])
    for role in ("gate_up_proj", "qkv_proj"):
        plain = det.choose_config(16, *LLAMA_8B[role])
        hoisted = dataclasses.replace(plain, flags=plain.flags | 64)
        mine, theirs = t[(role, hoisted.name)], t[(role, plain.name)]
        assert abs(min(mine) / min(theirs) - 1) < 0.01, role
        assert all(abs(h / p - 1) < 0.025 for h, p in zip(mine, theirs)), role


def test_h200_call15b_the_planned_kernel_kept_the_bits_and_lost_down():
    """Call 15b (plan15b.json): the planned kernel (each program's block, 16 x 8, 16 x 4 or 16 x 2, and
    unit from decode_plan's host plan, so that each SM's share is near the mean). Bit-exact
    everywhere. It lost on down by over 10 % against the adopted kernel: the SMs' shares were equal,
    but each warp's instructions are serial, so an SM's 16 x 8 warp ran on alone after its 16 x 4 and
    16 x 2 neighbours; its control (the 16 x 8 block alone on the plain kernel's grid) stayed within
    3 % of the adopted kernel. It won 1-4 % on qkv and gate_up (not adopted: inside the call-to-call
    movement of the ratios, for a second decode path). And the hardware did not deal the programs
    round-robin as the plan assumed: under 70 % of down's programs landed on their round's SM."""
    data = json.loads((DATA / "plan15b.json").read_text())
    assert data["info"]["registers"] == 168 and data["info"]["local_bytes"] == 0
    _sweep_exact(data)
    t = _sweep_times(data["decode"])
    name = {role: det.choose_config(16, N, K).name for role, (N, K) in LLAMA_8B.items()}
    adopted = {role: max(t[(role, name[role])]) for role in LLAMA_8B}
    assert min(t[("down_proj", "plan")]) > 1.1 * adopted["down_proj"]
    assert max(t[("down_proj", "widest_only")]) < 1.03 * min(t[("down_proj", name["down_proj"])])
    assert 0.96 * adopted["qkv_proj"] < max(t[("qkv_proj", "plan")]) < 0.99 * min(t[("qkv_proj", name["qkv_proj"])])
    assert max(t[("gate_up_proj", "blocks_8_4")]) < 0.99 * min(t[("gate_up_proj", name["gate_up_proj"])])
    down = next(r for r in data["placement"] if r["role"] == "down_proj" and r["plan"] == "plan")
    assert down["programs_on_round_robin_sm"] < 0.7 * down["programs"] and down["sms_used"] == data["sms"]
    ncu = _ncu_m16("15b")["down_proj"]
    ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
    plan = next(r for k, r in ncu.items() if "Block" in k)
    assert plan[ffma] == ncu["16, 8, 4, 8, 2, 3, 21"][ffma]
    assert plan["gpu__time_duration.sum"] > 1.1 * ncu["16, 8, 4, 8, 2, 3, 21"]["gpu__time_duration.sum"]


def test_h200_call16_the_balanced_kernel_kept_the_bits_balanced_the_work_and_lost():
    """Call 16 (sweep16.json, ncu16_m16.json; branch call16-balanced): the balanced decode kernel,
    CPS programs per SM, each an equal share of all units' stages, a unit cut between two programs
    finished from the other's carried accumulators. Every row bit-exact, eager and from CUDA-graph
    replays (the flags come back to zero), K not a whole number of chains declined. It lost on every
    projection by over 8 %. On down its 16 x 4 form at 3 per SM did balance the work (the time within
    7 % of the mean sub-partition's instructions over its issue rate, where the adopted kernel's is the
    busiest's: 2 units against 1.7 on average), but it executed over 12 % more instructions for the
    same FFMAs and issued on 4 points fewer cycles."""
    data = json.loads((DATA / "sweep16.json").read_text())
    assert len(data["edge"]) == 30 and all(r["graph_same_as_adopted"] for r in data["edge"])
    assert all(data["declined_k544"].values()) and len(data["declined_k544"]) == 6
    declined = {(r["role"], r["config"]) for r in data["decode"] if "error" in r}
    assert declined == {("gate_up_proj", "bal8_4c_w4_d8_ring3_b2_ef_wide_o1"),
                        ("gate_up_proj", "bal16_2c_w4_d8_ring4_b2_ef_wide")}   # over 6 pieces a program
    ran = {**data, "decode": [r for r in data["decode"] if (r["role"], r["config"]) not in declined]}
    assert _sweep_exact(ran) == (30, 4 * 7 - 2)
    t = _sweep_times(ran["decode"])
    for role, (N, K) in LLAMA_8B.items():
        adopted = max(t[(role, det.choose_config(16, N, K).name)])
        balanced = [min(v) for (r, c), v in t.items() if r == role and c.startswith("bal")]
        assert len(balanced) == (4 if role == "gate_up_proj" else 6) and min(balanced) > 1.08 * adopted, role
    ncu = _ncu_m16("16")["down_proj"]
    inst, issue = "smsp__inst_executed.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active"
    ffma, clock = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__cycles_elapsed.avg.per_second"
    adopted, bal = ncu["16, 8, 4, 8, 2, 3, 21"], ncu["16, 4, 4, 8, 3, 3, 7"]

    def cycles_over_mean(r, share=1.0):   # cycles / (the mean sub-partition's instructions x share / issue rate)
        return r["gpu__time_duration.sum"] * 1e-9 * r[clock] / (r[inst] / 528 * share / (r[issue] / 100))

    assert bal[ffma] == adopted[ffma] and bal[inst] > 1.12 * adopted[inst] and bal[issue] < adopted[issue] - 4
    assert cycles_over_mean(bal) < 1.07 and cycles_over_mean(adopted) > 1.15
    assert abs(cycles_over_mean(adopted, 2 / (896 / 528)) - 1) < 0.05
