"""ncu output -> one kernels table (docs/SCHEMA.md).

Three inputs, one result:
- `--csv --page raw`, from a file or captured stdout: one row per kernel, one column per metric,
  a units row, thousands separators, and ncu's and the program's own lines before and among rows;
- `--csv --page details`: one row per kernel and metric;
- `.ncu-rep` reports: re-exported through `ncu --import` when ncu is on PATH, else read with the
  `ncu_report` package (PyPI `ncu-report`, needs neither ncu nor a GPU).
Any of them may be gzip-compressed.

Raw captures are converted in batches (`iter_raw_tables`) so that a 100,000-kernel capture streams
into Parquet without being held in memory whole; `read_capture` collects the batches for callers
that want a DataFrame.
"""
from __future__ import annotations

import csv
import io
import math
import re
import shutil
import subprocess
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from profiler.ingest import nvtx
from profiler.errors import BadInput
from profiler.ingest.units import to_base

# ncu's identity columns -> ours. Everything else in a raw capture is a metric.
IDENTITY_COLUMNS = {
    "ID": "kernel_id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host",
    "Kernel Name": "kernel_name",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Device": "device",
    "CC": "cc",
}
REQUIRED_COLUMNS = ("ID", "Kernel Name")
PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
START_STOP_PREFIX = "Id:Domain:Start/Stop_Range"
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
INT_IDENTITY = ("process_id", "device", "context", "stream")
DERIVED_COLUMNS = ("nvtx_stack", "phase", "role", "role_source", "kind", "block", "shape_m", "shape_n",
                   "shape_k", *nvtx.ATTENTION_KEYS.values(), "rank")
# False for a kernel ncu could not measure: every counter null (seen in a public H800 report: NaN
# for every metric of one kernel). The device's attributes are no measurement of the kernel.
MEASURED = "measured"
NOT_COUNTERS = ("device__attribute_",)

# The details page of ncu's sections names metrics for people; these are the ones the views read.
DISPLAY_NAME_METRICS = {
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    # the clocks the kernel ran at (SpeedOfLight's own metrics): base-locked clocks show here
    ("GPU Speed Of Light Throughput", "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    ("GPU Speed Of Light Throughput", "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    ("GPU Speed Of Light Throughput", "SM Active Cycles"): "sm__cycles_active.avg",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ("Memory Workload Analysis", "L2 Hit Rate"): "lts__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "Memory Throughput"): "dram__bytes.sum.per_second",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Block Size"): "launch__block_size",
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "# SMs"): "launch__sm_count",
    ("Launch Statistics", "Waves Per SM"): "launch__waves_per_multiprocessor",
    ("Launch Statistics", "Cluster Size"): "launch__cluster_size",
    ("Occupancy", "Block Limit Registers"): "launch__occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "launch__occupancy_limit_warps",
    ("Occupancy", "Block Limit SM"): "launch__occupancy_limit_blocks",
    ("Occupancy", "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    ("Occupancy", "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    ("Occupancy", "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    ("Compute Workload Analysis", "Issue Slots Busy"): "smsp__issue_active.avg.pct_of_peak_sustained_active",
}

# a number as ncu prints it: thousands separators allowed, never empty
_NUMBER = r"^[-+]?((\d{1,3}(,\d{3})+|\d+)(\.\d*)?|\.\d+)([eE][-+]?\d+)?$"
_NON_FINITE = r"^[-+]?(inf|infinity|nan)$"
_NO_VALUE = ("", "n/a", "N/A", "-")  # ncu's ways of printing "no value": null, no note
_GZIP_MAGIC = b"\x1f\x8b"
_NCU_REP_MAGIC = b"NVR\x00"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_NOT_UTF8 = "is not UTF-8 text (ncu writes UTF-8): re-encode it, e.g. iconv -f latin1 -t utf-8"
_ROW_START = re.compile(rb'^\s*"\d+",')
BLOCK_BYTES = 16 << 20
# Longer than any ncu line (a 10,000-metric header is under 1 MB) or cell (a long templated kernel
# name is some kB): beyond, the file is not a capture, and refusing early keeps memory bounded.
LINE_LIMIT_BYTES = 16 << 20
CELL_LIMIT_BYTES = 1 << 20
csv.field_size_limit(max(csv.field_size_limit(), LINE_LIMIT_BYTES))


@dataclass
class Capture:
    kernels: pd.DataFrame
    units: dict[str, str]
    source_format: str  # raw, details or ncu-rep
    notes: list[str] = field(default_factory=list)  # lines a user should see (noise skipped, ...)


# --- opening and sniffing ---------------------------------------------------------------------


def check_readable(path: Path) -> None:
    """A capture path that exists, is a file and can be opened, or BadInput saying which not."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a folder, not an ncu capture; give the capture file inside it")
    from profiler.option_checks import check_regular_file

    check_regular_file(path, str(path))
    try:
        open(path, "rb").close()
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror or err})") from None


class _Gunzip:
    """gzip members decompressed as a stream. Unlike the gzip module read through a buffer, data
    that ends before a member's end marker is an error, not a short file; output is produced a
    bounded amount at a time (a small file may expand a thousandfold)."""

    def __init__(self, raw):
        self.raw = raw
        self.member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.fed = False  # the current member has had input
        self.pending = b""  # compressed bytes not yet decompressed
        self.buffer = bytearray()
        self.ended = False

    def read(self, size: int = -1) -> bytes:
        while not self.ended and (size < 0 or len(self.buffer) < size):
            if not self.pending:
                self.pending = self.raw.read(1 << 20)
                if not self.pending:
                    if self.fed and not self.member.eof:
                        raise EOFError
                    self.ended = True
                    break
            if self.member.eof:  # the next member of a concatenated gzip file
                self.member, self.fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
            self.fed = True
            self.buffer += self.member.decompress(self.pending, max(size - len(self.buffer), 1 << 20))
            self.pending = self.member.unconsumed_tail or self.member.unused_data
        size = len(self.buffer) if size < 0 else min(size, len(self.buffer))
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def seek(self, offset: int) -> None:  # only back to the start, as open_binary does
        self.raw.seek(0)
        self.__init__(self.raw)

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.raw.close()


class _Source:
    """A capture's bytes, gzip undone, whose read errors become BadInput naming the file."""

    def __init__(self, handle, path: Path, compressed: bool):
        self.handle, self.path, self.compressed = handle, path, compressed

    def read(self, size: int = -1) -> bytes:
        try:
            return self.handle.read(size)
        except EOFError:
            raise BadInput(f"{self.path}: the gzip data is cut off (it ends before its end marker): "
                           "copy or export the capture again") from None
        except zlib.error as err:
            raise BadInput(f"{self.path}: the gzip data is damaged ({_first_line(err)}): copy or "
                           "export the capture again") from None
        except OSError as err:
            raise BadInput(f"{self.path}: cannot read it ({err.strerror or err})") from None

    def position(self, total: int) -> int:
        """Bytes of the file as stored that were read (gzip: the compressed position)."""
        try:
            return min(self.handle.tell(), total)
        except (AttributeError, OSError, ValueError):
            return total

    def close(self) -> None:
        self.handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_binary(path: Path) -> _Source:
    check_readable(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror or err})") from None
    source = _Source(handle, path, compressed=False)
    magic = source.read(2)
    if magic == _GZIP_MAGIC:
        handle.seek(0)
        source = _Source(_Gunzip(handle), path, compressed=True)
        magic = source.read(2)
    if magic in _UTF16_BOMS:  # e.g. a PowerShell redirect: transcode (such files are small)
        data = (magic + source.read()).decode("utf-16", errors="replace").encode("utf-8")
        source.close()
        return _Source(io.BytesIO(data), path, compressed=False)
    source.handle.seek(0)
    return source


