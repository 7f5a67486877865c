"""Reading .ncu-rep through `ncu --import` when ncu is on PATH, and ncu versions smlens has not seen."""
from __future__ import annotations

import csv
import os
import stat

import pytest

from profiler.run import ncu
from profiler.ingest.capture import read_capture
from profiler.errors import BadInput
from tests.conftest import DATA


def _fake_ncu(folder, body: str):
    path = folder / "ncu"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_ncu_rep_goes_through_ncu_import_when_ncu_is_on_path(tmp_path, monkeypatch):
    # this stand-in answers `--import REPORT --csv --page raw` with the report's real raw export
    log = tmp_path / "args"
    _fake_ncu(tmp_path, f'echo "$@" > {log}\ncat {DATA / "decode12_raw.csv"}\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    capture = read_capture(DATA / "decode12.ncu-rep.gz")
    assert capture.source_format == "ncu-rep"
    args = log.read_text().split()
    assert args[0] == "--import" and args[1].endswith(".ncu-rep")
    assert args[2:] == ["--csv", "--page", "raw", "--print-units", "base"]  # as smlens profile exports
    kernels = capture.kernels.set_index("kernel_id")
    assert len(kernels) == 12 and kernels.loc[2, "shape_n"] == 6144
    # the same numbers as the module reader gives with no ncu at all
    monkeypatch.setenv("PATH", "/nonexistent")
    module = read_capture(DATA / "decode12.ncu-rep.gz").kernels.set_index("kernel_id")
    assert kernels.loc[2, "dram__bytes_read.sum"] == module.loc[2, "dram__bytes_read.sum"] == 50382080.0


def test_gemms_without_a_shape_are_noted_once_through_ncu_import(tmp_path, monkeypatch):
    """The raw reader notes them as it streams the import; the .ncu-rep reader adds no second note."""
    _fake_ncu(tmp_path, f'cat {DATA / "h200_dtypes_raw.csv"}\n')  # a real raw export: 4 GEMMs unshaped
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    notes = [n for n in read_capture(DATA / "decode12.ncu-rep.gz").notes if "have no problem shape" in n]
    assert len(notes) == 1 and notes[0].startswith("4 GEMM kernel(s) have no problem shape")


def test_ncu_import_failure_is_bad_input(tmp_path, monkeypatch):
    _fake_ncu(tmp_path, 'echo "==ERROR== Failed to open report" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BadInput, match="could not import the report: ==ERROR== Failed to open report"):
        read_capture(DATA / "decode12.ncu-rep.gz")


@pytest.mark.parametrize("version, unseen", [("2025.3.1.0", False), ("2025.3.1", False),
                                             ("2026.1.0.0", True), ("2025.3.10.0", True)])
def test_versions_not_seen_before_say_so(version, unseen):
    warning = ncu.version_warning(version)
    assert (warning is not None) == unseen
    if unseen:
        assert version in warning and "2025.3.1" in warning and "--query-metrics" in warning


def test_metric_ncu_does_not_know_is_noted_and_its_view_is_na(tmp_path):
    """ncu 2025.3.1 on the H200 printed "n/a" for every kernel for a metric name it did not know
    (seen with `--metrics smlens__no_such_metric.sum`); here the tensor-pipe metric is given that
    treatment in a real capture (both its active and its elapsed share: V2 reads either)."""
    from views.registry import compute_views

    lines = (DATA / "decode12_raw.csv").read_text().splitlines()
    header = next(csv.reader([lines[0]]))
    columns = [header.index(name) for name in (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")]
    for number in range(2, len(lines)):
        cells = next(csv.reader([lines[number]]))
        for column in columns:
            cells[column] = "n/a"
        lines[number] = ",".join(f'"{c}"' for c in cells)
    path = tmp_path / "na.csv"
    path.write_text("\n".join(lines) + "\n")
    capture = read_capture(path)
    assert any("n/a for every kernel in 2 metric(s)" in n and header[columns[0]] in n for n in capture.notes)
    assert capture.kernels[header[columns[0]]].isna().all()
    figures = compute_views(capture.kernels).kernels
    assert figures["tensor_pipe_pct"].isna().all() and set(figures["validation_V2"]) == {"n/a"}
    assert set(figures["validation_V1"]) == {"pass"}  # every other view still works


def test_regex_metric_ncu_cannot_find_says_what_to_do():
    text = ("==ERROR== Failed to find metric regex:smlens__nothing.*\n\n"
            '==ERROR== Failed to profile "vectorized_elementwise_kernel" in process 502\n'
            "==PROF== Trying to shutdown target application\n"
            "==ERROR== The application returned an error code (9).\n")  # as seen on the H200
    reader = ncu.ProgressReader()
    reader.feed(text)
    reader.close()
    error = ncu.diagnose(ncu.RunResult(9, reader))
    assert error.exit_code == ncu.EXIT_NCU_FAILED
    assert "no metric regex:smlens__nothing.*" in str(error) and "--query-metrics" in str(error)
