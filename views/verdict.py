"""The verdict: what a run spends its time on, what bounds each part, and where time can be won.

Per phase: its share of the workload's time and what bounds it. Per phase and role (a group): the
unit nearest its peak (DRAM, the tensor pipe, the FP32 pipes), on one basis for all three, the
share of elapsed cycles:

    memory   dram__throughput % of peak                 (V7 `dram_pct`)
    tensor   the tensor pipe's busy share of elapsed    (V2 `tensor_pipe_elapsed_pct`)
    fp32     FP32 FLOP/s against the device's FP32 peak (V7's FP32 counters, device.ARCH)

A group is bound by that unit when it runs at LATENCY_BELOW_PCT of its peak or more; below that on
every unit nothing is saturated and latency bounds it (Nsight Compute reads its Speed of Light the
same way); below it on the units a capture measures, with another unit not measured, the bound is
unknown, and so is the headroom. The headroom of a group is the time it would not need if its bound unit ran at its peak
(for the tensor pipe: the useful part of it, fill included), and the opportunities are the groups
ranked by that time: time x headroom.

Kernels outside any phase range (phase `other`: weight initialisation, warm-up; or `setup`, a
profiled program's kernels outside its forwards) are setup: shown apart, left out of the shares,
unless the run has no phase at all. After a phase filter (the result's `phase_time_ns`), shares are
of the selected phases' whole time, as the gap's.

A group figure a later view adds for the same thing is read in place of these when present: a
group `bound` column whose values are this module's BOUNDS.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from views import device
from views.grouping import ALL
from views.vocabulary import COLLECTIVE_ROLES, PHASE_ORDER, SETUP_PHASE as PROGRAM_SETUP

SETUP_PHASES = ("other", PROGRAM_SETUP)
BOUNDS = ("memory", "tensor", "fp32", "latency")
# A collective timed without replay (tensor parallel) has no counters: its time is communication.
COMMUNICATION = "communication"
BOUND_WORDS = {"memory": "memory-bound", "tensor": "tensor-bound", "fp32": "FP32-bound",
               "latency": "latency-bound", COMMUNICATION: "in collectives"}
UNIT_WORDS = {"memory": "DRAM", "tensor": "the tensor pipe", "fp32": "the FP32 pipes"}
# Below this share of peak on every unit, nothing is saturated: latency (dependent instructions,
# too few warps or blocks, short kernels) bounds the group.
LATENCY_BELOW_PCT = 60.0
# A kernel this short spends a visible part of its time ramping up and draining, and launching it
# costs a few microseconds of its own.
SHORT_KERNEL_NS = 10_000.0
LOW_COVERAGE = 0.9
LOW_OCCUPANCY_PCT = 25.0
LOW_FILL = 0.9
TOP = 5


@dataclass(frozen=True)
class Group:
    """One phase and role: how busy each unit was, what bounds it, and what could be won."""

    phase: str
    role: str
    kernels: int
    time_ns: float
    share_pct: float  # of the workload's time (setup left out)
    bound: str | None  # BOUNDS; None when the capture lacks the counters
    busiest: str | None  # the unit nearest its peak: memory, tensor or fp32
    busiest_pct: float  # its share of peak
    dram_pct: float
    tensor_pct: float  # of elapsed cycles
    useful_tensor_pct: float  # tensor x fill, of elapsed cycles
    fp32_pct: float
    sm_active_pct: float
    saving_ns: float  # time x headroom
    hints: tuple[str, ...]
    text: str
    rank: int | None = None  # tensor parallel: each rank's groups are its own

    @property
    def label(self) -> str:
        """`decode · down_proj`, and ` r1` after it for a rank's group (as the tables name it)."""
        return f"{self.phase} · {self.role}" + ("" if self.rank is None else f" r{self.rank}")


@dataclass(frozen=True)
class Phase:
    phase: str
    kernels: int
    time_ns: float
    share_pct: float  # of the workload's time
    bound: str | None  # the bound holding most of the phase's time
    bound_share_pct: float  # that share
    bounds: dict  # bound -> share of the phase's time
    dram_pct: float
    tensor_pct: float
    fp32_pct: float
    sm_active_pct: float
    text: str


