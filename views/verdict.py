"""The verdict: what a run spends its time on, what bounds each part, and where time can be won.

Per phase: its share of the workload's time and what bounds it. Per phase and role (a group): the
units' shares of their peaks, on one basis for all three, the share of elapsed cycles:

    memory   dram__throughput % of peak                 (V7 `dram_pct`)
    tensor   the tensor pipe's busy share of elapsed    (V2 `tensor_pipe_elapsed_pct`)
    fp32     FP32 FLOPs against the FP32 peak           (V7 `fp32_pct`)

What bounds a group or a phase is V7's and read from it, never decided here: each kernel's bound
(the unit at BOUND_FLOOR_PCT of its peak or more, else latency; unknown where an unmeasured unit
could be larger), and a group's the bound holding the most of its kernels' time, with each
bound's share (`bound_<bound>_time_share`). A phase's shares are its groups' summed by time, so
a phase's bound is the gap table's phase row's. The headroom of a group is the time it would not
need if its bound unit ran at its peak (for the tensor pipe: the useful part of it, fill
included), and the opportunities are the groups ranked by that time: time x headroom.

Kernels outside any phase range (phase `other`: weight initialisation, warm-up; or `setup`, a
profiled program's kernels outside its forwards) are setup: shown apart, left out of the shares,
unless the run has no phase at all. After a phase filter (the result's `phase_time_ns`), shares are
of the selected phases' whole time, as the gap's.

The result holds figures only: what each sentence says and how (the kinds of hint, the units
unmeasured) is reports/verdict_text.py's.

Tensor parallel (the result's `communication`, views/ranks.py): a rank that reaches a collective
first waits for the last to join; that wait is neither transfer nor the phase's work, so it is
shown apart (`waiting`) and left out of the shares, as the setup is. What remains of a collective
is its transfer, and its headroom the exposed part of it (the compute stream waits for it:
overlapping it with compute would save it). The ranks run side by side, so a phase and role is
one opportunity however many ranks ran it: its times per rank (their mean), its share all of theirs.

"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from views.grouping import ALL, prevailing
from views.v7_memory import BOUND_FLOOR_PCT, BOUNDS, LATENCY
from views.vocabulary import COLLECTIVE_ROLES, OUTSIDE_PHASES as SETUP_PHASES, PHASE_ORDER
# A collective timed without replay (tensor parallel) has no counters: its time is communication.
COMMUNICATION = "communication"
# The units a group's bound is judged over, in the order the sentences name them.
UNITS = ("memory", "tensor", "fp32")
# Below this share of peak on every unit, nothing is saturated: latency (dependent instructions,
# too few warps or blocks, short kernels) bounds the kernel (V7's floor, named for the sentences).
LATENCY_BELOW_PCT = BOUND_FLOOR_PCT
# A kernel this short spends a visible part of its time ramping up and draining, and launching it
# costs a few microseconds of its own.
SHORT_KERNEL_NS = 10_000.0
LOW_COVERAGE = 0.9
LOW_OCCUPANCY_PCT = 25.0
LOW_FILL = 0.9
TOP = 5


# The kinds of hint: what to look at in a group, each with the figures its sentence tells.
SHORT, COVERAGE, OCCUPANCY, FILL, STALL, BUS = "short", "coverage", "occupancy", "fill", "stall", "bus"


@dataclass(frozen=True)
class Hint:
    """What to look at in a group: its kind, the figure that found it and what goes with it."""

    kind: str  # SHORT (value: mean ns, count: kernels), COVERAGE (value: the SMs' share the grid
    # reaches), OCCUPANCY (value: %, detail: the limiter), FILL (value: the useful MMA share),
    # STALL (detail: the reason), BUS (value: GB/s, count: calls, slow: below LOW_BUS_GBPS)
    value: float = float("nan")
    count: float = float("nan")
    detail: str | None = None
    slow: bool = False


@dataclass(frozen=True)
class Group:
    """One phase and role: how busy each unit was, what bounds it, and what could be won."""

    phase: str
    role: str
    kernels: int
    time_ns: float
    share_pct: float  # of the workload's time (setup left out)
    bound: str | None  # V7's BOUNDS (or communication); None when the capture lacks the counters
    busiest: str | None  # the unit nearest its peak: memory, tensor or fp32
    busiest_pct: float  # its share of peak
    dram_pct: float
    tensor_pct: float  # of elapsed cycles
    useful_tensor_pct: float  # tensor x fill, of elapsed cycles
    fp32_pct: float
    sm_active_pct: float
    saving_ns: float  # time x headroom
    hints: tuple[Hint, ...]  # what to look at, most telling first (at most three)
    rank: int | None = None  # tensor parallel: each rank's groups are its own
    bounds: dict = field(default_factory=dict)  # bound -> share of the group's time (V7's)
    bound_pct: float = float("nan")  # V7's: the bound unit's share of its peak in the kernels it bounds
    # tensor parallel, an opportunity: the ranks it stands for (its times then are per rank, their
    # mean; its share is all of theirs)
    ranks: int = 1
    tokens: float = float("nan")  # its phase's tokens when times are told per token

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
    bound: str | None  # the bound holding most of the phase's time (V7's rule, as its groups')
    bound_share_pct: float  # that share
    bounds: dict  # bound -> share of the phase's time
    dram_pct: float
    tensor_pct: float
    fp32_pct: float
    sm_active_pct: float
    tokens: float = float("nan")  # the tokens it processed when times are told per token


@dataclass(frozen=True)
class Setup:
    kernels: int
    time_ns: float
    run_share_pct: float  # of all the time captured


@dataclass(frozen=True)
class Waiting:
    """Tensor parallel: time ranks spent at collectives waiting for a slower rank to join."""

    time_ns: float  # over every rank
    by_phase_rank: dict  # "phase rank N" -> ns, the longest first


@dataclass
class Verdict:
    phases: list[Phase] = field(default_factory=list)
    opportunities: list[Group] = field(default_factory=list)  # ranked, best first
    groups: list[Group] = field(default_factory=list)  # every phase and role, in display order
    setup: Setup | None = None
    workload_time_ns: float = float("nan")
    # when no group has a bound: the units (UNITS) whose counters no group has, first missed
    # first; all three when every unit was measured somewhere and still nothing is bound
    missing_units: tuple[str, ...] = ()
    waiting: Waiting | None = None  # tensor parallel: left out of the shares like the setup


# --- numbers ------------------------------------------------------------------------------------

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


# --- groups -------------------------------------------------------------------------------------

def _bound(row) -> tuple[str | None, str | None, float, dict]:
    """(bound, busiest unit, its % of peak, each bound's share of the group's time): V7's."""
    if row["role"] in COLLECTIVE_ROLES:
        return COMMUNICATION, None, float("nan"), {COMMUNICATION: 100.0}
    units = {"memory": _get(row, "dram_pct"), "tensor": _get(row, "tensor_pipe_elapsed_pct"),
             "fp32": _get(row, "fp32_pct")}
    known = {u: v for u, v in units.items() if math.isfinite(v)}
    busiest = max(known, key=known.get) if known else None
    bound = _text(row, "bound")
    shares = {b: 100 * _get(row, f"bound_{b}_time_share") for b in BOUNDS}
    shares = {b: v for b, v in shares.items() if math.isfinite(v) and v > 0}
    return (bound if bound in BOUNDS else None), busiest, known.get(busiest, float("nan")), shares


