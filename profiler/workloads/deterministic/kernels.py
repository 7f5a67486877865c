"""Deterministic fused-upcast GEMMs `y = x . W^T (+ bias)` on the GPU, and `Linear`, which runs
one projection through them or through a baseline (baselines.py).

The bits of every output element depend on the problem's K and on constants of this package only,
never on M (the batch), the GPU, the run or the SM count (docs/DETERMINISM.md):

* 16-bit weights (bf16, fp16) are upcast to FP32 in registers; x is FP32; products are accumulated
  with IEEE-754 FP32 FMA on the CUDA cores (never tensor cores, never TF32).
* Every kernel here computes the canonical reduction order of reference.py, whatever its tiling:
  the decode kernel (small M) runs the K chains in parallel programs (a deterministic split-K: a
  scratch buffer of chain partials summed in that fixed order, no atomics; the split count is the
  chain count, a function of K alone), the tile kernel (M > 16) runs them one after the other
  inside each program.
* Tile configurations are constants chosen by the problem shape (`choose_config`): no autotuning,
  nothing read off the device.
* CUDA C++ builds of the tile and decode kernels (det_sgemm.cu, det_prefill_ws.cu, det_decode.cu,
  cuda_gemm.py) run instead where adopted (CUDA_TILE_CONFIG from bucket CUDA_TILE_MIN_M up, CUDA_DECODE_RULES and
  CUDA_GEMV_CONFIGS by bucket), built by nvcc at first use on the GPU; where they cannot build or
  take the operands, the Gluon kernels run (the same order, the same bits).

The GPU kernels need torch and triton (the `gpu` extra). The fast ones are written in Gluon
(triton.experimental.gluon, Triton >= 3.5) because plain Triton gives no control over which thread
holds which accumulator, and its FMA lowering of `tl.dot` is an order of magnitude short of both
limits (docs/DETERMINISM.md). `portable_linear` (`Linear(w)(x, "portable")`) is a plain-Triton kernel
with the same order that runs anywhere Triton runs, including `TRITON_INTERPRET=1` on a CPU; without
Gluon or a CUDA device, `det_linear` falls back to it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from profiler.workloads.deterministic import cuda_gemm
from profiler.workloads.deterministic.baselines import bi_tc_linear, cublas_bf16_linear, layercast_linear
from profiler.workloads.deterministic.cuda_gemm import CudaDecodeConfig, CudaGemvConfig, CudaTileConfig, CudaWsConfig
from profiler.workloads.deterministic.reference import CHAIN_K, chain_count, reference_linear
from profiler.workloads.deterministic.stack import (HAVE_GLUON, HAVE_TRITON, cp_async, gl, gluon,
                                                    need_gpu_stack, tl, torch, triton)

K_MULTIPLE = 32        # the fast kernels need K % 32 == 0; other K run the portable kernel

IMPLS = ("det", "layercast", "cublas_bf16", "bi_tc")
IMPL_TITLES = {
    "det": "deterministic FP32-FMA (this module)",
    "layercast": "LayerCast: F.linear(x_fp32, w.float()), TF32 off",
    "cublas_bf16": "cuBLAS bf16 F.linear",
    "bi_tc": "batch-invariant tensor-core Triton matmul (one tile, no split-K)",
    "portable": "deterministic FP32-FMA, plain Triton (slow; same bits as det)",
}


# --- configurations: constants by shape bucket ----------------------------------------------------

@dataclass(frozen=True)
class GemvConfig:
    """Decode kernel (M up to the largest key of GEMV_CONFIGS): one program per (BLOCK_N columns,
    chain), all M rows.

    W^T rows stream through a ring of `stages` shared-memory buffers of `rows` k rows (cp.async),
    so the bytes in flight cost no registers. The program's warps_m x warps_n warps share the ring:
    a thread holds `rows_per_thread` rows of M and `vec_n` adjacent columns. `registers`: each thread
    loads its own weights into registers, 8 rows ahead, and holds all M rows (det_gemv_reg_kernel:
    no shared memory for W, no barrier in the k loop; warps_m must be 1, rows and stages unused).
    The fold kernel sums the chain partials in `fold_block` outputs per program of `fold_warps`
    warps (one output per thread: every partial's load in flight at once)."""
    rows_per_thread: int
    vec_n: int
    warps_m: int
    warps_n: int
    rows: int = 16
    stages: int = 4
    pairs: bool = True       # bf16 weights: upcast 32-bit pairs with one shift or mask each
    registers: bool = False
    fold_block: int = 256
    fold_warps: int = 2
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
        """Shared memory for W (the x slice, CHAIN_K x block_m FP32, comes on top)."""
        return 0 if self.registers else self.stages * self.rows * self.block_n * weight_bytes


@dataclass(frozen=True)
class TileConfig:
    """Tile kernel (larger M): one program per BLOCK_M x BLOCK_N output tile, chains in turn.

    Thread (i, j) holds a `spt_m` x `spt_n` register block (repeated to cover the tile); x^T and W^T
    tiles of `block_k` rows reach shared memory as FP32 (W upcast on the way): through registers,
    double-buffered (`stages` = 0), or by cp.async into a ring of `stages` buffers. `total_smem`
    keeps the running sum of chain partials in shared memory rather than in registers. `ring`:
    det_gemm_fma_ring_kernel (cp.async ring of 4, one barrier per tile; K a multiple of 4 block_k,
    else the register-staged kernel runs); `maxnreg` caps its registers (0: the compiler's choice)
    so that more programs fit on an SM."""
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
    ring: bool = False
    maxnreg: int = 0
    kind: str = "tile"

    @property
    def warps(self) -> int:
        return self.wpc_m * self.wpc_n

    def smem_bytes(self, weight_bytes: int = 2) -> int:
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        if self.ring:
            return 4 * bk * (bm * 4 + bn * weight_bytes) + 2 * bk * bn * 4
        if self.stages:
            staged = self.stages * bk * (bm * 4 + bn * weight_bytes) + bk * bn * 4
        else:
            staged = 2 * bk * (bm + bn) * 4
        return staged + (bm * bn * 4 if self.total_smem else 0)


# The constants. Changing one changes speed, never bits: the order is fixed by CHAIN_K alone. Picked
# from the H200 sweeps (benchmarks/DETERMINISM_NOTES.md; issue 16's calls chose by the smallest
# worst ratio to cuBLAS bf16 over Llama-3.1-8B's four projections).
_FOLD_ONE_PER_THREAD = dict(fold_block=128, fold_warps=4)
GEMV_CONFIGS = {
    1: GemvConfig(1, 2, 1, 4, rows=32, stages=3, **_FOLD_ONE_PER_THREAD),
    2: GemvConfig(2, 2, 1, 4),
    4: GemvConfig(4, 2, 1, 4),
    8: GemvConfig(8, 2, 1, 4),
    16: GemvConfig(16, 2, 1, 4, registers=True),
    # M = 17..64 split K too: one tile program per column block left most of the GPU idle
    32: GemvConfig(32, 2, 1, 4, registers=True, **_FOLD_ONE_PER_THREAD),
    64: GemvConfig(16, 4, 4, 1, **_FOLD_ONE_PER_THREAD),
}
# M > 64: two programs of 4 warps per SM beat one of 8 (each barrier stops fewer warps)
TILE_CONFIG = TileConfig(128, 64, 16, 8, 4, 4, 8, 4, 1)
# From bucket CUDA_TILE_MIN_M up, the CUDA C++ tile kernel (cuda_gemm.py) where it builds, else
# TILE_CONFIG's Gluon kernel (same bits). Issue 16 call 7 (tests/data/h200_det/prefill7c.json): 128 x 128
# tiles, 8 x 16 per thread, two 4-warp programs per SM, columns-outer FMA order: 5-9 % less time than
# the Gluon kernel at M = 2048 on all four projections (0.95-0.98x LayerCast). From bucket 1024: at
# M = 256 the 128 x 128 CUDA tiles lost to Gluon's 128 x 64 (too few programs), at 1024 they won.
# Call 8 (prefill8a.json, prefill8b.json): the same tiles with three shared buffers and an mbarrier
# each instead of a barrier per tile (flags 4): 1.6-2.9 % less time again on all four, 0.97-0.996x LayerCast.
# Call 13 (prefill13o-*.json, 4 runs of 2 sweeps): the register block's FMAs columns outer in a snake
# (order 1), the running total as float4s (256) and call 8's early ring (8): flags 284, 3.8-4.4 % less
# time than call 8's kernel, 1.010-1.037x LayerCast on all four (the register allocation: see the notes).
# Call 13, det_prefill_ws.cu (prefill13a-e.json): the warp-specialized kernel (256 x 128 programs of
# two consumer warpgroups that only multiply and one producer warpgroup; BK 8, a ring of 6 buffers):
# 1.3-1.6 % less time than flags 284 and 5.4-5.6 % less than call 8's kernel on all four projections
# at M = 2048 (run e, head to head; 1.3-1.6 % less than flags 284 at M = 1024), 1.03-1.05x LayerCast.
CUDA_TILE_CONFIG: CudaTileConfig | CudaWsConfig | None = CudaWsConfig(8, 6, True)
CUDA_TILE_MIN_M = 1024
# Decode buckets that run det_decode.cu's kernel where it builds and takes the operands (else
# GEMV_CONFIGS' Gluon one, the same bits): per bucket, (min_n, min_k, configuration) rules, the first
# with N >= min_n and K >= min_k wins, the last catches all. Chosen by the H200 calls 7a-7c
# (benchmarks/DETERMINISM_NOTES.md, tests/data/h200_det/sweep7c.json): long K (down) and wide N
# (gate_up) take the wider register blocks; narrow projections at M = 16 take blocks of 8 rows as
# programs of their own (twice the programs where 8 or 12 column tiles leave SMs idle). Call 13
# (sweep13a.json, sweep13b.json): at M = 16 the same shapes with a W^T row's FMAs written in another
# order (flags >> 2; the bits are the same), gate_up also 8-row stages, qkv and o 16-row stages in two
# slots: 2-6 % less time on all four.
_DEC = CudaDecodeConfig
CUDA_DECODE_RULES: dict[int, tuple[tuple[int, int, CudaDecodeConfig], ...]] = {
    8: ((16384, 0, _DEC(8, 8, 4, 4, 3, 4, 1)), (0, 8192, _DEC(8, 8, 4, 4, 3, 4, 1)),
        (0, 0, _DEC(8, 2, 4, 8, 4, 8, 3))),
    16: ((0, 8192, _DEC(16, 8, 4, 8, 2, 3, 21)), (16384, 0, _DEC(16, 4, 4, 8, 3, 4, 7)),
         (0, 0, _DEC(8, 4, 4, 16, 2, 6, 7))),
}
# How det_decode.cu's partials are folded: det_decode.cu's fold kernel in this mode (cuda_gemm's
# FOLD_* bits; call 14), or, None, kernels.py's Triton fold kernel
CUDA_FOLD_MODE: int | None = cuda_gemm.FOLD_WAIT | cuda_gemm.FOLD_DEEP
# Decode buckets that run det_sgemm.cu's first CUDA decode kernel (none adopted)
CUDA_GEMV_CONFIGS: dict[int, CudaGemvConfig] = {}
SMEM_LIMIT_BYTES = 99 * 1024   # the smallest per-block shared memory among Ampere, Ada and Hopper


def _next_pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def choose_config(M: int, N: int, K: int):
    """The kernel configuration for a problem shape, by the M bucket (the power of two at or above
    M) and, for the CUDA decode kernel, N and K: the decode kernel's where CUDA_DECODE_RULES or
    GEMV_CONFIGS has the bucket, else the tile kernel's; N and K never pick a different order (any
    configuration gives the same bits). Returns None when K needs the portable kernel."""
    if min(M, N, K) <= 0:
        raise ValueError(f"shape must be positive, got M={M} N={N} K={K}")
    if K % K_MULTIPLE:
        return None
    bucket = _next_pow2(M)
    if bucket in CUDA_DECODE_RULES:
        return next(cfg for min_n, min_k, cfg in CUDA_DECODE_RULES[bucket] if N >= min_n and K >= min_k)
    if bucket in CUDA_GEMV_CONFIGS:
        return CUDA_GEMV_CONFIGS[bucket]
    if bucket in GEMV_CONFIGS:
        return GEMV_CONFIGS[bucket]
    if CUDA_TILE_CONFIG is not None and bucket >= CUDA_TILE_MIN_M:
        return CUDA_TILE_CONFIG
    return TILE_CONFIG


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


if HAVE_GLUON:

    @gluon.jit
    def _x_chain_slice(x_ptr, M, K, stride_xm, k0, BM: gl.constexpr, CHAIN: gl.constexpr, NW: gl.constexpr):
        """A chain's slice of x, [BM, CHAIN] from column k0, read once (coalesced along k) and kept
        transposed in shared memory: row k then gives a thread its adjacent rows of x in one load.
        Returns the [CHAIN, BM] rows (the caller's barrier makes them visible)."""
        XG: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [NW, 1], [1, 0])
        xm_ = gl.arange(0, BM, layout=gl.SliceLayout(1, XG))
        xk_ = k0 + gl.arange(0, CHAIN, layout=gl.SliceLayout(0, XG))
        xg = gl.load(x_ptr + xm_[:, None] * stride_xm + xk_[None, :],
                     mask=(xm_ < M)[:, None] & (xk_ < K)[None, :], other=0.0)
        xs = gl.allocate_shared_memory(gl.float32, [CHAIN, BM], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        xs.store(gl.permute(xg, [1, 0]))
        return xs._reinterpret(gl.float32, [CHAIN, BM], gl.SwizzledSharedLayout(1, 1, 1, [0]))

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

        xrows = _x_chain_slice(x_ptr, M, K, stride_xm, k0, BM, CHAIN, NW)

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
    def _fma_row(acc, acc_hi, u, xk, PAIRS: gl.constexpr):
        """One k row: acc[m, n] = fma(x[m, k], w[k, n], acc[m, n]) for the thread's rows and columns.
        PAIRS: u holds bf16 pairs as int32 (even column low, odd column high), upcast with one shift
        or one mask each, even and odd columns in acc and acc_hi; else u is 16-bit."""
        if PAIRS:
            lo = (u << 16).to(gl.float32, bitcast=True)
            hi = (u & -65536).to(gl.float32, bitcast=True)
            acc = gl.fma(xk, gl.expand_dims(lo, 0), acc)
            acc_hi = gl.fma(xk, gl.expand_dims(hi, 0), acc_hi)
        else:
            acc = gl.fma(xk, gl.expand_dims(u.to(gl.float32), 0), acc)
        return acc, acc_hi

    @gluon.jit
    def _load_rows8(wp, row, NP):
        """The thread's words of 8 consecutive rows of W^T, from word offset `row` (int64)."""
        return (gl.load(wp + row), gl.load(wp + (row + NP)), gl.load(wp + (row + 2 * NP)),
                gl.load(wp + (row + 3 * NP)), gl.load(wp + (row + 4 * NP)), gl.load(wp + (row + 5 * NP)),
                gl.load(wp + (row + 6 * NP)), gl.load(wp + (row + 7 * NP)))

    @gluon.jit
    def _fma_rows8(acc, acc_hi, w, xrows, kb, XL: gl.constexpr, PAIRS: gl.constexpr):
        """Rows kb .. kb + 7 of the chain, in order: w the thread's weights of those rows."""
        for r in gl.static_range(8):
            xk = gl.expand_dims(xrows.index(kb + r).load(XL), 1)
            acc, acc_hi = _fma_row(acc, acc_hi, w[r], xk, PAIRS)
        return acc, acc_hi

    @gluon.jit
    def det_gemv_reg_kernel(x_ptr, w_ptr, part_ptr, M, N, K, stride_xm,
                            CHAIN: gl.constexpr, TM: gl.constexpr, VN: gl.constexpr, NW: gl.constexpr,
                            PAIRS: gl.constexpr):
        """One chain j of BN columns for all BM = TM rows, with no barrier in the k loop.

        Each thread holds all TM rows of its VN columns and loads its own weights straight into
        registers, 8 k rows at a time, the next 8 in flight while the current 8 are multiplied
        (two sets of registers, alternating: no copies). No shared memory for W, so there is
        nothing to wait for but the thread's own loads. The chain's slice of x sits transposed in
        shared memory (one barrier before the loop); row k of it gives every thread the TM values
        of x it needs (a broadcast read). Same FMAs in the same order as det_gemv_fma_kernel.
        w_ptr: W^T [K, N] bf16 read as int32 pairs [K, N / 2] when PAIRS; N a multiple of BN (the
        caller checks), K of 16; a chain's last loads re-read rows already read rather than run
        past K (no masks in the loop)."""
        BM: gl.constexpr = TM
        PV: gl.constexpr = VN // 2 if PAIRS else VN       # loaded words per thread and row
        BP: gl.constexpr = PV * 32 * NW
        LW: gl.constexpr = gl.BlockedLayout([TM, PV], [1, 32], [1, NW], [1, 0])
        XL: gl.constexpr = gl.SliceLayout(1, LW)
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        RL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

        pid_n = gl.program_id(0)
        j = gl.program_id(1)
        k0 = j * CHAIN
        steps = gl.minimum(K - k0, CHAIN) // 8             # a multiple of 2: K % 16 == 0
        NP = N // 2 if PAIRS else N                        # words per row of W^T
        wp = w_ptr + pid_n * BP + gl.arange(0, BP, layout=gl.SliceLayout(0, LW))
        row = k0.to(gl.int64) * NP
        last = (K - 8).to(gl.int64) * NP                    # the last 8 rows' offset: loads stay below K
        w = _load_rows8(wp, row, NP)

        xrows = _x_chain_slice(x_ptr, M, K, stride_xm, k0, BM, CHAIN, NW)
        gl.thread_barrier()

        acc = gl.full([BM, BP], 0.0, gl.float32, LW)
        acc_hi = gl.full([BM, BP], 0.0, gl.float32, LW)
        for i in range(0, steps, 2):
            row = gl.minimum(row + 8 * NP, last)
            n = _load_rows8(wp, row, NP)
            acc, acc_hi = _fma_rows8(acc, acc_hi, w, xrows, i * 8, XL, PAIRS)
            row = gl.minimum(row + 8 * NP, last)
            w = _load_rows8(wp, row, NP)
            acc, acc_hi = _fma_rows8(acc, acc_hi, n, xrows, i * 8 + 8, XL, PAIRS)

        offs_m = gl.arange(0, BM, layout=gl.SliceLayout(1, LW))
        omask_m = gl.expand_dims(offs_m < M, 1)
        if PAIRS:
            offs_p = pid_n * BP * 2 + 2 * gl.arange(0, BP, layout=gl.SliceLayout(0, LW))
            out = part_ptr + j * M * N + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_p, 0)
            gl.store(out, acc, mask=omask_m)
            gl.store(out + 1, acc_hi, mask=omask_m)
        else:
            offs_n = pid_n * BP + gl.arange(0, BP, layout=gl.SliceLayout(0, LW))
            out = part_ptr + j * M * N + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
            gl.store(out, acc, mask=omask_m)

    @gluon.jit
    def _tile_sources(xt_ptr, wt_ptr, pid_m, pid_n, M, N, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                      XL: gl.constexpr, WL: gl.constexpr, EVEN_M: gl.constexpr, EVEN_N: gl.constexpr):
        """Addresses and masks of a program's first [BK, BM] x^T tile and [BK, BN] W^T tile (the
        next tiles are BK rows further: + BK * M, + BK * N)."""
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
        return x_src, w_src, xmask, wmask

    @gluon.jit
    def _tile_store(total, y_ptr, bias_ptr, pid_m, pid_n, M, N, BM: gl.constexpr, BN: gl.constexpr,
                    L: gl.constexpr, HAS_BIAS: gl.constexpr):
        """y[tile] = total (+ bias, after the reduction)."""
        offs_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L))
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
        if HAS_BIAS:
            total = total + gl.expand_dims(gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32), 0)
        out = y_ptr + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
        gl.store(out, total, mask=gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0))

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

        x_src, w_src, xmask, wmask = _tile_sources(xt_ptr, wt_ptr, pid_m, pid_n, M, N, BM, BN, BK, XL, WL,
                                                   EVEN_M, EVEN_N)
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

        _tile_store(total, y_ptr, bias_ptr, pid_m, pid_n, M, N, BM, BN, L, HAS_BIAS)

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

        x_src, w_src, xmask, wmask = _tile_sources(xt_ptr, wt_ptr, pid_m, pid_n, M, N, BM, BN, BK, XL, WL,
                                                   EVEN_M, EVEN_N)
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

        _tile_store(total, y_ptr, bias_ptr, pid_m, pid_n, M, N, BM, BN, L, HAS_BIAS)


    @gluon.jit
    def _ring_copy(xbuf, wbuf, x_src, w_src, xmask, wmask, t, T, x_step, w_step):
        """Tile t of x^T and W^T into one ring slot by cp.async, one commit group (zeros past T)."""
        cp_async.async_copy_global_to_shared(xbuf, x_src + t * x_step, mask=xmask & (t < T))
        cp_async.async_copy_global_to_shared(wbuf, w_src + t * w_step, mask=wmask & (t < T))
        cp_async.commit_group()

    @gluon.jit
    def det_gemm_fma_ring_kernel(xt_ptr, wt_ptr, bias_ptr, y_ptr, M, N, K,
                                 CHAIN: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                                 L: gl.constexpr, XL: gl.constexpr, WL: gl.constexpr,
                                 CVL: gl.constexpr, HAS_BIAS: gl.constexpr, EVEN_M: gl.constexpr,
                                 EVEN_N: gl.constexpr):
        """The tile kernel with one barrier per tile and no staging registers.

        x^T and W^T tiles reach a ring of 4 shared buffers by cp.async, 2 tiles ahead. In the step
        of tile t every thread waits for its own copies of tile t + 1, one barrier makes everyone's
        visible (and ends every read of step t - 1), then tile t + 3 is sent for, tile t + 1's W^T
        is upcast once into an FP32 buffer, and tile t is multiplied from the other FP32 buffer.
        Every buffer is an allocation of its own and the loop is unrolled by 4 tiles, so that each
        buffer's role is fixed at compile time and no further barrier has to guard it. Same FMAs
        in the same order as det_gemm_fma_kernel; K a multiple of 4 * BK."""
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        RL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        pid_m = gl.program_id(0)
        pid_n = gl.program_id(1)
        xb = (gl.allocate_shared_memory(gl.float32, [BK, BM], SL), gl.allocate_shared_memory(gl.float32, [BK, BM], SL),
              gl.allocate_shared_memory(gl.float32, [BK, BM], SL), gl.allocate_shared_memory(gl.float32, [BK, BM], SL))
        wdt = wt_ptr.dtype.element_ty
        wb = (gl.allocate_shared_memory(wdt, [BK, BN], SL), gl.allocate_shared_memory(wdt, [BK, BN], SL),
              gl.allocate_shared_memory(wdt, [BK, BN], SL), gl.allocate_shared_memory(wdt, [BK, BN], SL))
        wf = (gl.allocate_shared_memory(gl.float32, [BK, BN], SL), gl.allocate_shared_memory(gl.float32, [BK, BN], SL))

        x_src, w_src, xmask, wmask = _tile_sources(xt_ptr, wt_ptr, pid_m, pid_n, M, N, BM, BN, BK, XL, WL,
                                                   EVEN_M, EVEN_N)
        x_step = BK * M
        w_step = BK * N
        T = K // BK
        for s in gl.static_range(3):
            _ring_copy(xb[s], wb[s], x_src, w_src, xmask, wmask, s, T, x_step, w_step)
        cp_async.wait_group(2)
        gl.thread_barrier()
        wf[0].store(wb[0].load(CVL).to(gl.float32))

        TPC: gl.constexpr = CHAIN // BK
        total = gl.full([BM, BN], -0.0, gl.float32, L)
        for j in range(gl.cdiv(T, TPC)):
            acc = gl.full([BM, BN], 0.0, gl.float32, L)
            for tt in range(0, gl.minimum(TPC, T - j * TPC), 4):
                for u in gl.static_range(4):
                    t = j * TPC + tt + u
                    cp_async.wait_group(1)          # this thread's copies of tile t + 1 have landed
                    gl.thread_barrier()
                    _ring_copy(xb[(u + 3) % 4], wb[(u + 3) % 4], x_src, w_src, xmask, wmask, t + 3, T,
                               x_step, w_step)
                    wf[(u + 1) % 2].store(wb[(u + 1) % 4].load(CVL).to(gl.float32))
                    xr = xb[u]._reinterpret(gl.float32, [BK, BM], RL)
                    wr = wf[u % 2]._reinterpret(gl.float32, [BK, BN], RL)
                    for kk in gl.static_range(BK):
                        a = xr.index(kk).load(gl.SliceLayout(1, L))
                        b = wr.index(kk).load(gl.SliceLayout(0, L))
                        acc = gl.fma(gl.expand_dims(a, 1), gl.expand_dims(b, 0), acc)
            total = total + acc
        cp_async.wait_group(0)

        _tile_store(total, y_ptr, bias_ptr, pid_m, pid_n, M, N, BM, BN, L, HAS_BIAS)

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
    if w.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"weights must be bf16 or fp16, got {w.dtype}")
    return w.t().contiguous()