@dataclass(frozen=True)
class Setup:
    kernels: int
    time_ns: float
    run_share_pct: float  # of all the time captured
    text: str


@dataclass
class Verdict:
    summary: str
    phases: list[Phase] = field(default_factory=list)
    opportunities: list[Group] = field(default_factory=list)  # ranked, best first
    groups: list[Group] = field(default_factory=list)  # every phase and role, in display order
    setup: Setup | None = None
    workload_time_ns: float = float("nan")
    missing: str = ""  # why there is no bound, when the counters are missing

    def to_dict(self) -> dict:
        """Plain JSON values (NaN as null)."""
        return _plain({"summary": self.summary, "missing": self.missing or None,
                       "workload_time_ns": self.workload_time_ns,
                       "phases": [asdict(p) for p in self.phases],
                       "opportunities": [asdict(g) for g in self.opportunities],
                       "groups": [asdict(g) for g in self.groups],
                       "setup": asdict(self.setup) if self.setup else None})


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


# --- numbers ------------------------------------------------------------------------------------

def _time(ns: float) -> str:
    if not math.isfinite(ns):
        return "n/a"
    for size, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= size:
            return f"{ns / size:.3g} {unit}"
    return f"{ns:.3g} ns"


def _pct(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.2g} %" if abs(value) < 10 else f"{value:.0f} %"


def _get(row, column: str) -> float:
    value = row.get(column) if hasattr(row, "get") else None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return value


def _text(row, column: str) -> str | None:
    value = row.get(column)
    return value if isinstance(value, str) and value else None


# --- FP32 ---------------------------------------------------------------------------------------

def fp32_pct(kernels: pd.DataFrame, devices: pd.DataFrame) -> np.ndarray:
    """Per kernel: FP32 FLOP/s (FLOPs less tensor ops) against the device's FP32 peak, in %."""
    n = len(kernels)
    if n == 0 or "flops" not in kernels or "tensor_ops" not in kernels or devices is None or devices.empty:
        return np.full(n, np.nan)
    peaks = {}
    for _, d in devices.iterrows():
        rate = device.ARCH.get(str(d.get("cc")), {}).get("fp32_flops_per_cycle_per_sm", np.nan)
        peaks[str(d.get("cc"))] = float(rate) * _get(d, "sm_count") * _get(d, "max_clock_hz")
    cc = kernels["cc"].astype(object).map(lambda c: peaks.get(str(c), np.nan)) if "cc" in kernels \
        else pd.Series(np.nanmedian(list(peaks.values())) if np.isfinite(list(peaks.values())).any() else np.nan,
                       index=kernels.index)
    flops = pd.to_numeric(kernels["flops"], errors="coerce").to_numpy(dtype=float)
    tensor = pd.to_numeric(kernels["tensor_ops"], errors="coerce").to_numpy(dtype=float)
    seconds = pd.to_numeric(kernels["time_ns"], errors="coerce").to_numpy(dtype=float) * 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 100 * (flops - np.nan_to_num(tensor)) / seconds / cc.to_numpy(dtype=float)
    out[~np.isfinite(out)] = np.nan
    return out


def _key(row) -> tuple:
    """A group's (phase, role, rank); rank None outside a tensor-parallel run."""
    rank = row.get("rank")
    return row["phase"], row["role"], None if pd.isna(rank) else int(rank)


def _group_fp32(kernels: pd.DataFrame, devices: pd.DataFrame) -> dict:
    """(phase, role, rank) -> time-weighted FP32 % (NaN when any kernel lacks it)."""
    if kernels.empty:
        return {}
    frame = pd.DataFrame({"phase": kernels["phase"].astype(object), "role": kernels["role"].astype(object),
                          "rank": kernels["rank"] if "rank" in kernels.columns else None,
                          "t": pd.to_numeric(kernels["time_ns"], errors="coerce"),
                          "v": fp32_pct(kernels, devices)})
    frame["tv"] = frame["t"] * frame["v"]
    sums = frame.groupby(["phase", "role", "rank"], sort=False, dropna=False).agg(
        t=("t", "sum"), tv=("tv", lambda s: s.sum(min_count=len(s))))
    return {_key(dict(zip(("phase", "role", "rank"), key))): (row.tv / row.t if row.t > 0 else np.nan)
            for key, row in sums.iterrows()}


