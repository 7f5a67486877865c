"""The optional GPU stack of the deterministic GEMMs: torch, Triton and Gluon where installed.

CPU-only installs and CI may have none of them; the CPU reference needs none (reference.py)."""
from __future__ import annotations

try:  # torch alone runs the baselines and the layer benchmark
    import torch
except ImportError:  # pragma: no cover - exercised where torch is absent
    torch = None
try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = tl = None

gluon = gl = cp_async = None
if triton is not None:
    try:
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp_async
    except ImportError:  # pragma: no cover - Triton < 3.5
        gluon = gl = cp_async = None

HAVE_TRITON = triton is not None
HAVE_GLUON = gluon is not None


def need_gpu_stack() -> None:
    if not HAVE_TRITON:
        from profiler.errors import EnvironmentProblem
        raise EnvironmentProblem("the deterministic kernels need torch and triton: pip install 'smlens[gpu]'")
