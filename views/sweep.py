"""A sweep: how each phase and role's gap moves as batch size, prompt length and model change.

Input: the points of a grid (profiler/run/sweep.py, or runs chosen from the store), each with its
coordinates, its run's status and its views (registry.compute_views). Output: per point, phase
and role, the gap's steps (gap.HEADLINE, gap.STEPS), the useful MMA share, waves and wave
efficiency, occupancy and its limiter, the top stall family, DRAM % and the bound, the kernel
cuBLASLt or cuDNN chose and the time per token; then, along each axis (batch at each prompt,
prompt at each batch, one line per model), the points where something changes: the bound flips,
the chosen kernel or tile changes (V8), the wave count of the role's main kernel crosses an
integer, the useful MMA share jumps (the token count crossing a tile size). Findings are those
changes told once each, the largest share of time first, with the figures their sentences need
(reports/sweep_text.py says them). Pure: no I/O, no printing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from views import gap as gap_module
from views.v7_memory import BOUND_FLOOR_PCT
from views.catalog import ARGMAX, GROUP, KERNEL, LOWER, NEITHER, Figure
from views.vocabulary import CHOSEN_KINDS, GEMM_ROLES, PHASE_ORDER, PREFILL_PHASES, ROLES, STALL_FAMILIES

AXES = ("batch", "prompt")          # ordered axes a line runs along; the model is a line of its own
COMPLETE, PARTIAL, MISSING = "complete", "partial", "missing"

# The figures of the views a sweep follows, by their catalog columns (the gap's steps first).
GAP_STEPS = (gap_module.HEADLINE, *gap_module.STEPS)
FOLLOWED = (*GAP_STEPS, "fill", "wave_efficiency", "achieved_occupancy_pct",
            "occupancy_limiter", "dram_pct", "bound", "bound_pct", "time_ns", "time_share_pct")

FIGURES = (
    Figure("time_per_token_ns", "time per token", "ns", LOWER, GROUP,
           "time_ns / the tokens the profiled layer step processed: batch x prompt in a prefill, "
           "batch in a decode step; the fair comparison across batch sizes and prompt lengths",
           ratio_of=("time_ns", "tokens")),
    Figure("main_waves", "waves", "waves", NEITHER, KERNEL,
           "V5's waves of the group's longest GEMM or attention kernel: grid / (SMs x blocks per SM); "
           "of a persistent GEMM (V8), its tiles / its grid, the rounds each CTA runs"),
    Figure("main_kernel", "kernel chosen", "text", NEITHER, KERNEL,
           "V8's choice for the group's GEMMs or attention that holds the most time: family, tile, "
           "split-K, architecture path"),
    Figure("top_stall_family", "top stall family", "text", NEITHER, ARGMAX,
           "the stall family (views/vocabulary.py STALL_FAMILIES) with the largest time-weighted share",
           argmax_of=tuple((family, f"stall_{family}_share") for family in STALL_FAMILIES)),
)

# A change in the useful MMA share this large between neighbours is a jump, not drift: a tile
# whose token dimension the batch now fills (8 of 8 rows against 4 of 8 is 0.5 apart).
FILL_JUMP = 0.1
# Waves within this of an integer are that integer (1.0000 waves is one full wave, not a second).
WAVE_SLACK = 0.01
# A bound this close to V7's floor flips on run-to-run noise: its sentence says so.
NEAR_FLOOR_PCT = 3.0
# A wave efficiency below this is a tail worth telling (the last round leaves a tenth of the slots idle).
TAIL_COSTS = 0.9
# Change kinds, most telling first: the order findings are told in at equal weight.
CHANGE_KINDS = ("bound", "kernel", "waves", "fill")


@dataclass(frozen=True)
class SweepPoint:
    coords: dict                    # model (None for a program), batch, prompt
    run_id: str | None
    name: str | None
    status: str                     # complete | partial | missing
    result: object | None = None    # its ViewsResult (None: missing)
    note: str = ""                  # why partial or missing


@dataclass
class SweepResult:
    points: pd.DataFrame            # one row per point: coordinates, run, status, note
    series: pd.DataFrame            # one row per point, phase and role: the followed figures
    changes: pd.DataFrame           # along each line, each neighbour pair where something changed
    findings: list = field(default_factory=list)   # dicts: kind, weight_pct, charts, runs, told (its figures)
    lines: list = field(default_factory=list)      # the line keys (model and the other axis)

    def axis_values(self, axis: str) -> list[int]:
        return sorted({int(v) for v in self.points[axis]})


def tokens(phase: str, batch: float, prompt: float) -> float:
    """Tokens one profiled layer step processes in `phase`."""
    if phase in PREFILL_PHASES:
        return float(batch) * float(prompt)
    return float(batch) if phase == "decode" else float("nan")


def _column(kernels: pd.DataFrame, name: str, dtype=float) -> np.ndarray | None:
    return kernels[name].to_numpy(dtype=dtype, na_value=np.nan if dtype is float else None) \
        if name in kernels.columns else None


def _main_kernels(result) -> dict:
    """Per phase and role, the waves of its longest chosen (GEMM, attention) kernel, and the V8
    choice holding the most time. Plain arrays: a sweep reads a hundred runs."""
    kernels = result.kernels
    kinds, waves, time_ns = (_column(kernels, "kind", object), _column(kernels, "waves"),
                             _column(kernels, "time_ns"))
    out: dict = {}
    if kinds is not None and waves is not None and time_ns is not None:
        units, grid = _column(kernels, "work_units"), _column(kernels, "grid_blocks")
        persistent = _column(kernels, "persistent", object)
        if units is not None and grid is not None and persistent is not None:
            # a persistent GEMM's grid is one wave of CTAs that loop over the tiles: its rounds
            # are tiles / CTAs (V5's work units over the grid)
            with np.errstate(invalid="ignore", divide="ignore"):
                waves = np.where(persistent == True, units / grid, waves)  # noqa: E712 (None: not known)
        phases, roles = _column(kernels, "phase", object), _column(kernels, "role", object)
        longest: dict = {}
        for k in np.flatnonzero(np.isin(kinds, [c for c in CHOSEN_KINDS if c != "splitk_reduce"])):
            key = (str(phases[k]), str(roles[k]))
            if key not in longest or time_ns[k] > time_ns[longest[key]]:
                longest[key] = k
        out = {key: {"main_waves": float(waves[k])} for key, k in longest.items()}
    sel = result.selection
    if sel is not None and len(sel):
        best: dict = {}
        for phase, role, kind, choice, spent in zip(sel["phase"], sel["role"], sel["kind"], sel["choice"],
                                                    sel["time_ns"]):
            if kind != "splitk_reduce" and ((phase, role) not in best or spent > best[(phase, role)][1]):
                best[(phase, role)] = (choice, spent)
        for key, (choice, _) in best.items():
            out.setdefault(key, {})["main_kernel"] = choice
    return out


def _top_family(row: dict) -> str | None:
    shares = {f: row.get(f"stall_{f}_share") for f in STALL_FAMILIES}
    shares = {f: v for f, v in shares.items() if v is not None and not pd.isna(v)}
    return max(shares, key=shares.get) if shares else None


def point_series(point: SweepPoint) -> list[dict]:
    """The followed figures of one point, per phase and role (and per phase, role `all`)."""
    if point.result is None:
        return []
    gap = point.result.gap
    groups = point.result.groups
    stall_cols = [f"stall_{f}_share" for f in STALL_FAMILIES if f"stall_{f}_share" in groups]
    # what the gap does not carry (the stall families, the limiter) comes from the groups
    extra = [c for c in FOLLOWED if c not in gap and c in groups]
    by_group = {(str(r["phase"]), str(r["role"])): r for r in _records(groups, ["phase", "role", *stall_cols, *extra])}
    mains = _main_kernels(point.result)
    out = []
    for r in _records(gap, ["phase", "role", *(c for c in FOLLOWED if c in gap)]):
        phase, role = str(r["phase"]), str(r["role"])
        row = {"model": None, **point.coords, "run_id": point.run_id, "status": point.status, "phase": phase,
               "role": role}
        group = by_group.get((phase, role), {})
        row.update({c: r[c] if c in r else group.get(c) for c in FOLLOWED})
        row["time_per_token_ns"] = _div(r.get("time_ns"), tokens(phase, point.coords["batch"],
                                                                 point.coords["prompt"]))
        row.update({"main_waves": np.nan, "main_kernel": None, **mains.get((phase, role), {})})
        row["top_stall_family"] = _top_family(group)
        out.append(row)
    return out


def _records(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    """The rows of `columns` as dicts, without DataFrame.to_dict's cost per frame (a sweep reads
    two small frames of each of a hundred runs)."""
    arrays = [frame[c].to_numpy(dtype=object) for c in columns]
    return [dict(zip(columns, values)) for values in zip(*arrays)]


def _div(a, b) -> float:
    try:
        return float(a) / float(b) if b and not math.isnan(float(b)) else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _wave_count(waves: float) -> int | None:
    """The waves a grid takes: 0.73 is one (part-filled), 1.2 two, 1.004 one."""
    if waves is None or pd.isna(waves) or waves <= 0:
        return None
    return max(1, math.ceil(waves - WAVE_SLACK))


def _side(row: dict) -> dict:
    """What a change's sentence tells of one side: the bound's unit share (and whether V7's floor
    is within NEAR_FLOOR_PCT of it), DRAM %, the main kernel's waves, their count and efficiency."""
    pct = row.get("bound_pct")
    near = pct is not None and not pd.isna(pct) and abs(pct - BOUND_FLOOR_PCT) < NEAR_FLOOR_PCT
    return {"bound": row["bound"], "bound_pct": pct, "near_floor": bool(near), "dram_pct": row.get("dram_pct"),
            "waves": row["main_waves"], "wave_count": _wave_count(row["main_waves"]),
            "wave_efficiency": row["wave_efficiency"]}


