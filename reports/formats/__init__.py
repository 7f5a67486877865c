"""The output formats, in one place: which each command offers (`--format`, imported by the
command line, so nothing heavy here), the per-kernel CSV, and the views' JSON document
(views_json.py). The terminal tables are reports/terminal.py and its neighbours; the gate's
table, Markdown and JUnit are reports/gate_output.py."""
from __future__ import annotations

from enum import Enum


class Format(str, Enum):
    """What most commands print: a table for people, JSON for scripts."""
    table = "table"
    json = "json"


class ViewsFormat(str, Enum):
    """`smlens views` also gives its per-kernel table as CSV (kernels_csv)."""
    table = "table"
    json = "json"
    csv = "csv"


def kernels_csv(result) -> str:
    """The per-kernel table (identity, figures, validations) as CSV; the NVTX stack joined by ' > '."""
    frame = result.kernels
    if "nvtx_stack" in frame.columns:
        frame = frame.assign(nvtx_stack=[_stack_text(s) for s in frame["nvtx_stack"]])
    return frame.to_csv(index=False)


def _stack_text(stack) -> str:
    """An NVTX stack (a list or an array of range names) joined; '' where a kernel has none (None,
    NaN). No numpy here: the command line imports this module for --format's choices."""
    return "" if isinstance(stack, str) or not hasattr(stack, "__len__") else " > ".join(stack)
