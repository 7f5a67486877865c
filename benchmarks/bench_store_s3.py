"""How a store on S3 scales with its runs: a loopback S3 server (moto, tests/s3server.py) filled with
synthetic runs of N kernels each, built from the real H200 targeted capture (tests/data/
targeted_raw.csv, 188 kernels, 391 columns) repeated to N rows (each run the capture's values:
scaling one counter would break the views' validations, and the store's cost does not depend on
them). Runs are committed through the store's protocol (LogStore.add_staged: stage,
commit a log entry with If-None-Match, publish) by several writer threads at once, tagged with one
of ten branches; past --protocol-runs, to build large stores in reasonable time, runs are written
straight to their final keys with their log entries (the same objects a commit leaves, a third of
the requests) and the runs table checkpointed where the protocol would have. At each size it times:

- listing the runs (`open_store(url).runs()`: the runs table checkpoint, one LIST, the log's tail),
  and, for contrast, replaying the whole log without the checkpoint;
- `smlens gate --baseline tag:branch=b3~10 --current <newest b3 run>` (a fresh process; the store's
  share of it: resolving the tag and reading 11 runs' kernels);
- DuckDB over every run's kernels on S3 (per-phase, per-role time; fsspec's s3fs as DuckDB's
  filesystem).

    python3 benchmarks/bench_store_s3.py --sizes 1000 3000 10000 --kernels 1000 --writers 3   [--quick]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler.ingest.capture import read_capture  # noqa: E402
from profiler.ingest.logstore import (CHECKPOINT_EVERY, LogState, LogStore, kernels_key,  # noqa: E402
                                      log_key, units_key)
from profiler.ingest.stores import open_store  # noqa: E402
from tests.conftest import DATA, TARGETED_SHAPES  # noqa: E402
from suite import arguments  # noqa: E402
from tests.s3server import s3_server  # noqa: E402

BRANCHES = 10
TIME = "gpu__time_duration.sum"


class Synthetic:
    """Run i's files and row, from one real capture."""

    def __init__(self, kernels: int):
        capture = read_capture(DATA / "targeted_raw.csv", shapes=TARGETED_SHAPES)
        frame = pd.concat([capture.kernels] * -(-kernels // len(capture.kernels)), ignore_index=True)
        frame = frame.head(kernels).assign(kernel_id=np.arange(kernels), run_id="")
        self.table = pa.Table.from_pandas(frame, preserve_index=False)
        self.units = pd.DataFrame({"metric": list(capture.units), "unit": list(capture.units.values())})
        self.kernels = kernels
        self.start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def write(self, i: int, run_id: str, folder: Path) -> dict:
        table = self.table.set_column(self.table.schema.get_field_index("run_id"), "run_id",
                                      pa.array([run_id] * self.kernels))
        for key in (kernels_key(run_id), units_key(run_id)):
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / kernels_key(run_id))
        self.units.to_parquet(folder / units_key(run_id), index=False)
        return {"id": run_id, "name": f"synthetic-{i}",
                "tags": json.dumps({"branch": f"b{i % BRANCHES}", "commit": str(i)}),
                "created": (self.start + dt.timedelta(minutes=i)).isoformat(timespec="seconds"),
                "source": "synthetic", "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
                "source_format": "raw", "ncu_version": None, "device_name": "NVIDIA H200",
                "cc": "9.0", "host": "bench", "kernel_count": self.kernels, "partial": False,
                "shapes": "[]", "roles_from_order": False, "notes": "[]"}


def fill(url: str, synthetic: Synthetic, first: int, last: int, writers: int) -> dict:
    """Commit runs first..last-1 with `writers` threads; returns seconds and refused commits."""
    refused = []
    lock = threading.Lock()

    def writer(indices):
        store = LogStore(url)
        create = store.objects.put_if_absent

        def counted(key, data):
            ok = create(key, data)
            if not ok:
                with lock:
                    refused.append(key)
            return ok

        store.objects.put_if_absent = counted
        for i in indices:
            with tempfile.TemporaryDirectory() as folder:
                run_id = f"{i:08x}"
                store.add_staged(synthetic.write(i, run_id, Path(folder)), Path(folder))

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        list(pool.map(writer, [range(first + w, last, writers) for w in range(writers)]))
    return {"seconds": time.perf_counter() - started, "refused_commits": len(refused)}


def bulk_fill(url: str, synthetic: Synthetic, first: int, last: int, threads: int = 8) -> dict:
    """Runs first..last-1 as a finished commit leaves them: files in place, then log entries, then
    the runs table as of the last version a writer would have checkpointed at."""
    store = LogStore(url)
    started = time.perf_counter()

    def one(i: int) -> dict:
        run_id = f"{i:08x}"
        with tempfile.TemporaryDirectory() as folder:
            row = synthetic.write(i, run_id, Path(folder))
            for key in (kernels_key(run_id), units_key(run_id)):
                store.objects.upload(key, Path(folder) / key)
        return row

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        rows = list(pool.map(one, range(first, last)))
        entries = [(log_key(i), {"version": i, "action": "add", "run": row, "committed": row["created"],
                                 "host": "bench"}) for i, row in zip(range(first, last), rows)]
        assert all(pool.map(lambda e: store.objects.put_if_absent(e[0], json.dumps(e[1]).encode()),
                            entries))
    state = store.log_state(fresh=True)
    checkpoint = (last - 1) - (last - 1) % CHECKPOINT_EVERY
    store.checkpoint(LogState(checkpoint, state.runs.head(checkpoint + 1)))
    return {"seconds": time.perf_counter() - started, "refused_commits": 0}


def timed(func, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        func()
        out.append(time.perf_counter() - started)
    return out


def measure(url: str, size: int, env: dict, repeats: int, duckdb_repeats: int) -> dict:
    listed = open_store(url, create=False).runs()
    assert len(listed) == size, (len(listed), size)
    result = {"runs": size}
    result["list_s"] = timed(lambda: open_store(url, create=False).runs(), repeats)
    whole = LogStore(url, create=False)
    result["replay_whole_log_s"] = timed(
        lambda: whole._advance(LogState(-1, pd.DataFrame(columns=["id"]))), 1)
    branch = listed[listed["tags"].str.contains('"branch": "b3"')]
    current = branch["id"].iloc[-1]

    def store_share():
        store = open_store(url, create=False)
        from profiler.gate_inputs import _tagged_runs

        for run_id in _tagged_runs(store, "branch=b3~10") + [current]:
            store.kernels(run_id)

    result["gate_store_share_s"] = timed(store_share, repeats)
    command = [sys.executable, "-m", "profiler.cli", "gate", "--baseline", "tag:branch=b3~10",
               "--current", current, "--store", url, "--format", "json"]
    gate_s = []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        gate_s.append(time.perf_counter() - started)
        assert proc.returncode == 0, proc.stdout[-800:] + proc.stderr[-800:]  # the same values: pass
    result["gate_cli_s"] = gate_s
    result["duckdb_all_runs_s"] = timed(lambda: duckdb_all_runs(url, size), duckdb_repeats)
    return result


def duckdb_all_runs(url: str, size: int):
    import duckdb
    import s3fs

    connection = duckdb.connect()
    connection.register_filesystem(s3fs.S3FileSystem(skip_instance_cache=True))
    rows = connection.sql(f"""
        SELECT phase, role, count(*) AS kernels, sum("{TIME}") AS time_ns, count(DISTINCT run) AS runs
        FROM read_parquet('{url}/runs/*/kernels.parquet', hive_partitioning = true)
        GROUP BY ALL""").fetchall()
    assert max(r[4] for r in rows) == size
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--kernels", type=int, default=1000)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--protocol-runs", type=int, default=1000,
                        help="runs committed through the protocol; the rest are bulk-written")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duckdb-repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = arguments(parser, quick={"sizes": [6], "kernels": 50, "writers": 2, "protocol_runs": 4,
                                    "repeats": 1})
    synthetic = Synthetic(args.kernels)
    results = []
    with s3_server() as server:
        server.make_bucket("bench")
        os.environ.update(server.env())
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        url = "s3://bench/team/store"
        built = 0
        for size in sorted(args.sizes):
            through_protocol = min(size, args.protocol_runs)
            filled = {"seconds": 0.0, "refused_commits": 0, "protocol_runs_per_s": None}
            if built < through_protocol:
                filled = fill(url, synthetic, built, through_protocol, args.writers)
                filled["protocol_runs_per_s"] = (through_protocol - built) / filled["seconds"]
                built = through_protocol
            if built < size:
                filled["seconds"] += bulk_fill(url, synthetic, built, size)["seconds"]
                built = size
            result = {**measure(url, size, env, args.repeats, args.duckdb_repeats),
                      "build_s": filled["seconds"], "refused_commits": filled["refused_commits"],
                      "protocol_runs_per_s": filled["protocol_runs_per_s"],
                      "runs_table_bytes": len(LogStore(url, create=False).objects.read("runs.parquet")),
                      "server_rss_mb": _rss_mb(server.process.pid)}
            results.append(result)
            print(json.dumps(result), flush=True)
    summary = {"machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
               "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               "kernels_per_run": args.kernels, "writers": args.writers, "results": results,
               "client_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(_table(results))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _table(results: list[dict]) -> str:
    med = statistics.median
    lines = ["| runs | list s | whole-log replay s | gate (CLI) s | gate's store reads s | DuckDB all runs s "
             "| commits/s (refused) | runs.parquet KB | server RSS MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rate = (f"{r['protocol_runs_per_s']:.1f} ({r['refused_commits']})"
                if r["protocol_runs_per_s"] else "bulk")
        lines.append(f"| {r['runs']:,} | {med(r['list_s']):.2f} | {r['replay_whole_log_s'][0]:.1f} | "
                     f"{med(r['gate_cli_s']):.1f} | {med(r['gate_store_share_s']):.2f} | "
                     f"{med(r['duckdb_all_runs_s']):.1f} | {rate} | "
                     f"{r['runs_table_bytes'] / 1024:.0f} | {r['server_rss_mb']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
