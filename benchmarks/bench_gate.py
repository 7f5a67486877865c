"""How long `smlens gate`'s comparison takes as runs grow: the views' figure tables of a real H200
capture (tests/data/h200_runs/llama-3.1-8b-b8-p512.csv.gz, 54 kernels, three phases) repeated to
N kernels per run, K baseline runs against K current runs, the default rules. The views are
computed once per run size and are not timed (bench_views.py times them).

    python3 benchmarks/bench_gate.py --kernels 54 5400 108000 --runs 3 5 --repeats 3   [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler.ingest.capture import read_capture  # noqa: E402
from reports.gate import Run, run_gate  # noqa: E402
from suite import arguments  # noqa: E402
from views.registry import compute_views  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, nargs="+", default=[54, 5400, 108000])
    parser.add_argument("--runs", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--repeats", type=int, default=3)
    args = arguments(parser, quick={"kernels": [54], "runs": [2], "repeats": 1})
    capture = read_capture(ROOT / "tests/data/h200_runs/llama-3.1-8b-b8-p512.csv.gz").kernels
    base = compute_views(capture).kernels
    rng = np.random.default_rng(0)
    print("| kernels per run | runs per side | median s | runs s | comparisons |")
    print("| ---: | ---: | ---: | --- | ---: |")
    for kernels in args.kernels:
        copies = max(1, kernels // len(base))
        table = base.loc[np.tile(base.index.to_numpy(), copies)].reset_index(drop=True)
        for runs in args.runs:
            # each run its own times: 2 % jitter, as between real repeats
            sides = [[Run(f"{side}{i}", table.assign(time_ns=table["time_ns"] * rng.normal(1, 0.02, len(table))))
                      for i in range(runs)] for side in ("b", "c")]
            times, result = [], None
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = run_gate(*sides)
                times.append(time.perf_counter() - start)
            print(f"| {len(table):,} | {runs} | {statistics.median(times):.2f} | "
                  f"{', '.join(f'{t:.2f}' for t in times)} | {len(result.comparisons)} |")


if __name__ == "__main__":
    main()
