"""Captures other people made on other GPUs (tests/data/public/PROVENANCE.md): each ingests, views
and reports; what a capture lacks is n/a with the reason, never a crash or a zero."""
from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from reports.verdict_text import missing_text
from reports import html as report
from reports.formats.views_json import views_json
from reports.terminal import print_views
from views.registry import VIEWS, compute_views

PUBLIC = Path(__file__).parent / "data" / "public"
FILES = ("a100_bert_fmha_details.csv.gz", "a100pcie_cutlass_b2b_gemm.ncu-rep.gz",
         "rtx5090_cutlass_bf16_gemm_details.csv")


def _views(name: str):
    from profiler.ingest.capture import read_capture

    capture = read_capture(PUBLIC / name)
    return capture, compute_views(capture.kernels)


@pytest.fixture(scope="module")
def public():
    return {name: _views(name) for name in FILES}


@pytest.mark.parametrize("name", FILES)
def test_every_public_capture_views_and_reports(public, name):
    capture, result = public[name]
    document = json.loads(views_json(result, run=name))  # allow_nan=False: no NaN leaks
    assert len(document["kernels"]) == len(capture.kernels) > 0
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": name}, console=console)
    assert "The gap" in console.export_text()
    text = report.render_report(report.from_views(result, {"id": "x", "name": name}, capture.kernels))
    assert '<section id="gap">' in text
    # every n/a carries its reason
    for view in VIEWS:
        na = result.kernels[result.kernels[f"validation_{view}"] == "n/a"]
        reasons = na[f"validation_detail_{view}"].astype(str)
        # the two per-kernel sub-checks of V7 and V8 leave kernels they do not apply to without one
        if view not in ("V7", "V8", "V3"):
            assert (reasons != "").all(), (name, view)


def test_old_a100_details_export_takes_its_time_from_cycles(public):
    _, result = public["a100_bert_fmha_details.csv.gz"]
    k = result.kernels
    # 2021 layout: no duration; the elapsed cycles over their rate give it
    assert k["time_ns"].iloc[0] == pytest.approx(8382.7 / 999845384.51 * 1e9)
    assert k["time_ns"].notna().all()
    assert k["validation_detail_V1"].str.startswith("no gpu__time_duration.sum").all()
    # DRAM bytes from dram__bytes.sum (no read/write split)
    assert k["dram_bytes"].iloc[5] == 415488
    # below one wave (ncu's waves; the SM count is unknown): no tail, wave efficiency 1
    below = k[k["waves"] < 1]
    assert len(below) == 9 and (below["wave_efficiency"] == 1).all()
    assert k["wave_efficiency"].iloc[0] == pytest.approx(1.42 / 2)
    assert (k["validation_V2"] == "n/a").all() and k["tensor_pipe_pct"].isna().all()


def test_a100_int8_gemms_read_on_the_imma_pipe_not_as_idle(public):
    _, result = public["a100pcie_cutlass_b2b_gemm.ncu-rep.gz"]
    k = result.kernels
    # the HMMA pipe reads 0 %; the whole tensor pipe 20.5 to 26.9 %, and the path is IMMA
    assert k["tensor_pipe_pct"].round(1).tolist() == [26.9, 26.6, 20.5]
    assert (k["mma_path"] == "imma").all() and (k["claimed_path"] == "imma").all()
    assert (k["validation_V8"] == "pass").all()
    # no op counters in a full set: no ops, no rate check, the reason said
    assert k["tensor_ops"].isna().all() and (k["validation_V2"] == "n/a").all()
    # occupancy recomputed from 188 and 254 registers per thread, 44 and 93.7 KB of shared memory
    # in a 100 KB carveout: 2, 2 and 1 blocks per SM, as ncu says
    assert k["blocks_per_sm"].tolist() == [2, 2, 1]
    assert (k["validation_V4"] == "pass").all() and (k["validation_V5"] == "pass").all()
    device = result.devices.iloc[0]
    assert device["name"] == "NVIDIA A100 80GB PCIe" and device["cc"] == "8.0"
    # ncu's own peak: 1280 bytes per DRAM cycle at the 1.507 GHz it measured (the attributes give
    # 1512 MHz x 5120 bits x 2 = 1.935 TB/s, the datasheet's)
    assert device["dram_peak_bytes_per_s"] == pytest.approx(1280 * 1507163323.78)
    assert device["dram_peak_source"] == "capture: dram__bytes.sum.peak_sustained"
    assert device["dram_peak_from_attributes_bytes_per_s"] == pytest.approx(1.93536e12)
    assert device["dram_peak_published_bytes_per_s"] == 1.935e12


