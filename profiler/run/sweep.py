"""`smlens sweep`: a grid of models x batch sizes x prompt lengths, one stored run per point.

Each point is one `smlens profile` (profile.workload_options, build_plans, execute): the built-in
decoder, or a program after `--` whose arguments carry `{batch}`, `{prompt}` (and `{model}`)
placeholders. Every run is tagged with the sweep's id (`sweep=<id>`, a digest of the grid and the
options, so the same command finds its own runs again) and the point's coordinates (model=, batch=,
prompt=). Before a point is profiled the store is asked for it: a complete run of this sweep, or of
another sweep that measured the same workload with the same metrics, is not profiled again; a
partial one is profiled again (and left in the store, shown as superseded). A point that crashes
(out of memory at the largest batch, say) does not stop the others; a missing GPU, counter
permission, the time limit or Ctrl-C stop the sweep, and the same command resumes it.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from profiler.errors import BadInput
from profiler.run import ncu as ncu_mod
from profiler.run import profile as prof
from profiler.run.ncu import NcuError
from profiler.run.plan import ProfilePlan

# The grid's axes, as `smlens profile` names them; each run carries its point's value of each.
AXES = ("model", "batch", "prompt")
PLACEHOLDERS = tuple("{" + axis + "}" for axis in AXES)

# What a profile costs on the H200: 0.3 s per profiled kernel at the views' 20 replay passes and
# 1.5 s to export, merge and store (BENCHMARKS.md, "smlens profile"), and 8.5 s per ncu run to
# start Python, torch and CUDA under it: the sweep study's 17 points of 52-57 kernels took 31.9 to
# 40.8 s, 35.1 s on average (tests/data/h200_sweep/logs); the earlier profile benchmark saw 6 s.
# Kernel length is not in it: the study's batch 64 x prompt 4096 point took 82 s.
START_S_PER_NCU_RUN = 8.5
S_PER_KERNEL = 0.3
STORE_S_PER_RUN = 1.5

# Failures that end the whole sweep: the machine cannot profile at all, or the user or the clock
# says stop. Any other (the program crashed, ncu failed on it, nothing matched) is that point's.
STOPS_SWEEP = (ncu_mod.EXIT_NO_NCU, ncu_mod.EXIT_NO_GPU, ncu_mod.EXIT_COUNTER_PERMISSION,
               ncu_mod.EXIT_TIME_LIMIT, ncu_mod.EXIT_INTERRUPTED)


def estimate_seconds(plan: ProfilePlan) -> float | None:
    """The cost model above for one plan; None when its kernel count is unknown (a program with
    the user's own filters)."""
    if plan.expected_kernels is None:
        return None
    return (START_S_PER_NCU_RUN * len(plan.invocations) + S_PER_KERNEL * plan.expected_kernels
            + STORE_S_PER_RUN)


def split_list(value: str | None, option: str) -> list[str]:
    items = [v.strip() for v in str(value or "").split(",") if v.strip()]
    if value is not None and not items:
        raise BadInput(f"{option} {value!r}: give one value or more, separated by commas")
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class Point:
    model: str | None
    batch: int
    prompt: int

    def coords(self) -> dict[str, str]:
        return {k: str(v) for k, v in (("model", self.model), ("batch", self.batch),
                                       ("prompt", self.prompt)) if v is not None}

    def label(self) -> str:
        return " ".join(([self.model] if self.model else []) + [f"b{self.batch}", f"p{self.prompt}"])


@dataclass
class Grid:
    """What a sweep measures: the axes' values, the workload's other options and the metrics."""
    models: list[str | None]
    batches: list[int]
    prompts: list[int]
    options: dict                       # the workload's other options the user gave, by name
    metrics: list[str]
    program: list[str] | None = None    # with placeholders
    workload: str = prof.DEFAULT_WORKLOAD
    cache_control: str = "auto"
    graph_profiling: str | None = None

    def points(self) -> list[Point]:
        return [Point(m, b, p) for m in self.models for b in self.batches for p in self.prompts]

    def spec(self) -> dict:
        """Everything that makes a run of this sweep what it is; the id is its digest, so the
        order of values on the command line does not matter."""
        return {"workload": "command" if self.program else self.workload,
                "program": self.program, "models": sorted(m or "" for m in self.models),
                "batches": sorted(self.batches), "prompts": sorted(self.prompts),
                "options": self.resolved_options(),
                "cache_control": self.cache_control, "graph_profiling": self.graph_profiling,
                "metrics": metrics_digest(self.metrics)}

    def resolved_options(self) -> dict:
        """The workload's options with their defaults filled in, less the axes: `--layers 2`
        given or left at its default is the same sweep."""
        from dataclasses import asdict

        point = self.points()[0]
        program = [_fill(a, point) for a in self.program] if self.program else None
        given = {**self.options, **({} if program else {"model": point.model})}
        options = asdict(prof.workload_options(self.workload, program, given))
        return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(options.items())
                if k not in AXES and k != "program"}

    @property
    def id(self) -> str:
        text = json.dumps(self.spec(), sort_keys=True, default=str)
        return "sw-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def metrics_digest(metrics: list[str]) -> str:
    return hashlib.sha256(",".join(sorted(set(metrics))).encode()).hexdigest()[:10]


