"""ncu output -> one kernels table (docs/SCHEMA.md): the one reader, which picks a format's reader.

Three formats, one reader module each, each a `read(path, classifier) -> Capture`:
- `--csv --page raw` (capture_raw.py): one row per kernel, one column per metric;
- `--csv --page details` (capture_details.py): one row per kernel and metric;
- `.ncu-rep` reports (capture_ncurep.py).
Any of them may be gzip-compressed (capture_source.py opens them all). A new format is a module
with that function and a line in READERS.
"""
from __future__ import annotations

from pathlib import Path

from profiler.ingest import capture_details, capture_ncurep, capture_raw
from profiler.ingest.capture_source import find_header, open_binary
from profiler.ingest.capture_table import Capture, Classifier

READERS = {"raw": capture_raw.read, "details": capture_details.read, "ncu-rep": capture_ncurep.read}


def sniff(path: Path) -> str:
    """Which format a capture is in (a key of READERS). A report keeps its `.ncu-rep` name (ncu
    writes it so; a CSV so named, or a report named .csv, is refused with a message saying so);
    a CSV is a details page when its header has the metric name and value columns."""
    name = path.name.lower()
    if name.endswith(".ncu-rep") or name.endswith(".ncu-rep.gz"):
        return "ncu-rep"
    with open_binary(path) as stream:
        header, _ = find_header(stream, path)
    return "details" if "Metric Name" in header and "Metric Value" in header else "raw"


def read_capture(path, shapes: dict | None = None, roles_from_order: bool = False) -> Capture:
    """Any ncu capture -> Capture with the kernels table of docs/SCHEMA.md.

    `shapes` maps "role" or "phase/role" to (M, N, K) for captures whose NVTX ranges carry none.
    `roles_from_order` gives CUDA-graph kernels the roles of an eager step (nvtx.EagerOrder).
    """
    path = Path(path)
    return READERS[sniff(path)](path, Classifier(shapes, roles_from_order))
