"""Batch-invariant RMSNorm and attention for the deterministic decoder (generate.py).

The linear layers are not the only reductions in a decoder: RMSNorm sums over the hidden size and
attention over the KV length, and the usual kernels pick their reduction split by the number of rows
or sequences in the batch (a library may split a row's reduction across blocks when few rows fill
the GPU). Here every reduction runs in one program per row (norm) or per query token and head
(attention), in a fixed order set by the row's own length alone:

* RMSNorm: lanes of a BLOCK-wide FP32 accumulator sum x*x over the row in BLOCK steps, then one
  `tl.sum` of the lanes (a tree fixed by BLOCK and the warp count, both constants).
* Attention: the query's KV positions 0..pos in chunks of ATTENTION_BLOCK, in increasing order, with an
  online softmax in FP32 (running max, running sum, rescaled accumulator); the dot products over the
  head dimension are `tl.sum`s of a fixed layout. No split over the KV length, so no combine step.

Nothing depends on the batch size, the other sequences or the device's SM count. The bits are those
of one GPU type (exp and the tree of a `tl.sum` are the compiler's), which is all that batch
invariance needs; the linear layers are the ones made equal across GPUs (kernels.py). Both kernels
run under TRITON_INTERPRET=1 on a CPU, which the tests use.
"""
from __future__ import annotations

from profiler.workloads.deterministic.stack import HAVE_TRITON, need_gpu_stack, tl, torch, triton

NORM_BLOCK = 1024     # lanes of the RMSNorm accumulator (a constant: the order depends on it)
ATTENTION_BLOCK = 64  # KV positions per chunk of the online softmax (likewise)
NUM_WARPS = 4

if HAVE_TRITON:

    @triton.jit
    def bi_rms_norm_kernel(x_ptr, w_ptr, y_ptr, eps, H: tl.constexpr, BLOCK: tl.constexpr):
        """y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, one program per row r, FP32 throughout (loop
        bounds are compile-time constants, as Triton's interpreter needs)."""
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, H, BLOCK):
            x = tl.load(x_ptr + row * H + start + offs, mask=start + offs < H, other=0.0).to(tl.float32)
            acc = acc + x * x
        rstd = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            mask = start + offs < H
            x = tl.load(x_ptr + row * H + start + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * H + start + offs, x * rstd * w, mask=mask)

    @triton.jit
    def bi_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_ptr, pos_ptr, scale,
                            H, KVH, MAX_LEN: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        """Causal attention of one query token t and head h over its sequence's KV cache.

        q, o: [T, H, D]; k, v caches: [B, KVH, MAX_LEN, D]; seq[t], pos[t]: the token's sequence
        and position (it attends to positions 0..pos[t]). FP32 accumulation; D a power of two."""
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        b = tl.load(seq_ptr + t).to(tl.int64)
        pos = tl.load(pos_ptr + t)
        kvh = h // (H // KVH)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + (t * H + h) * D + d).to(tl.float32)
        base = (b * KVH + kvh) * MAX_LEN * D
        m_run = tl.full([1], float("-inf"), tl.float32)
        l_run = tl.zeros([1], tl.float32)
        acc = tl.zeros([D], tl.float32)
        # every chunk of the cache, those past pos left out by selection: the bound is a constant
        # (a CUDA graph replays this kernel at every decode step), and an unselected chunk changes no bit
        for start in range(0, MAX_LEN, BLOCK):
            kv = start + tl.arange(0, BLOCK)
            valid = kv <= pos
            k = tl.load(k_ptr + base + kv[:, None] * D + d[None, :], mask=valid[:, None], other=0.0)
            s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m_run, tl.max(s, axis=0))
            alpha = tl.exp(m_run - m_new)
            p = tl.exp(s - m_new)
            v = tl.load(v_ptr + base + kv[:, None] * D + d[None, :], mask=valid[:, None], other=0.0)
            live = start <= pos
            l_run = tl.where(live, l_run * alpha + tl.sum(p, axis=0), l_run)
            acc = tl.where(live, acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0), acc)
            m_run = tl.where(live, m_new, m_run)
        tl.store(o_ptr + (t * H + h) * D + d, acc / l_run)


def bi_rms_norm(x, weight, eps: float, block: int = NORM_BLOCK):
    """RMSNorm over the last dimension of x [..., H], FP32 out, batch-invariant (module doc)."""
    need_gpu_stack()
    x = x.contiguous()
    H = x.shape[-1]
    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    rows = x.numel() // H
    bi_rms_norm_kernel[(rows,)](x, weight, y, eps, H=H, BLOCK=block, num_warps=NUM_WARPS)
    return y


def bi_attention(q, k_cache, v_cache, seq, pos, block: int = ATTENTION_BLOCK):
    """Causal attention, batch-invariant (module doc). q [T, H, D]; caches [B, KVH, MAX_LEN, D];
    seq, pos [T] int32 on q's device: each token's sequence and position. Returns FP32 [T, H, D]."""
    need_gpu_stack()
    T, H, D = q.shape
    _, KVH, max_len, _ = k_cache.shape
    o = torch.empty(T, H, D, device=q.device, dtype=torch.float32)
    bi_attention_kernel[(T, H)](q.contiguous(), k_cache, v_cache, o, seq, pos, D ** -0.5, H, KVH,
                                MAX_LEN=max_len, D=D, BLOCK=block, num_warps=NUM_WARPS)
    return o
