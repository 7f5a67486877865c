"""The bad-input corpus: every case either is refused (exit 2, one `smlens:` line on stderr naming
the file or option and what is wrong, no traceback, the store byte for byte as before) or is read
with the damage counted in the ingest notes. Built from the real captures in tests/data."""
from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest

from profiler.ingest.store import Store
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_store import snapshot

RAW = DATA / "decode12_raw.csv"
DETAILS = DATA / "decode12_details.csv"
TIME = "gpu__time_duration.sum"


def assert_refused(code: int, out: str, err: str, *fragments: str) -> str:
    """Exit 2 and one `smlens:` line holding every fragment; returns that line."""
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("smlens: "), err
    assert "Traceback" not in out + err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("base") / "store"
    Store(path).ingest(RAW, name="d12", tags={"batch": "4"})
    return path


def copy_store(base: Path, folder: Path, name: str = "store") -> Path:
    """A copy of a store built once per module: each test damages its own."""
    path = folder / name
    shutil.copytree(base, path)
    return path


@pytest.fixture()
def store(base_store, tmp_path) -> Path:
    return copy_store(base_store, tmp_path)


# --- captures made bad ------------------------------------------------------------------------

def _rows(path: Path = RAW) -> tuple[list[str], int]:
    lines = path.read_text().split("\n")
    return lines, next(i for i, line in enumerate(lines) if line.startswith('"ID"'))


def _join(cells: list[str]) -> str:
    return ",".join('"' + c.replace('"', '""') + '"' for c in cells)


def with_cell(column: str, value: str, row: int = 0, path: Path = RAW) -> bytes:
    """The capture with one cell of kernel row `row` (0 = the first) replaced."""
    lines, header_at = _rows(path)
    header = next(csv.reader([lines[header_at]]))
    at = header_at + 2 + row  # the units row comes first
    cells = next(csv.reader([lines[at]]))
    cells[header.index(column)] = value
    lines[at] = _join(cells)
    return "\n".join(lines).encode()


def with_columns(extra: int) -> bytes:
    """The capture with `extra` made-up metric columns on every row."""
    lines, header_at = _rows()
    names = [f"made_up__metric_{i}.sum" for i in range(extra)]
    out = lines[:header_at]
    for i, line in enumerate(lines[header_at:]):
        if not line:
            out.append(line)
            continue
        cells = next(csv.reader([line]))
        out.append(_join(cells + (names if i == 0 else [""] * extra if i == 1 else ["1"] * extra)))
    return "\n".join(out).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


RAW_BYTES = RAW.read_bytes()
HEADER_AT = RAW_BYTES.index(b'"ID"')
HEADER_END = RAW_BYTES.index(b"\n", HEADER_AT) + 1
UNITS_END = RAW_BYTES.index(b"\n", HEADER_END) + 1
LAST_ROW = RAW_BYTES.rstrip(b"\n").rindex(b"\n") + 1

