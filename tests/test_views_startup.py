"""`smlens views` starts in a second (issue 29): what it imports, the store read without the dataset
layer, V8's table written directly where it fits, and the views' groups found without frame-wide
groupbys and sorts, each giving what it gave before."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from profiler.ingest.capture import read_capture
from profiler.ingest.store import read_parquet_file
from reports.terminal import SelectionTable
from tests.cli import smlens
from tests.conftest import DATA
from views.common import group_codes
from views.registry import compute_views
from views.v8_selection import SELECTION_COLUMNS, choice_text, selection
from views.vocabulary import CHOSEN_KINDS, PHASE_ORDER

ROOT = Path(__file__).parents[1]
SHAPES = ROOT / "profiler" / "data" / "h200_shapes.txt"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "store"
    code, _, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", path, "--name", "targeted",
                          "--shapes", SHAPES)
    assert code == 0, err
    return path


# What `smlens views` of one run needs none of: a comparison's modules, the object store's and the
# checks' (a folder store, nothing to check), the capture readers (nothing is ingested), pyarrow's
# dataset layer (one Parquet file at a time), rich's spinner (stderr is no terminal here).
NOT_IMPORTED = ("reports.comparison_text", "views.comparison", "commands.compare", "reports.html",
                "profiler.ingest.logstore", "profiler.ingest.logstore_check", "profiler.ingest.store_check",
                "profiler.ingest.capture", "profiler.ingest.shapes", "pyarrow.dataset", "rich.live",
                "pydantic")  # typer 0.29 coerces every option through pydantic: pyproject holds typer below it


def test_views_imports_only_what_it_prints(store):
    script = ("import contextlib, io, json, sys\n"
              "from profiler.cli import app\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    try:\n"
              f"        app(['views', '--store', {str(store)!r}])\n"
              "    except SystemExit as exit:\n"
              "        assert not exit.code, exit.code\n"
              "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    loaded = set(json.loads(done.stdout))
    assert "views.registry" in loaded and "reports.terminal" in loaded
    assert sorted(loaded & set(NOT_IMPORTED)) == []


def test_a_parquet_file_reads_as_pandas_reads_it(store):
    files = sorted(store.glob("**/*.parquet"))
    assert {f.name for f in files} == {"runs.parquet", "kernels.parquet", "units.parquet"}
    kernels = next(f for f in files if f.name == "kernels.parquet")
    wanted = ["kernel_name", "no_such_column", "phase", "kernel_id"]
    for path, columns in [(f, None) for f in files] + [(kernels, wanted)]:
        ours = read_parquet_file(path, columns)
        if columns is None:
            theirs = pd.read_parquet(path)
        else:
            theirs = pd.read_parquet(path, columns=[c for c in columns if c != "no_such_column"])
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
        assert list(map(str, ours.dtypes)) == list(map(str, theirs.dtypes))


@pytest.mark.parametrize("width", [200, 80])
def test_the_selection_table_draws_what_richs_table_draws(targeted_capture, width):
    """V8's table is written line by line where it fits; its text is rich's Table's (its sections a
    line of spaces, its headings whole); narrower, it is that Table, which wraps the choices."""
    table = SelectionTable(compute_views(targeted_capture.kernels).selection)
    assert len(table.rows.keys) > 5 and "" in table.rows.keys  # roles apart

    def text(renderable) -> str:
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(renderable)
        return console.export_text()

    assert text(table) == text(table.rich_table())
    assert (table.width <= width) == (width == 200)


def _selection_by_groupby(kernels: pd.DataFrame) -> pd.DataFrame:
    """V8's selection as pandas' groupbys and sort find it (what views/v8_selection did before)."""
    keys = ["role", "phase", "kind", "kernel_family", "tile", "split_k", "split_k_factor", "arch_path"]
    table = kernels[keys + ["time_ns"]][kernels["kind"].isin(CHOSEN_KINDS).to_numpy(dtype=bool, na_value=False)]
    grouped = (table.groupby(keys, sort=False, dropna=False, observed=True)
               .agg(kernels=("time_ns", "size"), timed=("time_ns", "count"), time_ns=("time_ns", "sum"))
               .reset_index())
    grouped["time_ns"] = grouped["time_ns"].where(grouped["timed"] == grouped["kernels"])
    grouped["choice"] = [choice_text(r.kernel_family, r.tile, r.split_k, r.split_k_factor, r.arch_path)
                         for r in grouped.itertuples(index=False)]
    grouped = (grouped.groupby(["role", "phase", "kind", "choice"], sort=False, observed=True)
               .agg(kernels=("kernels", "sum"), time_ns=("time_ns", lambda t: t.sum(min_count=len(t))))
               .reset_index())
    for column in ("role", "phase", "kind"):
        grouped[column] = grouped[column].astype(object)
    grouped["phase_rank"] = grouped["phase"].map({p: i for i, p in enumerate(PHASE_ORDER)}).fillna(len(PHASE_ORDER))
    grouped = grouped.sort_values(["role", "phase_rank", "kind"], kind="stable")
    first_phase = grouped.groupby("role", observed=True)["phase_rank"].transform("min")
    firsts = grouped["role"].map(grouped[grouped["phase_rank"] == first_phase]
                                 .groupby("role", observed=True)["choice"].agg(frozenset))
    grouped["changed"] = [c not in f for c, f in zip(grouped["choice"], firsts)]
    return grouped[SELECTION_COLUMNS].reset_index(drop=True)


@pytest.mark.parametrize("capture", ["targeted_raw.csv", "h200_runs/gate-b4-r1.csv.gz",
                                     "h200_tp/llama-3.1-8b-tp2-b8-p512.csv.gz"])
def test_the_selection_is_what_pandas_groupbys_give(capture):
    kernels = compute_views(read_capture(DATA / capture).kernels).kernels
    for part in (kernels, kernels[kernels["phase"].astype(object) == "decode"], kernels.iloc[::3]):
        ours, theirs = selection(part), _selection_by_groupby(part)
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
        assert list(map(str, ours.dtypes)) == list(map(str, theirs.dtypes))


def test_group_codes_of_many_keys_of_many_values_do_not_overflow():
    """Eight keys of 300 values each span 300^8 combinations, past int64: renumbered on the way."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"key{i}": rng.integers(0, 300, 5000) for i in range(8)})
    codes = group_codes(frame, list(frame.columns))
    reference = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()
    assert len(set(zip(codes, reference))) == len(set(codes)) == len(set(reference))
