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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