def _changes_between(a: dict, b: dict) -> list[dict]:
    found = []
    sides = {"figures": (_side(a), _side(b))}
    if a["bound"] is not None and b["bound"] is not None and a["bound"] != b["bound"] \
            and isinstance(a["bound"], str) and isinstance(b["bound"], str):
        found.append({"kind": "bound", "before": a["bound"], "after": b["bound"], **sides, "costly": True})
    if isinstance(a["main_kernel"], str) and isinstance(b["main_kernel"], str) \
            and a["main_kernel"] != b["main_kernel"]:
        found.append({"kind": "kernel", "before": a["main_kernel"], "after": b["main_kernel"], **sides,
                      "costly": True})
    wa, wb = _wave_count(a["main_waves"]), _wave_count(b["main_waves"])
    if wa is not None and wb is not None and wa != wb:
        efficiency = [e for e in (a["wave_efficiency"], b["wave_efficiency"]) if not pd.isna(e)]
        # told when the tail costs: a wave efficiency under TAIL_COSTS, or one that moves by 0.05
        costly = bool(efficiency) and (min(efficiency) < TAIL_COSTS or
                                       (len(efficiency) == 2 and abs(efficiency[1] - efficiency[0]) >= 0.05))
        found.append({"kind": "waves", "before": f"{a['main_waves']:.2f}", "after": f"{b['main_waves']:.2f}",
                      **sides, "costly": costly})
    fa, fb = a["fill"], b["fill"]
    if fa is not None and fb is not None and not pd.isna(fa) and not pd.isna(fb) and abs(fb - fa) >= FILL_JUMP:
        found.append({"kind": "fill", "before": f"{fa:.2f}", "after": f"{fb:.2f}", **sides, "costly": True})
    return found


