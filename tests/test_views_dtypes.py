"""Every tensor input type and path, on a real H200 capture (tests/data/h200_dtypes_raw.csv: one
4096³ GEMM each in bf16, tf32, fp8 and int8) and against the published rates of each generation."""
from __future__ import annotations

import numpy as np
import pytest

from views import device
from views.registry import compute_views

SHAPES = {"gemm": (4096, 4096, 4096)}  # the probe's ranges carry none
PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
HMMA_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"


@pytest.fixture(scope="module")
def capture(data_dir):
    from profiler.ingest.capture import read_capture

    return read_capture(data_dir / "h200_dtypes_raw.csv", shapes=SHAPES)


@pytest.fixture(scope="module")
def gemms(capture):
    kernels = compute_views(capture.kernels).kernels
    gemm = kernels[kernels["kind"] == "gemm"].set_index("tensor_dtype")
    assert list(gemm.index) == ["bf16", "tf32", "fp8", "int8"]
    return gemm


def _gemm_rows(capture, result):
    return result.kernels[(result.kernels["kind"] == "gemm").to_numpy()]


def test_each_type_runs_at_its_path_rate_and_passes_v2(gemms):
    # ops per tensor-busy cycle per SM, measured: wgmma bf16 4096, tf32 half, fp8 double; the sm80
    # IMMA kernel cuBLAS picked for int8 runs at 2/3 of the device's 8192 (IGMMA)
    expected = {"bf16": ("gmma", 4096), "tf32": ("gmma", 2048), "fp8": ("gmma", 8192), "int8": ("imma", 8192 * 2 / 3)}
    for dtype, (path, rate) in expected.items():
        row = gemms.loc[dtype]
        assert row["mma_path"] == path, dtype
        assert row["tensor_ops_per_cycle_per_sm"] == pytest.approx(rate, rel=1e-3), dtype
        assert row["path_ops_per_cycle_per_sm"] == pytest.approx(rate, rel=1e-9), dtype
        assert row["validation_V2"] == "pass", dtype
        assert row["tensor_ops"] == 2 * 4096 ** 3 and row["fill"] == 1.0  # 2·M·N·K, no padding
    assert gemms["validation_V3"].eq("pass").all() and gemms["validation_V8"].eq("pass").all()


def test_fp16_and_int8_on_wgmma_run_at_the_devices_best_rates(data_dir):
    """The second probe (tests/data/h200_dtypes2_raw.csv, benchmarks/h200/dtypes2.py): fp16 through
    cuBLAS, and int8 through a Triton kernel that Hopper runs on wgmma (IGMMA), not the sm80 IMMA
    kernel cuBLAS picks: each at the device's own rate for its type, nothing lost to the path."""
    from profiler.ingest.capture import read_capture

    capture = read_capture(data_dir / "h200_dtypes2_raw.csv", shapes=SHAPES)
    kernels = compute_views(capture.kernels).kernels.set_index("tensor_dtype")
    assert list(kernels.index) == ["fp16", "int8"] and set(kernels["kind"]) == {"gemm"}
    for dtype, rate in (("fp16", 4096), ("int8", 8192)):
        row = kernels.loc[dtype]
        assert row["mma_path"] == "gmma", dtype
        assert row["tensor_ops_per_cycle_per_sm"] == pytest.approx(rate, rel=1e-3), dtype
        assert row["path_rate_share"] == 1.0 and row["validation_V2"] == "pass", dtype
        assert row["tensor_ops"] == 2 * 4096 ** 3
    assert kernels.loc["fp16", "tensor_pipe_pct"] == 95.0
    assert kernels.loc["int8", "tensor_device_pct"] == pytest.approx(59.05, abs=0.01)


def test_fp8_is_counted_although_no_per_path_counter_moves(capture, gemms):
    fp8 = capture.kernels.loc[gemms.loc["fp8", "kernel_id"] == capture.kernels["kernel_id"]].iloc[0]
    moved = [c for c in capture.kernels if c.startswith("sm__ops_path_tensor") and c.endswith(".sum")
             and fp8[c] > 0]
    assert moved == ["sm__ops_path_tensor_src_fp8.sum"]  # QGMMA has no op_hgmma counter on Hopper
    assert gemms.loc["fp8", "mma_path"] == "gmma"  # the device's native path takes it
    assert gemms.loc["fp8", "tensor_pipe_pct"] == 86.33


def test_int8_reads_the_whole_tensor_pipe_and_costs_a_third_of_the_device(capture, gemms):
    int8 = gemms.loc["int8"]
    # the HMMA part of the pipe reads 0 % for IMMA: only the whole pipe's counter sees the work
    source = capture.kernels.set_index("kernel_id").loc[int8["kernel_id"]]
    assert source[HMMA_PIPE] == 0 and source[PIPE] == 71.37
    assert int8["tensor_pipe_pct"] == 71.37
    # the older kernel's cost as a number: its path runs at 2/3 of the device's best for int8, so
    # the MMA work is 2/3 of the busy share when measured against IGMMA
    assert int8["path_rate_share"] == pytest.approx(2 / 3)
    assert int8["best_ops_per_cycle_per_sm"] == 8192
    assert int8["tensor_device_pct"] == pytest.approx(int8["tensor_pipe_elapsed_pct"] * 2 / 3, rel=1e-3)
    assert int8["arch_path"] == "sm80 imma" and int8["claimed_path"] == "imma"
    assert "its path runs at 0.67 of the device's best rate" in int8["validation_detail_V8"]
    for dtype in ("bf16", "tf32", "fp8"):
        assert gemms.loc[dtype, "path_rate_share"] == 1.0


