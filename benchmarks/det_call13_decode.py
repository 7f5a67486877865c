"""Issue 16's decode call 13: det_decode.cu's FMA orders (flags >> 2: the order in which a W^T row's
FMAs are written, chosen locally by benchmarks/sass_banks.py as the orders with the fewest FFMAs whose
sources share a register bank) on the three configurations CUDA_DECODE_RULES adopts at M = 16, against
cuBLAS bf16 and the adopted configurations. Everything else is det_call7_decode.py's (build, edge
bits, timing, the choice); bits are compared with the Gluon default's (the decode rules are emptied
here, so Linear's "det" path is the Gluon kernel).

    python3 benchmarks/det_call13_decode.py --out DIR [--repeats 10] [--ncu ROLE:M]

Under ncu (--ncu gate_up_proj:16) it runs the adopted gate_up kernel and the fastest new
configuration on gate_up at M = 16 (by that projection's time, not the worst ratio).

The orders that lost left det_decode.cu afterwards; the script selects a call's configurations by
their flags, so it reruns a call only at that call's commit (benchmarks/DETERMINISM_NOTES.md, call
13): 13a at a133e77 (orders 1, 2 and 5 on the three M = 16 shapes), 13b at 8bfaa5a (orders 1, 2, 5,
9 and 13, 8- and 16-row stages; call 7's rules as the baselines in both). At later commits it times
the configurations with an order flag, i.e. the adopted ones.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import det_call7_decode as call7  # noqa: E402
from det_call4 import SHAPES  # noqa: E402

from profiler.workloads.deterministic import cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402

ADOPTED = {bucket: [cfg for _, _, cfg in rules] for bucket, rules in det.CUDA_DECODE_RULES.items()}
RULES = det.CUDA_DECODE_RULES
det.CUDA_DECODE_RULES = {}  # the reference bits: the Gluon default's


def is_new(cfg) -> bool:
    return bool(cfg.flags >> 2)


def candidates(bucket: int) -> dict:
    out = {}
    out.update({c.name: c for c in ADOPTED.get(bucket, [])})
    out.update({c.name: c for c in cuda_gemm.compiled_decode_configs() if c.rows <= bucket and is_new(c)})
    return out


def ncu_target(out_dir: str, spec: str):
    """One call of the adopted configuration and of the fastest new one on ROLE at M (under ncu)."""
    role, M = spec.split(":")
    M = int(M)
    with open(os.path.join(out_dir, "det_call7.json")) as f:
        rows = json.load(f)["decode"]
    _, N, K = next(s for s in SHAPES if s[0] == role)
    adopted = next(cfg for min_n, min_k, cfg in RULES[M] if N >= min_n and K >= min_k)
    cands = candidates(M)
    timed = [r for r in rows if r["bucket"] == M and r["role"] == role and r["variant"] in cands
             and "median_us" in r and r.get("same_as_default") and is_new(cands[r["variant"]])]
    names = [adopted.name] + [min(timed, key=lambda r: r["median_us"])["variant"]] if timed else [adopted.name]
    call7.ncu_calls(role, M, names, cands)


call7.candidates = candidates
call7.BUCKETS = {16: (9, 13, 16), 8: (5, 8)}   # whole outputs: M = 9 and 13 through row blocks
call7.ncu_target = ncu_target

if __name__ == "__main__":
    call7.main()
