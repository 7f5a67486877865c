"""Issue 16's decode call 14: how det_decode.cu's chain partials are folded, and what the M = 16
kernels lose to part-empty last waves. The decode kernels as adopted (kernels.CUDA_DECODE_RULES at
M = 8 and 16, and down's runner-up at M = 16), each with the folds of the same partials: kernels.py's
Triton fold kernel (the adopted one before this call) and det_decode.cu's det_fold_kernel, launched
after the decode kernel or as its programmatic dependent (`wait`), with 8 or 16 partials in flight
per thread.

    python3 benchmarks/det_call14_fold.py --out DIR [--repeats 10] [--rounds 2]

Steps, each written to DIR/det_call14.json as soon as it is done:
1. edge: N = 3072, K = 544 (a last chain of 32 k), a bf16 bias, M = 1, 5, 8, 13, 16: every
   (configuration, fold) output equal bit for bit to the Triton fold's and to the CPU emulation.
2. waves: the partials alone of the two 16-row kernels on shapes whose programs fill 1.0 to 2.0
   waves of 132 SMs.
3. decode: per projection and M (8, 16): cuBLAS bf16, then every (configuration, fold), `--rounds`
   times in turn (the rounds show the run-to-run movement); bits: the whole output at M = 9 and 16
   (5 and 8) equal to the adopted kernel's with the Triton fold, rows 0-1 x 64 columns to the
   emulation.

The calls of 14 before this form (the fold in floats, tile counters, the SPREAD kernels) ran at
commit 357de5e's ancestors (branch call14-spread; benchmarks/DETERMINISM_NOTES.md, call 14).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from det_call4 import SHAPES, say  # noqa: E402
from det_call6 import decode_case, guarded, same_bits  # noqa: E402

from profiler.workloads.deterministic import bench, cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402
from profiler.workloads.deterministic.reference import reference_linear  # noqa: E402

BITS_M = {16: (9, 16), 8: (5, 8)}
_D = cuda_gemm.CudaDecodeConfig
EXTRA = {"down_proj": [_D(8, 4, 4, 16, 2, 6, 7)]}     # M = 16, beyond the rules: down's runner-up
W, DEEP = cuda_gemm.FOLD_WAIT, cuda_gemm.FOLD_DEEP
MODE = {"after8": 0, "wait8": W, "after16": DEEP, "wait16": W | DEEP}
FOLDS = ("triton", *MODE)
# (configuration, N, K) whose programs fill 1.0, 1.13 or 1.7, and 2.0 waves at 3 and 4 programs per SM
WAVES = [(_D(16, 8, 4, 8, 2, 3, 21), 22528, 4608), (_D(16, 8, 4, 8, 2, 3, 21), 28672, 4096),
         (_D(16, 8, 4, 8, 2, 3, 21), 22528, 9216), (_D(16, 4, 4, 8, 3, 4, 7), 16896, 4096),
         (_D(16, 4, 4, 8, 3, 4, 7), 28672, 4096), (_D(16, 4, 4, 8, 3, 4, 7), 33792, 4096)]


def folded(x, wt, bias, cfg, fold: str):
    """y by cfg's decode kernel and one of FOLDS (None: the kernel declined the operands)."""
    if fold == "triton":
        part = cuda_gemm.gemv_partials(x, wt, cfg, det.CHAIN_K)
        return None if part is None else det._fold(part, bias, cfg.fold_block, cfg.fold_warps)
    return cuda_gemm.gemv_linear(x, wt, bias, cfg, det.CHAIN_K, MODE[fold])


def configs(bucket: int, role: str) -> list:
    """The adopted configuration of (bucket, role) first, then EXTRA's."""
    rules = det.CUDA_DECODE_RULES[bucket]
    out = [next(cfg for min_n, min_k, cfg in rules if N >= min_n and K >= min_k)
           for r, N, K in SHAPES if r == role]
    return out + (EXTRA.get(role, []) if bucket == 16 else [])


