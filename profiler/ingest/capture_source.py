"""A capture's bytes and the lines of an ncu CSV: what every reader opens a file with.

Opening: the path checked, gzip undone as a stream (a cut-off or damaged member is an error naming
the file, not a short file), a UTF-16 export transcoded. Scanning: the header row found among
ncu's and the program's own lines, then the data rows in blocks of whole lines, the units row
taken out. The raw and details readers and merge.py split a file into rows with this one code.
"""
from __future__ import annotations

import csv
import io
import re
import zlib
from pathlib import Path
from typing import Iterator

from profiler.errors import BadInput
from profiler.option_checks import check_regular_file

REQUIRED_COLUMNS = ("ID", "Kernel Name")  # a header without them is no ncu CSV's
_GZIP_MAGIC = b"\x1f\x8b"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
NOT_UTF8 = "is not UTF-8 text (ncu writes UTF-8): re-encode it, e.g. iconv -f latin1 -t utf-8"
ROW_START = re.compile(rb'^\s*"\d+",')
BLOCK_BYTES = 16 << 20
# Longer than any ncu line (a 10,000-metric header is under 1 MB) or cell (a long templated kernel
# name is some kB): beyond, the file is not a capture, and refusing early keeps memory bounded.
LINE_LIMIT_BYTES = 16 << 20
csv.field_size_limit(max(csv.field_size_limit(), LINE_LIMIT_BYTES))


# --- opening --------------------------------------------------------------------------------------


def check_readable(path: Path) -> None:
    """A capture path that exists, is a file and can be opened, or BadInput saying which not."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a folder, not an ncu capture; give the capture file inside it")
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


class Source:
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
            raise BadInput(f"{self.path}: the gzip data is damaged ({first_line(err)}): copy or "
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


def open_binary(path: Path) -> Source:
    check_readable(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror or err})") from None
    source = Source(handle, path, compressed=False)
    magic = source.read(2)
    if magic == _GZIP_MAGIC:
        handle.seek(0)
        source = Source(_Gunzip(handle), path, compressed=True)
        magic = source.read(2)
    if magic in _UTF16_BOMS:  # e.g. a PowerShell redirect: transcode (such files are small)
        data = (magic + source.read()).decode("utf-16", errors="replace").encode("utf-8")
        source.close()
        return Source(io.BytesIO(data), path, compressed=False)
    source.handle.seek(0)
    return source


# --- the lines of an ncu CSV ---------------------------------------------------------------------


def _header_cells(line: bytes) -> list[str] | None:
    """The cells of an ncu CSV header line, or None if the line is not one."""
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    if '"ID"' not in text or not text.startswith('"'):
        return None
    cells = next(csv.reader([text]))
    return cells if "ID" in cells else None


def row_chunks(stream: Source, header: list[str], first_rest: bytes, found: dict,
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
    is_row = ROW_START.match if id_index == 0 else (lambda line: line.lstrip().startswith(b'"'))
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


def find_header(stream, path: Path) -> tuple[list[str], bytes]:
    """Read up to the header row; return its cells and the bytes after it. Each line is looked at
    once, and no more than 64 MB are read before giving up."""
    pending, scanned = b"", 0
    while True:
        chunk = stream.read(min(1 << 20, BLOCK_BYTES))  # a test that sets small blocks gets several
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


def first_line(err: Exception) -> str:
    """An error's first line, cut short: what a one-line message quotes of a library's error."""
    return str(err).strip().splitlines()[0][:160]
