"""The deterministic GEMMs on the CPU: the exact FP32 FMA emulation against hand-checked and exact
(rational) cases, the reduction order and its split, configuration choice by shape, and the Triton
kernels where Triton is installed (the portable kernel under TRITON_INTERPRET=1; the Gluon kernels
compiled for sm_90 and read back: FFMA on the CUDA cores, no tensor-core instruction, no spill)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import BadInput
from profiler.workloads.deterministic import baselines, workload
from profiler.workloads.deterministic import kernels as det
from profiler.workloads.deterministic import reference as ref

ROOT = Path(__file__).resolve().parents[1]
f32 = np.float32


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.int32)


def exact_f32(value: Fraction) -> np.float32:
    """Round a rational to FP32, nearest-even, by brute force over the neighbours of a guess."""
    if value == 0:
        return f32(0.0)
    guess = f32(float(value))
    cands = {guess, np.nextafter(guess, f32(-np.inf)), np.nextafter(guess, f32(np.inf))}
    cands = [c for c in cands if np.isfinite(c)]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - value), int(bits(c)) & 1))


# --- the order -------------------------------------------------------------------------------------

def test_chain_bounds_cover_k_in_order():
    assert ref.chain_bounds(4096) == [(k, k + 256) for k in range(0, 4096, 256)]
    assert ref.chain_count(4096) == 16
    assert ref.chain_count(14336) == 56               # Llama-3.1-8B down_proj
    assert ref.chain_bounds(300) == [(0, 256), (256, 300)]
    assert ref.chain_bounds(5, chain_k=2) == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(ValueError):
        ref.chain_bounds(0)


def test_split_count_depends_on_k_only():
    for K in (16, 256, 4096, 14336):
        counts = {ref.chain_count(K) for _M in (1, 7, 16, 2048)}
        assert counts == {-(-K // ref.CHAIN_K)}


# --- configurations --------------------------------------------------------------------------------

def test_config_by_shape_bucket(monkeypatch):
    """The Gluon kernels' table (the CUDA decode rules, by N and K too, are test_det_cuda.py's)."""
    monkeypatch.setattr(det, "CUDA_DECODE_RULES", {})
    assert det.choose_config(1, 4096, 4096) == det.GEMV_CONFIGS[1]
    assert det.choose_config(3, 4096, 4096).block_m == 4
    assert det.choose_config(16, 6144, 4096) == det.GEMV_CONFIGS[16]
    assert det.choose_config(17, 6144, 4096) == det.GEMV_CONFIGS[32]      # split K up to M = 64
    assert det.choose_config(64, 6144, 4096) == det.GEMV_CONFIGS[64]
    assert isinstance(det.choose_config(64, 6144, 4096), det.GemvConfig)
    assert det.choose_config(65, 6144, 4096) == det.TILE_CONFIG
    assert det.choose_config(512, 28672, 4096) == det.TILE_CONFIG
    assert det.choose_config(2048, 28672, 4096) == (det.CUDA_TILE_CONFIG or det.TILE_CONFIG)
    assert det.choose_config(8, 4096, 100) is None     # K % 16: the portable kernel
    # N and K never pick another configuration (only M's bucket does)
    for M in (1, 2, 5, 8, 16, 40, 300):
        assert len({det.choose_config(M, N, K) for N in (128, 4096, 28672) for K in (256, 4096, 14336)}) == 1
    with pytest.raises(ValueError):
        det.choose_config(0, 4096, 4096)


def test_configs_fit_every_target_gpu_and_the_order():
    for key, cfg in det.GEMV_CONFIGS.items():
        assert cfg.smem_bytes() + ref.CHAIN_K * cfg.block_m * 4 <= det.SMEM_LIMIT_BYTES
        assert ref.CHAIN_K % cfg.rows == 0 and det.K_MULTIPLE % cfg.rows == 0
        assert cfg.block_m == key and cfg.block_n % 32 == 0     # one program holds every row of M
        if cfg.registers:                   # each thread holds every row: nothing shared but x
            assert cfg.warps_m == 1
    for cfg in (det.TILE_CONFIG, det.TileConfig(128, 64, 16, 8, 4, 4, 8, 4, 1, ring=True)):
        assert cfg.smem_bytes() <= det.SMEM_LIMIT_BYTES
        assert ref.CHAIN_K % cfg.block_k == 0 and det.K_MULTIPLE % cfg.block_k == 0
        assert cfg.tpw_m * cfg.tpw_n == 32
        assert cfg.block_m % (cfg.spt_m * cfg.tpw_m * cfg.wpc_m) == 0
        assert cfg.block_n % (cfg.spt_n * cfg.tpw_n * cfg.wpc_n) == 0


# --- exact FP32 FMA --------------------------------------------------------------------------------

def test_fma_hand_checked():
    assert ref.fma_f32(f32(1.5), f32(2.0), f32(0.25)) == f32(3.25)
    # 1 + 2^-24 is the midpoint between 1 and 1 + 2^-23: ties to even gives 1
    assert ref.fma_f32(f32(2.0 ** -24), f32(1.0), f32(1.0)) == f32(1.0)
    assert ref.fma_f32(f32(3 * 2.0 ** -24), f32(1.0), f32(1.0)) == f32(1 + 2.0 ** -22)
    # the product is not rounded before the add (FMA): 1.0000001^2 - 1 keeps the 2^-46 term
    x = f32(1 + 2.0 ** -23)
    assert ref.fma_f32(x, x, f32(-1.0)) == f32(2.0 ** -22 + 2.0 ** -46)
    assert f32(x * x) - f32(1.0) == f32(2.0 ** -22)        # mul, then add: the term is lost


def test_fma_signed_zero_overflow_subnormal():
    assert bits(ref.fma_f32(f32(0.0), f32(-3.0), f32(0.0))) == 0                      # -0 + +0 = +0
    assert bits(ref.round_sum_f32(np.float64(-0.0), np.float64(-0.0))) == bits(f32(-0.0))
    assert bits(ref.round_sum_f32(np.float64(-0.0), np.float64(0.0))) == 0
    assert ref.fma_f32(f32(3e38), f32(2.0), f32(0.0)) == np.inf
    assert ref.fma_f32(f32(2.0 ** -100), f32(2.0 ** -40), f32(0.0)) == f32(2.0 ** -140)   # subnormal, exact
    # 2^-150 is half the smallest subnormal: ties to even -> 0; a hair above rounds up
    assert ref.round_sum_f32(np.float64(2.0 ** -150), np.float64(0.0)) == 0.0
    assert ref.round_sum_f32(np.float64(2.0 ** -150), np.float64(2.0 ** -200)) == f32(2.0 ** -149)


def test_fma_double_rounding_case():
    """x * w + acc = 2^30 + 2^7 + 2^6 - 2^-40: just under a midpoint of the FP32 grid. Rounding
    to float64 or to long double first lands on the midpoint, and ties-to-even then rounds up; the
    exact FMA rounds down."""
    x, w, acc = f32(64 * (1 + 2.0 ** -23)), f32(1 - 2.0 ** -23), f32(2.0 ** 30 + 2.0 ** 7)
    want = f32(2.0 ** 30 + 2.0 ** 7)
    assert exact_f32(Fraction(float(x)) * Fraction(float(w)) + Fraction(float(acc))) == want
    assert ref.fma_f32(x, w, acc) == want
    assert f32(np.float64(x) * np.float64(w) + np.float64(acc)) == f32(2.0 ** 30 + 2.0 ** 8)
    if np.finfo(np.longdouble).nmant >= 63:   # x87 80-bit long double
        ld = np.longdouble
        assert f32(ld(x) * ld(w) + ld(acc)) == f32(2.0 ** 30 + 2.0 ** 8)
        got = ref.reference_linear_longdouble(np.array([[x, 1.0]], f32), np.array([[w, acc]], f32))
        assert got[0, 0] == f32(2.0 ** 30 + 2.0 ** 8)


def test_fma_against_exact_rationals():
    rng = np.random.default_rng(7)
    n = 400
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)).astype(f32)
    w = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)).astype(f32)
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)).astype(f32)
    # products landing right at the accumulator's rounding boundary, where double rounding bites
    a[:100] = -(x[:100].astype(np.float64) * w[:100]).astype(f32)
    got = ref.fma_f32(x, w, a)
    want = np.array([exact_f32(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)))
                     for p, q, r in zip(x, w, a)], f32)
    assert np.array_equal(bits(got), bits(want))


# --- the reference GEMM ----------------------------------------------------------------------------

def test_reference_hand_checked_chain_split():
    """x = [1, 0, 2^-24, 2^-24], w = 1: one chain adds 2^-24 to 1 twice (both ties to even: 1);
    chains of 2 add the two small terms first (2^-23), then 1 + 2^-23 is exact."""
    x = np.array([[1.0, 0.0, 2.0 ** -24, 2.0 ** -24]], f32)
    w = np.ones((1, 4), f32)
    assert ref.reference_linear(x, w, chain_k=4)[0, 0] == f32(1.0)
    assert ref.reference_linear(x, w, chain_k=2)[0, 0] == f32(1 + 2.0 ** -23)
    assert ref.reference_linear(x, w, chain_k=1)[0, 0] == f32(1.0)      # ((1 + 0) + 2^-24) + 2^-24
    # the bias comes last: 1 + 2^-24 ties back to 1
    assert ref.reference_linear(x, w, bias=np.array([2.0 ** -24], f32), chain_k=4)[0, 0] == f32(1.0)


def test_reference_equals_exact_step_by_step():
    rng = np.random.default_rng(3)
    M, N, K, ck = 2, 3, 40, 16
    x = rng.standard_normal((M, K)).astype(f32)
    w = rng.standard_normal((N, K)).astype(f32)
    bias = rng.standard_normal(N).astype(f32)
    got = ref.reference_linear(x, w, bias, chain_k=ck)
    for m in range(M):
        for n in range(N):
            total = None
            for k0, k1 in ref.chain_bounds(K, ck):
                acc = f32(0.0)
                for k in range(k0, k1):
                    acc = exact_f32(Fraction(float(x[m, k])) * Fraction(float(w[n, k])) + Fraction(float(acc)))
                total = acc if total is None else exact_f32(Fraction(float(total)) + Fraction(float(acc)))
            total = exact_f32(Fraction(float(total)) + Fraction(float(bias[n])))
            assert bits(got[m, n]) == bits(total)


def test_longdouble_emulation_is_exact_for_16bit_weights():
    """A bf16 weight has 8 significant bits, so a product has at most 32: too few for the 64-bit
    intermediate to land on an FP32 midpoint. The two emulations agree bit for bit."""
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("long double is not the x87 80-bit format here")
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 600, generator=g) * torch.exp2(torch.randint(-20, 20, (3, 600), generator=g).float())
    w = torch.randn(5, 600, generator=g).to(torch.bfloat16)
    assert np.array_equal(bits(ref.reference_linear(x, w, chain_k=64)),
                          bits(ref.reference_linear_longdouble(x, w, chain_k=64)))


def test_reference_depends_on_chain_length_and_fusion():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 512)).astype(f32)
    w = rng.standard_normal((8, 512)).astype(f32)
    a = ref.reference_linear(x, w, chain_k=256)
    assert not np.array_equal(bits(a), bits(ref.reference_linear(x, w, chain_k=128)))
    assert not np.array_equal(bits(a), bits(ref.reference_linear(x, w, chain_k=256, fused=False)))
    # rows are independent: a row's bits do not depend on the other rows (batch invariance)
    assert np.array_equal(bits(ref.reference_linear(x[:1], w)), bits(a[:1]))
    np.testing.assert_allclose(a, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_reference_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        ref.reference_linear(np.zeros((2, 3), f32), np.zeros((4, 5), f32))


# --- the workload's command line -----------------------------------------------------------------

def test_parse_shape_item():
    c = workload.parse_shape_item("decode/qkv_proj:1x6144x4096")
    assert (c.phase, c.role, c.M, c.N, c.K) == ("decode", "qkv_proj", 1, 6144, 4096)
    assert workload.parse_shape_item("o_proj:2048x4096x4096").phase == "warm_prefill"
    assert workload.parse_shape_item("o_proj:16x4096x4096").phase == "decode"
    assert workload.parse_shape_item("o_proj:16x4096x4096").message("det") == "o_proj M=16 N=4096 K=4096 impl=det"
    for bad in ("qkv:1x2x3", "o_proj:1x2", "o_proj:1xAx3", "prefill/o_proj:1x2x3", "o_proj:0x2x3", "o_proj"):
        with pytest.raises(BadInput):
            workload.parse_shape_item(bad)


def test_model_cases_are_the_published_projections():
    cases = workload.model_cases("llama-3.1-8b", [1, 2048])
    got = {(c.phase, c.role): (c.M, c.N, c.K) for c in cases}
    assert got[("decode", "gate_up_proj")] == (1, 28672, 4096)
    assert got[("warm_prefill", "down_proj")] == (2048, 4096, 14336)
    assert got[("decode", "qkv_proj")] == (1, 6144, 4096)


def _run_main(*args):
    return subprocess.run([sys.executable, "-m", "profiler.workloads.deterministic.workload", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_workload_main_bad_input_one_line():
    r = _run_main("--impl", "nope", "--tokens", "1")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("smlens: unknown --impl nope")
    r = _run_main("--shapes", "o_proj:1x2")
    assert r.returncode == 2 and "MxNxK" in r.stderr


# --- Triton: the portable kernel in the interpreter, the Gluon kernels compiled ------------------

_INTERP_SCRIPT = r"""
import json, sys, numpy as np, torch
from profiler.workloads.deterministic import kernels as det
from profiler.workloads.deterministic.reference import reference_linear
g = torch.Generator().manual_seed(0)
out = []
for M, N, K, ck, bias in json.loads(sys.argv[1]):
    x = torch.randn(M, K, generator=g) * 4
    w = torch.randn(N, K, generator=g).to(torch.bfloat16)
    b = torch.randn(N, generator=g) if bias else None
    y = det.portable_linear(x, w, b, chain_k=ck).numpy().view(np.int32)
    same = lambda r: bool(np.array_equal(y, r.view(np.int32)))
    out.append({"order": same(reference_linear(x, w, b, chain_k=ck, fused=False)),
                "fused": same(reference_linear(x, w, b, chain_k=ck)),
                "other_order": same(reference_linear(x, w, b, chain_k=ck * 2, fused=False))})
