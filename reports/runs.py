"""Terminal and JSON forms of the runs table and of one run (`smlens runs`, `smlens show`)."""
from __future__ import annotations

import json

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reports.formatting import is_missing
from reports.tables import Column, CompactTable, Rows, broken_lines, output_console
from views.grouping import ROLE_ORDER
from views.vocabulary import PHASE_ORDER

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
    for key in ("tags", "notes", "shapes", "capture"):
        if isinstance(record.get(key), str):
            try:
                record[key] = json.loads(record[key])
            except ValueError:
                pass
    return record


def runs_json(runs: pd.DataFrame) -> str:
    return json.dumps([run_record(row) for row in runs.to_dict("records")], indent=2)


def _compact(title: str | None = None, header: bool = True) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", show_header=header,
                 box=box.SIMPLE_HEAD if header else None, show_edge=False, pad_edge=False,
                 padding=(0, 1), collapse_padding=True)


# What moves out of the row, onto a line of its own under it, until the row fits the width: the
# tags, then the device and format, then the date and kernel count, then a name too long for it.
_UNDER_THE_ROW = (("tags",), ("device_name", "source_format", "tags"),
                  ("created", "device_name", "kernel_count", "source_format", "tags"),
                  ("name", "created", "device_name", "kernel_count", "source_format", "tags"))


def _runs_texts(runs: pd.DataFrame) -> list[dict]:
    texts = []
    for record in (run_record(r) for r in runs.to_dict("records")):
        tags = record.get("tags") or {}
        record["tags"] = _tags_text(tags) if isinstance(tags, dict) else str(tags)
        record["created"] = str(record.get("created") or "")[:16].replace("T", " ")
        if record.get("partial"):
            record["name"] = f"{record['name']} (partial)"
        texts.append({c: "" if record.get(c) is None else str(record.get(c)) for c in LIST_COLUMNS})
    return texts


def runs_table(runs: pd.DataFrame, width: int) -> CompactTable:
    """The runs, one row each with every column when it fits in `width`, else with the tags (then
    more) on a line under the row: nothing is cut."""
    texts = _runs_texts(runs)
    table = None
    for under in ((), *_UNDER_THE_ROW):
        rows = Rows()
        for run in texts:
            note = tuple(fact for c in under if run[c]
                         for fact in (run[c].split(" ") if c == "tags" else [f"{HEADINGS.get(c, c)} {run[c]}"]))
            rows.row(run["id"], note=note or None)
        columns = [Column(HEADINGS.get(c, c), [run[c] for run in texts], "right" if c == "kernel_count" else "left")
                   for c in LIST_COLUMNS[1:] if c not in under]
        table = CompactTable("runs", "id", rows, columns)
        if table.width <= width:
            break
    return table


def print_runs(runs: pd.DataFrame, console: Console | None = None) -> None:
    console = console or output_console()
    if not len(runs):
        console.print("no runs in the store: `smlens ingest FILE` adds one")
        return
    console.print(runs_table(runs, console.width))


def _rank(value, order) -> int:
    return order.index(value) if value in order else len(order)


def run_summary(run: dict, kernels: pd.DataFrame, metric_count: int) -> dict:
    """The run's row plus kernel counts, time and share of the time per phase and role, phases in
    the order a request meets them (cold prefill, warm prefill, decode, then setup)."""
    record = run_record(run)
    time_column = "gpu__time_duration.sum"
    groups = kernels.groupby(["phase", "role"], dropna=False, observed=True)
    summary = groups.size().rename("kernels").to_frame()
    if time_column in kernels:
        summary["time_ns"] = groups[time_column].sum(min_count=1)
        total = summary["time_ns"].sum()
        summary["time_share_pct"] = 100 * summary["time_ns"] / total if total > 0 else float("nan")
    ordered = sorted(summary.to_dict("index").items(),
                     key=lambda item: (_rank(item[0][0], PHASE_ORDER), _rank(item[0][1], ROLE_ORDER), str(item[0])))
    record["phases"] = [
        {"phase": phase, "role": role, **{k: _plain(v) for k, v in values.items()}}
        for (phase, role), values in ordered]
    record["metric_count"] = metric_count
    return record


HEAD_KEYS = ("name", "created", "source", "sha256", "source_format", "ncu_version", "device_name", "cc", "host",
             "kernel_count", "metric_count", "partial", "tags", "capture")


def head_lines(summary: dict, width: int) -> list[str]:
    """The run's facts, a key and its value per line; a value wider than the line goes on below
    its start, broken between a path's folders or between words, never inside a name."""
    facts = {key: summary.get(key) for key in HEAD_KEYS}
    facts["capture"] = _capture_text(summary.get("capture"))
    keys = [k for k in HEAD_KEYS if k != "capture" or facts["capture"]]
    key_width = max(len(k) for k in keys)
    lines = []
    for key in keys:
        value = facts[key]
        value = _tags_text(value) if isinstance(value, dict) else "" if value is None else str(value)
        broken = broken_lines(value, width - key_width - 1, after="/ ") if value else [""]
        lines.append(f"{key.replace('_', ' '):<{key_width}} {broken[0]}".rstrip())
        lines += [" " * (key_width + 1) + line for line in broken[1:]]
    return lines


def _capture_text(facts) -> str:
    if not isinstance(facts, dict) or not facts:  # stores before capture facts lack them
        return ""
    lost = facts.get("unmeasured_kernels") or 0
    return (f"{facts.get('device_count')} device(s) {facts.get('devices')}"
            + (f", {facts.get('replay_passes'):g} replay passes per kernel"
               if facts.get("replay_passes") is not None else "")
            + (f", {lost} kernel(s) ncu could not measure (ID "
               + ", ".join(map(str, facts.get("unmeasured_kernel_ids") or [])) + ")" if lost else ""))


def print_run(summary: dict, console: Console | None = None) -> None:
    console = console or output_console()
    console.print(Text(f"run {summary['id']}", style="bold"))
    for line in head_lines(summary, console.width):
        console.print(Text(line), no_wrap=True, crop=False)
    table = _compact("kernels by phase and role")
    for column, justify in (("phase / role", "left"), ("kernels", "right"), ("time µs", "right"),
                            ("share %", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    previous = None
    for group in summary["phases"]:
        if group["phase"] != previous:
            previous = group["phase"]
            phase_rows = [g for g in summary["phases"] if g["phase"] == previous]
            time = sum(g.get("time_ns") or 0 for g in phase_rows)
            share = sum(g.get("time_share_pct") or 0 for g in phase_rows)
            name = f"{previous} (setup)" if previous == "other" and len({g['phase'] for g in summary['phases']}) > 1 \
                else str(previous)
            table.add_row(f"[bold]{name}[/]", str(sum(g["kernels"] for g in phase_rows)), f"{time / 1000:,.1f}",
                          f"{share:.1f}")
        time_ns, share = group.get("time_ns"), group.get("time_share_pct")
        table.add_row(f"  {group['role']}", str(group["kernels"]),
                      "" if time_ns is None else f"{time_ns / 1000:,.1f}",
                      "" if share is None else f"{share:.1f}")
    console.print(table)
    for note in summary.get("notes") or []:
        console.print(f"note: {note}")


def support_lines(support) -> list[str]:
    """What a capture cannot show, one line per view (views.registry.support): the quantity it
    lacks and the ncu section that carries it; nothing for a view it supports."""
    lines = []
    for row in support.itertuples(index=False):
        if row.status == "supported":
            continue
        lines.append(f"{row.view} {row.title}: {row.figures_shown} of {row.figures} figures; missing "
                     + "; ".join(row.missing))
    return lines