def _is_ncu_rep(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".ncu-rep") or name.endswith(".ncu-rep.gz")


def _header_cells(line: bytes) -> list[str] | None:
    """The cells of an ncu CSV header line, or None if the line is not one."""
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    if '"ID"' not in text or not text.startswith('"'):
        return None
    cells = next(csv.reader([text]))
    return cells if "ID" in cells else None


# --- raw page ---------------------------------------------------------------------------------


def row_chunks(stream: "_Source", header: list[str], first_rest: bytes, found: dict,
                filter_lines: bool = True) -> Iterator[bytes]:
    """The data rows, in blocks of whole lines; the units row goes to found["units"].

    A data row starts with `"<ID>",` (ncu puts ID first; in a reordered file any quoted line may be
    one). With `filter_lines`, ncu's `==PROF==` lines and the program's own output are dropped
    wherever they fall and counted in found["noise"]; without it the caller's parser must skip them
    (the raw reader's does: their cells do not match the header, or their ID is no number). A last
    row without its line end is a capture cut off mid-row; a line longer than LINE_LIMIT_BYTES is
    no capture's.
    """
    id_index = header.index("ID")
    is_row = _ROW_START.match if id_index == 0 else (lambda line: line.lstrip().startswith(b'"'))
    found.setdefault("units", {})
    found.setdefault("noise", 0)
    pending, units_checked = first_rest, False
    while True:
        chunk = stream.read(BLOCK_BYTES)
        data = pending + chunk
        if chunk:
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > LINE_LIMIT_BYTES:
                    raise BadInput(f"{stream.path}: a line longer than {LINE_LIMIT_BYTES >> 20} MiB after the "
                                   "header: no ncu row is that long (not an ncu capture?)")
                pending = data
                continue
            block, pending = data[: cut + 1], data[cut + 1:]
        else:
            block, pending = data, b""
            tail = block[block.rfind(b"\n") + 1:]
            if tail.strip() and is_row(tail):
                raise BadInput(f"{stream.path}: the capture is cut off in the middle of a row (no line end "
                               "after the last row): copy or export it again")
            if tail.strip():
                block = block[: len(block) - len(tail)]
                found["noise"] += 1
        if not units_checked:
            block, units_checked = _take_units_row(block, header, id_index, found), True
        if not block or block.isspace():
            pass
        elif not filter_lines:
            yield block
        else:
            kept = []
            for line in block.split(b"\n"):
                if is_row(line):
                    kept.append(line.rstrip(b"\r"))
                elif line.strip():
                    found["noise"] += 1
            if kept:
                yield b"\n".join(kept) + b"\n"
        if not chunk:
            return


def _take_units_row(block: bytes, header: list[str], id_index: int, found: dict) -> bytes:
    """Remove the units row (the first quoted line, its ID cell empty) from the first block."""
    start = 0
    while start < len(block):
        end = block.find(b"\n", start)
        end = len(block) if end < 0 else end
        line = block[start:end]
        if line.startswith(b'"'):
            cells = next(csv.reader([line.decode("utf-8", "replace")]))
            if len(cells) > id_index and cells[id_index] == "":
                found["units"] = dict(zip(header, cells))
                return block[:start] + block[end + 1:]
            return block
        start = end + 1
    return block


def _unique_names(names: list[str], notes: list | None = None) -> list[str]:
    """The header's names, a repeated one numbered (`X#1`); a note names the repeated ones."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 0
        out.append(name)
    repeated = [name for name, copies in seen.items() if copies]
    if repeated and notes is not None:
        notes.append(f"the header names {len(repeated)} column(s) more than once ("
                     + ", ".join(repeated[:4]) + (" ..." if len(repeated) > 4 else "")
                     + f"): the later copies are stored as {repeated[0]}#1 and so on")
    return out


@dataclass
class _CellCounts:
    """What a column's text cells held."""

    numbers: int = 0  # finite numbers
    text: int = 0  # neither a number nor one of ncu's no-value spellings
    non_finite: int = 0  # inf, nan, or a number beyond float64 (1e400)
    example: str | None = None  # the first text cell

    @property
    def numeric(self) -> bool:
        """A numeric column: numbers are the majority of its filled cells."""
        filled = self.numbers + self.non_finite
        return filled > 0 and filled >= self.text