def make_grid(models: str | None, batch: str, prompt: str, options: dict, metrics: list[str],
              program: list[str] | None = None, workload: str = prof.DEFAULT_WORKLOAD,
              cache_control: str = "auto", graph_profiling: str | None = None) -> Grid:
    """The grid of `smlens sweep`'s options (`options`: the workload options the user gave, by
    parameter name, as `profile.workload_options` takes them), checked before anything runs."""
    batches = prof.parse_int_list(batch, "--batch")
    prompts = prof.parse_int_list(prompt, "--prompt")
    model_list = split_list(models, "--model") if models is not None else []
    if program:
        text = " ".join(program)
        if model_list and "{model}" not in text:
            raise BadInput("--model with a program: put {model} in its arguments where the model "
                           "goes, or leave --model out")
        for axis, values in (("batch", batches), ("prompt", prompts)):
            if len(values) > 1 and "{" + axis + "}" not in text:
                raise BadInput(f"--{axis} {','.join(map(str, values))}: the program's arguments "
                               f"hold no {{{axis}}}, so every point would run the same program")
    else:
        bad = [a for a in PLACEHOLDERS if any(a in str(v) for v in options.values())]
        if bad:
            raise BadInput(f"{bad[0]} is for a program after `--`")
    if not model_list:
        model_list = [None] if program else [options.get("model") or prof.DecoderOptions.model]
    if not program:
        from profiler.workloads.models import get_model
        model_list = list(dict.fromkeys(get_model(m).id for m in model_list))  # unknown: refused
    rest = {k: v for k, v in options.items() if k not in AXES and k != "program"}
    grid = Grid(model_list, batches, prompts, rest, list(metrics), list(program) if program else None,
                workload, cache_control, graph_profiling)
    for point in grid.points():  # every point's plan is built now: a bad option fails before any runs
        point_plan(grid, point)
    return grid


def _fill(arg: str, point: Point) -> str:
    for axis, value in point.coords().items():
        arg = arg.replace("{" + axis + "}", value)
    return arg


