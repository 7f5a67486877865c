"""The deterministic GEMMs and their baselines as `smlens profile --workload det-gemm` captured them on
the H200 (tests/data/h200_det/PROVENANCE.md): Llama-3.1-8B's four projections at M = 1, 16 (decode)
and 2048 (prefill), one run per implementation, caches flushed before every replay pass.

What the views must say: det runs on the CUDA cores (no tensor op, path `none`), every one of its
FMAs is counted in V7's FLOPs, and its decode kernels read each weight once from DRAM; at M = 1 it
is DRAM-bound, at M = 16 it just crosses the FP32 ridge (BENCHMARKS.md: FMA-issue bound there);
cuBLAS bf16 runs on the tensor cores with its 8-row decode tiles one-eighth full at M = 1."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from profiler.run import ncu
from profiler.ingest.capture import read_capture
from profiler.ingest.store import Store
from profiler.workloads.deterministic import reference, workload
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_profile import FAKES, QUICK, ncu_calls
from views.vocabulary import GEMM_ROLES

DET = DATA / "h200_det"
IMPLS = ("det", "cublas_bf16", "layercast")
TOKENS = (1, 16, 2048)
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum"


def capture_path(impl: str):
    return DET / f"det-gemm-{impl}.csv.gz"


@pytest.fixture(scope="module")
def figures() -> dict[str, pd.DataFrame]:
    """Per implementation: the kernels table joined with the views' per-kernel figures."""
    from views.registry import compute_views

    out = {}
    for impl in IMPLS:
        kernels = read_capture(capture_path(impl)).kernels
        views = compute_views(kernels).kernels
        out[impl] = views.join(kernels[[FFMA, FADD]])
    return out


def test_every_kernel_has_its_phase_role_and_shape_from_the_ranges(figures):
    expected = {(workload.default_phase(c.M), c.role, c.M, c.N, c.K)
                for c in workload.model_cases("llama-3.1-8b", list(TOKENS))}
    assert len(expected) == 12
    for impl, k in figures.items():
        assert (k["role_source"] == "nvtx").all(), impl
        found = set(zip(k["phase"], k["role"], k["shape_m"], k["shape_n"], k["shape_k"]))
        assert found == expected, impl
        # the impl range sits between the phase and the role range and confuses neither
        for stack, phase, role, m in zip(k["nvtx_stack"], k["phase"], k["role"], k["shape_m"]):
            assert list(stack)[:2] == [f"smlens:{phase}", f"smlens:impl={impl}"]
            assert list(stack)[2].startswith(f"smlens:{role} M={m} ") and list(stack)[2].endswith(f"impl={impl}")


def test_det_kernels_are_the_fma_kernels_and_their_fixed_order_fold(figures):
    k = figures["det"]
    names = k["kernel_name"].astype(str).str.split("<").str[0]
    decode, prefill = k[k["phase"] == "decode"], k[k["phase"] == "warm_prefill"]
    # M <= 16: split-K partials, then their fold in a fixed order (a second kernel, no atomics)
    assert sorted(names[decode.index].value_counts().items()) == [
        ("det_fold_splitk_reduce_kernel", 8), ("det_gemv_fma_kernel", 8)]
    assert set(decode.loc[names[decode.index] == "det_fold_splitk_reduce_kernel", "kind"]) == {"splitk_reduce"}
    # prefill: the x transpose (an ATen copy in the same role range) and the tile kernel
    assert sorted(names[prefill.index].value_counts().items()) == [
        ("det_gemm_fma_kernel", 4), ("void at::elementwise_kernel", 4)]
    assert set(prefill["kind"]) == {"gemm", "elementwise"}


def test_det_never_touches_the_tensor_pipe(figures):
    k = figures["det"]
    assert (k["tensor_ops"] == 0).all()
    assert set(k["mma_path"]) == {"none"}
    assert k["tensor_pipe_pct"].max() < 1.0
    # so V3 has no fill to give, and says why
    gemm = k[k["kind"] == "gemm"]
    assert gemm["fill"].isna().all()
    assert set(gemm["validation_detail_V3"]) == {"no tensor ops (a GEMM on CUDA cores)"}
    # cuBLAS bf16 at the same shapes: the tensor cores, wgmma, 8-row tiles 1/8 full at M = 1
    cublas = figures["cublas_bf16"]
    gemm = cublas[cublas["kind"] == "gemm"]
    assert set(gemm["mma_path"]) == {"gmma"} and (gemm["tensor_ops"] > 0).all()
    assert set(gemm.loc[gemm["shape_m"] == 1, "fill"]) == {0.125}
    assert set(gemm.loc[gemm["shape_m"] == 16, "fill"]) == {1.0}
    assert gemm.loc[gemm["shape_m"] == 2048, "tensor_pipe_pct"].min() > 90


