"""The second round of real 2 x H200 captures (tests/data/h200_tp/PROVENANCE.md, calls call_tp2.sh
and call8.sh): Llama-3.1-70B at TP 2 and batch 8, the same per-rank shapes on one GPU (TP 1), and an
unmodified user program (a Hugging Face Llama split by hand, `dist.all_reduce` in forward hooks,
launched by torchrun) whose NCCL all-reduces smlens's annotation timed with CUDA events."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from profiler.ingest.nvtx import PHASES
from profiler.workloads.models import MODELS, shard
from views.registry import compute_views
from views.vocabulary import GEMM_ROLES

DATA = Path(__file__).parent / "data"
TP = DATA / "h200_tp"
BATCH, PROMPT = 8, 512


def gemm_shapes(kernels):
    """{(phase, role): {(M, N, K), ...}} of the profiled GEMMs."""
    gemms = kernels[kernels["role"].isin(GEMM_ROLES)]
    shapes: dict = {}
    for phase, role, m, n, k in gemms[["phase", "role", "shape_m", "shape_n", "shape_k"]].itertuples(index=False):
        shapes.setdefault((phase, role), set()).add((int(m), int(n), int(k)))
    return shapes


@pytest.fixture(scope="module")
def tp70():
    return read_capture(TP / "llama-3.1-70b-tp2-b8-p512.csv.gz").kernels


@pytest.fixture(scope="module")
def program():
    return read_capture(TP / "hf-tp-llama-3.1-8b-tp2-b8-p512.csv.gz").kernels


def test_70b_tp2_per_rank_shapes_and_ranks(tp70):
    profiled = tp70[tp70["time_source"] == "ncu"]
    assert profiled.groupby("rank").size().to_dict() == {0: 54, 1: 54}
    assert profiled.groupby("rank")["device"].unique().map(list).to_dict() == {0: [0], 1: [1]}
    expected = shard(MODELS["llama-3.1-70b"], 2)
    for rank in (0, 1):
        shapes = gemm_shapes(profiled[profiled["rank"] == rank])
        assert set(shapes) == {(p, r) for p in PHASES for r in GEMM_ROLES}
        for (phase, role), found in shapes.items():
            tokens = BATCH * (1 if phase == "decode" else PROMPT)
            assert found == {expected.gemm_shapes(tokens)[role]}, (rank, phase, role)


def test_70b_tp2_all_reduces_timed_over_eight_layers(tp70):
    timed = tp70[tp70["time_source"] == "cuda_events"]
    assert timed.groupby(["phase", "rank"]).size().to_dict() == {(p, r): 2 for p in PHASES for r in (0, 1)}
    # bf16 [tokens, 8192]; each prefill row the median of 8 layers' calls, decode of 8 layers x 7 steps
    assert timed.groupby("phase")["comm_bytes"].unique().map(list).to_dict() == {
        "cold_prefill": [BATCH * PROMPT * 8192 * 2], "warm_prefill": [BATCH * PROMPT * 8192 * 2],
        "decode": [BATCH * 8192 * 2]}
    assert timed.groupby("phase")["comm_samples"].unique().map(list).to_dict() == {
        "cold_prefill": [8], "warm_prefill": [8], "decode": [56]}
    communication = compute_views(tp70).communication.set_index(["phase", "rank"])
    # a 64 MiB all-reduce over NVLink: 250-290 µs, 230-270 GB/s of bus bandwidth on the faster rank
    prefill = communication.loc["warm_prefill"]
    assert prefill["comm_transfer_ns"].between(2 * 230e3, 2 * 290e3).all()
    assert prefill["bus_gbps"].between(230, 290).all()
    # prefill's compute dwarfs its all-reduces; decode's all-reduces outlast its compute
    assert (prefill["comm_share_pct"] < 15).all()
    assert (communication.loc["decode"]["comm_share_pct"] > 50).all()


def test_tp1_slice_has_the_shapes_of_one_tp2_rank(tp70):
    """`--model llama-3.1-70b/tp2` on one GPU (the profiling-cost comparison of BENCHMARKS.md)
    profiles what each TP 2 rank runs: the same GEMM shapes and kernel count, no communication."""
    one = read_capture(TP / "tp1" / "llama-3.1-70b-rank-tp1-b8-p512.csv.gz").kernels
    rank0 = tp70[(tp70["rank"] == 0) & (tp70["time_source"] == "ncu")]
    assert gemm_shapes(one) == gemm_shapes(rank0) and len(one) == len(rank0) == 54
    assert one["rank"].isna().all() and "allreduce" not in set(one["role"])
    eight = read_capture(TP / "tp1" / "llama-3.1-8b-rank-tp1-b8-p512.csv.gz").kernels
    eight_tp2 = read_capture(TP / "llama-3.1-8b-tp2-b8-p512.csv.gz").kernels
    assert gemm_shapes(eight) == gemm_shapes(eight_tp2[(eight_tp2["rank"] == 1) & (eight_tp2["time_source"] == "ncu")])


def test_a_programs_ranks_roles_and_per_rank_shapes(program):
    """The program names its modules as Hugging Face does; the annotation gives roles and shapes
    (q, k and v separate: N = 16 and 4 heads of 128), the rank comes from each process's GPU."""
    profiled = program[program["time_source"] == "ncu"]
    assert profiled.groupby("rank")["device"].unique().map(list).to_dict() == {0: [0], 1: [1]}
    assert set(profiled["phase"]) == set(PHASES)
    assert set(profiled.loc[profiled["kind"] == "gemm", "role_source"]) == {"annotation"}
    for rank in (0, 1):
        shapes = gemm_shapes(profiled[profiled["rank"] == rank])
        for phase in PHASES:
            m = BATCH * (1 if phase == "decode" else PROMPT)
            assert shapes[(phase, "qkv_proj")] == {(m, 2048, 4096), (m, 512, 4096)}
            assert shapes[(phase, "o_proj")] == {(m, 4096, 2048)}
            assert shapes[(phase, "gate_up_proj")] == {(m, 7168, 4096)}
            assert shapes[(phase, "down_proj")] == {(m, 4096, 7168)}


