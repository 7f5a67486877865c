"""What `smlens profile -- python3 benchmarks/h200/hf_generate.py` captured on the H200
(tests/data/h200_hf/PROVENANCE.md): an unmodified Hugging Face generate, annotated at start-up.
Phases, roles and shapes from the annotation; the GEMM shapes those of the built-in decoder's model
table; every decoder-layer kernel in one of the six roles; fill for every GEMM; the activation's share
of MLP time; CUDA-graph replays named by the eager order."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from profiler.ingest.nvtx import PHASES
from profiler.workloads.models import get_model
from views.registry import compute_views
from views.vocabulary import GEMM_ROLES, ROLES
from tests.captures import kernels_of, views_of
from tests.cli import smlens

DATA = Path(__file__).parent / "data" / "h200_hf"
PROMPT = 512
# (model, batch): every capture made, each with all three phases
CAPTURES = [(m, b) for m, b in (("llama-3.1-8b", 1), ("llama-3.1-8b", 8), ("qwen2.5-7b", 1),
                                ("qwen2.5-7b", 8), ("mistral-7b", 1), ("mistral-7b", 8),
                                ("gemma-2-9b", 1), ("gemma-2-9b", 8))
            if (DATA / f"hf-{m}-b{b}-p{PROMPT}.csv.gz").exists()]


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: f"{p[0]}-b{p[1]}")
def capture(request):
    model, batch = request.param
    return model, batch, kernels_of(_path(model, batch))


def _path(model: str, batch: int) -> Path:
    return DATA / f"hf-{model}-b{batch}-p{PROMPT}.csv.gz"


def test_the_four_families_were_captured():
    assert set(CAPTURES) == {(m, b) for m in ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "gemma-2-9b")
                             for b in (1, 8)}


def test_three_phases_one_layer_one_step(capture):
    """Dedup through ncu's include filters: layer 0 of each prefill, layer 0 of decode step 1."""
    model, batch, k = capture
    assert set(k["phase"]) == set(PHASES)
    for stack, phase in zip(k["nvtx_stack"], k["phase"]):
        messages = [entry.split(":", 1)[1] for entry in stack]
        expected = [phase, "step_1", "layer_0"] if phase == "decode" else [phase, "layer_0"]
        assert messages[: len(expected)] == expected