def _count(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _classify_cells(array: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Text cells -> (float64 values, null unless a finite number ("18,720" too); which cells are
    text, neither a number nor a no-value spelling; which hold a value that is not finite)."""
    text = pc.utf8_trim_whitespace(array.cast(pa.string()))
    no_value = pc.or_kleene(pc.is_null(text), pc.fill_null(pc.is_in(text, pa.array(_NO_VALUE)), False))
    number = pc.fill_null(pc.match_substring_regex(text, _NUMBER), False)
    spelled = pc.fill_null(pc.match_substring_regex(text, _NON_FINITE, ignore_case=True), False)
    values = pc.cast(pc.if_else(number, pc.replace_substring(text, ",", ""),
                                pa.scalar(None, pa.string())), pa.float64())
    overflow = pc.fill_null(pc.invert(pc.is_finite(values)), False)  # 1e400
    values = pc.if_else(overflow, pa.scalar(None, pa.float64()), values)
    is_text = pc.invert(pc.or_(pc.or_(no_value, number), spelled))
    return values, is_text, pc.or_(spelled, overflow)


def _parse_numbers(array: pa.Array) -> tuple[pa.Array, _CellCounts]:
    """float64 from text cells, and what the cells held (see _classify_cells)."""
    values, is_text, non_finite = _classify_cells(array)
    counts = _CellCounts(numbers=len(values) - values.null_count, text=_count(is_text),
                         non_finite=_count(non_finite))
    if counts.text:
        counts.example = pc.filter(pc.utf8_trim_whitespace(array.cast(pa.string())), is_text)[0].as_py()
    return values, counts


def _finite(values: pa.Array) -> tuple[pa.Array, int]:
    """Non-finite values (inf, nan) made null, and how many there were."""
    bad = pc.fill_null(pc.invert(pc.is_finite(values)), False)
    count = _count(bad)
    return (pc.if_else(bad, pa.scalar(None, pa.float64()), values) if count else values), count


def _cell_notes(unreadable: Counter, examples: dict, non_finite: Counter) -> list[str]:
    """One note per kind of unreadable cell, with a count per column."""
    def per_column(counts: Counter, shown_examples: dict, shown: int = 6) -> str:
        parts = [f"{name} {count}" + (f" (e.g. {shown_examples[name][:24]!r})"
                                      if name in shown_examples else "")
                 for name, count in counts.most_common(shown)]
        more = len(counts) - shown
        return ", ".join(parts) + (f" and {more} more column(s)" if more > 0 else "")

    notes = []
    if unreadable:
        notes.append("cells that are not numbers in numeric columns, stored as null: "
                     + per_column(unreadable, examples))
    if non_finite:
        notes.append("values that are not finite (inf, nan, beyond float64), stored as null: "
                     + per_column(non_finite, {}))
    return notes


def _ints(values) -> pd.Series:
    """Integers from text cells ("1,056" too); anything else is <NA>."""
    index = values.index if isinstance(values, pd.Series) else None
    if index is not None:
        values = pa.array(values.astype("string").to_numpy(na_value=None), pa.string())
    text = pc.utf8_trim_whitespace(pc.replace_substring(values.cast(pa.string()), ",", ""))
    whole = pc.fill_null(pc.match_substring_regex(text, r"^[-+]?\d{1,18}$"), False)
    numbers = pc.cast(pc.if_else(whole, text, pa.scalar(None, pa.string())), pa.int64())
    return pd.Series(numbers.to_pandas().to_numpy(), dtype="Int64", index=index)


def _xyz(values, prefix: str) -> pd.DataFrame:
    """"(256, 1, 1)" -> prefix_x, prefix_y, prefix_z and their product."""
    parts = pc.extract_regex(pc.fill_null(values.cast(pa.string()), ""),
                             r"\(\s*(?P<x>\d+)\s*,\s*(?P<y>\d+)\s*,\s*(?P<z>\d+)\s*\)")
    out = pd.DataFrame({f"{prefix}_{axis}": _ints(pc.struct_field(parts, axis)) for axis in "xyz"})
    total_name = "block_threads" if prefix == "block" else "grid_blocks"
    out[total_name] = out[f"{prefix}_x"] * out[f"{prefix}_y"] * out[f"{prefix}_z"]
    return out


class Classifier:
    """NVTX stack + kernel name -> derived columns, carried across batches (cold/warm prefill
    depends on what came before)."""

    def __init__(self, shapes: dict | None = None, roles_from_order: bool = False):
        self.shapes = shapes or {}
        self._cache: dict = {}
        self._prefill = nvtx.PrefillOrder()
        self._eager = nvtx.EagerOrder() if roles_from_order else None
        self._rank_of_process: dict = {}  # a process's rank, once one of its kernels named it

    def _one(self, cell: str, kernel_name: str) -> tuple:
        key = (cell, kernel_name)
        if key not in self._cache:
            stack = nvtx.parse_stack(cell)
            self._cache[key] = (stack, nvtx.classify(stack, kernel_name))
        return self._cache[key]

    def derive(self, cells: pd.Series, names: pd.Series, processes: pd.Series) -> pd.DataFrame:
        pairs = [self._one(c, n) for c, n in zip(cells.fillna("").tolist(), names.fillna("").tolist())]
        derived = pd.DataFrame([info for _, info in pairs], index=cells.index,
                               columns=list(DERIVED_COLUMNS[1:]))
        derived.insert(0, "nvtx_stack", [stack for stack, _ in pairs])
        derived["phase"] = self._prefill.assign(list(derived["phase"]), list(processes))
        derived["rank"] = self._ranks(list(derived["rank"]), list(processes))
        if self._eager is not None:
            derived = self._roles_from_order(derived, names, processes)
        for column in ("shape_m", "shape_n", "shape_k", *nvtx.ATTENTION_KEYS.values(), "rank"):
            derived[column] = derived[column].astype("Int64")
        derived["block"] = derived["block"].astype("string")  # a block of kernels may all lack one
        return self._apply_shapes(derived)

    def _ranks(self, ranks: list, processes: list) -> list:
        """A kernel launched outside its process's `rank=` range (before it opened) takes the
        rank that process's other kernels name."""
        ranks = [None if pd.isna(rank) else int(rank) for rank in ranks]
        for rank, process in zip(ranks, processes):
            if rank is not None and not pd.isna(process):
                self._rank_of_process.setdefault(process, rank)
        return [rank if rank is not None or pd.isna(process) else self._rank_of_process.get(process)
                for rank, process in zip(ranks, processes)]

    def _roles_from_order(self, derived: pd.DataFrame, names: pd.Series, processes: pd.Series
                          ) -> pd.DataFrame:
        rows = derived.assign(stack=derived["nvtx_stack"], kernel_name=names.fillna("").tolist(),
                              process=processes.tolist()).to_dict("records")
        assigned = pd.DataFrame(self._eager.assign(rows), index=derived.index)
        return assigned[list(DERIVED_COLUMNS)]

    def _apply_shapes(self, derived: pd.DataFrame) -> pd.DataFrame:
        """Fill shapes the NVTX messages lack from a `--shapes` mapping: "phase/role" or "role"."""
        if not self.shapes:
            return derived
        for index in derived.index[derived["shape_m"].isna()]:
            phase, role = derived.at[index, "phase"], derived.at[index, "role"]
            shape = self.shapes.get(f"{phase}/{role}") or self.shapes.get(role)
            if phase.endswith("prefill") and shape is None:
                shape = self.shapes.get(f"prefill/{role}")
            if shape:
                for column, value in zip(("shape_m", "shape_n", "shape_k"), shape):
                    derived.at[index, column] = value
        return derived


# Demanglers differ: ncu_report's and older ncu CSV exports write template integer arguments with
# their casts ("(int)128", "(bool)1") and PyTorch's kernels in `at::native::`; ncu 2025.3's CSV
# export writes "128", "1" and `at::`. Names are stored in the short form, so a kernel keeps one
# name however its capture was exported or read (a gate of a capture against its own .ncu-rep
# found 6 kernels both added and removed).
_INTEGER_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|bool|char|short|long|long long)\)(?=-?\d)")


