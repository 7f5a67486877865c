"""Deterministic fused-upcast GEMMs `y = x . W^T (+ bias)`, their baselines and their CPU reference.

The bits of every output element depend on the problem's K and on constants of this file only, never
on M (the batch), the GPU, the run or the SM count (docs/DETERMINISM.md):

* 16-bit weights (bf16, fp16) are upcast to FP32 in registers; x is FP32; products are accumulated
  with IEEE-754 FP32 FMA on the CUDA cores (never tensor cores, never TF32).
* The canonical reduction order: K is cut into chains of `CHAIN_K` consecutive k (the last one may
  be shorter); each chain is a sequential FMA chain `acc = fma(x[m,k], w[n,k], acc)` from +0.0 in
  increasing k; the chain partials are then summed left to right, `y = ((p0 + p1) + p2) + ...`,
  and the bias, if any, is added last. Every kernel here computes exactly that order, whatever its
  tiling: the decode kernel (M <= 16) runs the chains in parallel programs (a deterministic split-K:
  a scratch buffer of partials, summed in that fixed order by a second kernel, no atomics; the split
  count is the chain count, a function of K alone), the tile kernel (M > 16) runs them one after
  the other inside each program.
* Tile configurations are constants chosen by the problem shape (`choose_config`): no autotuning,
  nothing read off the device.

`reference_linear` reproduces that order on the CPU exactly (FP32 FMA emulated in float64 with an
exact correction of the one case where rounding twice differs from rounding once), so GPU bits
equal to it are the evidence for "the same on every IEEE-compliant GPU".

The GPU kernels need torch and triton (the `gpu` extra). The fast ones are written in Gluon
(triton.experimental.gluon, Triton >= 3.5) because plain Triton gives no control over which thread
holds which accumulator, and its FMA lowering of `tl.dot` is an order of magnitude short of both
limits (docs/DETERMINISM.md). `portable_linear` (`Linear(w)(x, "portable")`) is a plain-Triton kernel
with the same order that runs anywhere Triton runs, including `TRITON_INTERPRET=1` on a CPU; without
Gluon, `det_linear` falls back to it.

Run as a workload (NVTX ranges of the `smlens` domain, role ranges carrying `M= N= K=`):

    python -m profiler.workloads.deterministic.kernels --model llama-3.1-8b --tokens 1,2048 --impl det,layercast
    python -m profiler.workloads.deterministic.kernels --shapes decode/qkv_proj:1x6144x4096 o_proj:16x4096x4096
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from views.vocabulary import GEMM_ROLES, PHASES

CHAIN_K = 256          # k per FMA chain: with K this fixes every output element's reduction order
GEMV_MAX_M = 16        # M up to this runs the split-K decode kernel, above it the tile kernel
K_MULTIPLE = 32        # the fast kernels need K % 32 == 0; other K run the portable kernel

IMPLS = ("det", "layercast", "cublas_bf16", "bi_tc")
IMPL_TITLES = {
    "det": "deterministic FP32-FMA (this module)",
    "layercast": "LayerCast: F.linear(x_fp32, w.float()), TF32 off",
    "cublas_bf16": "cuBLAS bf16 F.linear",
    "bi_tc": "batch-invariant tensor-core Triton matmul (one tile, no split-K)",
    "portable": "deterministic FP32-FMA, plain Triton (slow; same bits as det)",
}


# --- the reduction order -------------------------------------------------------------------------

def chain_bounds(K: int, chain_k: int = CHAIN_K) -> list[tuple[int, int]]:
    """[k0, k1) of each FMA chain, in the order their partials are summed."""
    if K <= 0:
        raise ValueError(f"K must be positive, got {K}")
    return [(k0, min(K, k0 + chain_k)) for k0 in range(0, K, chain_k)]


def chain_count(K: int, chain_k: int = CHAIN_K) -> int:
    """The split count of the decode kernel: a function of K alone."""
    return -(-K // chain_k)


# --- configurations: constants by shape bucket ----------------------------------------------------

@dataclass(frozen=True)
class GemvConfig:
    """Decode kernel (M <= GEMV_MAX_M): one program per (BLOCK_N columns, chain), all M rows.

    W^T rows stream through a ring of `stages` shared-memory buffers of `rows` k rows (cp.async),
    so the bytes in flight cost no registers. The program's warps_m x warps_n warps share the ring:
    a thread holds `rows_per_thread` rows of M and `vec_n` adjacent columns."""
    rows_per_thread: int
    vec_n: int
    warps_m: int
    warps_n: int
    rows: int = 16
    stages: int = 4
    pairs: bool = True       # bf16 weights: upcast 32-bit pairs with one shift or mask each
    kind: str = "gemv"

    @property
    def block_m(self) -> int:
        return self.rows_per_thread * self.warps_m

    @property
    def block_n(self) -> int:
        return self.vec_n * 32 * self.warps_n

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    def smem_bytes(self, weight_bytes: int = 2) -> int:
        return self.stages * self.rows * self.block_n * weight_bytes


@dataclass(frozen=True)
class TileConfig:
    """Tile kernel (M > GEMV_MAX_M): one program per BLOCK_M x BLOCK_N output tile, chains in turn.

    Thread (i, j) holds a `spt_m` x `spt_n` register block (repeated to cover the tile); x^T and W^T
    tiles of `block_k` rows reach shared memory as FP32 (W upcast on the way): through registers,
    double-buffered (`stages` = 0), or by cp.async into a ring of `stages` buffers. `total_smem`
    keeps the running sum of chain partials in shared memory rather than in registers."""
    block_m: int
    block_n: int
    block_k: int
    spt_m: int
    spt_n: int
    tpw_m: int
    tpw_n: int
    wpc_m: int
    wpc_n: int
    stages: int = 0
    total_smem: bool = False
    kind: str = "tile"

    @property
    def warps(self) -> int:
        return self.wpc_m * self.wpc_n

    def smem_bytes(self, weight_bytes: int = 2) -> int:
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        if self.stages:
            staged = self.stages * bk * (bm * 4 + bn * weight_bytes) + bk * bn * 4
        else:
            staged = 2 * bk * (bm + bn) * 4
        return staged + (bm * bn * 4 if self.total_smem else 0)


# The constants. Changing one changes speed, never bits: the order is fixed by CHAIN_K alone.
GEMV_CONFIGS = {   # picked from the H200 sweeps (benchmarks/DETERMINISM_NOTES.md)
    1: GemvConfig(rows_per_thread=1, vec_n=2, warps_m=1, warps_n=4, rows=32, stages=3),
    2: GemvConfig(rows_per_thread=2, vec_n=2, warps_m=1, warps_n=4),
    4: GemvConfig(rows_per_thread=4, vec_n=2, warps_m=1, warps_n=4),
    8: GemvConfig(rows_per_thread=8, vec_n=2, warps_m=1, warps_n=4),
    16: GemvConfig(rows_per_thread=8, vec_n=4, warps_m=2, warps_n=2),
}
TILE_CONFIGS = {
    # M <= 64: a shorter tile wastes fewer rows
    64: TileConfig(64, 128, 16, 8, 4, 4, 8, 2, 2),
    # larger M: two programs of 4 warps per SM beat one of 8 (each barrier stops fewer warps)
    0: TileConfig(128, 64, 16, 8, 4, 4, 8, 4, 1),
}
SMEM_LIMIT_BYTES = 99 * 1024   # the smallest per-block shared memory among Ampere, Ada and Hopper


def _next_pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def choose_config(M: int, N: int, K: int):
    """The kernel configuration for a problem shape: a constant per (M bucket); N and K never pick
    a different order. Returns None when K needs the portable kernel."""
    if min(M, N, K) <= 0:
        raise ValueError(f"shape must be positive, got M={M} N={N} K={K}")
    if K % K_MULTIPLE:
        return None
    if M <= GEMV_MAX_M:
        return GEMV_CONFIGS[_next_pow2(M)]
    return TILE_CONFIGS[64] if M <= 64 else TILE_CONFIGS[0]


# --- the CPU reference ---------------------------------------------------------------------------

_F32_MAX_EXP = -125   # frexp exponent below which an FP32 result is subnormal


def round_sum_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 round-to-nearest-even of the exact sum a + b, for float64 a, b with at most 53
    significant bits each (an FP32 value, or an exact FP32 x FP32 product).

    float64 addition rounds once (to 53 bits); converting that to FP32 rounds again, and rounding
    twice differs from rounding once only when the first rounding lands exactly on a midpoint between
    two FP32 neighbours while the exact sum was not there. TwoSum gives the first rounding's exact
    error; in that case one float64 step towards the exact sum decides the midpoint correctly."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    mant, exp = np.frexp(s)                              # s = mant * 2**exp, 0.5 <= |mant| < 1
    # an FP32 midpoint is an odd multiple of half an FP32 ulp
    half_ulp_exp = np.where(exp >= _F32_MAX_EXP, exp - 25, -150)
    scaled = np.ldexp(s, -half_ulp_exp)
    with np.errstate(invalid="ignore"):
        midpoint = np.isfinite(s) & (np.mod(scaled, 2.0) == 1.0)
    fix = midpoint & (err != 0)
    if np.any(fix):
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    with np.errstate(over="ignore"):
        return s.astype(np.float32)


def fma_f32(x: np.ndarray, w: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """IEEE FP32 fused multiply-add, exactly: x * w is exact in float64 (48 significant bits)."""
    return round_sum_f32(np.asarray(x, np.float64) * np.asarray(w, np.float64), acc)


def _as_f32(a) -> np.ndarray:
    """numpy FP32 array from a numpy array or a torch tensor of any float dtype (bf16 included)."""
    if hasattr(a, "detach"):
        a = a.detach().to("cpu").float().numpy()
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def reference_linear(x, w, bias=None, chain_k: int = CHAIN_K, fused: bool = True) -> np.ndarray:
    """y = x . w^T (+ bias) in the kernels' exact order, on the CPU. x: [M, K]; w: [N, K] (its
    values, e.g. bf16 weights upcast); returns FP32 [M, N].

    fused=False rounds each product to FP32 before adding it (what the Triton interpreter does for
    `tl.fma`), so the interpreter's run of the portable kernel checks the order in the same way."""
    x32, w32 = _as_f32(x), _as_f32(w)
    if x32.ndim != 2 or w32.ndim != 2 or x32.shape[1] != w32.shape[1]:
        raise ValueError(f"need x [M, K] and w [N, K], got {x32.shape} and {w32.shape}")
    M, K = x32.shape
    N = w32.shape[0]
    x64 = x32.astype(np.float64)
    wt64 = w32.T.astype(np.float64)                      # [K, N]
    total = None
    for k0, k1 in chain_bounds(K, chain_k):
        acc = np.zeros((M, N), np.float32)
        for k in range(k0, k1):
            prod = x64[:, k:k + 1] * wt64[k:k + 1, :]    # exact
            if not fused:
                prod = prod.astype(np.float32).astype(np.float64)
            acc = round_sum_f32(prod, acc)
        total = acc if total is None else round_sum_f32(total, acc)
    if bias is not None:
        total = round_sum_f32(total, _as_f32(bias)[None, :])
    return total


