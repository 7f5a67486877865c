"""Ingest of a large capture: smlens against the plain way, in one run, with peak memory.

    python benchmarks/bench_ingest.py [--kernels 100000] [--repeats 3] [--quick]

The capture is the real H200 targeted capture (tests/data/targeted_raw.csv) with its 188 rows
repeated, IDs renumbered, to the requested kernel count, with ncu's preamble lines kept. Each
contender runs in a fresh Python process (its peak RSS is what `ru_maxrss` reports for that child);
the plain way is `pandas.read_csv(..., thousands=",")` then `to_parquet`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from suite import arguments

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "targeted_raw.csv"

SMLENS = """
import sys, time
from profiler.ingest.stores import open_store
start = time.perf_counter()
row, _ = open_store(sys.argv[2]).ingest(sys.argv[1])
print(time.perf_counter() - start, row["kernel_count"])
"""

PLAIN = """
import sys, time
import pandas as pd
start = time.perf_counter()
header_line = int(sys.argv[3])
frame = pd.read_csv(sys.argv[1], thousands=",", skiprows=list(range(header_line)) + [header_line + 1],
                    low_memory=False)
frame.to_parquet(sys.argv[2])
print(time.perf_counter() - start, len(frame))
"""


def build_capture(path: Path, kernels: int) -> int:
    """Write the repeated capture; return the 0-based line number of its header."""
    lines = SOURCE.read_text().splitlines(keepends=True)
    header_line = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = lines[header_line + 2:]
    with open(path, "w") as out:
        out.writelines(lines[: header_line + 2])
        for number in range(kernels):
            row = rows[number % len(rows)]
            out.write(f'"{number}"' + row[row.index(","):])
    return header_line


def run(code: str, *args) -> tuple[float, int, float]:
    """Seconds inside the child, rows it reported, and the child's peak RSS in MB."""
    child = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    output = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"contender failed: {output}")
    seconds, rows = output.split()
    return float(seconds), int(rows), usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = arguments(parser, quick={"kernels": 500, "repeats": 1})
    with tempfile.TemporaryDirectory(prefix="smlens-bench-") as tmp:
        capture = Path(tmp) / "large_raw.csv"
        header_line = build_capture(capture, args.kernels)
        size_mb = capture.stat().st_size / 1e6
        results = {"smlens": [], "plain": []}
        for attempt in range(args.repeats):
            store = Path(tmp) / f"store{attempt}"
            results["smlens"].append(run(SMLENS, capture, store))
            results["plain"].append(run(PLAIN, capture, Path(tmp) / f"plain{attempt}.parquet", header_line))
        summary = {"kernels": args.kernels, "file_mb": round(size_mb, 1)}
        for name, samples in results.items():
            assert all(rows == args.kernels for _, rows, _ in samples), (name, samples)
            summary[name] = {"median_s": round(statistics.median(s for s, _, _ in samples), 2),
                             "all_s": [round(s, 2) for s, _, _ in samples],
                             "peak_rss_mb": round(max(m for _, _, m in samples), 1)}
        summary["speedup"] = round(summary["plain"]["median_s"] / summary["smlens"]["median_s"], 2)
        summary["smlens_peak_over_file"] = round(summary["smlens"]["peak_rss_mb"] / size_mb, 2)
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
