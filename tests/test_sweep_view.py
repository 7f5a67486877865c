"""The sweep's view (views/sweep.py) and its outputs (reports/sweep.py, reports/sweep_html.py) on
real H200 runs: tests/data/h200_runs holds Llama-3.1-8B, Qwen2.5-7B, Mistral-7B and
Llama-3.1-70B at batch 1 and 8, prompt 512 (their PROVENANCE), a sweep of four models x two
batch sizes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from commands import sweep as sweep_command
from profiler.errors import BadInput
from profiler.ingest.store import Store
from reports import sweep as sweep_report
from reports import sweep_html
from reports.sweep_text import change_detail, finding_text, findings_told
from views import sweep as sweep_view
from views.registry import compute_views, input_columns

RUNS = Path(__file__).parent / "data" / "h200_runs"
PUBLIC = Path(__file__).parent / "data" / "public"
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.1-70b")


def coords(model, batch, prompt=512):
    return {"model": model, "batch": str(batch), "prompt": str(prompt)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The eight runs, tagged as a sweep's points are (model, batch, prompt)."""
    the_store = Store(tmp_path_factory.mktemp("sweep") / "store")
    for model in MODELS:
        for batch in (1, 8):
            the_store.ingest(RUNS / f"{model}-b{batch}-p512.csv.gz", name=f"{model}-b{batch}",
                             tags={**coords(model, batch), "study": "models"})
    return the_store


@pytest.fixture(scope="module")
def swept(store):
    points = sweep_command.stored_points(store, ["tag:study=models"])
    return sweep_command.analyse(points, store)


def row(result, model, batch, phase, role) -> dict:
    s = result.series
    (found,) = s[(s["model"] == model) & (s["batch"] == batch) & (s["phase"] == phase)
                 & (s["role"] == role)].to_dict("records")
    return found


def own_views(store, name):
    return compute_views(store.kernels(store.resolve(name), columns=input_columns()))


def test_each_point_carries_its_runs_own_figures(store, swept):
    assert len(swept.points) == 8 and set(swept.points["status"]) == {sweep_view.COMPLETE}
    assert swept.axis_values("batch") == [1, 8] and swept.axis_values("prompt") == [512]
    own_b8 = own_views(store, "llama-3.1-8b-b8")
    gap = own_b8.gap
    for phase, role in (("decode", "gate_up_proj"), ("cold_prefill", "down_proj"), ("decode", "all")):
        (own,) = gap[(gap["phase"] == phase) & (gap["role"] == role)].to_dict("records")
        mine = row(swept, "llama-3.1-8b", 8, phase, role)
        for column in ("sm_throughput_pct", "sm_active_pct", "tensor_pipe_elapsed_pct", "useful_tensor_pct",
                       "fill", "dram_pct", "achieved_occupancy_pct", "wave_efficiency"):
            assert mine[column] == pytest.approx(own[column], nan_ok=True), column
        assert mine["bound"] == own["bound"]
    groups = own_b8.groups
    (own,) = groups[(groups["phase"] == "decode") & (groups["role"] == "gate_up_proj")].to_dict("records")
    assert row(swept, "llama-3.1-8b", 8, "decode", "gate_up_proj")["occupancy_limiter"] == own["occupancy_limiter"]
    # per token: a decode step processes batch tokens, a prefill batch x prompt
    decode = row(swept, "llama-3.1-8b", 8, "decode", "gate_up_proj")
    prefill = row(swept, "llama-3.1-8b", 8, "cold_prefill", "gate_up_proj")
    assert decode["time_per_token_ns"] == pytest.approx(decode["time_ns"] / 8)
    assert prefill["time_per_token_ns"] == pytest.approx(prefill["time_ns"] / (8 * 512))


def test_the_physics_the_sweep_follows(swept):
    """Batch 1 fills one row of the 8-row tile of a decode GEMM, batch 8 all eight; the stall
    family of a memory-bound decode GEMM is memory; a persistent GEMM's waves are its tiles over
    its grid (652 tiles of 176x128 on 132 CTAs at prompt 512)."""
    for model in ("llama-3.1-8b", "mistral-7b", "llama-3.1-70b"):
        one, eight = (row(swept, model, b, "decode", "gate_up_proj") for b in (1, 8))
        assert one["fill"] == pytest.approx(1 / 8, abs=0.005) and eight["fill"] == pytest.approx(1.0, abs=0.005)
        assert one["bound"] == eight["bound"] == "memory" and one["top_stall_family"] == "memory"
        assert "x8x64" in one["main_kernel"]
    gate_up = row(swept, "llama-3.1-8b", 1, "cold_prefill", "gate_up_proj")
    assert gate_up["main_kernel"] == "cublaslt_nvjet 176x128x64 (sm90 wgmma)"
    assert gate_up["main_waves"] == pytest.approx(652 / 132)


