"""A sweep's analysis over 100 runs of 500 kernels: views/sweep.py and its outputs, end to end.

    python3 benchmarks/bench_sweep.py [--runs 100] [--kernels 500] [--repeats 3] [--quick]

The input is synthesised from real rows: the eight bundled H200 runs (tests/data/h200_runs: four
models at batch 1 and 8, prompt 512) read by `profiler.ingest.capture.read_capture`, cut to the
columns the views read, each repeated to `--kernels` rows (kernel ids renumbered); run i is
bundled run i mod 8, set at a point of a grid of 4 models x 5 batch sizes x 5 prompt lengths
(100 points). Timed apart: (1) the views of every run (`registry.compute_views`, what any sweep
of stored runs pays once per run), (2) the sweep's own analysis (`views.sweep.sweep`: the series,
the change points, the findings), (3) its outputs (the JSON document, the terminal's tables at 80
columns, the HTML page). Target: (2) + (3) under 5 s. The load average is printed with the result.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from profiler.ingest.capture import read_capture  # noqa: E402
from reports import sweep as sweep_report  # noqa: E402
from reports import sweep_html  # noqa: E402
from suite import arguments  # noqa: E402
from views import sweep as sweep_view  # noqa: E402
from views.registry import compute_views, input_columns  # noqa: E402

RUNS = ROOT / "tests" / "data" / "h200_runs"
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.1-70b")
BATCHES = (1, 4, 16, 64, 256)
PROMPTS = (128, 256, 1024, 4096, 16384)


def sources() -> list:
    columns = input_columns()
    tables = []
    for model in MODELS:
        for batch in (1, 8):
            table = read_capture(RUNS / f"{model}-b{batch}-p512.csv.gz").kernels
            tables.append(table[[c for c in columns if c in table.columns]])
    return tables


def build(runs: int, kernels: int) -> list[tuple[dict, object]]:
    tables = sources()
    grid = [(m, b, p) for m in MODELS for b in BATCHES for p in PROMPTS]
    out = []
    for i in range(runs):
        table = tables[i % len(tables)]
        big = table.iloc[np.resize(np.arange(len(table)), kernels)].reset_index(drop=True)
        big["kernel_id"] = np.arange(kernels, dtype=np.int64)
        model, batch, prompt = grid[i % len(grid)]
        out.append(({"model": model, "batch": batch, "prompt": prompt}, big))
    return out


def analyse(results: list) -> dict:
    """The sweep's own analysis and its outputs, each timed."""
    times = {}
    start = time.perf_counter()
    result = sweep_view.sweep(results)
    times["sweep_s"] = time.perf_counter() - start
    start = time.perf_counter()
    json.dumps(sweep_report.sweep_json(result, "bench"), allow_nan=False)
    times["json_s"] = time.perf_counter() - start
    start = time.perf_counter()
    sweep_report.print_sweep(result, "bench", console=Console(file=io.StringIO(), width=80))
    times["terminal_s"] = time.perf_counter() - start
    start = time.perf_counter()
    page = sweep_html.render_sweep(result, "bench")
    times["html_s"] = time.perf_counter() - start
    times["total_s"] = sum(times.values())
    times["html_mb"] = len(page.encode()) / 1e6
    times["series_rows"], times["changes"], times["findings"] = (len(result.series), len(result.changes),
                                                                   len(result.findings))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = arguments(parser, quick={"runs": 6, "kernels": 60, "repeats": 1})

    started = time.perf_counter()
    inputs = build(args.runs, args.kernels)
    built = time.perf_counter() - started
    compute_views(inputs[0][1].iloc[:100])  # imports and code paths warmed outside the timing
    start = time.perf_counter()
    points = [sweep_view.SweepPoint(coords, f"run{i}", f"run{i}", sweep_view.COMPLETE, compute_views(table))
              for i, (coords, table) in enumerate(inputs)]
    views_s = time.perf_counter() - start
    analyse(points[:2])  # warm
    runs = [analyse(points) for _ in range(args.repeats)]
    median = statistics.median(r["total_s"] for r in runs)
    best = min(runs, key=lambda r: r["total_s"])
    print(json.dumps({
        "runs": args.runs, "kernels_per_run": args.kernels, "input_build_s": round(built, 2),
        "views_of_every_run_s": round(views_s, 2),
        "views_per_run_s": round(views_s / args.runs, 3),
        "sweep_analysis_and_outputs_median_s": round(median, 3),
        "best": {k: round(v, 3) if isinstance(v, float) else v for k, v in best.items()},
        "runs_total_s": [round(r["total_s"], 3) for r in runs],
        "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }, indent=1))


if __name__ == "__main__":
    main()