def common_kernel_name(name: str) -> str:
    """A demangled kernel name in the one form the store keeps."""
    return _INTEGER_CAST.sub("", name).replace("at::native::", "at::")


def _identity_frame(table: pa.Table, classifier: Classifier) -> pd.DataFrame:
    """Identity and derived columns from the identity cells of a block (strings)."""
    present = set(table.column_names)
    frame = pd.DataFrame({"kernel_id": _ints(table.column("ID"))})  # callers drop <NA> IDs
    for source, target in IDENTITY_COLUMNS.items():
        if source == "ID" or source not in present:
            continue
        column = table.column(source)
        if target in INT_IDENTITY:
            frame[target] = _ints(column)
        elif target in ("block_size", "grid_size"):
            frame = frame.join(_xyz(column, target.split("_")[0]))
        else:
            frame[target] = pd.Series(column.to_pandas(), dtype="string")
    if "kernel_name" in frame:  # one regex per distinct name, not per launch
        distinct = frame["kernel_name"].dropna().unique()
        common = {name: common_kernel_name(name) for name in distinct}
        frame["kernel_name"] = frame["kernel_name"].map(common).astype("string")
    push_pop = next((c for c in table.column_names if c.startswith(PUSH_POP_PREFIX)), None)
    blank = pd.Series([""] * len(frame), index=frame.index)
    cells = pd.Series(table.column(push_pop).to_pandas(), index=frame.index) if push_pop else blank
    processes = frame["process_id"] if "process_id" in frame else blank
    names = frame["kernel_name"] if "kernel_name" in frame else blank
    return frame.join(classifier.derive(cells, names, processes))


def find_header(stream, path: Path) -> tuple[list[str], bytes]:
    """Read up to the header row; return its cells and the bytes after it. Each line is looked at
    once, and no more than 64 MB are read before giving up."""
    pending, scanned = b"", 0
    while True:
        chunk = stream.read(1 << 20)
        if not chunk and not scanned:
            raise BadInput(f"{path}: the file is empty")
        if b"\0" in chunk[:65536]:
            raise BadInput(f"{path}: binary data, not an ncu CSV (for a .ncu-rep report keep its "
                           "'.ncu-rep' name)")
        scanned += len(chunk)
        data = pending + chunk
        lines = data.split(b"\n")
        pending = lines.pop() if chunk else b""
        offset = 0
        for line in lines:
            offset += len(line) + 1
            cells = _header_cells(line)
            if cells is not None:
                missing = [c for c in REQUIRED_COLUMNS if c not in cells]
                if missing:
                    raise BadInput(f"{path}: the header lacks {', '.join(missing)}: not an ncu "
                                   "--csv capture")
                return cells, data[offset:]
        if not chunk or scanned > (64 << 20) or len(pending) > LINE_LIMIT_BYTES:
            raise BadInput(f"{path}: no ncu CSV header (a row starting \"ID\",\"Process ID\",...) "
                           "found: export with `ncu --csv --page raw` or `--page details`")


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0][:160]