def point_plan(grid: Grid, point: Point) -> tuple[ProfilePlan, str, dict]:
    """(plan, run name, run tags) of one point, through the profile library."""
    given = dict(grid.options)
    if grid.program:
        program = [_fill(a, point) for a in grid.program]
        options = prof.workload_options(grid.workload, program, given)
    else:
        given.update(model=point.model, batch=str(point.batch), prompt=str(point.prompt))
        if grid.workload != prof.DEFAULT_WORKLOAD:
            given["workload"] = grid.workload
        options = prof.workload_options(grid.workload, None, given)
    plans = prof.build_plans(options, grid.metrics, grid.cache_control, grid.graph_profiling)
    if len(plans) != 1:
        raise BadInput(f"{grid.workload}: a sweep point makes one run; this workload made "
                       f"{len(plans)}")
    (plan, name, tags), = prof.planned_runs(plans)
    if grid.program:
        name = f"{name}-" + "-".join(([point.model.replace('/', '-')] if point.model else [])
                                     + [f"b{point.batch}", f"p{point.prompt}"])
    tags = {**tags, **point.coords(), "sweep": grid.id, "metrics": metrics_digest(grid.metrics)}
    return plan, name, tags


# --- what the store already holds -----------------------------------------------------------

@dataclass
class PointState:
    point: Point
    plan: ProfilePlan
    name: str
    tags: dict
    status: str = "to do"               # to do | stored | reused | partial | profiled | failed
    run_id: str | None = None
    superseded: list[str] = field(default_factory=list)   # partial runs of this point, redone
    kernels: int | None = None
    seconds: float | None = None
    failure: str | None = None
    exit_code: int = 0

    @property
    def estimate_s(self) -> float | None:
        return estimate_seconds(self.plan)

    @property
    def needs_profiling(self) -> bool:
        return self.status in ("to do", "partial")

    def to_dict(self) -> dict:
        return {"point": self.point.coords(), "name": self.name, "status": self.status,
                "run_id": self.run_id, "superseded_partial_runs": self.superseded,
                "expected_kernels": self.plan.expected_kernels, "kernels": self.kernels,
                "estimate_s": _round(self.estimate_s), "seconds": _round(self.seconds),
                "failure": self.failure, "exit_code": self.exit_code}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _run_tags(runs) -> list[tuple[dict, dict]]:
    out = []
    for row in runs.to_dict("records"):
        try:
            tags = json.loads(row.get("tags") or "{}")
        except ValueError:
            tags = {}
        out.append((row, tags))
    return out


def states(grid: Grid, store_path, runs=None) -> list[PointState]:
    """Each point of the grid with what the store holds of it (`runs`: the store's runs table;
    read from `store_path` when not given, none when there is no store yet)."""
    if runs is None:
        runs = _read_runs(store_path)
    rows = _run_tags(runs) if runs is not None else []
    found = []
    for point in grid.points():
        plan, name, tags = point_plan(grid, point)
        state = PointState(point, plan, name, tags)
        # the same workload with the same metrics: this sweep's runs first, then any sweep's
        same = [(row, t) for row, t in rows
                if all(t.get(k) == v for k, v in tags.items() if k != "sweep")]
        mine = [(row, t) for row, t in same if t.get("sweep") == grid.id]
        complete = [row for row, _ in mine if not bool(row.get("partial"))]
        others = [row for row, _ in same if not bool(row.get("partial")) and row not in complete]
        if complete:
            state.status, state.run_id = "stored", _latest(complete)["id"]
        elif others:
            state.status, state.run_id = "reused", _latest(others)["id"]
        state.superseded = [row["id"] for row, _ in mine if bool(row.get("partial"))]
        if state.status == "to do" and state.superseded:
            state.status = "partial"
        if state.run_id:
            state.kernels = int(_latest(complete or others).get("kernel_count") or 0)
        found.append(state)
    return found


def _latest(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: str(r.get("created") or ""))


def _read_runs(store_path):
    from profiler.ingest.objectstore import is_url
    from profiler.ingest.store import looks_like_store
    from profiler.ingest.stores import open_store

    if not is_url(str(store_path)) and not looks_like_store(Path(store_path)):
        return None  # nothing stored yet: every point is to do
    return open_store(store_path, create=False).runs()


# --- the plan -------------------------------------------------------------------------------

