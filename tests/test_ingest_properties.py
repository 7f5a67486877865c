"""Mutated real captures end as a correct run or as a clean BadInput (exit 2), never as a crash
or a damaged store."""
from __future__ import annotations

import random

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings, strategies as st

from profiler.ingest.capture import read_capture
from profiler.errors import BadInput
from profiler.ingest.store import Store
from tests.conftest import DATA
from tests.test_store import snapshot

SOURCES = {name: (DATA / name).read_bytes() for name in ("decode12_raw.csv", "decode12_details.csv")}


def _split_cells(line: str) -> list[str]:
    import csv

    return next(csv.reader([line])) if line else []


def _join_cells(cells: list[str]) -> str:
    return ",".join('"' + c.replace('"', '""') + '"' for c in cells)


def mutate(data: bytes, kind: str, rng: random.Random) -> bytes:
    text = data.decode("utf-8")
    lines = text.split("\n")
    header_at = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    if kind == "cut":
        return data[: rng.randrange(len(data))]
    if kind == "drop_rows":
        body = [i for i in range(header_at + 1, len(lines)) if lines[i]]
        drop = set(rng.sample(body, rng.randrange(1, len(body) + 1)))
        return "\n".join(l for i, l in enumerate(lines) if i not in drop).encode()
    if kind in ("drop_column", "shuffle_columns"):
        table = [_split_cells(l) for l in lines[header_at:]]
        width = len(table[0])
        order = list(range(width))
        if kind == "drop_column":
            order.remove(rng.randrange(width))
        else:
            rng.shuffle(order)
        out = [_join_cells([row[i] for i in order if i < len(row)]) if row else "" for row in table]
        return "\n".join(lines[:header_at] + out).encode()
    if kind == "corrupt_number":
        row = rng.randrange(header_at + 1, len(lines) - 1)
        cells = _split_cells(lines[row])
        if cells:
            column = rng.randrange(len(cells))
            cells[column] = rng.choice(["1,2,3.4.5", "NaN", "-", "1e400", "#REF!", "", "９"])
            lines[row] = _join_cells(cells)
        return "\n".join(lines).encode()
    if kind == "encoding":
        codec = rng.choice(["utf-16", "latin-1", "utf-8-sig", "crlf"])
        if codec == "crlf":
            return text.replace("\n", "\r\n").encode()
        return text.replace("at::", "ät::").encode(codec)
    if kind == "noise":
        at = rng.randrange(header_at + 1, len(lines))
        junk = rng.choice(["==PROF== Disconnected", '"unbalanced quote', "{}", "a,b,c", '"1","x"'])
        return "\n".join(lines[:at] + [junk] + lines[at:]).encode()
    raise AssertionError(kind)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(sorted(SOURCES)),
       kind=st.sampled_from(["cut", "drop_rows", "drop_column", "shuffle_columns", "corrupt_number",
                             "encoding", "noise"]),
       seed=st.integers(0, 2**16))
def test_mutated_capture_is_a_run_or_bad_input(tmp_path_factory, source, kind, seed):
    tmp = tmp_path_factory.mktemp("prop")
    store_dir = tmp / "store"
    store = Store(store_dir)
    store.ingest(DATA / "targeted_raw.csv")
    before = snapshot(store_dir)
    path = tmp / source
    path.write_bytes(mutate(SOURCES[source], kind, random.Random(seed)))
    try:
        row, new = store.ingest(path)
    except BadInput as err:
        assert str(err) and "\n" not in str(err)
        assert snapshot(store_dir) == before
        return
    # a correct run: as many kernels as the file has rows, readable, the old run untouched
    kernels = store.kernels(row["id"])
    assert new and row["kernel_count"] == len(kernels) > 0
    assert kernels["kernel_id"].notna().all()
    assert len(read_capture(path).kernels) == len(kernels)
    assert pq.read_metadata(store_dir / "runs" / f"run={row['id']}" / "kernels.parquet").num_rows == len(kernels)
    assert len(store.runs()) == 2
    old = store.runs().iloc[0]["id"]
    assert len(store.kernels(old)) == 188
