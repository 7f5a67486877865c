"""The benchmarks run, and BENCHMARKS.md cites what is there.

Every `benchmarks/bench_*.py` runs with `--quick` (seconds, small inputs) and says something true of
the real capture it was given; `benchmarks/h200/run.sh` runs a suite with the fake ncu (tests/fakes)
as it would on the H200; every path BENCHMARKS.md names exists and every section names its machine
and command; the product imports nothing from benchmarks/. Times are never asserted: the numbers
are BENCHMARKS.md's, measured, not tested."""
from __future__ import annotations

import ast
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("bench_*.py"))
FAKES = ROOT / "tests" / "fakes"
DEDUP_REFERENCE = ROOT / "tests" / "data" / "h200_runs" / "dedup-reference-all-layers.csv.gz"
needs_torch = pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None,
                                 reason="the program runs torch")


def _table_rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown table a benchmark printed (its header and rule skipped)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return rows[2:]


def _last_json(text: str):
    return json.loads(text[text.index("{"):])


# What each benchmark's quick run says of its real input, beyond running: the figures it derives
# from the capture (kernel counts, validations, the size budget), never its times.
def _ingest(out):
    result = _last_json(out)
    assert result["kernels"] == 500 and result["file_mb"] > 1  # 188 real rows repeated, 372 columns
    assert result["smlens"]["median_s"] > 0 and result["plain"]["median_s"] > 0


def _views(out):
    result = _last_json(out)
    assert result["kernels"] == 5000
    # every view validates some of the real capture's kernels, and V1 (SM clock in range) all of them
    assert all(passed > 0 for passed, _, _ in result["validations"].values())
    assert result["validations"]["V1"] == [5000, 0, 0]


def _report(out):
    (row,) = [line.split() for line in out.splitlines() if line.split() and line.split()[0] == "188"]
    report_mb, budget_mb = float(row[3]), float(row[4])
    assert 0 < report_mb <= budget_mb  # the size target: 6 MB + 2 KB per kernel


def _gate(out):
    (row,) = _table_rows(out)
    assert row[0] == "54" and row[1] == "2"  # the Llama-3.1-8B capture's 54 kernels, 2 runs a side
    assert int(row[4]) > 0


def _annotate(out):
    result = _last_json(out)
    assert result["module_calls_per_forward"] == 58  # the tiny Llama: 4 layers, one-token forward


def _profile(out):
    result = _last_json(out)
    assert result["profiler_attached"] is False and result["ns_per_range"] > 0


def _store_s3(out):
    result = json.loads(out.splitlines()[0])
    assert result["runs"] == 6 and result["refused_commits"] >= 0 and result["runs_table_bytes"] > 0


def _report_paint(out):
    charts = re.search(r"report: [\d.]+ MB \([\d,]+ bytes\), (\d+) charts", out)
    assert charts and int(charts.group(1)) > 0  # the demo report's charts, each drawn
    assert re.search(r"first contentful paint \d+, load \d+, every chart drawn \d+", out)


def _views_terminal(out):
    outputs = {r["output"]: r for r in map(json.loads, out.splitlines()) if "output" in r}
    # the demo run's views, whole: at 80 columns tables go on below, so more lines than piped
    assert 0 < outputs["piped"]["lines"] < outputs["80 columns"]["lines"]


def _sweep(out):
    result = _last_json(out)
    # 6 runs of the bundled H200 captures: each carries 3 phases x (6 roles and all)
    assert result["runs"] == 6 and result["best"]["series_rows"] == 6 * 21
    assert result["best"]["findings"] > 0 and result["best"]["html_mb"] > 1  # plotly.js inlined


CHECKS = {"bench_views_terminal.py": _views_terminal, "bench_ingest.py": _ingest, "bench_views.py": _views, "bench_report.py": _report,
          "bench_gate.py": _gate, "bench_annotate.py": _annotate, "bench_profile.py": _profile,
          "bench_store_s3.py": _store_s3, "bench_report_paint.py": _report_paint, "bench_sweep.py": _sweep}
