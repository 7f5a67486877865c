"""`smlens profile` and `smlens doctor` end to end on a machine with no GPU: a fake `ncu` and
`nvidia-smi` (tests/fakes) stand in, replaying a real H200 capture and running the real program.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.run import ncu
from profiler.ingest.store import Store
from tests.cli import smlens

FAKES = Path(__file__).parent / "fakes"
CAPTURE = Path(__file__).parent / "data" / "h200_runs" / "dedup-reference-all-layers.csv.gz"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the built-in workload runs torch")
TINY = ["--model", "tiny", "--layers", "2", "--prompt", "8", "--decode-steps", "2"]
QUICK = [sys.executable, "-c", "print('app ran')"]


@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.setenv("FAKE_NCU_CSV", str(CAPTURE))
    monkeypatch.setenv("FAKE_NCU_ARGS_LOG", str(tmp_path / "ncu-args.jsonl"))
    for name in ("FAKE_NCU_MODE", "FAKE_SMI_MODE", "SMLENS_NCU", "SMLENS_STORE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def ncu_calls(tmp_path):
    log = tmp_path / "ncu-args.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [c for c in calls if "--version" not in c and "--import" not in c]


def one_line_error(err: str, code_text: str):
    assert err.startswith("smlens: ") and code_text in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --- the plan --------------------------------------------------------------------------------

def test_plan_needs_no_ncu_and_no_gpu(monkeypatch, tmp_path):
    from views.registry import required_metrics
    monkeypatch.setenv("PATH", str(tmp_path))  # neither ncu nor nvidia-smi
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    code, out, _ = smlens("profile", "--plan", "--layers", "4", "--batch", "8", "--decode-steps", "3")
    assert code == 0
    assert out.count("ncu run ") == 2
    assert "--cache-control all" in out and "--cache-control none" in out
    assert "--nvtx-include smlens@cold_prefill/layer_0/" in out
    assert "--nvtx-include smlens@warm_prefill/layer_0/ --nvtx-include smlens@decode/step_1/layer_0/" in out
    assert "--clock-control none" in out and "--phases cold_prefill" in out
    # 17 per prefill layer, 18 per decode layer-step; 4 layers, 3 steps
    assert f"≈{17 + 17 + 18} kernel(s) profiled, ≈{17 * 3 + 17 * 3 + 18 * 11} skipped" in out
    assert f"<METRICS> = {len(required_metrics())} metric(s)" in out

    code, out, _ = smlens("profile", "--plan", "--views", "V1,V5", "--format", "json")
    plans = json.loads(out)
    assert len(plans) == 1 and plans[0]["metrics"] == required_metrics(["V1", "V5"])
    cold, warm = plans[0]["invocations"]
    assert (cold["cache_control"], warm["cache_control"]) == ("all", "none")
    metrics_arg = cold["command"][cold["command"].index("--metrics") + 1]
    assert metrics_arg.split(",") == required_metrics(["V1", "V5"])


def test_plan_sweeps_batches_and_prompts():
    code, out, _ = smlens("profile", "--plan", "--batch", "1,8", "--prompt", "128,512", "--format", "json")
    titles = [p["title"] for p in json.loads(out)]
    assert code == 0 and len(titles) == 4
    assert "batch 8, prompt 128" in titles[2]


def test_plan_for_any_program():
    code, out, _ = smlens("profile", "--plan", "--graph-profiling", "node", "--nvtx-include", "vllm@decode/",
                          "--launch-count", "40", "--format", "json", "--", "python3", "serve.py", "--tp", "1")
    (plan,) = json.loads(out)
    (inv,) = plan["invocations"]
    assert code == 0 and inv["command"][-4:] == ["python3", "serve.py", "--tp", "1"]
    assert inv["cache_control"] == "all" and plan["expected_kernels"] == 40
    text = " ".join(inv["command"])
    assert "--graph-profiling node" in text and "--nvtx-include vllm@decode/" in text
    assert any("kernel-name classifier" in n for n in plan["notes"])


@pytest.mark.parametrize("args, words", [
    (["--batch", "0"], "--batch"), (["--batch", "eight"], "--batch"), (["--model", "gpt-9"], "unknown model"),
    (["--cache-control", "sometimes"], "--cache-control"), (["--nvtx-include", "a/"], "after `--`"),
    (["--metrics", "@/no/such/file"], "no such file"), (["--views", "V9"], "--views"),
    (["--phases", "prefill"], "phases"), (["--repeat", "0"], "--repeat"),
    # upper bounds: a value no run could use is refused by --plan, not minutes later on the GPU
    (["--repeat", "1000000000"], "--repeat 1000000000: give 1 to 100"),
    (["--layers", "1000000"], "--layers 1000000: llama-3.1-8b has 32 layers"),
    (["--prompt", "1000000000"], "llama-3.1-8b takes at most 131,072 positions"),
    (["--prompt", "131071"], "--prompt 131071 and --decode-steps 2"),  # 131,073 positions with decode
    (["--model", "gemma-2-9b", "--prompt", "512,8192"], "gemma-2-9b takes at most 8,192 positions"),
    (["--decode-steps", "1000000000"], "--decode-steps 1000000000"),
    # 1,000,000 x 512 rows of gate_up's 28,672 bf16 columns: 29 TB
    (["--batch", "1000000"], "need 29,360 GB for its output alone, more than any GPU's 192 GB"),
    (["--workload", "det-gemm", "--tokens", "1,100000000"], "--tokens 100000000: 100,000,000 rows"),
])
def test_bad_options(args, words):
    code, _, err = smlens("profile", "--plan", *args)
    assert code == 2
    one_line_error(err, words)


# --- which option belongs to which workload ----------------------------------------------------

# A value for each workload option (a new option needs one here: the test below says so).
OPTION_VALUES = {"model": ["--model", "tiny"], "layers": ["--layers", "3"], "batch": ["--batch", "2"],
                 "prompt": ["--prompt", "8"], "decode_steps": ["--decode-steps", "1"],
                 "dtype": ["--dtype", "fp16"], "phases": ["--phases", "decode"],
                 "dedup": ["--no-dedup"], "tokens": ["--tokens", "16"], "impl": ["--impl", "det"],
                 "nvtx_include": ["--nvtx-include", "app@decode/"], "launch_skip": ["--launch-skip", "1"],
                 "launch_count": ["--launch-count", "5"], "kernel_name": ["--kernel-name", "gemm"],
                 "tp": ["--tp", "2"], "layer": ["--layer", "1"], "include": ["--include", "setup"],
                 "annotate": ["--no-annotate"]}
CHOOSE = {"decoder": [], "det-gemm": ["--workload", "det-gemm"], "program": []}
PROGRAM_ARGS = ["--", "python3", "app.py"]


def workload_option_cases():
    from dataclasses import fields
    from profiler.run.profile import PROGRAM, WORKLOADS
    workloads = {**WORKLOADS, "program": PROGRAM}
    names = {w: {f.name for f in fields(workload.options)} - {"program"} for w, workload in workloads.items()}
    for workload, own in names.items():
        for option in sorted(set().union(*names.values())):
            owners = [workloads[w].chosen_by for w in names if option in names[w]]
            yield workload, option, option in own, " or ".join(owners)


@pytest.mark.parametrize("workload, option, own, owners", list(workload_option_cases()))
def test_each_workload_takes_its_options_and_refuses_the_others(workload, option, own, owners):
    """Every option of a workload's dataclass is an option of the command; given to a workload
    whose dataclass lacks it, it is refused in one line, even at its default value."""
    args = ["profile", "--plan", "--metrics", "gpu__time_duration.sum", *CHOOSE[workload],
            *OPTION_VALUES[option], *(PROGRAM_ARGS if workload == "program" else [])]
    code, out, err = smlens(*args)
    if own:
        assert code == 0, err
        assert OPTION_VALUES[option][-1] in out or option in ("dedup", "annotate")
    else:
        assert code == 2 and err == f"smlens: {OPTION_VALUES[option][0]} is for {owners}\n"


def test_options_at_their_default_are_still_refused():
    """Before, det-gemm refused a decoder option only when its value differed from cli.py's default."""
    code, _, err = smlens("profile", "--plan", "--workload", "det-gemm", "--layers", "2", "--dedup")
    assert code == 2 and err == "smlens: --layers is for --workload decoder\n"