# --- groups -------------------------------------------------------------------------------------

def _declares_bounds(groups: pd.DataFrame) -> bool:
    """The groups' `bound` column speaks this module's words (V7's: the largest of the group's
    time-weighted DRAM, tensor and FP32 shares, latency below LATENCY_BELOW_PCT)."""
    if "bound" not in groups.columns:
        return False
    values = set(groups["bound"].dropna().astype(str))
    return bool(values) and values <= set(BOUNDS)


def _bound(row, fp32: float, declared_ok: bool) -> tuple[str | None, str | None, float]:
    """(bound, busiest unit, its % of peak)."""
    if row["role"] in COLLECTIVE_ROLES:
        return COMMUNICATION, None, float("nan")
    units = {"memory": _get(row, "dram_pct"), "tensor": _get(row, "tensor_pipe_elapsed_pct"), "fp32": fp32}
    known = {u: v for u, v in units.items() if math.isfinite(v)}
    declared = _text(row, "bound") if declared_ok else None
    if not known:
        return (declared if declared in BOUNDS else None), None, float("nan")
    busiest = max(known, key=known.get)
    if declared in BOUNDS:  # a view that decides the bound itself
        return declared, busiest, known[busiest]
    if known[busiest] >= LATENCY_BELOW_PCT:
        return busiest, busiest, known[busiest]
    # latency only when every unit was measured below the floor (V7's rule): a details-page export
    # of `--set full` has DRAM at 21 % and no tensor-pipe counter on GEMMs whose pipe is 88 % busy
    return ("latency" if len(known) == len(units) else None), busiest, known[busiest]


def _hints(row, bound: str | None) -> tuple[str, ...]:
    """What to look at, with the numbers and the view that explains them."""
    kernels, time_ns = _get(row, "kernels"), _get(row, "time_ns")
    mean_ns = time_ns / kernels if kernels else float("nan")
    coverage, occupancy = _get(row, "sm_coverage"), _get(row, "achieved_occupancy_pct")
    fill, stall, limiter = _get(row, "fill"), _text(row, "top_stall"), _text(row, "occupancy_limiter")
    found = {
        "short": (f"{kernels:.0f} kernels averaging {_time(mean_ns)}: launch and ramp-up weigh "
                  "(fuse them, or replay them as a CUDA graph)") if mean_ns < SHORT_KERNEL_NS else None,
        "coverage": (f"the grid reaches {coverage * 100:.0f} % of the SMs (V5)")
        if coverage < LOW_COVERAGE else None,
        "occupancy": (f"occupancy {occupancy:.0f} % of the SM's warps"
                      + (f", limited by {_limiter_words(limiter)}" if limiter else "")
                      + " (V4)") if occupancy < LOW_OCCUPANCY_PCT else None,
        "fill": (f"{(1 - fill) * 100:.0f} % of the MMA work multiplies padding (useful MMA share "
                 f"{fill:.2f}, V3)") if fill < LOW_FILL else None,
        "stall": f"warps wait most on {stall.replace('_', ' ')} (V6)" if stall else None,
    }
    order = {"latency": ("short", "coverage", "occupancy", "stall"),
             "memory": ("coverage", "stall", "short"),
             "tensor": ("fill", "occupancy", "stall"),
             "fp32": ("occupancy", "stall", "coverage")}.get(bound or "", ())
    return tuple(found[k] for k in order if found[k])[:3]


def _limiter_words(limiter: str) -> str:
    """`registers+shared_mem` -> `registers and shared memory`."""
    return " and ".join({"shared_mem": "shared memory"}.get(p, p.replace("_", " ")) for p in limiter.split("+"))