def plan_summary(grid: Grid, found: list[PointState]) -> dict:
    todo = [s for s in found if s.needs_profiling]
    estimates = [s.estimate_s for s in todo]
    known = [e for e in estimates if e is not None]
    kernels = [s.plan.expected_kernels for s in todo if s.plan.expected_kernels is not None]
    return {"sweep": grid.id, "spec": grid.spec(), "points": len(found),
            "to_profile": len(todo), "in_store": len(found) - len(todo),
            "expected_kernels": sum(kernels) if len(kernels) == len(todo) else None,
            "estimate_s": round(sum(known), 1) if len(known) == len(todo) else None,
            "cost_model": {"start_s_per_ncu_run": START_S_PER_NCU_RUN,
                           "s_per_kernel": S_PER_KERNEL, "store_s_per_run": STORE_S_PER_RUN},
            "point_states": [s.to_dict() for s in found]}


def format_plan(summary: dict) -> str:
    """The grid as a table that fits 80 columns, then the totals."""
    lines = [f"sweep {summary['sweep']}: {summary['points']} point(s), {summary['in_store']} in the "
             f"store, {summary['to_profile']} to profile"]
    lines.append(f"  {'point':<32} {'status':<9} {'kernels':>8} {'estimate':>9}  run")
    for s in summary["point_states"]:
        label = Point(s["point"].get("model"), int(s["point"]["batch"]), int(s["point"]["prompt"])).label()
        kernels = (str(s["kernels"]) if s["status"] in ("stored", "reused") else
                   "?" if s["expected_kernels"] is None else f"≈{s['expected_kernels']}")
        est = "-" if s["status"] in ("stored", "reused") else duration(s["estimate_s"])
        lines.append(f"  {label[:32]:<32} {s['status']:<9} {kernels:>8} {est:>9}  "
                     f"{s['run_id'] or ''}")
    total = duration(summary["estimate_s"])
    kernels = "unknown" if summary["expected_kernels"] is None else f"≈{summary['expected_kernels']}"
    lines.append(f"to profile: {kernels} kernel(s), about {total} on an H200 ({START_S_PER_NCU_RUN:g} s "
                 f"per ncu run, {S_PER_KERNEL:g} s per kernel, {STORE_S_PER_RUN:g} s to store each)")
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# --- running --------------------------------------------------------------------------------

@dataclass
class SweepOutcome:
    grid: Grid
    points: list[PointState]
    stopped: NcuError | None = None     # what ended the sweep before its last point
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.stopped is not None:
            return self.stopped.exit_code
        failed = [s for s in self.points if s.status == "failed"]
        return failed[0].exit_code if failed else 0

    def to_dict(self) -> dict:
        counts = {}
        for s in self.points:
            counts[s.status] = counts.get(s.status, 0) + 1
        return {"sweep": self.grid.id, "spec": self.grid.spec(), "points": len(self.points),
                "counts": counts, "seconds": round(self.seconds, 1),
                "stopped": str(self.stopped) if self.stopped else None,
                "exit_code": self.exit_code, "point_states": [s.to_dict() for s in self.points]}


def summary_line(outcome: SweepOutcome) -> str:
    counts = outcome.to_dict()["counts"]
    parts = [f"{n} {status}" for status, n in counts.items()]
    text = (f"sweep {outcome.grid.id}: {len(outcome.points)} point(s): {', '.join(parts)}; "
            f"{outcome.seconds:.0f} s")
    left = [s for s in outcome.points if s.needs_profiling]
    if left:
        text += f"; {len(left)} left: run the same command again to resume"
    return text


