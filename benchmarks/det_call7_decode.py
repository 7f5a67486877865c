"""Issue 16's decode call 7: det_decode.cu's decode kernels (per-thread cp.async ring, wider register
blocks) at M = 8 and 16 on the four Llama-3.1-8B projections, against the Gluon default, call 6's
best CUDA decode kernels and cuBLAS bf16; then an ncu run of the best ones (`--ncu`).

    python3 benchmarks/det_call7_decode.py --out DIR [--repeats 10]
    ncu --clock-control none ... python3 benchmarks/det_call7_decode.py --out DIR --ncu gate_up_proj:16

Steps, each written to DIR/det_call7.json as soon as it is done:
1. build: nvcc of det_sgemm.cu (+ det_decode.cu), every decode configuration's registers, spills,
   programs per SM.
2. edge: M = the configuration's rows (and 13: two row blocks, one partial), N = 3072, K = 544 (a
   last chain of 32 k), a bf16 bias: each configuration's whole output equal to the Gluon kernel's
   and to the CPU emulation.
3. decode: per bucket (M = 8, 16) and projection: cuBLAS bf16, the Gluon default, call 6's CUDA
   kernel and every det_decode.cu configuration of up to that many rows (fewer: row blocks as
   programs of their own); bits: the whole output equal to
   the default's at two M per bucket, rows 0-1 x 64 columns equal to the emulation; time as
   bench.time_calls (CUDA-graph replays, weights rotated out of L2), with the fold and (M = 16)
   without it (the partials alone: what the fold kernel costs). Per bucket the bit-exact one with
   the smallest worst ratio to cuBLAS bf16 wins; also the best per projection.
With --ncu ROLE:M (under ncu): one call each of the Gluon default, call 6's best and the three best
det_decode.cu configurations of the sweep in DIR/det_call7.json (partials and fold kernels).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from det_call4 import SHAPES, bits_of, say  # noqa: E402
from det_call6 import decode_case, guarded, same_bits  # noqa: E402
from det_sweep import run_steps  # noqa: E402

from profiler.workloads.deterministic import bench, cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402
from profiler.workloads.deterministic.reference import reference_linear  # noqa: E402

BUCKETS = {16: (9, 16), 8: (5, 8)}          # bucket -> the M whose whole output is compared
NO_FOLD_BUCKETS = (16,)
EDGE = dict(N=3072, K=544)        # N: a multiple of every block_n (256 ... 1024, 768)
G6 = cuda_gemm.CudaGemvConfig
CALL6 = {16: [G6(16, 2, 4, 8)], 8: [G6(8, 2, 4, 16)]}   # call 6's best per bucket
NCU_TOP = 3


def candidates(bucket: int) -> dict:
    out = {"gluon_default": det.GEMV_CONFIGS[bucket]}
    out.update({c.name: c for c in CALL6.get(bucket, [])})
    # rows < bucket: blocks of rows as programs of their own (more programs where N is small)
    out.update({c.name: c for c in cuda_gemm.compiled_decode_configs() if c.rows <= bucket})
    return out


def build(out):
    arch = cuda_gemm.arch_of(torch.device("cuda"))
    t0 = time.time()
    lib = cuda_gemm.load(arch)
    out["build"] = {"arch": arch, "seconds": round(time.time() - t0, 1), "error": cuda_gemm.why_not(arch),
                    "nvcc": cuda_gemm.nvcc_version()}
    if lib is None:
        raise RuntimeError(f"no CUDA build: {cuda_gemm.why_not(arch)}")
    out["build"]["configs"] = {c.name: lib.info(c) for c in lib.decode_configs + lib.gemv_configs}


def edge(out):
    N, K = EDGE["N"], EDGE["K"]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(16, K, generator=gen)
    w = (torch.randn(N, K, generator=gen) / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(N, generator=gen).to(torch.bfloat16)
    ref = reference_linear(x, w, b)
    xd, wt, bd = x.cuda(), det.prepare_weight(w.cuda()), b.cuda()
    rows = {}
    for cfg in cuda_gemm.compiled_decode_configs():
        row = rows[cfg.name] = {"ran": True, "same_as_gluon": True, "emulation_mismatches": 0}
        for M in (cfg.rows, 13) if cfg.rows < 16 else (cfg.rows,):     # 13: two row blocks, one partial
            if cuda_gemm.gemv_partials(xd[:M], wt, cfg, det.CHAIN_K) is None:
                row["ran"] = row["same_as_gluon"] = False
                continue
            y = det.det_linear(xd[:M], wt, bd, config=cfg)
            base = det.det_linear(xd[:M], wt, bd, config=det.GEMV_CONFIGS[det._next_pow2(M)])
            row["same_as_gluon"] = row["same_as_gluon"] and same_bits(y, base)
            row["emulation_mismatches"] += int((y.cpu().numpy().view(np.int32) != ref[:M].view(np.int32)).sum())
    out["edge"] = {**EDGE, "bias": True, "rows": rows}


def decode(out, repeats, path):
    rows = []
    out["decode"] = rows
    for role, N, K in SHAPES:
        inp, lin, cols, ref, lins = decode_case(role, N, K)
        for bucket, Ms in BUCKETS.items():
            x = inp.x[:bucket].contiguous()
            t = bench.time_case("cublas_bf16", lins, x, repeats)
            rows.append({"bucket": bucket, "role": role, "variant": "cublas_bf16", **t})
            for name, cfg in candidates(bucket).items():
                row = {"bucket": bucket, "role": role, "variant": name, "config": dataclasses.asdict(cfg)}

                def measure(row=row, name=name, cfg=cfg, bucket=bucket):
                    if name != "gluon_default" and cuda_gemm.gemv_partials(x, lin.wt, cfg, det.CHAIN_K) is None:
                        raise RuntimeError("cuda_gemm.gemv_partials declined the operands")
                    row["same_as_default"], row["emulation_mismatches"] = bits_of(cfg, lin, inp, Ms, cols, ref)
                    n_calls = max(len(lins), 10)
                    calls = [(lambda li=lins[i % len(lins)]: det.det_linear(x, li.wt, config=cfg))
                             for i in range(n_calls)]
                    row.update(bench.time_calls(calls, repeats))
                    if bucket in NO_FOLD_BUCKETS:
                        parts = [(lambda li=lins[i % len(lins)]: det.det_linear(x, li.wt, config=cfg, fold=False))
                                 for i in range(n_calls)]
                        row["partials_only_us"] = bench.time_calls(parts, repeats)["median_us"]

                rows.append(guarded(row, measure))
        say(f"decode {role}")
        with open(path, "w") as f:          # what is written comes back, should the call be cut short
            json.dump(out, f, indent=1, default=str)
        del lins, lin, inp
        torch.cuda.empty_cache()
    choose(out)


def choose(out):
    rows = out["decode"]
    cub = {(r["bucket"], r["role"]): r["median_us"] for r in rows
           if r["variant"] == "cublas_bf16" and "median_us" in r}
    edge_rows = out.get("edge", {}).get("rows", {})
    winners = {}
    for bucket in BUCKETS:
        scores, per_role = {}, {}
        for name in {r["variant"] for r in rows if r["bucket"] == bucket and r["variant"] != "cublas_bf16"}:
            mine = [r for r in rows if r["bucket"] == bucket and r["variant"] == name]
            # call 6 checked its own kernels' edge bits; a new one without an edge row is out
            e = edge_rows.get(name, {} if name.startswith("dec")
                              else {"same_as_gluon": True, "emulation_mismatches": 0})
            ok = (len(mine) == len(SHAPES) and e.get("same_as_gluon") and e.get("emulation_mismatches") == 0
                  and all("median_us" in r and r["same_as_default"] and r["emulation_mismatches"] == 0 for r in mine))
            if ok:
                scores[name] = max(r["median_us"] / cub[(bucket, r["role"])] for r in mine)
            for r in mine:     # per projection: any configuration with the edge's and that row's bits
                if not (e.get("same_as_gluon") and e.get("emulation_mismatches") == 0 and "median_us" in r
                        and r["same_as_default"] and r["emulation_mismatches"] == 0):
                    continue
                best = per_role.get(r["role"])
                if best is None or r["median_us"] < best[1]:
                    per_role[r["role"]] = (name, r["median_us"], r["median_us"] / cub[(bucket, r["role"])])
        best = min(scores, key=scores.get) if scores else None
        winners[bucket] = {"variant": best, "worst_ratio_to_cublas_bf16": scores.get(best), "scores": scores,
                           "best_per_role": per_role}
    out["decode_winners"] = winners


def ncu_target(out_dir: str, spec: str):
    """One call of each configuration worth counters, on one projection (run under ncu)."""
    role, M = spec.split(":")
    M = int(M)
    with open(os.path.join(out_dir, "det_call7.json")) as f:
        res = json.load(f)
    scores = res["decode_winners"][str(M)]["scores"]
    new = sorted((n for n in scores if n.startswith("dec")), key=scores.get)[:NCU_TOP]
    names = ["gluon_default"] + [c.name for c in CALL6.get(M, [])][:1] + new
    ncu_calls(role, M, names, candidates(M))


def ncu_calls(role: str, M: int, names: list, cands: dict):
    """One call of each named configuration on ROLE at M, each in an NVTX range (what ncu counts)."""
    _, N, K = next(s for s in SHAPES if s[0] == role)
    inp = bench.Inputs(bench.ShapeCase(role, N, K), M, seed=0)
    lin = det.Linear(inp.w)
    x = inp.x[:M].contiguous()
    torch.cuda.synchronize()
    for name in names:
        torch.cuda.nvtx.range_push(name)
        det.det_linear(x, lin.wt, config=cands[name])
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print("ncu order:", names, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma list of: edge,decode")
    ap.add_argument("--ncu", default="", help="ROLE:M: the ncu target mode")
    args = ap.parse_args()
    if args.ncu:
        ncu_target(args.out, args.ncu)
        return
    out = {"env": bench.versions(), "gemv_configs_before": {str(k): dataclasses.asdict(v)
                                                            for k, v in det.GEMV_CONFIGS.items()}}
    path = os.path.join(args.out, "det_call7.json")
    steps = (("build", build), ("edge", edge), ("decode", lambda o: decode(o, args.repeats, path)))
    run_steps(out, steps, set(args.skip.split(",")), time.time(), path)
    print_table(out)


def print_table(out):
    b = out.get("build", {})
    print(f"build {b.get('seconds')} s arch {b.get('arch')} error {b.get('error')}")
    for name, info in b.get("configs", {}).items():
        print(f"  {name}: regs {info.get('registers')} local {info.get('local_bytes')} "
              f"blocks/SM {info.get('blocks_per_sm')} smem {info.get('smem_bytes', '-')}")
    bad = {k: v for k, v in out.get("edge", {}).get("rows", {}).items()
           if not (v.get("same_as_gluon") and v.get("emulation_mismatches") == 0)}
    print("edge: all bit-exact" if not bad else f"edge FAILURES {json.dumps(bad)}")
    for r in out.get("decode", []):
        print(f"M={r['bucket']:2} {r['role'][:8]:8} {r['variant'][:28]:28} {r.get('median_us', float('nan')):8.1f} us "
              f"parts {r.get('partials_only_us', float('nan')):7.1f} same {r.get('same_as_default', '-')} "
              f"emu {r.get('emulation_mismatches', '-')} {r.get('error', '')}")
    for bucket, w in out.get("decode_winners", {}).items():
        print(f"bucket {bucket}: {w['variant']} worst {w['worst_ratio_to_cublas_bf16']}")
        for role, v in w["best_per_role"].items():
            print(f"   {role}: {v[0]} {v[1]:.1f} us ratio {v[2]:.2f}")
    for k in [k for k in out if k.endswith("_error")]:
        print(k, out[k])


if __name__ == "__main__":
    main()