def _group(row, fp32: float, workload_ns: float, declared_ok: bool) -> Group:
    time_ns = _get(row, "time_ns")
    bound, busiest, busiest_pct = _bound(row, fp32, declared_ok)
    tensor = _get(row, "tensor_pipe_elapsed_pct")
    fill = _get(row, "fill")
    # V3's useful share (at the device's best rate for the type), else the pipe's share x fill
    useful = _get(row, "useful_tensor_pct")
    if not math.isfinite(useful):
        useful = tensor * fill if math.isfinite(fill) else float("nan")
    # headroom against the bound unit's peak; for the tensor pipe, against useful work
    if bound == "tensor":
        attained = useful if math.isfinite(useful) else tensor
    elif bound in ("memory", "fp32"):
        attained = {"memory": _get(row, "dram_pct"), "fp32": fp32}[bound]
    elif bound == "latency":
        attained = busiest_pct
    else:  # unknown bound: no headroom to claim
        attained = float("nan")
    saving = time_ns * max(0.0, 1 - attained / 100) if math.isfinite(attained) else float("nan")
    share = 100 * time_ns / workload_ns if workload_ns > 0 else float("nan")
    hints = _hints(row, bound)
    rank = row.get("rank")
    group = Group(phase=str(row["phase"]), role=str(row["role"]), kernels=int(_get(row, "kernels")),
                  time_ns=time_ns, share_pct=share, bound=bound, busiest=busiest, busiest_pct=busiest_pct,
                  dram_pct=_get(row, "dram_pct"), tensor_pct=tensor, useful_tensor_pct=useful,
                  fp32_pct=fp32, sm_active_pct=_get(row, "sm_active_pct"), saving_ns=saving,
                  hints=hints, text="", rank=None if pd.isna(rank) else int(rank))
    return _with_text(group)


def _unmeasured(dram_pct: float, tensor_pct: float, fp32_pct: float) -> list[str]:
    """The units whose share of peak the capture does not give."""
    return [UNIT_WORDS[unit] for unit, value in (("memory", dram_pct), ("tensor", tensor_pct), ("fp32", fp32_pct))
            if not math.isfinite(value)]


def _bound_text(g: Group) -> str:
    if g.bound is None:
        unmeasured = _unmeasured(g.dram_pct, g.tensor_pct, g.fp32_pct)
        if g.busiest is None or not unmeasured:
            return "bound unknown"
        return (f"bound unknown: {' and '.join(unmeasured)} not measured (the capture lacks the counters); "
                f"the busiest measured, {UNIT_WORDS[g.busiest]}, at {_pct(g.busiest_pct)}")
    if g.bound == COMMUNICATION:
        return "in collectives (timed without replay: no counters)"
    if g.bound == "latency":
        if g.busiest is None:
            return "latency-bound"
        return (f"latency-bound: no unit reaches {LATENCY_BELOW_PCT:.0f} % of its peak (busiest: "
                f"{UNIT_WORDS[g.busiest]} at {_pct(g.busiest_pct)})")
    if g.bound == "memory":
        return f"memory-bound at {_pct(g.dram_pct)} of DRAM peak"
    if g.bound == "tensor":
        useful = f", {_pct(g.useful_tensor_pct)} useful" if math.isfinite(g.useful_tensor_pct) else ""
        return f"tensor-bound: the tensor pipe busy {_pct(g.tensor_pct)} of the time{useful}"
    return f"FP32-bound at {_pct(g.fp32_pct)} of the FP32 peak"


def _with_text(g: Group) -> Group:
    if math.isfinite(g.saving_ns) and g.saving_ns > 0:
        head = f"up to {_time(g.saving_ns)} to win of its {_time(g.time_ns)} ({_pct(g.share_pct)} of the workload)"
    else:
        head = f"{_time(g.time_ns)} ({_pct(g.share_pct)} of the workload)"
    bound = _bound_text(g)
    joined = "; ".join(g.hints)
    hints = f" {joined[:1].upper()}{joined[1:]}." if g.hints else ""
    text = f"{g.label}: {head}. {bound[:1].upper()}{bound[1:]}.{hints}"
    return Group(**{**asdict(g), "hints": g.hints, "text": text})