# name -> (file name, content, words the one line must hold besides the file name)
REFUSED_FILES = {
    "empty": ("empty.csv", b"", "the file is empty"),
    "blank lines": ("blank.csv", b"\n\n  \n", "no ncu CSV header"),
    "prose": ("prose.csv", b"hello world\nthis is not a capture\n", "no ncu CSV header"),
    "json": ("result.csv", b'{"schema": "x"}\n', "no ncu CSV header"),
    "binary junk": ("junk.csv", bytes(range(256)) * 40, "binary data"),
    "nul inside text": ("nul.csv", RAW_BYTES[:HEADER_AT] + b"\0" + RAW_BYTES[HEADER_AT:], "binary data"),
    "header only": ("header.csv", RAW_BYTES[:HEADER_END], "no kernel rows"),
    "header and units only": ("units.csv", RAW_BYTES[:UNITS_END], "no kernel rows"),
    "cut mid-row": ("cut.csv", RAW_BYTES[: LAST_ROW + 300], "cut off in the middle of a row"),
    "cut mid-row, gzip": ("cut.csv.gz", gz(RAW_BYTES[: LAST_ROW + 300]), "cut off in the middle of a row"),
    "details cut mid-row": ("cut_details.csv", DETAILS.read_bytes()[:-700], "cut off in the middle of a row"),
    "no ID column": ("noid.csv", RAW_BYTES.replace(b'"ID",', b'"Ident",', 1), "no ncu CSV header"),
    "no Kernel Name column": ("noname.csv", RAW_BYTES.replace(b'"Kernel Name"', b'"Kernel"', 1),
                              "lacks Kernel Name"),
    "only foreign columns": ("foreign.csv", b'"Name","Value"\n"a","1"\n', "no ncu CSV header"),
    "every row damaged": ("damaged.csv", RAW_BYTES[:UNITS_END] + b'"1","2","3"\n"2","x"\n',
                          "none of its 2 row(s) matches the header"),
    "latin-1 kernel name": ("latin1.csv", RAW.read_text().replace("void ", "vöid ", 1).encode("latin-1"),
                            "not UTF-8"),
    "UTF-16 junk": ("utf16.csv", "just words\n".encode("utf-16"), "no ncu CSV header"),
    "truncated gzip": ("trunc.csv.gz", gz(RAW_BYTES)[:4000], "gzip data is cut off"),
    "gzip magic then junk": ("fake.csv.gz", b"\x1f\x8b" + b"junk" * 100, "gzip data is damaged"),
    "gzip header only": ("two.csv.gz", b"\x1f\x8b", "gzip data is cut off"),
    "gzip of nothing": ("nothing.csv.gz", gz(b""), "the file is empty"),
    "gzip of prose": ("prose.csv.gz", gz(b"not a capture\n" * 10), "no ncu CSV header"),
    "gzip, damaged inside": ("flipped.csv.gz", (lambda b: b[:200] + bytes(255 - x for x in b[200:260])
                                                + b[260:])(gz(RAW_BYTES)), "gzip data"),
    "junk .ncu-rep": ("junk.ncu-rep", b"this is not a report" * 10, "not an Nsight Compute report"),
    "empty .ncu-rep": ("empty.ncu-rep", b"", "not an Nsight Compute report"),
    "truncated .ncu-rep.gz": ("cut.ncu-rep.gz", (DATA / "decode12.ncu-rep.gz").read_bytes()[:20000],
                              "gzip data is cut off"),
    "a CSV named .ncu-rep": ("capture.ncu-rep", RAW_BYTES + b"\n", "not an Nsight Compute report"),
    "60 MB line": ("long_line.csv", RAW_BYTES[:UNITS_END] + b'"1","' + b"x" * (60 << 20) + b'"\n',
                   "a line longer than 16 MiB"),
    "60 MB line before any header": ("long_preamble.csv", b"x" * (60 << 20) + b"\n" + RAW_BYTES,
                                     "no ncu CSV header"),
    "5 MB kernel name": ("long_name.csv", with_cell("Kernel Name", "k" * 5_000_000), "'Kernel Name' holds 5,000,000 bytes"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_FILES))
def test_a_bad_capture_is_refused_on_one_line_and_the_store_is_unchanged(case, store, tmp_path):
    name, content, words = REFUSED_FILES[case]
    path = tmp_path / name
    path.write_bytes(content)
    before = snapshot(store)
    assert_refused(*smlens("ingest", path, "--store", store), name, words)
    assert snapshot(store) == before
    assert not list((store / ".staging").iterdir())


@pytest.mark.parametrize("case", ["truncated gzip", "5 MB kernel name", "60 MB line", "binary junk",
                                  "every row damaged"])
def test_the_gate_cannot_judge_a_bad_capture_exit_2_and_writes_its_reports(case, tmp_path):
    name, content, words = REFUSED_FILES[case]
    path = tmp_path / name
    path.write_bytes(content)
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    code, out, err = smlens("gate", "-b", RAW, "-c", path, "--junit", junit, "--markdown", markdown)
    assert_refused(code, out, err, name, words)
    assert "could not judge" in markdown.read_text() and words in junit.read_text()


