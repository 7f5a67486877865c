""".ncu-rep reports -> the kernels table.

Re-exported through `ncu --import ... --csv --page raw` when ncu is on PATH (then read as a raw
capture), else read with the `ncu_report` package (PyPI `ncu-report`, needs neither ncu nor a
GPU), its values scaled to base units and its NVTX stack written as the raw page's cell, so one
parser serves both.
"""
from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa

from profiler.errors import BadInput
from profiler.ingest import capture_raw
from profiler.ingest.capture_cells import cell_notes
from profiler.ingest.capture_source import first_line, open_binary
from profiler.ingest.capture_table import (IDENTITY_COLUMNS, MEASURED, PUSH_POP_PREFIX, Capture, Classifier,
                                           identity_frame, measured_flags, note_missing_shapes)
from profiler.ingest.units import to_base

_NCU_REP_MAGIC = b"NVR\x00"


def read(path: Path, classifier: Classifier) -> Capture:
    """A .ncu-rep report (gzip-compressed too), through ncu when it is on PATH, else the module."""
    with tempfile.TemporaryDirectory(prefix="smlens-") as tmpdir:
        report = path
        with open_binary(path) as stream:
            head = stream.read(4)
            if head != _NCU_REP_MAGIC:
                raise BadInput(f"{path}: not an Nsight Compute report (it does not start as one does); "
                               "a CSV capture needs a name ending in .csv")
            if stream.compressed:
                report = Path(tmpdir) / "report.ncu-rep"
                with open(report, "wb") as out:
                    out.write(head)
                    shutil.copyfileobj(stream, out)
        ncu = shutil.which("ncu")
        if ncu:
            raw = Path(tmpdir) / "raw.csv"
            with open(raw, "wb") as out:
                # base units, as smlens profile exports: ncu scales a peak to Kbyte/cycle otherwise
                done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw",
                                       "--print-units", "base"],
                                      stdout=out, stderr=subprocess.PIPE)
            if done.returncode != 0:
                raise BadInput(f"{path}: ncu could not import the report: "
                               f"{done.stderr.decode(errors='replace').strip()[-200:]}")
            capture = capture_raw.read(raw, classifier)
            capture.source_format = "ncu-rep"
            return capture
        return _read_with_module(report, path, classifier)


def _read_with_module(report: Path, shown: Path, classifier: Classifier) -> Capture:
    """The report read with the ncu_report package; `shown` is the path errors name."""
    try:
        import ncu_report
    except ImportError:
        raise BadInput(f"{shown}: reading a .ncu-rep needs ncu on PATH or the ncu-report package "
                       "(pip install ncu-report)") from None
    try:
        context = ncu_report.load_report(str(report))
    except Exception as err:  # the module raises plain exceptions for unreadable files
        raise BadInput(f"{shown}: not a readable .ncu-rep report ({first_line(err)})") from None
    notes: list[str] = []
    rows, units, non_finite = [], {}, Counter()
    kernel_id = 0
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            row = {"ID": str(kernel_id), "Kernel Name": action.name(action.NameBase_DEMANGLED)}
            kernel_id += 1
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                value = metric.value()
                if isinstance(value, (int, float)):
                    base_unit, factor = to_base(metric.unit())
                    row[name] = float(value) * factor
                    if not math.isfinite(row[name]):
                        row[name] = None
                        non_finite[name] += 1
                    units.setdefault(name, base_unit)
                else:
                    row[name] = value
                    units.setdefault(name, metric.unit())
            row[PUSH_POP_PREFIX] = _nvtx_cell(action)
            rows.append(row)
    if not rows:
        raise BadInput(f"{shown}: the report holds no kernels")
    notes.extend(cell_notes(Counter(), {}, non_finite))
    frame = pd.DataFrame(rows)
    # a metric ncu could not read is NaN for that kernel (seen in a public H800 report): its
    # identity cell stays empty, as in a CSV export
    for column, source in (("Block Size", "launch__block_dim_"), ("Grid Size", "launch__grid_dim_")):
        if all(f"{source}{d}" in frame for d in "xyz"):
            frame[column] = [_dims_text(dims) for dims in zip(*(frame[f"{source}{d}"] for d in "xyz"))]
    for column, source in (("Device", "launch__device_id"), ("Stream", "launch__stream_id"),
                           ("Context", "launch__context_id")):
        if source in frame:
            frame[column] = frame[source].astype("Int64").astype("string")
    if "device__attribute_compute_capability_major" in frame:
        frame["CC"] = [_dims_text(cc, ".", "{}") for cc in zip(
            frame["device__attribute_compute_capability_major"],
            frame["device__attribute_compute_capability_minor"])]
    identity = pa.Table.from_pandas(
        frame[[c for c in frame.columns if c in IDENTITY_COLUMNS or c == PUSH_POP_PREFIX]].astype("string"),
        preserve_index=False)
    kernels = identity_frame(identity, classifier).astype({"kernel_id": "int64"})
    metrics = frame[[c for c in frame.columns if c not in IDENTITY_COLUMNS and c != PUSH_POP_PREFIX]]
    kernels = pd.concat([kernels, metrics.reset_index(drop=True)], axis=1)
    kernels[MEASURED] = measured_flags(kernels, list(metrics.columns))
    return note_missing_shapes(Capture(kernels, units, "ncu-rep", notes=notes))


def _dims_text(values, separator: str = ", ", form: str = "({})") -> str | None:
    """(256, 1, 1) from numbers; None when ncu could not read one of them (NaN, or not a number)."""
    try:
        whole = [int(v) for v in values if math.isfinite(float(v))]
    except (TypeError, ValueError):
        return None
    return form.format(separator.join(str(v) for v in whole)) if len(whole) == len(values) else None


def _nvtx_cell(action) -> str:
    """The push/pop stack of an action in the raw page's cell format, so one parser serves both."""
    state = action.nvtx_state()
    if state is None:
        return ""
    entries = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        for message in domain.push_pop_ranges():
            entries.append(f'"{domain.name()}:{message}:none:none:none:none:none:none"')
    return ("0  " + "  ".join(entries)) if entries else ""


# --- what the capture says of the run as a whole ---------------------------------------------------