def test_a_reader_of_the_hmma_pipe_alone_would_see_int8_idle_and_v2_says_so(capture):
    """The metric list before this one: the HMMA pipe only. The int8 GEMM then reads 0 % busy,
    and V2 fails it rather than showing an idle tensor core."""
    older = capture.kernels.drop(columns=[PIPE])
    kernels = compute_views(older, ["V2"]).kernels
    int8 = kernels[(kernels["kind"] == "gemm") & (kernels["tensor_dtype"] == "int8")].iloc[0]
    assert int8["tensor_pipe_pct"] == 0 and int8["validation_V2"] == "fail"
    assert "ops imply 71.3" in int8["validation_detail_V2"]


@pytest.mark.parametrize("counter, dtype", [("sm__ops_path_tensor_src_fp8.sum", "fp8"),
                                            ("sm__ops_path_tensor_src_tf32_dst_fp32.sum", "tf32")])
def test_a_scaled_op_counter_fails_v2(capture, counter, dtype):
    kernels = capture.kernels.copy()
    kernels[counter] = kernels[counter] * 1.10
    if dtype == "tf32":  # its per-path counter names the same ops: both scaled, as a wrong unit would
        column = "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum"
        kernels[column] = kernels[column] * 1.10
    result = compute_views(kernels, ["V2"]).kernels
    row = result[(result["kind"] == "gemm") & (result["tensor_dtype"] == dtype)].iloc[0]
    assert row["validation_V2"] == "fail" and "ops imply" in row["validation_detail_V2"]


def test_a_capture_without_the_fp8_counter_says_what_it_cannot_count(capture):
    kernels = compute_views(capture.kernels.drop(columns=["sm__ops_path_tensor_src_fp8.sum"]), ["V2"]).kernels
    fp8 = kernels[kernels["kernel_name"].str.contains("qqtst")].iloc[0]
    assert fp8["tensor_ops"] == 0 and fp8["validation_V2"] == "fail"
    assert fp8["validation_detail_V2"] == ("1,048,576 wgmma instructions ran, yet no op counter counts "
                                           "their work (the capture counts no fp16, fp8 ops)")


# Published dense peaks (TFLOP/s or TOPS), SM count and boost clock of one product per compute
# capability, as device.py cites them: the table's per-SM rates must give them back.
PUBLISHED = [
    ("8.0", "A100", 108, 1.41e9, {("hmma", "bf16"): 312, ("hmma", "tf32"): 156, ("imma", "int8"): 624}),
    ("8.6", "A40", 84, 1.74e9, {("hmma", "fp16"): 149.7, ("hmma", "tf32"): 74.8, ("imma", "int8"): 299.3}),
    ("8.9", "L4", 58, 2.04e9, {("hmma", "bf16"): 121, ("hmma", "tf32"): 60, ("hmma", "fp8"): 242,
                               ("imma", "int8"): 242}),
    ("9.0", "H100 SXM", 132, 1.83e9, {("gmma", "bf16"): 989, ("gmma", "tf32"): 495, ("gmma", "fp8"): 1979,
                                      ("gmma", "int8"): 1979}),
    ("10.0", "B200", 148, 1.856e9, {("tcgen05", "bf16"): 2250, ("tcgen05", "tf32"): 1125,
                                    ("tcgen05", "fp8"): 4500, ("tcgen05", "int8"): 4500}),
    ("12.0", "RTX 5090", 170, 2.407e9, {("hmma", "bf16"): 419}),
]


@pytest.mark.parametrize("cc, product, sms, clock, peaks", PUBLISHED, ids=[p[1] for p in PUBLISHED])
def test_the_rate_table_gives_back_the_published_peaks(cc, product, sms, clock, peaks):
    for (path, dtype), tflops in peaks.items():
        rate = device.TENSOR_RATES[cc][path][dtype]
        assert rate * sms * clock / 1e12 == pytest.approx(tflops, rel=0.015), (product, path, dtype)


def test_the_best_path_per_type_and_the_older_paths_on_hopper():
    import pandas as pd
    from views.context import Context

    ctx = Context(pd.DataFrame({"kernel_name": ["a", "b", "c"], "cc": ["9.0", "8.0", "7.5"]}))
    assert list(device.best_tensor_rate(ctx, "bf16")[:2]) == [4096, 2048]
    assert np.isnan(device.best_tensor_rate(ctx, "bf16")[2])  # a capability the table lacks
    assert device.tensor_rate(ctx, "hmma", "bf16")[0] == pytest.approx(4096 * 2 / 3)
    assert np.isnan(device.tensor_rate(ctx, "gmma", "bf16")[1])  # no wgmma on Ampere
    assert np.isnan(device.best_tensor_rate(ctx, "fp8")[1])  # nor fp8
