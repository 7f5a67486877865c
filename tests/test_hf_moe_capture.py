"""A Hugging Face mixture-of-experts generate on the H200 (tests/data/h200_hf/PROVENANCE.md, call 10):
Mixtral-8x7B's layer shapes, 2 layers, random weights, batch 8, prompt 512, under
`smlens profile -- python3 benchmarks/h200/hf_generate.py --model mixtral-8x7b`. transformers
multiplies the experts with one grouped GEMM per projection at prefill and, for decode on a GPU,
with a bmm over the experts' weights gathered per (token, expert) pair: the annotation gives both
their projection's role and shape (M = tokens x 2 experts per token)."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from profiler.ingest.nvtx import PHASES
from views.registry import compute_views
from views.vocabulary import ROLES

CAPTURE = Path(__file__).parent / "data" / "h200_hf" / "hf-mixtral-8x7b-b8-p512.csv.gz"
BATCH, PROMPT, TOP_K = 8, 512, 2
HIDDEN, INTERMEDIATE = 4096, 14336


@pytest.fixture(scope="module")
def kernels():
    return read_capture(CAPTURE).kernels


def test_expert_gemms_have_their_roles_and_shapes(kernels):
    for phase in PHASES:
        rows = TOP_K * BATCH * (1 if phase == "decode" else PROMPT)
        mlp = kernels[(kernels["phase"] == phase) & (kernels["block"] == "mlp")]
        experts = mlp[mlp["role"].isin(["gate_up_proj", "down_proj"])]
        assert set(experts["role_source"]) == {"annotation"}
        shapes = {(r, int(m), int(n), int(k)) for r, m, n, k in
                  experts[["role", "shape_m", "shape_n", "shape_k"]].itertuples(index=False)}
        assert shapes == {("gate_up_proj", rows, 2 * INTERMEDIATE, HIDDEN),
                          ("down_proj", rows, HIDDEN, INTERMEDIATE)}, (phase, shapes)
        messages = experts["nvtx_stack"].map(lambda stack: stack[-1])
        grouped = messages.str.contains("experts=8")
        # prefill: a grouped GEMM (and its argument set-up kernel) over the 8 experts; decode: bmm
        assert grouped.all() if phase != "decode" else not grouped.any()
        # the router (hidden -> 8 experts) is the MLP's one GEMM without a projection's role
        assert set(mlp.loc[(mlp["kind"] == "gemm") & ~mlp.index.isin(experts.index), "role"]) == {"gemm"}


def test_layer_time_in_the_six_roles_and_fill(kernels):
    time_ns = kernels["gpu__time_duration.sum"]
    for phase in PHASES:
        in_phase = kernels["phase"] == phase
        share = time_ns[in_phase & kernels["role"].isin(ROLES)].sum() / time_ns[in_phase].sum()
        assert share >= 0.99, (phase, share)
    views = compute_views(kernels).kernels
    expert_gemms = views[views["role"].isin(["gate_up_proj", "down_proj"]) & (views["kind"] == "gemm")]
    # the grouped GEMM's argument set-up kernel runs no tensor instruction: no fill
    setup = expert_gemms["kernel_name"].str.contains("prepare_grouped_gemm_data")
    assert setup.sum() == 4 and expert_gemms.loc[setup, "fill"].isna().all()
    # the GEMMs' fill: every expert's rows padded to the tile, measured by the tensor pipe's ops
    assert (~setup).sum() == 6 and expert_gemms.loc[~setup, "fill"].between(0.05, 1).all()


def test_decode_gathers_the_experts_weights(kernels):
    """transformers' decode path copies each (token, expert) pair's weight matrices before its bmm:
    the copies are elementwise kernels of the MLP block, and they take longer than the GEMMs."""
    decode = kernels[(kernels["phase"] == "decode") & (kernels["block"] == "mlp")]
    time_ns = decode["gpu__time_duration.sum"]
    gathers = decode["kernel_name"].str.contains("gather_kernel")
    gemms = decode["role"].isin(["gate_up_proj", "down_proj"]) & (decode["kind"] == "gemm")
    assert set(decode.loc[gathers, "role"]) == {"elementwise"}
    assert time_ns[gathers].sum() > time_ns[gemms].sum()


def test_the_activation_is_what_lies_between_the_expert_gemms(kernels):
    """The MLP block of a mixture of experts also routes (softmax, top-k, sorts) and gathers tokens
    and weights: the activation's share counts only the elementwise passes between the gate/up and
    the down GEMMs (views/mlp.py)."""
    mlp = compute_views(kernels).mlp.set_index("phase")
    share = mlp["activation_share_of_mlp_pct"]
    for phase in ("cold_prefill", "warm_prefill"):
        # the masking of unused rows, act(gate) and * up, each over the 8192 x 28672 intermediate
        assert mlp.loc[phase, "activation_kernels"] == 3 and 15 < share[phase] < 30
        assert mlp.loc[phase, "mlp_kernels"] > 40
    # decode: act(gate) and * up; the down weights' gather between the two GEMMs is not counted
    assert mlp.loc["decode", "activation_kernels"] == 2 and share["decode"] < 1
