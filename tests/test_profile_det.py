"""`smlens profile --workload det-gemm` on a machine with no GPU: the plan, the options, and the
program's own argument parsing (the deterministic GEMM workload runs only on a GPU)."""
from __future__ import annotations

import json

import pytest

from profiler.run import ncu
from tests.cli import smlens


def test_plan_one_run_per_impl_without_ncu_or_gpu(monkeypatch, tmp_path):
    from views.registry import required_metrics
    monkeypatch.setenv("PATH", str(tmp_path))  # neither ncu nor nvidia-smi
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    code, out, err = smlens("profile", "--workload", "det-gemm", "--plan", "--format", "json",
                            "--impl", "det,cublas_bf16,layercast", "--tokens", "1,16,2048")
    assert code == 0, err
    plans = json.loads(out)
    assert [p["invocations"][0]["label"] for p in plans] == ["det", "cublas_bf16", "layercast"]
    for plan in plans:
        (inv,) = plan["invocations"]
        impl = inv["label"]
        # the phase ranges only: each case's warm-up call, outside any range, is not profiled
        assert inv["nvtx_include"] == ["smlens@decode/", "smlens@warm_prefill/"]
        assert inv["phases"] == ["decode", "warm_prefill"]
        # weights from DRAM at every replay pass, as in a model whose other layers evicted them
        assert inv["cache_control"] == "all"
        cmd = inv["command"]
        assert cmd[:3] == ["ncu", "--clock-control", "none"]
        assert cmd[cmd.index("--metrics") + 1].split(",") == required_metrics()
        tail = cmd[cmd.index("-m"):]
        assert tail == ["-m", "profiler.workloads.deterministic.workload", "--model", "llama-3.1-8b",
                        "--tokens", "1,16,2048", "--impl", impl]
        # 4 projections x 3 M values, about 2 kernels each
        assert plan["expected_kernels"] == 24 and plan["skipped_duplicates_estimate"] is None
        assert "12 GEMM(s)" in plan["title"] and impl in plan["title"]


def test_plan_text_names_the_filters_and_the_comparison():
    code, out, _ = smlens("profile", "--workload", "det-gemm", "--plan", "--tokens", "1,16",
                          "--model", "qwen2.5-7b")
    assert code == 0
    # decode only: M <= 64; two impls by default, det and cuBLAS bf16
    assert out.count("ncu run 1 ") == 2
    assert "--nvtx-include smlens@decode/ --target-processes" in out and "warm_prefill" not in out
    assert "--model qwen2.5-7b --tokens 1,16 --impl det" in out
    assert "--model qwen2.5-7b --tokens 1,16 --impl cublas_bf16" in out
    assert "smlens gate --baseline <cublas_bf16 run> --current <det run>" in out
    assert "≈16 kernel(s) profiled" in out


def test_cache_control_can_be_chosen():
    code, out, _ = smlens("profile", "--workload", "det-gemm", "--plan", "--format", "json",
                          "--impl", "det", "--cache-control", "none")
    (plan,) = json.loads(out)
    assert code == 0 and plan["invocations"][0]["cache_control"] == "none"
    assert not any("--cache-control all" in n for n in plan["notes"])


@pytest.mark.parametrize("args, words", [
    (["--impl", "fast"], "--impl 'fast': unknown fast"),
    (["--impl", ","], "empty list"),
    (["--tokens", "1,x"], "--tokens"),
    (["--tokens", "0"], "--tokens"),
    (["--model", "gpt-9"], "unknown model"),
    (["--batch", "8"], "--batch is for --workload decoder"),
    (["--layers", "2", "--prompt", "128"], "--layers is for --workload decoder"),
    (["--no-dedup"], "--no-dedup is for --workload decoder"),
    (["--nvtx-include", "smlens@decode/"], "--nvtx-include is for a program given after `--`"),
])
def test_bad_det_gemm_options(args, words):
    code, _, err = smlens("profile", "--workload", "det-gemm", "--plan", *args)
    assert code == 2
    assert err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, words", [
    (["--workload", "vllm"], "--workload 'vllm': decoder or det-gemm"),
    (["--tokens", "1,16"], "--tokens is for --workload det-gemm"),
    (["--impl", "det"], "--impl is for --workload det-gemm"),
    (["--workload", "det-gemm", "--", "python3", "app.py"], "--workload names a built-in workload; "
     "a program after `--` is profiled as it is: give one or the other"),
    (["--tokens", "16", "--", "python3", "app.py"], "--tokens is for --workload det-gemm"),
    (["--model", "tiny", "--", "python3", "app.py"],
     "--model is for --workload decoder or --workload det-gemm"),
])
def test_workload_options_that_do_not_fit(args, words):
    code, _, err = smlens("profile", "--plan", *args)
    assert code == 2 and err == f"smlens: {words}\n"


def test_the_planned_program_parses_its_arguments():
    """The argv the plan gives the workload is the workload's own: on a CPU it gets as far as
    looking for the GPU (exit 3), never to an argument error (exit 2)."""
    from profiler.run import profile as prof
    from profiler.workloads.deterministic import workload as det

    options = prof.workload_options("det-gemm", given={"model": "mistral-7b", "tokens": "1,4096",
                                                       "impl": "layercast,bi_tc"})
    plans = prof.build_plans(options, ["gpu__time_duration.sum"])
    assert [(p.name, p.tags["impl"]) for p in plans] == [
        ("det-gemm-mistral-7b-layercast", "layercast"), ("det-gemm-mistral-7b-bi_tc", "bi_tc")]
    assert plans[0].tags == {"workload": "det-gemm", "model": "mistral-7b", "impl": "layercast",
                             "impls": "layercast,bi_tc", "tokens": "1,4096"}
    program = plans[0].invocations[0].program
    assert program[1:3] == ["-m", "profiler.workloads.deterministic.workload"]
    if det.torch is not None and det.torch.cuda.is_available():
        pytest.skip("a GPU is here: the workload would run")
    assert det.main(program[3:]) == 3
    # mistral-7b's projections at M = 1 (decode) and 4096 (prefill)
    cases = det.model_cases("mistral-7b", [1, 4096])
    assert [(c.phase, c.role, c.M, c.N, c.K) for c in cases[:4]] == [
        ("decode", "qkv_proj", 1, 6144, 4096), ("decode", "o_proj", 1, 4096, 4096),
        ("decode", "gate_up_proj", 1, 28672, 4096), ("decode", "down_proj", 1, 4096, 14336)]
    assert {c.phase for c in cases[4:]} == {"warm_prefill"}