def test_defaults_come_from_the_options_dataclasses(monkeypatch):
    """A default changed in a workload's dataclass is the command's default, and the other
    workloads do not notice (det-gemm once compared the decoder's options with copied defaults)."""
    from dataclasses import dataclass, replace
    from profiler.run import profile as prof
    from profiler.run.options import DecoderOptions

    @dataclass(frozen=True)
    class Deeper(DecoderOptions):
        layers: int = 5
        batch: str = "4"

    monkeypatch.setitem(prof.WORKLOADS, "decoder", replace(prof.WORKLOADS["decoder"], options=Deeper))
    code, out, err = smlens("profile", "--plan", "--format", "json", "--model", "tiny")
    (plan,) = json.loads(out)
    assert code == 0 and plan["title"].startswith("tiny: 5 layer(s), batch 4, prompt 512"), err
    code, out, err = smlens("profile", "--plan", "--format", "json", "--workload", "det-gemm")
    assert code == 0 and [p["invocations"][0]["label"] for p in json.loads(out)] == ["det", "cublas_bf16"]


def test_run_names():
    """Run names in one place: the workload's name for its plan; --name for a single plan, --name
    and what tells the plan apart for several; -r<i> for repeats."""
    from profiler.run import profile as prof
    sweep = prof.build_plans(prof.workload_options(given={"model": "tiny", "batch": "1,8"}), ["m"])
    det = prof.build_plans(prof.workload_options("det-gemm"), ["m"])
    program = prof.build_plans(prof.workload_options(program=["python3", "app.py"]), ["m"])

    def names(plans, name=None, repeat=1):
        return [run_name for _, run_name, _ in prof.planned_runs(plans, name, repeat)]

    assert names(sweep) == ["tiny-b1-p512", "tiny-b8-p512"]
    assert names(sweep, "x") == ["x-tiny-b1-p512", "x-tiny-b8-p512"]
    assert names(det, "x", 2) == ["x-det-r1", "x-det-r2", "x-cublas_bf16-r1", "x-cublas_bf16-r2"]
    assert names(det) == ["det-gemm-llama-3.1-8b-det", "det-gemm-llama-3.1-8b-cublas_bf16"]
    assert names(program) == ["app"] and names(program, "x") == ["x"]
    (_, _, tags), _ = prof.planned_runs(program, repeat=2, tags={"ci": "yes"})
    assert tags == {"workload": "command", "command": "python3 app.py", "annotate": "true",
                    "dedup": "true", "layer": "0", "repeat": "1", "ci": "yes"}