def reference_linear_longdouble(x, w, bias=None, chain_k: int = CHAIN_K) -> np.ndarray:
    """The same order with every FMA done in numpy longdouble and then rounded to FP32 (the usual
    emulation). Rounding twice makes it wrong when x and w both carry 24 significant bits and the
    64-bit intermediate lands on an FP32 midpoint; with 16-bit weights it cannot (a product has at
    most 32 significant bits, too few to reach that far below a sum's FP32 midpoint)."""
    x32, w32 = _as_f32(x), _as_f32(w)
    M, K = x32.shape
    xl, wl = x32.astype(np.longdouble), w32.T.astype(np.longdouble)
    total = None
    for k0, k1 in chain_bounds(K, chain_k):
        acc = np.zeros((x32.shape[0], w32.shape[0]), np.float32)
        for k in range(k0, k1):
            acc = (xl[:, k:k + 1] * wl[k:k + 1, :] + acc.astype(np.longdouble)).astype(np.float32)
        total = acc if total is None else (total.astype(np.longdouble) + acc).astype(np.float32)
    if bias is not None:
        total = (total.astype(np.longdouble) + _as_f32(bias)[None, :]).astype(np.float32)
    return total


# --- GPU side: everything below needs torch and triton --------------------------------------------

try:  # CPU-only installs and CI may have neither; torch alone runs the baselines and the layer
    import torch
