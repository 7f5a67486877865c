"""What `smlens profile` captured on the H200 (tests/data/h200_runs/PROVENANCE.md): phases, roles and
shapes from the workload's NVTX ranges, fill from those shapes, and deduplication that loses
no distinct kernel."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from profiler.ingest.capture import read_capture
from profiler.workloads import decoder
from profiler.workloads.models import get_model
from views.vocabulary import GEMM_ROLES, PHASES, ROLES

RUNS = Path(__file__).parent / "data" / "h200_runs"
PROMPT = 512
CAPTURES = [(model, batch) for model in ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b")
            for batch in (1, 8)]


def _kernels(name: str):
    return read_capture(RUNS / name).kernels


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: f"{p[0]}-b{p[1]}")
def capture(request):
    model, batch = request.param
    return model, batch, _kernels(f"{model}-b{batch}-p{PROMPT}.csv.gz")


def _messages(stack):
    return [entry.split(":", 1)[1] for entry in stack]


def test_phases_and_roles_all_present_from_nvtx(capture):
    _, _, k = capture
    assert set(k["phase"]) == set(PHASES)
    for phase in PHASES:
        assert set(k.loc[k["phase"] == phase, "role"]) == set(ROLES), phase
    assert (k["role_source"] == "nvtx").all()


def test_only_the_representative_layer_and_step_were_profiled(capture):
    _, _, k = capture
    for stack, phase in zip(k["nvtx_stack"], k["phase"]):
        messages = _messages(stack)
        assert all(entry.startswith("smlens:") for entry in stack)
        expected = [phase, "step_1", "layer_0"] if phase == "decode" else [phase, "layer_0"]
        assert messages[: len(expected)] == expected


def test_gemm_shapes_recorded(capture):
    model, batch, k = capture
    shape = get_model(model)
    for phase in PHASES:
        tokens = batch * (1 if phase == "decode" else PROMPT)
        for role, mnk in shape.gemm_shapes(tokens).items():
            rows = k[(k["phase"] == phase) & (k["role"] == role)]
            assert {tuple(int(v) for v in r) for r in rows[["shape_m", "shape_n", "shape_k"]].values} == {mnk}
    # the other roles carry no M N K (attention's shape has other names)
    assert k.loc[k["role"].isin(["attention", "elementwise"]), "shape_m"].isna().all()


def test_kernels_per_layer_match_the_plan(capture):
    """The plan's estimate per role (decoder.layer_kernels): exact at prefill; at decode a GEMM
    role adds at most a split-K reduce, attention runs one or two kernels, and at batch 1 RoPE
    needs no copy before its roll (one token's q and k are already contiguous)."""
    _, batch, k = capture
    for phase in PHASES:
        rows = k[k["phase"] == phase]
        counts = rows.groupby("role").size().to_dict()
        estimate = decoder.layer_kernels(phase)
        if phase != "decode":
            assert counts == estimate
            continue
        assert counts["elementwise"] == estimate["elementwise"] - (batch == 1)
        for role in GEMM_ROLES:
            kinds = rows.loc[rows["role"] == role, "kind"].tolist()
            assert kinds.count("gemm") == 1 and set(kinds) <= {"gemm", "splitk_reduce"}
        assert 1 <= counts["attention"] <= 2
        assert (rows.loc[rows["role"] == "attention", "kernel_name"].str.contains("flash")).sum() == 1


def test_fill_from_the_shapes(capture):
    """Useful FLOPs from the recorded M N K over the tensor ops the counters saw: decode at batch
    1 fills one eighth of the 8-wide token tile, batch 8 fills it; the tile prediction agrees."""
    views = pytest.importorskip("views.registry")
    _, batch, k = capture
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figures = views.compute_views(k).kernels
    gemms = figures[figures["kind"] == "gemm"]
    assert len(gemms) == 12 and gemms["fill"].notna().all()
    assert (gemms["validation_V3"] == "pass").all()
    prefill = gemms[gemms["phase"] != "decode"]["fill"]
    decode = gemms[gemms["phase"] == "decode"]["fill"]
    assert prefill.min() > 0.93 and prefill.max() <= 1.0 + 1e-9
    if batch == 1:
        assert decode.max() <= 0.125 + 1e-9 and decode.min() > 0.1
    else:
        assert decode.min() > 0.85
    # on the elapsed basis, at the device's best rate (every GEMM here runs wgmma: the same rate)
    useful = gemms["tensor_pipe_pct"] * gemms["sm_active_pct"] / 100 * gemms["fill"]
    assert (gemms["useful_tensor_pct"] - useful).abs().max() < 0.02


def _signature(k):
    """Each profiled kernel as (phase, role, name, grid, block, shape), in launch order."""
    cols = ["phase", "role", "kernel_name", "grid_x", "grid_y", "grid_z", "block_threads",
            "shape_m", "shape_n", "shape_k"]
    import pandas as pd
    return [tuple(None if pd.isna(v) else v for v in row) for row in k[cols].astype(object).values]


def _region(stack):
    messages = _messages(stack)
    return tuple(m for m in messages if m.startswith(("step_", "layer_")))


def test_deduplication_loses_no_distinct_kernel():
    """Every layer of a phase, and every decode step after the first, launches the same kernel
    sequence; the deduplicated run profiled exactly that sequence once per phase."""
    every = _kernels("dedup-reference-all-layers.csv.gz")
    dedup = _kernels("dedup-reference-deduplicated.csv.gz")
    every = every.assign(region=[_region(s) for s in every["nvtx_stack"]])
    for phase in PHASES:
        rows = every[every["phase"] == phase]
        by_region = {region: _signature(group) for region, group in rows.groupby("region", sort=False)}
        representative = ("step_1", "layer_0") if phase == "decode" else ("layer_0",)
        wanted = by_region[representative]
        for region, sequence in by_region.items():
            if region[:1] == ("step_0",):
                continue  # the first decode step: see below
            assert sequence == wanted, (phase, region)
        assert _signature(dedup[dedup["phase"] == phase]) == wanted
    # The first decode step differs: its input is a strided view of the prefill output, so
    # RMSNorm copies it first (one more kernel). That is why step 1 stands for decode.
    step0 = every[every["region"] == ("step_0", "layer_0")]
    step1 = every[every["region"] == ("step_1", "layer_0")]
    assert len(step0) == len(step1) + 1
    # what dedup skipped: the other layer and step; the plan's estimate says as much
    assert len(every) - len(dedup) == 95
    config = decoder.WorkloadConfig(get_model("llama-3.1-8b"), layers=2, batch=8, prompt=512,
                                    decode_steps=2)
    profiled = dedup.groupby("phase").size()
    skipped = sum(profiled[r.phase] * (r.repeats - 1) for r in decoder.profiled_regions(config))
    assert skipped == 94  # 95 less the first step's extra copy


def test_gate_captures_are_the_same_workload():
    """Three separate runs of one decode workload launch the same kernels; batch 4 another set."""
    runs = [_kernels(f"gate-b1-r{i}.csv.gz") for i in (1, 2, 3)]
    assert len({tuple(_signature(k)) for k in runs}) == 1
    times = [k["gpu__time_duration.sum"].sum() for k in runs]
    assert max(times) / min(times) < 1.1  # the same work, run to run
    other = _kernels("gate-b4-r1.csv.gz")
    assert _signature(other) != _signature(runs[0])
    assert set(other.loc[other["role"] == "qkv_proj", "shape_m"]) == {4}
    assert set(runs[0].loc[runs[0]["role"] == "qkv_proj", "shape_m"]) == {1}