def _launch_gemv(x, wt, bias, cfg: GemvConfig, chain_k: int, fold: bool = True):
    M, K = x.shape
    N = wt.shape[1]
    S = chain_count(K, chain_k)
    direct = S == 1 and bias is None         # one chain, no bias: the partial is y
    part = torch.empty((M, N) if direct else (S, M, N), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(N, cfg.block_n), S)
    pairs = cfg.pairs and cfg.vec_n > 1 and wt.dtype == torch.bfloat16 and N % 2 == 0
    if cfg.registers and (N % cfg.block_n or K % 16):   # unmasked loads: the shared-ring kernel instead
        cfg = replace(cfg, registers=False)
    if cfg.registers:
        det_gemv_reg_kernel[grid](x, wt.view(torch.int32) if pairs else wt, part, M, N, K, x.stride(0),
                                  CHAIN=chain_k, TM=cfg.rows_per_thread, VN=cfg.vec_n, NW=cfg.warps_n,
                                  PAIRS=pairs, num_warps=cfg.warps)
    else:
        det_gemv_fma_kernel[grid](x, wt, part, M, N, K, x.stride(0), CHAIN=chain_k, TM=cfg.rows_per_thread,
                                  VN=cfg.vec_n, WM=cfg.warps_m, WN=cfg.warps_n, R=cfg.rows, STAGES=cfg.stages,
                                  EVEN_M=(M == cfg.block_m), EVEN_N=(N % cfg.block_n == 0),
                                  PAIRS=pairs, num_warps=cfg.warps)
    if direct or not fold:           # not fold: benchmarks, the partials alone
        return part
    return _fold(part, bias, cfg.fold_block, cfg.fold_warps)