except ImportError:  # pragma: no cover - exercised where torch is absent
    torch = None
try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = tl = None

gluon = gl = cp_async = None
if triton is not None:
    try:
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp_async
    except ImportError:  # pragma: no cover - Triton < 3.5
        gluon = gl = cp_async = None

HAVE_TRITON = triton is not None
HAVE_GLUON = gluon is not None


def _need_gpu_stack() -> None:
    if not HAVE_TRITON:
        from profiler.errors import EnvironmentProblem
        raise EnvironmentProblem("the deterministic kernels need torch and triton: pip install 'smlens[gpu]'")


if HAVE_TRITON:

    @triton.jit
    def det_portable_gemm_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, stride_xm, stride_wn,
                                 K: tl.constexpr, CHAIN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                                 HAS_BIAS: tl.constexpr):
        """The canonical order in plain Triton, W in its [N, K] layout: slow, runs anywhere (K is a
        compile-time constant so that the interpreter sees plain integer loop bounds)."""
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        mmask = offs_m < M
        nmask = offs_n < N
        total = tl.zeros([BM, BN], tl.float32)
        for j in range(0, (K + CHAIN - 1) // CHAIN):
            acc = tl.zeros([BM, BN], tl.float32)
            for k in range(j * CHAIN, min(K, (j + 1) * CHAIN)):
                xk = tl.load(x_ptr + offs_m * stride_xm + k, mask=mmask, other=0.0)
                wk = tl.load(w_ptr + offs_n * stride_wn + k, mask=nmask, other=0.0).to(tl.float32)
                acc = tl.fma(xk[:, None], wk[None, :], acc)
            if j == 0:
                total = acc
            else:
                total = total + acc
        if HAS_BIAS:
            total = total + tl.load(bias_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], total,
                 mask=mmask[:, None] & nmask[None, :])

    @triton.jit
    def det_fold_splitk_reduce_kernel(part_ptr, bias_ptr, y_ptr, MN, N,
                                      S: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
        """y = ((p0 + p1) + p2) + ... (+ bias): the fixed-order sum of the S chain partials (S is a
        function of K, unrolled so that every partial's load is in flight at once)."""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < MN
        acc = tl.load(part_ptr + offs, mask=mask, other=0.0)
        for j in tl.static_range(1, S):
            acc = acc + tl.load(part_ptr + j * MN + offs, mask=mask, other=0.0)
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs, acc, mask=mask)

    @triton.jit
    def bi_tc_matmul_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """Baseline: batch-invariant bf16 tensor-core matmul, one fixed tile, no split-K. Each
        output tile reduces over K in the same steps whatever M is; the MMA's internal order is
        the hardware's, so its bits are those of one GPU generation."""
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        acc = tl.zeros([BM, BN], tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(x_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :],
                        mask=(offs_m[:, None] < M) & ((k0 + offs_k)[None, :] < K), other=0.0)
            b = tl.load(w_ptr + offs_n[None, :] * K + (k0 + offs_k)[:, None],
                        mask=(offs_n[None, :] < N) & ((k0 + offs_k)[:, None] < K), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


if HAVE_GLUON:

    @gluon.jit
    def det_gemv_fma_kernel(x_ptr, wt_ptr, part_ptr, M, N, K, stride_xm,
                            CHAIN: gl.constexpr, TM: gl.constexpr, VN: gl.constexpr,
                            WM: gl.constexpr, WN: gl.constexpr, R: gl.constexpr, STAGES: gl.constexpr,
                            EVEN_M: gl.constexpr, EVEN_N: gl.constexpr, PAIRS: gl.constexpr = False):
        """One chain j of BN columns for all BM rows: part[j, m, n] = FMA chain over k in chain j.

        W^T rows stream through a shared-memory ring (cp.async, STAGES buffers of R rows) that the
        WM x WN warps of the program share: warps along M take different rows of x, warps along N
        different columns, so that each warp's instruction stream stays short.
        x: [M, K] FP32 (row stride stride_xm); wt: W^T [K, N] 16-bit; part: [S, M, N] FP32.
        PAIRS (bf16 only): read W^T as 32-bit pairs and upcast with one shift or mask per element,
        even and odd columns in two accumulators (same FMAs, same order)."""
        NW: gl.constexpr = WM * WN
        BM: gl.constexpr = TM * WM
        BN: gl.constexpr = VN * 32 * WN
        L: gl.constexpr = gl.BlockedLayout([TM, VN], [1, 32], [WM, WN], [1, 0])
        CV: gl.constexpr = 8                       # 16-byte copies
        CT_N: gl.constexpr = BN // CV if BN // CV < 32 else 32
        CL: gl.constexpr = gl.BlockedLayout([1, CV], [32 // CT_N, CT_N], [NW, 1], [1, 0])
        # plain row-major buffers: stages are filled as [R, BN] blocks, read back row by row
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        RL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

        pid_n = gl.program_id(0)
        j = gl.program_id(1)
        k0 = j * CHAIN
        steps = gl.minimum(K - k0, CHAIN) // R

        ring = gl.allocate_shared_memory(wt_ptr.dtype.element_ty, [STAGES, R, BN], SL)
        rows = ring._reinterpret(wt_ptr.dtype.element_ty, [STAGES * R, BN], RL)
        crow = gl.arange(0, R, layout=gl.SliceLayout(1, CL))
        ccol = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, CL))
        src = wt_ptr + (k0 + crow)[:, None].to(gl.int64) * N + ccol[None, :]
        if EVEN_N:
            cmask = (ccol >= 0)[None, :]
        else:
            cmask = (ccol < N)[None, :]
        for s in gl.static_range(STAGES - 1):
            cp_async.async_copy_global_to_shared(ring.index(s), src + s * R * N,
                                                 mask=cmask & (crow < (steps - s) * R)[:, None])
            cp_async.commit_group()

        # this chain's slice of x, [BM, CHAIN], read once (coalesced along k) and kept transposed in
        # shared memory: row k then gives each thread its TM adjacent rows of x in one load
        XG: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [NW, 1], [1, 0])
        xm_ = gl.arange(0, BM, layout=gl.SliceLayout(1, XG))
        xk_ = k0 + gl.arange(0, CHAIN, layout=gl.SliceLayout(0, XG))
        xg = gl.load(x_ptr + xm_[:, None] * stride_xm + xk_[None, :],
                     mask=(xm_ < M)[:, None] & (xk_ < K)[None, :], other=0.0)
        xs = gl.allocate_shared_memory(gl.float32, [CHAIN, BM], SL)
        xs.store(gl.permute(xg, [1, 0]))
        xrows = xs._reinterpret(gl.float32, [CHAIN, BM], RL)

        offs_m = gl.arange(0, BM, layout=gl.SliceLayout(1, L))
        mmask = offs_m < M
        L2: gl.constexpr = gl.BlockedLayout([TM, VN // 2 if VN > 1 else 1], [1, 32], [WM, WN], [1, 0])
        if PAIRS:
            prs = ring._reinterpret(gl.int32, [STAGES * R, BN // 2], RL)
            acc = gl.full([BM, BN // 2], 0.0, gl.float32, L2)
            acc_hi = gl.full([BM, BN // 2], 0.0, gl.float32, L2)
        else:
            acc = gl.full([BM, BN], 0.0, gl.float32, L)
        for i in range(steps):
            # refill the buffer read in the previous step: everyone is past it after the barrier
            gl.thread_barrier()
            nxt = i + STAGES - 1
            cp_async.async_copy_global_to_shared(ring.index(nxt % STAGES), src + nxt * R * N,
                                                 mask=cmask & (crow < (steps - nxt) * R)[:, None])
            cp_async.commit_group()
            cp_async.wait_group(STAGES - 1)
            gl.thread_barrier()
            base = (i % STAGES) * R
            for r in gl.static_range(R):
                if PAIRS:
                    u = prs.index(base + r).load(gl.SliceLayout(0, L2))
                    lo = (u << 16).to(gl.float32, bitcast=True)
                    hi = (u & -65536).to(gl.float32, bitcast=True)
                    xk = gl.expand_dims(xrows.index(i * R + r).load(gl.SliceLayout(1, L2)), 1)
                    acc = gl.fma(xk, gl.expand_dims(lo, 0), acc)
                    acc_hi = gl.fma(xk, gl.expand_dims(hi, 0), acc_hi)
                else:
                    w = rows.index(base + r).load(gl.SliceLayout(0, L)).to(gl.float32)
                    xk = xrows.index(i * R + r).load(gl.SliceLayout(1, L))
                    acc = gl.fma(gl.expand_dims(xk, 1), gl.expand_dims(w, 0), acc)
        cp_async.wait_group(0)

        if PAIRS:
            offs_p = pid_n * BN + 2 * gl.arange(0, BN // 2, layout=gl.SliceLayout(0, L2))
            offs_m2 = gl.arange(0, BM, layout=gl.SliceLayout(1, L2))
            out = part_ptr + j * M * N + gl.expand_dims(offs_m2, 1) * N + gl.expand_dims(offs_p, 0)
            omask = gl.expand_dims(offs_m2 < M, 1) & gl.expand_dims(offs_p < N, 0)
            gl.store(out, acc, mask=omask)
            gl.store(out + 1, acc_hi, mask=omask)
        else:
            offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
            out = part_ptr + j * M * N + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
            gl.store(out, acc, mask=gl.expand_dims(mmask, 1) & gl.expand_dims(offs_n < N, 0))

    @gluon.jit
    def det_gemm_fma_kernel(xt_ptr, wt_ptr, bias_ptr, y_ptr, M, N, K,
                            CHAIN: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                            L: gl.constexpr, XL: gl.constexpr, WL: gl.constexpr,
                            TOTAL_SMEM: gl.constexpr, HAS_BIAS: gl.constexpr,
                            EVEN_M: gl.constexpr, EVEN_N: gl.constexpr):
        """One BM x BN tile, all chains in turn: total = ((p0 + p1) + ...) (+ bias). x^T and W^T
        tiles go through registers (W upcast there) into double-buffered FP32 shared memory.

        xt: x^T [K, M] FP32; wt: W^T [K, N] 16-bit; y: [M, N] FP32. L is the accumulator layout,
        XL / WL the staging layouts of the [BK, BM] and [BK, BN] tiles. TOTAL_SMEM keeps the
        running sum of chain partials in shared memory instead of registers (more programs per SM)."""
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        RL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        pid_m = gl.program_id(0)
        pid_n = gl.program_id(1)
        xs = gl.allocate_shared_memory(gl.float32, [2, BK, BM], SL)
        ws = gl.allocate_shared_memory(gl.float32, [2, BK, BN], SL)
        xrows = xs._reinterpret(gl.float32, [2 * BK, BM], RL)
        wrows = ws._reinterpret(gl.float32, [2 * BK, BN], RL)

        xk_ = gl.arange(0, BK, layout=gl.SliceLayout(1, XL))
        xm_ = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, XL))
        wk_ = gl.arange(0, BK, layout=gl.SliceLayout(1, WL))
        wn_ = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, WL))
        x_src = xt_ptr + xk_[:, None].to(gl.int64) * M + xm_[None, :]
        w_src = wt_ptr + wk_[:, None].to(gl.int64) * N + wn_[None, :]
        if EVEN_M:
            xmask = (xm_ >= 0)[None, :] & (xk_ >= 0)[:, None]
        else:
            xmask = (xm_ < M)[None, :] & (xk_ >= 0)[:, None]
        if EVEN_N:
            wmask = (wn_ >= 0)[None, :] & (wk_ >= 0)[:, None]
        else:
            wmask = (wn_ < N)[None, :] & (wk_ >= 0)[:, None]
        x_step = BK * M
        w_step = BK * N

        xr = gl.load(x_src, mask=xmask, other=0.0)
        wr = gl.load(w_src, mask=wmask, other=0.0)
        xs.index(0).store(xr)
        ws.index(0).store(wr.to(gl.float32))
        if TOTAL_SMEM:
            tot = gl.allocate_shared_memory(gl.float32, [BM, BN], SL)
            # -0.0 + p0 == p0 for every p0: the first chain needs no special case
            tot.store(gl.full([BM, BN], -0.0, gl.float32, L))
        gl.thread_barrier()

        T = K // BK
        TPC: gl.constexpr = CHAIN // BK
        total = gl.full([BM, BN], -0.0, gl.float32, L)
        for j in range(gl.cdiv(T, TPC)):
            acc = gl.full([BM, BN], 0.0, gl.float32, L)
            for tt in range(gl.minimum(TPC, T - j * TPC)):
                t = j * TPC + tt
                cur = t % 2
                more = t + 1 < T
                # prefetch the next tile into registers while this one is multiplied
                xr = gl.load(x_src + (t + 1) * x_step, mask=xmask & more, other=0.0)
                wr = gl.load(w_src + (t + 1) * w_step, mask=wmask & more, other=0.0)
                base = cur * BK
                for kk in gl.static_range(BK):
                    a = xrows.index(base + kk).load(gl.SliceLayout(1, L))
                    b = wrows.index(base + kk).load(gl.SliceLayout(0, L))
                    acc = gl.fma(gl.expand_dims(a, 1), gl.expand_dims(b, 0), acc)
                xs.index(1 - cur).store(xr)
                ws.index(1 - cur).store(wr.to(gl.float32))
                gl.thread_barrier()
            if TOTAL_SMEM:
                tot.store(tot.load(L) + acc)      # each thread its own elements: no barrier
            else:
                total = total + acc
        if TOTAL_SMEM:
            total = tot.load(L)

        offs_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L))
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
        if HAS_BIAS:
            total = total + gl.expand_dims(gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32), 0)
        out = y_ptr + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
        gl.store(out, total, mask=gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0))

    @gluon.jit
    def det_gemm_fma_cp_kernel(xt_ptr, wt_ptr, bias_ptr, y_ptr, M, N, K,
                               CHAIN: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                               STAGES: gl.constexpr, L: gl.constexpr, XL: gl.constexpr, WL: gl.constexpr,
                               CVL: gl.constexpr, TOTAL_SMEM: gl.constexpr, HAS_BIAS: gl.constexpr,
                               EVEN_M: gl.constexpr, EVEN_N: gl.constexpr):
        """The tile kernel with a cp.async ring of STAGES x^T / W^T tiles (no staging registers);
        each W^T tile is upcast once into an FP32 buffer that the FMAs read. Same order."""
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        RL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        pid_m = gl.program_id(0)
        pid_n = gl.program_id(1)
        xring = gl.allocate_shared_memory(gl.float32, [STAGES, BK, BM], SL)
        wring = gl.allocate_shared_memory(wt_ptr.dtype.element_ty, [STAGES, BK, BN], SL)
        wf = gl.allocate_shared_memory(gl.float32, [BK, BN], SL)
        xrows = xring._reinterpret(gl.float32, [STAGES * BK, BM], RL)
        wfrows = wf._reinterpret(gl.float32, [BK, BN], RL)

        xk_ = gl.arange(0, BK, layout=gl.SliceLayout(1, XL))
        xm_ = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, XL))
        wk_ = gl.arange(0, BK, layout=gl.SliceLayout(1, WL))
        wn_ = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, WL))
        x_src = xt_ptr + xk_[:, None].to(gl.int64) * M + xm_[None, :]
        w_src = wt_ptr + wk_[:, None].to(gl.int64) * N + wn_[None, :]
        if EVEN_M:
            xmask = (xm_ >= 0)[None, :] & (xk_ >= 0)[:, None]
        else:
            xmask = (xm_ < M)[None, :] & (xk_ >= 0)[:, None]
        if EVEN_N:
            wmask = (wn_ >= 0)[None, :] & (wk_ >= 0)[:, None]
        else:
            wmask = (wn_ < N)[None, :] & (wk_ >= 0)[:, None]
        x_step = BK * M
        w_step = BK * N
        T = K // BK
        for s in gl.static_range(STAGES - 1):
            cp_async.async_copy_global_to_shared(xring.index(s), x_src + s * x_step, mask=xmask & (s < T))
            cp_async.async_copy_global_to_shared(wring.index(s), w_src + s * w_step, mask=wmask & (s < T))
            cp_async.commit_group()
        if TOTAL_SMEM:
            tot = gl.allocate_shared_memory(gl.float32, [BM, BN], SL)
            tot.store(gl.full([BM, BN], -0.0, gl.float32, L))

        TPC: gl.constexpr = CHAIN // BK
        total = gl.full([BM, BN], -0.0, gl.float32, L)
        for j in range(gl.cdiv(T, TPC)):
            acc = gl.full([BM, BN], 0.0, gl.float32, L)
            for tt in range(gl.minimum(TPC, T - j * TPC)):
                t = j * TPC + tt
                cp_async.wait_group(STAGES - 2)
                # tile t has landed for everyone, and everyone is done with tile t - 1
                gl.thread_barrier()
                nxt = t + STAGES - 1
                slot = nxt % STAGES
                cp_async.async_copy_global_to_shared(xring.index(slot), x_src + nxt * x_step, mask=xmask & (nxt < T))
                cp_async.async_copy_global_to_shared(wring.index(slot), w_src + nxt * w_step, mask=wmask & (nxt < T))
                cp_async.commit_group()
                cur = t % STAGES
                wf.store(wring.index(cur).load(CVL).to(gl.float32))
                gl.thread_barrier()
                base = cur * BK
                for kk in gl.static_range(BK):
                    a = xrows.index(base + kk).load(gl.SliceLayout(1, L))
                    b = wfrows.index(kk).load(gl.SliceLayout(0, L))
                    acc = gl.fma(gl.expand_dims(a, 1), gl.expand_dims(b, 0), acc)
            if TOTAL_SMEM:
                tot.store(tot.load(L) + acc)
            else:
                total = total + acc
        cp_async.wait_group(0)
        if TOTAL_SMEM:
            total = tot.load(L)

        offs_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L))
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
        if HAS_BIAS:
            total = total + gl.expand_dims(gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32), 0)
        out = y_ptr + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
        gl.store(out, total, mask=gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0))


