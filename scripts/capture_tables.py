"""Every committed capture read and stored by one version of the readers, and two such dumps compared.

For a change to the capture readers that should change nothing (issue 28's split of capture.py was
checked so). Dump with the old code, dump with the new, compare:

    git archive HEAD profiler views reports | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python scripts/capture_tables.py dump /tmp/before
    .venv/bin/python scripts/capture_tables.py dump /tmp/after
    .venv/bin/python scripts/capture_tables.py compare /tmp/before /tmp/after

A dump holds, per capture under tests/data and per way of reading it (plain; roles from order for
the CUDA-graph captures; a shapes mapping for decode12): read_capture's kernels table (Parquet),
the same capture's kernels.parquet from a store (raw captures stream through another path there),
and its units, notes, format, dtypes and run facts (JSON); or the error a capture is refused with.
`compare` checks each table's Arrow schema and every column exactly, and every JSON field but a
run's id and time; exit 1 on any difference.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SHAPES = {"qkv_proj": (4, 3072, 2048), "decode/o_proj": (4, 2048, 2048), "prefill/down_proj": (512, 2048, 8192)}
VOLATILE = ("created", "id")  # a run's id and time differ between any two ingests


def captures():
    for path in sorted(DATA.rglob("*")):
        name = path.name.lower()
        if path.is_file() and (".csv" in name or ".ncu-rep" in name):
            yield path


def ways(path: Path):
    """(name, shapes, roles_from_order) of each way a capture is read."""
    yield "plain", None, False
    if "graph" in path.name:
        yield "roles", None, True
    if path.name.startswith("decode12"):
        yield "shapes", SHAPES, False


def dump(out: Path) -> None:
    import profiler.ingest.capture as capture_module
    from profiler.ingest.store import Store

    print(f"reading with {capture_module.__file__}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store")
        for path in captures():
            for way, shapes, roles in ways(path):
                key = str(path.relative_to(DATA)).replace("/", "__") + "." + way
                print(key, file=sys.stderr, flush=True)
                try:
                    result = capture_module.read_capture(path, shapes=shapes, roles_from_order=roles)
                except Exception as err:  # a capture the reader refuses: its message must stay
                    (out / f"{key}.error.txt").write_text(f"{type(err).__name__}: {err}\n")
                    continue
                result.kernels.to_parquet(out / f"{key}.read.parquet")
                row, _ = store.ingest(path, name=key.replace(".", "-")[:60], shapes=shapes,
                                      roles_from_order=roles)
                shutil.copy(store.run_file(row["id"], "runs", "kernels.parquet"), out / f"{key}.store.parquet")
                meta = {"units": result.units, "notes": result.notes, "source_format": result.source_format,
                        "dtypes": {c: str(t) for c, t in result.kernels.dtypes.items()},
                        "store": store.meta(row["id"]), "store_units": store.units(row["id"])}
                (out / f"{key}.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))


def table_differences(name: str, old, new) -> list[str]:
    found = []
    if old.schema != new.schema:
        fields = [f"{a} -> {b.type}" for a, b in zip(old.schema, new.schema) if a != b]
        found.append(f"{name}: Arrow schema differs: {', '.join(fields) or 'in its fields or metadata'}")
    a, b = old.to_pandas(), new.to_pandas()
    if list(a.columns) != list(b.columns):
        return found + [f"{name}: columns differ: {sorted(set(a.columns) ^ set(b.columns))[:6]}"]
    for column in a.columns:
        if column == "run_id":  # a new id per ingest: one value in each table
            if a[column].nunique() != 1 or b[column].nunique() != 1 or len(a) != len(b):
                found.append(f"{name}: run_id is not one value")
            continue
        try:
            pd.testing.assert_series_equal(a[column], b[column], check_exact=True)
        except AssertionError as err:
            found.append(f"{name}: column {column!r}: {str(err).splitlines()[0]}")
    return found


def compare(before: Path, after: Path) -> int:
    names = sorted(p.name for p in before.iterdir())
    problems, tables = [], 0
    alone = sorted(set(names) ^ {p.name for p in after.iterdir()})
    if alone:
        problems.append(f"{len(alone)} file(s) in one dump only: {alone[:6]}")
    for name in names:
        if not (after / name).exists():
            continue
        if name.endswith(".parquet"):
            problems += table_differences(name, pq.read_table(before / name), pq.read_table(after / name))
            tables += 1
        elif name.endswith(".json"):
            old, new = (json.loads((side / name).read_text()) for side in (before, after))
            for side in (old, new):
                for key in VOLATILE:
                    side["store"]["run"].pop(key, None)
            problems += [f"{name}: {key} differs: {str(old.get(key))[:200]} != {str(new.get(key))[:200]}"
                         for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
        elif (before / name).read_text() != (after / name).read_text():
            problems.append(f"{name}: the error differs")
    if not tables:
        problems.append(f"{before}: no kernels tables to compare")
    print(f"{tables} kernels tables and {len(names) - tables} other files compared")
    print("\n".join(problems) if problems else "identical: every column, dtype, unit, note and run fact")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__.split("\n\n")[1])