def _paths(tmp: Path, store: Path) -> dict:
    """Cases that are paths rather than contents: (args, words the line must hold)."""
    folder = tmp / "captures"
    folder.mkdir()
    ro_parent = tmp / "ro"
    hostile = tmp / "evil\n\x1b[31mname.csv"
    hostile.write_bytes(b"")
    dash = tmp / "-x.csv"
    dash.write_bytes(b"junk\n")
    not_store = tmp / "mine"
    not_store.mkdir()
    (not_store / "notes.txt").write_text("keep me")
    return {
        "missing file": (["ingest", tmp / "nope.csv", "--store", store], ["nope.csv", "no such file"]),
        "a folder as the capture": (["ingest", folder, "--store", store], ["captures", "is a folder"]),
        "unreadable file": (["ingest", "/proc/self/mem", "--store", store],
                            ["/proc/self/mem", "cannot read it"]),
        "a name with a newline and an escape": (["ingest", hostile, "--store", store],
                                                ["evil\\n\\x1b[31mname.csv", "empty"]),
        "a name starting with a dash": (["ingest", "--store", store, "--", dash], ["-x.csv", "no ncu CSV"]),
        "store is a file": (["ingest", RAW, "--store", RAW], ["decode12_raw.csv", "is a file"]),
        "store is someone's folder": (["ingest", RAW, "--store", not_store], ["mine", "not an smlens store"]),
        "store under /proc": (["ingest", RAW, "--store", "/proc/smlens"], ["/proc/smlens", "cannot write"]),
        "runs of no store": (["runs", "--store", tmp / "nothing"], ["nothing", "no smlens store"]),
        "store under a file": (["ingest", RAW, "--store", RAW / "store"], ["decode12_raw.csv", "cannot"]),
        "empty --name": (["ingest", RAW, "--store", store, "--name", ""], ["--name is empty"]),
        "--name with a newline": (["ingest", RAW, "--store", store, "--name", "a\nb"], ["--name", "control"]),
        "--name latest": (["ingest", RAW, "--store", store, "--name", "latest"], ["--name latest", "reserved"]),
        "--tag without =": (["ingest", RAW, "--store", store, "--tag", "novalue"], ["novalue", "KEY=VALUE"]),
        "--tag with an escape": (["ingest", RAW, "--store", store, "--tag", "a=\x1b[2J"], ["--tag", "control"]),
        "rm of an empty reference": (["rm", "", "--store", store], ["empty run reference"]),
        "rm of a blank reference": (["rm", "  ", "--store", store], ["empty run reference"]),
        "rm of an unknown run": (["rm", "nope", "--store", store], ["no run 'nope'"]),
        "rm of one known and one unknown": (["rm", "d12", "nope", "--store", store], ["no run 'nope'"]),
        "show of an unknown run": (["show", "nope", "--store", store], ["no run 'nope'"]),
        "show of an empty reference": (["show", "", "--store", store], ["empty run reference"]),
        "views, bad regex": (["views", "--store", store, "--kernel", "("], ["--kernel", "regular expression"]),
        "views, unknown phase": (["views", "--store", store, "--phase", "warmup"], ["--phase warmup"]),
        "report into a folder": (["report", "--store", store, "-o", folder], ["captures", "is a folder"]),
    }


PATH_CASES = ["missing file", "a folder as the capture", "unreadable file",
              "a name with a newline and an escape", "a name starting with a dash", "store is a file",
              "store is someone's folder", "store under /proc", "runs of no store", "store under a file",
              "empty --name", "--name with a newline", "--name latest", "--tag without =",
              "--tag with an escape", "rm of an empty reference", "rm of a blank reference",
              "rm of an unknown run", "rm of one known and one unknown", "show of an unknown run",
              "show of an empty reference", "views, bad regex", "views, unknown phase",
              "report into a folder"]


@pytest.mark.parametrize("case", PATH_CASES)
def test_a_bad_path_name_or_option_is_refused_on_one_line(case, store, tmp_path):
    args, words = _paths(tmp_path, store)[case]
    before = snapshot(store)
    assert_refused(*smlens(*args), *words)
    assert snapshot(store) == before


def _options(tmp: Path) -> dict:
    latin = tmp / "latin.txt"
    latin.write_bytes("qkv_proj 4 6144 4096 # größe\n".encode("latin-1"))
    bad_line = tmp / "bad_shapes.txt"
    bad_line.write_text("qkv_proj 4 6144\n")
    rules = tmp / "gate.toml"
    rules.write_bytes('[[rule]]\nfigure = "time_ns" # größer\n'.encode("latin-1"))
    broken_toml = tmp / "broken.toml"
    broken_toml.write_text("[[rule]\nfigure =\n")
    return {
        "--shapes not UTF-8": (["ingest", RAW, "--shapes", latin], ["--shapes", "latin.txt", "not UTF-8"]),
        "--shapes missing": (["ingest", RAW, "--shapes", tmp / "none.txt"], ["none.txt", "no such file"]),
        "--shapes a folder": (["ingest", RAW, "--shapes", tmp], ["--shapes", "is a folder"]),
        "--shapes bad line": (["ingest", RAW, "--shapes", bad_line], ["bad_shapes.txt:1", "expected"]),
        "gate --rules not UTF-8": (["gate", "-b", RAW, "-c", RAW, "--rules", rules], ["gate.toml", "not UTF-8"]),
        "gate --rules broken TOML": (["gate", "-b", RAW, "-c", RAW, "--rules", broken_toml], ["broken.toml"]),
        "gate --shapes not UTF-8": (["gate", "-b", RAW, "-c", RAW, "--shapes", latin], ["latin.txt", "not UTF-8"]),
        "gate of nothing": (["gate", "-c", RAW], ["no baseline given"]),
    }


