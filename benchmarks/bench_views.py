"""The eight views over a million kernel rows: `views.registry.compute_views`, end to end.

    python3 benchmarks/bench_views.py [--kernels 1000000] [--repeats 5] [--profile] [--quick]

The input is the real H200 targeted capture (tests/data/targeted_raw.csv, with its GEMM shapes)
read by `profiler.ingest.capture.read_capture`, cut to the columns the views read (what `smlens views`
asks the store for, `views.registry.input_columns()`), its 188 rows repeated to the requested
count with kernel ids renumbered. Timed: compute_views with all eight views, the per-phase-and-role
groups, the gap, the kernel selection and the device constants. Not timed: building the input.
Each repeat starts from the same input table; the load average is printed with the result, since
the development machine is shared. `first_s` is the first run of the process, which is what a
`smlens views` call pays (it runs the views once).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler.ingest.capture import read_capture  # noqa: E402
from profiler.ingest.shapes import parse_shapes_file  # noqa: E402
from suite import arguments  # noqa: E402
from views.registry import compute_views, input_columns  # noqa: E402

SOURCE = ROOT / "tests" / "data" / "targeted_raw.csv"
SHAPES = ROOT / "profiler" / "data" / "h200_shapes.txt"


def build(kernels: int):
    table = read_capture(SOURCE, shapes=parse_shapes_file(SHAPES)).kernels
    table = table[[c for c in input_columns() if c in table.columns]]
    big = table.iloc[np.resize(np.arange(len(table)), kernels)].reset_index(drop=True)
    big["kernel_id"] = np.arange(kernels, dtype=np.int64)
    return big


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the 20 costliest functions")
    args = arguments(parser, quick={"kernels": 5000, "repeats": 1})

    started = time.perf_counter()
    table = build(args.kernels)
    built = time.perf_counter() - started
    compute_views(table.iloc[:1000])  # imports and code paths warmed outside the timing
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = compute_views(table)
        runs.append(time.perf_counter() - start)
    summary = result.validation_summary()
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx("compute_views(table)", globals(), {"table": table}, "/tmp/bench_views.prof")
        pstats.Stats("/tmp/bench_views.prof").sort_stats("tottime").print_stats(20)
    print(json.dumps({
        "kernels": len(table),
        "input_columns": table.shape[1],
        "input_build_s": round(built, 2),
        "first_s": round(runs[0], 3),
        "median_s": round(statistics.median(runs), 3),
        "min_s": round(min(runs), 3),
        "runs_s": [round(r, 3) for r in runs],
        "kernels_per_s": round(len(table) / statistics.median(runs)),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "validations": {row.view: [row["pass"], row.fail, row["n/a"]] for _, row in summary.iterrows()},
    }, indent=1))


if __name__ == "__main__":
    main()
