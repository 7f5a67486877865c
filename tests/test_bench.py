"""The determinism benchmark on the CPU: batch-size parsing, the bit checks' logic on CPU functions,
the whole benchmark run on the CPU at tiny sizes (det as its exact emulation, a stand-in baseline
whose order follows the batch size), the decoder layer's cache, targets, the comparison of two
results, the CLI's errors and exit codes. What the H200 recorded (tests/data/h200_det/) is read back
in tests/records/test_h200_bench_records.py."""
from __future__ import annotations

import io
import json

import pytest

from profiler.errors import BadInput
from profiler.workloads.deterministic import bench
from profiler.workloads.deterministic.measure import summarize, tensor_digest
from tests.cli import smlens



def test_parse_batches():
    assert bench.parse_batches("1..256") == list(range(1, 257))
    assert bench.parse_batches("1,2,4,8") == [1, 2, 4, 8]
    assert bench.parse_batches("1..3, 16,3") == [1, 2, 3, 16]
    for bad in ("0", "5..1", "a..3", "", "1..x", "70000"):
        with pytest.raises(BadInput):
            bench.parse_batches(bad)


def test_summarize_and_roofline():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median_us"], s["p10_us"], s["p90_us"], s["samples"]) == (3.0, 1.0, 5.0, 5)
    # docs/DETERMINISM.md: gate_up's 235 MB of bf16 weights take 49 us at 4.8 TB/s
    assert bench.weight_roofline_us(28672, 4096) == pytest.approx(48.9, abs=0.1)


def test_sample_positions_spread_over_the_output():
    pos = bench.sample_positions(2048, 4096, 256, seed=3)
    rows = [m for m, _ in pos]
    cols = [n for _, n in pos]
    assert (0 in cols) and (4095 in cols) and all(0 <= n < 4096 for n in cols)
    assert sum(m < 2 for m in rows) >= 100 and max(rows) > 1024      # checked at every M, and deep rows
    assert pos == bench.sample_positions(2048, 4096, 256, seed=3)
    assert pos != bench.sample_positions(2048, 4096, 256, seed=4)


# --- the bit checks, on CPU functions -----------------------------------------------------------

try:
    import torch
except ImportError:  # CI without the gpu extra: these tests skip, the rest run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def _w(n=24, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g).to(torch.bfloat16)


def _chain_follows_batch(x, w, bias=None):
    """A stand-in for a library whose reduction split follows the batch size (as heuristics do)."""
    from profiler.workloads.deterministic.reference import CHAIN_K, reference_linear
    return torch.from_numpy(reference_linear(x, w, chain_k=16 if x.shape[0] < 3 else CHAIN_K))


@needs_torch
def test_batch_invariance_counts_changed_batches():
    from profiler.workloads.deterministic.reference import reference_linear
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
    assert res["distinct"] == 1 and res["sha256"] == tensor_digest(x * 2)
    noisy = iter(range(100))
    res = bench.run_to_run(lambda t: t + next(noisy), x, repeats=5)
    assert res["distinct"] == 5 and res["sha256"] is None


@needs_torch
def test_tensor_digest_is_of_the_bits():
    a = torch.tensor([0.0, 1.0])
    b = torch.tensor([-0.0, 1.0])
    assert torch.equal(a, b) and tensor_digest(a) != tensor_digest(b)
    assert tensor_digest(a.to(torch.bfloat16)) != tensor_digest(b.to(torch.bfloat16))


