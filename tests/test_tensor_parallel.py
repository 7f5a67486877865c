"""Tensor parallel: the sharding arithmetic, the ranks in real 2 x H200 captures
(tests/data/h200_tp), the launcher and the workload on the CPU (gloo), the timed collectives merged
into a capture, the views per rank, and `smlens profile --tp` end to end with a fake ncu."""
from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.errors import BadInput
from profiler.ingest import nvtx
from profiler.ingest.capture import read_capture
from profiler.run import distributed, ncu
from profiler.workloads import tensor_parallel as tpw
from profiler.workloads.models import MODELS, get_model, shard, valid_tp
from reports.verdict_text import group_text, summary_text
from reports.formats.views_json import views_document, views_json
from tests.cli import smlens
from tests.test_profile import FAKES, ncu_calls, one_line_error

DATA = Path(__file__).parent / "data"
TP = DATA / "h200_tp"
TP8_B8 = TP / "llama-3.1-8b-tp2-b8-p512.csv.gz"
ONE_GPU_8B_B8 = DATA / "h200_runs" / "llama-3.1-8b-b8-p512.csv.gz"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the tensor-parallel workload runs torch")
PY = sys.executable


# --- sharding arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("model_id", [m for m in MODELS])
@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_per_rank_shapes_of_every_model(model_id, tp):
    model = MODELS[model_id]
    if tp not in valid_tp(model):
        with pytest.raises(BadInput, match=f"--tp {tp}: {model_id} has"):
            shard(model, tp)
        return
    part = shard(model, tp)
    r, d = part.rank_model, model.head_dim
    shapes = part.gemm_shapes(512)
    # column-parallel: N divided (the rank's own heads and MLP columns), K whole
    assert shapes["qkv_proj"] == (512, (model.heads // tp + 2 * r.kv_heads) * d, model.hidden)
    assert shapes["gate_up_proj"] == (512, 2 * model.mlp // tp, model.hidden)
    # row-parallel: K divided, N whole (the all-reduce sums the ranks' partial outputs)
    assert shapes["o_proj"] == (512, model.hidden, model.heads * d // tp)
    assert shapes["down_proj"] == (512, model.hidden, model.mlp // tp)
    assert r.heads % r.kv_heads == 0  # each rank's query heads share its KV heads (GQA)
    if part.kv_layout == "split":
        assert r.kv_heads * tp == model.kv_heads and part.kv_copies == 1
        assert sum([shapes["qkv_proj"][1]] * tp) == model.qkv_width
    else:  # fewer KV heads than ranks: one per rank, each held by tp / kv_heads ranks
        assert tp > model.kv_heads and r.kv_heads == 1 and part.kv_copies == tp // model.kv_heads


def test_which_splits_are_refused_and_which_replicate():
    assert valid_tp(MODELS["qwen2.5-7b"], 8) == [1, 2, 4]  # 28 query heads
    with pytest.raises(BadInput, match="28 query heads.*choose --tp from 1, 2, 4$"):
        shard(MODELS["qwen2.5-7b"], 8)
    with pytest.raises(BadInput, match="--tp must be 1 or more"):
        shard(MODELS["tiny"], 0)
    assert shard(MODELS["llama-3.1-8b"], 8).kv_layout == "split"
    replicated = shard(MODELS["llama-3.1-70b"], 16)
    assert (replicated.kv_layout, replicated.rank_model.kv_heads, replicated.kv_copies) == ("replicated", 1, 2)
    assert shard(MODELS["tiny"], 4).kv_layout == "replicated"


def test_a_rank_slice_is_a_model_of_its_own():
    one = get_model("Llama-3.1-70B/tp2")
    assert one == shard(MODELS["llama-3.1-70b"], 2).rank_model
    assert (one.id, one.heads, one.kv_heads, one.mlp, one.hidden) == ("llama-3.1-70b/tp2", 32, 4, 14336, 8192)
    with pytest.raises(BadInput, match="--tp 3"):
        get_model("llama-3.1-8b/tp3")


# --- the real captures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tp8():
    return read_capture(TP8_B8).kernels


def test_every_kernel_of_a_real_capture_has_its_rank(tp8):
    assert tp8["rank"].notna().all()
    profiled = tp8[tp8["time_source"] == "ncu"]
    # one process per rank and invocation (cold, warm+decode, and the timing run), each on its GPU
    assert profiled.groupby("rank")["device"].unique().map(list).to_dict() == {0: [0], 1: [1]}
    by_rank = profiled.groupby("rank")["process_id"].unique().map(set)
    assert len(by_rank[0]) == 2 and len(by_rank[1]) == 2 and not by_rank[0] & by_rank[1]
    assert profiled.groupby("rank").size().to_dict() == {0: 54, 1: 54}


def test_nccl_range_left_open_names_no_phase_or_role(tp8):
    profiled = tp8[tp8["time_source"] == "ncu"]
    assert all(any(e.startswith("NCCL:ncclCommInitRankConfig") for e in s) for s in profiled["nvtx_stack"])
    assert set(profiled["phase"]) == {"cold_prefill", "warm_prefill", "decode"}
    assert not (profiled["role"] == "other").any() and (profiled["role_source"] == "nvtx").all()
    # had NCCL named its range after a phase or role, that would still not count
    stack = ["smlens:decode", "smlens:step_1", "smlens:layer_0", "smlens:o_proj M=8 N=4096 K=2048",
             "smlens_rank:rank=1 tp=2 device=1", "NCCL:qkv_proj", "NCCL:cold_prefill"]
    info = nvtx.classify(stack, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT")
    assert (info["phase"], info["role"], info["shape_k"], info["rank"]) == ("decode", "o_proj", 2048, 1)


def test_real_capture_per_rank_shapes_are_the_single_gpu_ones_divided(tp8):
    """Column-parallel N and row-parallel K halved against the single-GPU capture of the same
    model and batch; the other dimension the same."""
    one = read_capture(ONE_GPU_8B_B8).kernels
    keys = ["phase", "role", "shape_m", "shape_n", "shape_k"]
    gemms = lambda k: (k[k["role"].isin(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])][keys]
                       .drop_duplicates().set_index(["phase", "role"]).sort_index())
    full, rank = gemms(one), gemms(tp8[tp8["rank"] == 1])
    assert list(full.index) == list(rank.index) and len(full) == 12
    for (phase, role), row in rank.iterrows():
        m, n, k = full.loc[(phase, role)]
        column_parallel = role in ("qkv_proj", "gate_up_proj")
        assert tuple(row) == ((m, n // 2, k) if column_parallel else (m, n, k // 2)), (phase, role)


def test_real_capture_timed_collectives(tp8):
    timed = tp8[tp8["time_source"] == "cuda_events"]
    assert len(timed) == 12 and set(timed["role"]) == {"allreduce"} and set(timed["kind"]) == {"communication"}
    # 2 per profiled layer (after o_proj, after down_proj), per phase and rank; bf16 [tokens, 4096]
    assert timed.groupby(["phase", "rank"]).size().to_dict() == {
        (p, r): 2 for p in ("cold_prefill", "warm_prefill", "decode") for r in (0, 1)}
    sizes = timed.groupby("phase")["comm_bytes"].unique().map(list).to_dict()
    assert sizes == {"cold_prefill": [8 * 512 * 4096 * 2], "warm_prefill": [8 * 512 * 4096 * 2],
                     "decode": [8 * 4096 * 2]}
    assert (timed["gpu__time_duration.sum"] > 0).all() and timed["sm__cycles_active.avg"].isna().all()
    # the profiled kernels' counters stay numbers beside the timed rows' empty cells ("35,836.82")
    profiled = tp8[tp8["time_source"] == "ncu"]
    assert profiled["sm__cycles_active.avg"].between(100, 1e7).all()


# --- the NVTX parser -------------------------------------------------------------------------------

def test_rank_marker_and_a_process_without_one():
    assert nvtx.rank_marker(["smlens:decode", "smlens_rank:rank=3 tp=4 device=3"]) == 3
    assert nvtx.rank_marker(["myapp:rank = 12"]) == 12 and nvtx.rank_marker(["smlens:ranked"]) is None
    assert nvtx.classify(["smlens_rank:rank=2 tp=4"], "x")["role"] == "other"  # a rank names no role
    from profiler.ingest.capture_table import Classifier
    classifier = Classifier()
    cells = pd.Series(['1  "app:prefill:a:b:c:d:e:f"', '1  "smlens_rank:rank=1:a:b:c:d:e:f"', "", ""])
    derived = classifier.derive(cells, pd.Series(["k"] * 4), pd.Series([10, 10, 10, 11]))
    # the kernel launched before its process opened its rank range takes the process's rank
    assert derived["rank"].tolist() == [1, 1, 1, pd.NA]


# --- the launcher and the workload on the CPU ---------------------------------------------------------

def _launch(*command, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    return subprocess.run([PY, "-m", "profiler.run.distributed", "--nproc", "2", "--", *command],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_a_rank_that_dies_stops_the_others():
    # rank 0 would wait 10 minutes: the launcher must stop it once rank 1 has failed
    done = _launch(PY, "-c", "import os, sys, time\n"
                             "if os.environ['RANK'] == '1': sys.exit(5)\n"
                             "time.sleep(600)", timeout=60)
    assert done.returncode == 5
    assert done.stderr.strip().splitlines()[-1] == "smlens tp: rank 1 exited with code 5; stopping the other 1 rank(s)"


def test_the_launcher_sets_the_rank_environment_and_no_multicast():
    done = _launch(PY, "-c", "import os; os.write(1, (','.join(os.environ[k] for k in ('RANK', 'LOCAL_RANK', "
                             "'WORLD_SIZE', 'NCCL_NVLS_ENABLE', 'TORCH_SYMM_MEM_DISABLE_MULTICAST', "
                             "'NVSHMEM_DISABLE_NVLS')) + '\\n').encode())")
    assert done.returncode == 0 and sorted(done.stdout.split()) == ["0,0,2,0,1,1", "1,1,2,0,1,1"]


@needs_torch
def test_a_process_group_that_cannot_start(tmp_path):
    """NCCL on a machine without it: each rank says so in one line, the launcher exits 3."""
    done = _launch(PY, "-m", "profiler.workloads.tensor_parallel", "--model", "tiny", "--prompt", "4",
                   "--layers", "1", "--device", "cpu", "--backend", "nccl")
    assert done.returncode == tpw.EXIT_INIT_FAILED
    assert "smlens tp: rank 0: the nccl process group could not start" in done.stderr
    assert "Traceback" not in done.stderr


@needs_torch
def test_the_sharded_workload_with_gloo_times_every_all_reduce(tmp_path):
    done = _launch(PY, "-m", "profiler.workloads.tensor_parallel", "--model", "tiny", "--prompt", "8",
                   "--layers", "3", "--decode-steps", "2", "--batch", "2", "--device", "cpu",
                   "--time-collectives", str(tmp_path))
    assert done.returncode == 0, done.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert (report["rank"], report["tp"], report["backend"], report["method"]) == (rank, 2, "gloo", "wall_clock")
        records = pd.DataFrame(report["records"])
        # after o_proj and after down_proj, in every layer of every forward: 2 prefills, 2 decode steps
        assert len(records) == 2 * 3 * (2 + 2)
        assert records.groupby("phase").size().to_dict() == {"cold_prefill": 6, "warm_prefill": 6, "decode": 12}
        assert set(records["after"]) == {"o_proj", "down_proj"}
        assert set(records[records.phase == "decode"]["step"]) == {0, 1}
        # bf16 [batch, tokens, hidden]: prefill 2 x 8 x 64, decode 2 x 1 x 64
        assert records.groupby("phase")["bytes"].unique().map(list).to_dict() == {
            "cold_prefill": [2048], "warm_prefill": [2048], "decode": [256]}
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {o["model"] for o in outputs} == {"tiny/tp2"} and all(o["finite"] for o in outputs)


# --- merging the timed collectives into a capture -------------------------------------------------

def _reports():
    """Two ranks' timings of a 2-layer workload with 3 decode steps."""
    out = []
    for rank in (0, 1):
        records = []
        for phase, steps in (("cold_prefill", [None]), ("warm_prefill", [None]), ("decode", [0, 1, 2])):
            for step in steps:
                for layer in (0, 1):
                    for after in ("o_proj", "down_proj"):
                        time_ns = 1000 * (layer + 1) + (5000 if step == 0 else 0) + 100 * rank
                        records.append({"phase": phase, "step": step, "layer": layer, "after": after,
                                        "bytes": 4096, "dtype": "bf16", "time_ns": time_ns})
        out.append({"rank": rank, "tp": 2, "device": rank, "backend": "nccl", "method": "cuda_events",
                    "pid": 100 + rank, "records": records})
    return out


def test_comm_rows_follow_the_profiled_layer():
    from profiler.workloads.decoder import WorkloadConfig
    config = WorkloadConfig(MODELS["tiny"], layers=2, decode_steps=3)
    rows = distributed.comm_rows(_reports(), config, dedup=True)
    assert len(rows) == 2 * 3 * 2  # rank x phase x collective
    decode = [r for r in rows if r["phase"] == "decode" and r["rank"] == 1 and r["after"] == "o_proj"]
    # decode step 1 stands for the steps after the first; step 0 (5 µs more here) is left out
    assert [(r["step"], r["layer"], r["samples"], r["time_ns"]) for r in decode] == [(1, 0, 4, 1600)]
    every = distributed.comm_rows(_reports(), config, dedup=False)
    assert len(every) == 2 * 2 * (1 + 1 + 3) * 2 and {r["samples"] for r in every} == {1}


def _ncu_rows_only(source: Path, target: Path, keep_rank_markers: bool = True) -> Path:
    """A TP capture as ncu wrote it: no timed rows, no columns smlens added (and, for a program of
    the user's, no rank ranges)."""
    lines = gzip.open(source, "rt", encoding="utf-8").read().splitlines()
    rows = list(csv.reader(lines))
    header = rows[0]
    keep = [i for i, name in enumerate(header) if name not in (distributed.TIME_SOURCE,
                                                               distributed.COMM_BYTES, distributed.COMM_SAMPLES)]
    source_col, push_pop = header.index(distributed.TIME_SOURCE), header.index(
        next(h for h in header if h.startswith("thread Domain:Push/Pop")))
    out = []
    for row in [rows[0], rows[1]] + [r for r in rows[2:] if r[source_col] == "ncu"]:
        if not keep_rank_markers and row is not rows[0] and row is not rows[1]:
            tid, _, rest = row[push_pop].partition("  ")
            row[push_pop] = "  ".join([tid] + [e for e in rest.split("  ") if "smlens_rank:" not in e])
        out.append([row[i] for i in keep])
    with open(target, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(out)
    return target


def test_finish_capture_merges_the_timed_collectives(tmp_path, monkeypatch):
    from profiler.workloads.decoder import WorkloadConfig
    path = _ncu_rows_only(TP8_B8, tmp_path / "merged.csv")
    monkeypatch.setattr(distributed, "time_collectives", lambda config, tp, deadline: _reports())
    config = WorkloadConfig(MODELS["tiny"], layers=2, decode_steps=3)
    tags = distributed.finish_capture(path, 2, functools.partial(distributed._workload_rows, config, 2, True, None))
    assert tags["tp"] == "2" and tags["rank_source"] == "nvtx" and "CUDA events" in tags["comm_time"]
    kernels = read_capture(path).kernels
    timed = kernels[kernels["time_source"] == "cuda_events"]
    assert len(kernels) == 108 + 12 and len(timed) == 12
    assert set(timed["role"]) == {"allreduce"} and timed["rank"].tolist() == [0] * 6 + [1] * 6
    decode = timed[(timed.phase == "decode") & (timed["rank"] == 0)]
    assert decode["gpu__time_duration.sum"].tolist() == [1500.0, 1500.0]  # ns, median of layers 0 and 1
    assert [s[1:3] for s in decode["nvtx_stack"].map(list)] == [["smlens:decode", "smlens:step_1"]] * 2
    # the counters of the profiled kernels are untouched
    before = read_capture(TP8_B8).kernels
    assert np.allclose(kernels["sm__cycles_active.avg"][:108], before["sm__cycles_active.avg"][:108])


def test_finish_capture_ranks_a_program_by_its_gpus(tmp_path):
    path = _ncu_rows_only(TP8_B8, tmp_path / "merged.csv", keep_rank_markers=False)
    assert read_capture(path).kernels["rank"].isna().all()
    tags = distributed.finish_capture(path, 2, None)
    assert tags["rank_source"] == "device" and tags["comm_time"].startswith("not measured")
    kernels = read_capture(path).kernels
    assert (kernels["rank"] == kernels["device"]).all() and len(kernels) == 108


# --- the views per rank ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tp8_views(tp8):
    from views.registry import compute_views
    return compute_views(tp8)


def test_groups_per_rank_only_for_a_run_with_ranks(tp8_views):
    from views.registry import compute_views
    groups = tp8_views.groups
    assert "rank" in groups.columns and set(groups["rank"]) == {0, 1}
    assert len(tp8_views.kernels) == 108  # the timed rows are not kernels the views read counters of
    one = compute_views(read_capture(ONE_GPU_8B_B8).kernels)
    assert "rank" not in one.groups.columns and "rank" not in one.gap.columns
    assert one.communication.empty and one.imbalance.empty and "communication" not in views_document(one)
    # each rank's shares are of its own time: its roles (collectives included) make 100 %
    roles = tp8_views.groups
    assert np.allclose(roles.groupby("rank")["time_share_pct"].sum().to_numpy(), [100.0, 100.0])


def test_ranks_without_timed_collectives(tp8):
    """A TP program profiled without timing its collectives (--no-annotate, a failed timing run):
    the views still group by rank, each rank's shares of its own kernels' time."""
    from views.registry import compute_views
    profiled = tp8[tp8["time_source"] == "ncu"].reset_index(drop=True)
    views = compute_views(profiled)
    per_rank = profiled.groupby("rank")["gpu__time_duration.sum"].sum()
    assert views.rank_time_ns == pytest.approx(per_rank.to_dict())
    assert views.timed.empty and set(views.groups["rank"]) == {0, 1}
    assert np.allclose(views.groups.groupby("rank")["time_share_pct"].sum().to_numpy(), [100.0, 100.0])


def test_allreduce_rows_in_the_time_view(tp8_views, tp8):
    gap = tp8_views.gap
    allreduce = gap[gap["role"] == "allreduce"]
    timed = tp8[tp8["time_source"] == "cuda_events"]
    expected = timed.groupby(["phase", "rank"])["gpu__time_duration.sum"].sum()
    assert {(r.phase, r.rank): r.time_ns for r in allreduce.itertuples()} == pytest.approx(expected.to_dict())
    assert allreduce["sm_throughput_pct"].isna().all()  # no counter was read for them
    as_json = json.loads(views_json(tp8_views))
    rows = [g for g in as_json["groups"] if g["role"] == "allreduce"]
    assert len(rows) == 6 and rows[0]["validations"]["V1"] == {"pass": 0, "fail": 0, "n/a": 0}
    assert len(as_json["timed"]) == 12 and len(as_json["communication"]) == 6
    # the phase row counts them, and its figures stay those of the profiled kernels
    phase = gap[(gap["role"] == "all") & (gap["phase"] == "decode") & (gap["rank"] == 0)].iloc[0]
    decode_kernels = tp8[(tp8["phase"] == "decode") & (tp8["rank"] == 0)]
    assert phase["time_ns"] == pytest.approx(decode_kernels["gpu__time_duration.sum"].sum())
    assert 5.0 < phase["sm_throughput_pct"] < 6.0


def test_communication_per_phase_and_rank(tp8_views, tp8):
    comm = tp8_views.communication.set_index(["phase", "rank"])
    profiled = tp8[tp8["time_source"] == "ncu"]
    compute = profiled.groupby(["phase", "rank"])["gpu__time_duration.sum"].sum()
    assert comm["compute_ns"].to_dict() == pytest.approx(compute.to_dict())
    for phase in ("cold_prefill", "warm_prefill", "decode"):
        both = comm.loc[phase]
        # the fastest rank waited for nobody; the other's wait is its excess over it
        assert both["comm_wait_ns"].min() == 0
        assert (both["comm_ns"] - both["comm_wait_ns"]).tolist() == pytest.approx(both["comm_transfer_ns"].tolist())
    # prefill moves 32 MiB per all-reduce: NVLink bus bandwidth of a couple of hundred GB/s
    assert 150 < comm.loc[("warm_prefill", 0), "bus_gbps"] < 400
    assert comm.loc[("decode", 0), "bus_gbps"] < 1  # 64 KiB: latency, not bandwidth
    assert (comm["exposed_comm_ns"] == comm["comm_ns"]).all()


def test_rank_imbalance(tp8_views):
    imbalance = tp8_views.imbalance.set_index(["phase", "role"])
    compute = imbalance.drop(index="allreduce", level="role")
    assert (compute["ranks"] == 2).all() and compute["imbalance"].between(1.0, 1.03).all()
    assert imbalance.loc[("cold_prefill", "allreduce"), "imbalance"] > 1.5  # one rank waited


def test_terminal_shows_ranks_and_communication(tp8_views):
    from rich.console import Console
    from reports.terminal import print_views
    console = Console(record=True, width=120)
    print_views(tp8_views.filter(phase="decode"), {"name": "tp"}, console=console)
    out = console.export_text()
    assert "qkv_proj r1" in out and "allreduce r0" in out
    assert "Compute and communication per phase and rank" in out and "Rank imbalance" in out


def test_terminal_lists_each_timed_collective(tp8_views):
    """Each collective per rank in the terminal, as the views have it: warm prefill's all-reduce after
    o_proj moves 33.6 MB; rank 1 waited 15.7 µs of its 177.6 µs for rank 0."""
    from rich.console import Console
    from reports.terminal import print_views
    console = Console(record=True, width=120)
    print_views(tp8_views.filter(phase="warm_prefill"), {"name": "tp"}, console=console)
    out = console.export_text()
    assert "Each timed collective per rank" in out
    row = next(line for line in out.splitlines() if "allreduce after o_proj, rank 1" in line)
    call = tp8_views.collectives.set_index(["phase", "after", "rank"]).loc[("warm_prefill", "o_proj", 1)]
    assert row.split()[-7:] == ["33.6", "MB", "2", f"{call.comm_ns / 1e3:.1f}", f"{call.comm_wait_ns / 1e3:.1f}",
                                f"{call.comm_transfer_ns / 1e3:.1f}", f"{call.bus_gbps:.2f}"]
    assert row.split()[-4:-1] == ["177.6", "15.7", "161.9"]
    assert "decode" not in out.split("Each timed collective per rank")[1].split("Rank imbalance")[0]


def test_the_verdict_of_a_tp_run_names_ranks_and_communication(tp8_views, tp8):
    """Collectives are the phase's communication share, not an unknown bound that blanks its
    time-weighted figures, less the time a rank waited for the other (issue 29: shown apart); an
    opportunity stands for both ranks, and exposed communication is one; the GPUs are one line."""
    from rich.console import Console
    from reports.terminal import print_views
    from views.verdict import verdict
    judged = verdict(tp8_views)
    decode = next(p for p in judged.phases if p.phase == "decode")
    timed = tp8[(tp8["time_source"] == "cuda_events") & (tp8["phase"] == "decode")]
    profiled = tp8[(tp8["time_source"] == "ncu") & (tp8["phase"] == "decode")]
    comm = tp8_views.communication[tp8_views.communication["phase"] == "decode"]
    comm_ns = timed["gpu__time_duration.sum"].sum() - comm.loc[comm["comm_wait_ns"] >= 1_000, "comm_wait_ns"].sum()
    assert comm_ns == pytest.approx(comm["comm_transfer_ns"].sum())  # what is left is the transfer
    assert decode.bound == "communication"
    assert decode.bounds["communication"] == pytest.approx(100 * comm_ns / decode.time_ns)
    weights = profiled["gpu__time_duration.sum"]
    dram = (profiled["dram__throughput.avg.pct_of_peak_sustained_elapsed"] * weights).sum() / weights.sum()
    assert decode.dram_pct == pytest.approx(dram, rel=1e-6)
    assert [(g.label, g.rank, g.ranks) for g in judged.opportunities[:2]] == [
        ("cold_prefill · allreduce", None, 2), ("warm_prefill · allreduce", None, 2)]
    assert group_text(judged.opportunities[0]).startswith("cold_prefill · allreduce: up to ")
    assert "The most time to win: cold_prefill · allreduce" in summary_text(judged)
    console = Console(record=True, width=200)
    print_views(tp8_views, {"name": "tp"}, console=console)
    out = console.export_text()
    assert out.count("NVIDIA H200: CC 9.0") == 1 and "2 x NVIDIA H200" in out


def test_gate_compares_tensor_parallel_runs():
    from reports.gate import Run, run_gate
    from reports.gate_rules import Rule
    from views.registry import compute_views
    runs = {n: Run(n, compute_views(read_capture(TP / f"llama-3.1-8b-tp2-{n}-p512.csv.gz").kernels).kernels)
            for n in ("b1", "b8")}
    same = run_gate([runs["b8"]], [runs["b8"]])
    assert same.exit_code == 0
    per_rank = [Rule("time_ns", "higher", relative_pct=10, min_effect=5_000, by=("phase", "role", "rank"))]
    worse = run_gate([runs["b1"]], [runs["b8"]], per_rank)
    regressed = {tuple(c.group.values()) for c in worse.comparisons if c.status == "regression"}
    assert worse.exit_code == 1 and ("warm_prefill", "gate_up_proj", "0") in regressed
    assert ("warm_prefill", "gate_up_proj", "1") in regressed


# --- smlens profile --tp (fake ncu, gloo ranks on the CPU) ------------------------------------------

@pytest.fixture
def tp_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.setenv("FAKE_NCU_CSV", str(_ncu_rows_only(TP8_B8, tmp_path / "fake.csv")))
    monkeypatch.setenv("FAKE_NCU_ARGS_LOG", str(tmp_path / "ncu-args.jsonl"))
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    for name in ("FAKE_NCU_MODE", "FAKE_SMI_MODE", "SMLENS_NCU", "SMLENS_STORE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_plan_tp():
    code, out, _ = smlens("profile", "--plan", "--model", "llama-3.1-70b", "--tp", "2", "--format", "json")
    (plan,) = json.loads(out)
    assert code == 0 and plan["expected_kernels"] == 2 * (17 + 17 + 18)
    for inv in plan["invocations"]:
        command = inv["command"]
        assert command[command.index("--kernel-name") + 1] == distributed.NOT_REPLAYED
        assert command[command.index("--target-processes") + 1] == "all"
        assert "profiler.run.distributed" in command and "profiler.workloads.tensor_parallel" in command
    assert any("o_proj N=8192 K=4096" in n for n in plan["notes"])


def test_tp_refused_before_anything_runs(tp_env):
    code, _, err = smlens("profile", "--plan", "--model", "llama-3.1-8b", "--tp", "3")
    assert code == 2
    one_line_error(err, "--tp 3: llama-3.1-8b has 32 query heads")
    code, _, err = smlens("profile", "--model", "tiny", "--tp", "4", "--store", tp_env / "s")
    assert code == ncu.EXIT_NO_GPU
    one_line_error(err, "--tp 4 needs 4 GPUs, one per rank, and 2 are visible")
    assert not ncu_calls(tp_env) and not (tp_env / "s").exists()


@needs_torch
def test_profile_tp_end_to_end(tp_env):
    from profiler.ingest.store import Store
    store = tp_env / "store"
    code, out, err = smlens("profile", "--model", "tiny", "--tp", "2", "--layers", "2", "--prompt", "8",
                            "--store", store, "--format", "json", "--quiet")
    assert code == 0, err
    (outcome,) = json.loads(out)
    assert outcome["name"] == "tiny-tp2-b1-p8" and outcome["kernels"] == 108
    run = Store(store).run("latest")
    tags = json.loads(run["tags"])
    assert (tags["tp"], tags["rank_source"]) == ("2", "nvtx") and "wall clock" in tags["comm_time"]
    # timed over 8 layers and 8 decode steps: a prefill row the median of 8 calls, decode of 7 x 8;
    # 2 ranks x (2 prefills x 2 collectives x 8 + 2 collectives x 56)
    assert tags["comm_calls"] == "each row the median of 8 to 56 calls (288 in all)"
    kernels = Store(store).kernels("latest")
    timed = kernels[kernels["time_source"] == "wall_clock"]
    # the gloo ranks' all-reduces, 2 per profiled layer, for each phase and rank
    assert len(timed) == 12 and set(timed["role"]) == {"allreduce"} and set(timed["rank"]) == {0, 1}
    assert set(timed["comm_bytes"]) == {8 * 64 * 2, 64 * 2}  # tiny: hidden 64, prompt 8, bf16
    assert sorted(set(timed["comm_samples"])) == [8, 56]
    assert all(distributed.NOT_REPLAYED in call for call in ncu_calls(tp_env))


def test_profile_tp_program_ranks_from_gpus_and_a_rank_that_dies(tp_env, monkeypatch):
    from profiler.ingest.store import Store
    monkeypatch.setenv("FAKE_NCU_CSV", str(_ncu_rows_only(TP8_B8, tp_env / "plain.csv", keep_rank_markers=False)))
    monkeypatch.setenv("FAKE_NCU_KEEP_PIDS", "1")
    launcher = [PY, "-m", "profiler.run.distributed", "--nproc", "2", "--"]
    store = tp_env / "store"
    code, _, err = smlens("profile", "--tp", "2", "--store", store, "--quiet", "--name", "ok", "--",
                          *launcher, PY, "-c", "print('rank ran')")
    assert code == 0, err
    kernels = Store(store).kernels("ok")
    assert (kernels["rank"] == kernels["device"]).all() and set(kernels["rank"]) == {0, 1}
    assert json.loads(Store(store).run("ok")["tags"])["rank_source"] == "device"
    # another capture (the same one would be recognised as already stored)
    monkeypatch.setenv("FAKE_NCU_CSV", str(_ncu_rows_only(TP8_B8, tp_env / "marked.csv")))
    code, _, err = smlens("profile", "--tp", "2", "--store", store, "--quiet", "--name", "dies", "--",
                          *launcher, PY, "-c", "import os, sys, time\n"
                          "if os.environ['RANK'] == '1': sys.exit(7)\ntime.sleep(600)")
    assert code == ncu.EXIT_WORKLOAD_FAILED
    one_line_error(err, "rank 1 exited with code 7")
    assert "marked partial" in err and Store(store).run("dies")["partial"]


# --- a program's collectives, timed by the annotation (profiler/run/annotate/collectives.py) --------

# A tiny tensor-parallel-shaped program: three decoder layers, an all-reduce after o_proj inside
# the attention module's forward and an all-gather in the MLP's, two broadcasts before the layers
# (one async), two prefills and three decode steps.
COLLECTIVES_PROGRAM = """
import torch, torch.distributed as dist
from torch import nn

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.o_proj = nn.Linear(16, 16)
    def forward(self, x):
        y = self.o_proj(x)
        dist.all_reduce(y)
        return y

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.down_proj = nn.Linear(16, 8)
    def forward(self, x):
        part = self.down_proj(x).contiguous()
        whole = torch.empty((2 * part.shape[0],) + tuple(part.shape[1:]))
        dist.all_gather_into_tensor(whole, part)
        return x

class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn, self.mlp = Attention(), MLP()
    def forward(self, x):
        x = x + self.self_attn(x)
        return self.mlp(x)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(3)])
    def forward(self, x):
        dist.broadcast(x, 0)  # outside the layers: timed, not merged
        dist.broadcast(x, 0, async_op=True).wait()  # async: not timed
        for layer in self.layers:
            x = layer(x)
        return x

dist.init_process_group("gloo")
torch.manual_seed(0)
model = Model()
with torch.no_grad():
    for tokens in (8, 8, 1, 1, 1):
        model(torch.randn(2, tokens, 16))
dist.destroy_process_group()
"""


@needs_torch
def test_a_programs_collectives_are_timed_per_rank_with_gloo(tmp_path):
    """The timing run's reports (one per rank) and the rows merged from them."""
    from profiler.run import annotate
    from profiler.run.annotate import collectives
    from profiler.run.plan import workload_env
    program = tmp_path / "tp_program.py"
    program.write_text(COLLECTIVES_PROGRAM)
    env = workload_env({**annotate.program_env({}), collectives.ENV: str(tmp_path / "out")})
    done = subprocess.run([PY, "-m", "profiler.run.distributed", "--nproc", "2", "--", PY, str(program)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("collectives-*.json"))]
    assert sorted((r["rank"], r["tp"], r["backend"], r["method"]) for r in reports) == [
        (0, 2, "gloo", "wall_clock"), (1, 2, "gloo", "wall_clock")]
    for report in reports:
        records = pd.DataFrame(report["records"])
        # 2 collectives in each of 3 layers of 5 forwards, and each forward's synchronous broadcast
        assert len(records) == (2 * 3 + 1) * 5 and report["error"] is None
        assert records.groupby("phase").size().to_dict() == {"cold_prefill": 7, "warm_prefill": 7, "decode": 21}
        outside = records[records["layer"].isna()]
        assert set(outside["op"]) == {"broadcast"} and len(outside) == 5
        inside = records.dropna(subset=["layer"])
        assert set(inside["site"]) == {"attention_block#0", "mlp_block#0"}  # the module each is called in
        assert set(inside["layer"]) == {0, 1, 2} and set(records.dropna(subset=["step"])["step"]) == {0, 1, 2}
    rows = pd.DataFrame(distributed.program_comm_rows(reports, ("cold_prefill", "warm_prefill", "decode"), 0))
    assert len(rows) == 2 * 3 * 2  # rank x phase x collective
    assert set(rows["rank"]) == {0, 1} and set(rows["layer"]) == {0}
    all_reduce = rows[rows["op"] == "all_reduce"].set_index(["phase", "rank"])
    # fp32 [2, tokens, 16]: numel x itemsize
    assert all_reduce["bytes"].to_dict() == {(p, r): 2 * t * 16 * 4 for p, t in
                                             (("cold_prefill", 8), ("warm_prefill", 8), ("decode", 1)) for r in (0, 1)}
    # layer 0 stands for the 3 layers; decode step 1 for the steps after the first
    assert all_reduce["samples"].to_dict() == {(p, r): n for p, n in
                                               (("cold_prefill", 3), ("warm_prefill", 3), ("decode", 6)) for r in (0, 1)}
    assert set(all_reduce["step"].dropna()) == {1}
    gather = rows[rows["op"] == "all_gather_into_tensor"]
    assert set(gather["bytes"]) == {2 * 2 * 8 * 8 * 4, 2 * 2 * 1 * 8 * 4}  # the gathered output
    assert set(gather["after"]) == {"mlp_block#0"} and (rows["time_ns"] > 0).all()


@needs_torch
def test_profile_tp_program_merges_its_timed_collectives(tp_env, monkeypatch):
    from profiler.ingest.store import Store
    monkeypatch.setenv("FAKE_NCU_KEEP_PIDS", "1")
    program = tp_env / "tp_program.py"
    program.write_text(COLLECTIVES_PROGRAM)
    store = tp_env / "store"
    code, _, err = smlens("profile", "--tp", "2", "--store", store, "--quiet", "--name", "prog", "--",
                          PY, "-m", "profiler.run.distributed", "--nproc", "2", "--", PY, str(program))
    assert code == 0, err
    tags = json.loads(Store(store).run("prog")["tags"])
    assert "torch.distributed collective" in tags["comm_time"] and "wall clock" in tags["comm_time"]
    assert tags["comm_calls"] == "each row the median of 3 to 6 calls (48 in all)"  # decode step 0 left out
    kernels = Store(store).kernels("prog")
    timed = kernels[kernels["time_source"] == "wall_clock"]
    assert len(timed) == 12 and set(timed["rank"]) == {0, 1}
    assert set(timed["role"]) == {"allreduce", "allgather"}
    assert set(timed[timed["role"] == "allreduce"]["comm_bytes"]) == {1024, 128}
    assert set(timed["phase"]) == {"cold_prefill", "warm_prefill", "decode"}
    from views.registry import compute_views
    views = compute_views(kernels)
    assert set(views.collectives["role"]) == {"allreduce", "allgather"}
    assert len(views.communication) == 6  # phase x rank


def test_plan_says_whether_a_programs_collectives_are_timed(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("pass\n")
    notes = {}
    for flags in ((), ("--no-annotate",)):
        code, out, err = smlens("profile", "--plan", "--tp", "2", "--format", "json", *flags, "--", PY, str(script))
        assert code == 0, err
        notes[flags] = " ".join(json.loads(out)[0]["notes"])
    assert "collectives are timed in one more run of the program without ncu" in notes[()]
    assert "collectives are not timed (that needs the annotation" in notes[("--no-annotate",)]
