"""The sweep study as the H200 made it (tests/data/h200_sweep, its PROVENANCE): Llama-3.1-8B at
batch 1, 4, 16, 64 x prompt 256, 1024, 4096 and four model shapes at batch 1 and 16, prompt 1024,
2 layers, 2 decode steps, in a store carried over two device calls. What the sweep finds in it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commands import sweep as sweep_command
from profiler.ingest.stores import open_store
from profiler.run import sweep as sw
from reports.sweep_text import findings_told
from views.registry import required_metrics

STUDY = Path(__file__).parent / "data" / "h200_sweep" / "store"
LLAMA_SWEEP = "sw-b903bf6aee"
MODELS = "llama-3.1-8b,qwen2.5-7b,mistral-7b,llama-3.1-70b"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    copy = tmp_path_factory.mktemp("study") / "store"
    shutil.copytree(STUDY, copy)  # reading a store may tidy it; the committed one stays as made
    return open_store(copy, create=False)


@pytest.fixture(scope="module")
def llama(store):
    return sweep_command.analyse(sweep_command.stored_points(store, [f"tag:sweep={LLAMA_SWEEP}"]), store)


def at(result, phase, role, batch, prompt=1024) -> dict:
    s = result.series
    (row,) = s[(s["phase"] == phase) & (s["role"] == role) & (s["batch"] == batch)
               & (s["prompt"] == prompt)].to_dict("records")
    return row


def test_the_resumed_grid_is_whole(store, llama):
    """The point cut short by the first call's time limit was profiled again in the second: the
    sweep stands on the complete run, the partial one superseded."""
    assert len(llama.points) == 12 and set(llama.points["status"]) == {"complete"}
    (big,) = llama.points[(llama.points["batch"] == 64) & (llama.points["prompt"] == 4096)].to_dict("records")
    assert big["run_id"] == "a8c6b9cf"
    partial = store.runs().set_index("id").loc["18737124"]
    assert bool(partial["partial"]) and json.loads(partial["tags"])["sweep"] == LLAMA_SWEEP


def test_the_second_grid_reuses_the_first_ones_points(store):
    metrics = list(required_metrics())
    tags = json.loads(store.runs().set_index("id").loc["dd6be9c3", "tags"])
    assert sw.metrics_digest(metrics) == tags["metrics"], \
        "the views' metric list changed since the H200 study: a sweep's id names its metrics"
    grid = sw.make_grid(MODELS, "1,16", "1024", {"layers": 2, "decode_steps": 2}, metrics)
    assert grid.id == tags["sweep"]
    states = {s.point.label(): (s.status, s.run_id) for s in sw.states(grid, store.path)}
    assert states["llama-3.1-8b b1 p1024"] == ("reused", "d8ded4fd")
    assert states["llama-3.1-8b b16 p1024"] == ("reused", "60d598b6")
    assert [status for status, _ in states.values()].count("stored") == 6


def test_decode_projections_stay_memory_bound_and_fill_their_tiles(llama):
    """Decode GEMMs run M = batch rows on cuBLASLt tiles of 8 rows (batch 1, 4), 16 (batch 16) and
    64 (batch 64): the useful MMA share is batch / rows; DRAM stays at 63-86 % of its peak, memory
    the bound, at every batch up to 64; per token the step gets 59 times cheaper."""
    for role in ("qkv_proj", "gate_up_proj", "down_proj"):
        rows = [at(llama, "decode", role, b) for b in (1, 4, 16, 64)]
        assert [r["bound"] for r in rows] == ["memory"] * 4, role
        assert all(63 <= r["dram_pct"] <= 86 for r in rows), role
        assert [round(r["fill"], 2) for r in rows[:3]] == [0.12, 0.5, 1.0], role
        assert rows[3]["fill"] >= 0.96  # down_proj, on a 96x64 tile: 0.97
        assert "x8x64" in rows[1]["main_kernel"] and "x16x64" in rows[2]["main_kernel"]
    gate_up = [at(llama, "decode", "gate_up_proj", b)["time_per_token_ns"] for b in (1, 64)]
    assert gate_up[0] / 1000 == pytest.approx(58.7, abs=0.5) and gate_up[0] / gate_up[1] == pytest.approx(58, abs=2)


def test_what_the_findings_say(llama):
    texts = [f["text"] for f in findings_told(llama.findings)]
    assert texts[0].startswith("cold_prefill and warm_prefill · gate_up_proj (llama-3.1-8b): the library "
                               "picks another kernel between 4,096 and 16,384 tokens (batch x prompt): "
                               "cublaslt_nvjet 320x128x64 (sm90 wgmma) → cublaslt_nvjet 192x192x64")
    assert any(t.startswith("decode · gate_up_proj (llama-3.1-8b): the library picks another kernel between "
                            "batch 4 and 16: cublaslt_nvjet 128x8x64 (sm90 wgmma) → cublaslt_nvjet 128x16x64")
               for t in texts)
    # the persistent prefill gate_up kernel: 224 tiles on 132 CTAs at 256 tokens, 896 at 1,024
    (waves,) = [t for t in texts if "gate_up_proj" in t and "wave count" in t and "prefill" in t]
    assert "between 256 and 1,024 tokens" in waves and "1.70 → 6.79 waves" in waves
    assert "wave efficiency 0.85 → 0.97" in waves


def test_a_flip_at_the_bound_floor_says_so(llama):
    """Decode o_proj (a split-K GEMM and its reduce) sits at V7's 60 % floor: its bound flips back
    and forth along both axes, each sentence saying the flip is at the floor; the flips along the
    prompt, where a decode GEMM's token count does not change, are told per line, not as a token
    threshold."""
    flips = [f["text"] for f in findings_told(llama.findings) if f["text"].startswith("decode · o_proj") and "bound flips" in f["text"]]
    assert len(flips) >= 3 and all("(near V7's 60 % floor)" in t for t in flips)
    assert any(t.startswith("decode · o_proj (llama-3.1-8b, batch 1): the bound flips at prompt 256 → 1024")
               for t in flips)
    assert not any("gate_up_proj" in f["text"] and "bound flips" in f["text"] for f in findings_told(llama.findings))