def edge(out):
    gen = torch.Generator().manual_seed(7)
    N, K = 3072, 544
    x = torch.randn(16, K, generator=gen)
    w = (torch.randn(N, K, generator=gen) / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(N, generator=gen).to(torch.bfloat16)
    xd, wt, bd = x.cuda(), det.prepare_weight(w.cuda()), b.cuda()
    rows = []
    out["edge"] = rows
    cfgs = {c.name: c for bucket in BITS_M for _, _, c in det.CUDA_DECODE_RULES[bucket]}
    cfgs.update({c.name: c for extra in EXTRA.values() for c in extra})
    for M in (1, 5, 8, 13, 16):
        ref = reference_linear(x[:M], w, b).view(np.int32)
        for name, cfg in cfgs.items():
            base = folded(xd[:M], wt, bd, cfg, "triton")
            for fold in FOLDS:
                y = folded(xd[:M], wt, bd, cfg, fold)
                rows.append({"M": M, "config": name, "fold": fold, "ran": y is not None,
                             "same_as_triton_fold": y is not None and same_bits(y, base),
                             "emulation_mismatches": None if y is None else
                             int((y.cpu().numpy().view(np.int32) != ref).sum())})
    say(f"edge: {sum(r['same_as_triton_fold'] and r['emulation_mismatches'] == 0 for r in rows)}/{len(rows)} exact")


def waves(out, repeats: int):
    """The partials alone of WAVES' shapes at M = 16: time and FP32 TFLOP/s."""
    rows = []
    out["waves"] = rows
    gen = torch.Generator(device="cuda").manual_seed(3)
    for cfg, N, K in WAVES:
        x = torch.randn(16, K, device="cuda", generator=gen)
        wts = [(torch.randn(K, N, device="cuda", generator=gen) / K ** 0.5).to(torch.bfloat16) for _ in range(2)]
        row = {"config": cfg.name, "N": N, "K": K, "programs": (N // cfg.block_n) * -(-K // det.CHAIN_K)}

        def measure(row=row, cfg=cfg, x=x, wts=wts):
            calls = [(lambda w=wts[i % 2]: cuda_gemm.gemv_partials(x, w, cfg, det.CHAIN_K)) for i in range(10)]
            row.update(bench.time_calls(calls, repeats))
            row["tflops"] = 2 * 16 * row["N"] * row["K"] / row["median_us"] / 1e6

        rows.append(guarded(row, measure))
        del wts
    torch.cuda.empty_cache()
    say("waves: " + ", ".join(f"{r['config']} {r['programs']} {r.get('tflops', 0):.1f}" for r in rows))


def decode(out, repeats: int, rounds: int):
    rows = []
    out["decode"] = rows
    for role, N, K in SHAPES:
        inp, lin, cols, ref, lins = decode_case(role, N, K)
        ref = ref.view(np.int32)
        for bucket, Ms in BITS_M.items():
            x = inp.x[:bucket].contiguous()
            rule = configs(bucket, role)[0]      # the adopted kernel: the bits every row must have
            for rnd in range(rounds):
                t = bench.time_case("cublas_bf16", lins, x, repeats)
                rows.append({"bucket": bucket, "role": role, "round": rnd, "config": "cublas_bf16", **t})
                for cfg in configs(bucket, role):
                    for fold in FOLDS:
                        row = {"bucket": bucket, "role": role, "round": rnd, "config": cfg.name, "fold": fold}

                        def measure(row=row, cfg=cfg, fold=fold, rnd=rnd, rule=rule):
                            if rnd == 0:
                                same, mism = True, 0
                                for M in Ms:
                                    y = folded(inp.x[:M], lin.wt, None, cfg, fold)
                                    if y is None:
                                        raise RuntimeError("the decode kernel declined the operands")
                                    same &= same_bits(y, folded(inp.x[:M], lin.wt, None, rule, "triton"))
                                    got = y[:2].index_select(1, cols).cpu().numpy().view(np.int32)
                                    mism += int((got != ref).sum())
                                row["same_as_triton_fold"], row["emulation_mismatches"] = same, mism
                            calls = [(lambda li=lins[i % len(lins)]: folded(x, li.wt, None, cfg, fold))
                                     for i in range(max(len(lins), 10))]
                            row.update(bench.time_calls(calls, repeats))

                        rows.append(guarded(row, measure))
        say(f"decode {role}")
        del lins, lin, inp
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "det_call14.json")
    out = {"env": bench.versions()}

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(path + ".tmp", path)

    for name, step in (("edge", lambda: edge(out)), ("waves", lambda: waves(out, args.repeats)),
                       ("decode", lambda: decode(out, args.repeats, args.rounds))):
        t0 = time.time()
        try:
            step()
        except Exception as err:   # the steps after it still run
            out[f"{name}_error"] = f"{type(err).__name__}: {err}"[:400]
        out[f"{name}_s"] = round(time.time() - t0, 1)
        save()
        say(f"{name} done")


if __name__ == "__main__":
    main()
