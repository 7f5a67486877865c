"""Variant sweep for the deterministic GEMMs (one device call): bits of every variant against the CPU
reference, then times of each variant and baseline on the Llama-3.1-8B projections.

    python benchmarks/det_sweep.py --out DIR [--quick]

Writes DIR/det_sweep.json and prints a table last. Variants change speed, never bits (except the
chain length, which is the order itself: chain-512 rows are timed only).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from profiler.workloads.deterministic import bench  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402
from profiler.workloads.deterministic.reference import CHAIN_K, reference_linear  # noqa: E402

SHAPES = [("qkv_proj", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up_proj", 28672, 4096), ("down_proj", 4096, 14336)]


def gemv_variant(cfg, chain_k=CHAIN_K, fold=True):
    return lambda x, lin: det.det_linear(x, lin.wt, config=cfg, chain_k=chain_k, fold=fold)


def tile_variant(cfg):
    return lambda x, lin: det.det_linear(x, lin.wt, config=cfg)


G, T = det.GemvConfig, det.TileConfig
# (rows_per_thread, vec_n, warps_m, warps_n[, rows, stages])
DECODE_CONFIGS = {
    1: [G(1, 2, 1, 4, pairs=False), G(1, 2, 1, 4), G(1, 4, 1, 4), G(1, 2, 1, 8), G(1, 1, 1, 8), G(1, 4, 1, 2), G(1, 8, 1, 1), G(1, 2, 1, 4, 32, 3),
        G(1, 2, 1, 4, 16, 6)],
    8: [G(2, 8, 4, 1, pairs=False), G(2, 8, 4, 1), G(1, 8, 8, 1), G(2, 4, 4, 1), G(4, 4, 2, 2), G(8, 2, 1, 4), G(8, 4, 1, 2), G(2, 8, 4, 1, 16, 6)],
    16: [G(4, 8, 4, 1, pairs=False), G(4, 8, 4, 1), G(2, 8, 8, 1), G(4, 4, 4, 1), G(8, 4, 2, 2), G(8, 8, 2, 1), G(4, 4, 4, 2), G(16, 2, 1, 4),
         G(4, 8, 4, 1, 16, 6)],
}
# call 3: after the defaults were fixed, a few more for the notes
EXTRA_DECODE = {16: [G(16, 4, 1, 2), G(8, 4, 2, 2, 16, 3), G(8, 4, 2, 2, 8, 4), G(8, 4, 2, 4), G(8, 8, 2, 1, 16, 3)]}
EXTRA_PREFILL = {"64x64_reg_w2": T(64, 64, 16, 8, 4, 4, 8, 2, 1), "128x32_reg_w4": T(128, 32, 16, 8, 4, 4, 8, 4, 1),
                 "128x64_reg_bk8": T(128, 64, 8, 8, 4, 4, 8, 4, 1)}
PREFILL_CONFIGS = {
    "128x64_tsm": T(128, 64, 16, 8, 4, 4, 8, 4, 1, total_smem=True),
    "128x64_reg": T(128, 64, 16, 8, 4, 4, 8, 4, 1),
    "128x128_tsm": T(128, 128, 16, 8, 4, 4, 8, 4, 2, total_smem=True),
    "128x64_cp3_tsm": T(128, 64, 16, 8, 4, 4, 8, 4, 1, stages=3, total_smem=True),
    "128x128_cp3_tsm": T(128, 128, 16, 8, 4, 4, 8, 4, 2, stages=3, total_smem=True),
    "128x128_cp3": T(128, 128, 16, 8, 4, 4, 8, 4, 2, stages=3),
    "64x128_cp3_tsm": T(64, 128, 16, 8, 4, 4, 8, 2, 2, stages=3, total_smem=True),
    "64x64_cp4_tsm": T(64, 64, 16, 8, 4, 4, 8, 2, 1, stages=4, total_smem=True),
}


EXTRA = False
MS = (1, 8, 16, 2048)


def cfg_name(c):
    return f"g{c.rows_per_thread}x{c.vec_n}_w{c.warps_m}x{c.warps_n}_r{c.rows}s{c.stages}" + ("" if c.pairs else "_plain")


def decode_variants(M):
    v = {"det": lambda x, lin: lin(x, "det")}
    for c in (EXTRA_DECODE.get(M, []) if EXTRA else DECODE_CONFIGS[M]):
        v[cfg_name(c)] = gemv_variant(c)
    base = det.GEMV_CONFIGS[det._next_pow2(M)]
    if not EXTRA:
        v["nofold"] = gemv_variant(base, fold=False)
        v["chain128"] = gemv_variant(base, chain_k=128)
        v["chain512"] = gemv_variant(base, chain_k=512)
    return v


def prefill_variants():
    v = {"det": lambda x, lin: lin(x, "det")}
    for name, c in (EXTRA_PREFILL if EXTRA else PREFILL_CONFIGS).items():
        v[name] = tile_variant(c)
    return v


BASELINES = {
    "cublas_bf16": lambda x, lin: lin(x, "cublas_bf16"),
    "layercast": lambda x, lin: lin(x, "layercast"),
}


def check_bits(out, quick):
    """Every det variant that keeps CHAIN_K against the exact CPU emulation, on 2 rows x 64 columns."""
    rows = []
    for role, N, K in SHAPES[:2] if quick else SHAPES:
        inp = bench.Inputs(bench.ShapeCase(role, N, K), 256, seed=0)
        lin = det.Linear(inp.w)
        cols = bench.reference_columns(N)
        t0 = time.time()
        ref = reference_linear(inp.x[:2].cpu(), inp.w.index_select(0, torch.tensor(cols, device="cuda")).cpu())
        ref_s = time.time() - t0
        cases = [("det", 1), ("det", 2), ("det", 3), ("det", 8), ("det", 16), ("det", 17), ("det", 64), ("det", 200), ("det", 256),
                 ("portable", 2)]
        for name, M in cases:
            try:
                if name == "det":
                    y = lin(inp.x[:M], "det")
                else:
                    y = lin(inp.x[:M], "portable")
                torch.cuda.synchronize()
                got = y[:2].index_select(1, torch.tensor(cols, device="cuda")).cpu().numpy()
                mism = int((got.view("int32") != ref[:got.shape[0]].view("int32")).sum())
                rows.append({"role": role, "variant": name, "M": M, "mismatches": mism, "ref_s": round(ref_s, 2)})
            except Exception as err:  # keep sweeping
                rows.append({"role": role, "variant": name, "M": M, "error": f"{type(err).__name__}: {err}"[:400],
                             "trace": traceback.format_exc()[-1500:]})
        # batch invariance, a few batch sizes, whole rows
        try:
            bi = bench.batch_invariance(lambda x: lin(x, "det"), inp.x, [1, 2, 3, 5, 8, 13, 16, 17, 31, 64, 65, 100, 128, 129, 255, 256])
            rows.append({"role": role, "variant": "det", "batch_invariance": bi})
        except Exception as err:
            rows.append({"role": role, "variant": "det", "batch_invariance_error": f"{type(err).__name__}: {err}"[:400],
                         "trace": traceback.format_exc()[-1500:]})
        del lin, inp
        torch.cuda.empty_cache()
    out["bits"] = rows


def time_all(out, quick, repeats):
    rows = []
    for role, N, K in SHAPES:
        inp = bench.Inputs(bench.ShapeCase(role, N, K), 2048, seed=0)
        copies = max(1, math.ceil(bench.L2_ROTATE_BYTES / (N * K * 2)) + 1)
        lins = [det.Linear(inp.w)] + [det.Linear(inp.w.clone()) for _ in range(copies - 1)]
        for M in MS:
            x = inp.x[:M].contiguous()
            variants = dict(decode_variants(M) if M <= 16 else prefill_variants())
            variants.update(BASELINES)
            for name, fn in variants.items():
                if quick and name not in ("det", "layercast", "cublas_bf16"):
                    continue
                same = None
                if name not in BASELINES and "chain" not in name and name != "nofold":
                    try:
                        ref_y = lins[0](x, "det")
                        got = fn(x, lins[0])
                        same = bool(torch.equal(ref_y.view(torch.int32), got.view(torch.int32)))
                    except Exception as err:
                        rows.append({"role": role, "M": M, "variant": name, "error": f"{type(err).__name__}: {err}"[:400],
                                     "trace": traceback.format_exc()[-1500:]})
                        continue
                use = lins if M <= 64 else lins[:1]
                inner = max(len(use), 10) if M <= 64 else 1
                calls = [(lambda lin=use[i % len(use)], fn=fn: fn(x, lin)) for i in range(inner)]
                try:
                    t = bench.time_calls(calls, repeats if M <= 64 else max(5, repeats // 4))
                    t["tflops"] = 2.0 * M * N * K / (t["median_us"] * 1e-6) / 1e12
                    t["roofline_share"] = bench.weight_roofline_us(N, K) / t["median_us"]
                    rows.append({"role": role, "M": M, "N": N, "K": K, "variant": name, "same_bits_as_det": same, **t})
                except Exception as err:
                    rows.append({"role": role, "M": M, "variant": name, "error": f"{type(err).__name__}: {err}"[:400],
                                 "trace": traceback.format_exc()[-1500:]})
                torch.cuda.synchronize()
            print(f"timed {role} M={M}", flush=True)
        del lins, inp
        torch.cuda.empty_cache()
    out["timing"] = rows


def ceilings(out):
    a = torch.empty(int(2e9) // 4, device="cuda")
    b = torch.empty_like(a)
    t = bench.time_calls([lambda: b.copy_(a)], 10)
    out["copy_TBps"] = 2 * a.numel() * 4 / (t["median_us"] * 1e-6) / 1e12
    del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(8192, 8192, device="cuda")
    y = torch.randn(8192, 8192, device="cuda")
    t = bench.time_calls([lambda: x @ y], 5)
    out["sgemm_TFLOPs"] = 2 * 8192 ** 3 / (t["median_us"] * 1e-6) / 1e12
    del x, y
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--skip", default="", help="comma list of: bits,timing,layer,ceilings")
    ap.add_argument("--extra", action="store_true", help="time the EXTRA_* configurations only")
    ap.add_argument("--ms", default="1,8,16,2048", help="M values to time")
    args = ap.parse_args()
    global EXTRA, MS
    EXTRA = args.extra
    MS = tuple(int(m) for m in args.ms.split(","))
    skip = set(args.skip.split(","))
    out = {"env": bench.versions(), "chain_k": CHAIN_K}
    print(json.dumps(out["env"]), flush=True)
    t0 = time.time()
    steps = [("ceilings", ceilings), ("bits", lambda o: check_bits(o, args.quick)),
             ("timing", lambda o: time_all(o, args.quick, args.repeats)),
             ("layer", lambda o: o.__setitem__("layer", bench.layer_benchmark(
                 "llama-3.1-8b", ["det", "layercast", "cublas_bf16"], repeats=2)))]
    run_steps(out, steps, skip, t0, os.path.join(args.out, "det_sweep.json"))
    print_table(out)


def run_steps(out: dict, steps, skip: set, t0: float, path: str) -> None:
    """Each (name, step) not in `skip` on `out`, an error kept in `out` rather than raised; `out`
    written to `path` after each step (the device machine keeps only what is written)."""
    for name, step in steps:
        if name in skip:
            continue
        try:
            step(out)
        except Exception as err:
            out[f"{name}_error"] = f"{type(err).__name__}: {err}"
            out[f"{name}_trace"] = traceback.format_exc()[-3000:]
            print(out[f"{name}_trace"], flush=True)
        out[f"{name}_s"] = round(time.time() - t0, 1)
        with open(path, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"{name} done at {time.time() - t0:.0f}s", flush=True)


def print_table(out):
    print(f"copy {out.get('copy_TBps', 0):.2f} TB/s  sgemm {out.get('sgemm_TFLOPs', 0):.1f} TFLOP/s")
    for r in out.get("bits", []):
        if "mismatches" in r:
            if r["mismatches"]:
                print(f"BITS MISMATCH {r['role']} {r['variant']} M={r['M']}: {r['mismatches']}")
        elif "batch_invariance" in r:
            b = r["batch_invariance"]
            print(f"inv {r['role']}: row0_changed={b['row0_changed']} rows_changed={b['rows_changed']}")
        else:
            print(f"ERR {r.get('role')} {r.get('variant')} M={r.get('M')}: {r.get('error') or r.get('batch_invariance_error')}")
    ok = sum(1 for r in out.get("bits", []) if r.get("mismatches") == 0)
    print(f"bit checks equal to reference: {ok}")
    by = {}
    for r in out.get("timing", []):
        by.setdefault((r["role"], r["M"]), []).append(r)
    for (role, M), rs in by.items():
        cells = []
        for r in rs:
            flag = "" if r.get("same_bits_as_det") in (None, True) else "!BITS"
            cells.append(f"{r['variant']}=" + (f"{r['median_us']:.1f}" if "median_us" in r else "ERR") + flag)
        print(f"{role[:7]} M={M}: " + " ".join(cells))
    lay = out.get("layer", {}).get("by_impl", {})
    for impl, r in lay.items():
        print(f"layer {impl}: prefill {r['prefill_ms']:.2f} ms decode {r['decode_ms']:.2f} ms total {r['total_ms']:.2f} "
              f"x{r.get('speedup_vs_layercast', 0):.2f}")
    for k in ("ceilings_error", "bits_error", "timing_error", "layer_error"):
        if k in out:
            print(k, out[k])


if __name__ == "__main__":
    main()
