"""`smlens profile`: plan the ncu runs, run them with progress, export, merge, store one run.

The built-in decoder workload is profiled in up to two ncu invocations, because ncu's cache
control holds for a whole invocation: the cold prefill with caches flushed before every replay
pass (`--cache-control all`), the warm prefill and decode with caches as the program left them
(`--cache-control none`). Each invocation selects, through NVTX include filters, one layer per
phase and one decode step: identical layers and steps launch identical kernels, so they are not
replayed again (`decoder.profiled_regions`). Any other program (`-- CMD ...`) is one invocation
with the filters the user gives.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from profiler.run import distributed
from profiler.run import ncu as ncu_mod
from profiler.run import program as program_path
from profiler.errors import BadInput
from profiler.run.ncu import Invocation, NcuError
from profiler.run.plan import METRICS_PLACEHOLDER, ProfilePlan, cache_groups, workload_env
from profiler.run.options import DEFAULT_WORKLOAD, DecoderOptions, DetGemmOptions, ProgramOptions
from profiler.workloads import decoder

def parse_metrics_option(value: str | None) -> list[str] | None:
    """`--metrics a,b,c` or `--metrics @file` (one name per line, or comma-separated)."""
    if not value:
        return None
    if value.startswith("@"):
        from profiler.option_checks import read_option_file
        value = read_option_file(value[1:], "--metrics")
    names = [n.strip() for chunk in value.splitlines() for n in chunk.split(",")]
    names = [n for n in names if n and not n.startswith("#")]
    if not names:
        raise BadInput("--metrics: no metric names given")
    return names


def _workload_program(config: decoder.WorkloadConfig) -> list[str]:
    return [sys.executable, "-m", "profiler.workloads.decoder", *config.argv()]


def plan_workload(config: decoder.WorkloadConfig, metrics: list[str], dedup: bool = True,
                  cache_control: str = "auto", graph_profiling: str | None = None,
                  layer: int = 0) -> ProfilePlan:
    regions = decoder.profiled_regions(config, dedup, layer)
    invocations = []
    for label, cache, group in cache_groups(regions, cache_control):
        phases = tuple(r.phase for r in group)
        # The program runs only as far as the last phase this invocation profiles.
        program_config = decoder.WorkloadConfig(
            config.model, config.layers, config.batch, config.prompt, config.decode_steps,
            config.dtype, phases, config.seed)
        invocations.append(Invocation(
            label=label, program=_workload_program(program_config), cache_control=cache,
            nvtx_includes=[r.nvtx_include() for r in group], graph_profiling=graph_profiling,
            expected_kernels=sum(decoder.region_kernels(config, r) for r in group), phases=phases))
    expected = sum(decoder.region_kernels(config, r) for r in regions)
    skipped = sum(decoder.region_kernels(config, r) * (r.repeats - 1) for r in regions)
    m = config.model
    title = (f"{m.id}: {config.layers} layer(s), batch {config.batch}, prompt {config.prompt}, "
             f"{config.decode_steps} decode step(s), {config.dtype}")
    notes = []
    if dedup:
        notes.append(f"dedup: layer_{layer} of each phase and decode step "
                     f"{decoder.representative_decode_step(config.decode_steps)} are profiled; the "
                     "other layers and steps launch the same kernels and are not replayed")
    notes.append("expected kernel counts are estimates: a GEMM may add a split-K reduce kernel, "
                 "and other torch or library versions may launch other kernels")
    return ProfilePlan(title, invocations, metrics, expected, skipped, regions, notes)


# --- the det-gemm workload --------------------------------------------------------------------

# Kernels per GEMM call, for the plan's estimate: det launches its split-K partials and their
# fixed-order fold (M <= 16) or the x transpose and its tile kernel; cuBLAS bf16 the bf16 cast of x
# and the GEMM (maybe a split-K reduce); LayerCast the FP32 cast of W and the SGEMM.
_DET_KERNELS_PER_GEMM = {"portable": 1}


def _det_program(model: str, tokens: list[int], impl: str) -> list[str]:
    return [sys.executable, "-m", "profiler.workloads.deterministic.workload", "--model", model,
            "--tokens", ",".join(str(t) for t in tokens), "--impl", impl]


def plan_det_gemm(model: str, tokens: list[int], impl: str, metrics: list[str],
                  cache_control: str = "auto", graph_profiling: str | None = None) -> ProfilePlan:
    """One ncu run of `profiler.workloads.deterministic.workload` with one implementation: each of the
    model's four projections at each M, inside `smlens:<phase>` / `smlens:impl=<impl>` /
    `smlens:<role> M= N= K= impl=<impl>`. The include filters name the phase ranges only, so each
    case's warm-up call (compilation, library heuristics), made outside any range, is not profiled."""
    from profiler.workloads.deterministic import kernels, workload

    cases = workload.model_cases(model, tokens)
    phases = tuple(dict.fromkeys(c.phase for c in cases))
    cache = "all" if cache_control == "auto" else cache_control
    per_gemm = _DET_KERNELS_PER_GEMM.get(impl, 2)
    inv = Invocation(label=impl, program=_det_program(model, tokens, impl), cache_control=cache,
                     nvtx_includes=[f"{decoder.DOMAIN}@{phase}/" for phase in phases],
                     graph_profiling=graph_profiling, expected_kernels=per_gemm * len(cases),
                     phases=phases)
    title = (f"det-gemm {model}, M = {','.join(str(t) for t in tokens)}: {len(cases)} GEMM(s) "
             f"with {impl} = {kernels.IMPL_TITLES.get(impl, impl)}")
    notes = ["one ncu run and one stored run per implementation (tag impl=...): compare two with "
             "`smlens gate --baseline <cublas_bf16 run> --current <det run>`",
             "each case's warm-up call runs outside the NVTX ranges and is not profiled"]
    if cache == "all":
        notes.append("--cache-control all: caches flushed before every replay pass, so weights come "
                     "from DRAM as in a model whose other layers evicted them (a 4096x4096 bf16 "
                     "weight would otherwise stay in a 50 MB L2)")
    notes.append(f"expected kernel counts are estimates: about {per_gemm} kernel(s) per GEMM call")
    return ProfilePlan(title, [inv], metrics, per_gemm * len(cases), None, [], notes, variant=impl)