# --- phases -------------------------------------------------------------------------------------

def _weighted(groups: list[Group], attr: str) -> float:
    # collectives timed without replay have no counters by nature: the units' figures are the
    # profiled kernels'
    values = [(getattr(g, attr), g.time_ns) for g in groups if g.role not in COLLECTIVE_ROLES]
    if not values or any(not math.isfinite(v) for v, _ in values):
        return float("nan")
    total = sum(t for _, t in values)
    return sum(v * t for v, t in values) / total if total > 0 else float("nan")


def _phase(name: str, groups: list[Group], workload_ns: float) -> Phase:
    time_ns = sum(g.time_ns for g in groups)
    bounds: dict[str, float] = {}
    for g in groups:
        if g.bound is not None and time_ns > 0:
            bounds[g.bound] = bounds.get(g.bound, 0.0) + 100 * g.time_ns / time_ns
    bounds = dict(sorted(bounds.items(), key=lambda kv: -kv[1]))
    bound = next(iter(bounds), None)
    # a phase is not "mostly" bound by what holds less of its time than its groups of unknown bound
    if bound is not None and bounds[bound] < 100 - sum(bounds.values()):
        bound = None
    phase = Phase(phase=name, kernels=sum(g.kernels for g in groups), time_ns=time_ns,
                  share_pct=100 * time_ns / workload_ns if workload_ns > 0 else float("nan"),
                  bound=bound, bound_share_pct=bounds.get(bound, float("nan")) if bound else float("nan"),
                  bounds=bounds, dram_pct=_weighted(groups, "dram_pct"),
                  tensor_pct=_weighted(groups, "tensor_pct"), fp32_pct=_weighted(groups, "fp32_pct"),
                  sm_active_pct=_weighted(groups, "sm_active_pct"), text="")
    return Phase(**{**asdict(phase), "text": _phase_text(phase)})


def _phase_text(p: Phase) -> str:
    head = f"{p.phase}: {_pct(p.share_pct)} of the workload ({_time(p.time_ns)}, {p.kernels} kernels)"
    if not p.bounds:
        return head + "; bound unknown."
    parts = [f"{BOUND_WORDS[b]} in {_pct(s)} of its time" for b, s in p.bounds.items() if s >= 0.5]
    units = [text.format(_pct(v)) for text, v in (("DRAM at {} of peak", p.dram_pct),
                                                  ("the tensor pipe busy {}", p.tensor_pct),
                                                  ("FP32 at {} of peak", p.fp32_pct),
                                                  ("SMs active {}", p.sm_active_pct)) if math.isfinite(v)]
    joined = ", ".join(parts)
    return (f"{head}. {joined[:1].upper()}{joined[1:]}."
            + (f" Time-weighted: {', '.join(units)}." if units else ""))


# --- the verdict --------------------------------------------------------------------------------

COUNTER_WORDS = {"DRAM": "dram__throughput", "the tensor pipe": "the tensor-pipe counters",
                 "the FP32 pipes": "the FP32 counters"}
MISSING_WHAT_TO_DO = "profile with smlens, or ncu --section SpeedOfLight --section ComputeWorkloadAnalysis"


def _missing(groups: list[Group]) -> str:
    """Why no group has a bound: the counters no group measured (an RTX 5090 export has DRAM %)."""
    unmeasured = dict.fromkeys(u for g in groups for u in _unmeasured(g.dram_pct, g.tensor_pct, g.fp32_pct))
    lacks = [COUNTER_WORDS[u] for u in unmeasured] or list(COUNTER_WORDS.values())
    joined = lacks[0] if len(lacks) == 1 else ", ".join(lacks[:-1]) + " and " + lacks[-1]
    return f"the capture lacks {joined}: {MISSING_WHAT_TO_DO}"


