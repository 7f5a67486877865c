"""examples/ runs as a user would copy it: each script in a subprocess of its own, on the committed
H200 captures, without a GPU (a Hugging Face program under `smlens profile` with the fake ncu, as
tests/test_profile_program.py runs programs). What it prints is held to the views and to the README."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from profiler.ingest.shapes import parse_shapes_file
from profiler.ingest.stores import open_store
from views.registry import compute_views

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
DATA = ROOT / "tests" / "data"
BUNDLED = ROOT / "profiler" / "data"
FAKES = ROOT / "tests" / "fakes"
needs_torch = pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None,
                                 reason="the program runs torch")


def _run(*command, env=None, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _fake_gpu_env(capture: Path) -> dict:
    """The fake ncu and nvidia-smi first on PATH, replaying `capture`; the recording `nvtx` stand-in
    for the program, so that it sees an NVTX tool as under ncu."""
    return {"PATH": f"{FAKES}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "FAKE_NCU_CSV": str(capture),
            "PYTHONPATH": os.pathsep.join([str(FAKES / "nvtx_recorder"), str(ROOT)])}


def test_every_example_is_run_by_a_test():
    tests = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py"))
    runnable = [p for p in sorted(EXAMPLES.iterdir()) if p.is_file() and p.suffix != ".md"]
    assert len(runnable) >= 6 and [p.name for p in runnable if p.name not in tests] == []


def test_python_api_prints_the_bundled_captures_gap():
    """The README's decode rows of the bundled capture: the batch-4 qkv GEMM at 6.0 % SM throughput,
    27.3 % SM active, 1.5 % tensor pipe, half of it useful, latency-bound."""
    proc = _run(sys.executable, EXAMPLES / "python_api.py", "--phase", "decode", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["kernels"] == 188 and result["stored_now"] is True
    rows = {r["role"]: r for r in result["gap"]}
    assert set(rows) == {"qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "elementwise", "all"}
    qkv = rows["qkv_proj"]
    assert [round(qkv[c], 1) for c in ("time_share_pct", "sm_throughput_pct", "sm_active_pct",
                                       "tensor_pipe_elapsed_pct", "useful_tensor_pct")] == [2.1, 6.0, 27.3, 1.5, 0.7]
    assert qkv["bound"] == "latency" and rows["gate_up_proj"]["bound"] == "memory"
    assert rows["attention"]["useful_tensor_pct"] is None  # no GEMM shape: n/a, not 0
    table = _run(sys.executable, EXAMPLES / "python_api.py", "--phase", "decode")
    assert table.returncode == 0 and "SM throughput %" in table.stdout
    assert any(line.startswith("decode / qkv_proj") and "latency" in line for line in table.stdout.splitlines())


def test_python_api_says_in_one_line_what_it_cannot_read(tmp_path):
    not_a_capture = tmp_path / "notes.csv"
    not_a_capture.write_text("a,b\n1,2\n")
    for path in (tmp_path / "missing.csv", not_a_capture):
        proc = _run(sys.executable, EXAMPLES / "python_api.py", path)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert proc.stderr.startswith("python_api.py: ") and len(proc.stderr.splitlines()) == 1


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding the bundled capture (with its shapes) and the gate's batch-1 decode capture:
    two runs whose metric columns differ."""
    folder = tmp_path_factory.mktemp("examples") / "store"
    the_store = open_store(folder)
    bundled, _ = the_store.ingest(BUNDLED / "h200_targeted_raw.csv.gz",
                                  shapes=parse_shapes_file(BUNDLED / "h200_shapes.txt"))
    gate, _ = the_store.ingest(DATA / "h200_runs" / "gate-b1-r1.csv.gz")
    return folder, {bundled["id"]: the_store.kernels(bundled["id"]), gate["id"]: the_store.kernels(gate["id"])}


