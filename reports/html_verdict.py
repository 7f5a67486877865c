"""The verdict at the top of the report: its sentence, each phase's share and bound, where time can
be won (views/verdict.py ranks it), the setup kept apart; against a baseline, each phase's change,
and before it the comparison verdict (views/comparison.py): what changed, and what explains it.
"""
from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from reports.comparison_text import explanation_text, headline_text
from reports.html_tables import change_span, html_table, kernel_page_link, kernels_link
from reports.html_text import esc, fmt, fmt_time_ns, is_missing, numbers, prose
from views.comparison import GAIN, NOISE, REGRESSION, Change, ComparisonVerdict
from views.v7_memory import BOUND_FLOOR_PCT
from reports.verdict_text import BOUND_WORDS, group_text, missing_text, setup_text, summary_text, waiting_text
from views.verdict import Verdict

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


def longest_kernels(kernels: Optional[pd.DataFrame]) -> dict:
    """(phase, role, rank) -> the id of the group's longest kernel, whose page an opportunity links;
    (phase, role, None): of every rank (a group of merged ranks names none)."""
    if kernels is None or kernels.empty or not {"phase", "role", "time_ns"} <= set(kernels.columns):
        return {}
    rank = kernels["rank"].astype(object) if "rank" in kernels.columns else pd.Series(None, index=kernels.index)
    frame = pd.DataFrame({"phase": kernels["phase"].astype(object), "role": kernels["role"].astype(object),
                          "rank": rank.where(rank.notna(), None), "time_ns": numbers(kernels, "time_ns"),
                          "id": kernels["id" if "id" in kernels.columns else "kernel_id"]})
    frame = frame.sort_values("time_ns", ascending=False, kind="stable")
    out = {(p, r, None): i for p, r, i in frame.drop_duplicates(["phase", "role"])[["phase", "role", "id"]]
           .itertuples(index=False)}
    for p, r, k, i in frame.drop_duplicates(["phase", "role", "rank"])[["phase", "role", "rank", "id"]].itertuples(index=False):
        if k is not None:
            out[(p, r, k)] = i
    return out


def verdict_section(verdict: Verdict, base: Optional[Verdict] = None,
                    phase_times: Optional[dict] = None, base_times: Optional[dict] = None,
                    time_label: str = "time", kernels: Optional[pd.DataFrame] = None) -> str:
    """The section. `phase_times`/`base_times`: each phase's time as compared (per token, when
    asked), else the verdict's own. `kernels`: the run's, for each opportunity's link to the page
    of its longest kernel."""
    longest = longest_kernels(kernels)
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
    missing = f'<p class="na">{prose(missing_text(verdict))}</p>' if verdict.missing_units else ""
    items = []
    for g in verdict.opportunities:
        prefix = f"{g.label}: "
        text = group_text(g)
        rest = text[len(prefix):] if text.startswith(prefix) else text
        kernel = longest.get((g.phase, g.role, g.rank))
        page = (f' <span class="d">({kernel_page_link(f"its longest kernel, #{esc(kernel)}", kernel)})</span>'
                if kernel is not None else "")
        items.append(f"<li>{kernels_link(f'<b>{esc(g.label)}</b>', g.phase, g.role)}: {prose(rest)}{page}</li>")
    ranked = (f'<h3>Where time can be won</h3><p class="lead">Each phase and role by the time it would not '
              f'need if its bound unit ran at its peak (time \u00d7 headroom), or a collective if it overlapped '
              f'compute; click one for its kernels.</p>'
              f'<ol class="opps">{"".join(items)}</ol>') if items else ""
    setup = f'<p class="setup">{prose(setup_text(verdict.setup))}</p>' if verdict.setup else ""
    if getattr(verdict, "waiting", None):  # tensor parallel: apart from the shares, as the setup
        setup += f'<p class="setup">{prose(waiting_text(verdict.waiting))}</p>'
    words = ", ".join(f"{w}" for w in BOUND_WORDS.values())
    return (f'<section id="verdict"><h2>Verdict</h2><p class="verdict">{prose(summary_text(verdict))}</p>{missing}'
            + html_table(headers, rows, "phases", sticky=1) + ranked + setup
            + f'<p class="d">Bounds: {esc(words)}; hover a heading for its definition.</p></section>')


