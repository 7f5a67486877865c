"""Kernel-name parsing: the names the H200 captures hold, and the other libraries' name forms.

Names not in tests/data are written the way the libraries print them (cuBLAS legacy/xmma, CUTLASS
2.x and 3.x, FlashAttention-2 and -3, PyTorch's memory-efficient attention, Triton/Inductor).
"""
from __future__ import annotations

import pandas as pd
from pathlib import Path

import pytest

from views import kernel_names
from views.kernel_names import FAMILY_KIND, kind_of, parse_name, parse_names
from views.tiles import geometry


def test_every_name_in_the_h200_captures_parses_or_is_left_null(targeted_capture, data_dir):
    from profiler.ingest.capture import read_capture

    names = pd.concat([targeted_capture.kernels["kernel_name"],
                       read_capture(data_dir / "decode12_raw.csv").kernels["kernel_name"]]).unique()
    parsed = {name: parse_name(name) for name in names}
    families = {p["kernel_family"] for p in parsed.values()}
    assert families == {"cublaslt_nvjet", "cudnn_sdpa", "cudnn", "aten", "splitk_reduce"}
    # every GEMM and attention kernel of the captures has its tile
    for name, p in parsed.items():
        if p["kernel_family"] in ("cublaslt_nvjet", "cudnn_sdpa"):
            assert p["tile"] is not None, name


def test_kind_and_family_agree_on_every_name_of_the_bundled_captures(data_dir):
    """The kind patterns (what ingest stores) and the family table (what a kernels table without
    a kind column got) were two classifiers that disagreed on three names: one parser now, and
    where both speak they say the same."""
    from profiler.ingest.capture import read_capture

    files = [*data_dir.glob("*.csv*"), *(data_dir / "h200_runs").glob("*.csv.gz"),
             *(data_dir / "h200_det").glob("*.csv.gz")]
    names = set()
    for path in files:
        names |= set(read_capture(path).kernels["kernel_name"].astype(str))
    assert len(names) == 67  # 57, the 8 of the dtype probe (h200_dtypes_raw.csv) and 2 of the second
    for name in names:
        parsed = parse_name(name)
        by_pattern = kernel_names._pattern_kind(name)
        assert by_pattern is not None, name  # every bundled name is known by its words
        assert FAMILY_KIND.get(parsed["kernel_family"], by_pattern) == by_pattern, name
        assert parsed["kind"] == kind_of(name) == by_pattern, name
    # the three the two classifiers once disagreed on
    assert kind_of("det_gemm_fma_kernel") == kind_of("det_gemv_fma_kernel") == "gemm"
    lean = next(n for n in names if "cudnn::lean_reduction_kernel" in n)
    assert kind_of(lean) == "attention"  # cuDNN SDPA's split-KV reduction


def test_inductor_kernels_are_named_after_ops_they_do_not_run():
    """An inductor pointwise or reduction kernel lists the ops fused into it, and an attention or a
    GEMM may be among them (it prepares their inputs): it is elementwise work all the same. The name
    is from the H200's compiled static-cache decode (tests/data/h200_compiled)."""
    from profiler.ingest.capture import read_capture
    capture = Path(__file__).parent / "data" / "h200_compiled" / "hf-llama-3.1-8b-static-b8-p512.csv.gz"
    names = set(read_capture(capture).kernels["kernel_name"])
    fused = next(n for n in names if n.startswith("triton_poi_fused__scaled_dot_product_cudnn_attention"))
    assert kind_of(fused) == "elementwise"
    assert kind_of("triton_red_fused__to_copy_addmm_mean_1") == "elementwise"
    assert kind_of("triton_tem_fused_mm_0") == "gemm"  # a template kernel does the GEMM itself
    assert kind_of(next(n for n in names if n.startswith("cudnn_generated_fort_native_sdpa"))) == "attention"