# --- running (fake ncu) ----------------------------------------------------------------------

@needs_torch
def test_profile_builtin_workload(fake_env):
    """Two ncu runs (cache flushed for the cold prefill only), one stored run, dedup counted."""
    store = fake_env / "store"
    code, out, err = smlens("profile", *TINY, "--store", store, "--format", "json", "--quiet",
                            "--tag", "ci=yes")
    assert code == 0, err
    (outcome,) = json.loads(out)
    # the fake replays the H200 capture's rows under the filters: layer 0 of each prefill (17 each)
    # and layer 0 of decode step 1 (20)
    assert outcome["kernels"] == 17 + 17 + 20 and not outcome["partial"]
    assert outcome["skipped_duplicates"] == 17 * 1 + 17 * 1 + 20 * 3
    cold, warm = ncu_calls(fake_env)
    assert cold[cold.index("--cache-control") + 1] == "all"
    assert warm[warm.index("--cache-control") + 1] == "none"
    assert [cold[i + 1] for i, a in enumerate(cold) if a == "--nvtx-include"] == ["smlens@cold_prefill/layer_0/"]
    assert [warm[i + 1] for i, a in enumerate(warm) if a == "--nvtx-include"] == [
        "smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"]
    assert cold[cold.index("--phases") + 1] == "cold_prefill"
    assert warm[warm.index("--phases") + 1] == "warm_prefill,decode"
    runs = Store(store, create=False).runs()
    assert len(runs) == 1 and runs["name"].iloc[0] == "tiny-b1-p8" and not runs["partial"].iloc[0]
    tags = json.loads(runs["tags"].iloc[0])
    assert tags["model"] == "tiny" and tags["ci"] == "yes" and tags["dedup"] == "true"
    kernels = Store(store, create=False).kernels("latest", columns=["phase", "role", "kernel_id"])
    assert kernels.groupby("phase").size().to_dict() == {"cold_prefill": 17, "warm_prefill": 17, "decode": 20}
    assert kernels["kernel_id"].is_unique


