"""How a capture was made and what it says of its device (issue 27, items 2 and 3): kernels ncu
could not measure, the device count, the clocks it ran at, and the peaks with their sources."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from rich.console import Console

from reports.verdict_text import verdict_document
from reports.formats.views_json import views_document, views_json
from reports.terminal import capture_line, device_line, print_views
from views.registry import compute_views
from views.verdict import verdict

PUBLIC_A100_PCIE = "public/a100pcie_cutlass_b2b_gemm.ncu-rep.gz"


class _Wrapped:
    """A real ncu_report object with some of its methods replaced."""

    def __init__(self, real, **methods):
        self._real, self._methods = real, methods

    def __getattr__(self, name):
        return self._methods.get(name) or getattr(self._real, name)


class _NaN:
    def __init__(self, unit):
        self._unit = unit

    def value(self):
        return float("nan")

    def unit(self):
        return self._unit


@pytest.fixture
def one_kernel_unread(monkeypatch, tmp_path):
    """The real decode12 report, its kernel 2 (the decode qkv GEMM) NaN in every numeric metric,
    as ncu gave a kernel of the public H800 report; read by the real report module."""
    import ncu_report

    real_load = ncu_report.load_report

    def action(report_range, index):
        real = report_range.action_by_idx(index)
        if index != 2:
            return real
        numeric = lambda metric: isinstance(metric.value(), (int, float))  # noqa: E731
        return _Wrapped(real, metric_by_name=lambda name: (
            _NaN(real.metric_by_name(name).unit()) if numeric(real.metric_by_name(name))
            else real.metric_by_name(name)))

    def load(path):
        context = real_load(path)
        return _Wrapped(context, range_by_idx=lambda r: _Wrapped(
            context.range_by_idx(r), action_by_idx=lambda i: action(context.range_by_idx(r), i)))

    monkeypatch.setattr(ncu_report, "load_report", load)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu: the report module reads it


def test_a_kernel_ncu_could_not_measure_is_kept_marked_and_out_of_the_sums(one_kernel_unread, data_dir):
    from profiler.ingest.capture import read_capture

    kernels = read_capture(data_dir / "decode12.ncu-rep.gz").kernels.sort_values("kernel_id")
    assert kernels["measured"].tolist() == [True, True, False] + [True] * 9
    result = compute_views(kernels)
    times = result.kernels.set_index("kernel_id")["time_ns"]
    assert pd.isna(times[2]) and times.drop(2).notna().all()
    # the phase keeps the eleven measured kernels' time: 125.9 µs, all of the workload
    decode = result.gap[(result.gap["phase"] == "decode") & (result.gap["role"] == "all")].iloc[0]
    assert decode["time_ns"] == pytest.approx(times.drop(2).sum()) and decode["time_ns"] == pytest.approx(125_900, abs=60)
    phase = verdict_document(verdict(result))["phases"][0]
    assert phase["share_pct"] == pytest.approx(100.0) and phase["time_ns"] == pytest.approx(decode["time_ns"])
    # one GPU, said once: the unread kernel's empty Device and CC cells are no second one
    assert len(result.devices) == 1
    line = device_line(result.devices)
    assert line.startswith("NVIDIA H200: CC 9.0, 132 SMs") and not line.startswith("2 x") and ";" not in line
    assert "1 kernel(s) ncu could not measure (ID 2): kept, n/a, left out of the sums" in \
        capture_line(result.devices, result.kernels)
    json.loads(views_json(result))
    # a store written before the `measured` column: the same rows are found from their counters
    old = compute_views(kernels.drop(columns=["measured"]))
    assert old.gap["time_ns"].tolist() == pytest.approx(result.gap["time_ns"].tolist(), nan_ok=True)


def test_the_store_keeps_the_capture_facts_and_old_stores_still_read(one_kernel_unread, data_dir, tmp_path):
    from profiler.ingest.store import RUNS_TABLE, Store
    from reports.runs import print_run, run_summary

    store = Store(tmp_path / "store")
    row, _ = store.ingest(data_dir / "decode12.ncu-rep.gz", name="unread")
    meta = json.loads((tmp_path / "store" / "runs" / f"run={row['id']}" / "_run.json").read_text())
    facts = meta["run"]["capture"]
    assert json.loads(facts) == {"devices": [0], "device_count": 1, "unmeasured_kernels": 1,
                                 "unmeasured_kernel_ids": [2], "replay_passes": 19.0}
    assert store.kernels("unread")["measured"].sum() == 11
    console = Console(width=200, record=True, file=io.StringIO())
    print_run(run_summary(store.run("unread"), store.kernels("unread"), 1), console=console)
    assert "1 device(s) [0], 19 replay passes per kernel, 1 kernel(s) ncu could not measure (ID 2)" \
        in console.export_text()
    # a runs table written before the capture facts: it reads, and show says nothing of them
    runs = pd.read_parquet(tmp_path / "store" / RUNS_TABLE).drop(columns=["capture"])
    runs.to_parquet(tmp_path / "store" / RUNS_TABLE, index=False)
    console = Console(width=200, record=True, file=io.StringIO())
    print_run(run_summary(store.run("unread"), store.kernels("unread"), 1), console=console)
    assert "replay passes" not in console.export_text()
    print_views(compute_views(store.kernels("unread")), store.run("unread"), console=console)


def test_a_base_clock_capture_says_so_and_takes_its_peaks_from_the_capture(data_dir):
    """The public A100 PCIe report was made with ncu's default --clock-control base: its kernels ran
    at 1.03-1.05 GHz of a 1.41 GHz maximum. Its DRAM peak is ncu's own."""
    from profiler.ingest.capture import read_capture

    result = compute_views(read_capture(data_dir / PUBLIC_A100_PCIE).kernels)
    device = result.devices.iloc[0]
    assert device["sm_clock_measured_hz"] == pytest.approx(1.0486e9, rel=1e-3)
    assert device["max_clock_hz"] == 1.41e9
    assert device["max_clock_source"] == "capture: device__attribute_max_gpu_frequency_khz"
    assert device["sm_count_source"] == "capture: launch__sm_count"
    assert device["clocks"] == "locked"
    assert device["dram_peak_source"] == "capture: dram__bytes.sum.peak_sustained"
    words = capture_line(result.devices, result.kernels, {})
    assert words.startswith("Capture: SM clock 1.05 GHz measured, 74 % of its 1.41 GHz maximum: clocks "
                            "locked below boost (ncu's default --clock-control base); every time is at that clock")
    document = views_document(result)
    assert document["devices"][0]["clocks"] == "locked" and \
        document["devices"][0]["max_clock_source"] == "capture: device__attribute_max_gpu_frequency_khz"


