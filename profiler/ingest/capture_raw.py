"""`ncu --csv --page raw` -> the kernels table: one row per kernel, one column per metric.

A file or captured stdout: a units row, thousands separators, ncu's and the program's own lines
before and among the rows. Converted in blocks (`iter_raw_tables`), so a 100,000-kernel capture
streams into Parquet without being held in memory whole; `read` joins the blocks for callers that
want a DataFrame.
"""
from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from profiler.errors import BadInput
from profiler.ingest.capture_cells import NO_VALUE, cell_notes, finite_values, parse_numbers, unique_names
from profiler.ingest.capture_source import (BLOCK_BYTES, NOT_UTF8, ROW_START, find_header, first_line,
                                            open_binary, row_chunks)
from profiler.ingest.capture_table import (IDENTITY_COLUMNS, MEASURED, NOT_COUNTERS, PUSH_POP_PREFIX,
                                           START_STOP_PREFIX, Capture, Classifier, identity_frame,
                                           shape_note, unshaped_gemms)
from profiler.ingest.units import to_base

# longer than any ncu cell (a long templated kernel name is some kB): beyond, no capture's
CELL_LIMIT_BYTES = 1 << 20


def read(path: Path, classifier: Classifier) -> Capture:
    """A raw capture read whole: iter_raw_tables' blocks joined."""
    notes: list[str] = []
    tables, units = [], {}
    for table, units in iter_raw_tables(path, notes=notes, classifier=classifier):
        tables.append(table)
    return Capture(pa.concat_tables(tables).to_pandas(), units, "raw", notes=notes)


def iter_raw_tables(path: Path, shapes: dict | None = None, notes: list | None = None,
                    on_progress: Callable[[int, int], None] | None = None,
                    roles_from_order: bool = False, classifier: Classifier | None = None
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
            unshaped += unshaped_gemms(table)
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
    notes.extend(cell_notes(converter.unreadable, converter.examples, converter.non_finite))
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
        notes.append(shape_note(unshaped))


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

    _NULLS = list(NO_VALUE)  # not "nan": a NaN is read, then counted as not finite

    def __init__(self, header: list[str], classifier: Classifier, path: Path):
        self.notes: list[str] = []
        self.names = unique_names(header, self.notes)
        self.path = path
        self.is_row = ROW_START.match if header.index("ID") == 0 else \
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
                raise BadInput(f"{self.path} {NOT_UTF8}") from None
            if "CSV parse error" in str(err):  # beyond a skippable row: quotes that do not pair up
                raise BadInput(f"{self.path}: rows that do not parse as CSV ({first_line(err)[:100]})") from None
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
                    column, counts = parse_numbers(column)
                    self.unreadable[name] += counts.text
                    self.non_finite[name] += counts.non_finite
                    if counts.example is not None:
                        self.examples.setdefault(name, counts.example)
            values, bad = finite_values(column.cast(pa.float64()))
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
                raise BadInput(f"{self.path} {NOT_UTF8}")
            if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind):
                self.types[name] = pa.float64()
                self.numeric.add(name)
            else:
                self.types[name] = pa.string()
                if parse_numbers(column.cast(pa.string()).combine_chunks())[1].numeric:
                    self.numeric.add(name)  # numbers with thousands separators, or a bad cell
        return table.cast(pa.schema([pa.field(n, self.types[n]) for n in self.names]))

    def convert(self, block: bytes, unit_row: dict) -> pa.Table:
        try:  # here rather than in Arrow, whose row handler cannot show a row that is not UTF-8
            block.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{self.path} {NOT_UTF8}") from None
        if self.types is None:
            table = self._decide_types(block)
        else:
            try:
                table = self._read(block, self.types)
            except pa.ArrowInvalid:  # this block breaks block 1's types: strings, column by column
                try:
                    table = self._read(block, {n: pa.string() for n in self.names})
                except pa.ArrowInvalid as err:
                    raise BadInput(f"{self.path}: rows that do not parse as CSV ({first_line(err)})") from None
        numbers = self._numbers(table)
        identity = identity_frame(table.select(self.identity), self.classifier)
        valid = identity["kernel_id"].notna()
        if not valid.all():  # a row whose ID is no number
            self.damaged_rows += int((~valid).sum())
            mask = pa.array(valid.to_numpy())
            identity, table = identity[valid], table.filter(mask)
            numbers = {n: pc.filter(v, mask) for n, v in numbers.items()}
        out = pa.Table.from_pandas(identity.astype({"kernel_id": "int64"}), preserve_index=False)
        # one type in every block: Arrow reads a block whose kernels all lack NVTX ranges as list<null>
        stacks = pa.array(identity["nvtx_stack"].tolist(), pa.list_(pa.string()))
        out = out.set_column(out.schema.get_field_index("nvtx_stack"), "nvtx_stack", stacks)
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


def _any_valid(arrays: list, rows: int) -> pa.Array:
    """Per row: does any of these float columns hold a value (MEASURED)?"""
    valid = pa.array([False] * rows, pa.bool_())
    for values in arrays:
        valid = pc.or_(valid, pc.is_valid(values))
    return valid