def test_rtx_5090_details_export(public):
    _, result = public["rtx5090_cutlass_bf16_gemm_details.csv"]
    k = result.kernels.iloc[0]
    assert k["tensor_ops"] == 12_532_580_352 and k["tensor_dtype"] == "bf16" and k["mma_path"] == "hmma"
    assert k["validation_V8"] == "pass"
    assert k["validation_detail_V8"] == "sm80 hmma kernel on a 12.0 device: the counters show hmma and no gmma"
    # no tensor-pipe counter, no SM count, no memory attributes: n/a, each with its reason
    assert k["validation_V2"] == "n/a" and "needs" in k["validation_detail_V2"]
    assert k["validation_V7"] == "n/a"
    assert k["validation_detail_V7"].startswith("no memory clock and bus width and no published peak")
    assert k["implied_dram_peak_bytes_per_s"] == pytest.approx(1.7645e12, rel=1e-4)



def test_a_device_the_capture_does_not_describe_is_said_so_not_na(public):
    """The RTX 5090 details export names no device and has no SM count or clock: the device line
    says what the capture lacks instead of a bare `n/a: CC 12.0, n/a SMs, n/a`."""
    from reports.terminal import device_line

    _, result = public["rtx5090_cutlass_bf16_gemm_details.csv"]
    line = device_line(result.devices)
    assert line == ("device not named in the capture: CC 12.0, SM count not in the capture, clock not in "
                    "the capture, DRAM peak 1.76 TB/s (implied by dram__throughput)")
    assert "n/a" not in line
    _, old = public["a100_bert_fmha_details.csv.gz"]
    assert device_line(old.devices).startswith("device not named in the capture: CC not in the capture, ")
    # the verdict names only the counters the capture lacks: this one has DRAM %
    from views.verdict import verdict

    assert missing_text(verdict(result)).startswith("the capture lacks the tensor-pipe counters and the FP32 counters: ")


class _Metric:
    def __init__(self, value, unit=""):
        self._value, self._unit = value, unit

    def value(self):
        return self._value

    def unit(self):
        return self._unit


class _Action:
    NameBase_DEMANGLED = 0

    def __init__(self, name, metrics):
        self._name, self._metrics = name, metrics

    def name(self, _base):
        return self._name

    def metric_names(self):
        return list(self._metrics)

    def metric_by_name(self, name):
        return _Metric(*self._metrics[name])

    def nvtx_state(self):
        return None


class _List:
    def __init__(self, items):
        self._items = items

    def num_ranges(self):
        return len(self._items)

    def range_by_idx(self, index):
        return self._items[index]

    num_actions, action_by_idx = num_ranges, range_by_idx