def iter_raw_tables(path: Path, shapes: dict | None = None, notes: list | None = None,
                    on_progress: Callable[[int, int], None] | None = None,
                    roles_from_order: bool = False, classifier: "Classifier | None" = None
                    ) -> Iterator[tuple[pa.Table, dict[str, str]]]:
    """Blocks of the kernels table as Arrow tables, with the metric units, from a raw capture.

    `on_progress(bytes_read, file_bytes)` is called after each block (bytes of the file as
    stored, so a gzip capture reports its compressed position)."""
    notes = notes if notes is not None else []
    found: dict = {}
    total = path.stat().st_size if path.exists() else 0
    with open_binary(path) as stream:
        header, rest = find_header(stream, path)
        converter = _RawConverter(header, classifier or Classifier(shapes, roles_from_order), path)
        rows, unshaped = 0, 0
        for block in row_chunks(stream, header, rest, found, filter_lines=False):
            table = converter.convert(block, found["units"])
            rows += table.num_rows
            unshaped += _unshaped_gemms(table)
            if on_progress is not None:
                on_progress(stream.position(total), total)
            yield table, converter.units
    noise = found.get("noise", 0) + converter.noise_lines
    if noise:
        notes.append(f"skipped {noise} line(s) of program or ncu output among the rows")
    if converter.damaged_rows:
        notes.append(f"dropped {converter.damaged_rows} damaged kernel row(s): cells that do not "
                     "match the header, or no kernel ID (the file was edited or cut?)")
    notes.extend(converter.notes)
    notes.extend(_cell_notes(converter.unreadable, converter.examples, converter.non_finite))
    unknown = sorted(converter.said_na - converter.valued)
    if unknown and rows:
        notes.append(f"ncu gave n/a for every kernel in {len(unknown)} metric(s), which this GPU or ncu "
                     f"lacks (views that need them say n/a): {', '.join(unknown[:8])}"
                     + (" ..." if len(unknown) > 8 else ""))
    if rows == 0 and converter.damaged_rows:
        raise BadInput(f"{path}: none of its {converter.damaged_rows} row(s) matches the header "
                       "(damaged rows: cells missing or an ID that is no number)")
    if rows == 0:
        raise BadInput(f"{path}: the capture has a header but no kernel rows")
    if unshaped:
        notes.append(_shape_note(unshaped))


class _RawConverter:
    """CSV blocks of a raw capture -> Arrow tables of one schema, one Arrow parse per block.

    Arrow parses most metric columns as numbers natively. Its parser knows no thousands
    separators, so a column holding "18,720" arrives as text and is converted here (separators
    removed, then cast). The first block decides each column's type: number, number with
    separators, or text. A later block that breaks that (a separator where none was, text in a
    numeric column) is read again as strings and converted column by column. A column is numeric
    when numbers are the majority of its filled cells; its other cells, and values that are not
    finite, become null and are counted per column for the notes.
    """

    _NULLS = list(_NO_VALUE)  # not "nan": a NaN is read, then counted as not finite

    def __init__(self, header: list[str], classifier: Classifier, path: Path):
        self.notes: list[str] = []
        self.names = _unique_names(header, self.notes)
        self.path = path
        self.is_row = _ROW_START.match if header.index("ID") == 0 else \
            (lambda line: line.lstrip().startswith(b'"'))
        self.identity = [n for n in self.names
                         if n in IDENTITY_COLUMNS or n.startswith((PUSH_POP_PREFIX, START_STOP_PREFIX))]
        self.metrics = [n for n in self.names if n not in self.identity]
        self.types: dict[str, pa.DataType] | None = None  # how each column is read, from block 1
        self.numeric: set[str] = set()  # metric columns stored as float64
        self.units: dict[str, str] = {}
        self.classifier = classifier
        self.noise_lines = 0  # lines that are no kernel row (a program's output)
        self.damaged_rows = 0  # lines that start like a kernel row but do not parse as one
        self.unreadable: Counter = Counter()  # numeric column -> cells that are no number
        self.examples: dict[str, str] = {}  # numeric column -> its first such cell
        self.non_finite: Counter = Counter()  # numeric column -> inf / nan values
        self.valued: set[str] = set()  # numeric metrics with a value for at least one kernel
        self.said_na: set[str] = set()  # metrics ncu printed as "n/a" in the first row (unknown to it)

    def _read(self, data: bytes, types: dict) -> pa.Table:
        skipped = Counter()

        def skip(row) -> str:  # a line whose cells do not match the header
            skipped["row" if self.is_row((row.text or "").encode(errors="replace")) else "noise"] += 1
            return "skip"

        try:
            table = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(column_names=self.names,
                                               block_size=max(BLOCK_BYTES, len(data) + 1)),
                parse_options=pacsv.ParseOptions(newlines_in_values=False, invalid_row_handler=skip),
                convert_options=pacsv.ConvertOptions(
                    column_types=types, null_values=self._NULLS,
                    strings_can_be_null=True, quoted_strings_can_be_null=True))
        except pa.ArrowInvalid as err:
            if "UTF8" in str(err):
                raise BadInput(f"{self.path} {_NOT_UTF8}") from None
            if "CSV parse error" in str(err):  # beyond a skippable row: quotes that do not pair up
                raise BadInput(f"{self.path}: rows that do not parse as CSV ({_first_line(err)[:100]})") from None
            raise  # a cell that breaks the column types: the caller reads the block as text
        self.noise_lines += skipped["noise"]
        self.damaged_rows += skipped["row"]
        self._check_cell_sizes(table)
        return table

    def _check_cell_sizes(self, table: pa.Table) -> None:
        for name, column in zip(table.column_names, table.columns):
            if pa.types.is_string(column.type) and len(column):
                longest = pc.max(pc.binary_length(column)).as_py() or 0
                if longest > CELL_LIMIT_BYTES:
                    raise BadInput(f"{self.path}: a cell of {name!r} holds {longest:,} bytes, more than "
                                   f"any ncu cell ({CELL_LIMIT_BYTES >> 20} MiB): not an ncu capture?")

    def _numbers(self, table: pa.Table) -> dict[str, pa.Array]:
        """float64 for every numeric metric column of a block read with self.types; cells that
        are no number and values that are not finite are null, and counted."""
        out = {}
        for name in self.numeric:
            column = table.column(name).combine_chunks()
            if pa.types.is_string(column.type):
                try:  # thousands separators, the fast way
                    column = pc.cast(pc.replace_substring(column, ",", ""), pa.float64())
                except pa.ArrowInvalid:
                    column, counts = _parse_numbers(column)
                    self.unreadable[name] += counts.text
                    self.non_finite[name] += counts.non_finite
                    if counts.example is not None:
                        self.examples.setdefault(name, counts.example)
            values, bad = _finite(column.cast(pa.float64()))
            self.non_finite[name] += bad
            out[name] = values
        self.unreadable += Counter()  # drop zero counts
        self.non_finite += Counter()
        return out

    def _decide_types(self, block: bytes) -> pa.Table:
        table = self._read(block, {n: pa.string() for n in self.identity})  # Arrow infers metrics
        first_row = next(csv.reader([block[: block.find(b"\n")].decode("utf-8", "replace")]), [])
        self.said_na = {n for n, cell in zip(self.names, first_row) if cell.strip().lower() == "n/a"}
        self.types = {n: pa.string() for n in self.identity}
        for name in self.metrics:
            column = table.column(name)
            kind = column.type
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # Arrow's type for bad UTF-8
                raise BadInput(f"{self.path} {_NOT_UTF8}")
            if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind):
                self.types[name] = pa.float64()
                self.numeric.add(name)
            else:
                self.types[name] = pa.string()
                if _parse_numbers(column.cast(pa.string()).combine_chunks())[1].numeric:
                    self.numeric.add(name)  # numbers with thousands separators, or a bad cell
        return table.cast(pa.schema([pa.field(n, self.types[n]) for n in self.names]))

    def convert(self, block: bytes, unit_row: dict) -> pa.Table:
        try:  # here rather than in Arrow, whose row handler cannot show a row that is not UTF-8
            block.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{self.path} {_NOT_UTF8}") from None
        if self.types is None:
            table = self._decide_types(block)
        else:
            try:
                table = self._read(block, self.types)
            except pa.ArrowInvalid:  # this block breaks block 1's types: strings, column by column
                try:
                    table = self._read(block, {n: pa.string() for n in self.names})
                except pa.ArrowInvalid as err:
                    raise BadInput(f"{self.path}: rows that do not parse as CSV ({_first_line(err)})") from None
        numbers = self._numbers(table)
        identity = _identity_frame(table.select(self.identity), self.classifier)
        valid = identity["kernel_id"].notna()
        if not valid.all():  # a row whose ID is no number
            self.damaged_rows += int((~valid).sum())
            mask = pa.array(valid.to_numpy())
            identity, table = identity[valid], table.filter(mask)
            numbers = {n: pc.filter(v, mask) for n, v in numbers.items()}
        out = pa.Table.from_pandas(identity.astype({"kernel_id": "int64"}), preserve_index=False)
        columns = list(out.columns)
        for name in self.metrics:
            base_unit, factor = to_base(unit_row.get(name, ""))
            if name in self.numeric:
                values = numbers[name]
                values = pc.multiply(values, factor) if factor != 1.0 else values
                self.units.setdefault(name, base_unit)
                if values.null_count < len(values):
                    self.valued.add(name)
            else:
                values = table.column(name).cast(pa.string())
                self.units.setdefault(name, unit_row.get(name, ""))
            columns.append(values)
        counters = [numbers[n] for n in self.metrics if n in self.numeric and not n.startswith(NOT_COUNTERS)]
        columns.append(_any_valid(counters, table.num_rows))
        # one table at the end: appending column by column copies the table each time
        return pa.Table.from_arrays(columns, names=out.column_names + self.metrics + [MEASURED]
                                    ).replace_schema_metadata(out.schema.metadata)  # pandas dtypes