print(json.dumps(out))
"""


def test_portable_kernel_in_interpreter_has_the_reference_order():
    """The interpreter runs `tl.fma` as a multiply then an add (two roundings), so it is checked
    against the unfused reference with the same order; the GPU run checks the fused bits."""
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    cases = [[3, 20, 40, 16, False], [5, 33, 70, 32, True], [17, 18, 64, 16, True]]
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", _INTERP_SCRIPT, json.dumps(cases)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(c["order"] for c in res)
    assert not any(c["other_order"] for c in res)     # a different chain length is caught
    assert not all(c["fused"] for c in res)           # and so is the rounding difference


def _sass_of(kernel, signature: dict, constexprs: dict, num_warps: int, gluon: bool,
             maxnreg: int = 0) -> tuple[str, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(kernel.arg_names)
    sig = {n: ("constexpr" if n in constexprs else signature[n]) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if sig[n].startswith("*") or n in ("M", "N", "K", "stride_xm")}
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as Source
    else:
        Source = ASTSource
    compiled = triton.compile(Source(fn=kernel, signature=sig, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})})
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"smlens_det_{os.getpid()}_{kernel.__name__}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    try:
        sass = subprocess.run([str(tools / "cuobjdump"), "--dump-sass", str(cubin)], capture_output=True,
                              text=True, timeout=60).stdout
        usage = subprocess.run([str(tools / "cuobjdump"), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True, timeout=60).stdout
    finally:
        cubin.unlink()
    local = int(usage.split("LOCAL:")[1].split()[0]) if "LOCAL:" in usage else -1
    return sass, local


@pytest.fixture(scope="module")
def gluon_ready():
    pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    if not det.HAVE_GLUON:
        pytest.skip("this Triton has no Gluon")
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump").exists():
        pytest.skip("Triton's bundled cuobjdump is missing")


@pytest.mark.cuda_build
def test_gluon_decode_kernel_is_fp32_fma_without_tensor_cores(gluon_ready):
    cfg = det.GEMV_CONFIGS[8]
    assert not cfg.registers
    sass, local = _sass_of(det.det_gemv_fma_kernel,
                           {"x_ptr": "*fp32", "wt_ptr": "*bf16", "part_ptr": "*fp32", "M": "i32", "N": "i32",
                            "K": "i32", "stride_xm": "i32"},
                           dict(CHAIN=ref.CHAIN_K, TM=cfg.rows_per_thread, VN=cfg.vec_n, WM=cfg.warps_m,
                                WN=cfg.warps_n, R=cfg.rows, STAGES=cfg.stages, EVEN_M=True, EVEN_N=True,
                                PAIRS=cfg.pairs),
                           cfg.warps, gluon=True)
    assert sass.count("FFMA") >= cfg.rows * cfg.rows_per_thread * cfg.vec_n
    assert "LDGSTS" in sass                      # cp.async ring
    for tensor_op in ("HMMA", "HGMMA", "IMMA"):
        assert tensor_op not in sass
    assert local == 0


@pytest.mark.cuda_build
def test_gluon_register_decode_kernel_has_no_barrier_in_its_loop(gluon_ready):
    """The M <= 16 kernel that keeps each thread's weights in registers: FFMA only, 8 rows x all M
    rows x its columns per step, no shared memory for W, so the one barrier is the x slice's."""
    cfg = det.GEMV_CONFIGS[16]
    assert cfg.registers
    sass, local = _sass_of(det.det_gemv_reg_kernel,
                           {"x_ptr": "*fp32", "w_ptr": "*i32", "part_ptr": "*fp32", "M": "i32", "N": "i32",
                            "K": "i32", "stride_xm": "i32"},
                           dict(CHAIN=ref.CHAIN_K, TM=cfg.rows_per_thread, VN=cfg.vec_n, NW=cfg.warps_n,
                                PAIRS=True), cfg.warps, gluon=True)
    assert sass.count("FFMA") >= 2 * 8 * cfg.rows_per_thread * cfg.vec_n     # the loop holds two steps
    assert sass.count("BAR.SYNC") == 1 and "LDGSTS" not in sass
    for tensor_op in ("HMMA", "HGMMA", "IMMA"):
        assert tensor_op not in sass
    assert local == 0


