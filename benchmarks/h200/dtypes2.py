"""Two tensor input types the first dtype probe (tests/data/h200_dtypes_raw.csv) lacked, one
4096^3 GEMM each under ncu: fp16 through torch (cuBLAS), and int8 through a Triton `tl.dot` of int8
tiles accumulating in int32 (Hopper's wgmma int8 path, IGMMA, where cuBLAS's `_int_mm` picks an
sm80 IMMA kernel). Inputs are made and the Triton kernel compiled outside the ranges; only the GEMMs
run inside `smlens` ranges named after their type.

    ncu --clock-control none --nvtx --nvtx-include 'smlens@fp16/' --nvtx-include 'smlens@int8_wgmma/' \
        --csv --page raw --print-units base --metrics <the views' metrics> python3 benchmarks/h200/dtypes2.py
"""
import nvtx
import torch
import triton
import triton.language as tl


@triton.jit
def int8_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + cols[None, :] * K + (k + ks)[:, None])  # b is [N, K]: b^T tile
        acc += tl.dot(a, b, out_dtype=tl.int32)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


def main():
    M = N = K = 4096
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(N, K, device="cuda")
    a16, b16 = a.half(), b.half()
    a8 = a.clamp(-1, 1).mul(100).to(torch.int8)
    b8 = b.clamp(-1, 1).mul(100).to(torch.int8)
    c32 = torch.empty(M, N, device="cuda", dtype=torch.int32)
    grid = (M // 128, N // 128)
    int8_matmul[grid](a8, b8, c32, M, N, K, BM=128, BN=128, BK=64)  # compile outside the range
    torch.cuda.synchronize()
    reference = torch._int_mm(a8, b8.t())
    assert torch.equal(c32, reference), "the Triton int8 GEMM disagrees with torch._int_mm"
    with nvtx.annotate("fp16", domain="smlens"):
        a16 @ b16.t()
    with nvtx.annotate("int8_wgmma", domain="smlens"):
        int8_matmul[grid](a8, b8, c32, M, N, K, BM=128, BN=128, BK=64)
    torch.cuda.synchronize()
    print("ok")


if __name__ == "__main__":
    main()
