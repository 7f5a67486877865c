"""Write into a `smlens bench determinism --out` result the kernel configurations it ran with, as
`configs` (the tables of profiler/workloads/deterministic/kernels.py), so that a committed record
says which kernels made its numbers (tests/records read it back against the tables adopted now).

    python3 benchmarks/h200/det_configs.py RESULT.json
"""
import dataclasses
import json
import sys

from profiler.workloads.deterministic import kernels as det


def adopted() -> dict:
    configs = {"gemv": {str(m): dataclasses.asdict(c) for m, c in det.GEMV_CONFIGS.items()},
               "tile": dataclasses.asdict(det.TILE_CONFIG)}
    if det.CUDA_TILE_CONFIG is not None:
        configs["cuda_tile"] = {"min_m": det.CUDA_TILE_MIN_M, **dataclasses.asdict(det.CUDA_TILE_CONFIG)}
    if det.CUDA_DECODE_RULES:  # per bucket: (min_n, min_k, configuration)
        configs["cuda_decode"] = {str(m): [[n, k, dataclasses.asdict(c)] for n, k, c in rules]
                                  for m, rules in det.CUDA_DECODE_RULES.items()}
    if det.CUDA_GEMV_CONFIGS:
        configs["cuda_gemv"] = {str(m): dataclasses.asdict(c) for m, c in det.CUDA_GEMV_CONFIGS.items()}
    if det.CUDA_FOLD_MODE is not None:
        configs["cuda_fold_mode"] = det.CUDA_FOLD_MODE
    return configs


if __name__ == "__main__":
    path = sys.argv[1]
    with open(path) as f:
        result = json.load(f)
    result["configs"] = adopted()
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