@pytest.mark.parametrize("engine", ["duckdb", "pyarrow"])
def test_query_store_reads_the_store_as_the_views_group_it(store, engine):
    if engine == "duckdb":
        pytest.importorskip("duckdb")
    folder, kernels = store
    proc = _run(sys.executable, EXAMPLES / "query_store.py", folder, "--engine", engine, "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["engine"] == engine
    read = {(g["run"], g["phase"], g["role"]): (g["kernels"], g["time_ns"]) for g in result["groups"]}
    expected = {}
    for run_id, table in kernels.items():
        for (phase, role), group in table.groupby(["phase", "role"], observed=True):
            expected[(run_id, phase, role)] = (len(group), group["gpu__time_duration.sum"].sum())
    assert read.keys() == expected.keys()
    assert all(read[k][0] == expected[k][0] and read[k][1] == pytest.approx(expected[k][1]) for k in read)
    # the views' per-phase-and-role time of the bundled run is the same sum
    bundled = next(r for r, t in kernels.items() if len(t) == 188)
    views = compute_views(kernels[bundled]).groups
    for _, group in views[views["role"] != "all"].iterrows():
        assert read[(bundled, group["phase"], group["role"])][1] == pytest.approx(group["time_ns"])
    one = _run(sys.executable, EXAMPLES / "query_store.py", folder, "--engine", engine, "--run", bundled,
               "--format", "json")
    assert {g["run"] for g in json.loads(one.stdout)["groups"]} == {bundled}


def test_query_store_refuses_a_folder_that_is_no_store(tmp_path):
    proc = _run(sys.executable, EXAMPLES / "query_store.py", tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1


@needs_torch
def test_profile_hf_model_under_smlens_profile(tmp_path):
    """A tiny Hugging Face Llama under `smlens profile --`, the fake ncu replaying the H200 capture
    of the same program at Llama-3.1-8B's shapes: 40 kernels of prefill layer 0 in the cold run,
    126 in all, the six roles in all three phases."""
    env = {**_fake_gpu_env(DATA / "h200_hf" / "hf-llama-3.1-8b-b1-p512.csv.gz"), "FAKE_NVTX_LOG": str(tmp_path / "nvtx")}
    smlens = [sys.executable, "-m", "profiler.cli"]
    proc = _run(*smlens, "profile", "--store", tmp_path / "store", "--quiet", "--format", "json", "--name", "mine",
                "--", sys.executable, EXAMPLES / "profile_hf_model.py", "--tiny", "--batch", "2", "--prompt", "16",
                env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (outcome,) = json.loads(proc.stdout)
    assert outcome["partial"] is False and outcome["kernels"] == 126
    assert {i["label"]: i["kernels"] for i in outcome["invocations"]}["cold"] == 40
    views = _run(*smlens, "views", "mine", "--store", tmp_path / "store", "--format", "json", env=env)
    groups = {(g["phase"], g["role"]) for g in json.loads(views.stdout)["gap"]}
    roles = {"qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "elementwise"}
    assert {(p, r) for p in ("cold_prefill", "warm_prefill", "decode") for r in roles} <= groups


@needs_torch
def test_ci_gate_on_main_then_on_a_change(tmp_path):
    """examples/ci_gate.sh as two CI jobs, the fake ncu replaying the H200 gate capture (batch 4,
    decode): main's job stores the baseline; the change's job gates against it with
    examples/gate.toml and passes (the same kernels), writing the summary, the JUnit XML and the report."""
    env = {**_fake_gpu_env(DATA / "h200_runs" / "gate-b4-r1.csv.gz"), "SMLENS_STORE": str(tmp_path / "store"),
           "REPEAT": "1", "SMLENS": f"{sys.executable} -m profiler.cli"}
    workload = ["--model", "tiny", "--layers", "1", "--prompt", "16", "--decode-steps", "2", "--phases", "decode",
                "--batch", "4"]
    main = _run("bash", EXAMPLES / "ci_gate.sh", *workload, env={**env, "BRANCH": "main", "COMMIT": "a" * 40},
                cwd=tmp_path)
    assert main.returncode == 0, main.stderr[-2000:]
    assert not (tmp_path / "gate.md").exists()  # main only profiles
    change = _run("bash", EXAMPLES / "ci_gate.sh", *workload, env={**env, "BRANCH": "pr-7", "COMMIT": "b" * 40},
                  cwd=tmp_path)
    assert change.returncode == 0, change.stderr[-2000:]
    summary = (tmp_path / "gate.md").read_text()
    assert summary.startswith("## smlens gate: ✅ pass (exit 0)") and "main-aaaaaaaa" in summary
    assert "pr-7-bbbbbbbb" in summary
    suites = ET.parse(tmp_path / "gate-junit.xml").getroot().iter("testsuite")
    assert {s.get("name") for s in suites} >= {"time per kernel family", "time per role", "dram_bytes"}
    assert (tmp_path / "report.html").read_text().count("pr-7-bbbbbbbb") > 0