def _hints(row, bound: str | None) -> tuple[Hint, ...]:
    """What to look at, with the numbers and the view that explains them."""
    kernels, time_ns = _get(row, "kernels"), _get(row, "time_ns")
    mean_ns = time_ns / kernels if kernels else float("nan")
    coverage, occupancy = _get(row, "sm_coverage"), _get(row, "achieved_occupancy_pct")
    fill, stall, limiter = _get(row, "fill"), _text(row, "top_stall"), _text(row, "occupancy_limiter")
    bus = _get(row, "bus_gbps")
    found = {
        SHORT: Hint(SHORT, mean_ns, kernels) if mean_ns < SHORT_KERNEL_NS else None,
        COVERAGE: Hint(COVERAGE, coverage) if coverage < LOW_COVERAGE else None,
        OCCUPANCY: Hint(OCCUPANCY, occupancy, detail=limiter) if occupancy < LOW_OCCUPANCY_PCT else None,
        FILL: Hint(FILL, fill) if fill < LOW_FILL else None,
        STALL: Hint(STALL, detail=stall) if stall else None,
        BUS: Hint(BUS, bus, kernels, slow=bus < LOW_BUS_GBPS) if math.isfinite(bus) else None,
    }
    order = {"latency": (SHORT, COVERAGE, OCCUPANCY, STALL),
             "memory": (COVERAGE, STALL, SHORT),
             "tensor": (FILL, OCCUPANCY, STALL),
             "fp32": (OCCUPANCY, STALL, COVERAGE),
             COMMUNICATION: (BUS,)}.get(bound or "", ())
    return tuple(found[k] for k in order if found[k])[:3]


# NCCL's bus bandwidth below this on NVLink is the latency of each call, not the links' speed.
LOW_BUS_GBPS = 50.0