def test_profile_a_program_repeated(fake_env):
    store = fake_env / "store"
    code, out, err = smlens("profile", "--store", store, "--format", "json", "--quiet", "--repeat", "2",
                            "--metrics", "gpu__time_duration.sum", "--no-annotate", "--", *QUICK)
    assert code == 0, err
    outcomes = json.loads(out)
    assert [o["name"].rsplit("-", 1)[1] for o in outcomes] == ["r1", "r2"]
    assert all(o["kernels"] == 149 and o["skipped_duplicates"] is None for o in outcomes)
    runs = Store(store, create=False).runs()
    assert sorted(json.loads(t)["repeat"] for t in runs["tags"]) == ["1", "2"]
    (call, _) = ncu_calls(fake_env)
    assert call[call.index("--metrics") + 1] == "gpu__time_duration.sum" and "--nvtx-include" not in call


@pytest.mark.parametrize("env, code, words", [
    ({"FAKE_SMI_MODE": "none"}, ncu.EXIT_NO_GPU, "no NVIDIA GPU"),
    ({"FAKE_NCU_MODE": "nogpu"}, ncu.EXIT_NO_GPU, "no usable NVIDIA GPU"),
    ({"FAKE_NCU_MODE": "perm"}, ncu.EXIT_COUNTER_PERMISSION, "ERR_NVGPUCTRPERM"),
    ({"FAKE_NCU_MODE": "badopt"}, ncu.EXIT_NCU_FAILED, "unrecognised option"),
])
def test_environment_failures_store_nothing(fake_env, monkeypatch, env, code, words):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    store = fake_env / "store"
    got, _, err = smlens("profile", "--store", store, "--quiet", "--", *QUICK)
    assert got == code
    one_line_error(err, words)
    assert not (store / "runs.parquet").exists()


def test_no_ncu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.delenv("SMLENS_NCU", raising=False)
    code, _, err = smlens("profile", "--quiet", "--", *QUICK)
    assert code == ncu.EXIT_NO_NCU
    one_line_error(err, "ncu (Nsight Compute) not found on PATH")


def test_nothing_matched(fake_env):
    code, _, err = smlens("profile", "--store", fake_env / "s", "--quiet", "--nvtx-include", "nobody@x/",
                          "--", *QUICK)
    assert code == ncu.EXIT_NOTHING_PROFILED
    one_line_error(err, "profiled no kernel")


def test_workload_crash_keeps_what_was_profiled(fake_env):
    store = fake_env / "store"
    crash = [sys.executable, "-c", "import sys; print('CUDA error: an illegal memory access', "
             "file=sys.stderr); sys.exit(3)"]
    code, _, err = smlens("profile", "--store", store, "--quiet", "--no-annotate", "--", *crash)
    assert code == ncu.EXIT_WORKLOAD_FAILED
    one_line_error(err, "failed with exit code 3")
    assert "illegal memory access" in err and "marked partial" in err
    runs = Store(store, create=False).runs()
    assert bool(runs["partial"].iloc[0]) and runs["kernel_count"].iloc[0] == 149