def test_every_fma_is_counted_in_the_flops(figures):
    """Each output is K FMAs (2 FLOPs each) in chains of CHAIN_K; the chain partials are summed with
    FADDs: at decode by the fold kernel (chains - 1 per output), at prefill inside the tile kernel."""
    k = figures["det"]
    gemm = k[k["kind"] == "gemm"]
    m, n, kk = (gemm[c].to_numpy(dtype="int64") for c in ("shape_m", "shape_n", "shape_k"))
    chains = np.array([reference.chain_count(int(v)) for v in kk])
    ffma, fadd, flops = (gemm[c].to_numpy() for c in (FFMA, FADD, "flops"))
    decode = gemm["phase"].to_numpy() == "decode"
    assert (ffma == m * n * kk).all()
    assert (flops[decode] == 2 * (m * n * kk)[decode]).all() and (fadd[decode] == 0).all()
    assert (fadd[~decode] == (m * n * chains)[~decode]).all()
    assert (flops[~decode] == (2 * m * n * kk + m * n * chains)[~decode]).all()
    fold = k[k["kind"] == "splitk_reduce"]
    m, n = (fold[c].to_numpy(dtype="int64") for c in ("shape_m", "shape_n"))
    chains = np.array([reference.chain_count(int(v)) for v in fold["shape_k"]])
    assert (fold["flops"].to_numpy() == m * n * (chains - 1)).all()


def test_det_decode_reads_each_weight_once_from_dram_and_is_dram_bound_at_m1(figures):
    k = figures["det"]
    gemv = k[(k["phase"] == "decode") & (k["kind"] == "gemm")]
    weight_bytes = 2 * gemv["shape_n"] * gemv["shape_k"]  # bf16
    ratio = gemv["dram_bytes"] / weight_bytes
    assert ratio.between(1.0, 1.15).all()               # weights once, plus x, partials and output
    assert set(gemv["validation_V7"]) == {"pass"}
    one, sixteen = gemv[gemv["shape_m"] == 1], gemv[gemv["shape_m"] == 16]
    # M = 1: one FMA per weight, about 1 FLOP per byte, far under the FP32 ridge (~14 FLOP/byte)
    assert set(one["bound"]) == {"memory"} and one["dram_pct"].between(65, 88).all()
    assert one["intensity"].between(0.9, 1.0).all()
    assert (one["ridge_flops_per_byte"].round(1) == 13.9).all()
    assert one["roofline_pct"].min() > 60                 # of the 4.8 TB/s DRAM peak
    # M = 16: 16 FMAs per weight put it just over the ridge, on the roofline's compute side, yet it
    # reaches only a third of the FMA and of the DRAM peak: no unit near its peak, latency-bound
    assert (sixteen["intensity"] > sixteen["ridge_flops_per_byte"]).all()
    assert (sixteen["intensity"] < 1.2 * sixteen["ridge_flops_per_byte"]).all()
    assert set(sixteen["bound"]) == {"latency"}
    assert sixteen["fp32_pct"].between(33, 42).all() and sixteen["dram_pct"].between(30, 39).all()
    # prefill runs at about two thirds of the FP32 FMA peak: FP32-bound
    tile = k[(k["phase"] == "warm_prefill") & (k["kind"] == "gemm")]
    assert set(tile["bound"]) == {"fp32"} and tile["roofline_pct"].between(60, 75).all()
    assert tile["bound_pct"].to_numpy() == pytest.approx(tile["fp32_pct"].to_numpy())


def test_layercast_casts_the_weights_on_every_call(figures):
    """LayerCast's FP32 copy of W: an elementwise kernel in each role range reading the bf16
    weights; its GEMM then reads the FP32 copy (at least twice det's weight traffic)."""
    k = figures["layercast"]
    casts = k[k["kind"] == "elementwise"]
    assert len(casts) == 12 and (casts["dram_bytes"] >= 2 * casts["shape_n"] * casts["shape_k"]).all()
    det_bytes = figures["det"].groupby(["phase", "role"], observed=True)["dram_bytes"].sum()
    layercast_bytes = k.groupby(["phase", "role"], observed=True)["dram_bytes"].sum()
    decode = layercast_bytes.loc["decode"] / det_bytes.loc["decode"]
    assert (decode > 2).all(), decode


