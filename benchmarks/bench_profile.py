"""What `smlens profile` costs, against plain ncu, and what the workload's annotation costs.

    python3 benchmarks/bench_profile.py annotation      # any machine: the NVTX ranges with no profiler
    python3 benchmarks/bench_profile.py --quick         # the annotation's, 2,000 ranges: a check that it runs
    python3 benchmarks/bench_profile.py gpu             # a GPU machine with ncu: wall times

`gpu` times, on one workload (Llama-3.1-8B shapes, 4 layers, batch 8, prompt 512, 4 decode steps):
the workload alone; `smlens profile` (all eight views, dedup); plain ncu with one metric on every
kernel (to count them); `ncu --set full` and `ncu --set basic` on every kernel, each stopped with
SIGINT at its time box (the kernels they finished say how far they got). The same commands ran as
step 3 of benchmarks/h200/call2.sh; results in BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite import arguments  # noqa: E402

WORKLOAD = "--model llama-3.1-8b --layers 4 --batch 8 --prompt 512 --decode-steps 4"


def annotation(repeats: int = 200_000) -> dict:
    """ns per range (enter and exit) with no profiler attached, against a bare null context."""
    import contextlib
    from profiler.workloads.decoder import Annotator

    ann = Annotator()
    null = contextlib.nullcontext()
    message = "qkv_proj M=8 N=6144 K=4096"

    def timed(make) -> float:
        start = time.perf_counter_ns()
        for _ in range(repeats):
            with make():
                pass
        return (time.perf_counter_ns() - start) / repeats

    bare = min(timed(lambda: null) for _ in range(5))
    annotated = min(timed(lambda: ann.range(message)) for _ in range(5))
    return {"profiler_attached": ann.active, "ns_per_range": round(annotated, 1),
            "ns_per_bare_null_context": round(bare, 1),
            "ranges_per_layer": 14, "ns_per_layer": round(14 * annotated)}


def _timed(cmd: list[str], box_s: float | None = None, env=None) -> tuple[float, int, str]:
    """Wall seconds, exit code and output of `cmd`; SIGINT at `box_s`, as a user's Ctrl-C."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out, _ = proc.communicate(timeout=box_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(2)
        out, _ = proc.communicate()
    return time.monotonic() - start, proc.returncode, out


def gpu(workload: list[str], full_box_s: float, basic_box_s: float) -> dict:
    from profiler.run.ncu import find_ncu

    ncu = find_ncu()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    program = [sys.executable, "-m", "profiler.workloads.decoder", *workload]
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    results = {}
    try:
        seconds, code, _ = _timed(program, env=env)
        results["workload_alone"] = {"s": round(seconds, 1), "rc": code}
        seconds, code, out = _timed([sys.executable, "-m", "profiler.cli", "profile", *workload,
                                     "--quiet", "--format", "json", "--store", str(work / "store")], env=env)
        outcome = json.loads(out[out.index("["):])[0] if "[" in out else {}
        results["smlens_profile"] = {"s": round(seconds, 1), "rc": code,
                                     "kernels": outcome.get("kernels"),
                                     "skipped": outcome.get("skipped_duplicates")}
        for label, args, box in (("ncu_one_metric", ["--metrics", "gpu__time_duration.sum"], None),
                                 ("ncu_set_full", ["--set", "full"], full_box_s),
                                 ("ncu_set_basic", ["--set", "basic"], basic_box_s)):
            cmd = [ncu, "--clock-control", "none", *args, "-f", "-o", str(work / label), *program]
            seconds, code, out = _timed(cmd, box, env)
            done = sum(1 for line in out.splitlines()
                       if line.startswith("==PROF== Profiling") and "100%" in line)
            results[label] = {"s": round(seconds, 1), "rc": code, "kernels": done,
                              "stopped_at_box": box is not None and seconds >= box}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["annotation", "gpu"], nargs="?", default="annotation")
    parser.add_argument("--ranges", type=int, default=200_000, help="annotation: ranges timed per repeat")
    parser.add_argument("--full-box", type=float, default=30.0, help="seconds for ncu --set full")
    parser.add_argument("--basic-box", type=float, default=600.0, help="seconds for ncu --set basic")
    parser.add_argument("--workload", default=WORKLOAD, help="gpu: the built-in decoder's options")
    args = arguments(parser, quick={"ranges": 2_000, "full_box": 10.0, "basic_box": 30.0,
                                    "workload": "--model tiny --layers 2 --batch 8 --prompt 16 --decode-steps 4"})
    result = annotation(args.ranges) if args.what == "annotation" else gpu(args.workload.split(), args.full_box, args.basic_box)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
