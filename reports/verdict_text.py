"""The verdict's sentences (views/verdict.py computes its figures): each group's and phase's, the
summary, the setup and the wait at collectives, and the verdict's JSON, which carries them."""
from __future__ import annotations

import math
from dataclasses import asdict

from reports.formatting import time_text
from views.common import plain
from views.verdict import (BUS, COMMUNICATION, COVERAGE, FILL, LATENCY_BELOW_PCT, OCCUPANCY, SHORT, STALL,
                           UNITS, Group, Hint, Phase, Setup, Verdict, Waiting, unmeasured)
from views.v7_memory import LATENCY

BOUND_WORDS = {"memory": "memory-bound", "tensor": "tensor-bound", "fp32": "FP32-bound",
               "latency": "latency-bound", COMMUNICATION: "in collectives"}
UNIT_WORDS = dict(zip(UNITS, ("DRAM", "the tensor pipe", "the FP32 pipes")))
COUNTER_WORDS = dict(zip(UNITS, ("dram__throughput", "the tensor-pipe counters", "the FP32 counters")))
MISSING_WHAT_TO_DO = "profile with smlens, or ncu --section SpeedOfLight --section ComputeWorkloadAnalysis"


# --- numbers ------------------------------------------------------------------------------------

def time_words(ns: float) -> str:
    """Nanoseconds in the unit that reads best, three digits; n/a when not finite."""
    return time_text(ns) if math.isfinite(ns) else "n/a"


def _time_per(ns: float, tokens: float) -> str:
    """A time as told: per token of its phase when `tokens` is known (a per-token report)."""
    if math.isfinite(tokens) and tokens > 0:
        return f"{time_words(ns / tokens)} per token"
    return time_words(ns)


def _pct(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.2g} %" if abs(value) < 10 else f"{value:.0f} %"


def _units(units) -> str:
    return " and ".join(UNIT_WORDS[u] for u in units)


# --- groups -------------------------------------------------------------------------------------

def _limiter_words(limiter: str) -> str:
    """`registers+shared_mem` -> `registers and shared memory`."""
    return " and ".join({"shared_mem": "shared memory"}.get(p, p.replace("_", " ")) for p in limiter.split("+"))


def hint_text(h: Hint) -> str:
    """What to look at, with the numbers and the view that explains them."""
    if h.kind == SHORT:
        return (f"{h.count:.0f} kernels averaging {time_words(h.value)}: launch and ramp-up weigh "
                "(fuse them, or replay them as a CUDA graph)")
    if h.kind == COVERAGE:
        return f"the grid reaches {h.value * 100:.0f} % of the SMs (V5)"
    if h.kind == OCCUPANCY:
        return (f"occupancy {h.value:.0f} % of the SM's warps"
                + (f", limited by {_limiter_words(h.detail)}" if h.detail else "") + " (V4)")
    if h.kind == FILL:
        return f"{(1 - h.value) * 100:.0f} % of the MMA work multiplies padding (useful MMA share {h.value:.2f}, V3)"
    if h.kind == STALL:
        return f"warps wait most on {h.detail.replace('_', ' ')} (V6)"
    if h.kind == BUS:
        text = f"{h.count:.0f} calls at {h.value:.3g} GB/s of bus bandwidth (the ranks' table)"
        return text + (": each call's latency, not the links, sets its time (fuse small collectives)"
                       if h.slow else "")
    raise ValueError(f"no sentence for a hint of kind {h.kind!r}")


def _bound_text(g: Group) -> str:
    if g.bound is None:
        missing = unmeasured(g.dram_pct, g.tensor_pct, g.fp32_pct)
        if g.busiest is None or not missing:
            return "bound unknown"
        return (f"bound unknown: {_units(missing)} not measured (the capture lacks the counters); "
                f"the busiest measured, {UNIT_WORDS[g.busiest]}, at {_pct(g.busiest_pct)}")
    if g.bound == COMMUNICATION:
        if math.isfinite(g.saving_ns) and g.saving_ns > 0:
            return ("in collectives, exposed: the compute stream waits for each (overlap them with "
                    "compute, or fewer and larger ones); timed without replay, no counters")
        return "in collectives (timed without replay: no counters)"
    share = g.bounds.get(g.bound, 100.0)
    # a group whose kernels V7 finds bound by more than one: the bound's share, and its unit's in them
    mixed = share < 99.5 and math.isfinite(g.bound_pct)
    part = f" in {_pct(share)} of its time" if mixed else ""
    if g.bound == LATENCY:
        if g.busiest is None:
            return "latency-bound" + part
        if mixed:
            return (f"latency-bound{part}: no unit reaches {LATENCY_BELOW_PCT:.0f} % of its peak there "
                    f"(the busiest at {_pct(g.bound_pct)})")
        return (f"latency-bound: no unit reaches {LATENCY_BELOW_PCT:.0f} % of its peak (busiest: "
                f"{UNIT_WORDS[g.busiest]} at {_pct(g.busiest_pct)})")
    if g.bound == "memory":
        return f"memory-bound{part} at {_pct(g.bound_pct if mixed else g.dram_pct)} of DRAM peak"
    if g.bound == "tensor":
        if mixed:
            return f"tensor-bound{part}: the tensor pipe busy {_pct(g.bound_pct)} of that time"
        useful = f", {_pct(g.useful_tensor_pct)} useful" if math.isfinite(g.useful_tensor_pct) else ""
        return f"tensor-bound: the tensor pipe busy {_pct(g.tensor_pct)} of the time{useful}"
    return f"FP32-bound{part} at {_pct(g.bound_pct if mixed else g.fp32_pct)} of the FP32 peak"


