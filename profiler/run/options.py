"""What each workload of `smlens profile` takes: one dataclass per workload, its fields the options
that belong to it, its defaults the only ones (the command passes on only what the user gave).

`profile.WORKLOADS` pairs each with its planner; an option given for a workload whose dataclass lacks
it is refused. This module imports nothing heavy: the command line shows these defaults in --help.
"""
from __future__ import annotations

from dataclasses import dataclass

from views.vocabulary import PHASES

DEFAULT_WORKLOAD = "decoder"
DEFAULT_MODEL = "llama-3.1-8b"
ALL_PHASES = ",".join(PHASES)


@dataclass(frozen=True)
class DecoderOptions:
    """`--workload decoder` (the default): a stack of a model's decoder layers; one run per batch
    size and prompt length."""
    model: str = DEFAULT_MODEL
    layers: int = 2
    batch: str = "1"                       # comma-separated: one run each
    prompt: str = "512"                    # comma-separated: one run each
    decode_steps: int = 2
    dtype: str = "bf16"
    phases: str = ALL_PHASES
    dedup: bool = True                     # one layer per phase and one decode step
    tp: int = 1                            # tensor parallel: ranks, one process and GPU each
    layer: int = 0                         # with dedup: the layer profiled


@dataclass(frozen=True)
class DetGemmOptions:
    """`--workload det-gemm`: the deterministic GEMMs and their baselines on a model's four
    projections; one run per implementation."""
    model: str = DEFAULT_MODEL
    tokens: str = "1,16,2048"              # GEMM rows M; M <= 64 is decode, more is prefill
    impl: str = "det,cublas_bf16"


@dataclass(frozen=True)
class ProgramOptions:
    """A program given after `--`: annotated at start-up (phases, layers, roles, shapes from its
    torch modules, profiler/run/program.py) and profiled one layer per phase, or as it is with the
    user's ncu filters."""
    program: tuple[str, ...]
    nvtx_include: tuple[str, ...] = ()
    launch_skip: int | None = None
    launch_count: int | None = None
    kernel_name: str | None = None
    tp: int = 1                            # the program's ranks (processes), profiled together
    annotate: bool = True                  # inject the annotation (--no-annotate: run it as it is)
    phases: str = ALL_PHASES
    dedup: bool = True
    layer: int = 0
    include: tuple[str, ...] = ()          # `setup`: also what runs outside forwards
