"""The application layer: one function per `smlens` command, called by profiler/cli.py and by
tests directly. The one joint that joins profiler, views and reports: it reads the store, asks the
views, hands their results to reports, writes the files and decides the exit codes; the CLI only
turns the command line into these calls.

Each module is imported when first used (`commands.store.ingest(...)`): pandas, pyarrow and torch
cost seconds that `smlens --help` and a mistyped option need not pay. This is the one lazy import.
"""
from __future__ import annotations

import importlib


def __getattr__(name: str):
    """`commands.<module>`: the module of this package, imported on first use (no list to keep)."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise  # a module of ours that fails to import its own imports: that error
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