def test_gemm_shapes_are_the_model_tables(capture):
    """Each role's (N, K) is the built-in decoder's for that model (profiler/workloads/models.py);
    Hugging Face runs q, k and v as three GEMMs (N = the q width, then the KV width twice) and gate
    and up as two (N = the MLP width each) where the decoder fuses them. M = batch x new tokens."""
    model, batch, k = capture
    shape = get_model(model)
    for phase in PHASES:
        tokens = batch * (1 if phase == "decode" else PROMPT)
        rows = k[(k["phase"] == phase) & k["role"].isin(GEMM_ROLES)]
        found = {(r, int(m), int(n), int(kk)) for r, m, n, kk in
                 rows[["role", "shape_m", "shape_n", "shape_k"]].itertuples(index=False)}
        table = shape.gemm_shapes(tokens)
        expected = {("qkv_proj", tokens, shape.q_width, shape.hidden),
                    ("qkv_proj", tokens, shape.kv_width, shape.hidden),
                    ("gate_up_proj", tokens, table["gate_up_proj"][1] // 2, shape.hidden),
                    ("o_proj", *table["o_proj"]), ("down_proj", *table["down_proj"])}
        assert found == expected, (phase, found)
        assert table["qkv_proj"][1] == shape.q_width + 2 * shape.kv_width
    # every GEMM kernel has its role from the annotation and a shape
    gemms = k[k["kind"] == "gemm"]
    assert set(gemms["role"]) <= set(GEMM_ROLES) and gemms["shape_n"].notna().all()
    assert set(gemms["role_source"]) == {"annotation"}


def test_layer_time_is_in_the_six_roles(capture):
    _, _, k = capture
    time_ns = k["gpu__time_duration.sum"]
    in_roles = time_ns[k["role"].isin(ROLES)].sum()
    assert in_roles / time_ns.sum() >= 0.99
    assert set(k.loc[k["kind"] == "attention", "role"]) == {"attention"}
    attention = k[(k["kind"] == "attention") & (k["role_source"] == "annotation")]
    assert len(attention) and attention["attn_head_dim"].eq(get_model(capture[0]).head_dim).all()


def test_fill_for_every_gemm(capture):
    model, batch, _ = capture
    result = views_of(_path(model, batch))
    gemms = result.kernels[result.kernels["kind"] == "gemm"]
    assert len(gemms) and gemms["fill"].notna().all()
    decode = gemms[gemms["phase"] == "decode"]
    # at decode the token dimension holds `batch` real rows of a tile's 8 (or more)
    assert (decode["fill"] <= min(1.0, batch / 8) + 1e-6).all()


def test_activation_share_of_mlp(capture):
    """The MLP block holds gate, up, SiLU/GELU, the multiply and down; the activation's share of
    its time is a figure per phase."""
    model, batch, _ = capture
    mlp = views_of(_path(model, batch)).mlp.set_index("phase")
    assert set(mlp.index) == set(PHASES)
    share = mlp["activation_share_of_mlp_pct"]
    assert ((share > 1) & (share < 40)).all(), share
    assert (mlp["activation_kernels"] == 2).all()  # act(gate), then * up


def test_the_builtin_decoder_shows_the_same_figure():
    """`smlens profile --model` (32 layers, batch 8): its MLP block range gives the same figure; its
    activation runs on the fused gate/up output's halves, a larger share than HF's separate halves."""
    decoder = views_of(DATA / "decoder-llama-3.1-8b-b8-p512.csv.gz").mlp
    hf = views_of(_path("llama-3.1-8b", 8)).mlp
    decoder, hf = decoder.set_index("phase"), hf.set_index("phase")
    assert set(decoder.index) == set(PHASES)
    for phase in ("cold_prefill", "warm_prefill"):
        share = "activation_share_of_mlp_pct"
        assert decoder.loc[phase, share] > hf.loc[phase, share]
    # the MLP GEMMs themselves take the same time: the same shapes, the same cuBLAS kernels
    gemm_ratio = ((decoder["mlp_time_ns"] - decoder["activation_time_ns"])
                  / (hf["mlp_time_ns"] - hf["activation_time_ns"]))
    assert ((gemm_ratio > 0.9) & (gemm_ratio < 1.1)).all(), gemm_ratio


def test_cuda_graph_replays_named_by_the_eager_step():
    """A decode step replayed from a CUDA graph under --graph-profiling node: the annotation opened
    `decode / step_<j>` around each replay; the eager step 0 names the graph's GEMMs and attention."""
    k = read_capture(DATA / "graph-decode.csv.gz", roles_from_order=True).kernels
    decode = k[k["phase"] == "decode"]
    steps = decode["nvtx_stack"].map(lambda s: s[1].split(":", 1)[1] if len(s) > 1 else "")
    replayed = decode[steps != "step_0"]
    assert set(steps[steps != "step_0"]) == {"step_1", "step_2"}
    compute = replayed[replayed["kind"].isin(["gemm", "attention", "splitk_reduce"])]
    assert len(compute) >= 20 and set(compute["role_source"]) == {"order"}
    assert set(compute["role"]) == {"qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj"}
    eager = decode[steps == "step_0"]
    assert set(eager.loc[eager["kind"] == "gemm", "role_source"]) == {"annotation"}
    # the graph's kernels in the eager step's order: the same names, layer after layer
    per_step = [list(replayed.loc[steps[steps != "step_0"] == s, "kernel_name"].str.slice(0, 40))
                for s in ("step_1", "step_2")]
    assert per_step[0][1:] [:20] == per_step[1][1:][:20]


def test_mlp_share_in_json_terminal_and_report(tmp_path):
    """The figure reaches every output: `smlens views --format json` (`mlp`), the terminal, the
    report; a kernel without a time makes its phase's share unknown, not smaller."""
    import json

    import numpy as np

    from views import mlp

    store = tmp_path / "store"
    capture = DATA / "hf-llama-3.1-8b-b8-p512.csv.gz"
    assert smlens("ingest", capture, "--store", store)[0] == 0
    out = smlens("views", "--store", store, "--format", "json")[1]
    rows = {r["phase"]: r for r in json.loads(out)["mlp"]}
    assert set(rows) == set(PHASES)
    assert 7.0 < rows["cold_prefill"]["activation_share_of_mlp_pct"] < 7.5  # 139.6 of 1931.2 us
    table = smlens("views", "--store", store)[1]
    assert "MLP: the activation's share" in table and "7.2 %" in table
    report = tmp_path / "r.html"
    assert smlens("report", "--store", store, "-o", report)[0] == 0
    assert "activation share of MLP" in report.read_text()

    kernels = compute_views(read_capture(capture).kernels).kernels
    kernels.loc[kernels.index[kernels["block"] == "mlp"][0], "time_ns"] = np.nan
    shares = mlp.activation_share(kernels).set_index("phase")["activation_share_of_mlp_pct"]
    assert np.isnan(shares.iloc[0]) and shares.iloc[1:].notna().all()
