"""Mutated real captures end as a correct run or as a clean refusal (exit 2, one `smlens:` line
naming the file), never as a crash or a changed store."""
from __future__ import annotations

import gzip
import json
import random

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from profiler.ingest.capture import read_capture
from profiler.ingest.store import Store
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_bad_input import copy_store
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
    if kind == "gzip_cut":  # compressed, then cut anywhere (or not at all)
        packed = gzip.compress(data, mtime=0)
        return packed[: rng.randrange(2, len(packed) + 1)]
    if kind == "bytes":  # a few bytes overwritten with anything, NUL and invalid UTF-8 included
        out = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if kind == "duplicate_column":
        header = _split_cells(lines[header_at])
        other = rng.choice(header)
        header[rng.randrange(len(header))] = other
        lines[header_at] = _join_cells(header)
        return "\n".join(lines).encode()
    if kind == "giant_cell":
        row = rng.randrange(header_at + 1, len(lines) - 1)
        cells = _split_cells(lines[row])
        if cells:
            cells[rng.randrange(len(cells))] = "x" * rng.choice([200_000, 1_100_000])
            lines[row] = _join_cells(cells)
        return "\n".join(lines).encode()
    raise AssertionError(kind)


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("prop-base") / "store"
    Store(path).ingest(DATA / "targeted_raw.csv")
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(sorted(SOURCES)),
       kind=st.sampled_from(["cut", "drop_rows", "drop_column", "shuffle_columns", "corrupt_number",
                             "encoding", "noise", "gzip_cut", "bytes", "duplicate_column", "giant_cell"]),
       seed=st.integers(0, 2**16))
def test_mutated_capture_is_a_run_or_bad_input(tmp_path_factory, base_store, source, kind, seed):
    tmp = tmp_path_factory.mktemp("prop")
    store_dir = copy_store(base_store, tmp)
    store = Store(store_dir)
    before = snapshot(store_dir)
    path = tmp / f"mutated-{source}"
    path.write_bytes(mutate(SOURCES[source], kind, random.Random(seed)))
    code, out, err = smlens("ingest", path, "--store", store_dir, "--format", "json")
    assert code in (0, 2) and "Traceback" not in out + err, (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"smlens: {path}"), err
        assert snapshot(store_dir) == before
        return
    # a correct run: as many kernels as the file has rows, readable, the old run untouched
    row = json.loads(out)[0]
    new = row["new"]
    kernels = store.kernels(row["id"])
    assert new and row["kernel_count"] == len(kernels) > 0
    if "gpu__time_duration.sum" in kernels:  # a numeric column stays numeric, bad cells or not
        assert kernels["gpu__time_duration.sum"].dtype == "float64"
    assert kernels["kernel_id"].notna().all()
    assert len(read_capture(path).kernels) == len(kernels)
    assert pq.read_metadata(store_dir / "runs" / f"run={row['id']}" / "kernels.parquet").num_rows == len(kernels)
    assert len(store.runs()) == 2
    old = store.runs().iloc[0]["id"]
    assert len(store.kernels(old)) == 188