def det_gemm_plans(options: DetGemmOptions, metrics: list[str], cache_control: str = "auto",
                   graph_profiling: str | None = None) -> list[ProfilePlan]:
    """One plan per implementation of `--impl`."""
    from profiler.workloads.deterministic.kernels import IMPLS
    from profiler.workloads.models import get_model

    token_list = parse_int_list(options.tokens, "--tokens")
    impls = [i.strip() for i in options.impl.split(",") if i.strip()]
    known = IMPLS + ("portable",)
    bad = [i for i in impls if i not in known]
    if bad or not impls:
        raise BadInput(f"--impl {options.impl!r}: unknown {', '.join(bad) or 'empty list'}; choose "
                       f"from {', '.join(known)}")
    shape = get_model(options.model)
    for tokens in token_list:  # fp32 outputs
        shape.check_rows_fit(tokens, f"--tokens {tokens}")
    plans = []
    for one in dict.fromkeys(impls):
        plan = plan_det_gemm(shape.id, token_list, one, metrics, cache_control, graph_profiling)
        tags = {"workload": "det-gemm", "model": shape.id, "impl": one, "impls": ",".join(impls),
                "tokens": ",".join(str(t) for t in token_list)}
        plans.append(replace(plan, name=f"det-gemm-{shape.id}-{one}", tags=tags))
    return plans


# --- running ----------------------------------------------------------------------------------

@dataclass
class InvocationReport:
    label: str
    command: list[str]
    seconds: float
    kernels: int
    passes: int | None
    returncode: int | None
    log: str | None = None