def test_a_report_whose_metrics_are_nan_for_a_kernel_is_na_not_a_crash(monkeypatch, tmp_path):
    """Seen in a public H800 report: ncu gives NaN for every metric of a kernel it could not
    read. Its identity stays empty and its figures n/a; the other kernels are viewed as usual."""
    from profiler.ingest.capture import read_capture

    read = {"launch__block_dim_x": (256.0,), "launch__block_dim_y": (1.0,), "launch__block_dim_z": (1.0,),
            "launch__grid_dim_x": (132.0,), "launch__grid_dim_y": (1.0,), "launch__grid_dim_z": (1.0,),
            "device__attribute_compute_capability_major": (9.0,),
            "device__attribute_compute_capability_minor": (0.0,),
            "gpu__time_duration.sum": (5.0, "usecond"), "sm__cycles_elapsed.avg": (9900.0, "cycle"),
            "sm__cycles_active.avg": (9000.0, "cycle")}
    unread = {name: (float("nan"),) + value[1:] for name, value in read.items()}
    module = types.ModuleType("ncu_report")
    module.load_report = lambda path: _List([_List([_Action("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", read),
                                                    _Action("lost_kernel", unread)])])
    monkeypatch.setitem(sys.modules, "ncu_report", module)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu: the report module reads it
    path = tmp_path / "h800.ncu-rep"
    path.write_bytes(b"NVR\x00")  # what a report starts with
    capture = read_capture(path)
    kernels = capture.kernels
    assert kernels["grid_blocks"].tolist()[0] == 132 and kernels["grid_blocks"].isna().tolist()[1]
    assert kernels["cc"].isna().tolist() == [False, True]
    result = compute_views(kernels)
    lost = result.kernels.iloc[1]
    assert lost["validation_V1"] == "n/a" and lost["validation_detail_V1"].startswith("needs")
    assert result.kernels.iloc[0]["sm_active_pct"] == pytest.approx(100 * 9000 / 9900)
    json.loads(views_json(result))
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": "h800"}, console=console)


# a pandas that warns a fill of floats from a gappy integer column will raise (pandas 3) fails here
@pytest.mark.filterwarnings("error:.*is not supported as a fill value:DeprecationWarning")
def test_the_real_decode12_report_with_one_kernel_unread_views_and_reports(monkeypatch, tmp_path, data_dir):
    """The bundled H200 report read by the real report module, with every numeric metric of its
    decode qkv GEMM (kernel 2) NaN as ncu gave them for a kernel of the H800 report: that kernel
    is n/a everywhere, the 11 others keep their figures, and the views, JSON and report all come."""
    import ncu_report

    real_load = ncu_report.load_report

    class Wrapped:
        """The real object with some of its methods replaced."""

        def __init__(self, real, **methods):
            self._real, self._methods = real, methods

        def __getattr__(self, name):
            return self._methods.get(name) or getattr(self._real, name)

    def unread(action):
        def metric_by_name(name):
            metric = action.metric_by_name(name)
            return _Metric(float("nan"), metric.unit()) if isinstance(metric.value(), (int, float)) else metric
        return Wrapped(action, metric_by_name=metric_by_name)

    def load(path):
        context = real_load(path)

        def range_by_idx(index):
            real = context.range_by_idx(index)
            return Wrapped(real, action_by_idx=lambda i: unread(real.action_by_idx(i)) if i == 2
                           else real.action_by_idx(i))
        return Wrapped(context, range_by_idx=range_by_idx)

    monkeypatch.setattr(ncu_report, "load_report", load)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu: the report module reads it
    from profiler.ingest.capture import read_capture

    capture = read_capture(data_dir / "decode12.ncu-rep.gz")
    kernels = capture.kernels.sort_values("kernel_id").reset_index(drop=True)
    assert len(kernels) == 12 and kernels.loc[2, "kernel_name"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert pd.isna(kernels.loc[2, "gpu__time_duration.sum"]) and pd.isna(kernels.loc[2, "grid_blocks"])
    result = compute_views(kernels)
    k = result.kernels.sort_values("kernel_id").reset_index(drop=True)
    for view in VIEWS:
        assert k.loc[2, f"validation_{view}"] == "n/a", view
    assert pd.isna(k.loc[2, "time_ns"]) and pd.isna(k.loc[2, "tensor_pipe_pct"])
    assert k["time_ns"].notna().sum() == 11 and k.loc[3, "validation_V1"] == "pass"
    json.loads(views_json(result, run="decode12"))
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": "decode12"}, console=console)
    assert "The gap" in console.export_text()
    text = report.render_report(report.from_views(result, {"id": "x", "name": "decode12"}, kernels))
    assert '<section id="gap">' in text