@pytest.mark.parametrize("case", ["--shapes not UTF-8", "--shapes missing", "--shapes a folder",
                                  "--shapes bad line", "gate --rules not UTF-8", "gate --rules broken TOML",
                                  "gate --shapes not UTF-8", "gate of nothing"])
def test_a_bad_option_file_is_refused_on_one_line(case, store, tmp_path):
    args, words = _options(tmp_path)[case]
    before = snapshot(store)
    assert_refused(*smlens(*args, "--store", store), *words)
    assert snapshot(store) == before


# --- captures read with their damage counted ------------------------------------------------

BAD_CELLS = {  # value -> the note that counts it
    "": None, "n/a": None, "-": None,  # ncu's own ways of printing "no value"
    "nan": "not finite", "NaN": "not finite", "inf": "not finite", "-inf": "not finite",
    "1e400": "not finite", "abc": "not numbers", "#REF!": "not numbers", "１２": "not numbers",
}


@pytest.mark.parametrize("value", sorted(BAD_CELLS))
def test_one_bad_cell_is_null_in_a_numeric_column_and_counted(value, store, tmp_path):
    path = tmp_path / "cell.csv"
    path.write_bytes(with_cell(TIME, value, row=3))
    code, out, err = smlens("ingest", path, "--store", store, "--format", "json")
    assert code == 0, err
    run = json.loads(out)[0]
    kernels = Store(store).kernels(run["id"])
    assert kernels[TIME].dtype == "float64"
    assert kernels[TIME].isna().tolist() == [i == 3 for i in range(12)]
    assert kernels[TIME].iloc[0] == pd.read_parquet(next(store.glob("runs/run=*/kernels.parquet")))[TIME].iloc[0]
    expected = BAD_CELLS[value]
    counted = [n for n in run["notes"] if TIME in n]
    if expected is None:
        assert counted == []
    else:
        assert len(counted) == 1 and expected in counted[0] and f"{TIME} 1" in counted[0]
    # the run is usable: show sums the times that were read, the views print no numpy warnings
    code, out, err = smlens("show", run["id"], "--store", store, "--format", "json")
    assert code == 0, err
    assert sum(g["time_ns"] or 0 for g in json.loads(out)["phases"]) == pytest.approx(kernels[TIME].sum())
    code, out, err = smlens("views", run["id"], "--store", store)
    assert code == 0 and "RuntimeWarning" not in err + out, err


def test_bad_cells_in_the_details_page(tmp_path):
    from profiler.ingest.capture import read_capture

    lines = DETAILS.read_text().split("\n")
    duration = [i for i, line in enumerate(lines) if f'"{TIME}"' in line]
    for at, value in zip(duration[:3], ("inf", "fast", "")):
        cells = next(csv.reader([lines[at]]))
        cells[-1] = value
        lines[at] = _join(cells)
    path = tmp_path / "details.csv"
    path.write_text("\n".join(lines))
    capture = read_capture(path)
    column = capture.kernels[TIME]
    assert column.dtype == "float64" and column.isna().sum() == 3 and column.notna().sum() == 9
    notes = " | ".join(capture.notes)
    assert f"{TIME} 1 (e.g. 'fast')" in notes and "not finite" in notes


def test_text_in_a_numeric_column_of_a_later_block(tmp_path, monkeypatch):
    """Block 1 decides the types; a bad cell in block 2 is null and counted, not a text column."""
    from profiler.ingest import capture, capture_source

    monkeypatch.setattr(capture_source, "BLOCK_BYTES", 20_000)  # several blocks out of a 56 kB capture
    path = tmp_path / "late.csv"
    path.write_bytes(with_cell(TIME, "later", row=11))
    result = capture.read_capture(path)
    assert result.kernels[TIME].dtype == "float64" and result.kernels[TIME].isna().tolist()[-1]
    assert any(f"{TIME} 1 (e.g. 'later')" in n for n in result.notes)


