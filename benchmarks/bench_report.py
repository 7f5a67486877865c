"""Size and render time of the HTML report as captures grow: the bundled H200 capture (188
kernels) repeated 1, 10 and 50 times. The budget: 6 MB plus 2 KB per kernel.

    python3 benchmarks/bench_report.py [REPEATS ...] [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.ingest.capture import read_capture  # noqa: E402
from profiler.ingest.shapes import parse_shapes_file  # noqa: E402
from reports import html as report  # noqa: E402
from suite import arguments  # noqa: E402
from views.registry import compute_views  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "profiler" / "data"


def main(repeats: list[int]) -> None:
    kernels = read_capture(DATA / "h200_targeted_raw.csv.gz",
                           shapes=parse_shapes_file(DATA / "h200_shapes.txt")).kernels
    plotly_bytes = len(report.plotly_js().encode())
    print(f"plotly.js inlined: {plotly_bytes / 1e6:.2f} MB")
    print("kernels  views_s  render_s  report_MB  budget_MB  bytes_per_kernel_beyond_plotly")
    for n in repeats:
        many = pd.concat([kernels] * n, ignore_index=True).assign(kernel_id=range(n * len(kernels)))
        start = time.perf_counter()
        result = compute_views(many)
        views_s = time.perf_counter() - start
        start = time.perf_counter()
        text = report.render_report(report.from_views(result, {"id": "bench"}, many))
        render_s = time.perf_counter() - start
        size = len(text.encode())
        print(f"{len(many):7d}  {views_s:7.2f}  {render_s:8.2f}  {size / 1e6:9.2f}  "
              f"{(6e6 + 2048 * len(many)) / 1e6:9.2f}  {(size - plotly_bytes) / len(many):8.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repeats", type=int, nargs="*", default=[1, 10, 50],
                        help="how many times the capture is repeated, one report each")
    main(arguments(parser, quick={"repeats": [1]}).repeats)