def test_changes_and_findings(swept):
    changes = swept.changes
    kernel = changes[(changes["kind"] == "kernel") & (changes["model"] == "llama-3.1-8b")
                     & (changes["phase"] == "cold_prefill") & (changes["role"] == "gate_up_proj")]
    assert kernel[["from", "to", "before", "after"]].values.tolist() == [
        [1, 8, "cublaslt_nvjet 176x128x64 (sm90 wgmma)", "cublaslt_nvjet 320x128x64 (sm90 wgmma)"]]
    fill = changes[(changes["kind"] == "fill") & (changes["phase"] == "decode") & (changes["role"] == "o_proj")]
    assert len(fill) == 4 and set(fill["after"]) == {"1.00"}
    texts = [f["text"] for f in findings_told(swept.findings)]
    # a GEMM's change is told once for both prefills and every model it happens in, where its
    # token count (batch x prompt) crosses the threshold
    (told,) = [t for t in texts if "gate_up_proj (llama-3.1-8b, mistral-7b)" in t]
    assert told.startswith("cold_prefill and warm_prefill · gate_up_proj (llama-3.1-8b, mistral-7b): the "
                           "library picks another kernel between 512 and 4,096 tokens (batch x prompt): "
                           "cublaslt_nvjet 176x128x64 (sm90 wgmma) → cublaslt_nvjet 320x128x64")
    assert any(t.startswith("decode · o_proj (llama-3.1-70b, llama-3.1-8b, mistral-7b, qwen2.5-7b): the "
                            "useful MMA share jumps between batch 1 and 8: 0.12 → 1.00") for t in texts)
    # attention is no GEMM of the tokens: told per line along its axis
    assert not any("· attention" in t and "tokens" in t for t in texts)
    weights = [f["weight_pct"] for f in swept.findings]
    assert weights == sorted(weights, reverse=True)
    for finding in swept.findings:  # each names its charts and the runs behind it
        assert finding["charts"] and len(finding["runs"]) >= 2


def relabelled(swept, rows: list[tuple[str, int]], phase: str, role: str) -> pd.DataFrame:
    """Real rows of different runs set on one line along batch: the detectors' input with real
    figures (the bundled runs hold no flip along one model's batch axis)."""
    picked = []
    for batch, (model, real_batch) in enumerate(rows, 1):
        one = row(swept, model, real_batch, phase, role)
        picked.append({**one, "model": "m", "batch": batch, "prompt": 512})
    return pd.DataFrame(picked)


def test_a_bound_flip_and_a_costly_wave_crossing_are_found(swept):
    # Llama-3.1-8B's decode qkv GEMM is memory-bound (DRAM 63 %), Qwen2.5-7B's latency-bound
    series = relabelled(swept, [("llama-3.1-8b", 8), ("qwen2.5-7b", 8)], "decode", "qkv_proj")
    (flip,) = sweep_view.changes(series).query("kind == 'bound'").to_dict("records")
    assert flip["before"] == "memory" and flip["after"] == "latency"
    assert re.match(r"memory at 6\d % → latency \(DRAM \d+ %\)", change_detail(flip))
    points = pd.DataFrame({"model": ["m", "m"], "batch": [1, 2], "prompt": [512, 512], "run_id": ["a", "b"],
                           "name": ["a", "b"], "status": [sweep_view.COMPLETE] * 2, "note": ["", ""]})
    (told,) = [f["text"] for f in findings_told(sweep_view.findings(series, sweep_view.changes(series), points))
               if "bound flips" in f["text"]]
    assert told.startswith("decode · qkv_proj (m): the bound flips between batch 1 and 2: memory at ")
    assert "; useful MMA share 1.00, 1.00 at batch 1, 2 (" in told
    # the persistent decode gate_up GEMM (224 tiles on 132 CTAs: 1.70 rounds, efficiency 0.85)
    # after a 4.94-round prefill one: the count crosses and the tail costs
    waves = pd.concat([relabelled(swept, [("llama-3.1-8b", 8)], "decode", "gate_up_proj"),
                       relabelled(swept, [("llama-3.1-8b", 1)], "cold_prefill", "gate_up_proj")
                       .assign(batch=2, phase="decode")])
    (crossing,) = sweep_view.changes(waves).query("kind == 'waves'").to_dict("records")
    assert crossing["before"] == "1.70" and crossing["after"] == "4.94" and crossing["costly"]
    assert "2 → 5 waves" in change_detail(crossing)


