"""`smlens sweep` running a grid on a machine with no GPU: the fake `ncu` (tests/fakes) replays the
real H200 capture's rows under each point's filters and runs the real program."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profiler.ingest.store import Store
from profiler.run import ncu
from profiler.run import sweep
from tests.cli import smlens
from tests.test_profile import fake_env, ncu_calls, needs_torch  # noqa: F401 (fake_env: a fixture)

TINY = ["--layers", "2", "--decode-steps", "2"]
METRICS = ["--metrics", "gpu__time_duration.sum"]


def sweep_runs(store: Path) -> dict[tuple, dict]:
    """(model, batch, prompt) -> the run's row with its tags, of every run in the store."""
    runs = Store(store, create=False).runs()
    out = {}
    for row in runs.to_dict("records"):
        tags = json.loads(row["tags"])
        out.setdefault((tags.get("model"), tags["batch"], tags["prompt"]), []).append({**row, "tags": tags})
    return out


# --- the grid and its plan (no ncu, no GPU) ----------------------------------------------------

def test_plan_shows_the_grid_kernels_and_time(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither ncu nor nvidia-smi
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    code, out, err = smlens("sweep", "--model", "llama-3.1-8b,qwen2.5-7b", "--batch", "1,4,16,64",
                            "--prompt", "256,1024,4096", *TINY, "--plan", "--store", tmp_path / "s",
                            "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["points"] == 24 and plan["to_profile"] == 24 and plan["in_store"] == 0
    coords = [tuple(s["point"].values()) for s in plan["point_states"]]
    assert coords[0] == ("llama-3.1-8b", "1", "256") and coords[-1] == ("qwen2.5-7b", "64", "4096")
    # each point is `smlens profile`'s plan: layer 0 of each prefill and one decode step's layer
    from profiler.run import profile as prof
    from views.registry import required_metrics
    (one,) = prof.build_plans(prof.workload_options(given={"batch": "1", "prompt": "256", "layers": 2}),
                              list(required_metrics(None)))
    first = plan["point_states"][0]
    assert first["expected_kernels"] == one.expected_kernels
    # two ncu runs (cold prefill flushed; the rest), the study's start-up, replay and store costs
    assert first["estimate_s"] == pytest.approx(8.5 * 2 + 0.3 * one.expected_kernels + 1.5, abs=0.1)
    assert plan["estimate_s"] == pytest.approx(sum(s["estimate_s"] for s in plan["point_states"]), abs=0.5)
    assert not (tmp_path / "s").exists()  # a plan writes nothing
    code, out, _ = smlens("sweep", "--model", "llama-3.1-8b", "--batch", "1,4", "--prompt", "256", "--plan",
                          "--store", tmp_path / "s")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 110
    assert "2 point(s), 0 in the store, 2 to profile" in out and "llama-3.1-8b b4 p256" in out


def test_the_sweep_id_is_the_grid_not_the_order_of_its_values():
    metrics = ["gpu__time_duration.sum"]
    one = sweep.make_grid("llama-3.1-8b", "4,1", "256", {"layers": 2}, metrics)
    same = sweep.make_grid("llama-3.1-8b", "1,4", "256", {}, metrics)   # --layers 2 is the default
    other = sweep.make_grid("llama-3.1-8b", "1,4", "256", {"layers": 4}, metrics)
    fewer_metrics = sweep.make_grid("llama-3.1-8b", "1,4", "256", {}, metrics[:0] + ["sm__cycles_active.avg"])
    assert one.id == same.id
    assert len({one.id, other.id, fewer_metrics.id}) == 3


@pytest.mark.parametrize("args, words", [
    (["--model", "llama-9"], "llama-9"),
    (["--batch", "0"], "--batch"),
    (["--prompt", "x"], "--prompt"),
    (["--layers", "99"], "layers"),
    (["--batch", "1,2", "--", sys.executable, "-c", "pass"], "no {batch}"),
    (["--model", "a,b", "--", sys.executable, "-c", "pass {batch}"], "{model}"),
    (["--dtype", "{batch}"], "is for a program after"),
])
def test_bad_grids_are_refused_in_one_line(tmp_path, args, words):
    code, _, err = smlens("sweep", *args, "--plan", "--store", tmp_path / "s")
    assert code == 2, err
    assert err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1


# --- running (fake ncu) ----------------------------------------------------------------------

@needs_torch
def test_a_grid_stores_one_tagged_run_per_point_and_is_not_profiled_twice(fake_env):
    store = fake_env / "store"
    args = ["sweep", "--model", "tiny", "--batch", "1,2", "--prompt", "8", *TINY, "--store", store,
            "--quiet", "--format", "json"]
    code, out, err = smlens(*args)
    assert code == 0, err
    result = json.loads(out)["run"]
    assert result["counts"] == {"profiled": 2} and result["exit_code"] == 0
    assert "[1/2] tiny b1 p8: profiling" in err and "[2/2] tiny b2 p8: stored run" in err
    runs = sweep_runs(store)
    assert sorted(runs) == [("tiny", "1", "8"), ("tiny", "2", "8")]
    for (_, batch, _), (row,) in runs.items():
        assert row["tags"]["sweep"] == result["sweep"] and row["name"] == f"tiny-b{batch}-p8"
        assert row["kernel_count"] == 17 + 17 + 20 and not row["partial"]
    # the program each point ran had its own batch size (two ncu runs per point)
    programs = ncu_calls(fake_env)
    assert len(programs) == 4
    assert [p[p.index("--batch") + 1] for p in programs] == ["1", "1", "2", "2"]
    # the same command again profiles nothing and names the same runs
    code, out, err = smlens(*args)
    assert code == 0, err
    again = json.loads(out)["run"]
    assert again["counts"] == {"stored": 2} and len(ncu_calls(fake_env)) == 4
    assert {s["run_id"] for s in again["point_states"]} == {s["run_id"] for s in result["point_states"]}
    # a larger grid over the same workload reuses what another sweep stored with the same metrics
    code, out, err = smlens("sweep", "--model", "tiny", "--batch", "1,2,3", "--prompt", "8", *TINY,
                            "--store", store, "--plan", "--format", "json")
    plan = json.loads(out)
    assert plan["sweep"] != result["sweep"]
    assert [s["status"] for s in plan["point_states"]] == ["reused", "reused", "to do"]


PROGRAM = [sys.executable, "-c", "import sys; sys.exit(3 if {batch} == 2 else 0)", "{prompt}"]


def test_an_interrupted_sweep_resumes_and_a_crashed_point_does_not_stop_the_others(fake_env, monkeypatch):
    store = fake_env / "store"
    args = ["sweep", "--batch", "1,2,4", "--prompt", "16", *METRICS, "--no-annotate", "--store", store,
            "--quiet", "--format", "json"]
    # the first point hangs in ncu until the time limit: kept partial, the sweep stops (exit 7)
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    code, out, err = smlens(*args, "--time-limit", "3", "--", *PROGRAM)
    assert code == ncu.EXIT_TIME_LIMIT, err
    first = json.loads(out)["run"]
    assert [s["status"] for s in first["point_states"]] == ["partial", "to do", "to do"]
    assert err.strip().splitlines()[-1].startswith("smlens: sweep ") and "resume" in err
    (cut,) = sweep_runs(store)[(None, "1", "16")]
    assert cut["partial"] and cut["kernel_count"] == 1
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    code, out, _ = smlens(*args, "--plan", "--", *PROGRAM)
    assert [s["status"] for s in json.loads(out)["point_states"]] == ["partial", "to do", "to do"]
    # resumed: the partial point is profiled again; batch 2's program crashes (exit 3), is kept
    # partial and shown failed, and batch 4 is still profiled
    calls_before = len(ncu_calls(fake_env))
    code, out, err = smlens(*args, "--", *PROGRAM)
    assert code == ncu.EXIT_WORKLOAD_FAILED, err
    document = json.loads(out)
    result = document["run"]
    assert result["sweep"] == first["sweep"]
    # the sweep's view shows every point: the crashed one with its partial run, marked
    assert [p["status"] for p in document["sweep_view"]["points"]] == ["complete", "partial", "complete"]
    states = {s["point"]["batch"]: s for s in result["point_states"]}
    assert [states[b]["status"] for b in ("1", "2", "4")] == ["profiled", "failed", "profiled"]
    assert states["1"]["superseded_partial_runs"] == [cut["id"]]
    assert "exit code 3" in states["2"]["failure"]
    assert len(ncu_calls(fake_env)) - calls_before == 3
    assert "1 point(s) failed (b2 p16" in err.strip().splitlines()[-1]
    runs = sweep_runs(store)
    assert [r["partial"] for r in runs[(None, "1", "16")]].count(False) == 1
    assert all(r["tags"]["command"].endswith(f"exit(3 if {b} == 2 else 0)' 16")
               for (_, b, _), rows in runs.items() for r in rows)
    # only the failed point is left to do
    code, out, _ = smlens(*args, "--plan", "--", *PROGRAM)
    assert [s["status"] for s in json.loads(out)["point_states"]] == ["stored", "partial", "stored"]


def test_no_gpu_stops_the_sweep_before_anything_runs(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_MODE", "none")
    store = fake_env / "store"
    code, _, err = smlens("sweep", "--batch", "1,2", *METRICS, "--no-annotate", "--store", store, "--",
                          *PROGRAM)
    assert code == ncu.EXIT_NO_GPU and len(err.strip().splitlines()) == 1
    assert ncu_calls(fake_env) == [] and not (store / "runs.parquet").exists()