# --- details page ------------------------------------------------------------------------------


def _read_details(path: Path, classifier: Classifier, notes: list) -> tuple[pd.DataFrame, dict]:
    found: dict = {}
    with open_binary(path) as stream:
        header, rest = find_header(stream, path)
        rows = b"".join(row_chunks(stream, header, rest, found))
    if not rows:
        raise BadInput(f"{path}: the capture has a header but no kernel rows")
    repeated = [c for c in DETAILS_COLUMNS if header.count(c) > 1]
    if repeated:  # which copy holds the values is unknown (a damaged header: units read as values)
        raise BadInput(f"{path}: the details page's header names {repeated[0]!r} {header.count(repeated[0])} "
                       "times; export it again with ncu --csv --page details")
    # pandas, not pyarrow: rows without rule results end early (ragged rows)
    try:
        frame = pd.read_csv(io.BytesIO(rows), dtype=str, keep_default_na=False,
                            names=_unique_names(header, notes), header=None)
    except UnicodeDecodeError:
        raise BadInput(f"{path} {_NOT_UTF8}") from None
    except (pd.errors.ParserError, ValueError) as err:
        raise BadInput(f"{path}: a row does not match the header ({_first_line(err)})") from None
    if found["noise"]:
        notes.append(f"skipped {found['noise']} line(s) of program or ncu output among the rows")
    for optional in ("Section Name", "Metric Unit"):  # without them values are taken as printed
        if optional not in frame:
            frame[optional] = ""
    frame = frame[frame["Metric Name"].str.len() > 0]  # rule rows carry no metric
    has_id = _ints(frame["ID"]).notna()
    if not has_id.all():
        notes.append(f"dropped {int((~has_id).sum())} damaged row(s) with no kernel ID")
        frame = frame[has_id]
    if frame.empty:
        raise BadInput(f"{path}: no kernel rows with metrics in the details page")
    first = frame.drop_duplicates("ID")
    identity_table = pa.Table.from_pandas(first[[c for c in first.columns if c not in DETAILS_COLUMNS
                                                 and not c.startswith("Rule")
                                                 and not c.startswith("Estimated")]],
                                          preserve_index=False)
    kernels = _identity_frame(identity_table, classifier).astype({"kernel_id": "int64"})
    kernels = kernels.set_index("kernel_id")

    section, metric = frame["Section Name"], frame["Metric Name"]
    mapped = [DISPLAY_NAME_METRICS.get((s, m)) for s, m in zip(section, metric)]
    command_line = section.eq("Command line profiler metrics") | metric.str.contains("__", regex=False)
    frame = frame.assign(column=[
        m if cl else (mp or f"{s}: {m}")
        for s, m, cl, mp in zip(section, metric, command_line, mapped)])
    bases = {unit: to_base(unit) for unit in frame["Metric Unit"].unique()}
    scale = frame["Metric Unit"].map(lambda u: bases[u][1])
    base_unit = frame["Metric Unit"].map(lambda u: bases[u][0])
    values, is_text, non_finite = _classify_cells(pa.array(frame["Metric Value"].tolist(), pa.string()))
    frame = frame.assign(number=values.to_numpy(zero_copy_only=False) * scale.to_numpy(),
                         is_text=is_text.to_numpy(zero_copy_only=False),
                         non_finite=non_finite.to_numpy(zero_copy_only=False), base_unit=base_unit)
    units: dict[str, str] = {}
    columns = {}
    unreadable, examples, not_finite = Counter(), {}, Counter()
    for name, group in frame.groupby("column", sort=False, observed=True):
        ids = _ints(group["ID"]).astype("int64")
        counts = _CellCounts(numbers=int(group["number"].notna().sum()), text=int(group["is_text"].sum()),
                             non_finite=int(group["non_finite"].sum()))
        if counts.numeric:
            columns[name] = pd.Series(group["number"].to_numpy(), index=ids)
            units[name] = group["base_unit"].iloc[0]
            if counts.text:
                unreadable[name] = counts.text
                examples[name] = group.loc[group["is_text"], "Metric Value"].iloc[0]
            if counts.non_finite:
                not_finite[name] = counts.non_finite
        else:
            columns[name] = pd.Series(group["Metric Value"].to_numpy(), index=ids)
            units[name] = group["Metric Unit"].iloc[0]
    notes.extend(_cell_notes(unreadable, examples, not_finite))
    metrics = pd.DataFrame({k: v[~v.index.duplicated()] for k, v in columns.items()})
    kernels = kernels.join(metrics).reset_index()
    kernels[MEASURED] = _measured(kernels, list(metrics.columns))
    return kernels, units


