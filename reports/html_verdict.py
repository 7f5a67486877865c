"""The verdict at the top of the report: its sentence, each phase's share and bound, where time can
be won (views/verdict.py ranks it), the setup kept apart; against a baseline, each phase's change.
"""
from __future__ import annotations

from typing import Any, Optional

from reports.html_tables import change_span, html_table, kernels_link
from reports.html_text import esc, fmt, fmt_time_ns, is_missing, prose
from views.v7_memory import BOUND_FLOOR_PCT
from views.verdict import BOUND_WORDS, Verdict

PHASE_COLUMNS = (
    ("share", "the phase's share of the workload's kernel time (setup left out)"),
    ("time", "gpu__time_duration.sum over the phase's kernels"),
    ("bound (share of its time)", f"what holds each phase back, as V7 says for each of its kernels: the unit "
                                  f"nearest its peak when it runs at {BOUND_FLOOR_PCT:.0f} % of it or more "
                                  "(memory: DRAM; tensor: the tensor pipe; fp32: the FP32 pipes), else latency; "
                                  "the share of the phase's time each bound holds"),
    ("DRAM", "dram__throughput.avg.pct_of_peak_sustained_elapsed, time-weighted"),
    ("tensor pipe", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed, time-weighted"),
    ("FP32", "FP32 FLOPs (2 x FFMA + FADD + FMUL) against the FP32 peak over the elapsed cycles (V7 fp32_pct), "
             "time-weighted"),
    ("SM active", "100 x sm__cycles_active.avg / sm__cycles_elapsed.avg, time-weighted"),
)


def _pct(value: Any) -> str:
    return fmt(value, 3, " %")


def _bounds(bounds: dict) -> str:
    return ", ".join(f"{b} {s:.0f} %" for b, s in bounds.items() if s >= 0.5) or "\u2014"


def verdict_section(verdict: Verdict, base: Optional[Verdict] = None,
                    phase_times: Optional[dict] = None, base_times: Optional[dict] = None,
                    time_label: str = "time") -> str:
    """The section. `phase_times`/`base_times`: each phase's time as compared (per token, when
    asked), else the verdict's own."""
    compare = base is not None
    headers = ["phase"] + [(time_label if h == "time" else h, d) for h, d in PHASE_COLUMNS]
    if compare:
        headers += [(f"baseline {time_label}", "the same phase of the baseline run"),
                    ("change", "time against the baseline; green: faster, red: slower"),
                    ("baseline bound", "what bounded the phase in the baseline")]
    base_phases = {p.phase: p for p in base.phases} if compare else {}
    rows = []
    for p in verdict.phases:
        time = (phase_times or {}).get(p.phase, p.time_ns)
        cells = [kernels_link(esc(p.phase), p.phase), esc(_pct(p.share_pct)), esc(fmt_time_ns(time)),
                 esc(_bounds(p.bounds)), esc(_pct(p.dram_pct)), esc(_pct(p.tensor_pct)), esc(_pct(p.fp32_pct)),
                 esc(_pct(p.sm_active_pct))]
        if compare:
            b = base_phases.get(p.phase)
            before = None if b is None else (base_times or {}).get(p.phase, b.time_ns)
            cells += [esc(fmt_time_ns(before)) if b is not None else "not in baseline",
                      change_span("time_ns", time, before, fmt_time_ns) if not is_missing(before) else "",
                      esc(_bounds(b.bounds)) if b is not None else ""]
        rows.append(cells)
    missing = f'<p class="na">{prose(verdict.missing)}</p>' if verdict.missing else ""
    items = []
    for g in verdict.opportunities:
        prefix = f"{g.label}: "
        rest = g.text[len(prefix):] if g.text.startswith(prefix) else g.text
        items.append(f"<li>{kernels_link(f'<b>{esc(g.label)}</b>', g.phase, g.role)}: {prose(rest)}</li>")
    ranked = (f'<h3>Where time can be won</h3><p class="lead">Each phase and role by the time it would not '
              f'need if its bound unit ran at its peak (time \u00d7 headroom); click one for its kernels.</p>'
              f'<ol class="opps">{"".join(items)}</ol>') if items else ""
    setup = f'<p class="setup">{prose(verdict.setup.text)}</p>' if verdict.setup else ""
    words = ", ".join(f"{w}" for w in BOUND_WORDS.values())
    return (f'<section id="verdict"><h2>Verdict</h2><p class="verdict">{prose(verdict.summary)}</p>{missing}'
            + html_table(headers, rows, "phases", sticky=1) + ranked + setup
            + f'<p class="d">Bounds: {esc(words)}; hover a heading for its definition.</p></section>')