def test_time_limit_keeps_what_was_profiled(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    store = fake_env / "store"
    started = time.monotonic()
    code, _, err = smlens("profile", "--store", store, "--quiet", "--time-limit", "2", "--", *QUICK)
    assert code == ncu.EXIT_TIME_LIMIT and time.monotonic() - started < 30
    one_line_error(err, "time limit reached after 1 kernel(s)")
    runs = Store(store, create=False).runs()
    assert bool(runs["partial"].iloc[0]) and runs["kernel_count"].iloc[0] == 1


def test_ctrl_c_keeps_what_was_profiled(fake_env):
    """SIGINT to smlens (ncu runs in its own session, so only smlens gets the terminal's Ctrl-C):
    smlens passes it to ncu, which saves its report; the run is stored partial; exit 130."""
    store, hanging = fake_env / "store", fake_env / "ncu-hanging"
    env = dict(os.environ, FAKE_NCU_MODE="hang", FAKE_NCU_HANGING=str(hanging),
               PYTHONPATH=str(Path(__file__).parent.parent), PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-m", "profiler.cli", "profile", "--store", str(store),
                             "--quiet", "--", *QUICK], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not hanging.exists():  # the fake has profiled its kernel and waits for the signal
        assert proc.poll() is None and time.monotonic() < deadline, "the fake ncu never got there"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ncu.EXIT_INTERRUPTED, err[-3000:]
    one_line_error(err, "interrupted after 1 kernel(s)")
    runs = Store(store, create=False).runs()
    assert bool(runs["partial"].iloc[0]) and runs["kernel_count"].iloc[0] == 1


# --- doctor ------------------------------------------------------------------------------------

def test_doctor(fake_env, monkeypatch):
    code, out, _ = smlens("doctor", "--format", "json")
    checks = {c["name"]: c for c in json.loads(out)}
    assert checks["ncu"]["status"] == "ok" and "2025.3.1.0" in checks["ncu"]["detail"]
    assert checks["gpu"]["detail"].startswith("0: NVIDIA H200, driver 580.159.04, cc 9.0")
    from views.registry import required_metrics
    assert checks["views"]["detail"] == f"{len(required_metrics())} ncu metrics for all views"
    assert code == (0 if all(c["status"] != "problem" for c in checks.values()) else
                    next(c["exit_code"] for c in checks.values() if c["status"] == "problem"))
    monkeypatch.setenv("FAKE_SMI_MODE", "none")
    code, out, _ = smlens("doctor", "--format", "json")
    gpu = {c["name"]: c for c in json.loads(out)}["gpu"]
    assert gpu["status"] == "problem" and "driver" in gpu["fix"]
    assert code == ncu.EXIT_NO_GPU


def test_doctor_reports_views_that_do_not_load():
    from profiler.run import doctor

    def broken():
        raise ImportError("No module named 'views'")

    check = doctor.check_views(broken)
    assert (check.status, check.exit_code) == ("problem", 2) and "No module named 'views'" in check.detail


def test_doctor_deep_permission(fake_env, monkeypatch):
    from profiler.run import doctor
    assert doctor.check_permission(ncu.find_ncu(), deep=True).status in ("ok", "warn")
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    check = doctor.check_permission(ncu.find_ncu(), deep=True)
    assert check.status == "problem" and check.exit_code == ncu.EXIT_COUNTER_PERMISSION


def test_doctor_reads_the_driver_setting(tmp_path, monkeypatch):
    from profiler.run import doctor
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    monkeypatch.setattr(doctor, "PARAMS", params)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    check = doctor.check_permission(None)
    assert check.status == "problem" and "NVreg_RestrictProfilingToAdminUsers=0" in check.fix
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert doctor.check_permission(None).status == "ok"
    params.write_text("RmProfilingAdminOnly: 0\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert doctor.check_permission(None).status == "ok"


def test_bad_store_fails_before_profiling(fake_env):
    not_a_store = fake_env / "file.txt"
    not_a_store.write_text("x")
    code, _, err = smlens("profile", "--store", not_a_store, "--quiet", "--", *QUICK)
    assert code == 2
    one_line_error(err, "is a file, not a store folder")
    assert ncu_calls(fake_env) == []
