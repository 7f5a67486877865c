"""`smlens profile` and `smlens doctor`: ncu over a workload or a program, each run stored."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from commands.common import request_values, say, store_path
from profiler.errors import BadInput, SmlensError
from profiler.ingest.store import check_name, parse_tags
from profiler.option_checks import check_folder_option, check_positive_number
from profiler.run import doctor as doc
from profiler.run import ncu as ncu_mod
from profiler.run import profile as prof
from profiler.run.distributed import require_gpus
from profiler.run.options import DEFAULT_WORKLOAD
from profiler.run.program import check_program
from reports.doctor import print_checks
from reports.formats import Format
from views.registry import required_metrics

MAX_REPEAT = 100


@dataclass(frozen=True)
class ProfileRequest:
    """What `smlens profile` was asked, by option name. The workload's own options (--model,
    --batch, ... : profiler/run/options.py) are in `given`, the options the user gave, so that
    one a workload does not take is refused rather than quietly ignored."""
    # what to profile
    workload: str = DEFAULT_WORKLOAD
    program: tuple[str, ...] = ()
    given: Mapping[str, object] = field(default_factory=dict)
    # what to collect
    views: Optional[str] = None  # the views whose metrics (default all)
    metrics: Optional[str] = None  # exactly these metrics instead (comma-separated, or @FILE)
    # how ncu runs
    cache_control: str = "auto"
    graph_profiling: Optional[str] = None
    ncu: Optional[str] = None
    time_limit: Optional[float] = None
    keep: Optional[Path] = None
    # what is stored
    repeat: int = 1
    name: Optional[str] = None
    tag: tuple[str, ...] = ()
    store: Optional[str] = None
    # what is shown
    plan: bool = False
    quiet: bool = False
    format: Format = Format.table

    @classmethod
    def from_options(cls, options: Mapping[str, object], given: Sequence[str]) -> "ProfileRequest":
        """The request of the command line's options (by parameter name; `given`: the names of
        those the user gave, not left at their defaults)."""
        return cls(**request_values(cls, options), given={k: options[k] for k in given})


def profile_metrics(views: Optional[str], metrics: Optional[str]) -> list[str]:
    """`--metrics` as given, else what the chosen views (default all) need."""
    explicit = prof.parse_metrics_option(metrics)
    if explicit:
        return list(dict.fromkeys(explicit))
    try:
        return list(required_metrics(views.split(",") if views else None))
    except (KeyError, ValueError) as err:
        raise BadInput(f"--views: {err}") from None


def profile(request: ProfileRequest) -> list:
    """Plan the request's ncu runs, and print them (--plan) or run each and store it; the
    outcomes. A run that failed part way is kept, marked partial, and raised as its error."""
    if not 1 <= request.repeat <= MAX_REPEAT:  # each repeat profiles every configuration again
        raise BadInput(f"--repeat {request.repeat}: give 1 to {MAX_REPEAT} (the gate's statistics need 3 or more)")
    # what would otherwise fail after minutes of profiling, or quietly mean something else
    check_name(request.name)
    tags = parse_tags(list(request.tag))
    check_positive_number(request.time_limit, "--time-limit")
    if request.keep:
        check_folder_option(request.keep, "--keep")
    program = list(request.program) or None
    options = prof.workload_options(request.workload, program, dict(request.given))
    plans = prof.build_plans(options, profile_metrics(request.views, request.metrics),
                             request.cache_control, request.graph_profiling)
    if request.plan:
        try:
            ncu_path = ncu_mod.find_ncu(request.ncu)
        except SmlensError:
            ncu_path = request.ncu or "ncu"
        if request.format == Format.json:
            say(prof.plan_json(plans, ncu_path))
        else:
            say("\n\n".join(prof.format_plan(p, ncu_path) for p in plans))
        return []
    if program:
        check_program(program)
    ncu_path = ncu_mod.find_ncu(request.ncu)
    ncu_mod.require_gpu()
    if getattr(options, "tp", 1) > 1:
        require_gpus(options.tp)
    outcomes = []
    for the_plan, run_name, run_tags in prof.planned_runs(plans, request.name, request.repeat, tags):
        keep_dir = request.keep / run_name if request.keep else None
        outcome = prof.execute(the_plan, store_path(request.store), run_name, run_tags, ncu_path,
                               request.time_limit, keep_dir, progress=not request.quiet)
        outcomes.append(outcome)
        if request.format == Format.table and outcome.failure is None:
            say(prof.summary_line(outcome), err=True)
            for note in outcome.notes:
                say(f"smlens: note: {note}", err=True)
        if outcome.failure is not None:
            break
    if request.format == Format.json:
        say(json.dumps([o.to_dict() for o in outcomes], indent=2))
    failure = outcomes[-1].failure if outcomes else None
    if failure is not None:
        run_id = (outcomes[-1].run or {}).get("id")
        raise SmlensError(f"{failure}; kept {outcomes[-1].kernels} profiled kernel(s) as run "
                          f"{run_id}, marked partial", failure.exit_code)
    return outcomes


def doctor(ncu: Optional[str] = None, deep: bool = False, format: Format = Format.table) -> int:
    """Can this machine profile? The checks printed; the exit code of the worst."""
    checks = doc.run_checks(lambda: profile_metrics(None, None), ncu, deep)
    if format == Format.json:
        say(json.dumps(doc.to_json(checks), indent=2))
    else:
        print_checks(doc.to_json(checks))
    return doc.exit_code(checks)
