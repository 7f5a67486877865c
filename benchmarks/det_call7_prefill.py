"""Issue 16, call 7 (prefill): the CUDA C++ tile kernel with its next tiles' loads issued before each
tile's barrier (call 6's builds had them sunk below the FMAs), every configuration checked bit for
bit and timed at M = 2048 next to LayerCast and cuBLAS, then ncu on the two best and on LayerCast.

    python3 benchmarks/det_call7_prefill.py --out DIR [--repeats 10] [--skip ceilings,small_m,ncu]
        [--only NAME,NAME]   (edge, sweep and ncu on these configurations only; the build lists all)
    python3 benchmarks/det_call7_prefill.py --ncu-driver NAME,NAME   (what ncu runs: qkv at M = 2048)

Steps, each written to DIR/det_call7_prefill.json as soon as it is done (det_call6.py's steps):
1. ceilings: copy bandwidth and cuBLAS SGEMM on 8192^3 (TF32 off).
2. build: nvcc of det_sgemm.cu; each configuration's registers, spills, programs per SM.
3. edge: M 300, N 520, K 544 with a bias: each tile configuration's whole output equal to the Gluon
   kernel's and to the CPU emulation.
4. sweep: the four Llama-3.1-8B projections at M = 2048: cuBLAS bf16, LayerCast, the Gluon default
   and every configuration (bits: whole output equal to the Gluon default's at M = 100 and 2048,
   rows 0, 1, 98, 99, 2046, 2047 x 64 columns equal to the emulation); the bit-exact configuration
   with the smallest worst ratio to LayerCast wins.
5. small_m: the winner against the Gluon kernel at M = 128..1024 (where the CUDA kernel starts).
6. ncu (--clock-control none): the two best configurations and LayerCast on qkv at M = 2048, FMA
   pipe, issue, stall reasons, bank conflicts, registers, occupancy -> DIR/ncu_prefill.csv; the
   best one's stall samples per SASS instruction -> DIR/src_prefill.ncu-rep, src_prefill_sass.csv.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from det_call4 import configs_now  # noqa: E402
from det_call6 import build, choose, edge_tiles, small_m, sweep  # noqa: E402
from det_call6 import print_table as call6_table  # noqa: E402
from det_sweep import ceilings, run_steps  # noqa: E402

from profiler.workloads.deterministic import bench, cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402

NCU_METRICS = ",".join([
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "launch__registers_per_thread",
    "launch__block_size", "launch__grid_size", "launch__shared_mem_per_block_dynamic",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "lts__t_sector_hit_rate.pct",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
])


def ranking(out) -> list[str]:
    """Bit-exact configurations, best worst ratio to LayerCast first."""
    scores = out.get("winner", {}).get("scores", {})
    return sorted(scores, key=scores.get)


def ncu(out, outdir):
    names = ranking(out)[:2]
    if not names:
        raise RuntimeError("no bit-exact configuration to profile")
    csv = os.path.join(outdir, "ncu_prefill.csv")
    cmd = ["/usr/local/cuda/bin/ncu", "--clock-control", "none", "--profile-from-start", "off",
           "--print-kernel-base", "mangled", "--metrics", NCU_METRICS, "--csv", "--page", "raw",
           sys.executable, os.path.abspath(__file__), "--ncu-driver", ",".join(names)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    with open(csv, "w") as f:
        f.write(proc.stdout)
    out["ncu"] = {"configs": names, "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
                  "csv": os.path.basename(csv), "stderr_tail": proc.stderr[-1500:]}
    # where the best one stalls, per SASS instruction (warp-state sampling)
    rep = os.path.join(outdir, "src_prefill")
    cmd = ["/usr/local/cuda/bin/ncu", "--clock-control", "none", "--profile-from-start", "off",
           "--section", "SourceCounters", "--section", "WarpStateStats", "-k", "regex:det_sgemm", "-c", "1",
           "-f", "-o", rep, sys.executable, os.path.abspath(__file__), "--ncu-driver", names[0]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    exp = subprocess.run(["/usr/local/cuda/bin/ncu", "--import", rep + ".ncu-rep", "--page", "source", "--csv",
                          "--print-source", "sass"], capture_output=True, text=True, timeout=120)
    with open(os.path.join(outdir, "src_prefill_sass.csv"), "w") as f:
        f.write(exp.stdout)
    out["ncu_source"] = {"config": names[0], "returncode": proc.returncode, "export_returncode": exp.returncode,
                         "seconds": round(time.time() - t0, 1), "stderr_tail": (proc.stderr + exp.stderr)[-1500:]}


def ncu_driver(names: str):
    """qkv at M = 2048: each named configuration once, then LayerCast once, inside the profiled range."""
    cfgs = [c for c in cuda_gemm.compiled_configs() if c.name in names.split(",")]
    inp = bench.Inputs(bench.ShapeCase("qkv_proj", 6144, 4096), 2048, seed=0)
    lin = det.Linear(inp.w)
    x = inp.x[:2048].contiguous()
    for c in cfgs:
        cuda_gemm.linear(x, lin.wt, None, c, det.CHAIN_K)
    lin(x, "layercast")
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for c in cfgs:
        cuda_gemm.linear(x, lin.wt, None, c, det.CHAIN_K)
    lin(x, "layercast")
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def only(names: str):
    """From here on, compiled_configs() lists only the named configurations (after the library was
    loaded: it checks its variant count against the whole table)."""
    compiled = cuda_gemm.compiled_configs
    keep = [c for c in compiled() if c.name in names.split(",")]
    missing = set(names.split(",")) - {c.name for c in keep}
    if missing:
        raise SystemExit(f"--only: not compiled: {sorted(missing)}")
    cuda_gemm.compiled_configs = lambda source=None: list(keep) if source is None else compiled(source)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma list of: ceilings,small_m,ncu")
    ap.add_argument("--only", default=None, help="comma list of configuration names to check and time")
    ap.add_argument("--ncu-driver", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ncu_driver:
        ncu_driver(args.ncu_driver)
        return
    skip = set(args.skip.split(","))
    out = {"env": bench.versions(), "configs_before": configs_now(),
           "command": "python3 benchmarks/det_call7_prefill.py " + " ".join(sys.argv[1:])}
    path = os.path.join(args.out, "det_call7_prefill.json")
    t0 = time.time()

    def build_only(o):
        build(o)
        if args.only:      # the build's table lists the swept configurations, the others apart
            only(args.only)
            swept = {c.name for c in cuda_gemm.compiled_configs()}
            infos = o["build"]["configs"]
            o["build"]["not_swept"] = {k: v for k, v in infos.items() if k not in swept}
            o["build"]["configs"] = {k: v for k, v in infos.items() if k in swept}

    steps = (("ceilings", ceilings), ("build", build_only), ("edge", edge_tiles),
             ("sweep", lambda o: sweep(o, args.repeats)))
    run_steps(out, steps, skip, t0, path)
    if "sweep" in out:
        choose(out)
        out["ranking"] = ranking(out)
    if out.get("winner", {}).get("variant"):
        run_steps(out, (("small_m", lambda o: small_m(o, args.repeats)),
                        ("ncu", lambda o: ncu(o, args.out))), skip, t0, path)
    print_table(out)


def print_table(out):
    """det_call6's table (build, edge, sweep, winner, small M, errors), then what ncu did."""
    call6_table(out)
    print("ncu", json.dumps({k: v for k, v in out.get("ncu", {}).items() if k != "stderr_tail"}))


if __name__ == "__main__":
    main()
