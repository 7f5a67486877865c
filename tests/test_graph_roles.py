"""Roles for CUDA-graph kernels from the eager step's kernel order (nvtx.EagerOrder).

Under `ncu --graph-profiling node` a graph's kernels carry only the host ranges open at replay
(docs/NCU_ON_H200.md). The test replays a real H200 decode step that way: the Llama-3.1-8B batch-1
capture's eager decode kernels (decode / step_1 / layer_0 / role), then the same kernels twice
more (two layers of a graph replay) with only `decode / step_2` on their stack."""
from __future__ import annotations

import csv
import gzip
import io

import pytest

from profiler.ingest.capture import read_capture
from profiler.ingest.nvtx import parse_stack
from profiler.ingest.store import Store
from tests.conftest import DATA

SOURCE = DATA / "h200_runs" / "llama-3.1-8b-b1-p512.csv.gz"
GRAPH_CELL = ('940  "smlens:decode:none:none:RGB:0xff:REGISTERED:decode"  '
              '"smlens:step_2:none:none:RGB:0xff:REGISTERED:step_2" ')


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    rows = list(csv.reader(io.StringIO(gzip.open(SOURCE, "rt").read())))
    start = next(i for i, row in enumerate(rows) if row and row[0] == "ID")
    header, units, data = rows[start], rows[start + 1], [r for r in rows[start + 2:] if r]
    push_pop = next(i for i, name in enumerate(header) if name.startswith("thread Domain"))
    eager = [r for r in data if "smlens:decode:" in r[push_pop]]
    graph = []
    for copy in range(2):
        for row in eager:
            node = list(row)
            node[0] = str(len(data) + len(graph))
            node[push_pop] = GRAPH_CELL
            graph.append(node)
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows([header, units] + data + graph)
    path = tmp_path_factory.mktemp("graph") / "graph.csv"
    path.write_text(out.getvalue())
    return path, len(eager)


def test_graph_kernels_take_the_eager_steps_roles_and_shapes(replayed):
    path, step_kernels = replayed
    kernels = read_capture(path, roles_from_order=True).kernels
    eager = kernels[(kernels.phase == "decode") & (kernels.role_source == "nvtx")]
    graph = kernels[kernels.role_source == "order"]
    assert len(eager) == step_kernels and len(graph) == 2 * step_kernels
    assert all(list(stack) == parse_stack(GRAPH_CELL) for stack in graph["nvtx_stack"])
    for copy in range(2):
        nodes = graph.iloc[copy * step_kernels:(copy + 1) * step_kernels]
        for column in ("kernel_name", "role", "shape_m", "shape_n", "shape_k", "attn_kv_len"):
            assert list(nodes[column]) == list(eager[column]), column
    assert set(graph["role"]) == {"qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj",
                                  "elementwise"}
    qkv = graph[graph.role == "qkv_proj"].iloc[0]
    assert (qkv.shape_m, qkv.shape_n, qkv.shape_k) == (1, 6144, 4096)


def test_without_the_option_graph_kernels_keep_the_classifiers_guess(replayed):
    path, step_kernels = replayed
    kernels = read_capture(path).kernels
    ranged_less = kernels[kernels.nvtx_stack.map(len) == 2]
    assert len(ranged_less) == 2 * step_kernels and set(ranged_less.role_source) == {"name"}
    assert "qkv_proj" not in set(ranged_less.role) and "gemm" in set(ranged_less.role)
    assert ranged_less.shape_n.isna().all()


def test_store_keeps_both_readings_apart(replayed, tmp_path):
    path, step_kernels = replayed
    store = Store(tmp_path / "store")
    plain, new_plain = store.ingest(path)
    ordered, new_ordered = store.ingest(path, roles_from_order=True)
    assert new_plain and new_ordered and plain["id"] != ordered["id"]
    assert store.ingest(path, roles_from_order=True)[0]["id"] == ordered["id"]  # stored once
    stored = store.kernels(ordered["id"])
    assert (stored.role_source == "order").sum() == 2 * step_kernels


def test_ingest_option(replayed, tmp_path):
    import json
    from tests.cli import smlens

    path, step_kernels = replayed
    code, out, err = smlens("ingest", path, "--store", tmp_path / "s", "--roles-from-eager-order",
                            "--format", "json")
    assert code == 0, err
    run = json.loads(out)[0]
    assert run["roles_from_order"] is True
    stored = Store(tmp_path / "s").kernels(run["id"])
    assert (stored.role_source == "order").sum() == 2 * step_kernels


H200_GRAPH = DATA / "h200_runs" / "graph-decode-llama-3.1-8b-b4.csv.gz"


def test_real_h200_graph_replay_gets_the_eager_steps_roles():
    """Decode of Llama-3.1-8B (1 layer, batch 4) under a CUDA graph, profiled on the H200 with
    --graph-profiling node (tests/data/h200_runs/PROVENANCE.md)."""
    from views.registry import compute_views

    kernels = read_capture(H200_GRAPH, roles_from_order=True).kernels.set_index("kernel_id")
    eager = kernels.loc[0:19]
    graph = kernels.loc[22:59]
    assert set(eager.role_source) == {"nvtx"} and set(graph.role_source) == {"order"}
    assert all(len(stack) == 2 for stack in graph.nvtx_stack)  # decode, step_<j>: no role range
    # each replay is the eager step without its first copy kernel, in the same order, but for
    # one residual add that the graph runs vectorized: it takes its slot's role all the same
    for replay in (graph.iloc[:19], graph.iloc[19:]):
        same_name = [a == b for a, b in zip(replay.kernel_name, eager.kernel_name.iloc[1:])]
        assert same_name.count(False) == 1 and "CUDAFunctor_add" in replay.kernel_name.iloc[same_name.index(False)]
        assert list(replay.role) == list(eager.role.iloc[1:])
    assert set(graph.role) == {"qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj",
                               "elementwise"}
    gate_up = graph[graph.role == "gate_up_proj"]
    assert set(gate_up.shape_n) == {28672} and set(gate_up.shape_m) == {4}
    # the copies around the capture are in no role range and not in the eager order
    assert list(kernels.loc[20:21, "role_source"]) == ["name", "name"]
    # the views explain the graph's GEMMs as they do the eager ones: 4 of 8 tile rows useful
    figures = compute_views(kernels.reset_index()).kernels.set_index("kernel_id")
    graph_gemms = figures.loc[22:59].query("kind == 'gemm'")
    assert len(graph_gemms) == 8 and (graph_gemms["fill"].round(2) <= 0.5).all()
    assert set(figures.loc[22:59, "validation_V3"]) >= {"pass"}
