"""Read a smlens store without smlens: per phase and role, the kernels and their GPU time, from the
Parquet files as any engine sees them (docs/SCHEMA.md is the layout).

    python3 examples/query_store.py [STORE] [--run ID] [--engine duckdb|pyarrow] [--format json]

STORE defaults to $SMLENS_STORE, else ./smlens-store. DuckDB (`pip install duckdb`) reads the files
with SQL; without it, pyarrow.dataset (installed with smlens) does the same scan. Each run's kernels
are runs/run=<id>/kernels.parquet: the `run` column comes from that folder name (hive partitioning),
and runs hold different metric columns, so the schemas are unified by name. Only committed runs are
in runs/ (a run being written waits in .staging/), so a reader never sees half a run. Apache Spark
reads the same folder: README.md, "A store the team shares".
"""
import argparse
import json
import os
import sys
from pathlib import Path

TIME = "gpu__time_duration.sum"  # ncu's kernel duration, stored in ns


def with_duckdb(store: Path, run: str | None) -> list[dict]:
    import duckdb

    where = "WHERE run = $run" if run else ""
    rows = duckdb.execute(f"""
        SELECT run, phase, role, count(*) AS kernels, sum("{TIME}") AS time_ns
        FROM read_parquet('{store}/runs/*/kernels.parquet', hive_partitioning = true, union_by_name = true)
        {where} GROUP BY ALL ORDER BY run, time_ns DESC""", {"run": run} if run else {}).fetchall()
    return [dict(zip(("run", "phase", "role", "kernels", "time_ns"), r)) for r in rows]


def with_pyarrow(store: Path, run: str | None) -> list[dict]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    # one dataset per run's file, unified by column name (runs hold different metrics), as DuckDB's
    # union_by_name; the run is each file's run_id column
    parts = [ds.dataset(f, format="parquet") for f in sorted((store / "runs").glob("run=*/kernels.parquet"))]
    if not parts:
        return []
    table = ds.dataset(parts).to_table(columns=["run_id", "phase", "role", TIME],
                          filter=pc.field("run_id") == run if run else None)
    grouped = table.group_by(["run_id", "phase", "role"]).aggregate([(TIME, "count"), (TIME, "sum")])
    rows = [{"run": r["run_id"], "phase": r["phase"], "role": r["role"], "kernels": r[f"{TIME}_count"],
             "time_ns": r[f"{TIME}_sum"]} for r in grouped.to_pylist()]
    return sorted(rows, key=lambda r: (r["run"], -(r["time_ns"] or 0)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path,
                        default=Path(os.environ.get("SMLENS_STORE", "smlens-store")))
    parser.add_argument("--run", help="one run's id (default: every run)")
    parser.add_argument("--engine", choices=("duckdb", "pyarrow"), help="default: DuckDB where installed")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if not (args.store / "runs.parquet").is_file():
        print(f"query_store.py: {args.store} is no smlens store (no runs.parquet)", file=sys.stderr)
        return 2
    engine = args.engine
    if engine is None:
        try:
            import duckdb  # noqa: F401
            engine = "duckdb"
        except ImportError:
            engine = "pyarrow"
    rows = (with_duckdb if engine == "duckdb" else with_pyarrow)(args.store, args.run)
    if args.format == "json":
        print(json.dumps({"engine": engine, "groups": rows}))
        return 0
    print(f"{'run':<10}{'phase':<14}{'role':<14}{'kernels':>8}{'time us':>12}   ({engine})")
    for r in rows:
        print(f"{r['run']:<10}{r['phase'] or '-':<14}{r['role'] or '-':<14}{r['kernels']:>8}"
              f"{(r['time_ns'] or 0) / 1e3:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