@needs_torch
def test_reference_check_counts_mismatches():
    from profiler.workloads.deterministic.reference import reference_linear
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
def test_emulation_check_at_every_m():
    from profiler.workloads.deterministic.reference import reference_linear
    w = _w(40, 300)
    x = torch.randn(9, 300, generator=torch.Generator().manual_seed(4))
    pos = bench.sample_positions(9, 40, 30, seed=0)
    res = bench.emulation_check(lambda xb: torch.from_numpy(reference_linear(xb, w)), x, w, pos, [1, 4, 9])
    assert res["equal"] and set(res["by_M"]) == {"1", "4", "9"}
    # each position is checked at every M above its row
    assert res["checked"] == sum((m < 1) + (m < 4) + (m < 9) for m, _ in pos)
    res = bench.emulation_check(lambda xb: _chain_follows_batch(xb, w), x, w, pos, [1, 4, 9])
    assert res["by_M"]["1"] > 0 and res["by_M"]["4"] == res["by_M"]["9"] == 0 and not res["equal"]


@needs_torch
def test_decoder_layer_cache_matches_prefill():
    """The layer the benchmark times: one decode step against the KV cache gives the last row of a
    prefill over the same tokens (the static cache and its mask are right)."""
    from profiler.workloads.deterministic.generate import Decoder, Weights
    from profiler.workloads.models import get_model
    weights = Weights(get_model("tiny"), layers=1, vocab=0, seed=0, device="cpu")
    h = torch.randn(1, 33, 64, generator=torch.Generator().manual_seed(3))
    full = Decoder(weights, "layercast", 1, 40).hidden(h, torch.arange(33), decode=False)
    step = Decoder(weights, "layercast", 1, 40)
    step.hidden(h[:, :32], torch.arange(32), decode=False)
    last = step.hidden(h[:, 32:], torch.tensor([32]), decode=True)
    torch.testing.assert_close(last, full[:, -1:], rtol=1e-5, atol=1e-5)


# --- the whole benchmark on the CPU ------------------------------------------------------------

CPU_BATCHES = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def cpu_run():
    """`run_determinism` on the CPU at the tiny model's shapes; LayerCast replaced by a stand-in
    whose chain length follows the batch size (CPU BLAS may or may not change with it)."""
    pytest.importorskip("torch")
    from profiler.workloads.deterministic import kernels
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "layercast_linear", _chain_follows_batch)
        return bench.run_determinism("tiny", CPU_BATCHES, repeats=3, impls=["det", "layercast", "cublas_bf16"],
                                     decode_tokens=(1, 2), prefill_tokens=(17,), emulate=True,
                                     emulate_m=(1, 2, 17), layer=True, device="cpu",
                                     layer_options={"prompt": 8, "decode_steps": 2, "repeats": 2})


def _bits(result, impl):
    return {e["role"]: e for e in result["bits"] if e["impl"] == impl}


def test_cpu_run_det_bits(cpu_run):
    assert cpu_run["device"] == "cpu" and cpu_run["batches"] == [1, 5, 5] and cpu_run["repeats"] == 3
    det = _bits(cpu_run, "det")
    assert set(det) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert {r: (e["N"], e["K"]) for r, e in det.items()} == {
        "qkv_proj": (128, 64), "o_proj": (64, 64), "gate_up_proj": (256, 64), "down_proj": (64, 128)}
    for role, e in det.items():
        bi = e["batch_invariance"]
        assert bi["invariant"] and bi["row0_changed"] == 0 and bi["rows_changed"] == 0, role
        assert bi["row0_sha256_b1"] == bi["row0_sha256_bmax"]
        assert [(r["M"], r["distinct"]) for r in e["run_to_run"]] == [(16, 1)]   # 128 exceeds the 17 rows
        ref = e["reference"]
        assert ref["equal"] and ref["by_M"] == {"1": 0, "2": 0, "16": 0, "17": 0} and ref["K"] == e["K"]
    for e in cpu_run["emulation"]:
        assert e["equal"] and set(e["by_M"]) == {"1", "2", "17"} and e["checked"] > e["positions"]


def test_cpu_run_finds_the_batch_dependent_baseline(cpu_run):
    for role, e in _bits(cpu_run, "layercast").items():
        bi = e["batch_invariance"]
        assert bi["row0_changed_at"] == [1, 2] and bi["rows_changed_at"] == [1, 2] and not bi["invariant"], role
        assert bi["row0_sha256_b1"] != bi["row0_sha256_bmax"]


