"""Issue 16's decode call 8: det_decode.cu variants at M = 8 and 16 on the four projections, against
cuBLAS bf16 and the configurations kernels.CUDA_DECODE_RULES adopted in call 7 (the baselines).
Everything else is det_call7_decode.py's (build, edge bits, timing, the choice); bits are compared
with the Gluon default's (the decode rules are emptied here, so Linear's "det" path is the Gluon
kernel).

    python3 benchmarks/det_call8_decode.py --out DIR [--repeats 10] [--ncu ROLE:M]

The variants lost and left det_decode.cu afterwards; the script selects a call's configurations by
their flags, so it reruns a call only at that call's commit (benchmarks/DETERMINISM_NOTES.md, call 8):
8a at c6f1c70 (NEW_FLAGS = 4 | 8 and the 1-warp program: FMAs column by column, the stage loop
unrolled by the ring's slots), 8b at 71b1d27 (NEW_FLAGS = 16: the fold inside the decode kernel).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import det_call7_decode as call7  # noqa: E402

from profiler.workloads.deterministic import cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402

ADOPTED = {bucket: [cfg for _, _, cfg in rules] for bucket, rules in det.CUDA_DECODE_RULES.items()}
NEW_FLAGS = 16          # call 8b: the fused fold (call 8a swept flags 4 and 8 and the 1-warp program: they lost)
det.CUDA_DECODE_RULES = {}  # the reference bits: the Gluon default's


def is_new(cfg) -> bool:
    return bool(cfg.flags & NEW_FLAGS)


def candidates(bucket: int) -> dict:
    # the Gluon default is timed by call 7 already: here only its bits (and ncu's reference call)
    out = {"gluon_default": det.GEMV_CONFIGS[bucket]} if "--ncu" in sys.argv else {}
    out.update({c.name: c for c in ADOPTED.get(bucket, [])})
    out.update({c.name: c for c in cuda_gemm.compiled_decode_configs() if c.rows <= bucket and is_new(c)})
    return out


call7.candidates = candidates
call7.CALL6 = {}
call7.NCU_TOP = 4

if __name__ == "__main__":
    call7.main()