def line_key(row: dict, axis: str) -> tuple:
    """What one line along `axis` holds fixed: the model and the other axis."""
    other = "prompt" if axis == "batch" else "batch"
    return (row.get("model"), other, int(row[other]))


def changes(series: pd.DataFrame) -> pd.DataFrame:
    """Along each axis and line, per phase and role, each neighbour pair of complete points where
    something changed; a pair with a partial or missing point between is no neighbour. `figures`:
    each side's (_side) for the change's sentence (reports/sweep_text.py)."""
    columns = ["axis", "model", "fixed", "fixed_value", "phase", "role", "from", "to", "tokens_from",
               "tokens_to", "kind", "before",
               "after", "figures", "costly", "weight_pct", "runs"]
    out = []
    if series.empty:
        return pd.DataFrame(columns=columns)
    records = series.to_dict("records")
    for axis in AXES:
        lines: dict[tuple, list[dict]] = {}
        for row in records:
            lines.setdefault((*line_key(row, axis), row["phase"], row["role"]), []).append(row)
        for (model, fixed, value, phase, role), rows in lines.items():
            rows = sorted(rows, key=lambda r: int(r[axis]))
            for a, b in zip(rows, rows[1:]):
                if a["status"] != COMPLETE or b["status"] != COMPLETE:
                    continue
                shares = [v for v in (a.get("time_share_pct"), b.get("time_share_pct")) if not pd.isna(v)]
                weight = sum(shares) / len(shares) if shares else float("nan")
                for change in _changes_between(a, b):
                    out.append({"axis": axis, "model": model, "fixed": fixed, "fixed_value": value,
                                "phase": phase, "role": role, "from": int(a[axis]), "to": int(b[axis]),
                                "tokens_from": tokens(phase, a["batch"], a["prompt"]),
                                "tokens_to": tokens(phase, b["batch"], b["prompt"]),
                                **change, "weight_pct": float(weight), "runs": [a["run_id"], b["run_id"]]})
    return pd.DataFrame(out, columns=columns)