def test_a_name_no_pattern_knows_takes_its_familys_kind():
    assert kind_of("triton_poi_fused_add_mul_0") == "elementwise"  # Inductor pointwise: family triton
    assert kind_of("void at::native::sort_postprocess_kernel<float>(float *)") == "elementwise"  # ATen
    assert kind_of("some_kernel_of_our_own") == "other" and kind_of(None) == "other"


@pytest.mark.parametrize("name, expected", [
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT",
     dict(kernel_family="cublaslt_nvjet", tile="64x8x64", tile_m=64, tile_n=8, tile_k=64, cluster_m=4,
          cluster_n=1, name_split_k=False, persistent=False, name_arch="sm90", name_mma="wgmma")),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
     dict(tile="64x8x64", name_split_k=True, persistent=False)),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN",
     dict(tile="192x192x64", cluster_m=2, cluster_n=1, persistent=True, name_split_k=False)),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dict(tile="256x128x64", cluster_m=1, cluster_n=2)),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_NNT",  # an older cuBLAS: no architecture in the name
     dict(kernel_family="cublaslt_nvjet", tile="128x256x64", name_arch=None, name_mma=None)),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0",
     dict(kernel_family="cudnn_sdpa", tile="16x128x128", name_arch="sm80", name_mma="wmma")),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     dict(kernel_family="cudnn_sdpa", tile="64x128x128", name_arch="sm90", name_mma="wgmma")),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, 0, "
     "float, __nv_bfloat16, __nv_bfloat16, 1, 0, 0, 0>(cublasLt::cublasSplitKParams<T6>, const T4 *)",
     dict(kernel_family="splitk_reduce", tile=None, name_arch=None)),
    ("void cudnn::lean_reduction_kernel<0, 0, 0>(void *, float *, float *)",
     dict(kernel_family="cudnn", tile=None)),
    ("void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<c10::BFloat16>, std::array<char *, 3>>"
     "(int, T2, T3)", dict(kernel_family="aten", tile=None, name_mma=None)),
    ("void at::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, 1>(int, T2, const T1 *)",
     dict(kernel_family="aten")),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
     dict(kernel_family="cublas", tile="128x128x64", name_arch="sm80", name_mma="hmma")),
    ("volta_h884gemm_128x128_ldg8_nn", dict(kernel_family="cublas", tile="128x128", name_arch="sm70")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
     "_kernel__5x_cublas", dict(kernel_family="cublas", tile="128x128x64", name_arch="sm90", name_mma="wgmma")),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
     dict(kernel_family="cublas", tile="128x128x32", name_arch="sm80", name_mma="hmma")),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized"
     "_cooperative_epi_tma",
     dict(kernel_family="cutlass", tile="128x256x64", cluster_m=1, cluster_n=2, persistent=True,
          name_arch="sm90", name_mma="wgmma")),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)",
     dict(kernel_family="cutlass", tile="64x64x32", name_arch="sm80", name_mma="hmma")),
    ("cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_32x1_nn_align8",
     dict(kernel_family="cutlass", tile="32x32x32", name_mma="wmma")),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedCooperative"
     "<4, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1>>, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,"
     " cute::tuple<cute::C<128>, cute::C<256>, cute::C<64>>, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1>>>>>"
     "(T1::Params)",
     dict(kernel_family="cutlass", tile="128x256x64", cluster_m=2, cluster_n=1, name_arch="sm90",
          name_mma="wgmma", persistent=True)),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t>>, false, true, false>(Flash_fwd_params)",
     dict(kernel_family="flash_attention", tile="64x128x128", name_arch="sm80", name_mma="hmma")),
    ("void pytorch_flash::flash_fwd_splitkv_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 64, 128, 4, "
     "false, false, cutlass::bfloat16_t>>()", dict(kernel_family="flash_attention", name_split_k=True)),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
     "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, cute::tuple<cute::C<128>, "
     "cute::C<176>, cute::C<128>>>>>>(T1::Params)",
     dict(kernel_family="flash_attention", tile="128x176x128", name_arch="sm90", name_mma="wgmma")),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t,"
     " cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
     dict(kernel_family="cutlass_fmha", tile="64x128", name_arch="sm80", name_mma="hmma")),
    ("triton_poi_fused_add_mul_0", dict(kernel_family="triton", tile=None)),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", dict(kernel_family="triton")),
    ("gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false>(T13)",
     dict(kernel_family="cublas", tile=None)),
])
def test_names_of_each_library(name, expected):
    parsed = parse_name(name)
    for key, value in expected.items():
        assert parsed[key] == value, (key, parsed)


