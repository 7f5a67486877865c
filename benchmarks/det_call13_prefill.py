"""Issue 16, call 13 (prefill): det_prefill_ws.cu's warp-specialized tile kernel (two consumer
warpgroups that only multiply, one producer warpgroup that loads, upcasts and stores the tiles)
against det_sgemm.cu's tile kernels adopted before (call 8's; from run e on also call 13's FMA-order
search's, flags 284) and LayerCast at M = 2048.

    python3 benchmarks/det_call13_prefill.py --out DIR [--repeats 10] [--skip edge,small_m,ncu] [--ncu A,B]
    python3 benchmarks/det_call13_prefill.py --ncu-driver NAME,NAME   (what ncu runs: qkv at M = 2048)

Steps (det_call7_prefill.py's, on those configurations and every det_prefill_ws.cu one),
each written to DIR/prefill13.json as soon as it is done:
1. build: nvcc of det_sgemm.cu (which includes det_prefill_ws.cu); registers, spills, programs per SM.
2. edge: M 300, N 520, K 544 with a bias: each whole output equal to the Gluon kernel's and to the
   CPU emulation.
3. sweep: the four Llama-3.1-8B projections at M = 2048: cuBLAS bf16, LayerCast, the Gluon default
   and each configuration (whole output equal to the Gluon default's at M = 100 and 2048, rows 0, 1,
   98, 99, 2046, 2047 x 64 columns equal to the emulation); the bit-exact configuration with the
   smallest worst ratio to LayerCast wins.
4. small_m: the best warp-specialized configuration against BASELINES[0] at M = 1024 (the
   smallest bucket the tile kernel runs), time and whole-output bits.
5. ncu (--clock-control none): the two best warp-specialized configurations, the baselines and
   LayerCast on qkv at M = 2048 (det_call7_prefill.NCU_METRICS) -> DIR/ncu13_prefill.json.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from det_call4 import configs_now, say  # noqa: E402
from det_call6 import SHAPES, build, choose, edge_tiles, same_bits, sweep  # noqa: E402
from det_call6 import print_table as call6_table  # noqa: E402
from det_call7_prefill import NCU_METRICS  # noqa: E402
from det_sweep import run_steps  # noqa: E402

from profiler.workloads.deterministic import bench, cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402

SMALL_M = 1024
# det_sgemm.cu's tile kernels adopted before: call 13's FMA-order search (flags 284; first, the
# baseline of small_m as `adopted_us`) and call 8's (the baseline of runs a-d)
BASELINES = (cuda_gemm.CudaTileConfig(128, 128, 8, 8, 16, True, 2, True, 284),
             cuda_gemm.CudaTileConfig(128, 128, 8, 8, 16, True, 2, True, 4))


def swept():
    """The BASELINES compiled, then every warp-specialized configuration (det_call6's steps sweep
    cuda_gemm.compiled_configs(): from here on it lists these). Call after the library loaded (it
    checks its variant counts against the real tables)."""
    compiled = cuda_gemm.compiled_configs
    cfgs = [c for c in BASELINES if c in compiled()] + cuda_gemm.compiled_ws_configs()
    cuda_gemm.compiled_configs = lambda source=None: list(cfgs) if source is None else compiled(source)
    return cfgs


def build_all(out):
    build(out)
    lib = cuda_gemm.load(cuda_gemm.arch_of(torch.device("cuda")))
    out["build"]["configs"] = {c.name: lib.info(c) for c in swept()}


def ranking(out, ws_only=False) -> list[str]:
    scores = out.get("winner", {}).get("scores", {})
    names = sorted(scores, key=scores.get)
    return [n for n in names if n.startswith("ws")] if ws_only else names


def small_m(out, repeats):
    best = next(c for c in cuda_gemm.compiled_ws_configs() if c.name == ranking(out, ws_only=True)[0])
    rows = []
    out["small_m"] = rows
    for role, N, K in SHAPES:
        inp = bench.Inputs(bench.ShapeCase(role, N, K), SMALL_M, seed=0)
        lin = det.Linear(inp.w)
        x = inp.x[:SMALL_M].contiguous()
        row = {"role": role, "M": SMALL_M, "variant": best.name}
        for name, cfg in (("adopted", BASELINES[0]), ("ws", best)):
            row[f"{name}_us"] = bench.time_calls([lambda: cuda_gemm.linear(x, lin.wt, None, cfg, det.CHAIN_K)],
                                                 repeats)["median_us"]
        row["same"] = same_bits(cuda_gemm.linear(x, lin.wt, None, best, det.CHAIN_K),
                                cuda_gemm.linear(x, lin.wt, None, BASELINES[0], det.CHAIN_K))
        rows.append(row)
        del lin, inp
        torch.cuda.empty_cache()
    say("small M done")


def ncu(out, outdir, names=None):
    names = names or ranking(out, ws_only=True)[:2] + [c.name for c in BASELINES]
    cmd = ["/usr/local/cuda/bin/ncu", "--clock-control", "none", "--profile-from-start", "off",
           "--print-kernel-base", "mangled", "--metrics", NCU_METRICS, "--csv", "--page", "raw",
           sys.executable, os.path.abspath(__file__), "--ncu-driver", ",".join(names)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    text = proc.stdout[proc.stdout.find('"ID"'):]
    rows = list(csv.DictReader(io.StringIO(text)))[1:]       # the first row after the header: units
    kernels = []
    for r in rows:
        row = {"kernel": r.get("Kernel Name")}
        for k, v in r.items():
            if "__" in k:
                try:
                    row[k] = float(v.replace(",", ""))
                except ValueError:
                    pass
        kernels.append(row)
    result = {"command": "ncu --clock-control none --profile-from-start off --print-kernel-base mangled "
                         "--metrics <det_call7_prefill.NCU_METRICS> --csv --page raw python3 "
                         "benchmarks/det_call13_prefill.py --ncu-driver " + ",".join(names)
                         + "  (qkv_proj, M = 2048: each configuration, then LayerCast)",
              "configs": names, "kernels": kernels}
    with open(os.path.join(outdir, "ncu13_prefill.json"), "w") as f:
        json.dump(result, f, indent=1)
    out["ncu"] = {"configs": names, "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
                  "kernels": len(kernels), "stderr_tail": proc.stderr[-1500:]}


def ncu_driver(names: str):
    """qkv at M = 2048: each named configuration once, then LayerCast once, inside the profiled range."""
    cuda_gemm.load(cuda_gemm.arch_of(torch.device("cuda")))
    cfgs = {c.name: c for c in swept()}
    cfgs = [cfgs[n] for n in names.split(",")]
    inp = bench.Inputs(bench.ShapeCase("qkv_proj", 6144, 4096), 2048, seed=0)
    lin = det.Linear(inp.w)
    x = inp.x[:2048].contiguous()
    for _ in range(2):      # the first pass outside the profiled range (build, warm-up)
        if _:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        for c in cfgs:
            cuda_gemm.linear(x, lin.wt, None, c, det.CHAIN_K)
        lin(x, "layercast")
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma list of: edge,small_m,ncu")
    ap.add_argument("--ncu", default=None, help="comma list of configurations for ncu (default: the two best "
                    "warp-specialized ones and the baselines)")
    ap.add_argument("--ncu-driver", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ncu_driver:
        ncu_driver(args.ncu_driver)
        return
    skip = set(args.skip.split(","))
    out = {"env": bench.versions(), "configs_before": configs_now(),
           "command": "python3 benchmarks/det_call13_prefill.py " + " ".join(sys.argv[1:])}
    path = os.path.join(args.out, "prefill13.json")
    t0 = time.time()
    run_steps(out, (("build", build_all), ("edge", edge_tiles), ("sweep", lambda o: sweep(o, args.repeats))),
              skip, t0, path)
    if "sweep" in out:
        choose(out)
        out["ranking"] = ranking(out)
    if ranking(out, ws_only=True):
        run_steps(out, (("small_m", lambda o: small_m(o, args.repeats)), ("ncu", lambda o: ncu(o, args.out, args.ncu and args.ncu.split(",")))),
                  skip, t0, path)
    call6_table({k: v for k, v in out.items() if k != "small_m"})
    print("small_m", json.dumps(out.get("small_m")))
    print("ncu", json.dumps({k: v for k, v in out.get("ncu", {}).items() if k != "stderr_tail"}))


if __name__ == "__main__":
    main()