NEEDS = {"bench_annotate.py": ("torch", "transformers"), "bench_store_s3.py": ("moto", "s3fs", "duckdb")}


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_runs_quick(script):
    for module in NEEDS.get(script.name, ()):
        pytest.importorskip(module)
    if script.name == "bench_report_paint.py":
        from tests.chromium import find_chromium
        if find_chromium() is None:
            pytest.skip("no Chromium")
    proc = subprocess.run([sys.executable, str(script), "--quick"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), "a benchmark prints its result"
    assert "machine: " in proc.stderr and "command: " in proc.stderr  # what a BENCHMARKS.md section names
    check = CHECKS.get(script.name)
    if check:  # a benchmark added later without its own check still has to run
        check(proc.stdout)


@needs_torch
def test_bench_profile_gpu_quick_with_the_fake_ncu():
    """The cost benchmark's GPU mode (run.sh's cost suite) on the tiny decoder, the fake ncu replaying
    the H200 dedup reference: smlens profiles the 54 kernels of layer 0 of each phase, plain ncu all
    149 (its PROVENANCE.md), the same split the H200 run measured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
           "FAKE_NCU_CSV": str(DEDUP_REFERENCE)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_profile.py"), "gpu", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = _last_json(proc.stdout)
    assert result["workload_alone"]["rc"] == 0 and result["smlens_profile"]["rc"] == 0
    assert result["smlens_profile"]["kernels"] == 54 and result["smlens_profile"]["skipped"] > 0
    for plain in ("ncu_one_metric", "ncu_set_full", "ncu_set_basic"):
        assert result[plain]["rc"] == 0 and result[plain]["kernels"] == 149, plain


# --- BENCHMARKS.md ----------------------------------------------------------------------------------

# A path from the repository's root into these folders, ending in a name (a `<model>` or `{a,b}` part
# stands for any name), not part of a longer path or word; a `::test` after a file is left off.
REFERENCE = re.compile(r"(?<![\w/.-])((?:benchmarks|tests|scripts|examples)/[\w./*<>{},-]*[\w*>}])")


def missing_references(text: str, root: Path = ROOT) -> list[str]:
    missing = []
    for reference in REFERENCE.findall(text):
        pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", reference)
        if not glob.glob(str(root / pattern)):
            missing.append(reference)
    return sorted(set(missing))


def sections_without_machine_or_command(text: str) -> list[str]:
    sections = re.split(r"(?m)^## ", text)[1:]
    return [s.splitlines()[0] for s in sections
            if not (re.search(r"\bMachine\b", s) and re.search(r"\b[Cc]ommands?\b", s))]


def test_benchmarks_md_cites_only_what_exists_and_names_machine_and_command():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert missing_references(text) == []
    assert sections_without_machine_or_command(text) == []


def test_the_reference_check_sees_what_is_missing():
    text = ("`python3 benchmarks/bench_views.py --quick` and tests/data/h200_hf/hf-<model>-b<batch>-p512.csv.gz,"
            " `benchmarks/det_call15.sh`, tests/data/h200_det/sweep{7a,99z}.json, scripts/test.sh and "
            "tests/test_bench.py::test_cli_determinism_without_gpu; not ../x/benchmarks/a.py or my_tests/b.py")
    assert missing_references(text) == ["benchmarks/det_call15.sh"]
    assert sections_without_machine_or_command("## a\nMachine: x. Command: y\n## b\nMachine: x\n") == ["b"]


# --- the product imports nothing from benchmarks/ ---------------------------------------------------

def test_no_product_module_imports_benchmarks():
    importers = []
    for package in ("profiler", "views", "reports"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "benchmarks" or n.startswith("benchmarks.") for n in names):
                    importers.append(path.relative_to(ROOT).as_posix())
    assert importers == []


# --- benchmarks/h200/run.sh -------------------------------------------------------------------------

RUN = ROOT / "benchmarks" / "h200" / "run.sh"


def _run_sh(*args, env=None, timeout=240):
    return subprocess.run(["bash", str(RUN), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_run_sh_names_its_suites_and_refuses_others(tmp_path):
    listed = _run_sh("--list")
    assert listed.returncode == 0
    suites = {line.split()[0] for line in listed.stdout.splitlines()[1:]}
    assert {"det-gemm", "tp", "compiled", "sets", "sweep", "dtypes", "det-record", "models"} <= suites
    calls = (ROOT / "benchmarks" / "CALLS.md").read_text(encoding="utf-8")
    assert {s for s in suites if f"`{s}`" not in calls} == set()  # each suite with the calls it replaced
    for args, env in ((["nope"], {"OUT": str(tmp_path)}), ([], {"OUT": str(tmp_path)}), (["models"], {"OUT": ""})):
        refused = _run_sh(*args, env=env)
        assert refused.returncode == 2 and refused.stderr.startswith(("run.sh: ", "usage: ")), refused.stderr
    assert not any(tmp_path.iterdir())  # nothing ran


@needs_torch
def test_run_sh_models_suite_with_the_fake_ncu(tmp_path):
    """The models suite as on the H200, with the fake ncu replaying the real dedup reference capture:
    the decoder's two ncu runs (cold prefill; warm prefill and decode) keep its layer 0 of each."""
    out = tmp_path / "out"
    env = {"SKIP_WHEELS": "1", "TINY": "1", "BATCHES": "1", "OUT": str(out), "W": str(tmp_path / "w"),
           "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "FAKE_NCU_CSV": str(DEDUP_REFERENCE),
           "PYTHONPATH": str(ROOT), "PY": sys.executable}  # CI runs pytest with no venv on PATH
    proc = _run_sh("models", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    times = (out / "times.txt").read_text()
    assert "rc=0 ::" in times and "SKIP" not in times
    with tarfile.open(out / "models.tgz") as packed:
        names = packed.getnames()
        (outcome,) = json.load(packed.extractfile("c/tiny-b1-p16.json"))
        with gzip.open(packed.extractfile("c/tiny-b1-p16/tiny-b1-p16.csv.gz"), "rt") as capture:
            rows = [line for line in capture if re.match(r'"\d', line)]  # kernels: not the header, not units
    assert not any(n.endswith(".ncu-rep") for n in names)
    assert outcome["partial"] is False and outcome["exit_code"] == 0
    # of the capture's 149 kernels, the 54 of layer 0 of each phase (its PROVENANCE.md), packed whole
    assert outcome["kernels"] == 54 and outcome["skipped_duplicates"] > 0
    assert len(rows) == outcome["kernels"]


@needs_torch
def test_det_configs_writes_the_tables_the_record_of_call_14_ran_with(tmp_path):
    """The det-record suite's last step on the committed record of call 14 (h200_det_r6.json, made at
    the commit that adopted the kernel tables of today): its `configs` taken out, then written back."""
    record = json.loads((ROOT / "tests" / "data" / "h200_det" / "h200_det_r6.json").read_text())
    ran_with = record.pop("configs")
    result = tmp_path / "record.json"
    result.write_text(json.dumps(record))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "h200" / "det_configs.py"), str(result)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads(result.read_text())
    assert written["configs"] == ran_with and "cuda_fold_mode" in written["configs"]
    assert {k: v for k, v in written.items() if k != "configs"} == record  # the rest as it was
