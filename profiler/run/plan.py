"""A profile's plan: the ncu runs it makes (ProfilePlan), how the phases split over them by cache
control, and the environment every program smlens starts runs in. profile.py, program.py and
distributed.py build plans; this module knows none of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from profiler.run import ncu as ncu_mod
from profiler.run.ncu import Invocation

METRICS_PLACEHOLDER = "<METRICS>"


# NVLink multicast (NVLS) stays off in every process smlens starts: on the lent machines a program
# that uses it can put GPUs that others share out of service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


def with_no_multicast(env: dict) -> dict:
    env.update(NO_MULTICAST)
    return env


@dataclass
class ProfilePlan:
    title: str
    invocations: list[Invocation]
    metrics: list[str]
    expected_kernels: int | None
    skipped_estimate: int | None       # kernels left out as duplicates (layers, decode steps)
    regions: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    name: str = "run"                   # the run's name when the user gives none
    variant: str | None = None          # what tells this plan's run from its siblings' (default: name)
    tags: dict = field(default_factory=dict)
    # Called on the merged CSV before it is stored: (path, failed, deadline) -> extra run tags
    # (tensor parallel: ranks and the timed collectives, profiler.run.distributed).
    after_merge: Callable | None = None
    annotated: bool = False             # a program run with smlens's annotation (profiler/run/program.py)
    subject: str = "the workload"       # what failure messages call the profiled program

    def commands(self, ncu: str = "ncu", full: bool = False) -> list[list[str]]:
        return [ncu_mod.build_command(ncu, self.metrics, inv, f"<reports>/{inv.report_stem()}",
                                      None if full else METRICS_PLACEHOLDER)
                for inv in self.invocations]

    def to_dict(self, ncu: str = "ncu") -> dict:
        return {
            "title": self.title,
            "expected_kernels": self.expected_kernels,
            "skipped_duplicates_estimate": self.skipped_estimate,
            "invocations": [{"label": inv.label, "cache_control": inv.cache_control,
                             "nvtx_include": inv.nvtx_includes, "phases": list(inv.phases),
                             "expected_kernels": inv.expected_kernels, "env": inv.env, "command": cmd}
                            for inv, cmd in zip(self.invocations, self.commands(ncu, full=True))],
            "metrics": self.metrics,
            "notes": self.notes,
        }


def cache_groups(regions: list, cache_control: str) -> list[tuple[str, str, list]]:
    """(label, ncu --cache-control, regions) per ncu run: with `auto` the cold prefill alone with
    caches flushed, then the other phases with caches as the program left them."""
    if cache_control != "auto":
        return [("all-phases", cache_control, regions)]
    groups = [("all", [r for r in regions if r.phase == "cold_prefill"]),
              ("none", [r for r in regions if r.phase != "cold_prefill"])]
    return [("+".join(r.phase.replace("_prefill", "") for r in group), cache, group)
            for cache, group in groups if group]


def workload_env(extra: dict | None = None) -> dict:
    """The environment of a program smlens starts: ours, `extra` on top, profiler/ importable, output
    unbuffered, NVLink multicast off."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds profiler/
    paths = [p for p in ((extra or {}).get("PYTHONPATH"), root, env.get("PYTHONPATH")) if p]
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return with_no_multicast(env)