def test_damaged_rows_and_program_output_are_noted_in_their_own_words(store, tmp_path):
    lines, header_at = _rows()
    cells = next(csv.reader([lines[header_at + 3]]))
    lines[header_at + 3] = _join(cells[:-40])  # a row that lost cells
    lines.insert(header_at + 5, "step 3 done")  # the program's own output
    bad_id = next(csv.reader([lines[header_at + 6]]))
    bad_id[0] = "x1"
    lines[header_at + 6] = _join(bad_id)
    path = tmp_path / "noisy.csv"
    path.write_text("\n".join(lines))
    code, out, err = smlens("ingest", path, "--store", store, "--format", "json")
    assert code == 0, err
    run = json.loads(out)[0]
    assert run["kernel_count"] == 10
    notes = run["notes"]
    assert "skipped 1 line(s) of program or ncu output among the rows" in notes
    assert any(n.startswith("dropped 2 damaged kernel row(s)") for n in notes)


def test_duplicated_columns_are_kept_and_noted(store, tmp_path):
    text = RAW.read_text().replace('"Context","Stream"', '"Context","Context"', 1)
    path = tmp_path / "dup.csv"
    path.write_text(text)
    code, out, err = smlens("ingest", path, "--store", store, "--format", "json")
    assert code == 0, err
    run = json.loads(out)[0]
    assert any("more than once (Context)" in n and "Context#1" in n for n in run["notes"])
    assert "Context#1" in Store(store).kernels(run["id"])


