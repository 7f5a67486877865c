"""What several commands share: the store a --store names, lines and reports to standard output,
the spinner on standard error while they work."""
from __future__ import annotations

import contextlib
import sys
from dataclasses import fields
from pathlib import Path
from typing import Mapping, Optional

from rich.console import Console

from profiler.errors import BadInput
from profiler.ingest.objectstore import is_url


def store_path(store: Optional[str]):
    """The store's folder, or its URL as given (a Path would fold s3:// into s3:/)."""
    if store and not all(c.isprintable() for c in store):  # e.g. SMLENS_STORE set from junk output
        raise BadInput(f"--store / SMLENS_STORE {store!r}: holds control characters; give a folder "
                       "or s3://bucket/prefix")
    return store if store and is_url(store) else Path(store or "smlens-store")


def working(text: str):
    """A spinner saying `text` on standard error while the block runs, where someone sees it: rich's
    Live draws nothing on a pipe or a file, and its modules and refresh thread cost `smlens views`
    piped 18 ms of nothing (BENCHMARKS.md)."""
    console = Console(stderr=True)
    return console.status(text) if console.is_terminal or console.is_jupyter else contextlib.nullcontext()


def say(text: str, err: bool = False) -> None:
    """One line to stdout (or stderr)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def print_report(text: str) -> int:
    """A report written to standard output as it is (`-o -`); returns its size in bytes."""
    data = text.encode("utf-8")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return len(data)


def write_text(path: Path, text: str) -> None:
    """A report file, or standard output for `-` (option_checks.is_stdout)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise BadInput(f"cannot write {path}: {err.strerror or err}") from None


def request_values(request_type, options: Mapping[str, object]) -> dict:
    """The command line's options (by parameter name) that a request dataclass has a field for:
    lists as tuples, and None (not given) left to the field's default. `given` is the caller's."""
    own = {f.name: f for f in fields(request_type) if f.name != "given"}
    return {k: _typed(own[k], v) for k, v in options.items() if k in own and v is not None}


def _typed(field, value):
    """A list as a tuple, a path as a Path: click's own parameters (ctx.params) hold a Path
    option as the string typer converts only for the command's function, in some typer versions."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, str) and "Path" in str(field.type):
        return Path(value)
    return value
