"""`smlens sweep`: a grid of models x batch sizes x prompt lengths profiled, one stored run per
point (profiler/run/sweep.py); the same command resumes an interrupted sweep."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping, Optional

from profiler.commands.common import say, store_path
from profiler.commands.profile import profile_metrics
from profiler.errors import SmlensError
from profiler.option_checks import check_folder_option, check_positive_number
from profiler.run import sweep as sw
from reports.formats import Format

# The workload options a sweep passes on to each point's profile (the axes are the sweep's own).
WORKLOAD_OPTIONS = ("layers", "decode_steps", "dtype", "phases", "dedup", "layer", "annotate")


@dataclass(frozen=True)
class SweepRequest:
    """What `smlens sweep` was asked, by option name; `given`: the workload options the user gave
    (not left at their defaults), so that one the workload does not take is refused."""
    program: tuple[str, ...] = ()
    model: Optional[str] = None
    batch: str = "1"
    prompt: str = "512"
    given: Mapping[str, object] = field(default_factory=dict)
    views: Optional[str] = None
    metrics: Optional[str] = None
    cache_control: str = "auto"
    graph_profiling: Optional[str] = None
    time_limit: Optional[float] = None
    ncu: Optional[str] = None
    keep: Optional[Path] = None
    store: Optional[str] = None
    plan: bool = False
    quiet: bool = False
    format: Format = Format.table

    @classmethod
    def from_options(cls, options: Mapping[str, object], given: set[str]) -> "SweepRequest":
        request = cls(given={k: options[k] for k in given if k in WORKLOAD_OPTIONS})
        passed = [f.name for f in fields(cls)
                  if f.name not in ("given", "program") and options.get(f.name) is not None]
        return replace(request, **{k: options[k] for k in passed},
                       program=tuple(options.get("program") or ()))


def grid_of(request: SweepRequest) -> sw.Grid:
    return sw.make_grid(request.model, request.batch, request.prompt, dict(request.given),
                        profile_metrics(request.views, request.metrics), list(request.program) or None,
                        cache_control=request.cache_control, graph_profiling=request.graph_profiling)


def sweep(request: SweepRequest) -> dict:
    """Plan (--plan: the grid, what the store holds, kernels and time) or run the sweep; its JSON
    document. A sweep that did not finish raises its one line and exit code after printing."""
    check_positive_number(request.time_limit, "--time-limit")
    if request.keep:
        check_folder_option(request.keep, "--keep")
    grid = grid_of(request)
    if request.plan:
        summary = sw.plan_summary(grid, sw.states(grid, store_path(request.store)))
        say(json.dumps(summary, indent=2) if request.format == Format.json else sw.format_plan(summary))
        return summary
    outcome = sw.run_sweep(grid, store_path(request.store), sw.check_can_profile(grid, request.ncu),
                           request.time_limit, request.keep, progress=not request.quiet)
    document = outcome.to_dict()
    if request.format == Format.json:
        say(json.dumps(document, indent=2))
    say(sw.summary_line(outcome), err=True)
    if outcome.exit_code:
        raise SmlensError(sw.failure_line(outcome), outcome.exit_code)
    return document