def verdict(result, top: int = TOP) -> Verdict:
    """The verdict over a views result (registry.ViewsResult: its groups, kernels and devices)."""
    groups = result.groups
    if groups is None or groups.empty:
        return Verdict(summary="No kernels.")
    rows = groups[groups["role"].astype(object) != ALL]
    phases_present = set(rows["phase"].astype(object))
    in_setup = rows["phase"].astype(object).isin(SETUP_PHASES)
    has_setup = bool(phases_present & set(SETUP_PHASES)) and bool(phases_present - set(SETUP_PHASES))
    story = rows[~in_setup] if has_setup else rows
    workload_ns = float(pd.to_numeric(story["time_ns"], errors="coerce").sum())
    basis = getattr(result, "phase_time_ns", None)  # a phase filter (registry.share_basis)
    if basis:  # shares of the selected phases' whole time, whatever roles or kernels are shown
        workload_ns = sum(t for p, t in basis.items() if not (has_setup and p in SETUP_PHASES))
    fp32 = _group_fp32(result.kernels, getattr(result, "devices", None))
    if "fp32_pct" in rows.columns:  # V7's, on the elapsed cycles as DRAM's and the tensor pipe's
        fp32 = {_key(row): _get(row, "fp32_pct") for _, row in rows.iterrows()}
    declared_ok = _declares_bounds(rows)
    made = [_group(row, fp32.get(_key(row), float("nan")), workload_ns, declared_ok)
            for _, row in story.iterrows()]
    by_phase: dict[str, list[Group]] = {}
    for g in made:
        by_phase.setdefault(g.phase, []).append(g)
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    phases = [_phase(name, by_phase[name], workload_ns)
              for name in sorted(by_phase, key=lambda p: rank.get(p, len(rank)))]
    ranked = sorted((g for g in made if math.isfinite(g.saving_ns) and g.saving_ns > 0),
                    key=lambda g: -g.saving_ns)[:top]
    setup = None
    if has_setup:
        part = rows[in_setup]
        setup_ns = float(pd.to_numeric(part["time_ns"], errors="coerce").sum())
        total = setup_ns + workload_ns
        kernels = int(pd.to_numeric(part["kernels"], errors="coerce").sum())
        share = 100 * setup_ns / total if total > 0 else float("nan")
        setup = Setup(kernels, setup_ns, share,
                      f"Setup: {kernels} kernels outside any phase range (weight initialisation, "
                      f"warm-up), {_time(setup_ns)}, {_pct(share)} of the captured time; left out of "
                      "the shares above.")
    missing = "" if any(g.bound for g in made) else _missing(made)
    return Verdict(summary=_summary(phases, ranked, missing), phases=phases, opportunities=ranked,
                   groups=made, setup=setup, workload_time_ns=workload_ns, missing=missing)


def _summary(phases: list[Phase], ranked: list[Group], missing: str) -> str:
    if not phases:
        return "No kernels."
    if missing:
        return f"What bounds each phase is unknown: {missing}."
    biggest = max(phases, key=lambda p: p.time_ns)
    text = f"{biggest.phase} takes the most time ({_pct(biggest.share_pct)} of the workload) and "
    if biggest.bound is None:
        unmeasured = _unmeasured(biggest.dram_pct, biggest.tensor_pct, biggest.fp32_pct)
        text += "what bounds most of it is unknown" + (
            f" ({' and '.join(unmeasured)} not measured)" if unmeasured else "")
    else:
        text += f"is mostly {BOUND_WORDS[biggest.bound]}"
    if len(phases) > 1:
        text += "; " + ", ".join(f"{p.phase} {_pct(p.share_pct)} ({BOUND_WORDS.get(p.bound, 'unknown')})"
                                 for p in phases if p is not biggest)
    text += "."
    if ranked:
        best = ranked[0]
        text += (f" The most time to win: {best.label}, up to {_time(best.saving_ns)}, "
                 f"{_pct(100 * best.saving_ns / sum(p.time_ns for p in phases))} of the workload's time.")
    return text