def _fold(part, bias, fold_block: int, fold_warps: int):
    """y [M, N] = the chain partials part [S, M, N] summed in chain order (+ bias)."""
    S, M, N = part.shape
    y = torch.empty(M, N, device=part.device, dtype=torch.float32)
    det_fold_splitk_reduce_kernel[(triton.cdiv(M * N, fold_block),)](
        part, bias if bias is not None else part, y, M * N, N, S=S,
        HAS_BIAS=bias is not None, BLOCK=fold_block, num_warps=fold_warps)
    return y


def _launch_cuda_gemv(x, wt, bias, cfg: CudaGemvConfig | CudaDecodeConfig, chain_k: int, fold: bool = True):
    """The CUDA decode kernel's partials, folded (det_decode.cu's fold kernel in CUDA_FOLD_MODE, else
    the Triton one); None where it cannot run."""
    if (fold and CUDA_FOLD_MODE is not None and isinstance(cfg, CudaDecodeConfig)
            and (bias is not None or chain_count(x.shape[1], chain_k) > 1)):
        y = cuda_gemm.gemv_linear(x, wt, bias, cfg, chain_k, CUDA_FOLD_MODE)
        if y is not None:
            return y
    part = cuda_gemm.gemv_partials(x, wt, cfg, chain_k)
    if part is None:
        return None
    if part.shape[0] == 1 and bias is None:
        return part[0]
    if not fold:           # benchmarks: the partials alone
        return part
    return _fold(part, bias, cfg.fold_block, cfg.fold_warps)


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
    if cfg.ring and K % (4 * cfg.block_k) == 0:
        del common["TOTAL_SMEM"]
        det_gemm_fma_ring_kernel[grid](xt, wt, b, y, M, N, K, CVL=CVL, **common,
                                       **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
    elif cfg.stages:
        det_gemm_fma_cp_kernel[grid](xt, wt, b, y, M, N, K, STAGES=cfg.stages, CVL=CVL, **common)
    else:
        det_gemm_fma_kernel[grid](xt, wt, b, y, M, N, K, **common)
    return y


def portable_linear(x, w, bias=None, chain_k: int = CHAIN_K, block: int = 16):
    """The canonical order in plain Triton over W in its [N, K] layout (runs under TRITON_INTERPRET=1)."""
    need_gpu_stack()
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
    never bits). On a CPU tensor the order runs as its exact emulation (reference.py): the bits the
    GPU kernels give, without a GPU or Triton."""
    if x.dim() != 2 or wt.dim() != 2 or x.shape[1] != wt.shape[0]:
        raise ValueError(f"need x [M, K] and W^T [K, N], got {tuple(x.shape)} and {tuple(wt.shape)}")
    if x.device.type == "cpu":
        return torch.from_numpy(reference_linear(x, wt.t(), bias, chain_k))
    need_gpu_stack()
    x = x.float().contiguous()
    M, K = x.shape
    N = wt.shape[1]
    cfg = config or choose_config(M, N, K)
    if isinstance(cfg, (CudaTileConfig, CudaWsConfig)):
        y = cuda_gemm.linear(x, wt, bias, cfg, chain_k)
        if y is not None:
            return y
        cfg = TILE_CONFIG          # no nvcc, no build, or operands it does not take: same bits
    elif isinstance(cfg, (CudaGemvConfig, CudaDecodeConfig)):
        y = _launch_cuda_gemv(x, wt, bias, cfg, chain_k, fold)
        if y is not None:
            return y
        cfg = GEMV_CONFIGS.get(_next_pow2(M), TILE_CONFIG)     # the Gluon kernels: same bits
    if cfg is None or not HAVE_GLUON or chain_k % K_MULTIPLE:
        return portable_linear(x, wt.t(), bias, chain_k)
    if isinstance(cfg, GemvConfig):
        return _launch_gemv(x, wt, bias, cfg, chain_k, fold)
    return _launch_tile(x, wt, bias, cfg, chain_k)


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


