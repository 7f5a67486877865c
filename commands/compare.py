"""`smlens show RUN --kernel ID` and the comparison `smlens views RUN --baseline OTHER` prints first:
one kernel in depth (views/kernel_detail.py) and what changed against a baseline
(views/comparison.py), from stored runs."""
from __future__ import annotations

import json
from typing import Optional, Sequence

import pandas as pd

from commands.common import say, store_path
from commands.store import show_run
from profiler.errors import BadInput
from profiler.gate_match import identify, mismatches
from profiler.ingest.stores import open_store
from reports.compare import compare_runs
from reports.formats import Format
from reports.kernel_page import print_kernel
from views.comparison import ComparisonVerdict
from views.kernel_detail import kernel_detail, position
from views.registry import compute_views, input_columns


def _aligned(raw: pd.DataFrame, figures: pd.DataFrame) -> pd.DataFrame:
    """The stored kernels row for row with the views' (a TP run's timed collectives are no rows of
    the views: they have no counters)."""
    raw = raw.reset_index(drop=True)
    if len(raw) == len(figures) or "kernel_id" not in raw:
        return raw
    return raw[raw["kernel_id"].isin(set(figures["kernel_id"]))].reset_index(drop=True)


def show_kernel(run: Optional[str], kernel_id: Optional[str], baseline: Optional[str] = None,
                store: Optional[str] = None, format: Format = Format.table) -> dict:
    """One kernel of a stored run in depth (against `baseline`'s matched kernel); returns its JSON."""
    if kernel_id is None:
        raise BadInput("--baseline needs --kernel ID here; two runs compare with smlens views RUN --baseline OTHER")
    the_store = open_store(store_path(store), create=False)
    row = the_store.run(run)
    kernels = the_store.kernels(row["id"])  # every column: the page shows the raw counters
    result = compute_views(kernels)
    at = position(result.kernels, kernel_id)
    if at is None:
        ids = result.kernels["kernel_id"]
        raise BadInput(f"run {row['id']} has no kernel {kernel_id!r}: its kernels are {ids.min()} to {ids.max()} "
                       f"(smlens views {row['name'] or row['id']} --format csv lists them)")
    base_row = the_store.run(baseline) if baseline else None
    base = compute_views(the_store.kernels(base_row["id"])).kernels if base_row else None
    detail = kernel_detail(result.kernels, at, _aligned(kernels, result.kernels), base)
    document = {"run": row["id"], "baseline": base_row["id"] if base_row else None, **detail.to_dict()}
    if format == Format.json:
        say(json.dumps(document, allow_nan=False))
    else:
        print_kernel(detail)
    return document


def show_run_or_kernel(run: Optional[str], kernel_id: Optional[str] = None, baseline: Optional[str] = None,
                       store: Optional[str] = None, format: Format = Format.table) -> dict:
    """`smlens show`: the run (store.show_run), or with --kernel one kernel of it in depth."""
    if kernel_id is None and baseline is None:
        return show_run(run, store, format)
    return show_kernel(run, kernel_id, baseline, store, format)


def _tags(row: dict) -> dict:
    tags = row.get("tags") or {}
    return json.loads(tags) if isinstance(tags, str) else dict(tags)


def compare_stored(the_store, row: dict, kernels: pd.DataFrame, result, baselines: Sequence[str],
                   repeats: Sequence[str] = (), view_ids=None, phase=None, role=None,
                   kernel=None) -> ComparisonVerdict:
    """What changed from the stored runs `baselines` (the first is the baseline, the rest its
    repeats) to `row` (its views `result` over `kernels`, and its `repeats`), under the same
    filter; the runs' differences in device, workload and shapes said first (the gate's)."""
    def views_of(ref: str):
        other = the_store.run(ref)
        table = the_store.kernels(other["id"], columns=input_columns(view_ids))
        return other, table, compute_views(table, view_ids).filter(phase=phase, role=role, kernel=kernel)

    base = [views_of(ref) for ref in baselines]
    more = [views_of(ref) for ref in repeats]
    label = lambda r: f"{r['name'] or r['id']} ({r['id']})"  # noqa: E731
    differences = mismatches([identify(k, label(r), _tags(r)) for r, k, _ in base],
                             [identify(kernels, label(row), _tags(row))]
                             + [identify(k, label(r), _tags(r)) for r, k, _ in more])
    return compare_runs(result.kernels, base[0][2].kernels, row, base[0][0],
                        [m[2].kernels for m in more], [b[2].kernels for b in base[1:]], differences)
