"""The views' JSON document (`smlens views --format json`, the demo's, docs/VIEWS.md's
machine-readable form): every kernel with its identity, figures, what gave each figure and its
validations; the groups, the gap, the selection, the devices; missing values null, never 0."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from views.common import STATUSES
from views.registry import IDENTITY, JSON_IDENTITY, SOURCE_PREFIX, ViewsResult, json_kernel_keys, title


def json_value(value):
    """A cell as JSON has it: NaN, NA and infinities null, numpy scalars plain Python."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(value) else float(value)
    return value


def records(frame: pd.DataFrame) -> list[dict]:
    columns = list(frame.columns)
    return [{c: json_value(v) for c, v in zip(columns, row)}
            for row in frame.itertuples(index=False, name=None)]


def views_document(result: ViewsResult, run=None) -> dict:
    """The document of a views result (of the run `run`, its id)."""
    k = result.kernels
    frame = pd.DataFrame(index=k.index)
    keys = json_kernel_keys()
    for key in keys:
        source = JSON_IDENTITY.get(key, key)
        frame[key] = k[source].astype(object) if source in k else None
    sources = [c for c in k.columns if c.startswith(SOURCE_PREFIX)]
    extra = [c for c in k.columns if c not in IDENTITY and c not in keys
             and not c.startswith("validation_") and not c.startswith(SOURCE_PREFIX)]
    for column in extra:
        frame[column] = k[column].astype(object)
    kernels = records(frame)
    validations = records(k[[f"validation_{v}" for v in result.view_ids]])
    details = records(k[[f"validation_detail_{v}" for v in result.view_ids]])
    for record, named in zip(kernels, records(k[sources])):
        # what gave each figure: the metric, details-page column or derivation (null: nothing)
        record["sources"] = {c[len(SOURCE_PREFIX):]: v for c, v in named.items() if v is not None}
    for record, status, detail in zip(kernels, validations, details):
        record["validations"] = {v: status[f"validation_{v}"] for v in result.view_ids}
        record["validation_details"] = {v: detail[f"validation_detail_{v}"] for v in result.view_ids
                                        if detail[f"validation_detail_{v}"]}
    counts = {f"{v}_{s}" for v in result.view_ids for s in STATUSES}  # grouping.partials' status counts
    groups = records(result.groups.drop(columns=[c for c in result.groups if c in counts]))
    for record, (_, row) in zip(groups, result.groups.iterrows()):
        record["validations"] = {v: {s: int(row[f"{v}_{s}"]) for s in STATUSES}
                                 for v in result.view_ids if f"{v}_pass" in row}
    out = {"run": run, "views": {v: title(v) for v in result.view_ids},
           # what time shares are of: null, the whole run; else the phases selected, each's time
           "time_shares_of": {"time_ns": sum(result.phase_time_ns.values()),
                              "phase_time_ns": result.phase_time_ns} if result.phase_time_ns else None,
           "devices": records(result.devices), "kernels": kernels, "groups": groups,
           "gap": records(result.gap), "selection": records(result.selection),
           "mlp": records(result.mlp),
           # per figure, what gave it and on how many kernels (the report's tooltips)
           "sources": {c[len(SOURCE_PREFIX):]: {str(t): int(n) for t, n in
                                                k[c].value_counts(sort=True).items() if n}
                       for c in sources}}
    if not result.timed.empty or not result.imbalance.empty:  # tensor parallel only
        out["timed"] = records(result.timed.drop(columns=["nvtx_stack"], errors="ignore"))
        out["communication"] = records(result.communication)
        out["imbalance"] = records(result.imbalance)
        out["collectives"] = records(result.collectives)
    return out


def views_json(result: ViewsResult, run=None, indent=None) -> str:
    return json.dumps(views_document(result, run), indent=indent, allow_nan=False)