def test_cpu_run_timing_rows_are_consistent(cpu_run):
    rows = cpu_run["timing"]
    assert [(r["role"], r["M"]) for r in rows[:3]] == [("qkv_proj", 1), ("qkv_proj", 2), ("qkv_proj", 17)]
    assert len(rows) == 12
    for row in rows:
        assert set(row["by_impl"]) == {"det", "layercast", "cublas_bf16"}
        d = row["by_impl"]["det"]
        assert d["p10_us"] <= d["median_us"] <= d["p90_us"] and d["samples"] == (3 if row["M"] <= 64 else 5)
        assert d["tflops"] == pytest.approx(2 * row["M"] * row["N"] * row["K"] / d["median_us"] / 1e6, rel=1e-9)
        assert row["weight_roofline_us"] == pytest.approx(bench.weight_roofline_us(row["N"], row["K"]))
        assert set(row["det_speedup"]) == {"layercast", "cublas_bf16"}
        for impl, sp in row["det_speedup"].items():
            assert sp == pytest.approx(row["by_impl"][impl]["median_us"] / d["median_us"])
    lay = cpu_run["layer"]["by_impl"]
    assert set(lay) == {"det", "layercast", "cublas_bf16"} and all(r["finite"] for r in lay.values())
    assert lay["layercast"]["speedup_vs_layercast"] == 1.0
    assert bench.evaluate_targets(cpu_run) == cpu_run["targets"]


def test_cpu_run_renders_and_compares_with_itself(cpu_run, tmp_path):
    from rich.console import Console
    from reports.bench import render_result
    buf = io.StringIO()
    render_result(cpu_run, Console(file=buf, width=100, color_system=None))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "det against the CPU emulation" in text and "2/5" in text and "decoder layer" in text
    cmp = bench.compare_results(cpu_run, cpu_run)
    assert cmp["differing"] == [] and cmp["comparable"] == 12
    det_rows = [r for r in cmp["rows"] if r["impl"] == "det"]
    # row 0 at batch 1, the whole output at batch 5, run to run at M = 16, the emulated samples
    assert all(r["detail"] == "4 digests equal" for r in det_rows)


# --- targets and comparison on a made-up result -----------------------------------------------

def _result(det_digest="aa", inputs="xx", roles=("o_proj",)):
    return {"schema": bench.SCHEMA, "env": {"gpu": "GPU"}, "created": "now",
            "shapes": [{"role": r, "N": 4, "K": 8, "x_sha256": inputs, "w_sha256": "w"} for r in roles],
            "bits": [{"impl": impl, "role": r, "N": 4, "K": 8,
                      "batch_invariance": {"max_batch": 256, "row0_sha256_b1": d, "full_sha256_bmax": d + "f"},
                      "run_to_run": [{"M": 16, "sha256": d + "r"}]}
                     for r in roles for impl, d in (("det", det_digest), ("layercast", "lc"))]}


def test_compare_results():
    same = bench.compare_results(_result(), _result())
    assert same["same_bits_by_impl"] == {"det": True, "layercast": True}
    assert all(r["detail"] == "3 digests equal" for r in same["rows"])
    assert same["differing"] == [] and same["comparable"] == 2 and bench.compare_exit_code(same) == 0
    diff = bench.compare_results(_result(), _result(det_digest="bb"))
    assert diff["same_bits_by_impl"] == {"det": False, "layercast": True}
    row = [r for r in diff["rows"] if r["impl"] == "det"][0]
    assert row["status"] == "different bits" and "row0_sha256_b1" in row["detail"]
    assert bench.compare_exit_code(diff) == 1 and bench.compare_exit_code(diff, ["layercast"]) == 0
    other_inputs = bench.compare_results(_result(), _result(inputs="yy"))
    assert {r["status"] for r in other_inputs["rows"]} == {"inputs differ"}
    assert other_inputs["same_bits_by_impl"] == {} and other_inputs["comparable"] == 0
    assert bench.compare_exit_code(other_inputs) == 2


