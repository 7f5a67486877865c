"""The CPU reference of the deterministic GEMMs: their reduction order and FP32 FMA, exactly.

The order (docs/DETERMINISM.md): K is cut into chains of `CHAIN_K` consecutive k (the last one may
be shorter); each chain is a sequential FMA chain `acc = fma(x[m,k], w[n,k], acc)` from +0.0 in
increasing k; the chain partials are summed left to right, `y = ((p0 + p1) + p2) + ...`, and the
bias, if any, is added last. It depends on K and CHAIN_K only, never on M, the GPU or the tiling.

`reference_linear` reproduces it on the CPU (FP32 FMA emulated in float64 with an exact correction
of the one case where rounding twice differs from rounding once), so GPU bits equal to it are the
evidence for "the same on every IEEE-compliant GPU". `reference_pairs` computes single outputs
(m, n) the same way, for a sample spread over a whole output. numpy only: no torch, no GPU.
"""
from __future__ import annotations

import numpy as np

CHAIN_K = 256          # k per FMA chain: with K this fixes every output element's reduction order


def chain_bounds(K: int, chain_k: int = CHAIN_K) -> list[tuple[int, int]]:
    """[k0, k1) of each FMA chain, in the order their partials are summed."""
    if K <= 0:
        raise ValueError(f"K must be positive, got {K}")
    return [(k0, min(K, k0 + chain_k)) for k0 in range(0, K, chain_k)]


def chain_count(K: int, chain_k: int = CHAIN_K) -> int:
    """The split count of the decode kernel: a function of K alone."""
    return -(-K // chain_k)


# --- exact FP32 FMA ---------------------------------------------------------------------------------

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


def _ordered_sums(products, K: int, shape: tuple, chain_k: int, fused: bool) -> np.ndarray:
    """The canonical order over k of `products(k)` (exact float64 products of FP32 values)."""
    total = None
    for k0, k1 in chain_bounds(K, chain_k):
        acc = np.zeros(shape, np.float32)
        for k in range(k0, k1):
            prod = products(k)
            if not fused:
                prod = prod.astype(np.float32).astype(np.float64)
            acc = round_sum_f32(prod, acc)
        total = acc if total is None else round_sum_f32(total, acc)
    return total


def reference_linear(x, w, bias=None, chain_k: int = CHAIN_K, fused: bool = True) -> np.ndarray:
    """y = x . w^T (+ bias) in the kernels' exact order, on the CPU. x: [M, K]; w: [N, K] (its
    values, e.g. bf16 weights upcast); returns FP32 [M, N].

    fused=False rounds each product to FP32 before adding it (what the Triton interpreter does for
    `tl.fma`), so the interpreter's run of the portable kernel checks the order in the same way."""
    x32, w32 = _as_f32(x), _as_f32(w)
    if x32.ndim != 2 or w32.ndim != 2 or x32.shape[1] != w32.shape[1]:
        raise ValueError(f"need x [M, K] and w [N, K], got {x32.shape} and {w32.shape}")
    x64 = x32.astype(np.float64)
    wt64 = w32.T.astype(np.float64)                      # [K, N]
    total = _ordered_sums(lambda k: x64[:, k:k + 1] * wt64[k:k + 1, :], x32.shape[1],
                          (x32.shape[0], w32.shape[0]), chain_k, fused)
    if bias is not None:
        total = round_sum_f32(total, _as_f32(bias)[None, :])
    return total


def reference_pairs(x_rows, w_rows, chain_k: int = CHAIN_K, fused: bool = True) -> np.ndarray:
    """Single outputs in the kernels' order: out[i] = x_rows[i] . w_rows[i], for rows gathered from
    x [M, K] and w [N, K] at a sample of (m, n). Returns FP32 [S]; costs K vector steps of S."""
    x32, w32 = _as_f32(x_rows), _as_f32(w_rows)
    if x32.ndim != 2 or x32.shape != w32.shape:
        raise ValueError(f"need x rows and w rows of one shape [S, K], got {x32.shape} and {w32.shape}")
    x64, w64 = x32.astype(np.float64), w32.astype(np.float64)
    return _ordered_sums(lambda k: x64[:, k] * w64[:, k], x32.shape[1], (x32.shape[0],), chain_k, fused)


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
