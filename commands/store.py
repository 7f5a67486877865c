"""`smlens ingest`, `runs`, `show`, `rm`, `store check` and `store repair` over the store."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

import pandas as pd
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from commands.common import say, store_path
from profiler.errors import BadInput
from profiler.ingest.capture_source import check_readable
from profiler.ingest.shapes import parse_shapes_file
from profiler.ingest.store import check_name, parse_tags
from profiler.ingest.stores import check, open_store, repair
from reports.formats import Format
from reports.runs import print_run, print_runs, run_record, run_summary, runs_json, support_lines
from reports.store_report import print_store_check, print_store_repair
from views.registry import input_columns, support


def ingest(files: Sequence[Path], store: Optional[str] = None, name: Optional[str] = None,
           tags: Optional[Sequence[str]] = None, shapes: Optional[Path] = None,
           roles_from_eager_order: bool = False, format: Format = Format.table) -> list[dict]:
    """Each capture file into the store as a run (one that is there already is named, not added
    twice); a missing second file is refused before the first is stored. Returns the runs' rows."""
    parsed_tags = parse_tags(tags)
    check_name(name)
    for file in files:
        check_readable(file)
    shape_map = parse_shapes_file(shapes) if shapes else None
    the_store = open_store(store_path(store))
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), transient=True, disable=not sys.stderr.isatty()) as bar:
        for file in files:
            task = bar.add_task(f"ingest {file.name}", total=None)
            run_name = name if name is None or len(files) == 1 else f"{name}-{file.name}"
            row, new = the_store.ingest(file, name=run_name, tags=parsed_tags, shapes=shape_map,
                                        roles_from_order=roles_from_eager_order,
                                        on_progress=lambda done, total: bar.update(task, completed=done, total=total))
            rows.append({**row, "new": new})
            if format == Format.table and not new:
                changed = " and ".join(row.get("changed") or [])
                say(f"{file}: already in the store as run {row['id']}"
                    + (f"; its {changed} updated" if changed else ""), err=True)
            elif format == Format.table:
                for note in json.loads(row.get("notes") or "[]"):
                    say(f"{file.name}: note: {note}", err=True)
                for line in support_lines(support(the_store.kernels(row["id"], columns=input_columns()))):
                    say(f"{file.name}: {line}", err=True)
    if format == Format.json:
        say(json.dumps([run_record(r) for r in rows], indent=2))
    else:
        print_runs(pd.DataFrame(rows))
    return rows


def list_runs(store: Optional[str] = None, format: Format = Format.table) -> pd.DataFrame:
    table = open_store(store_path(store), create=False).runs()
    say(runs_json(table)) if format == Format.json else print_runs(table)
    return table


def show_run(run: Optional[str], store: Optional[str] = None, format: Format = Format.table) -> dict:
    """One run's record and its kernels by phase and role; returns that summary."""
    the_store = open_store(store_path(store), create=False)
    kernels = the_store.kernels(run, columns=["phase", "role", "gpu__time_duration.sum"])
    if "gpu__time_duration.sum" in kernels:  # stores written before cells were checked hold text
        kernels["gpu__time_duration.sum"] = pd.to_numeric(kernels["gpu__time_duration.sum"], errors="coerce")
    summary = run_summary(the_store.run(run), kernels, metric_count=len(the_store.units(run)))
    say(json.dumps(summary, indent=2)) if format == Format.json else print_run(summary)
    return summary


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def remove_runs(refs: Sequence[str], store: Optional[str] = None, yes: bool = False,
                confirm: Optional[Callable[[str], bool]] = None, format: Format = Format.table) -> list[dict]:
    """Remove the runs `refs` name (all, or none when one is unknown or ambiguous). Unless `yes`,
    `confirm(question)` asks first, and only at a terminal: a script cannot answer."""
    the_store = open_store(store_path(store), create=False)
    if not yes:
        runs = the_store.runs()
        ids = list(dict.fromkeys(the_store.resolve(ref, unique=True, runs=runs) for ref in refs))
        if confirm is None or not stdin_is_terminal():
            raise BadInput(f"nothing removed: standard input is not a terminal, so removing "
                           f"{'this run' if len(ids) == 1 else f'these {len(ids)} runs'} cannot be "
                           f"confirmed; pass --yes to remove without asking")
        names = runs.set_index("id").loc[ids, "name"]
        say("\n".join(f"  {run_id} {name}" for run_id, name in names.items()), err=True)
        if not confirm("remove this run?" if len(ids) == 1 else f"remove these {len(ids)} runs?"):
            raise BadInput("nothing removed (not confirmed; --yes skips the question)")
    rows = the_store.remove(refs)
    if format == Format.json:
        say(json.dumps([run_record(row) for row in rows]))
    else:
        for row in rows:
            say(f"removed run {row['id']} ({row['name']})")
    return rows


def check_store(store: Optional[str] = None, format: Format = Format.table) -> int:
    """Every inconsistency of the store and what repair would do; exit 0 when none, 2 when some."""
    report = check(store_path(store))
    say(json.dumps(report, indent=2)) if format == Format.json else print_store_check(report)
    return 0 if report["ok"] else 2


def repair_store(store: Optional[str] = None, format: Format = Format.table) -> int:
    report = repair(store_path(store))
    say(json.dumps(report, indent=2)) if format == Format.json else print_store_repair(report)
    return 0 if report["ok"] else 2
