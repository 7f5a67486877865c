"""The capture reader over the real H200 captures."""
from __future__ import annotations

import gzip

import pandas as pd
import pytest

from profiler.ingest import nvtx
from profiler.ingest.capture import read_capture, sniff
from profiler.ingest.shapes import parse_shapes_file
from profiler.errors import BadInput


def by_id(capture):
    return capture.kernels.set_index("kernel_id")


def test_targeted_has_188_kernels_with_exact_values(targeted_capture):
    kernels = by_id(targeted_capture)
    assert len(kernels) == 188
    assert list(kernels.index) == list(range(188))
    # values as printed in the CSV ("6,624", "8,421,120", "11,890.18"), thousands separators gone
    k95 = kernels.loc[95]
    assert k95["kernel_name"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert k95["gpu__time_duration.sum"] == 6624.0
    assert k95["dram__bytes_read.sum"] == 8421120.0
    assert k95["sm__cycles_elapsed.avg"] == pytest.approx(11890.18)
    assert (k95["grid_x"], k95["grid_y"], k95["grid_z"], k95["grid_blocks"]) == (4, 8, 1, 32)
    assert (k95["block_threads"], k95["cc"], k95["device"], k95["stream"]) == (384, "9.0", 0, 7)
    assert kernels.loc[0, "gpu__time_duration.sum"] == 18720.0
    assert kernels.loc[4, "sm__cycles_elapsed.avg"] == pytest.approx(112398.71)
    assert targeted_capture.units["gpu__time_duration.sum"] == "ns"
    assert targeted_capture.units["dram__bytes_read.sum"] == "byte"
    assert targeted_capture.units["launch__sm_count"] == "SM"


def test_targeted_nvtx_phase_role(targeted_capture):
    kernels = by_id(targeted_capture)
    k95 = kernels.loc[95]
    assert list(k95["nvtx_stack"]) == ["<default domain>:decode", "<default domain>:o_proj"]
    assert (k95["phase"], k95["role"], k95["role_source"], k95["kind"]) == ("decode", "o_proj", "nvtx", "gemm")
    # the residual add runs inside o_proj: role from the range, kind from the name
    assert (kernels.loc[96, "role"], kernels.loc[96, "kind"]) == ("o_proj", "elementwise")
    # cuDNN's SDPA reduction in the attention range
    assert (kernels.loc[94, "role"], kernels.loc[94, "kind"]) == ("attention", "attention")
    # random init before any range: no stack, phase other, role guessed from the name
    assert list(kernels.loc[0, "nvtx_stack"]) == []
    assert (kernels.loc[0, "phase"], kernels.loc[0, "role_source"]) == ("other", "name")
    counts = kernels.groupby("phase").size().to_dict()
    # the workload ran twice: the first prefill is cold, the second warm
    assert counts == {"other": 22, "cold_prefill": 22, "warm_prefill": 22, "decode": 122}
    assert set(kernels.loc[kernels.phase == "decode", "role"]) == set(nvtx.ROLES)


def test_shapes_mapping_fills_by_phase(targeted_capture):
    kernels = by_id(targeted_capture)
    assert tuple(kernels.loc[95, ["shape_m", "shape_n", "shape_k"]]) == (4, 2048, 2048)
    prefill_gate_up = kernels[(kernels.phase == "warm_prefill") & (kernels.role == "gate_up_proj")]
    assert set(prefill_gate_up["shape_m"]) == {2048} and set(prefill_gate_up["shape_n"]) == {11264}
    assert kernels.loc[kernels.role == "attention", "shape_m"].isna().all()


def test_sections_capture_same_kernels_other_metrics(targeted_capture, sections_capture):
    targeted, sections = by_id(targeted_capture), by_id(sections_capture)
    assert len(sections) == 188
    assert (targeted["kernel_name"] == sections["kernel_name"]).all()
    assert (targeted["role"] == sections["role"]).all()
    assert sections.loc[95, "gpu__time_duration.sum"] == 6656.0  # a separate replay: close, not equal
    assert "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum" not in sections


def test_shapes_in_nvtx_messages(data_dir):
    kernels = by_id(read_capture(data_dir / "decode12_raw.csv"))
    assert list(kernels.loc[2, "nvtx_stack"]) == ["<default domain>:decode",
                                                  "<default domain>:qkv_proj M=4 N=6144 K=4096"]
    assert tuple(kernels.loc[2, ["shape_m", "shape_n", "shape_k"]]) == (4, 6144, 4096)
    assert tuple(kernels.loc[10, ["role", "shape_n"]]) == ("gate_up_proj", 28672)
    assert kernels.loc[7, "kind"] == "splitk_reduce" and kernels.loc[7, "role"] == "o_proj"


def test_three_readers_agree_on_decode12(data_dir):
    """The report, its raw export (scaled units: Mbyte, us) and its details export."""
    report = by_id(read_capture(data_dir / "decode12.ncu-rep.gz"))
    raw = by_id(read_capture(data_dir / "decode12_raw.csv"))
    details = by_id(read_capture(data_dir / "decode12_details.csv"))
    assert report.loc[2, "dram__bytes_read.sum"] == 50382080.0
    for frame in (raw, details):
        # the report module demangles templates more fully (at::native::, (int)128); names are
        # stored in one form, so each kernel has one name however the report was read
        assert list(frame["kernel_name"]) == list(report["kernel_name"])
        assert list(frame["kind"]) == list(report["kind"])
        assert list(frame["role"]) == list(report["role"])
        assert frame.loc[2, "kernel_name"] == report.loc[2, "kernel_name"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
        for metric in ("dram__bytes_read.sum", "gpu__time_duration.sum", "launch__grid_size"):
            pd.testing.assert_series_equal(frame[metric], report[metric], rtol=5e-3, check_names=False)
    assert report.loc[2, "shape_n"] == 6144


def test_one_form_of_each_kernel_name():
    from profiler.ingest.capture_table import common_kernel_name
    assert common_kernel_name("void at::native::elementwise_kernel<(int)128, (int)4, F>(int, T3)") == \
        "void at::elementwise_kernel<128, 4, F>(int, T3)"
    assert common_kernel_name("k<(unsigned int)2, (bool)1, (long)-3>(int)") == "k<2, 1, -3>(int)"


def test_details_page_of_full_set(data_dir):
    capture = read_capture(data_dir / "full_details.csv.gz")
    kernels = by_id(capture)
    assert capture.source_format == "details" and len(kernels) == 188
    k5 = kernels.loc[5]
    assert k5["gpu__time_duration.sum"] == pytest.approx(21540.0)  # "21.54 us"
    assert k5["launch__grid_size"] == 22528
    assert k5["sm__warps_active.avg.pct_of_peak_sustained_active"] == pytest.approx(80.03)
    assert k5["dram__bytes.sum.per_second"] == pytest.approx(3.23e12)  # "Memory Throughput", Tbyte/s
    assert capture.units["dram__bytes.sum.per_second"] == "byte/second"
    assert k5["Launch Statistics: Cluster Scheduling Policy"] == "PolicySpread"
    assert kernels.groupby("phase").size().to_dict() == {
        "cold_prefill": 22, "decode": 122, "other": 22, "warm_prefill": 22}


def test_stdout_noise_among_rows_and_gzip(tmp_path, data_dir):
    lines = (data_dir / "targeted_raw.csv").read_text().splitlines(keepends=True)
    noisy = lines[:10] + ["step 3 done\n", "==PROF== Disconnected from process 1\n", '{"json": 1}\n'] + lines[10:]
    path = tmp_path / "noisy.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.writelines(noisy)
    capture = read_capture(path)
    assert len(capture.kernels) == 188
    assert any("skipped" in note for note in capture.notes)
    assert capture.kernels["gpu__time_duration.sum"].sum() == read_capture(
        data_dir / "targeted_raw.csv").kernels["gpu__time_duration.sum"].sum()


def test_unknown_metric_columns_are_kept(tmp_path, data_dir):
    lines = (data_dir / "decode12_raw.csv").read_text().splitlines()
    lines[0] += ',"my__custom_metric.sum","my__label"'
    lines[1] += ',"widget",""'
    lines[2:] = [line + f',"{i},000","alpha"' for i, line in enumerate(lines[2:])]
    path = tmp_path / "extra.csv"
    path.write_text("\n".join(lines) + "\n")
    capture = read_capture(path)
    assert list(capture.kernels["my__custom_metric.sum"])[:3] == [0.0, 1000.0, 2000.0]
    assert capture.units["my__custom_metric.sum"] == "widget"
    assert set(capture.kernels["my__label"]) == {"alpha"}


def test_sniff_hands_each_format_to_its_one_reader(data_dir):
    import inspect

    from profiler.ingest.capture import READERS

    for name, kind in (("targeted_raw.csv", "raw"), ("decode12_details.csv", "details"),
                       ("full_details.csv.gz", "details"), ("decode12.ncu-rep.gz", "ncu-rep")):
        assert sniff(data_dir / name) == kind and read_capture(data_dir / name).source_format == kind
    assert len({str(inspect.signature(read)) for read in READERS.values()}) == 1  # one interface


def test_parse_stack_with_colons_and_custom_domain():
    cell = '77  "smlens:decode step=3:none:none:none:none:none:none"  "smlens:attn a:b:none:none:none:none:none:none" '
    assert nvtx.parse_stack(cell) == ["smlens:decode step=3", "smlens:attn a:b"]
    info = nvtx.classify(nvtx.parse_stack(cell), "flash_fwd_kernel")
    assert (info["phase"], info["role"], info["kind"]) == ("decode", "attention", "attention")


def test_shapes_file(tmp_path):
    path = tmp_path / "shapes.txt"
    path.write_text("# role M N K\ndecode/qkv_proj 4 3072 2048\no_proj M=8 N=2048 K=2048\n")
    assert parse_shapes_file(path) == {"decode/qkv_proj": (4, 3072, 2048), "o_proj": (8, 2048, 2048)}
    path.write_text("nonsense 1 2\n")
    with pytest.raises(BadInput, match="expected"):
        parse_shapes_file(path)


def test_attention_shape_from_nvtx_and_its_fill(data_dir):
    """Real H200 capture of Llama-3.1-8B at batch 8: the attention range carries B H Sq Skv D."""
    from views.registry import compute_views

    kernels = read_capture(data_dir / "h200_runs" / "llama-3.1-8b-b8-p512.csv.gz").kernels
    prefill = kernels[(kernels.phase == "warm_prefill") & (kernels.kind == "attention")].iloc[0]
    assert (prefill.attn_batch, prefill.attn_heads, prefill.attn_q_len, prefill.attn_kv_len,
            prefill.attn_head_dim, prefill.attn_causal) == (8, 32, 512, 512, 128, 1)
    figures = compute_views(kernels).kernels.set_index("kernel_id")
    # causal prefill: useful = 4·B·H·S²·D / 2; the flash kernel computes whole diagonal tiles
    row = figures.loc[prefill.kernel_id]
    assert row["fill"] == pytest.approx(4 * 8 * 32 * 512 * 512 * 128 / 2 / row["tensor_ops"])
    assert 0.5 < row["fill"] <= 1.0
    decode = kernels[(kernels.phase == "decode") & (kernels.kind == "attention")]
    assert set(decode.attn_q_len) == {1} and set(decode.attn_causal) == {0}
    # the flash-decoding reduce has no MMA ops: no fill, not a fill of zero
    reduce = figures.loc[decode.kernel_id].query("tensor_ops == 0")
    assert len(reduce) and reduce["fill"].isna().all()


def test_small_blocks_give_the_same_table(data_dir, monkeypatch):
    """A capture streamed in many blocks (types fixed by the first, cold/warm prefill carried
    across blocks) equals the capture read in one."""
    from profiler.ingest import capture_source
    from profiler.ingest.capture_raw import iter_raw_tables

    whole = read_capture(data_dir / "targeted_raw.csv").kernels
    monkeypatch.setattr(capture_source, "BLOCK_BYTES", 20_000)
    tables = [table for table, _ in iter_raw_tables(data_dir / "targeted_raw.csv")]
    # some blocks hold only kernels outside any NVTX range: their stacks keep the others' type
    assert len(tables) > 20 and min(len(t["nvtx_stack"].combine_chunks().flatten()) for t in tables) == 0
    blocks = read_capture(data_dir / "targeted_raw.csv").kernels
    pd.testing.assert_frame_equal(blocks, whole)
    assert blocks.groupby("phase").size()["warm_prefill"] == 22