def _tile_sass(cfg) -> tuple[str, int]:
    L, XL, WL, CVL = det.tile_layouts(cfg)
    consts = dict(CHAIN=ref.CHAIN_K, BM=cfg.block_m, BN=cfg.block_n, BK=cfg.block_k, L=L, XL=XL, WL=WL,
                  HAS_BIAS=False, EVEN_M=True, EVEN_N=True)
    if cfg.ring:
        kernel = det.det_gemm_fma_ring_kernel
        consts.update(CVL=CVL)
    else:
        kernel = det.det_gemm_fma_cp_kernel if cfg.stages else det.det_gemm_fma_kernel
        consts.update(TOTAL_SMEM=cfg.total_smem, **(dict(STAGES=cfg.stages, CVL=CVL) if cfg.stages else {}))
    return _sass_of(kernel, {"xt_ptr": "*fp32", "wt_ptr": "*bf16", "bias_ptr": "*fp32", "y_ptr": "*fp32",
                             "M": "i32", "N": "i32", "K": "i32"}, consts, cfg.warps, gluon=True, maxnreg=cfg.maxnreg)


@pytest.mark.cuda_build
def test_gluon_tile_kernel_is_fp32_fma_without_tensor_cores(gluon_ready):
    cfg = det.TILE_CONFIG
    sass, local = _tile_sass(cfg)
    per_thread = cfg.block_m * cfg.block_n // (32 * cfg.warps)
    assert sass.count("FFMA") >= cfg.block_k * per_thread
    for tensor_op in ("HMMA", "HGMMA", "IMMA"):
        assert tensor_op not in sass
    assert local == 0


@pytest.mark.cuda_build
def test_gluon_ring_tile_kernel_has_one_barrier_per_tile(gluon_ready):
    """The cp.async ring keeps every buffer's role fixed at compile time (4 tiles a loop pass), so
    the compiler adds no barrier to the one per tile: 4 in the loop, one before, one after."""
    cfg = det.TileConfig(128, 64, 16, 8, 4, 4, 8, 4, 1, ring=True)
    sass, local = _tile_sass(cfg)
    assert sass.count("FFMA") >= 4 * cfg.block_k * 64 and sass.count("LDGSTS") >= 4 * 5
    assert sass.count("BAR.SYNC") <= 6 and local == 0


@pytest.mark.cuda_build
def test_batch_invariant_baseline_uses_tensor_cores(gluon_ready):
    """The contrast: the batch-invariant baseline's dot runs on the tensor cores (wgmma)."""
    sass, _ = _sass_of(baselines.bi_tc_matmul_kernel, {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16",
                                                 "M": "i32", "N": "i32", "K": "i32"},
                       dict(BM=128, BN=128, BK=64), 8, gluon=False)
    assert "HGMMA" in sass
