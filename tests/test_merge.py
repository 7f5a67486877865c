"""Joining the raw-page exports of one profile's ncu runs (profiler/ingest/merge.py), on real H200
captures cut back into the per-run exports ncu wrote (kernel IDs from 0 in each)."""
from __future__ import annotations

import csv
import gzip
import io

import pandas as pd
import pytest

from profiler.errors import BadInput
from profiler.ingest.capture import read_capture
from profiler.ingest.merge import merge_raw_exports
from tests.conftest import DATA


def split_export(source, first_rows: int, folder, first_id: int = 0) -> list:
    """The capture's rows as two ncu exports: the first `first_rows` kernels, then the rest; IDs
    from `first_id` in each, printed as ncu prints numbers (1,000)."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    header, units, kernels = rows[0], rows[1], rows[2:]
    parts = []
    for number, chunk in enumerate((kernels[:first_rows], kernels[first_rows:])):
        text = io.StringIO()
        writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerows([header, units] + [[f"{first_id + i:,}"] + row[1:] for i, row in enumerate(chunk)])
        parts.append(folder / f"run{number}.csv")
        parts[-1].write_text(text.getvalue(), encoding="utf-8")
    return parts


def test_merged_runs_read_as_each_run(tmp_path):
    """The cold-prefill run and the warm-prefill + decode run of a Llama-3.1-8B profile: the merged
    capture holds every kernel of each, with the same values, phases, roles and NVTX stacks, IDs
    renumbered in run order, and is the capture `smlens profile` stored on the H200."""
    stored = DATA / "h200_runs" / "llama-3.1-8b-b8-p512.csv.gz"
    cold, warm = split_export(stored, 17, tmp_path)
    merged = tmp_path / "merged.csv"
    assert merge_raw_exports([cold, warm], merged) == 17 + 37
    got = read_capture(merged).kernels
    each = [read_capture(cold).kernels, read_capture(warm).kernels.assign(
        kernel_id=lambda k: k["kernel_id"] + 17)]
    assert list(got["kernel_id"]) == list(range(54))
    pd.testing.assert_frame_equal(got, pd.concat(each, ignore_index=True))
    assert got.groupby("phase").size().to_dict() == {"cold_prefill": 17, "warm_prefill": 17, "decode": 20}
    # the first kernel of the second run keeps its own stack
    assert list(got["nvtx_stack"].iloc[17]) == ["smlens:warm_prefill", "smlens:layer_0",
                                                 "smlens:elementwise op=rms_norm"]
    pd.testing.assert_frame_equal(got, read_capture(stored).kernels)


def test_values_are_converted_once_at_ingest(tmp_path):
    """decode12 was exported in us: the merge keeps the text as ncu wrote it, the reader converts."""
    whole = read_capture(DATA / "decode12_raw.csv")
    parts = split_export(DATA / "decode12_raw.csv", 5, tmp_path)
    merged = tmp_path / "merged.csv"
    assert merge_raw_exports(parts, merged) == 12
    got = read_capture(merged)
    assert got.units["gpu__time_duration.sum"] == "ns"
    assert got.kernels["gpu__time_duration.sum"].tolist()[:3] == [4128.0, 8256.0, 18048.0]
    pd.testing.assert_frame_equal(got.kernels, whole.kernels)


def test_ids_with_thousands_separators(tmp_path):
    parts = split_export(DATA / "decode12_raw.csv", 5, tmp_path, first_id=998)
    merged = tmp_path / "merged.csv"
    assert merge_raw_exports(parts, merged) == 12
    # run 1 holds 998..1,002, run 2 starts after it
    assert read_capture(merged).kernels["kernel_id"].tolist() == list(range(998, 1003)) + list(range(2001, 2008))


def test_empty_exports_are_skipped(tmp_path):
    """A run that profiled nothing leaves an empty export, or none with rows; no file when all are."""
    empty, header_only = tmp_path / "empty.csv", tmp_path / "header.csv"
    empty.write_text("")
    full, rest = split_export(DATA / "decode12_raw.csv", 0, tmp_path)
    header_only.write_text(full.read_text())
    merged = tmp_path / "merged.csv"
    assert merge_raw_exports([empty, header_only, rest], merged) == 12
    assert read_capture(merged).kernels["kernel_id"].tolist() == list(range(12))
    assert merge_raw_exports([empty, header_only], merged) == 0 and not merged.exists()


def test_exports_with_other_columns_are_refused(tmp_path):
    """Two captures of other metric lists (and units: us, ns) are not one run's exports."""
    with pytest.raises(BadInput, match="targeted_raw.csv and .*decode12_raw.csv: .* differ"):
        merge_raw_exports([DATA / "decode12_raw.csv", DATA / "targeted_raw.csv"], tmp_path / "m.csv")