def chart_id(phase: str, role: str, axis: str) -> str:
    return f"{phase}-{role}-{axis}"


def _series_along(lines: dict, change: dict, column: str) -> list[tuple[int, float]]:
    """(the axis value, `column`) at each point of the change's line (`lines`: the series records
    by line and group), along the axis."""
    axis = change["axis"]
    rows = sorted(lines.get((axis, change["model"], change["fixed_value"], change["phase"], change["role"]), []),
                  key=lambda r: int(r[axis]))
    return [(int(r[axis]), r[column]) for r in rows]


def _lines(series: pd.DataFrame) -> dict:
    """The series records by (axis, model, the other axis's value, phase, role)."""
    out: dict = {}
    for r in series.to_dict("records"):
        for axis in AXES:
            model, _, value = line_key(r, axis)
            out.setdefault((axis, model, value, r["phase"], r["role"]), []).append(r)
    return out


def findings(series: pd.DataFrame, found: pd.DataFrame, points: pd.DataFrame) -> list[dict]:
    """The changes told: points not measured whole first, then the changes, the same change of
    one role in several phases or lines told once; by the time the groups hold and the kind of
    change (the bound before a kernel before waves before fill). Each finding's `told` holds what
    its sentence says: the points not measured whole, or the change's phases, role, where along
    the sweep (its token steps or its lines), the first change of them and, for a bound, the
    useful MMA share along its line."""
    out = []
    bad = points[points["status"] != COMPLETE]
    if len(bad):
        listed = [{k: r[k] for k in ("model", "batch", "prompt", "status", "note")} for r in bad.to_dict("records")]
        out.append({"kind": "points", "weight_pct": float("inf"), "charts": [],
                    "runs": [r for r in bad["run_id"] if isinstance(r, str)],
                    "told": {"points": listed, "of": len(points)}})
    if found.empty:
        return out
    told: dict[tuple, list[dict]] = {}
    for change in found.to_dict("records"):
        if change["kind"] == "waves" and not change["costly"]:
            continue  # a crossing that leaves no tail worth a sentence: in the changes, not told
        before, after = change["before"], change["after"]
        if change["kind"] == "fill":  # 0.12 → 1.00 and 0.13 → 1.00 are one jump
            before, after = f"{float(before):.1f}", f"{float(after):.1f}"
        if change["role"] in GEMM_ROLES and change["tokens_from"] != change["tokens_to"]:
            # a GEMM's shape is its token count (batch x prompt in a prefill, batch in decode):
            # the same change along either axis and at any other value is one threshold
            key = ("tokens", change["kind"], change["role"], change["phase"] in PREFILL_PHASES, before, after)
        else:
            key = (change["axis"], change["kind"], change["role"], change["from"], change["to"], before, after)
        told.setdefault(key, []).append(change)
    rank = {k: i for i, k in enumerate(CHANGE_KINDS)}
    lines_of = _lines(series) if (found["kind"] == "bound").any() else {}
    said = []
    for key, same in told.items():
        kind, role, first = key[1], key[2], same[0]
        what = {"phases": list(dict.fromkeys(c["phase"] for c in same)), "role": role, "first": first,
                "by_tokens": key[0] == "tokens"}
        if key[0] == "tokens":
            what.update(models=[m for m in dict.fromkeys(c["model"] for c in same) if m], prefill=key[3],
                        token_steps=[(c["tokens_from"], c["tokens_to"]) for c in same])
        else:
            what["lines"] = list(dict.fromkeys((c["model"], c["fixed"], c["fixed_value"]) for c in same))
        if kind == "bound":
            what["fill_along"] = _series_along(lines_of, first, "fill")
        weight = max(c["weight_pct"] for c in same)
        said.append({"kind": kind, "weight_pct": weight, "kind_rank": rank[kind],
                     "charts": list(dict.fromkeys(chart_id(c["phase"], role, c["axis"]) for c in same)),
                     "runs": list(dict.fromkeys(r for c in same for r in c["runs"])), "told": what})
    said.sort(key=lambda f: (-f["weight_pct"], f["kind_rank"]))
    return out + [{k: v for k, v in f.items() if k != "kind_rank"} for f in said]