def run_sweep(grid: Grid, store_path, ncu: str, time_limit_s: float | None = None,
              keep_dir: Path | None = None, progress: bool = True, say=None) -> SweepOutcome:
    """Profile every point the store does not hold complete, in grid order. `time_limit_s` bounds
    the whole sweep: each point gets what is left, and a point whose estimate does not fit in
    what is left is not started (a clean stop, exit 7; the next call resumes)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    found = states(grid, store_path)
    todo = [s for s in found if s.needs_profiling]
    say(f"sweep {grid.id}: {len(found)} point(s), {len(found) - len(todo)} already in the store, "
        f"{len(todo)} to profile (about {duration(_sum_estimates(todo))})")
    outcome = SweepOutcome(grid, found)
    for i, state in enumerate(todo, 1):
        elapsed = time.monotonic() - started
        left_s = None if time_limit_s is None else time_limit_s - elapsed
        if left_s is not None and (left_s <= 0 or (state.estimate_s or 0) > left_s):
            outcome.stopped = NcuError(
                f"time limit: {len(todo) - i + 1} point(s) not started ({duration(max(left_s, 0))} "
                f"left, the next needs about {duration(state.estimate_s)}); run the same command "
                "again to resume", ncu_mod.EXIT_TIME_LIMIT)
            break
        rest = _sum_estimates(todo[i - 1:])
        say(f"[{i}/{len(todo)}] {state.point.label()}: profiling as '{state.name}' "
            f"(≈{state.plan.expected_kernels or '?'} kernel(s), about {duration(state.estimate_s)}; "
            f"sweep: {duration(elapsed)} so far, about {duration(rest)} left)")
        keep = keep_dir / state.name if keep_dir else None
        try:
            result = prof.execute(state.plan, store_path, state.name, state.tags, ncu, left_s, keep,
                                  progress=progress)
        except NcuError as err:  # nothing was profiled, so nothing stored
            state.status, state.failure, state.exit_code = "failed", str(err), err.exit_code
            say(f"[{i}/{len(todo)}] {state.point.label()}: failed, nothing stored: {err}")
            if err.exit_code in STOPS_SWEEP:
                outcome.stopped = err
                break
            continue
        state.run_id = (result.run or {}).get("id")
        state.kernels, state.seconds = result.kernels, result.seconds
        if result.failure is None:
            state.status = "profiled"
            say(f"[{i}/{len(todo)}] {state.point.label()}: stored run {state.run_id}, "
                f"{result.kernels} kernel(s) in {result.seconds:.1f} s")
            continue
        state.status, state.failure = "partial", str(result.failure)
        state.exit_code = result.failure.exit_code
        say(f"[{i}/{len(todo)}] {state.point.label()}: {result.failure}; kept {result.kernels} "
            f"kernel(s) as run {state.run_id}, marked partial")
        if result.failure.exit_code in STOPS_SWEEP:
            outcome.stopped = result.failure
            break
        state.status = "failed"  # a crash is this point's end; a partial run stays for the view
    outcome.seconds = time.monotonic() - started
    return outcome


def _sum_estimates(found: list[PointState]) -> float | None:
    values = [s.estimate_s for s in found]
    return None if any(v is None for v in values) else sum(values)


def check_can_profile(grid: Grid, ncu: str | None) -> str:
    """What `smlens profile` checks before its first run: ncu, the GPU, the program."""
    if grid.program:
        from profiler.run.program import check_program
        check_program([_fill(a, grid.points()[0]) for a in grid.program])
    path = ncu_mod.find_ncu(ncu)
    ncu_mod.require_gpu()
    tp = int(grid.options.get("tp") or 1)
    if tp > 1:
        from profiler.run.distributed import require_gpus
        require_gpus(tp)
    return path



def failure_line(outcome: SweepOutcome) -> str:
    """The one line a sweep that did not finish exits with."""
    if outcome.stopped is not None:
        return f"sweep {outcome.grid.id} stopped: {outcome.stopped}"
    failed = [s for s in outcome.points if s.status == "failed"]
    return (f"sweep {outcome.grid.id}: {len(failed)} point(s) failed ("
            + "; ".join(f"{s.point.label()}: {s.failure}" for s in failed)[:300]
            + "); the others are stored; the same command profiles the failed ones again")
