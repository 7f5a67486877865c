"""The determinism benchmark on the CPU: batch-size parsing, the bit checks' logic on CPU functions,
the decoder layer's cache, target evaluation, the comparison of two results, the CLI's errors, and
the H200 result brought back (tests/data/h200_det/, see its README)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiler.workloads.deterministic import bench
from profiler.cli import app
from profiler.errors import BadInput

DATA = Path(__file__).parent / "data" / "h200_det"
RESULT = DATA / "h200_det.json"
runner = CliRunner()


def test_parse_batches():
    assert bench.parse_batches("1..256") == list(range(1, 257))
    assert bench.parse_batches("1,2,4,8") == [1, 2, 4, 8]
    assert bench.parse_batches("1..3, 16,3") == [1, 2, 3, 16]
    for bad in ("0", "5..1", "a..3", "", "1..x", "70000"):
        with pytest.raises(BadInput):
            bench.parse_batches(bad)


def test_summarize_and_roofline():
    s = bench.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median_us"], s["p10_us"], s["p90_us"], s["samples"]) == (3.0, 1.0, 5.0, 5)
    # docs/DETERMINISM.md: gate_up's 235 MB of bf16 weights take 49 us at 4.8 TB/s
    assert bench.weight_roofline_us(28672, 4096) == pytest.approx(48.9, abs=0.1)


# --- the bit checks, on CPU functions -----------------------------------------------------------

try:
    import torch
except ImportError:  # CI without the gpu extra: these tests skip, the rest run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def _w(n=24, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g).to(torch.bfloat16)


@needs_torch
def test_batch_invariance_counts_changed_batches():
    from profiler.workloads.deterministic.kernels import reference_linear
    w = _w()
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(1))

    def invariant(xb):
        return torch.from_numpy(reference_linear(xb, w, chain_k=16))

    res = bench.batch_invariance(invariant, x, list(range(1, 13)))
    assert res["invariant"] and res["row0_changed"] == 0 and res["rows_changed"] == 0
    assert res["row0_sha256_b1"] == res["row0_sha256_bmax"]

    def batch_dependent(xb):   # a chain length that follows the batch size, like a shape heuristic
        return torch.from_numpy(reference_linear(xb, w, chain_k=16 if xb.shape[0] < 8 else 32))

    res = bench.batch_invariance(batch_dependent, x, list(range(1, 13)))
    assert not res["invariant"]
    assert res["row0_changed_at"] == [1, 2, 3, 4, 5, 6, 7]
    assert res["row0_sha256_b1"] != res["row0_sha256_bmax"]


@needs_torch
def test_run_to_run_digests():
    x = torch.randn(4, 8)
    res = bench.run_to_run(lambda t: t * 2, x, repeats=5)
    assert res["distinct"] == 1 and res["sha256"] == bench.tensor_digest(x * 2)
    noisy = iter(range(100))
    res = bench.run_to_run(lambda t: t + next(noisy), x, repeats=5)
    assert res["distinct"] == 5 and res["sha256"] is None


@needs_torch
def test_tensor_digest_is_of_the_bits():
    a = torch.tensor([0.0, 1.0])
    b = torch.tensor([-0.0, 1.0])
    assert torch.equal(a, b) and bench.tensor_digest(a) != bench.tensor_digest(b)
    assert bench.tensor_digest(a.to(torch.bfloat16)) != bench.tensor_digest(b.to(torch.bfloat16))


@needs_torch
def test_reference_check_counts_mismatches():
    from profiler.workloads.deterministic.kernels import reference_linear
    w = _w(8, 512)
    x = torch.randn(4, 512, generator=torch.Generator().manual_seed(2))
    cols = bench.reference_columns(8, count=4)
    assert cols == [0, 1, 6, 7]
    exact = lambda xb: torch.from_numpy(reference_linear(xb, w))  # noqa: E731
    res = bench.reference_check(exact, x, w, rows=2, columns=cols, Ms=[1, 3])
    assert res["equal"] and res["by_M"] == {"1": 0, "3": 0}
    res = bench.reference_check(lambda xb: xb.double() @ w.double().T, x, w, rows=2, columns=cols, Ms=[2])
    assert not res["equal"] and 0 < res["mismatches"] <= 8


@needs_torch
def test_decoder_layer_cache_matches_prefill():
    """The layer the benchmark times: one decode step against the KV cache gives the last row of a
    prefill over the same tokens (the static cache and its mask are right)."""
    full_layer = bench._Layer("tiny", "layercast", 40, 0, device="cpu")
    h = torch.randn(33, 64, generator=torch.Generator().manual_seed(3))
    full = full_layer.forward(h, torch.arange(33), decode=False)
    step_layer = bench._Layer("tiny", "layercast", 40, 0, device="cpu")
    step_layer.forward(h[:32], torch.arange(32), decode=False)
    last = step_layer.forward(h[32:], torch.tensor([32]), decode=True)
    torch.testing.assert_close(last, full[-1:], rtol=1e-5, atol=1e-5)


# --- targets and comparison on a made-up result -----------------------------------------------

def _result(det_digest="aa", inputs="xx"):
    return {"schema": bench.SCHEMA, "env": {"gpu": "GPU"}, "created": "now",
            "shapes": [{"role": "o_proj", "N": 4, "K": 8, "x_sha256": inputs, "w_sha256": "w"}],
            "bits": [{"impl": impl, "role": "o_proj", "N": 4, "K": 8,
                      "batch_invariance": {"max_batch": 256, "row0_sha256_b1": d, "full_sha256_bmax": d + "f"},
                      "run_to_run": [{"M": 16, "sha256": d + "r"}]}
                     for impl, d in (("det", det_digest), ("layercast", "lc"))]}


def test_compare_results():
    same = bench.compare_results(_result(), _result())
    assert same["same_bits_by_impl"] == {"det": True, "layercast": True}
    assert all(r["detail"] == "3 digests equal" for r in same["rows"])
    diff = bench.compare_results(_result(), _result(det_digest="bb"))
    assert diff["same_bits_by_impl"] == {"det": False, "layercast": True}
    row = [r for r in diff["rows"] if r["impl"] == "det"][0]
    assert row["status"] == "different bits" and "row0_sha256_b1" in row["detail"]
    other_inputs = bench.compare_results(_result(), _result(inputs="yy"))
    assert {r["status"] for r in other_inputs["rows"]} == {"inputs differ"}
    assert other_inputs["same_bits_by_impl"] == {}


def test_evaluate_targets():
    res = {"timing": [{"role": "o_proj", "M": 1, "det_speedup": {"layercast": 3.2, "cublas_bf16": 0.6}},
                      {"role": "o_proj", "M": 2048, "det_speedup": {"layercast": 0.9}}],
           "layer": {"by_impl": {"det": {"speedup_vs_layercast": 1.3}}}}
    got = {(t["target"], t["M"]): t for t in bench.evaluate_targets(res)}
    assert got[("decode >= 3x LayerCast", 1)]["pass"]
    assert got[("decode within 1.5x cuBLAS bf16", 1)]["value"] == pytest.approx(1 / 0.6)
    assert not got[("decode within 1.5x cuBLAS bf16", 1)]["pass"]
    assert not got[("prefill >= LayerCast", 2048)]["pass"]
    assert got[("decoder layer >= 1.17x LayerCast", None)]["pass"]


# --- the CLI ---------------------------------------------------------------------------------------

def test_cli_compare_exit_codes(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_result()))
    b.write_text(json.dumps(_result()))
    c.write_text(json.dumps(_result(det_digest="bb")))
    r = runner.invoke(app, ["bench", "compare", str(a), str(b)])
    assert r.exit_code == 0 and "same bits on both" in r.output
    r = runner.invoke(app, ["bench", "compare", str(a), str(c), "--format", "json"])
    assert r.exit_code == 1 and json.loads(r.output)["same_bits_by_impl"]["det"] is False


def test_cli_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema": "something else"}))
    for args, text in ((["bench", "compare", str(bad), str(bad)], "not a determinism result"),
                       (["bench", "compare", str(wrong), str(wrong)], "schema"),
                       (["bench", "compare", str(tmp_path / "none.json"), str(bad)], "no such file"),
                       (["bench", "determinism", "--batches", "0..4"], "positive batch sizes"),
                       (["bench", "determinism", "--impl", "det,fast"], "unknown fast"),
                       (["bench", "determinism", "--model", "gpt-9"], "unknown model")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert text in r.output and "Traceback" not in r.output


@needs_torch
def test_cli_determinism_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = runner.invoke(app, ["bench", "determinism", "--batches", "1..2"])
    assert r.exit_code == 3 and "needs a CUDA GPU" in r.output


# --- the H200 result (one `smlens bench determinism` run, tests/data/h200_det/README.md) -----------

@pytest.fixture(scope="module")
def h200():
    return bench.load_result(RESULT)


def _bits(result, impl):
    return {e["role"]: e for e in result["bits"] if e["impl"] == impl}


def test_h200_det_bits(h200):
    assert h200["env"]["gpu"] == "NVIDIA H200" and h200["repeats"] == 50 and h200["batches"] == [1, 256, 256]
    det = _bits(h200, "det")
    assert set(det) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    for role, e in det.items():
        bi = e["batch_invariance"]
        assert bi["invariant"] and bi["row0_changed"] == 0 and bi["rows_changed"] == 0, role
        assert bi["row0_sha256_b1"] == bi["row0_sha256_bmax"]
        assert [r["distinct"] for r in e["run_to_run"]] == [1, 1] and all(r["repeats"] == 50 for r in e["run_to_run"])
        ref = e["reference"]
        assert ref["equal"] and ref["by_M"] == {"1": 0, "2": 0, "16": 0, "17": 0, "256": 0}
        assert ref["K"] == e["K"] and ref["columns"] == 64     # full K, both ends of N


def test_h200_baselines_change_with_batch(h200):
    changed = {impl: {r: e["batch_invariance"]["row0_changed"] for r, e in _bits(h200, impl).items()}
               for impl in ("layercast", "cublas_bf16", "bi_tc")}
    assert changed["layercast"] == {"qkv_proj": 192, "o_proj": 204, "gate_up_proj": 141, "down_proj": 192}
    assert changed["cublas_bf16"] == {"qkv_proj": 0, "o_proj": 34, "gate_up_proj": 0, "down_proj": 134}
    assert changed["bi_tc"] == {"qkv_proj": 0, "o_proj": 0, "gate_up_proj": 0, "down_proj": 0}


def test_h200_other_configurations_same_bits(h200):
    """The call before the last ran other tile configurations on another machine (decode programs
    of 4 warps with 16-row stages, 128x64 tiles keeping the total in shared memory): same bits."""
    before = bench.load_result(DATA / "h200_det_call2.json")
    cmp = bench.compare_results(before, h200)
    det_rows = [r for r in cmp["rows"] if r["impl"] == "det"]
    assert len(det_rows) == 4 and all(r["status"] == "same bits" for r in det_rows)
    assert cmp["same_bits_by_impl"]["det"] is True
    r = runner.invoke(app, ["bench", "compare", str(DATA / "h200_det_call2.json"), str(RESULT)])
    assert r.exit_code == 0


def test_h200_targets(h200):
    assert bench.evaluate_targets(h200) == h200["targets"]
    by = {(t["target"], t["role"], t["M"]): t for t in h200["targets"]}
    for role in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        for M in (1, 8, 16):
            assert by[("decode >= 3x LayerCast", role, M)]["pass"]
        for M in (1, 8):
            assert by[("decode within 1.5x cuBLAS bf16", role, M)]["pass"]
        assert not by[("decode within 1.5x cuBLAS bf16", role, 16)]["pass"]
        assert 0.85 < by[("prefill >= LayerCast", role, 2048)]["value"] < 0.93
    layer = by[("decoder layer >= 1.17x LayerCast", "layer", None)]
    assert layer["pass"] and layer["value"] == pytest.approx(55.51 / 34.70, abs=0.01)
    lay = h200["layer"]["by_impl"]
    assert all(r["finite"] for r in lay.values())
    assert lay["det"]["decode_ms"] < lay["layercast"]["decode_ms"] / 3


def test_h200_timing_rows_are_consistent(h200):
    for row in h200["timing"]:
        d = row["by_impl"]["det"]
        assert d["p10_us"] <= d["median_us"] <= d["p90_us"]
        assert d["tflops"] == pytest.approx(2 * row["M"] * row["N"] * row["K"] / d["median_us"] / 1e6, rel=1e-9)
        assert row["weight_roofline_us"] == pytest.approx(bench.weight_roofline_us(row["N"], row["K"]))
        for impl, sp in row["det_speedup"].items():
            assert sp == pytest.approx(row["by_impl"][impl]["median_us"] / d["median_us"])


def test_render_real_result_fits_a_terminal(h200):
    import io
    from rich.console import Console
    buf = io.StringIO()
    bench.render_result(h200, Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "2362.6" in text and "0/256" in text and "204/256" in text and "1.60x" in text
