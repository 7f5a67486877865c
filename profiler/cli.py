"""The `smlens` command: one short function per command over the library modules.

Data flows profiler -> views -> reports; this file is the one place that joins them.
Every SmlensError becomes one line on stderr and its exit code; nothing else is caught here.
"""
from __future__ import annotations

import functools
import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from profiler.errors import SmlensError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="What an NVIDIA GPU is really doing during LLM inference.")


class Format(str, Enum):
    table = "table"
    json = "json"


StoreOpt = typer.Option(None, "--store", envvar="SMLENS_STORE",
                        help="Store folder (default ./smlens-store).")


def store_path(store: Optional[Path]) -> Path:
    return Path(store) if store else Path("smlens-store")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"smlens: {message}", err=True)
    raise typer.Exit(code)


def command(func):
    """Register a command whose SmlensError turns into one stderr line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except SmlensError as err:
            fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:  # `smlens ... | head`
            sys.stderr.close()
            raise typer.Exit(0)

    return app.command()(wrapper)


# --- store: ingest, runs, show, rm ------------------------------------------------------------
# (commands are added below by their owners; keep each a few lines over a library call)


@command
def ingest(files: List[Path] = typer.Argument(..., help="ncu CSV (raw or details page, gzip ok) or .ncu-rep"),
           store: Optional[Path] = StoreOpt,
           name: Optional[str] = typer.Option(None, help="Run name (default: the file name)."),
           tag: Optional[List[str]] = typer.Option(None, help="KEY=VALUE, repeatable."),
           shapes: Optional[Path] = typer.Option(None, help="File of '[phase/]role M N K' lines for "
                                                 "captures whose NVTX ranges carry no shapes."),
           format: Format = typer.Option(Format.table, "--format")):
    """Read ncu captures into the Parquet store, one run per file."""
    from profiler.capture import parse_shapes_file
    from profiler.store import Store, parse_tags
    from reports.runs import print_runs, run_record
    import json
    import pandas as pd

    tags = parse_tags(tag)
    shape_map = parse_shapes_file(shapes) if shapes else None
    the_store = Store(store_path(store))
    rows = []
    for file in files:
        run_name = name if name and len(files) == 1 else (f"{name}-{file.name}" if name else None)
        row, new = the_store.ingest(file, name=run_name, tags=tags, shapes=shape_map)
        rows.append({**row, "new": new})
        if format == Format.table and not new:
            typer.echo(f"{file}: already in the store as run {row['id']}", err=True)
    if format == Format.json:
        typer.echo(json.dumps([run_record(r) for r in rows], indent=2))
    else:
        print_runs(pd.DataFrame(rows))


@command
def runs(store: Optional[Path] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """List the runs in the store."""
    from profiler.store import Store
    from reports.runs import print_runs, runs_json

    table = Store(store_path(store), create=False).runs()
    typer.echo(runs_json(table)) if format == Format.json else print_runs(table)


@command
def show(run: Optional[str] = typer.Argument(None, help="Run id, id prefix, name or 'latest'."),
         store: Optional[Path] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """One run: where it came from, and its kernels by phase and role."""
    import json
    from profiler.store import Store
    from reports.runs import print_run, run_summary

    the_store = Store(store_path(store), create=False)
    summary = run_summary(the_store.run(run), the_store.kernels(run, columns=[
        "phase", "role", "gpu__time_duration.sum"]), metric_count=len(the_store.units(run)))
    typer.echo(json.dumps(summary, indent=2)) if format == Format.json else print_run(summary)


@command
def rm(run: str = typer.Argument(..., help="Run id, id prefix or name."),
       store: Optional[Path] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """Remove a run from the store."""
    import json
    from profiler.store import Store
    from reports.runs import run_record

    row = Store(store_path(store), create=False).remove(run)
    if format == Format.json:
        typer.echo(json.dumps(run_record(row)))
    else:
        typer.echo(f"removed run {row['id']} ({row['name']})")


@command
def gate(baseline: Optional[List[str]] = typer.Option(
             None, "--baseline", "-b", help="Baseline run(s): a capture file, a stored run (id, name, "
             "'latest'), or tag:KEY=VALUE[~N]. Repeat the option or separate with commas."),
         current: Optional[List[str]] = typer.Option(
             None, "--current", "-c", help="Current run(s), the same forms as --baseline."),
         rules: Optional[Path] = typer.Option(None, "--rules", help="gate.toml (default: built-in rules)."),
         markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here."),
         junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
         shapes: Optional[Path] = typer.Option(None, help="File of '[phase/]role M N K' lines for "
                                               "capture files whose NVTX ranges carry no shapes."),
         store: Optional[Path] = StoreOpt,
         format: Format = typer.Option(Format.table, "--format")):
    """Gate current runs against baseline runs: exit 0 pass, 1 regression, 2 could not judge."""
    import json
    from profiler.errors import BadInput
    from profiler.gate_inputs import load_runs
    from reports.gate import RulesError, cannot_judge, load_rules, run_gate
    from reports.gate_output import render_table, to_junit, to_markdown

    error = None
    try:  # a run or rules file that cannot be read is still a verdict CI must see: exit 2, reports written
        from profiler.capture import parse_shapes_file
        rule_set = load_rules(rules) if rules else None
        shape_map = parse_shapes_file(shapes) if shapes else None
        result = run_gate(load_runs(baseline, "baseline", store_path(store), shape_map),
                          load_runs(current, "current", store_path(store), shape_map), rule_set)
    except (SmlensError, RulesError) as err:
        error = str(err)
        result = cannot_judge(error, baseline or [], current or [])
    for path, text in ((markdown, to_markdown), (junit, to_junit)):
        if path:
            try:
                Path(path).write_text(text(result), encoding="utf-8")
            except OSError as err:
                raise BadInput(f"cannot write {path}: {err.strerror or err}") from None
    if format == Format.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        from rich.console import Console
        Console().print(render_table(result))
    if error is not None:  # exit 2 whatever the cause: the gate's code for "could not judge"
        raise SmlensError(error, exit_code=2)
    raise typer.Exit(result.exit_code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
