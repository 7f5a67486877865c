"""The built-in decoder at --dtype fp8 on the H200 (tests/data/h200_fp8/PROVENANCE.md): FP8 GEMMs move
only the `src_fp8` op counter, and V2 rates them at the H200's FP8 wgmma rate."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from profiler.workloads.models import get_model
from views.registry import compute_views
from views.vocabulary import GEMM_ROLES, PHASES

DATA = Path(__file__).parent / "data" / "h200_fp8"


@pytest.fixture(scope="module", params=[8, 1])
def fp8_views(request):
    kernels = read_capture(DATA / f"fp8-llama-3.1-8b-b{request.param}-p512.csv.gz")
    return request.param, compute_views(getattr(kernels, "kernels", kernels)).kernels


def test_every_projection_is_an_fp8_wgmma_at_8192_ops_per_cycle(fp8_views):
    batch, kernels = fp8_views
    gemms = kernels[kernels["role"].isin(GEMM_ROLES) & (kernels["kind"] == "gemm")]
    assert set(gemms["phase"]) == set(PHASES)
    assert set(gemms["tensor_dtype"]) == {"fp8"} and set(gemms["mma_path"]) == {"gmma"}
    # the H200's FP8 rate: twice bf16's 4096 ops per tensor-busy cycle per SM
    assert gemms["tensor_ops_per_cycle_per_sm"].between(8150, 8250).all()
    assert (gemms["validation_V2"] == "pass").all()


def test_fp8_shapes_are_the_models_and_decode_reads_memory_bound(fp8_views):
    batch, kernels = fp8_views
    model = get_model("llama-3.1-8b")
    gemms = kernels[kernels["role"].isin(GEMM_ROLES) & (kernels["kind"] == "gemm")]
    hidden = model.hidden
    assert set(map(tuple, gemms[gemms["role"] == "o_proj"][["shape_n", "shape_k"]].values)) == {(hidden, hidden)}
    decode = gemms[gemms["phase"] == "decode"]
    assert set(decode["shape_m"]) == {batch}
    big = decode[decode["role"] == "gate_up_proj"]
    assert (big["bound"] == "memory").all()