@dataclass
class ProfileOutcome:
    run: dict | None
    kernels: int
    skipped_duplicates: int | None
    invocations: list[InvocationReport]
    partial: bool
    seconds: float
    failure: NcuError | None = None
    kept: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        run = self.run or {}
        return {"run_id": run.get("id"), "name": run.get("name"), "kernels": self.kernels,
                "skipped_duplicates": self.skipped_duplicates, "partial": self.partial,
                "seconds": round(self.seconds, 2),
                "failure": str(self.failure) if self.failure else None,
                "exit_code": self.failure.exit_code if self.failure else 0,
                "kept": self.kept, "notes": self.notes,
                "invocations": [{"label": i.label, "seconds": round(i.seconds, 2), "kernels": i.kernels,
                                 "passes_per_kernel": i.passes, "returncode": i.returncode,
                                 "command": i.command} for i in self.invocations]}


class _Progress:
    """A rich progress bar per invocation, driven by ncu's own `==PROF==` lines."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress = None
        self._task = None
        self._passes = ""

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("{task.fields[passes]}"), TimeElapsedColumn(),
                TextColumn("left"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False)
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False

    def start(self, inv: Invocation) -> None:
        if self._progress is not None:
            self._task = self._progress.add_task(f"{inv.label:<12}", total=inv.expected_kernels,
                                                 passes="starting")

    def events(self, events) -> None:
        if self._progress is None or self._task is None:
            return
        for event in events:
            if event.kind == "started" and event.total:
                self._progress.update(self._task, total=event.total)
            elif event.kind == "pass":
                self._progress.update(self._task, passes=f"{_short(event.kernel)} {event.percent}%")
            elif event.kind == "done":
                task = self._progress.tasks[self._task]
                if task.total is not None and task.completed + 1 > task.total:
                    self._progress.update(self._task, total=task.completed + 1)
                self._progress.update(self._task, advance=1,
                                      passes=f"{event.passes} passes" if event.passes else "")
            elif event.kind == "connected":
                self._progress.update(self._task, passes="program started")

    def finish(self) -> None:
        if self._progress is not None and self._task is not None:
            task = self._progress.tasks[self._task]
            self._progress.update(self._task, total=task.completed)


def _short(name: str | None, width: int = 28) -> str:
    name = name or "?"
    return name if len(name) <= width else name[: width - 1] + "…"


def execute(plan: ProfilePlan, store_path: Path, name: str, tags: dict, ncu: str,
            time_limit_s: float | None = None, keep_dir: Path | None = None,
            progress: bool = True) -> ProfileOutcome:
    """Run the plan's invocations, export and merge what they profiled, ingest it as one run.

    A failure (interrupt, time limit, crash) stops the remaining invocations; what was profiled is
    still stored, marked partial, and the failure is raised after that with the run id.
    """
    from profiler.ingest.merge import merge_raw_exports
    from profiler.ingest.stores import open_store

    store = open_store(store_path)  # a bad --store fails now, before minutes of profiling
    started = time.monotonic()
    deadline = started + time_limit_s if time_limit_s else None
    workdir = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="smlens-profile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    version = ncu_mod.ncu_version(ncu)
    if ncu_mod.version_warning(version):
        print(f"smlens: note: {ncu_mod.version_warning(version)}", file=sys.stderr)
    reports: list[InvocationReport] = []
    notes: list[str] = []
    csvs: list[Path] = []
    failure: NcuError | None = None
    try:
        with _Progress(progress) as bar:
            for inv in plan.invocations:
                stem = workdir / f"{_safe(name)}-{inv.report_stem()}"
                cmd = ncu_mod.build_command(ncu, plan.metrics, inv, stem)
                bar.start(inv)
                status_dir = workdir / f"{program_path.STATUS_DIR}-{inv.report_stem()}"
                result = ncu_mod.run_ncu(cmd, on_events=bar.events, deadline=deadline,
                                         log_path=Path(f"{stem}.log"),
                                         env=workload_env({**inv.env, "SMLENS_ANNOTATE_DIR": str(status_dir)}))
                bar.finish()
                reports.append(InvocationReport(inv.label, cmd, result.seconds,
                                                result.reader.kernels_done, result.reader.passes_last,
                                                result.returncode, str(result.log_path)))
                failure = ncu_mod.diagnose(result, plan.subject)
                report = Path(f"{stem}.ncu-rep")
                if report.is_file():
                    csvs.append(_export(ncu, report))
                if failure is not None:
                    break
        merged = workdir / f"{_safe(name)}.csv"
        try:
            count = merge_raw_exports(csvs, merged)
        except BadInput as err:  # not expected (one metric list, base units): keep what was profiled
            keep_dir = workdir
            raise NcuError(f"{err}; the reports are kept in {workdir}", ncu_mod.EXIT_NCU_FAILED) from None
        statuses = program_path.read_status(workdir) if plan.annotated else []
        if count == 0:
            if failure is not None:
                raise NcuError(f"{failure}; nothing was profiled, so no run was stored",
                               failure.exit_code)
            if plan.annotated and plan.regions:  # smlens's own filters: the annotation says why
                raise NcuError(program_path.nothing_profiled(statuses, plan),
                               ncu_mod.EXIT_NOTHING_PROFILED)
            raise NcuError("ncu profiled no kernel: the NVTX filters or --launch-* options matched "
                           "nothing (is the program annotated? see `smlens profile --plan`)",
                           ncu_mod.EXIT_NOTHING_PROFILED)
        if plan.after_merge is not None:
            tags = {**tags, **plan.after_merge(merged, failure is not None, deadline)}
        if plan.annotated and plan.regions:
            program_path.update_repeats(plan, statuses)
            notes += program_path.missing_phases(statuses, plan) if failure is None else []
            notes += program_path.unlike_layers(statuses, plan)
        # graph nodes lose the role ranges of capture: an eager step of the same phase names them
        graph_nodes = any(inv.graph_profiling == "node" for inv in plan.invocations)
        row, _new = store.ingest(merged, name=name, tags=tags, ncu_version=version,
                                 partial=failure is not None, roles_from_order=graph_nodes)
        skipped = _skipped(plan, store, row["id"])
        outcome = ProfileOutcome(row, count, skipped, reports, failure is not None,
                                 time.monotonic() - started, failure,
                                 str(workdir) if keep_dir else None, notes)
    finally:
        if keep_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return outcome


def _export(ncu: str, report: Path) -> Path:
    import subprocess
    out = report.with_suffix(".csv")
    with open(out, "w", encoding="utf-8") as handle:
        proc = subprocess.run(ncu_mod.export_command(ncu, report), stdout=handle,
                              stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise NcuError(f"ncu could not export {report.name}: "
                       f"{(proc.stderr or '').strip().splitlines()[-1:] or 'no message'}",
                       ncu_mod.EXIT_NCU_FAILED)
    return out


def _skipped(plan: ProfilePlan, store, run_id: str) -> int | None:
    """Kernels not replayed because an identical layer or step was: profiled per phase times the
    repeats each profiled region stands for, less itself."""
    if not plan.regions:
        return None
    phases = store.kernels(run_id, columns=["phase"])["phase"].value_counts()
    return int(sum(int(phases.get(r.phase, 0)) * (r.repeats - 1) for r in plan.regions))


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80] or "run"


def format_plan(plan: ProfilePlan, ncu: str = "ncu", width: int = 100) -> str:
    import textwrap
    lines = [f"plan: {plan.title}"]
    for i, (inv, cmd) in enumerate(zip(plan.invocations, plan.commands(ncu)), 1):
        expected = f"≈{inv.expected_kernels}" if inv.expected_kernels is not None else "unknown"
        lines.append(f"ncu run {i} '{inv.label}': --cache-control {inv.cache_control}, "
                     f"{expected} kernel(s)")
        lines.append("  " + shlex.join(cmd))
        if inv.env:
            lines.append("  the program's environment adds " + " ".join(
                f"{key}={value}" for key, value in inv.env.items()))
    if plan.expected_kernels is not None:
        lines.append(f"expected: ≈{plan.expected_kernels} kernel(s) profiled"
                     + (f", ≈{plan.skipped_estimate} skipped as duplicates"
                        if plan.skipped_estimate is not None else ""))
    else:
        lines.append("expected: unknown (depends on the program)")
    for note in plan.notes:
        lines.append(f"note: {note}")
    lines.append(f"{METRICS_PLACEHOLDER} = {len(plan.metrics)} metric(s):")
    lines += textwrap.wrap(", ".join(plan.metrics), width=width, break_on_hyphens=False,
                           initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines)


def plan_json(plans: list[ProfilePlan], ncu: str = "ncu") -> str:
    return json.dumps([p.to_dict(ncu) for p in plans], indent=2)


# --- the command ------------------------------------------------------------------------------

def parse_int_list(value: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in str(value).replace(" ", "").split(",") if v]
    except ValueError:
        raise BadInput(f"{option} {value!r}: expected integers separated by commas, e.g. 1,8,32") from None
    if not values or min(values) < 1:
        raise BadInput(f"{option} {value!r}: expected integers of 1 or more")
    return values


def decoder_plans(options: DecoderOptions, metrics: list[str], cache_control: str = "auto",
                  graph_profiling: str | None = None) -> list[ProfilePlan]:
    """One plan per batch size and prompt length."""
    from profiler.workloads.models import get_model

    shape = get_model(options.model)
    phases = tuple(p.strip() for p in options.phases.split(",") if p.strip())
    plans = []
    for b in parse_int_list(options.batch, "--batch"):
        for p in parse_int_list(options.prompt, "--prompt"):
            config = decoder.WorkloadConfig(shape, options.layers, b, p, options.decode_steps,
                                            options.dtype, phases)
            tags = {"workload": "decoder", "model": shape.id, "layers": str(options.layers),
                    "batch": str(b), "prompt": str(p), "decode_steps": str(options.decode_steps),
                    "dtype": options.dtype, "phases": ",".join(phases),
                    "dedup": str(options.dedup).lower()}
            if options.tp > 1:
                if options.layer:
                    raise BadInput("--layer: with --tp the first layer is profiled")
                plan = distributed.plan_tp(plan_workload(config, metrics, options.dedup, cache_control,
                                                         graph_profiling), config, options.tp, options.dedup)
                plans.append(replace(plan, name=f"{shape.id}-tp{options.tp}-b{b}-p{p}",
                                     tags={**tags, "tp": str(options.tp)}))
                continue
            plan = plan_workload(config, metrics, options.dedup, cache_control, graph_profiling,
                                 options.layer)
            # one rank's slice (`<model>/tp<N>`) is named <model>-rank-tp<N>: no folder in a name
            plans.append(replace(plan, name=f"{shape.id.replace('/', '-rank-')}-b{b}-p{p}", tags=tags))
    return plans


def program_plans(options: ProgramOptions, metrics: list[str], cache_control: str = "auto",
                  graph_profiling: str | None = None) -> list[ProfilePlan]:
    """One plan: the program annotated and profiled a layer per phase (profiler/run/program.py)."""
    program = list(options.program)
    plan = program_path.plan_program(program, metrics, options, cache_control, graph_profiling)
    tags = {"workload": "command", "command": shlex.join(program),
            "annotate": str(options.annotate).lower()}
    if plan.regions:
        tags.update(dedup=str(options.dedup).lower(), layer=str(options.layer))
    if options.tp > 1:
        return [replace(distributed.plan_program(plan, options.tp),
                        name=f"{program_name(program)}-tp{options.tp}", tags={**tags, "tp": str(options.tp)})]
    return [replace(plan, name=program_name(program), tags=tags)]


@dataclass(frozen=True)
class Workload:
    options: type         # its options dataclass (profiler/run/options.py): what it takes
    plans: Callable       # (options, metrics, cache_control, graph_profiling) -> [ProfilePlan]
    chosen_by: str        # how a user picks it, for messages


# `--workload NAME`; a new workload is a dataclass in options.py, a planner and one line here.
WORKLOADS = {
    "decoder": Workload(DecoderOptions, decoder_plans, "--workload decoder"),
    "det-gemm": Workload(DetGemmOptions, det_gemm_plans, "--workload det-gemm"),
}
PROGRAM = Workload(ProgramOptions, program_plans, "a program given after `--`")


def workload_options(workload: str = DEFAULT_WORKLOAD, program: list[str] | None = None,
                     given: dict | None = None):
    """The options dataclass of the chosen workload (`workload`, or the program after `--`) from
    the options the user gave (`given`, by parameter name; the workloads' defaults fill the rest).
    An option that only other workloads take is refused."""
    given = given or {}
    if workload not in WORKLOADS:
        raise BadInput(f"--workload {workload!r}: {' or '.join(WORKLOADS)}")
    if program and "workload" in given:
        raise BadInput("--workload names a built-in workload; a program after `--` is profiled as "
                       "it is: give one or the other")
    chosen = PROGRAM if program else WORKLOADS[workload]
    values = {"program": tuple(program)} if program else {}
    for name, value in given.items():
        owners = [w for w in _every_workload() if name in {f.name for f in fields(w.options)}]
        if not owners or name == "program":
            continue  # an option of the command (--views, --name, ...), not of a workload
        if chosen not in owners:
            flag = "--" + ("no-" if value is False else "") + name.replace("_", "-")
            raise BadInput(f"{flag} is for {' or '.join(w.chosen_by for w in owners)}")
        values[name] = tuple(value) if isinstance(value, (list, tuple)) else value
    return chosen.options(**values)


def _every_workload() -> tuple[Workload, ...]:
    return (*WORKLOADS.values(), PROGRAM)


def build_plans(options, metrics: list[str], cache_control: str = "auto",
                graph_profiling: str | None = None) -> list[ProfilePlan]:
    """The plans of the workload `options` belong to (see `workload_options`)."""
    if cache_control not in ("auto", "all", "none"):
        raise BadInput(f"--cache-control {cache_control!r}: auto, all or none")
    if graph_profiling not in (None, "node", "graph"):
        raise BadInput(f"--graph-profiling {graph_profiling!r}: node or graph")
    if getattr(options, "tp", 1) < 1:
        raise BadInput(f"--tp must be 1 or more (got {options.tp})")
    workload = next(w for w in _every_workload() if isinstance(options, w.options))
    return workload.plans(options, metrics, cache_control, graph_profiling)


def planned_runs(plans: list[ProfilePlan], name: str | None = None, repeat: int = 1,
                 tags: dict | None = None) -> list[tuple[ProfilePlan, str, dict]]:
    """(plan, run name, run tags) of each run to make, in order. `--name` names the run of a single
    plan; with several each adds what tells its plan apart; repeats add `-r<i>` and a repeat tag."""
    runs = []
    for plan in plans:
        base = (plan.name if not name else name if len(plans) == 1 else
                f"{name}-{plan.variant or plan.name}")
        for i in range(1, repeat + 1):
            run_tags = {**plan.tags, **({"repeat": str(i)} if repeat > 1 else {}), **(tags or {})}
            runs.append((plan, f"{base}-r{i}" if repeat > 1 else base, run_tags))
    return runs


def program_name(program: list[str]) -> str:
    """A run name for a program: `python -m pkg.mod` -> mod, `python app.py` -> app, else its name."""
    first = Path(program[0]).name
    if first.startswith("python") and len(program) > 1:
        if program[1] == "-m" and len(program) > 2:
            return program[2].rsplit(".", 1)[-1]
        if not program[1].startswith("-"):
            return Path(program[1]).stem
    return Path(first).stem or "program"


def summary_line(outcome: ProfileOutcome) -> str:
    run = outcome.run or {}
    runs = len(outcome.invocations)
    text = (f"stored run {run.get('id')} '{run.get('name')}': {outcome.kernels} kernel(s) profiled in "
            f"{runs} ncu run(s), {outcome.seconds:.1f} s")
    if outcome.skipped_duplicates is not None:
        text += f"; {outcome.skipped_duplicates} skipped as duplicates of profiled layers/steps"
    if outcome.partial:
        text += " (partial)"
    if outcome.kept:
        text += f"; reports and logs in {outcome.kept}"
    return text