def test_partial_and_missing_points_are_shown_never_dropped(store, swept):
    points = sweep_command.stored_points(store, ["llama-3.1-8b-b1"])
    cut = store.ingest(RUNS / "time-limited-partial.csv.gz", name="cut", partial=True,
                       tags=coords("llama-3.1-8b", 8))[0]
    points += sweep_command.stored_points(store, [cut["id"]])
    points.append({"coords": {"model": "llama-3.1-8b", "batch": 64, "prompt": 512}, "run_id": None,
                   "status": sweep_view.MISSING, "note": "not profiled yet"})
    result = sweep_command.analyse(points, store, allow_mixed=True)  # the cut run has other metrics
    assert result.points["status"].tolist() == ["complete", "partial", "missing"]
    first = finding_text(result.findings[0])
    assert first.startswith("2 of 3 point(s) not measured whole: llama-3.1-8b b8 p512: partial")
    assert "llama-3.1-8b b64 p512: missing (not profiled yet)" in first
    assert (result.series["status"] == "partial").any()        # its figures are shown, marked
    assert result.changes.empty                                # but it is no neighbour to compare
    with pytest.raises(BadInput, match="ncu metric sets"):
        sweep_command.analyse(points, store)


def test_runs_of_another_device_or_metric_set_are_refused(store, tmp_path):
    other = Store(tmp_path / "s")
    for model in ("llama-3.1-8b",):
        other.ingest(RUNS / f"{model}-b1-p512.csv.gz", tags=coords(model, 1))
    other.ingest(RUNS / "dedup-reference-all-layers.csv.gz", tags=coords("llama-3.1-8b", 8))
    points = sweep_command.stored_points(other, ["tag:prompt=512"])
    with pytest.raises(BadInput) as err:
        sweep_command.analyse(points, other)
    assert "different ncu metric sets" in str(err.value) and "--allow-mixed" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    a100 = other.ingest(PUBLIC / "a100pcie_cutlass_b2b_gemm.ncu-rep.gz", tags=coords("cutlass", 4))[0]
    mixed = sweep_command.stored_points(other, ["llama-3.1-8b-b1-p512.csv.gz", a100["id"]])
    with pytest.raises(BadInput, match="different devices .*A100.*H200|different devices .*H200.*A100"):
        sweep_command.analyse(mixed, other)
    with pytest.raises(BadInput, match="no single batch and prompt tags"):
        other.ingest(RUNS / "gate-b1-r1.csv.gz", name="untagged")
        sweep_command.stored_points(other, ["untagged"])


def test_terminal_fits_80_columns_and_json_carries_everything(swept):
    console = Console(width=80, record=True, force_terminal=False)
    sweep_report.print_sweep(swept, "sw-test", console=console, phase="decode")
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.startswith("sweep sw-test: 8 point(s), 8 measured whole; batch 1, 8, prompt 512")
    assert "decode · gate_up_proj" in text and "cold_prefill ·" not in text
    document = json.loads(json.dumps(sweep_report.sweep_json(swept, "sw-test"), allow_nan=False))
    assert len(document["points"]) == 8 and len(document["findings"]) == len(swept.findings)
    assert document["figures"]["time_per_token_ns"]["unit"] == "ns"
    assert document["figures"]["fill"]["label"] == "useful MMA share"
    (mine,) = [r for r in document["series"] if r["model"] == "llama-3.1-8b" and r["batch"] == 8
               and r["phase"] == "decode" and r["role"] == "gate_up_proj"]
    assert mine["fill"] == pytest.approx(row(swept, "llama-3.1-8b", 8, "decode", "gate_up_proj")["fill"])


def test_the_report_is_one_page_whose_findings_link_to_its_charts(swept):
    page = sweep_html.render_sweep(swept, "sw-test")
    assert "Content-Security-Policy" in page and "<script src" not in page and "http://" not in page.split("<script>")[0]
    figures = json.loads(re.search(r'<script type="application/json" id="smlens-figures">(.*?)</script>',
                                   page, re.S).group(1))
    for finding in swept.findings:
        for chart in finding["charts"]:
            assert f'href="#fig-{chart}"' in page and f"fig-{chart}" in figures
    decode = figures["fig-decode-gate_up_proj-batch"]
    assert {t["name"] for t in decode["data"]} == {f"{m}, prompt 512" for m in MODELS}
    fill = [t for t in decode["data"] if t["yaxis"] == "y3" and t["name"] == "llama-3.1-8b, prompt 512"]
    assert fill[0]["x"] == [1, 8] and fill[0]["y"] == pytest.approx([0.125, 1.0], abs=0.005)
    assert "fig-decode-gate_up_proj-prompt" not in figures  # one prompt: no line along it