# --- against a baseline: what changed -------------------------------------------------------------

# A change's class: worse (red), better (green), within the run-to-run noise (grey)
SIGNIFICANCE_CLASSES = {REGRESSION: "bad", GAIN: "good", NOISE: "na"}
COMPARISON_COLUMNS = (
    ("time", "the phase's kernel time in this run"), ("baseline", "the same phase in the baseline"),
    ("change", "time against the baseline; red: slower, green: faster, grey: within the run-to-run "
               "noise of the repeats"),
    ("per token", "the phase's time over the tokens it processed"), ("baseline per token", ""),
    ("per-token change", "time per token against the baseline's"))


def _signed(ns: float) -> str:
    if is_missing(ns):
        return "\u2014"
    return ("+" if ns > 0 else "\u2212" if ns < 0 else "") + fmt_time_ns(abs(ns))


def _signed_pct(value: float) -> str:
    return "\u2014" if is_missing(value) else f"{value:+.1f} %"


def _change_item(c: Change) -> str:
    sign = "\u25b2" if c.delta_ns > 0 else "\u25bc"
    noise = (f' <span class="d">within the noise (floor {esc(fmt_time_ns(c.noise_ns))})</span>'
             if c.significance == NOISE else "")
    pct = f" ({_signed_pct(c.change_pct)})" if not is_missing(c.change_pct) else ""
    label = kernels_link(f"<b>{esc(c.label)}</b>", c.phase, c.role)
    return (f'<li><span class="d {SIGNIFICANCE_CLASSES[c.significance]}">{sign} {esc(_signed(c.delta_ns))}'
            f"{esc(pct)}</span>{noise} {label}: {prose(explanation_text(c))}</li>")


def comparison_section(verdict: ComparisonVerdict, base_name: str = "") -> str:
    """The comparison verdict, first in a comparison report: the workload's change (absolute, per
    token, against the noise), each phase's, the largest regressions and gains with what explains
    each (grey within the noise)."""
    per_token = any(not is_missing(p.per_token_ns) for p in verdict.phases)
    headers = ["phase"] + [h for h in COMPARISON_COLUMNS if per_token or "token" not in h[0]]
    rows = []
    for p in verdict.phases:
        cls = SIGNIFICANCE_CLASSES.get(p.significance, "na")
        cells = [kernels_link(esc(p.phase), p.phase), esc(fmt_time_ns(p.time_ns)), esc(fmt_time_ns(p.base_time_ns)),
                 f'<span class="d {cls}">{esc(_signed(p.delta_ns))} ({esc(_signed_pct(p.change_pct))})</span>']
        if per_token:
            cells += [esc(fmt_time_ns(p.per_token_ns)), esc(fmt_time_ns(p.base_per_token_ns)),
                      esc(_signed_pct(p.per_token_change_pct))]
        rows.append(cells)
    lists = ""
    for title, changes in (("Largest regressions", verdict.regressions), ("Largest gains", verdict.gains)):
        if changes:
            lists += f'<h3>{title}</h3><ol class="opps">{"".join(_change_item(c) for c in changes)}</ol>'
    noise = ('<p class="d">No repeats, so no noise floor: give --baseline more than once (runs of the '
             'baseline\u2019s build; --repeat for more of this one) and a change within the run-to-run '
             'noise is grey.</p>' if verdict.noise is None else "")
    against = f" against {esc(base_name)}" if base_name else ""
    return (f'<section id="comparison"><h2>What changed{against}</h2><p class="verdict">{prose(headline_text(verdict))}</p>'
            + html_table(headers, rows, "phases", sticky=1) + lists + noise + "</section>")
