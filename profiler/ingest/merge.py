"""The raw-page exports of one profile's ncu runs -> one raw capture, to be ingested as one run.

`smlens profile` runs ncu more than once for one run (the cold prefill with caches flushed, the
rest without), with the same metrics and `--print-units base`, so the exports share their header
and units row. They are joined as text: that header and units row once, then every kernel row,
kernel IDs renumbered in run order so they stay unique. Values are not touched here: the capture
reader converts them, once, when the run is ingested. The text is split into rows, and the units
row found, by the capture readers' own code (capture_source.py), so the two cannot disagree about
what a row is.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Iterable

from profiler.errors import BadInput
from profiler.ingest.capture_source import find_header, open_binary, row_chunks

_LEADING_ID = re.compile(rb'^(\s*)"([\d,]+)",', re.MULTILINE)  # ncu may print 1000 as "1,000"


def merge_raw_exports(paths: Iterable[Path], out: Path) -> int:
    """Write the exports' kernel rows to `out` under their one header; return the kernel count.

    Empty files (a run that profiled nothing) are skipped; no file is written when all are.
    Exports whose header or units differ raise BadInput naming both files."""
    first: tuple[Path, list[str], dict] | None = None
    count, next_id = 0, 0
    with open(out, "wb") as handle:
        for path in map(Path, paths):
            if path.stat().st_size == 0:
                continue
            found: dict = {}
            base = next_id

            def renumber(match: re.Match) -> bytes:
                nonlocal next_id
                kernel_id = base + int(match.group(2).replace(b",", b""))
                next_id = max(next_id, kernel_id + 1)
                return b'%s"%d",' % (match.group(1), kernel_id)

            with open_binary(path) as stream:
                header, rest = find_header(stream, path)
                if header[0] != "ID":
                    raise BadInput(f"{path}: the ID column is not first, as ncu writes it")
                for block in row_chunks(stream, header, rest, found, filter_lines=False):
                    if first is None:
                        first = (path, header, found["units"])
                        units = [found["units"].get(name, "") for name in header]
                        handle.write(_csv_line(header) + _csv_line(units))
                    elif (header, found["units"]) != first[1:]:
                        raise BadInput(f"{path} and {first[0]}: the ncu exports of one run differ "
                                       "in their columns or units; ingest each on its own")
                    block, rows = _LEADING_ID.subn(renumber, block)
                    handle.write(block)
                    count += rows
    if first is None:
        out.unlink()
    return count


def _csv_line(cells: list[str]) -> bytes:
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(cells)
    return text.getvalue().encode("utf-8")
