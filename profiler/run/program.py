"""`smlens profile -- CMD`: profiling a program nobody annotated.

The program runs with smlens's annotation (profiler/run/annotate) injected at start-up: its model
forwards become `cold_prefill` / `warm_prefill` / `decode/step_<j>` ranges, its decoder layers
`layer_<i>`, its projections and attention role ranges with their shapes. So the program path plans
as the built-in decoder does: one layer per phase (`--layer`, default 0) and one decode step, through
ncu's NVTX include filters, the cold prefill in its own ncu run with caches flushed. Only forwards
are profiled unless `--include setup`. With `--no-annotate`, or with the user's own filters
(`--nvtx-include`, `--launch-*`, `--kernel-name`), ncu gets exactly what the user gave.

What the annotation saw (torch imported? forwards per phase? layers?) comes back as one small JSON
file per process (`annotate-<pid>.json`), which turns "ncu profiled nothing" into a reason.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from profiler.errors import BadInput
from profiler.run import annotate
from profiler.run.annotate.runtime import STOP_ENV
from profiler.run.ncu import Invocation
from profiler.run.plan import ProfilePlan, cache_groups
from profiler.workloads import decoder

INCLUDES = ("setup",)
# the decode step profiled: the second, so the first call of the decode shapes stays out
DECODE_STEP = decoder.representative_decode_step(2)
STATUS_DIR = "annotate"


def check_program(program: list[str]) -> None:
    """A program that cannot start is bad input, said before ncu runs (not by --plan: a plan may
    be made on another machine)."""
    first = program[0]
    if shutil.which(first) is None and not Path(first).is_file():
        raise BadInput(f"program {first!r} not found: give a command on PATH or a path to it")
    if Path(first).name.startswith("python") and len(program) > 1:
        script = program[1]
        if not script.startswith("-") and not Path(script).is_file():
            raise BadInput(f"{script}: no such Python script (the program after `--`)")


def parse_includes(values: list[str] | None) -> set[str]:
    found = {v.strip() for value in values or [] for v in value.split(",") if v.strip()}
    unknown = found - set(INCLUDES)
    if unknown:
        raise BadInput(f"--include {','.join(sorted(unknown))}: choose from {', '.join(INCLUDES)}")
    return found


def regions(phases: tuple, dedup: bool, layer: int, graph_nodes: bool) -> list[decoder.Region]:
    """The stretches ncu profiles: `layer` of each prefill and of decode step 1. A decode step
    replayed from a CUDA graph has no layer ranges, so with graph nodes it is profiled whole.
    How many stretches each stands for is known only after the run (`update_repeats`)."""
    out = []
    for phase in phases:
        if not dedup or (phase == "decode" and graph_nodes):
            out.append(decoder.Region(phase, (phase,), 1))
        elif phase == "decode":
            out.append(decoder.Region(phase, (phase, decoder.step_range(DECODE_STEP),
                                              decoder.layer_range(layer)), 1))
        else:
            out.append(decoder.Region(phase, (phase, decoder.layer_range(layer)), 1))
    return out


def plan_program(program: list[str], metrics: list[str], options, cache_control: str,
                 graph_profiling: str | None):
    """The ProfilePlan of a program (`options`: profiler/run/options.ProgramOptions). With the
    user's own filters (--nvtx-include, --launch-*, --kernel-name) or --no-annotate, one ncu run
    with exactly those."""
    if not program:
        raise BadInput("no program to profile: give one after `--`, e.g. smlens profile -- python app.py")
    phases = tuple(p.strip() for p in options.phases.split(",") if p.strip())
    unknown = [p for p in phases if p not in decoder.PHASES]
    if unknown or not phases:
        raise BadInput(f"--phases {options.phases!r}: choose from {', '.join(decoder.PHASES)}")
    if options.layer < 0:
        raise BadInput(f"--layer {options.layer}: layers are numbered from 0")
    includes = parse_includes(options.include)
    if "setup" in includes and not options.annotate:
        raise BadInput("--include setup labels what the annotation finds outside forwards: "
                       "drop --no-annotate")
    title = shlex.join(program)
    env = {"PYTHONPATH": str(annotate.BOOT_DIR), **annotate.compile_caches(dict(os.environ))} if options.annotate else {}
    if "setup" in includes:
        env["SMLENS_ANNOTATE_SETUP"] = "1"
    own = bool(options.nvtx_include or options.launch_skip or options.launch_count
               or options.kernel_name)
    if own or not options.annotate:
        cache = "all" if cache_control == "auto" else cache_control
        inv = Invocation(label="program", program=list(program), cache_control=cache,
                         nvtx_includes=list(options.nvtx_include), graph_profiling=graph_profiling,
                         launch_skip=options.launch_skip, launch_count=options.launch_count,
                         kernel_name=options.kernel_name, expected_kernels=options.launch_count,
                         env=env)
        notes = _notes(options.annotate, graph_profiling, own=True)
        if not own:
            notes.append("no --nvtx-include or --launch-count: every kernel of the program is profiled")
        return ProfilePlan(title, [inv], metrics, options.launch_count, None, [], notes,
                           annotated=options.annotate, subject="the program")
    layer, dedup = options.layer, options.dedup
    graph_nodes = graph_profiling == "node"
    chosen = regions(phases, dedup, layer, graph_nodes)
    setup_filter = [f"{decoder.DOMAIN}@setup/"] if "setup" in includes else []
    invocations = []
    for label, cache, group in cache_groups(chosen, cache_control):
        setup_here = setup_filter if not invocations else []
        stop = None if setup_here or options.tp > 1 else stop_after(group)
        invocations.append(Invocation(label=label, program=list(program), cache_control=cache,
                                      nvtx_includes=[r.nvtx_include() for r in group] + setup_here,
                                      graph_profiling=graph_profiling,
                                      phases=tuple(r.phase for r in group),
                                      env={**env, STOP_ENV: stop} if stop else env))
    notes = _notes(True, graph_profiling, own=False)
    if dedup:
        notes.append(f"dedup: layer_{layer} of each phase and decode step {DECODE_STEP} are profiled "
                     "(--layer N for another layer, --no-dedup for all); the other layers and steps "
                     "launch the same kernels and are not replayed")
    if len(invocations) > 1:
        notes.append("the program runs twice: the cold prefill with caches flushed before every "
                     "replay pass (--cache-control all), then the warm prefill and decode with caches "
                     "as the program left them")
    notes.append("setup (model construction, weight loading, tokenisation, sampling) is profiled and "
                 "labelled phase `setup`" if "setup" in includes else
                 "only model forwards are profiled: construction, weight loading, tokenisation and "
                 "sampling are not (--include setup keeps them, labelled phase `setup`)")
    if any(STOP_ENV in inv.env for inv in invocations):
        notes.append("each ncu run ends the program (exit 0, its teardown skipped) once the last forward "
                     f"it profiles has run ({STOP_ENV} in its environment): the first warm prefill "
                     f"and decode step {DECODE_STEP} stand for all, so nothing after them would be "
                     "profiled; the skipped estimate counts the decode steps run until then")
    notes.append("warm_prefill needs a second prefill forward in the process (a second generate "
                 "call, or a warm-up request first); decode step "
                 f"{DECODE_STEP} needs two one-token forwards")
    return ProfilePlan(title, invocations, metrics, None, None, chosen, notes, annotated=True,
                       subject="the program")


def stop_after(group: list[decoder.Region]) -> str | None:
    """SMLENS_STOP_AFTER for an ncu run profiling `group`: the forwards after which its filters
    match nothing more (the cold prefill is the process's first prefill, a decode region one step),
    or None when a region takes a whole phase (--no-dedup, graph decode)."""
    if any(len(r.ranges) == 1 for r in group):
        return None
    return ",".join(f"decode:{DECODE_STEP}" if r.phase == "decode" else r.phase for r in group)


COMPILED_NOTE = (
    "a forward run through torch.compile gets its layer, block and role ranges from inductor's record "
    "of the modules each generated kernel came from (role_source compiled; the compilers' caches are "
    "smlens's own, under ~/.cache/smlens or SMLENS_CACHE_DIR: the first run compiles); a fused "
    "kernel spanning roles is elementwise. Kernels replayed from a CUDA graph (mode=\"reduce-overhead\", "
    "Hugging Face's static cache) keep only their phase: profile them with --graph-profiling node")


def _notes(annotated: bool, graph_profiling: str | None, own: bool) -> list[str]:
    notes = []
    if annotated:
        notes.append("annotation: torch module hooks push NVTX ranges (domain smlens): a model forward "
                     "feeding > 1 new token per sequence is a prefill (the first cold, later ones warm), "
                     "1 token is a decode step; layers from `model.layers.N`-style paths; roles from "
                     "module names (views/vocabulary.py MODULE_ROLES); GEMM M N K and attention shapes "
                     "from the tensors; other kernels get the kernel-name classifier's role")
        notes.append(COMPILED_NOTE)
    else:
        notes.append("roles come from the program's NVTX ranges, else the kernel-name classifier")
    if graph_profiling == "node":
        notes.append("--graph-profiling node: kernels replayed from a CUDA graph keep only the NVTX "
                     "ranges open at replay (the annotation opens the captured forward's phase and a "
                     "decode step around each replay); their roles come from an eager step of the same "
                     "phase run with role ranges, matched in launch order, else from the kernel-name "
                     "classifier" + ("; decode steps are profiled whole (a replay has no layer ranges)"
                                     if annotated and not own else ""))
    return notes


# --- after the run -------------------------------------------------------------------------------

def read_status(workdir: Path) -> list[dict]:
    """What the annotation wrote, one dict per annotated process of every ncu run."""
    found = []
    for path in sorted(Path(workdir).glob(f"{STATUS_DIR}-*/annotate-*.json")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found


def update_repeats(plan, statuses: list[dict]) -> None:
    """Each profiled region stands for every layer of its phase (and every decode step), as the
    annotation counted them in the run that profiled it."""
    layers = max((m.get("layers", 0) for s in statuses for m in s.get("models", [])), default=0)
    steps = max((s.get("forwards", {}).get("decode", 0) for s in statuses), default=0)
    if not layers:
        return
    for index, region in enumerate(plan.regions):
        if len(region.ranges) == 1:
            continue
        repeats = layers * (steps if region.phase == "decode" else 1)
        plan.regions[index] = decoder.Region(region.phase, region.ranges, max(repeats, 1))


def nothing_profiled(statuses: list[dict], plan) -> str:
    """Why ncu matched no kernel, from what the annotation saw."""
    filters = ", ".join(f for inv in plan.invocations for f in inv.nvtx_includes)
    if not statuses:
        return ("the program never started Python's annotation (is it a Python program started by "
                "`python ...`?); profile it with --no-annotate and your own --nvtx-include")
    if not any(s.get("torch_imported") for s in statuses):
        return ("the program never imported torch: smlens annotates PyTorch programs (--no-annotate "
                "profiles any CUDA program, with your own --nvtx-include ranges)")
    with_torch = [s for s in statuses if s.get("torch_imported")]
    if not any(s.get("nvtx_package", True) for s in with_torch):
        return ("the program's Python has no `nvtx` package, so no range could be pushed: "
                "pip install nvtx into the Python that runs the program")
    if not any(s.get("nvtx_tool") for s in with_torch):
        return ("no NVTX tool was attached to the program, so it ran unannotated (ncu attaches one: "
                "is `ncu` a wrapper that starts the program some other way?)")
    if any(s.get("error") for s in statuses):
        error = next(s["error"] for s in statuses if s.get("error"))
        return f"the annotation stopped on an error ({error}); --no-annotate profiles without it"
    unranged = _unranged_in_layer_filters(statuses, plan)
    if unranged:
        return f"ncu matched no kernel for {filters}: {unranged}"
    if not any(s.get("models") for s in statuses):
        return ("the program imported torch but never called a model: no module that owns decoder "
                "layers (`model.layers.N`, `transformer.h.N`) ran a forward")
    forwards = {}
    for status in statuses:
        for phase, count in status.get("forwards", {}).items():
            forwards[phase] = max(forwards.get(phase, 0), count)
    layers = max(m.get("layers", 0) for s in statuses for m in s.get("models", []))
    seen = ", ".join(f"{count} {phase}" for phase, count in forwards.items() if count) or "no forward"
    return (f"ncu matched no kernel for {filters}: the program ran {seen} forward(s) of a model with "
            f"{layers} layer(s) (--layer picks 0 to {max(layers - 1, 0)}; --no-dedup profiles every "
            "layer and step)")


def _unranged_in_layer_filters(statuses: list[dict], plan) -> str:
    """Why forwards of phases the plan filters by layer had no layer ranges, or '': CUDA graphs
    replayed inside them, or compiled forwards where the compiled code could not be annotated."""
    layered = {r.phase for r in plan.regions if len(r.ranges) > 1}

    def counted(key: str, only=lambda status: True) -> str:
        counts = {}
        for status in filter(only, statuses):
            for phase, count in (status.get(key) or {}).items():
                if phase in layered and count:
                    counts[phase] = max(counts.get(phase, 0), count)
        return ", ".join(f"{count} {phase}" for phase, count in counts.items())

    replays = counted("graph_replays")
    if replays:
        return (f"the program replayed CUDA graphs in {replays} forward(s) (torch.compile's "
                "mode=\"reduce-overhead\", Hugging Face's static cache): a replay has no layer "
                "ranges; --graph-profiling node profiles those phases whole, their kernels named "
                "after the graph's eager warm-up step")
    compiled = counted("compiled_forwards", lambda s: s.get("compiled_annotation") not in (None, "on"))
    if compiled:
        why = next(s["compiled_annotation"] for s in statuses if s.get("compiled_annotation") not in (None, "on"))
        return (f"{compiled} forward(s) ran compiled (torch.compile) and the compiled code could not "
                f"be annotated ({why}): no layer ranges; --no-dedup profiles whole phases (roles "
                "from kernel names)")
    return ""


def unlike_layers(statuses: list[dict], plan) -> list[str]:
    """Notes for models whose decoder layers are not all alike (the annotation's `layer_kinds`:
    dense and mixture-of-experts layers, sliding-window and global attention): the one layer
    dedup profiles stands for the layers of its own kind only."""
    profiled = {int(r) for region in plan.regions for r in
                (name[len("layer_"):] for name in region.ranges if name.startswith("layer_")) if r.isdigit()}
    if not profiled:
        return []
    notes = []
    for status in statuses:
        for model in status.get("models", []):
            kinds = model.get("layer_kinds") or []
            missed = [kind for kind in kinds if not profiled & set(kind)]
            if len(kinds) < 2 or not missed:
                continue
            note = (f"{model.get('class', 'the model')}'s decoder layers are of {len(kinds)} kinds "
                    f"(layers {'; '.join(_index_list(kind) for kind in kinds)}): the profiled layer "
                    f"stands for its own kind only, and layers {'; '.join(_index_list(k) for k in missed)} "
                    f"may run other kernels: --layer {missed[0][0]} profiles one of them, --no-dedup all")
            if note not in notes:
                notes.append(note)
    return notes


def _index_list(indices: list[int]) -> str:
    """0-2, 5, 7-9; an evenly spaced list as 1, 3, ..., 41."""
    if len(indices) > 2:
        steps = {b - a for a, b in zip(indices, indices[1:])}
        if len(steps) == 1 and steps != {1}:
            return f"{indices[0]}, {indices[1]}, ..., {indices[-1]}"
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def missing_phases(statuses: list[dict], plan) -> list[str]:
    """Notes for phases the plan wanted and the program never ran."""
    notes = []
    forwards = {}
    for status in statuses:
        for phase, count in status.get("forwards", {}).items():
            forwards[phase] = max(forwards.get(phase, 0), count)
    unranged = _unranged_in_layer_filters(statuses, plan)
    if unranged:
        notes.append(unranged)
    for region in plan.regions:
        if region.phase == "decode" and len(region.ranges) > 1 and forwards.get("decode", 0) <= DECODE_STEP:
            notes.append(f"decode step {DECODE_STEP} never ran (the program ran "
                         f"{forwards.get('decode', 0)} one-token forward(s)): no decode profiled")
        elif region.phase != "decode" and not forwards.get(region.phase):
            notes.append(f"no {region.phase} forward ran" + (
                ": run a second prefill (a second generate call) for a warm one"
                if region.phase == "warm_prefill" else ""))
    return notes
