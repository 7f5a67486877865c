"""The usual ways to get (some) determinism, against which the deterministic GEMMs are measured
(docs/DETERMINISM.md): LayerCast, cuBLAS bf16 as it is, and a batch-invariant tensor-core matmul."""
from __future__ import annotations

from profiler.workloads.deterministic.stack import HAVE_TRITON, need_gpu_stack, tl, torch, triton

if HAVE_TRITON:

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


def layercast_linear(x, w, bias=None):
    """The usual fix: upcast the weights on every call, FP32 cuBLAS with TF32 off."""
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.nn.functional.linear(x.float(), w.float(), None if bias is None else bias.float())


def cublas_bf16_linear(x, w, bias=None):
    return torch.nn.functional.linear(x.to(w.dtype), w, bias)


BI_TC_TILE = (128, 128, 64, 8, 3)   # BM, BN, BK, warps, stages: one tile for every shape


def bi_tc_linear(x, w, bias=None):
    """Batch-invariant tensor-core baseline: bf16 in, FP32 accumulate, 16-bit out."""
    need_gpu_stack()
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

