"""Terminal and JSON forms of the runs table and of one run (`smlens runs`, `smlens show`)."""
from __future__ import annotations

import json

import pandas as pd
from rich.console import Console
from rich.table import Table

from reports.formatting import is_missing

LIST_COLUMNS = ["id", "name", "created", "device_name", "kernel_count", "source_format", "tags"]
HEADINGS = {"device_name": "device", "kernel_count": "kernels", "source_format": "format"}


def _plain(value):
    """JSON-safe scalars: NaN and NA become null, numpy scalars plain Python."""
    if is_missing(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _tags_text(tags: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in tags.items())


def run_record(row: dict) -> dict:
    record = {key: _plain(value) for key, value in row.items()}
    for key in ("tags", "notes", "shapes"):
        if isinstance(record.get(key), str):
            try:
                record[key] = json.loads(record[key])
            except ValueError:
                pass
    return record


def runs_json(runs: pd.DataFrame) -> str:
    return json.dumps([run_record(row) for row in runs.to_dict("records")], indent=2)


def print_runs(runs: pd.DataFrame, console: Console | None = None) -> None:
    console = console or Console()
    if not len(runs):
        console.print("no runs in the store: `smlens ingest FILE` adds one")
        return
    table = Table(title="runs", show_lines=False)
    for column in LIST_COLUMNS:
        table.add_column(HEADINGS.get(column, column), no_wrap=column in ("id", "created", "kernel_count"),
                         overflow="ellipsis", justify="right" if column == "kernel_count" else "left")
    for record in (run_record(r) for r in runs.to_dict("records")):
        tags = record.get("tags") or {}
        record["tags"] = _tags_text(tags) if isinstance(tags, dict) else str(tags)
        record["created"] = str(record.get("created") or "")[:16].replace("T", " ")
        if record.get("partial"):
            record["name"] = f"{record['name']} (partial)"
        table.add_row(*["" if record.get(c) is None else str(record.get(c)) for c in LIST_COLUMNS])
    console.print(table)


def run_summary(run: dict, kernels: pd.DataFrame, metric_count: int) -> dict:
    """The run's row plus kernel counts and time per phase and role."""
    record = run_record(run)
    time_column = "gpu__time_duration.sum"
    groups = kernels.groupby(["phase", "role"], dropna=False, observed=True)
    summary = groups.size().rename("kernels").to_frame()
    if time_column in kernels:
        summary["time_ns"] = groups[time_column].sum(min_count=1)
    record["phases"] = [
        {"phase": phase, "role": role, **{k: _plain(v) for k, v in values.items()}}
        for (phase, role), values in summary.to_dict("index").items()]
    record["metric_count"] = metric_count
    return record


def print_run(summary: dict, console: Console | None = None) -> None:
    console = console or Console()
    head = Table(show_header=False, box=None, title=f"run {summary['id']}")
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    for key in ("name", "created", "source", "sha256", "source_format", "ncu_version", "device_name",
                "cc", "host", "kernel_count", "metric_count", "partial", "tags"):
        value = summary.get(key)
        if isinstance(value, dict):
            value = _tags_text(value)
        head.add_row(key.replace("_", " "), "" if value is None else str(value))
    console.print(head)
    table = Table(title="kernels by phase and role")
    for column, justify in (("phase", "left"), ("role", "left"), ("kernels", "right"), ("time µs", "right")):
        table.add_column(column, justify=justify)
    for group in summary["phases"]:
        time_ns = group.get("time_ns")
        table.add_row(str(group["phase"]), str(group["role"]), str(group["kernels"]),
                      "" if time_ns is None else f"{time_ns / 1000:,.1f}")
    console.print(table)
    for note in summary.get("notes") or []:
        console.print(f"note: {note}")