def test_smlens_views_explains_a_det_run(tmp_path):
    store = tmp_path / "store"
    code, _, err = smlens("ingest", capture_path("det"), "--store", store, "--name", "det")
    assert code == 0, err
    code, out, err = smlens("views", "det", "--store", store, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    groups = pd.DataFrame(data["groups"])
    assert set(zip(groups["phase"], groups["role"])) == {
        (p, r) for p in ("decode", "warm_prefill") for r in GEMM_ROLES}
    assert (groups["tensor_ops"] == 0).all() and (groups["useful_tensor_pct"] == 0).all()
    # the gap: SMs busy (prefill ~97 % active), tensor pipe idle
    prefill = groups[groups["phase"] == "warm_prefill"]
    assert (prefill["sm_active_pct"] > 95).all() and (prefill["tensor_pipe_pct"] < 0.2).all()
    assert data["devices"][0]["name"] == "NVIDIA H200"


# --- the whole path on a CPU: profile (fake ncu) -> store -> views and gate ---------------------

@pytest.fixture
def fake_det(monkeypatch, tmp_path):
    """The fake ncu replays a det-gemm capture; the workload itself needs a GPU, so a quick program
    stands in for it (the command line ncu is given is still checked)."""
    from profiler.run import profile as prof

    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.setenv("FAKE_NCU_ARGS_LOG", str(tmp_path / "ncu-args.jsonl"))
    for name in ("FAKE_NCU_MODE", "FAKE_SMI_MODE", "SMLENS_NCU", "SMLENS_STORE"):
        monkeypatch.delenv(name, raising=False)
    real = prof._det_program
    programs = []

    def quick(model, tokens, impl):
        programs.append(real(model, tokens, impl))
        return list(QUICK)

    monkeypatch.setattr(prof, "_det_program", quick)
    return tmp_path, programs


def test_profile_det_gemm_into_the_store_then_gate(fake_det, monkeypatch):
    tmp_path, programs = fake_det
    store = tmp_path / "store"
    for impl in ("cublas_bf16", "det"):
        monkeypatch.setenv("FAKE_NCU_CSV", str(capture_path(impl)))
        code, out, err = smlens("profile", "--workload", "det-gemm", "--impl", impl, "--tokens",
                                "1,16,2048", "--store", store, "--quiet", "--format", "json",
                                "--tag", "ci=yes")
        assert code == 0, err
        (outcome,) = json.loads(out)
        assert outcome["name"] == f"det-gemm-llama-3.1-8b-{impl}"
        assert outcome["kernels"] == {"cublas_bf16": 28, "det": 24}[impl] and not outcome["partial"]
    assert [p[-2:] for p in programs] == [["--impl", "cublas_bf16"], ["--impl", "det"]]
    for call in ncu_calls(tmp_path):
        assert call[call.index("--cache-control") + 1] == "all"
        assert [call[i + 1] for i, a in enumerate(call) if a == "--nvtx-include"] == [
            "smlens@decode/", "smlens@warm_prefill/"]
    runs = Store(store, create=False).runs()
    tags = {name: json.loads(t) for name, t in zip(runs["name"], runs["tags"])}
    assert tags["det-gemm-llama-3.1-8b-det"] == {"workload": "det-gemm", "model": "llama-3.1-8b",
                                                  "impl": "det", "impls": "det", "tokens": "1,16,2048",
                                                  "ci": "yes"}
    kernels = Store(store, create=False).kernels("det-gemm-llama-3.1-8b-det",
                                                  columns=["phase", "role", "shape_m", "kernel_name"])
    assert kernels.groupby("phase", observed=True).size().to_dict() == {"decode": 16, "warm_prefill": 8}
    # the tag selects the runs for the gate: cuBLAS as the baseline, det as the change
    code, out, err = smlens("gate", "--baseline", "tag:impl=cublas_bf16", "--current", "tag:impl=det",
                            "--store", store, "--format", "json")
    assert code == 1, err
    verdict = json.loads(out)
    regressed = {(c["rule"], c["group"]["phase"], c["group"]["role"])
                 for c in verdict["comparisons"] if c["status"] == "regression"}
    assert {("time per role", p, r) for p in ("decode", "warm_prefill")
            for r in GEMM_ROLES} <= regressed


def test_runs_named_by_impl(fake_det, monkeypatch):
    tmp_path, _ = fake_det
    monkeypatch.setenv("FAKE_NCU_CSV", str(capture_path("det")))
    code, out, err = smlens("profile", "--workload", "det-gemm", "--impl", "det,layercast", "--name",
                            "nightly", "--store", tmp_path / "s", "--quiet", "--format", "json")
    assert code == 0, err
    assert [o["name"] for o in json.loads(out)] == ["nightly-det", "nightly-layercast"]