# --- .ncu-rep ------------------------------------------------------------------------------------



def _read_ncu_rep(path: Path, classifier: Classifier, notes: list) -> Capture:
    with tempfile.TemporaryDirectory(prefix="smlens-") as tmpdir:
        report = path
        with open_binary(path) as stream:
            head = stream.read(4)
            if head != _NCU_REP_MAGIC:
                raise BadInput(f"{path}: not an Nsight Compute report (it does not start as one does); "
                               "a CSV capture needs a name ending in .csv")
            if stream.compressed:
                report = Path(tmpdir) / "report.ncu-rep"
                with open(report, "wb") as out:
                    out.write(head)
                    shutil.copyfileobj(stream, out)
        ncu = shutil.which("ncu")
        if ncu:
            raw = Path(tmpdir) / "raw.csv"
            with open(raw, "wb") as out:
                done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw"],
                                      stdout=out, stderr=subprocess.PIPE)
            if done.returncode != 0:
                raise BadInput(f"{path}: ncu could not import the report: "
                               f"{done.stderr.decode(errors='replace').strip()[-200:]}")
            capture = _read_raw(raw, classifier, notes)
            capture.source_format = "ncu-rep"
            return capture
        return _read_ncu_rep_module(report, path, classifier, notes)


def _read_ncu_rep_module(report: Path, shown: Path, classifier: Classifier, notes: list) -> Capture:
    try:
        import ncu_report
    except ImportError:
        raise BadInput(f"{shown}: reading a .ncu-rep needs ncu on PATH or the ncu-report package "
                       "(pip install ncu-report)") from None
    try:
        context = ncu_report.load_report(str(report))
    except Exception as err:  # the module raises plain exceptions for unreadable files
        raise BadInput(f"{shown}: not a readable .ncu-rep report ({_first_line(err)})") from None
    rows, units, non_finite = [], {}, Counter()
    kernel_id = 0
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            row = {"ID": str(kernel_id), "Kernel Name": action.name(action.NameBase_DEMANGLED)}
            kernel_id += 1
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                value = metric.value()
                if isinstance(value, (int, float)):
                    base_unit, factor = to_base(metric.unit())
                    row[name] = float(value) * factor
                    if not math.isfinite(row[name]):
                        row[name] = None
                        non_finite[name] += 1
                    units.setdefault(name, base_unit)
                else:
                    row[name] = value
                    units.setdefault(name, metric.unit())
            row[PUSH_POP_PREFIX] = _nvtx_cell(action)
            rows.append(row)
    if not rows:
        raise BadInput(f"{shown}: the report holds no kernels")
    notes.extend(_cell_notes(Counter(), {}, non_finite))
    frame = pd.DataFrame(rows)
    # a metric ncu could not read is NaN for that kernel (seen in a public H800 report): its
    # identity cell stays empty, as in a CSV export
    for column, source in (("Block Size", "launch__block_dim_"), ("Grid Size", "launch__grid_dim_")):
        if all(f"{source}{d}" in frame for d in "xyz"):
            frame[column] = [_dims_text(dims) for dims in zip(*(frame[f"{source}{d}"] for d in "xyz"))]
    for column, source in (("Device", "launch__device_id"), ("Stream", "launch__stream_id"),
                           ("Context", "launch__context_id")):
        if source in frame:
            frame[column] = frame[source].astype("Int64").astype("string")
    if "device__attribute_compute_capability_major" in frame:
        frame["CC"] = [_dims_text(cc, ".", "{}") for cc in zip(
            frame["device__attribute_compute_capability_major"],
            frame["device__attribute_compute_capability_minor"])]
    identity = pa.Table.from_pandas(
        frame[[c for c in frame.columns if c in IDENTITY_COLUMNS or c == PUSH_POP_PREFIX]].astype("string"),
        preserve_index=False)
    kernels = _identity_frame(identity, classifier).astype({"kernel_id": "int64"})
    metrics = frame[[c for c in frame.columns if c not in IDENTITY_COLUMNS and c != PUSH_POP_PREFIX]]
    kernels = pd.concat([kernels, metrics.reset_index(drop=True)], axis=1)
    kernels[MEASURED] = _measured(kernels, list(metrics.columns))
    return Capture(kernels, units, "ncu-rep", notes=notes)


def _any_valid(arrays: list, rows: int) -> pa.Array:
    """Per row: does any of these float columns hold a value (MEASURED)?"""
    valid = pa.array([False] * rows, pa.bool_())
    for values in arrays:
        valid = pc.or_(valid, pc.is_valid(values))
    return valid