def _group(row, workload_ns: float, tokens: dict | None = None) -> Group:
    time_ns = _get(row, "time_ns")
    fp32 = _get(row, "fp32_pct")
    bound, busiest, busiest_pct, bounds = _bound(row)
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
    elif bound == LATENCY:
        attained = busiest_pct
    elif bound == COMMUNICATION:
        # what is exposed of the transfer (the waiting for a slower rank is out: with_waits) is the
        # time overlapping it with compute would save: the compute stream waits for all of it
        attained = 100 * (1 - _get(row, "exposed_share"))
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
                  hints=hints, rank=None if pd.isna(rank) else int(rank), bounds=bounds,
                  bound_pct=_get(row, "bound_pct"), tokens=(tokens or {}).get(str(row["phase"]), float("nan")))
    return group


def unmeasured(dram_pct: float, tensor_pct: float, fp32_pct: float) -> list[str]:
    """The units (UNITS) whose share of peak the capture does not give."""
    return [unit for unit, value in zip(UNITS, (dram_pct, tensor_pct, fp32_pct)) if not math.isfinite(value)]


# --- phases -------------------------------------------------------------------------------------

def _weighted(groups: list[Group], attr: str) -> float:
    # collectives timed without replay have no counters by nature: the units' figures are the
    # profiled kernels'
    values = [(getattr(g, attr), g.time_ns) for g in groups if g.role not in COLLECTIVE_ROLES]
    if not values or any(not math.isfinite(v) for v, _ in values):
        return float("nan")
    total = sum(t for _, t in values)
    return sum(v * t for v, t in values) / total if total > 0 else float("nan")


def _phase(name: str, groups: list[Group], workload_ns: float, tokens: float = float("nan")) -> Phase:
    time_ns = sum(g.time_ns for g in groups)
    # each bound's time in the phase: its groups' shares (V7's, of their kernels' time) summed
    times: dict[str, float] = {}
    for g in groups:
        for b, share in g.bounds.items():
            times[b] = times.get(b, 0.0) + g.time_ns * share / 100
    names = sorted(times, key=lambda b: -times[b])
    bounds = {b: 100 * times[b] / time_ns for b in names} if time_ns > 0 else {}
    # V7's rule for a group of kernels: the bound holding the most time, unless more is unknown
    best = int(prevailing([[times[b] for b in names]], [time_ns])[0]) if names and time_ns > 0 else -1
    bound = names[best] if best >= 0 else None
    phase = Phase(phase=name, kernels=sum(g.kernels for g in groups), time_ns=time_ns,
                  share_pct=100 * time_ns / workload_ns if workload_ns > 0 else float("nan"),
                  bound=bound, bound_share_pct=bounds.get(bound, float("nan")) if bound else float("nan"),
                  bounds=bounds, dram_pct=_weighted(groups, "dram_pct"),
                  tensor_pct=_weighted(groups, "tensor_pct"), fp32_pct=_weighted(groups, "fp32_pct"),
                  sm_active_pct=_weighted(groups, "sm_active_pct"), tokens=tokens)
    return phase


# --- the verdict --------------------------------------------------------------------------------

def _missing_units(groups: list[Group]) -> tuple[str, ...]:
    """The counters no group measured, as units (an RTX 5090 export has DRAM %), all when none."""
    missing = dict.fromkeys(u for g in groups for u in unmeasured(g.dram_pct, g.tensor_pct, g.fp32_pct))
    return tuple(missing) or UNITS


def verdict(result, top: int = TOP, tokens: dict | None = None) -> Verdict:
    """The verdict over a views result (registry.ViewsResult: its groups, kernels and devices; for
    tensor parallel its `communication`). `tokens`: phase -> the tokens it processed, to tell
    times per token (the shares and the ranking are the same either way)."""
    groups = result.groups
    if groups is None or groups.empty:
        return Verdict()
    rows = groups[groups["role"].astype(object) != ALL]
    phases_present = set(rows["phase"].astype(object))
    in_setup = rows["phase"].astype(object).isin(SETUP_PHASES)
    has_setup = bool(phases_present & set(SETUP_PHASES)) and bool(phases_present - set(SETUP_PHASES))
    story = rows[~in_setup] if has_setup else rows
    story, waits = with_waits(story, getattr(result, "communication", None))
    workload_ns = float(pd.to_numeric(story["time_ns"], errors="coerce").sum())
    basis = getattr(result, "phase_time_ns", None)  # a phase filter (registry.share_basis)
    if basis:  # shares of the selected phases' whole time, whatever roles or kernels are shown
        workload_ns = sum(t for p, t in basis.items() if not (has_setup and p in SETUP_PHASES))
        workload_ns -= sum(t for (p, _), t in waits.items() if p in basis)
    made = [_group(row, workload_ns, tokens) for _, row in story.iterrows()]
    by_phase: dict[str, list[Group]] = {}
    for g in made:
        by_phase.setdefault(g.phase, []).append(g)
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    phases = [_phase(name, by_phase[name], workload_ns, (tokens or {}).get(name, float("nan")))
              for name in sorted(by_phase, key=lambda p: rank.get(p, len(rank)))]
    ranked = sorted((g for g in _merged_ranks(made) if math.isfinite(g.saving_ns) and g.saving_ns > 0),
                    key=lambda g: -g.saving_ns * g.ranks)[:top]
    setup = None
    if has_setup:
        part = rows[in_setup]
        setup_ns = float(pd.to_numeric(part["time_ns"], errors="coerce").sum())
        total = setup_ns + workload_ns
        kernels = int(pd.to_numeric(part["kernels"], errors="coerce").sum())
        share = 100 * setup_ns / total if total > 0 else float("nan")
        setup = Setup(kernels, setup_ns, share)
    missing = () if any(g.bound for g in made) else _missing_units(made)
    return Verdict(phases=phases, opportunities=ranked, groups=made, setup=setup, workload_time_ns=workload_ns,
                   missing_units=missing, waiting=_waiting(waits))