def group_text(g: Group) -> str:
    """`decode · elementwise: up to 279 µs to win of its 286 µs (12 % of the workload). Latency-bound: ...`"""
    per_rank = f" per rank ({g.ranks} ranks)" if g.ranks > 1 else ""
    if math.isfinite(g.saving_ns) and g.saving_ns > 0:
        head = (f"up to {_time_per(g.saving_ns, g.tokens)} to win of its {_time_per(g.time_ns, g.tokens)}"
                f"{per_rank} ({_pct(g.share_pct)} of the workload)")
    else:
        head = f"{_time_per(g.time_ns, g.tokens)}{per_rank} ({_pct(g.share_pct)} of the workload)"
    bound = _bound_text(g)
    joined = "; ".join(hint_text(h) for h in g.hints)
    hints = f" {joined[:1].upper()}{joined[1:]}." if g.hints else ""
    return f"{g.label}: {head}. {bound[:1].upper()}{bound[1:]}.{hints}"


# --- phases, the setup, the wait, the summary -----------------------------------------------------

def phase_text(p: Phase) -> str:
    head = (f"{p.phase}: {_pct(p.share_pct)} of the workload ({_time_per(p.time_ns, p.tokens)}, "
            f"{p.kernels} kernels)")
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


def setup_text(s: Setup) -> str:
    return (f"Setup: {s.kernels} kernels outside any phase range (weight initialisation, warm-up), "
            f"{time_words(s.time_ns)}, {_pct(s.run_share_pct)} of the captured time; left out of the shares above.")


def waiting_text(w: Waiting) -> str:
    parts = "; ".join(f"{name} {time_words(ns)}" for name, ns in w.by_phase_rank.items())
    return (f"Waiting at collectives for a slower rank: {time_words(w.time_ns)} ({parts}). A rank "
            "that reaches a collective first idles until the last joins it (the ranks' imbalance "
            "or a late start, not the transfer); left out of the shares above, as the setup is.")


def missing_text(v: Verdict) -> str:
    """Why no group has a bound ('' when one has): the counters the capture lacks, what to do."""
    if not v.missing_units:
        return ""
    lacks = [COUNTER_WORDS[u] for u in v.missing_units]
    joined = lacks[0] if len(lacks) == 1 else ", ".join(lacks[:-1]) + " and " + lacks[-1]
    return f"the capture lacks {joined}: {MISSING_WHAT_TO_DO}"


def summary_text(v: Verdict) -> str:
    """The verdict in a paragraph: the phase of most time and its bound, the others', the most to win."""
    phases, ranked = v.phases, v.opportunities
    if not phases:
        return "No kernels."
    missing = missing_text(v)
    if missing:
        return f"What bounds each phase is unknown: {missing}."
    biggest = max(phases, key=lambda p: p.time_ns)
    text = f"{biggest.phase} takes the most time ({_pct(biggest.share_pct)} of the workload) and "
    if biggest.bound is None:
        missing_units = unmeasured(biggest.dram_pct, biggest.tensor_pct, biggest.fp32_pct)
        text += "what bounds most of it is unknown" + (
            f" ({_units(missing_units)} not measured)" if missing_units else "")
    else:
        text += f"is mostly {BOUND_WORDS[biggest.bound]}"
    if len(phases) > 1:
        text += "; " + ", ".join(f"{p.phase} {_pct(p.share_pct)} ({BOUND_WORDS.get(p.bound, 'unknown')})"
                                 for p in phases if p is not biggest)
    text += "."
    if ranked:
        best = ranked[0]
        per_rank = " per rank" if best.ranks > 1 else ""
        text += (f" The most time to win: {best.label}, up to {_time_per(best.saving_ns, best.tokens)}"
                 f"{per_rank}, {_pct(100 * best.saving_ns * best.ranks / v.workload_time_ns)} of the workload's time.")
    return text


# --- JSON ---------------------------------------------------------------------------------------

def _group_dict(g: Group) -> dict:
    out = {}
    for key, value in asdict(g).items():
        if key == "hints":  # the hints as their sentences, the group's sentence after them
            out.update(hints=[hint_text(h) for h in g.hints], text=group_text(g))
        else:
            out[key] = value
    return out


def verdict_document(v: Verdict) -> dict:
    """The verdict as plain JSON values (NaN as null), each part with its sentence."""
    phases = [{k: x for k, x in asdict(p).items() if k != "tokens"} | {"text": phase_text(p)} for p in v.phases]
    return plain({"summary": summary_text(v), "missing": missing_text(v) or None,
                  "workload_time_ns": v.workload_time_ns, "phases": phases,
                  "opportunities": [_group_dict(g) for g in v.opportunities],
                  "groups": [_group_dict(g) for g in v.groups],
                  "setup": asdict(v.setup) | {"text": setup_text(v.setup)} if v.setup else None,
                  "waiting": asdict(v.waiting) | {"text": waiting_text(v.waiting)} if v.waiting else None})