def test_ten_thousand_columns_are_read(store, tmp_path):
    path = tmp_path / "wide.csv"
    path.write_bytes(with_columns(10_000))
    code, out, err = smlens("ingest", path, "--store", store, "--format", "json")
    assert code == 0, err
    run = json.loads(out)[0]
    kernels = Store(store).kernels(run["id"], columns=["made_up__metric_9999.sum", TIME])
    assert run["kernel_count"] == 12 and kernels["made_up__metric_9999.sum"].tolist() == [1.0] * 12


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "crlf"])
def test_other_encodings_of_a_real_capture_are_read(encoding, store, tmp_path):
    text = RAW.read_text()
    data = text.replace("\n", "\r\n").encode() if encoding == "crlf" else text.encode(encoding)
    path = tmp_path / f"{encoding}.csv"
    path.write_bytes(data)
    code, out, err = smlens("ingest", path, "--store", store, "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["kernel_count"] == 12


# --- the store commands on a damaged store -----------------------------------------------------

def _run_dir(store: Path) -> Path:
    return next((store / "runs").glob("run=*"))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {  # what is done to the store -> words of the one line, and whether the table is hit
    "runs table truncated": (lambda s: _truncate(s / "runs.parquet"), "runs table runs.parquet cannot be read", True),
    "runs table empty": (lambda s: (s / "runs.parquet").write_bytes(b""), "runs table runs.parquet cannot be read", True),
    "runs table random": (lambda s: (s / "runs.parquet").write_bytes(os.urandom(3000)), "cannot be read", True),
    "runs table gone": (lambda s: (s / "runs.parquet").unlink(), "runs table runs.parquet is missing", True),
    "runs table of another shape": (lambda s: pd.DataFrame({"x": [1]}).to_parquet(s / "runs.parquet"),
                                    "lacks id", True),
    "marker corrupt": (lambda s: (s / "smlens-store.json").write_text("{nope"), "marker", True),
    "marker gone": (lambda s: (s / "smlens-store.json").unlink(), "marker smlens-store.json is missing", True),
    "kernels truncated": (lambda s: _truncate(_run_dir(s) / "kernels.parquet"), "kernels.parquet cannot be read", False),
    "kernels gone": (lambda s: (_run_dir(s) / "kernels.parquet").unlink(), "kernels.parquet is missing", False),
    "run folder gone": (lambda s: shutil.rmtree(_run_dir(s)), "kernels.parquet is missing", False),
    "units gone": (lambda s: shutil.rmtree(next((s / "units").glob("run=*"))), "units.parquet is missing", False),
}
READERS = {
    "runs": ["runs"], "show": ["show", "d12"], "views": ["views", "d12"],
    "report": ["report", "d12", "-o", "{tmp}/r.html"], "rm": ["rm", "d12", "--yes"],
    "ingest": ["ingest", DATA / "h200_runs" / "gate-b1-r1.csv.gz"],
}
USES_THE_RUN = {"show", "views", "report"}  # `runs`, `rm`, `ingest` read the runs table only
USES_UNITS = {"show"}


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_command_meets_a_damaged_store_with_one_line_and_changes_nothing(damage, command, store, tmp_path):
    hurt, words, table = DAMAGE[damage]
    hurt(store)
    refused = table or (command in USES_THE_RUN and (damage != "units gone" or command in USES_UNITS))
    before = snapshot(store)
    args = [str(a).format(tmp=tmp_path) for a in READERS[command]]
    code, out, err = smlens(*args, "--store", store)
    if not refused:
        assert code == 0 and "Traceback" not in err, err
        return
    line = assert_refused(code, out, err, words)
    assert line.endswith(f"; run `smlens store check --store {store}`")
    assert snapshot(store) == before


@pytest.mark.parametrize("damage", ["runs table truncated", "kernels truncated", "run folder gone"])
def test_the_gate_on_a_damaged_store_cannot_judge_and_says_so_in_its_reports(damage, store, tmp_path):
    DAMAGE[damage][0](store)
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    code, out, err = smlens("gate", "-b", "d12", "-c", "d12", "--store", store, "--junit", junit,
                            "--markdown", markdown)
    assert_refused(code, out, err, DAMAGE[damage][1], "smlens store check")
    assert "smlens store check" in markdown.read_text() and "smlens store check" in junit.read_text()


def test_a_store_of_another_format_is_refused(store):
    (store / "smlens-store.json").write_text('{"format": 99}')
    assert_refused(*smlens("runs", "--store", store), "store format 99")


# --- bench compare ------------------------------------------------------------------------------

def test_bench_compare_exits_2_for_any_case_it_could_not_compare(tmp_path):
    full = DATA / "h200_det" / "h200_det.json"
    result = json.loads(full.read_text())
    schema_only = tmp_path / "schema_only.json"
    schema_only.write_text(json.dumps({"schema": result["schema"]}))
    code, out, err = smlens("bench", "compare", full, schema_only)
    assert_refused(code, out, err, "no comparable case of det")
    code, out, err = smlens("bench", "compare", schema_only, full)
    assert_refused(code, out, err, "no comparable case of det")
    other_inputs = dict(result, shapes=[dict(s, x_sha256="0" * 64) for s in result["shapes"]])
    changed = tmp_path / "other_inputs.json"
    changed.write_text(json.dumps(other_inputs))
    assert_refused(*smlens("bench", "compare", full, changed), "no comparable case of det")
    # three det cases the same, one missing: not "the same bits"
    one_short = dict(result, bits=[b for b in result["bits"] if (b["impl"], b["role"]) != ("det", "o_proj")])
    partial = tmp_path / "one_short.json"
    partial.write_text(json.dumps(one_short))
    assert_refused(*smlens("bench", "compare", full, partial),
                   "1 case(s) of det in", "could not be compared (missing)")
    assert smlens("bench", "compare", full, full)[0] == 0


def test_views_and_show_print_no_numpy_warnings_for_a_store_with_infinities(store):
    """A store written before non-finite values were nulled holds inf: the views say n/a for what
    they cannot compute, and print no RuntimeWarning (numpy's "invalid value in divide")."""
    import warnings

    import numpy as np

    path = _run_dir(store) / "kernels.parquet"
    kernels = pd.read_parquet(path)
    for column in (TIME, "sm__cycles_active.avg", "dram__bytes_read.sum"):
        kernels.loc[kernels.index[:4], column] = np.inf
    kernels.loc[kernels.index[4:6], TIME] = 0.0
    kernels.to_parquet(path, index=False)
    for args in (["views", "d12"], ["show", "d12"], ["report", "d12", "-o", store.parent / "r.html"]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code, out, err = smlens(*args, "--store", store)
        assert code == 0, err
        assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == [], args


# --- found by running every command with odd arguments ----------------------------------------

def _odd_arguments(tmp: Path, store: Path) -> dict:
    """(args, words the one line must hold); each case once gave a traceback-free but wrong answer:
    click's four-line usage text, an internal error, a store overwritten, or a quiet misreading."""
    binary = tmp / "metrics.bin"
    binary.write_bytes(bytes(range(128, 256)))
    warmup = tmp / "warmup_shapes.txt"
    warmup.write_text("warmup/qkv_proj 4 6144 4096\n")
    plan = ["profile", "--plan", "--model", "tiny"]
    fifo = tmp / "pipe.csv"
    os.mkfifo(fifo)  # nothing writes to it: reading it would wait for ever
    return {
        "unknown --format": (["runs", "--format", "xml"],
                             ["runs: Invalid value for '--format'", "'xml'", "see `smlens runs --help`"]),
        "unknown --format of a subcommand": (["store", "check", "--format", "xml"],
                                             ["store check:", "see `smlens store check --help`"]),
        "missing argument": (["ingest"], ["ingest: Missing argument", "see `smlens ingest --help`"]),
        "unknown command": (["nosuch"], ["No such command 'nosuch'", "see `smlens --help`"]),
        "unknown subcommand": (["store", "nosuch"], ["No such command 'nosuch'", "see `smlens store --help`"]),
        "a run reference that reads as an option": (["show", "-1"], ["show: No such option: -1"]),
        "report -o a file of the store": (["report", "d12", "-o", store / "runs.parquet"],
                                          ["--output", "is inside the store"]),
        "gate --markdown into the store": (["gate", "-b", "d12", "-c", "d12", "--markdown", store / "gate.md"],
                                           ["--markdown", "is inside the store"]),
        "gate tag:~0": (["gate", "-b", "tag:batch=4~0", "-c", "d12"], ["tag:batch=4~0", "1 or more"]),
        "show of a reference that is not UTF-8": (["show", os.fsdecode(b"caf\xe9")], ["no run 'caf\\udce9'"]),
        "--name that is not UTF-8": (["ingest", RAW, "--name", os.fsdecode(b"caf\xe9")], ["--name", "not UTF-8"]),
        "--name of 100,000 characters": (["ingest", RAW, "--name", "n" * 100_000], ["--name holds 100,000"]),
        "--shapes of an unknown phase": (["ingest", RAW, "--shapes", warmup], ["warmup_shapes.txt:1", "no phase 'warmup'"]),
        "report --phase empty": (["report", "d12", "--phase", "", "-o", tmp / "r.html"], ["--phase : expected one of"]),
        "--metrics @binary": (plan + ["--metrics", f"@{binary}"], ["--metrics", "metrics.bin", "not UTF-8"]),
        "profile --time-limit nan": (plan + ["--time-limit", "nan"], ["--time-limit nan", "above 0"]),
        "profile --time-limit 0": (plan + ["--time-limit", "0"], ["--time-limit 0", "above 0"]),
        "profile --name empty": (plan + ["--name", ""], ["--name is empty"]),
        "profile --tag without =": (plan + ["--tag", "x"], ["--tag 'x'", "KEY=VALUE"]),
        "profile --keep a file": (plan + ["--keep", RAW], ["--keep", "is a file, not a folder"]),
        "ingest a device": (["ingest", "/dev/null"], ["/dev/null", "a pipe or a device"]),
        "report -o a pipe": (["report", "d12", "-o", fifo], ["--output", "pipe.csv", "a pipe or a device"]),
        "ingest a known file and a missing one": (["ingest", DATA / "h200_runs" / "gate-b1-r1.csv.gz",
                                                   tmp / "nope.csv"], ["nope.csv", "no such file"]),
        "--shapes /dev/zero": (["ingest", RAW, "--shapes", "/dev/zero"], ["--shapes /dev/zero", "a pipe or a device"]),
        "gate of a pipe": (["gate", "-b", fifo, "-c", RAW], ["pipe.csv", "a pipe or a device"]),
        "gate --rules of a pipe": (["gate", "-b", RAW, "-c", RAW, "--rules", fifo], ["--rules", "a pipe or a device"]),
    }


ODD_ARGUMENTS = ["unknown --format", "unknown --format of a subcommand", "missing argument", "unknown command",
                 "unknown subcommand", "a run reference that reads as an option", "report -o a file of the store",
                 "gate --markdown into the store", "gate tag:~0", "show of a reference that is not UTF-8",
                 "--name that is not UTF-8", "--name of 100,000 characters", "--shapes of an unknown phase",
                 "report --phase empty", "--metrics @binary", "profile --time-limit nan",
                 "profile --time-limit 0", "profile --name empty", "profile --tag without =",
                 "profile --keep a file", "ingest a device", "report -o a pipe", "ingest a known file and a missing one",
                 "--shapes /dev/zero", "gate of a pipe", "gate --rules of a pipe"]


@pytest.mark.parametrize("case", ODD_ARGUMENTS)
def test_odd_arguments_are_refused_on_one_line_and_the_store_is_unchanged(case, store, tmp_path):
    args, words = _odd_arguments(tmp_path, store)[case]
    before = snapshot(store)
    assert_refused(*smlens(*args, "--store", store), *words)
    assert snapshot(store) == before
    assert stat.S_ISFIFO((tmp_path / "pipe.csv").stat().st_mode)  # not replaced by a report


@pytest.mark.parametrize("name", ["-", "/dev/fd/1"])
def test_a_report_to_standard_output_is_written_there_alone(name, store):
    """`-o /dev/stdout` was refused as a device, or, stdout a file and smlens run as root, the
    /dev/stdout link itself was replaced by the report's atomic rename (seen). Now the report goes
    to stdout and nothing else does. (/dev/fd/1 stands for /dev/stdout here: were the fix undone,
    the test would fail without replacing the machine's /dev/stdout.)"""
    from profiler.option_checks import is_stdout

    assert is_stdout("/dev/stdout") and is_stdout(Path("/proc/self/fd/1")) and not is_stdout("out.html")
    code, out, err = smlens("report", "d12", "-o", name, "--store", store, "--format", "json")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert json.loads(err)["bytes"] == len(out.encode())
    code, out, err = smlens("gate", "-b", "d12", "-c", "d12", "--markdown", name, "--store", store)
    assert code == 0 and out.startswith("## smlens gate: ✅ pass (exit 0)") and "gate: pass" in err
    assert_refused(*smlens("gate", "-b", "d12", "-c", "d12", "--markdown", name, "--junit", "-",
                           "--store", store), "--markdown and --junit both name standard output")
    # where the command prints to stdout itself, standard output is no file to name
    assert_refused(*smlens("demo", "-o", name), f"--output {name}", "give a file")
    # another open file of the process (/dev/fd/2 standing for /dev/stderr) is no output file either
    assert_refused(*smlens("report", "d12", "-o", "/dev/fd/2", "--store", store),
                   "--output /dev/fd/2: names a device or an open file of a process")


def test_bench_compare_of_a_device_or_no_impl_is_refused():
    full = DATA / "h200_det" / "h200_det.json"
    assert_refused(*smlens("bench", "compare", full, "/dev/null"), "/dev/null", "a pipe or a device")
    assert_refused(*smlens("bench", "compare", full, full, "--impl", ","), "--impl is empty")


def test_a_capture_whose_name_is_not_utf8_is_gated_beside_a_store(store, tmp_path):
    """The file name reached the store's run lookup, which pyarrow could not encode: exit 70."""
    undecodable = tmp_path / os.fsdecode(b"caf\xe9.csv")
    undecodable.write_bytes(RAW_BYTES)
    code, out, err = smlens("gate", "-b", undecodable, "-c", RAW, "--store", store, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["exit_code"] == 0


def test_a_store_setting_with_control_characters_is_refused_not_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SMLENS_STORE", "\x01junk\n")
    assert_refused(*smlens("ingest", RAW), "SMLENS_STORE '\\x01junk\\n'", "control characters")
    assert list(tmp_path.iterdir()) == []


def test_a_command_with_no_arguments_still_prints_its_help():
    code, out, err = smlens("store")
    assert "Commands:" in out + err and "check" in out + err and "smlens: " not in err


def test_batches_up_to_a_huge_number_are_refused_without_listing_them():
    """`--batches 1..999999999999` once built the whole range before refusing it (the process was
    killed for memory); now the range stops at the limit."""
    import tracemalloc

    from profiler.errors import BadInput
    from profiler.workloads.deterministic.bench import parse_batches

    tracemalloc.start()
    with pytest.raises(BadInput, match="at most 65536"):
        parse_batches("1..5000000")
    peak_bytes = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak_bytes < 20 << 20
    assert parse_batches("1..3,65536") == [1, 2, 3, 65536]