def test_a_programs_nccl_all_reduces_timed_with_cuda_events(program):
    """smlens ran the program once more without ncu; the annotation timed each dist.all_reduce on
    its rank's stream: per phase and rank one row per call site (after o_proj, inside the attention
    module's range; after down_proj, inside the MLP's), the median of 8 layers (prefill) or of 8
    layers x 15 decode steps."""
    timed = program[program["time_source"] != "ncu"]
    assert set(timed["time_source"]) == {"cuda_events"} and set(timed["role"]) == {"allreduce"}
    assert timed.groupby(["phase", "rank"]).size().to_dict() == {(p, r): 2 for p in PHASES for r in (0, 1)}
    assert timed.groupby("phase")["comm_bytes"].unique().map(list).to_dict() == {
        "cold_prefill": [BATCH * PROMPT * 4096 * 2], "warm_prefill": [BATCH * PROMPT * 4096 * 2],
        "decode": [BATCH * 4096 * 2]}
    assert timed.groupby("phase")["comm_samples"].unique().map(list).to_dict() == {
        "cold_prefill": [8], "warm_prefill": [8], "decode": [120]}
    communication = compute_views(program).communication.set_index(["phase", "rank"])
    # a 32 MiB all-reduce: about 140 µs on the faster rank, the built-in workload's bus bandwidth
    prefill = communication.loc["warm_prefill"]
    assert prefill["comm_transfer_ns"].between(2 * 120e3, 2 * 170e3).all()
    assert prefill["bus_gbps"].between(200, 290).all()
    assert (communication.loc["decode"]["comm_share_pct"] > 40).all()