def _order(series: pd.DataFrame) -> pd.DataFrame:
    if series.empty:
        return series
    phase_rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    role_rank = {r: i for i, r in enumerate((*ROLES, "all"))}
    keys = series.assign(_p=series["phase"].map(phase_rank).fillna(len(phase_rank)),
                         _r=series["role"].map(role_rank).fillna(len(role_rank)))
    return keys.sort_values(["_p", "_r", "model", "batch", "prompt"], kind="stable").drop(columns=["_p", "_r"])


def sweep(points: list[SweepPoint]) -> SweepResult:
    """The sweep over its points (each with its views, or missing)."""
    point_rows = [{"model": p.coords.get("model"), "batch": int(p.coords["batch"]),
                   "prompt": int(p.coords["prompt"]), "run_id": p.run_id, "name": p.name,
                   "status": p.status, "note": p.note} for p in points]
    frame = pd.DataFrame(point_rows, columns=["model", "batch", "prompt", "run_id", "name", "status", "note"])
    rows = [row for p in points for row in point_series(p)]
    series = pd.DataFrame(rows)
    if not series.empty:
        series["batch"] = series["batch"].astype(int)
        series["prompt"] = series["prompt"].astype(int)
        series = _order(series).reset_index(drop=True)
    found = changes(series)
    lines = sorted({line_key(r, axis) for r in point_rows for axis in AXES}, key=str)
    return SweepResult(frame, series, found, findings(series, found, frame), lines)


def mixed(identities: dict[str, dict]) -> tuple[str, dict] | None:
    """What differs between the points' runs that must not (the device, the compute capability,
    the ncu metric set): (what, each value -> its runs), or None when they are alike."""
    for key, what in (("device", "devices"), ("cc", "compute capabilities"), ("metrics", "ncu metric sets")):
        values: dict[str, list[str]] = {}
        for run, identity in identities.items():
            value = identity.get(key)
            if value is not None and value == value:
                values.setdefault(str(value), []).append(run)
        if len(values) > 1:
            return what, values
    return None