def test_compare_names_every_differing_case():
    roles = ("qkv_proj", "o_proj", "down_proj")
    a = _result(roles=roles)
    b = _result(roles=roles)
    for e in b["bits"]:
        if e["impl"] == "det" and e["role"] != "o_proj":
            e["batch_invariance"]["full_sha256_bmax"] = "changed"
    cmp = bench.compare_results(a, b)
    assert cmp["differing"] == ["det qkv_proj 4x8: full_sha256_bmax", "det down_proj 4x8: full_sha256_bmax"]
    assert bench.compare_exit_code(cmp) == 1
    # a file without the det cases has nothing to judge
    only_lc = _result(roles=roles)
    only_lc["bits"] = [e for e in only_lc["bits"] if e["impl"] != "det"]
    assert bench.compare_exit_code(bench.compare_results(only_lc, a)) == 2


def test_evaluate_targets():
    res = {"timing": [{"role": "o_proj", "M": 1, "det_speedup": {"layercast": 3.2, "cublas_bf16": 0.6}},
                      {"role": "o_proj", "M": 2048, "det_speedup": {"layercast": 0.9}}],
           "layer": {"by_impl": {"det": {"speedup_vs_layercast": 1.3}}},
           "generation": {"by_impl": {"det": {"by_batch": {
               "1": {"logits_identical": True, "tokens_identical": True},
               "8": {"logits_identical": False, "tokens_identical": True}}}}},
           "emulation": [{"role": "o_proj", "checked": 200, "mismatches": 0, "equal": True}]}
    got = {(t["target"], t["M"]): t for t in bench.evaluate_targets(res)}
    assert got[("decode >= 3x LayerCast", 1)]["pass"]
    assert got[("decode within 1.5x cuBLAS bf16", 1)]["value"] == pytest.approx(1 / 0.6)
    assert not got[("decode within 1.5x cuBLAS bf16", 1)]["pass"]
    assert not got[("prefill >= LayerCast", 2048)]["pass"]
    assert got[("decoder layer >= 1.17x LayerCast", None)]["pass"]
    gen = got[("det generation batch-invariant", None)]
    assert gen["value"] == 0.5 and not gen["pass"]
    assert got[("det = CPU emulation", None)]["pass"]


# --- the CLI ---------------------------------------------------------------------------------------

def test_cli_compare_exit_codes(tmp_path):
    a, b, c, d = (tmp_path / f"{n}.json" for n in "abcd")
    a.write_text(json.dumps(_result()))
    b.write_text(json.dumps(_result()))
    c.write_text(json.dumps(_result(det_digest="bb")))
    d.write_text(json.dumps(_result(inputs="yy")))
    code, out, _ = smlens("bench", "compare", a, b)
    assert code == 0 and "same bits on both" in out
    code, out, _ = smlens("bench", "compare", a, c, "--format", "json")
    assert code == 1 and json.loads(out)["same_bits_by_impl"]["det"] is False
    code, out, _ = smlens("bench", "compare", a, c)
    assert code == 1 and "differs: det o_proj 4x8" in out
    assert smlens("bench", "compare", a, c, "--impl", "layercast")[0] == 0
    code, _, err = smlens("bench", "compare", a, d)
    assert code == 2 and err.startswith("smlens: ") and "no comparable case of det" in err


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
        code, _, err = smlens(*args)
        assert code == 2, (args, err)
        assert err.startswith("smlens: ") and text in err and "Traceback" not in err


@needs_torch
def test_cli_determinism_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = smlens("bench", "determinism", "--batches", "1..2", "--generate", "--emulate")
    assert code == 3 and "needs a CUDA GPU" in err
