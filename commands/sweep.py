"""`smlens sweep`: a grid of models x batch sizes x prompt lengths profiled, one stored run per
point (profiler/run/sweep.py), the same command resuming an interrupted sweep; then the sweep's
view (views/sweep.py) of the grid's runs, or of runs chosen from the store (--from-runs), in the
terminal, as JSON and as one HTML report (reports/sweep.py, reports/sweep_html.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from commands.common import print_report, request_values, say, store_path, working
from commands.profile import profile_metrics
from profiler.errors import BadInput, SmlensError
from profiler.ingest.stores import open_store
from profiler.option_checks import check_folder_option, check_output_file, check_positive_number, is_stdout
from profiler.run import sweep as sw
from reports import sweep as sweep_report
from reports import sweep_html
from reports.formats import Format
from reports.html import write_report
from reports.sweep_text import mixed_text
from views import sweep as sweep_view
from views.registry import compute_views, input_columns

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
    from_runs: tuple[str, ...] = ()     # run references or tag:KEY=VALUE: a sweep of stored runs
    allow_mixed: bool = False           # runs of different devices or metric sets
    output: Optional[Path] = None       # the HTML report
    phase: Optional[str] = None         # the terminal table's rows
    role: Optional[str] = None
    plan: bool = False
    quiet: bool = False
    format: Format = Format.table

    @classmethod
    def from_options(cls, options: Mapping[str, object], given: Sequence[str]) -> "SweepRequest":
        return cls(**request_values(cls, options), given={k: options[k] for k in given if k in WORKLOAD_OPTIONS})


def grid_of(request: SweepRequest) -> sw.Grid:
    return sw.make_grid(request.model, request.batch, request.prompt, dict(request.given),
                        profile_metrics(request.views, request.metrics), list(request.program) or None,
                        cache_control=request.cache_control, graph_profiling=request.graph_profiling)


def sweep(request: SweepRequest) -> dict:
    """Plan (--plan: the grid, what the store holds, kernels and time), run the grid and show its
    sweep, or show the sweep of stored runs (--from-runs); its JSON document. A sweep that did not
    finish shows what it has, then raises its one line and exit code."""
    check_positive_number(request.time_limit, "--time-limit")
    if request.keep:
        check_folder_option(request.keep, "--keep")
    if request.output:
        check_output_file(request.output, "--output", store_path(request.store), stdout_ok=True)
    if request.from_runs:
        if request.program or request.plan:
            raise BadInput("--from-runs makes a sweep of stored runs: give it without a grid to "
                           "profile (a program, --plan)")
        the_store = open_store(store_path(request.store), create=False)
        return show(request, stored_points(the_store, request.from_runs), the_store)
    grid = grid_of(request)
    if request.plan:
        summary = sw.plan_summary(grid, sw.states(grid, store_path(request.store)))
        say(json.dumps(summary, indent=2) if request.format == Format.json else sw.format_plan(summary))
        return summary
    outcome = sw.run_sweep(grid, store_path(request.store), sw.check_can_profile(grid, request.ncu),
                           request.time_limit, request.keep, progress=not request.quiet)
    say(sw.summary_line(outcome), err=True)
    document = {"run": outcome.to_dict()}
    if any(s.run_id for s in outcome.points):
        the_store = open_store(store_path(request.store), create=False)
        document.update(show(request, grid_points(outcome), the_store, grid.id, quiet_json=True))
    if request.format == Format.json:
        say(json.dumps(document, indent=2, allow_nan=False))
    if outcome.exit_code:
        raise SmlensError(sw.failure_line(outcome), outcome.exit_code)
    return document


# A point's status in the view, from its state in the grid's run.
_VIEW_STATUS = {"stored": sweep_view.COMPLETE, "reused": sweep_view.COMPLETE,
                "profiled": sweep_view.COMPLETE, "partial": sweep_view.PARTIAL,
                "failed": sweep_view.PARTIAL, "to do": sweep_view.MISSING}


def grid_points(outcome: sw.SweepOutcome) -> list[dict]:
    """Each grid point with its run (the partial one it has, if that is all) and its status."""
    points = []
    for state in outcome.points:
        run_id = state.run_id or (state.superseded[-1] if state.superseded else None)
        status = _VIEW_STATUS[state.status] if run_id else sweep_view.MISSING
        note = (state.failure or "") if status != sweep_view.COMPLETE else ""
        if status == sweep_view.MISSING and not note:
            note = "not profiled yet"
        points.append({"coords": state.point.coords(), "run_id": run_id, "status": status,
                       "note": note[:160]})
    return points


def _tags(row: dict) -> dict:
    try:
        return json.loads(row.get("tags") or "{}")
    except ValueError:
        return {}


def stored_points(the_store, refs) -> list[dict]:
    """The runs `refs` name (an id, a name, `tag:KEY=VALUE`), each a point by its model, batch
    and prompt tags; of several runs at one point, the newest complete one."""
    runs = the_store.runs()
    chosen: list[dict] = []
    for ref in refs:
        if ref.startswith("tag:"):
            key, _, value = ref[4:].partition("=")
            if not key or not _:
                raise BadInput(f"--from-runs {ref}: expected tag:KEY=VALUE")
            found = [r for r in runs.to_dict("records") if _tags(r).get(key) == value]
            if not found:
                raise BadInput(f"--from-runs {ref}: no run in {the_store.path} has that tag (see `smlens runs`)")
            chosen += found
        else:
            run_id = the_store.resolve(ref, runs=runs)
            chosen += [r for r in runs.to_dict("records") if r["id"] == run_id]
    by_point: dict[tuple, dict] = {}
    for row in sorted({r["id"]: r for r in chosen}.values(), key=lambda r: str(r.get("created"))):
        tags = _tags(row)
        if not tags.get("batch") or not tags.get("prompt") or "," in tags["batch"] + tags["prompt"]:
            raise BadInput(f"run {row['id']} ('{row['name']}') has no single batch and prompt tags, so it "
                           "is no point of a sweep: tag it (smlens ingest --tag batch=N --tag prompt=N) "
                           "or leave it out")
        coords = {"model": tags.get("model"), "batch": int(tags["batch"]), "prompt": int(tags["prompt"])}
        key = tuple(coords.values())
        partial = bool(row.get("partial"))
        if key in by_point and partial and by_point[key]["status"] == sweep_view.COMPLETE:
            continue  # a complete run of the point stands; the cut-short one it redid does not
        by_point[key] = {"coords": coords, "run_id": row["id"],
                         "status": sweep_view.PARTIAL if partial else sweep_view.COMPLETE,
                         "note": "cut short (partial run)" if partial else ""}
    return list(by_point.values())


def identity(the_store, row: dict, result) -> dict:
    """What a run was measured on and with: its device (the run's record, else the device its
    views read from the capture) and its metric set."""
    import hashlib
    metrics = sorted(the_store.units(row["id"]))
    devices = result.devices if result is not None else None
    first = devices.iloc[0] if devices is not None and len(devices) else {}
    return {"device": row.get("device_name") or first.get("name") or first.get("device"),
            "cc": row.get("cc") or first.get("cc"),
            "metrics": hashlib.sha256(",".join(metrics).encode()).hexdigest()[:10] + f" ({len(metrics)} metrics)"}


def analyse(points: list[dict], the_store, allow_mixed: bool = False) -> sweep_view.SweepResult:
    """The views of each point's run, and the sweep over them. Runs of different devices or
    metric sets are refused unless `allow_mixed`."""
    rows = {r["id"]: r for r in the_store.runs().to_dict("records")}
    results = {p["run_id"]: compute_views(the_store.kernels(p["run_id"], columns=input_columns()))
               for p in points if p["run_id"]}
    if not allow_mixed:
        problem = sweep_view.mixed({run: identity(the_store, rows[run], result) for run, result in results.items()})
        if problem:
            raise BadInput(f"{mixed_text(problem)}: a sweep compares like with like; --allow-mixed shows it anyway")
    return sweep_view.sweep([sweep_view.SweepPoint(p["coords"], p["run_id"], rows.get(p["run_id"], {}).get("name"),
                                                   p["status"], results.get(p["run_id"]), p["note"])
                             for p in points])


def show(request: SweepRequest, points: list[dict], the_store, sweep_id: Optional[str] = None,
         quiet_json: bool = False) -> dict:
    """The sweep's view in the terminal (or its JSON document) and its report (--output)."""
    with working(f"computing the views of {len(points)} point(s)"):
        result = analyse(points, the_store, request.allow_mixed)
    document = {"sweep_view": sweep_report.sweep_json(result, sweep_id)}
    if request.output:
        size = write_text_or_stdout(request.output, sweep_html.render_sweep(result, sweep_id))
        document["report"] = {"path": str(request.output), "bytes": size}
        if not is_stdout(request.output):
            say(f"wrote {request.output} ({size / 1e6:.1f} MB): open it in a browser", err=True)
    if request.format == Format.json and not quiet_json:
        say(json.dumps(document, indent=2, allow_nan=False))
    elif request.format != Format.json and not (request.output and is_stdout(request.output)):
        sweep_report.print_sweep(result, sweep_id, phase=request.phase, role=request.role)
    return document


def write_text_or_stdout(path: Path, text: str) -> int:
    """The report to `path`, atomically, or to standard output alone (`-o -`)."""
    try:
        return print_report(text) if is_stdout(path) else write_report(path, text)
    except OSError as err:
        raise BadInput(f"cannot write {path}: {err.strerror or err}") from None