def tile_layouts(cfg: "TileConfig"):
    """Accumulator, staging (x^T, W^T) and upcast layouts of the tile kernels (Gluon layouts)."""
    L = gl.BlockedLayout([cfg.spt_m, cfg.spt_n], [cfg.tpw_m, cfg.tpw_n], [cfg.wpc_m, cfg.wpc_n], [1, 0])

    def staging(cols: int, vec: int):
        t_cols = min(32, cols // vec)
        return gl.BlockedLayout([1, vec], [32 // t_cols, t_cols], [cfg.warps, 1], [1, 0])

    return L, staging(cfg.block_m, 4), staging(cfg.block_n, 8), staging(cfg.block_n, 8)


# --- the linear layer on the GPU -------------------------------------------------------------------

def prepare_weight(w):
    """W [N, K] 16-bit -> W^T [K, N] contiguous, once at load time, so each k row is one coalesced read."""
    _need_gpu_stack()
    if w.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"weights must be bf16 or fp16, got {w.dtype}")
    return w.t().contiguous()


FOLD_BLOCK = 256


def _launch_gemv(x, wt, bias, cfg: GemvConfig, chain_k: int, fold: bool = True):
    M, K = x.shape
    N = wt.shape[1]
    S = chain_count(K, chain_k)
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    part = y if (S == 1 and bias is None) else torch.empty(S, M, N, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(N, cfg.block_n), S)
    det_gemv_fma_kernel[grid](x, wt, part, M, N, K, x.stride(0), CHAIN=chain_k, TM=cfg.rows_per_thread,
                              VN=cfg.vec_n, WM=cfg.warps_m, WN=cfg.warps_n, R=cfg.rows, STAGES=cfg.stages,
                              EVEN_M=(M == cfg.block_m), EVEN_N=(N % cfg.block_n == 0),
                              PAIRS=cfg.pairs and cfg.vec_n > 1 and wt.dtype == torch.bfloat16, num_warps=cfg.warps)
    if part is y:
        return y
    if not fold:           # benchmarks: the partials alone
        return part
    det_fold_splitk_reduce_kernel[(triton.cdiv(M * N, FOLD_BLOCK),)](
        part, bias if bias is not None else part, y, M * N, N, S=S,
        HAS_BIAS=bias is not None, BLOCK=FOLD_BLOCK, num_warps=2)
    return y


def _launch_tile(x, wt, bias, cfg: TileConfig, chain_k: int):
    M, K = x.shape
    N = wt.shape[1]
    xt = x.t().contiguous()
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    L, XL, WL, CVL = tile_layouts(cfg)
    grid = (triton.cdiv(M, cfg.block_m), triton.cdiv(N, cfg.block_n))
    common = dict(CHAIN=chain_k, BM=cfg.block_m, BN=cfg.block_n, BK=cfg.block_k, L=L, XL=XL, WL=WL,
                  TOTAL_SMEM=cfg.total_smem, HAS_BIAS=bias is not None,
                  EVEN_M=(M % cfg.block_m == 0), EVEN_N=(N % cfg.block_n == 0), num_warps=cfg.warps)
    b = bias if bias is not None else y
    if cfg.stages:
        det_gemm_fma_cp_kernel[grid](xt, wt, b, y, M, N, K, STAGES=cfg.stages, CVL=CVL, **common)
    else:
        det_gemm_fma_kernel[grid](xt, wt, b, y, M, N, K, **common)
    return y


def portable_linear(x, w, bias=None, chain_k: int = CHAIN_K, block: int = 16):
    """The canonical order in plain Triton over W in its [N, K] layout (runs under TRITON_INTERPRET=1)."""
    _need_gpu_stack()
    x = x.float().contiguous()
    w = w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(M, block), triton.cdiv(N, block))
    det_portable_gemm_kernel[grid](x, w, bias if bias is not None else y, y, M, N, x.stride(0), w.stride(0),
                                   K=K, CHAIN=chain_k, BM=block, BN=block, HAS_BIAS=bias is not None)
    return y


def det_linear(x, wt, bias=None, config=None, chain_k: int = CHAIN_K, fold: bool = True):
    """y = x . W^T (+ bias) in FP32 with the canonical order. x: [M, K] (any float dtype, upcast);
    wt: W^T [K, N] bf16/fp16 from `prepare_weight`; bias: [N] or None. Returns FP32 [M, N].

    `config` overrides the shape's constant configuration (benchmarks only: it changes speed,
    never bits)."""
    _need_gpu_stack()
    if x.dim() != 2 or wt.dim() != 2 or x.shape[1] != wt.shape[0]:
        raise ValueError(f"need x [M, K] and W^T [K, N], got {tuple(x.shape)} and {tuple(wt.shape)}")
    x = x.float().contiguous()
    M, K = x.shape
    N = wt.shape[1]
    cfg = config or choose_config(M, N, K)
    if cfg is None or not HAVE_GLUON or chain_k % K_MULTIPLE:
        return portable_linear(x, wt.t(), bias, chain_k)
    if isinstance(cfg, GemvConfig):
        return _launch_gemv(x, wt, bias, cfg, chain_k, fold)
    return _launch_tile(x, wt, bias, cfg, chain_k)


# --- baselines ------------------------------------------------------------------------------------

def layercast_linear(x, w, bias=None):
    """The usual fix: upcast the weights on every call, FP32 cuBLAS with TF32 off."""
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.nn.functional.linear(x.float(), w.float(), None if bias is None else bias.float())


def cublas_bf16_linear(x, w, bias=None):
    return torch.nn.functional.linear(x.to(w.dtype), w, bias)


BI_TC_TILE = (128, 128, 64, 8, 3)   # BM, BN, BK, warps, stages: one tile for every shape


def bi_tc_linear(x, w, bias=None):
    """Batch-invariant tensor-core baseline: bf16 in, FP32 accumulate, 16-bit out."""
    _need_gpu_stack()
    x = x.to(w.dtype).contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty(M, N, device=x.device, dtype=w.dtype)
    bm, bn, bk, warps, stages = BI_TC_TILE
    bi_tc_matmul_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
        x, w.contiguous(), y, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
    if bias is not None:
        y = y + bias
    return y


class Linear:
    """One projection's weights in the form each implementation wants, and its forward."""

    def __init__(self, w, bias=None):
        self.w = w                                   # [N, K] 16-bit
        self.bias = bias
        self._wt = None

    @property
    def wt(self):
        if self._wt is None:
            self._wt = prepare_weight(self.w)
        return self._wt

    def __call__(self, x, impl: str = "det"):
        if impl == "det":
            return det_linear(x, self.wt, self.bias)
        if impl == "portable":
            return portable_linear(x, self.w, self.bias)
        if impl == "layercast":
            return layercast_linear(x, self.w, self.bias)
        if impl == "cublas_bf16":
            return cublas_bf16_linear(x, self.w, self.bias)
        if impl == "bi_tc":
            return bi_tc_linear(x, self.w, self.bias)
        raise ValueError(f"unknown implementation {impl!r}; choose one of {', '.join(IMPLS)}, portable")


# --- the workload: kernels inside NVTX ranges, for `smlens profile --workload det-gemm` -----------

@dataclass(frozen=True)
class GemmCase:
    phase: str
    role: str
    M: int
    N: int
    K: int

    def message(self, impl: str) -> str:
        return f"{self.role} M={self.M} N={self.N} K={self.K} impl={impl}"


def default_phase(M: int) -> str:
    return "decode" if M <= 64 else "warm_prefill"


def parse_shape_item(item: str) -> GemmCase:
    """`[phase/]role:MxNxK`, e.g. `decode/qkv_proj:1x6144x4096` or `o_proj:2048x4096x4096`."""
    from profiler.errors import BadInput
    text = item.strip()
    phase = None
    if "/" in text:
        phase, text = text.split("/", 1)
        if phase not in PHASES:
            raise BadInput(f"shape {item!r}: phase must be one of {', '.join(PHASES)}")
    role, sep, dims = text.partition(":")
    if not sep or role not in GEMM_ROLES:
        raise BadInput(f"shape {item!r}: write [phase/]role:MxNxK with role one of {', '.join(GEMM_ROLES)}")
    try:
        M, N, K = (int(v) for v in dims.lower().split("x"))
    except ValueError:
        raise BadInput(f"shape {item!r}: dimensions must be three integers MxNxK, e.g. 1x6144x4096") from None
    if min(M, N, K) <= 0:
        raise BadInput(f"shape {item!r}: dimensions must be positive")
    return GemmCase(phase or default_phase(M), role, M, N, K)


def model_cases(model: str, tokens: list[int]) -> list[GemmCase]:
    from profiler.workloads.models import get_model
    shape = get_model(model)
    cases = []
    for t in tokens:
        for role, (M, N, K) in shape.gemm_shapes(t).items():
            cases.append(GemmCase(default_phase(M), role, M, N, K))
    return cases


def run_workload(cases: list[GemmCase], impls: list[str], repeat: int = 1, seed: int = 0,
                 device: str = "cuda") -> dict:
    """Run each case with each implementation inside `phase / impl=<impl> / <role> M= N= K=` ranges
    (one warm-up call outside any range first, so compilation and library heuristics stay out)."""
    _need_gpu_stack()
    from profiler.workloads.decoder import Annotator, DOMAIN
    ann = Annotator(DOMAIN)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    weights: dict[tuple[int, int], Linear] = {}
    done = []
    for case in cases:
        key = (case.N, case.K)
        if key not in weights:
            w = (torch.randn(case.N, case.K, generator=gen) / math.sqrt(case.K)).to(torch.bfloat16)
            weights[key] = Linear(w.to(device))
        lin = weights[key]
        x = torch.randn(case.M, case.K, generator=gen).to(device)
        for impl in impls:
            lin(x, impl)                                    # warm-up: compile, heuristics
            torch.cuda.synchronize()
            with ann.range(case.phase), ann.range(f"impl={impl}"), ann.range(case.message(impl)):
                for _ in range(repeat):
                    lin(x, impl)
            torch.cuda.synchronize()
            done.append({"phase": case.phase, "role": case.role, "M": case.M, "N": case.N, "K": case.K,
                         "impl": impl})
    return {"domain": DOMAIN, "nvtx_active": ann.active, "runs": done}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m profiler.workloads.deterministic.kernels",
                                description="Run the deterministic GEMMs and baselines inside NVTX ranges.")
    p.add_argument("--shapes", nargs="*", default=None,
                   help="[phase/]role:MxNxK items, e.g. decode/qkv_proj:1x6144x4096")
    p.add_argument("--model", default="llama-3.1-8b", help="model whose projections to run (without --shapes)")
    p.add_argument("--tokens", default="1,2048", help="comma-separated M values for --model")
    p.add_argument("--impl", default="det", help=f"comma-separated, of: {', '.join(IMPLS)}, portable")
    p.add_argument("--repeat", type=int, default=1, help="calls per range")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from profiler.errors import SmlensError
    try:
        impls = [s.strip() for s in args.impl.split(",") if s.strip()]
        bad = [i for i in impls if i not in IMPLS + ("portable",)]
        if bad:
            raise SmlensError(f"unknown --impl {', '.join(bad)}; choose from {', '.join(IMPLS)}, portable")
        if args.shapes:
            cases = [parse_shape_item(s) for s in args.shapes]
        else:
            try:
                tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
            except ValueError:
                raise SmlensError("--tokens takes comma-separated integers, e.g. 1,2048") from None
            cases = model_cases(args.model, tokens)
        if not torch or not torch.cuda.is_available():
            from profiler.errors import EnvironmentProblem
            raise EnvironmentProblem("the deterministic workload needs a CUDA GPU with torch and triton")
        result = run_workload(cases, impls, args.repeat, args.seed)
    except SmlensError as err:
        print(f"smlens: {err}", file=sys.stderr)
        return err.exit_code
    import json
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
