"""`ncu --csv --page details` -> the kernels table: its rows, one per kernel and metric, pivoted.

Metrics the sections name for people ("Duration" in "GPU Speed Of Light Throughput") take the
names the views read (DISPLAY_NAME_METRICS); those of `--metrics` keep theirs. Values are scaled
to base units per row, since the page prints each in the unit that suits it.
"""
from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa

from profiler.errors import BadInput
from profiler.ingest.capture_cells import CellCounts, cell_notes, classify_cells, integers, unique_names
from profiler.ingest.capture_source import NOT_UTF8, find_header, first_line, open_binary, row_chunks
from profiler.ingest.capture_table import (MEASURED, Capture, Classifier, identity_frame, measured_flags,
                                           note_missing_shapes)
from profiler.ingest.units import to_base

DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
# The details page of ncu's sections names metrics for people; these are the ones the views read.
DISPLAY_NAME_METRICS = {
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    # the clocks the kernel ran at (SpeedOfLight's own metrics): base-locked clocks show here
    ("GPU Speed Of Light Throughput", "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    ("GPU Speed Of Light Throughput", "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    ("GPU Speed Of Light Throughput", "SM Active Cycles"): "sm__cycles_active.avg",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ("Memory Workload Analysis", "L2 Hit Rate"): "lts__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "Memory Throughput"): "dram__bytes.sum.per_second",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Block Size"): "launch__block_size",
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "# SMs"): "launch__sm_count",
    ("Launch Statistics", "Waves Per SM"): "launch__waves_per_multiprocessor",
    ("Launch Statistics", "Cluster Size"): "launch__cluster_size",
    ("Occupancy", "Block Limit Registers"): "launch__occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "launch__occupancy_limit_warps",
    ("Occupancy", "Block Limit SM"): "launch__occupancy_limit_blocks",
    ("Occupancy", "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    ("Occupancy", "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    ("Occupancy", "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    ("Compute Workload Analysis", "Issue Slots Busy"): "smsp__issue_active.avg.pct_of_peak_sustained_active",
}


def read(path: Path, classifier: Classifier) -> Capture:
    """A details-page capture: its rows, one per kernel and metric, pivoted to one per kernel."""
    notes: list[str] = []
    found: dict = {}
    with open_binary(path) as stream:
        header, rest = find_header(stream, path)
        rows = b"".join(row_chunks(stream, header, rest, found))
    if not rows:
        raise BadInput(f"{path}: the capture has a header but no kernel rows")
    repeated = [c for c in DETAILS_COLUMNS if header.count(c) > 1]
    if repeated:  # which copy holds the values is unknown (a damaged header: units read as values)
        raise BadInput(f"{path}: the details page's header names {repeated[0]!r} {header.count(repeated[0])} "
                       "times; export it again with ncu --csv --page details")
    # pandas, not pyarrow: rows without rule results end early (ragged rows)
    try:
        frame = pd.read_csv(io.BytesIO(rows), dtype=str, keep_default_na=False,
                            names=unique_names(header, notes), header=None)
    except UnicodeDecodeError:
        raise BadInput(f"{path} {NOT_UTF8}") from None
    except (pd.errors.ParserError, ValueError) as err:
        raise BadInput(f"{path}: a row does not match the header ({first_line(err)})") from None
    if found["noise"]:
        notes.append(f"skipped {found['noise']} line(s) of program or ncu output among the rows")
    for optional in ("Section Name", "Metric Unit"):  # without them values are taken as printed
        if optional not in frame:
            frame[optional] = ""
    frame = frame[frame["Metric Name"].str.len() > 0]  # rule rows carry no metric
    has_id = integers(frame["ID"]).notna()
    if not has_id.all():
        notes.append(f"dropped {int((~has_id).sum())} damaged row(s) with no kernel ID")
        frame = frame[has_id]
    if frame.empty:
        raise BadInput(f"{path}: no kernel rows with metrics in the details page")
    first = frame.drop_duplicates("ID")
    identity_table = pa.Table.from_pandas(first[[c for c in first.columns if c not in DETAILS_COLUMNS
                                                 and not c.startswith("Rule")
                                                 and not c.startswith("Estimated")]],
                                          preserve_index=False)
    kernels = identity_frame(identity_table, classifier).astype({"kernel_id": "int64"})
    kernels = kernels.set_index("kernel_id")

    section, metric = frame["Section Name"], frame["Metric Name"]
    mapped = [DISPLAY_NAME_METRICS.get((s, m)) for s, m in zip(section, metric)]
    command_line = section.eq("Command line profiler metrics") | metric.str.contains("__", regex=False)
    frame = frame.assign(column=[
        m if cl else (mp or f"{s}: {m}")
        for s, m, cl, mp in zip(section, metric, command_line, mapped)])
    bases = {unit: to_base(unit) for unit in frame["Metric Unit"].unique()}
    scale = frame["Metric Unit"].map(lambda u: bases[u][1])
    base_unit = frame["Metric Unit"].map(lambda u: bases[u][0])
    values, is_text, non_finite = classify_cells(pa.array(frame["Metric Value"].tolist(), pa.string()))
    frame = frame.assign(number=values.to_numpy(zero_copy_only=False) * scale.to_numpy(),
                         is_text=is_text.to_numpy(zero_copy_only=False),
                         non_finite=non_finite.to_numpy(zero_copy_only=False), base_unit=base_unit)
    units: dict[str, str] = {}
    columns = {}
    unreadable, examples, not_finite = Counter(), {}, Counter()
    for name, group in frame.groupby("column", sort=False, observed=True):
        ids = integers(group["ID"]).astype("int64")
        counts = CellCounts(numbers=int(group["number"].notna().sum()), text=int(group["is_text"].sum()),
                             non_finite=int(group["non_finite"].sum()))
        if counts.numeric:
            columns[name] = pd.Series(group["number"].to_numpy(), index=ids)
            units[name] = group["base_unit"].iloc[0]
            if counts.text:
                unreadable[name] = counts.text
                examples[name] = group.loc[group["is_text"], "Metric Value"].iloc[0]
            if counts.non_finite:
                not_finite[name] = counts.non_finite
        else:
            columns[name] = pd.Series(group["Metric Value"].to_numpy(), index=ids)
            units[name] = group["Metric Unit"].iloc[0]
    notes.extend(cell_notes(unreadable, examples, not_finite))
    metrics = pd.DataFrame({k: v[~v.index.duplicated()] for k, v in columns.items()})
    kernels = kernels.join(metrics).reset_index()
    kernels[MEASURED] = measured_flags(kernels, list(metrics.columns))
    return note_missing_shapes(Capture(kernels, units, "details", notes=notes))