@pytest.mark.parametrize("name", ["", None, "my_kernel", "_Z10foo_kernelPfi", "nvjet_garbage",
                                  "cudnn_generated_fort_native_sdpa_weird", "x" * 5000, "\u00e9\u4e2d"])
def test_an_unknown_name_is_null_not_an_error(name):
    parsed = parse_name(name)
    assert parsed["tile"] is None
    assert parsed["kernel_family"] in (None, "cudnn_sdpa")  # an sdpa name without a tile keeps its family


def test_parse_names_maps_every_row_and_keeps_nulls():
    names = pd.Series(["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", None, "weird",
                       "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"], index=[10, 11, 12, 13])
    table = parse_names(names)
    assert list(table.index) == [10, 11, 12, 13]
    assert list(table["tile"].astype(object).where(table["tile"].notna(), None)) == [
        "64x8x64", None, None, "64x8x64"]
    assert table["tile_m"].tolist()[0] == 64 and pd.isna(table["tile_m"].tolist()[1])
    assert list(table["arch_path"].astype(object).fillna("-")) == ["sm90 wgmma", "-", "-", "sm90 wgmma"]
    assert list(table["claimed_path"].astype(object).fillna("-")) == ["gmma", "-", "-", "gmma"]


def test_tile_geometry_reads_the_orientation_from_the_grid():
    names = parse_names(pd.Series(["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"] * 2))
    kernels = pd.DataFrame({"shape_m": [4, 4], "shape_n": [3072, 3072], "shape_k": [2048, 2048]})
    # 48 blocks: 64 along N (3072 / 64) and 8 along M. The other way round, 8 along N and 64 in
    # clusters of 4 along M, would need 384 x 4 = 1536 blocks
    geo = geometry(kernels, names, grid_blocks=pd.Series([48.0, 1536.0]).to_numpy())
    assert geo["tile_count"].tolist() == [48, 1536]
    assert list(geo["tile_along_n"]) == ["tile_m", "tile_n"]
    assert geo["padded_m"].tolist() == [8, 256] and geo["padded_n"].tolist() == [3072, 3072]
    assert (geo["grid_matches_tiles"] == 1).all()
    # a grid that fits neither orientation: the cuBLAS one, and no match
    odd = geometry(kernels.iloc[:1], names.iloc[:1], grid_blocks=pd.Series([100.0]).to_numpy())
    assert odd["tile_count"].tolist() == [48] and odd["grid_matches_tiles"].tolist() == [0]


@pytest.mark.parametrize("with_kind", [True, False])
def test_compute_views_parses_the_names_once(targeted_capture, monkeypatch, with_kind):
    """V3, V7, V8 and (without a kind column) the registry all read the parsed names: one parse."""
    from views import kernel_names
    from views.registry import compute_views

    kernels = targeted_capture.kernels if with_kind else targeted_capture.kernels.drop(columns=["kind"])
    parsed_rows = []
    real = kernel_names.parse_names
    monkeypatch.setattr(kernel_names, "parse_names", lambda names: parsed_rows.append(len(names)) or real(names))
    result = compute_views(kernels)
    assert parsed_rows == [len(kernels)]
    assert set(result.kernels["kind"].astype(str)) >= {"gemm", "attention"}