# A wait this small (of a rank's collectives) is the clocks' noise, not a rank held up.
WAIT_FLOOR_NS = 1_000.0


def with_waits(rows: pd.DataFrame, communication) -> tuple[pd.DataFrame, dict]:
    """A tensor-parallel run's collective groups without the time their rank waited for a slower
    one (views/ranks.py: a rank's time over the fastest rank's for the same call), and with the
    share of the rest that is exposed (`exposed_share`: the compute stream waits for it). The
    wait is no transfer and no work of the phase: a rank that reaches an all-reduce first idles
    until the last joins. Returns (rows, {(phase, rank): wait ns})."""
    if communication is None or communication.empty or "rank" not in rows.columns \
            or "comm_wait_ns" not in communication.columns:
        return rows, {}
    comm = {(str(r["phase"]), int(r["rank"])): r for _, r in communication.iterrows() if not pd.isna(r["rank"])}
    rows = rows.copy()
    collective = rows["role"].astype(object).isin(COLLECTIVE_ROLES).to_numpy()
    waits: dict = {}
    times = pd.to_numeric(rows["time_ns"], errors="coerce").to_numpy(dtype=float, copy=True)
    exposed, bus = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    for i in np.flatnonzero(collective):
        phase, rank = str(rows["phase"].iloc[i]), rows["rank"].iloc[i]
        found = comm.get((phase, int(rank))) if not pd.isna(rank) else None
        if found is None:
            continue
        comm_ns, wait_ns = _get(found, "comm_ns"), _get(found, "comm_wait_ns")
        if not (math.isfinite(comm_ns) and comm_ns > 0 and math.isfinite(wait_ns)):
            continue
        wait = wait_ns * times[i] / comm_ns  # this collective's part of the rank's wait in the phase
        exposed[i] = min(1.0, _get(found, "exposed_comm_ns") / comm_ns)
        bus[i] = _get(found, "bus_gbps")
        if wait >= WAIT_FLOOR_NS:
            times[i] -= wait
            waits[(phase, int(rank))] = waits.get((phase, int(rank)), 0.0) + wait
    rows["time_ns"] = times
    rows["exposed_share"] = exposed
    rows["bus_gbps"] = bus
    return rows, waits


def _waiting(waits: dict) -> Waiting | None:
    if not waits:
        return None
    total = sum(waits.values())
    named = {f"{phase} rank {rank}": ns for (phase, rank), ns in sorted(waits.items(), key=lambda kv: -kv[1])}
    return Waiting(total, named)


def _merged_ranks(groups: list[Group]) -> list[Group]:
    """Each phase and role once, however many ranks ran it: they ran side by side, so what can be
    won is a time per rank (their mean), and the share is all of theirs. The rank that would win
    the most tells the bound and the hints."""
    by_key: dict[tuple, list[Group]] = {}
    for g in groups:
        by_key.setdefault((g.phase, g.role), []).append(g)
    out = []
    for same in by_key.values():
        if len(same) == 1 or any(g.rank is None for g in same):
            out += same
            continue
        savings = [g.saving_ns for g in same]
        if not all(math.isfinite(v) for v in savings):
            out += same
            continue
        best = max(same, key=lambda g: g.saving_ns)
        n = len(same)
        merged = replace(best, rank=None, ranks=n, kernels=round(sum(g.kernels for g in same) / n),
                         time_ns=sum(g.time_ns for g in same) / n, saving_ns=sum(savings) / n,
                         share_pct=sum(g.share_pct for g in same))
        out.append(merged)
    return out
