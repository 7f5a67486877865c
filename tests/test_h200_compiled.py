"""What `smlens profile -- python3 benchmarks/h200/hf_generate.py --mode M` captured on the H200
(tests/data/h200_compiled/PROVENANCE.md): a Hugging Face Llama-3.1-8B-shaped generate (2 layers,
batch 8, prompt 512) run eagerly, with its forward compiled by inductor, and with a static cache
(compiled decode steps replayed as CUDA graphs, --graph-profiling node). Every mode: three phases,
the layer's time in the six roles, each projection GEMM's shape and useful MMA share, the
activation's share of the MLP; the compiled kernels' roles from inductor's provenance record."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from views.registry import compute_views
from views.vocabulary import GEMM_ROLES, PHASES, ROLES

DATA = Path(__file__).parent / "data" / "h200_compiled"
MODES = ("eager", "compile", "static")
TOKENS = {"cold_prefill": 8 * 512, "warm_prefill": 8 * 512, "decode": 8}
# Llama-3.1-8B: (role, N, K) of each projection GEMM; Hugging Face runs q, k, v and gate, up apart
GEMMS = {("qkv_proj", 4096, 4096), ("qkv_proj", 1024, 4096), ("o_proj", 4096, 4096),
         ("gate_up_proj", 14336, 4096), ("down_proj", 4096, 14336)}


def _views(mode: str):
    # a static cache's decode steps are CUDA-graph replays: the eager order names them
    kernels = read_capture(DATA / f"hf-llama-3.1-8b-{mode}-b8-p512.csv.gz",
                           roles_from_order=mode == "static").kernels
    return compute_views(kernels)


@pytest.fixture(scope="module")
def runs():
    return {mode: _views(mode) for mode in MODES}


def _layer_kernels(kernels):
    """The kernels of a decoder layer: in a layer range, or replayed from a layer's graph."""
    in_layer = kernels["nvtx_stack"].map(lambda s: any(e.split(":", 1)[-1].startswith("layer_") for e in s))
    return kernels[in_layer | (kernels["role_source"] == "order")]


@pytest.mark.parametrize("mode", MODES)
def test_three_phases_and_the_layer_in_six_roles(runs, mode):
    kernels = runs[mode].kernels
    assert set(kernels["phase"]) == set(PHASES)
    layer = _layer_kernels(kernels)
    for phase in PHASES:
        here = layer[layer["phase"] == phase]
        in_roles = here.loc[here["role"].isin(ROLES), "time_ns"].sum()
        assert in_roles / here["time_ns"].sum() >= 0.99, (mode, phase)
        assert set(here["role"]) == set(ROLES), (mode, phase)


@pytest.mark.parametrize("mode", MODES)
def test_every_projection_gemm_has_its_shape_and_useful_share(runs, mode):
    kernels = runs[mode].kernels
    gemms = kernels[(kernels["kind"] == "gemm") & kernels["role"].isin(GEMM_ROLES)]
    for phase in PHASES:
        here = gemms[gemms["phase"] == phase]
        found = {(r, int(m), int(n), int(k)) for r, m, n, k in
                 here[["role", "shape_m", "shape_n", "shape_k"]].itertuples(index=False)}
        assert found == {(role, TOKENS[phase], n, k) for role, n, k in GEMMS}, (mode, phase)
    assert gemms["fill"].notna().all()
    decode = gemms[gemms["phase"] == "decode"]
    assert (decode["fill"] <= 1.0 + 1e-6).all() and (decode["fill"] >= 0.5 - 1e-6).all()  # 8 rows of 8 or 16


@pytest.mark.parametrize("mode", MODES)
def test_the_activation_share_of_the_mlp_per_phase(runs, mode):
    mlp = runs[mode].mlp.set_index("phase")
    assert set(mlp.index) == set(PHASES)
    share = mlp["activation_share_of_mlp_pct"]
    assert ((share > 1) & (share < 10)).all(), (mode, share)
    # eager runs SiLU and the multiply as two kernels, inductor fuses them into one (the static
    # cache's prefill runs eagerly)
    prefill = mlp.loc[["cold_prefill", "warm_prefill"], "activation_kernels"]
    assert set(prefill) == ({1} if mode == "compile" else {2})


def test_compiled_kernels_get_their_roles_from_inductor(runs):
    """Every kernel of the compiled program is named by the compiled code's sites: layer 0 of each
    prefill and of decode step 1, as the dedup filters asked, with the eager program's GEMMs."""
    kernels = runs["compile"].kernels
    assert set(kernels["role_source"]) == {"compiled"}
    for stack, phase in zip(kernels["nvtx_stack"], kernels["phase"]):
        messages = [entry.split(":", 1)[1] for entry in stack]
        expected = [phase, "step_1", "layer_0"] if phase == "decode" else [phase, "layer_0"]
        assert messages[: len(expected)] == expected
    eager = runs["eager"].kernels
    for phase in PHASES:
        names = [set(k.loc[(k["phase"] == phase) & (k["kind"] == "gemm"), "kernel_name"]) for k in (kernels, eager)]
        assert names[0] == names[1]  # inductor leaves the projections to cuBLAS: the same kernels


def test_what_compiling_changed(runs):
    """Inductor fuses the layer's elementwise work (norms, rotary, residual adds, SiLU and the
    multiply): at prefill 7 kernels instead of 32 and under a quarter of the time; the GEMMs keep
    their time within 2 %."""
    gap = {mode: runs[mode].gap.set_index(["phase", "role"]) for mode in ("eager", "compile")}
    for phase in ("cold_prefill", "warm_prefill"):
        eager, compiled = gap["eager"].loc[(phase, "elementwise")], gap["compile"].loc[(phase, "elementwise")]
        assert (eager["kernels"], compiled["kernels"]) == (32, 7)
        assert compiled["time_ns"] < 0.25 * eager["time_ns"]
        for role in GEMM_ROLES:
            ratio = gap["compile"].loc[(phase, role), "time_ns"] / gap["eager"].loc[(phase, role), "time_ns"]
            assert 0.98 < ratio < 1.02, (phase, role, ratio)


def test_static_cache_replays_are_named_through_the_compiled_warm_up(runs):
    """The static cache's first decode step runs the compiled code before its graph is captured
    (its kernels named by the sites); the replays that follow carry only their phase and step,
    and the warm-up's order names them: the same roles and shapes."""
    kernels = runs["static"].kernels
    decode = kernels[kernels["phase"] == "decode"]
    warm_up, replayed = decode[decode["role_source"] == "compiled"], decode[decode["role_source"] == "order"]
    assert len(warm_up) > 40 and len(replayed) > 40
    for part in (warm_up, replayed):
        gemms = part[part["kind"] == "gemm"]
        assert set(gemms.loc[gemms["role"].isin(GEMM_ROLES), "role"]) == set(GEMM_ROLES)
    assert set(kernels.loc[kernels["phase"] != "decode", "role_source"]) <= {"annotation", "name"}  # eager prefill
