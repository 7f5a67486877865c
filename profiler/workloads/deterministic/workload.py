"""The deterministic GEMMs and their baselines as a workload: kernels inside NVTX ranges of the
`smlens` domain, role ranges carrying `M= N= K=`, for `smlens profile --workload det-gemm`.

    python -m profiler.workloads.deterministic.workload --model llama-3.1-8b --tokens 1,2048 --impl det,layercast
    python -m profiler.workloads.deterministic.workload --shapes decode/qkv_proj:1x6144x4096 o_proj:16x4096x4096
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Optional

from profiler.workloads.deterministic.kernels import IMPLS, Linear
from profiler.workloads.deterministic.stack import need_gpu_stack, torch
from views.vocabulary import GEMM_ROLES, PHASES


@dataclass(frozen=True)
class GemmCase:
    phase: str
    role: str
    M: int
    N: int
    K: int

    def message(self, impl: str) -> str:
        return f"{self.role} M={self.M} N={self.N} K={self.K} impl={impl}"


def default_phase(M: int) -> str:
    return "decode" if M <= 64 else "warm_prefill"


def parse_shape_item(item: str) -> GemmCase:
    """`[phase/]role:MxNxK`, e.g. `decode/qkv_proj:1x6144x4096` or `o_proj:2048x4096x4096`."""
    from profiler.errors import BadInput
    text = item.strip()
    phase = None
    if "/" in text:
        phase, text = text.split("/", 1)
        if phase not in PHASES:
            raise BadInput(f"shape {item!r}: phase must be one of {', '.join(PHASES)}")
    role, sep, dims = text.partition(":")
    if not sep or role not in GEMM_ROLES:
        raise BadInput(f"shape {item!r}: write [phase/]role:MxNxK with role one of {', '.join(GEMM_ROLES)}")
    try:
        M, N, K = (int(v) for v in dims.lower().split("x"))
    except ValueError:
        raise BadInput(f"shape {item!r}: dimensions must be three integers MxNxK, e.g. 1x6144x4096") from None
    if min(M, N, K) <= 0:
        raise BadInput(f"shape {item!r}: dimensions must be positive")
    return GemmCase(phase or default_phase(M), role, M, N, K)


def model_cases(model: str, tokens: list[int]) -> list[GemmCase]:
    from profiler.workloads.models import get_model
    shape = get_model(model)
    cases = []
    for t in tokens:
        for role, (M, N, K) in shape.gemm_shapes(t).items():
            cases.append(GemmCase(default_phase(M), role, M, N, K))
    return cases


def run_workload(cases: list[GemmCase], impls: list[str], repeat: int = 1, seed: int = 0,
                 device: str = "cuda") -> dict:
    """Run each case with each implementation inside `phase / impl=<impl> / <role> M= N= K=` ranges
    (one warm-up call outside any range first, so compilation and library heuristics stay out)."""
    need_gpu_stack()
    from profiler.workloads.decoder import Annotator, DOMAIN
    ann = Annotator(DOMAIN)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    weights: dict[tuple[int, int], Linear] = {}
    done = []
    for case in cases:
        key = (case.N, case.K)
        if key not in weights:
            w = (torch.randn(case.N, case.K, generator=gen) / math.sqrt(case.K)).to(torch.bfloat16)
            weights[key] = Linear(w.to(device))
        lin = weights[key]
        x = torch.randn(case.M, case.K, generator=gen).to(device)
        for impl in impls:
            lin(x, impl)                                    # warm-up: compile, heuristics
            torch.cuda.synchronize()
            with ann.range(case.phase), ann.range(f"impl={impl}"), ann.range(case.message(impl)):
                for _ in range(repeat):
                    lin(x, impl)
            torch.cuda.synchronize()
            done.append({"phase": case.phase, "role": case.role, "M": case.M, "N": case.N, "K": case.K,
                         "impl": impl})
    return {"domain": DOMAIN, "nvtx_active": ann.active, "runs": done}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m profiler.workloads.deterministic.workload",
                                description="Run the deterministic GEMMs and baselines inside NVTX ranges.")
    p.add_argument("--shapes", nargs="*", default=None,
                   help="[phase/]role:MxNxK items, e.g. decode/qkv_proj:1x6144x4096")
    p.add_argument("--model", default="llama-3.1-8b", help="model whose projections to run (without --shapes)")
    p.add_argument("--tokens", default="1,2048", help="comma-separated M values for --model")
    p.add_argument("--impl", default="det", help=f"comma-separated, of: {', '.join(IMPLS)}, portable")
    p.add_argument("--repeat", type=int, default=1, help="calls per range")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from profiler.errors import SmlensError
    try:
        impls = [s.strip() for s in args.impl.split(",") if s.strip()]
        bad = [i for i in impls if i not in IMPLS + ("portable",)]
        if bad:
            raise SmlensError(f"unknown --impl {', '.join(bad)}; choose from {', '.join(IMPLS)}, portable")
        if args.shapes:
            cases = [parse_shape_item(s) for s in args.shapes]
        else:
            try:
                tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
            except ValueError:
                raise SmlensError("--tokens takes comma-separated integers, e.g. 1,2048") from None
            cases = model_cases(args.model, tokens)
        if not torch or not torch.cuda.is_available():
            from profiler.errors import EnvironmentProblem
            raise EnvironmentProblem("the deterministic workload needs a CUDA GPU with torch and triton")
        result = run_workload(cases, impls, args.repeat, args.seed)
    except SmlensError as err:
        print(f"smlens: {err}", file=sys.stderr)
        return err.exit_code
    import json
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
