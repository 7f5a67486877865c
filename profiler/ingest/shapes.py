"""`--shapes FILE` -> the GEMM shapes a capture's NVTX ranges lack, per "[phase/]role".

The readers' Classifier (capture_table.py) fills them into the kernels table: "phase/role" first,
then "prefill/role" for either prefill, then "role".
"""
from __future__ import annotations

import re

from profiler.errors import BadInput
from profiler.ingest import nvtx
from profiler.option_checks import read_option_file


def parse_shapes_file(path) -> dict:
    """`--shapes FILE`: one line per role, `[phase/]role M N K` or `role M=.. N=.. K=..`; # comments."""
    shapes = {}
    text = read_option_file(path, "--shapes")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(" ")
        values = re.findall(r"\d+", rest)
        phase, _, role = key.rpartition("/")
        if len(values) != 3 or not (nvtx.canonical_role(role) or role == "gemm"):
            raise BadInput(f"{path}:{number}: expected '[phase/]role M N K', got {line!r}")
        if phase and phase not in (*nvtx.PHASES, "prefill", nvtx.SETUP_PHASE):  # it would match no kernel
            raise BadInput(f"{path}:{number}: no phase {phase!r}; give one of "
                           f"{', '.join((*nvtx.PHASES, 'prefill', nvtx.SETUP_PHASE))}, or none")
        shapes[key] = tuple(int(v) for v in values)
    return shapes