def test_free_clocks_and_a_clock_measured_where_the_capture_has_no_maximum(data_dir):
    """The H200 captures ran with --clock-control none: 1.97 GHz on their faster kernels, of 1.98.
    The details export carries no device attributes: its maximum clock is the one it measured
    (cycles over time, near the CC 9.0 table's ceiling), not the table's, the way an H100 PCIe's
    1.76 GHz is its own and not the SXM part's 1.98."""
    from profiler.ingest.capture import read_capture

    raw = compute_views(read_capture(data_dir / "decode12_raw.csv").kernels).devices.iloc[0]
    assert raw["clocks"] == "free" and raw["max_clock_hz"] == 1.98e9
    assert raw["sm_clock_measured_hz"] == pytest.approx(1.9716e9, rel=1e-3)
    details = compute_views(read_capture(data_dir / "decode12_details.csv").kernels).devices.iloc[0]
    assert details["max_clock_hz"] == pytest.approx(1.9716e9, rel=1e-3)
    assert details["max_clock_source"] == "capture: sm__cycles_elapsed.avg / gpu__time_duration.sum (measured)"
    # a measured clock far below the table's ceiling is a locked one: the table's ceiling stays
    slow = read_capture(data_dir / "decode12_details.csv").kernels
    slow["sm__cycles_elapsed.avg"] = slow["sm__cycles_elapsed.avg"] * 0.6
    locked = compute_views(slow).devices.iloc[0]
    assert locked["max_clock_hz"] == 1.98e9 and locked["max_clock_source"] == "table: CC 9.0"
    assert locked["clocks"] == "locked"


def test_the_details_page_frequencies_are_read_as_ncus_metrics(data_dir):
    """SpeedOfLight's "SM Frequency" and "DRAM Frequency" are gpc__ and dram__cycles_elapsed.avg
    .per_second (the raw page of the same --set full run has them so)."""
    from profiler.ingest.capture import read_capture

    kernels = read_capture(data_dir / "full_details.csv.gz").kernels
    assert kernels["gpc__cycles_elapsed.avg.per_second"].iloc[0] == pytest.approx(1.95e9)
    assert kernels["dram__cycles_elapsed.avg.per_second"].iloc[0] == pytest.approx(3.19e9)
    assert kernels["measured"].all()