def _measured(kernels: pd.DataFrame, metrics: list[str]) -> pd.Series:
    """MEASURED for a table read whole: any numeric counter holds a value."""
    counters = [n for n in metrics if not n.startswith(NOT_COUNTERS)
                and pd.api.types.is_float_dtype(kernels[n].dtype)]
    return kernels[counters].notna().any(axis=1) if counters else pd.Series(False, index=kernels.index)


def _dims_text(values, separator: str = ", ", form: str = "({})") -> str | None:
    """(256, 1, 1) from numbers; None when ncu could not read one of them (NaN, or not a number)."""
    try:
        whole = [int(v) for v in values if math.isfinite(float(v))]
    except (TypeError, ValueError):
        return None
    return form.format(separator.join(str(v) for v in whole)) if len(whole) == len(values) else None


def _nvtx_cell(action) -> str:
    """The push/pop stack of an action in the raw page's cell format, so one parser serves both."""
    state = action.nvtx_state()
    if state is None:
        return ""
    entries = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        for message in domain.push_pop_ranges():
            entries.append(f'"{domain.name()}:{message}:none:none:none:none:none:none"')
    return ("0  " + "  ".join(entries)) if entries else ""


# --- what the capture says of the run as a whole ---------------------------------------------------


class RunFacts:
    """The run-level facts of a capture, gathered block by block (a raw capture streams): the
    devices it names, the kernels ncu could not measure, the replay passes per kernel. Stored with
    the run (`_run.json` "capture", the runs table's `capture`); docs/SCHEMA.md."""

    SHOWN_IDS = 20  # kernel IDs listed; the count is whole

    def __init__(self):
        self.devices: set[int] = set()
        self.unmeasured: list[int] = []
        self.unmeasured_count = 0
        self.passes: list[float] = []

    def add(self, table: pa.Table) -> None:
        names = table.column_names
        measured = (table.column(MEASURED).to_numpy(zero_copy_only=False) if MEASURED in names
                    else [True] * table.num_rows)
        if "device" in names:  # an unmeasured kernel's Device cell is empty: it names no GPU
            self.devices |= {int(d) for d in table.column("device").to_pylist() if d is not None}
        ids = table.column("kernel_id").to_pylist()
        lost = [i for i, m in zip(ids, measured) if not m]
        self.unmeasured_count += len(lost)
        self.unmeasured += lost[: self.SHOWN_IDS - len(self.unmeasured)]
        if "profiler__replayer_passes" in names:
            self.passes += [v for v in table.column("profiler__replayer_passes").to_pylist()
                            if isinstance(v, float) and math.isfinite(v)]

    def result(self) -> dict:
        passes = sorted(self.passes)
        return {"devices": sorted(self.devices), "device_count": len(self.devices),
                "unmeasured_kernels": self.unmeasured_count, "unmeasured_kernel_ids": self.unmeasured,
                # ncu replays a kernel once per pass group; the median says how the run was taken
                "replay_passes": passes[len(passes) // 2] if passes else None}


# --- the one entry point -------------------------------------------------------------------------


def sniff(path: Path) -> str:
    """raw, details or ncu-rep."""
    if _is_ncu_rep(path):
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
    notes: list[str] = []
    classifier = Classifier(shapes, roles_from_order)
    kind = sniff(path)
    if kind == "ncu-rep":
        capture = _read_ncu_rep(path, classifier, notes)
    elif kind == "details":
        kernels, units = _read_details(path, classifier, notes)
        capture = Capture(kernels, units, "details", notes=notes)
    else:
        return _read_raw(path, classifier, notes)  # iter_raw_tables notes missing shapes itself
    kernels = capture.kernels
    if {"kind", "shape_m"} <= set(kernels.columns):
        unshaped = int(((kernels["kind"] == "gemm") & kernels["shape_m"].isna()).sum())
        if unshaped:
            capture.notes.append(_shape_note(unshaped))
    return capture


def _read_raw(path: Path, classifier: Classifier, notes: list) -> Capture:
    tables, units = [], {}
    for table, units in iter_raw_tables(path, notes=notes, classifier=classifier):
        tables.append(table)
    return Capture(pa.concat_tables(tables).to_pandas(), units, "raw", notes=notes)


def _unshaped_gemms(table: pa.Table) -> int:
    """GEMM kernels with no problem shape (M) in a block of the kernels table."""
    if "kind" not in table.column_names or "shape_m" not in table.column_names:
        return 0
    gemm = pc.fill_null(pc.equal(table["kind"].cast(pa.string()), "gemm"), False)
    return int(pc.sum(pc.and_(gemm, pc.is_null(table["shape_m"], nan_is_null=True))).as_py() or 0)


def _shape_note(count: int) -> str:
    """What a user should know at ingest when GEMMs come without a shape, and what to do."""
    return (f"{count} GEMM kernel(s) have no problem shape (M N K): their fill and useful tensor work "
            "(V3) will be n/a; pass --shapes FILE ('[phase/]role M N K' lines), or profile with smlens, "
            "whose NVTX ranges carry M= N= K=")


def parse_shapes_file(path) -> dict:
    """`--shapes FILE`: one line per role, `[phase/]role M N K` or `role M=.. N=.. K=..`; # comments."""
    from profiler.option_checks import read_option_file

    shapes = {}
    text = read_option_file(path, "--shapes")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(" ")
        values = re.findall(r"\d+", rest)
        phase, _, role = key.rpartition("/")
        if len(values) != 3 or not (nvtx.canonical_role(role) or role == "gemm"):
            raise BadInput(f"{path}:{number}: expected '[phase/]role M N K', got {line!r}")
        if phase and phase not in (*nvtx.PHASES, "prefill", nvtx.SETUP_PHASE):  # it would match no kernel
            raise BadInput(f"{path}:{number}: no phase {phase!r}; give one of "
                           f"{', '.join((*nvtx.PHASES, 'prefill', nvtx.SETUP_PHASE))}, or none")
        shapes[key] = tuple(int(v) for v in values)
    return shapes
