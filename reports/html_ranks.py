"""The report's tensor-parallel section: compute against communication per phase and rank, the
imbalance between ranks, and each timed collective (the views result's `.communication`,
`.imbalance` and `.collectives`, views/ranks.py). Labels, units, directions and definitions come
from the views' declarations (`views.registry.rank_figures()`); against a baseline each figure
shows its change, matched by phase and rank (role, collective).
"""
from __future__ import annotations

import json
from typing import Any, Optional

import pandas as pd

from reports.html_figures import BASELINE, BASELINE_COLOR, LEVEL_COLORS, plot_layout
from reports.html_tables import NOT_IN_BASELINE, delta_cell, figure_format, html_table
from reports.html_text import esc, is_missing, numbers, plot_text
from views import registry

ANCHOR = "tp"
# (key columns, figure columns) of each table; the keys say where a row is, the figures what it shows
COMMUNICATION = (("phase", "rank"), ("compute_ns", "comm_ns", "comm_share_pct", "exposed_comm_ns",
                                     "comm_wait_ns", "comm_transfer_ns", "comm_bytes", "bus_gbps",
                                     "collectives"))
IMBALANCE = (("phase", "role"), ("min_rank_time_ns", "max_rank_time_ns", "mean_rank_time_ns",
                                 "imbalance"))
COLLECTIVES = (("phase", "role", "after", "rank"), ("comm_bytes", "comm_samples", "comm_ns",
                                                   "comm_wait_ns", "comm_transfer_ns", "bus_gbps"))
KEY_HEADINGS = {"phase": "phase", "rank": "rank", "role": "role",
                "after": ("call", "where the collective is called: after this role (the built-in "
                          "workload), or the module it is called in and its order there (a program)")}
# How each table's collectives were timed: the run's tags (profiler/run/distributed.py writes them).
TAG_WORDS = (("tp", "ranks"), ("rank_source", "ranks found from"), ("comm_time", "communication"),
             ("comm_calls", "calls timed"))


def has_ranks(data) -> bool:
    return any(not getattr(data, name).empty for name in ("communication", "imbalance", "collectives"))


def tags_of(run: dict) -> dict:
    tags = run.get("tags") or {}
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            return {}
    return tags if isinstance(tags, dict) else {}


def _key_text(column: str, value: Any) -> str:
    if is_missing(value):
        return "\u2014"
    return f"rank {int(value)}" if column == "rank" else str(value)


def rank_table(frame: pd.DataFrame, spec: tuple, base: Optional[pd.DataFrame], cls: str,
               extra: Optional[list] = None) -> str:
    """One row per key (phase and rank, ...): each declared figure, and its change against the
    baseline's row of the same key. `extra`: (heading, column, text) columns after the figures."""
    if frame is None or frame.empty:
        return ""
    keys, columns = spec
    declared = registry.rank_figures()
    figures = [declared[c] for c in columns if c in frame.columns]
    compare = base is not None
    lookup = {}
    if compare and not base.empty:
        lookup = {tuple(_key_text(k, r.get(k)) for k in keys): r for _, r in base.iterrows()}
    headers = [KEY_HEADINGS.get(k, k) for k in keys] + [(f.label, f.definition) for f in figures]
    headers += [(heading, "") for heading, _, _ in extra or []]
    rows = []
    for _, row in frame.iterrows():
        key = tuple(_key_text(k, row.get(k)) for k in keys)
        before = lookup.get(key)
        cells = [esc(k) for k in key]
        for figure in figures:
            old = before.get(figure.column) if before is not None else NOT_IN_BASELINE
            cells.append(delta_cell(figure.column, row.get(figure.column), old, figure_format(figure), compare))
        cells += [esc(text(row.get(column))) for _, column, text in extra or []]
        rows.append(cells)
    return html_table(headers, rows, f"ranks {cls}", sticky=len(keys) if len(keys) <= 2 else 0)


# The stacked bars of the chart: (figure column, colour); comm_ns = transfer + wait
CHART = (("compute_ns", LEVEL_COLORS[2]), ("comm_transfer_ns", "#f58518"), ("comm_wait_ns", "#e45756"))


def fig_ranks(comm: pd.DataFrame, base: Optional[pd.DataFrame] = None) -> Optional[dict]:
    """Per phase and rank, its compute, and its communication split into transfer and wait,
    stacked (µs); against a baseline, a dash at the baseline's total for the same phase and rank."""
    if comm is None or comm.empty:
        return None
    declared = registry.rank_figures()
    labels = [plot_text(f"{p} \u00b7 rank {int(r)}") for p, r in zip(comm["phase"], comm["rank"])]
    phases = [f"{p}|" for p in comm["phase"]]  # a click shows the phase's kernels
    traces = [{"type": "bar", "name": plot_text(declared[column].label), "x": labels,
               "y": [None if is_missing(v) else v / 1e3 for v in numbers(comm, column)],
               "customdata": phases, "marker": {"color": color},
               "hovertemplate": f"%{{x}}<br>{plot_text(declared[column].label)}: %{{y:.4g}} µs<extra></extra>"}
              for column, color in CHART]
    if base is not None and not base.empty:
        totals = {(p, _key_text("rank", r)): c + m for p, r, c, m in
                  zip(base["phase"], base["rank"], numbers(base, "compute_ns"), numbers(base, "comm_ns"))}
        values = [totals.get((p, _key_text("rank", r))) for p, r in zip(comm["phase"], comm["rank"])]
        traces.append({"type": "scatter", "mode": "markers", "name": f"{BASELINE} compute + comm",
                       "x": labels, "y": [None if v is None or is_missing(v) else v / 1e3 for v in values],
                       "customdata": phases,
                       "marker": {"symbol": "line-ew-open", "size": 30, "color": BASELINE_COLOR,
                                  "line": {"width": 3, "color": BASELINE_COLOR}},
                       "hovertemplate": "%{x}<br>baseline compute + comm: %{y:.4g} µs<extra></extra>"})
    return {"data": traces, "layout": plot_layout(
        "Compute and communication per phase and rank (communication: transfer, then waiting for a "
        "slower rank)", 380, barmode="stack", yaxis={"title": {"text": "µs"}})}


def _how_measured(run: dict) -> str:
    tags = tags_of(run)
    shown = [f"{words}: {tags[key]}" for key, words in TAG_WORDS if tags.get(key)]
    return "; ".join(shown) if shown else "the run's tags do not say how communication was measured"


def tp_body(data, base=None) -> tuple[str, list, str]:
    """(lead, figures, body) of the tensor-parallel section of `data` (a ReportInput), against
    `base`."""
    def of(report, name):
        return None if report is None else getattr(report, name)

    lead = ("Every rank's kernels were profiled by ncu; collectives cannot be replayed on one rank "
            "while its peers wait, so they were timed in a run of the same program without ncu "
            "and merged per rank. Time shares are of each rank's own time. "
            f"How this run was measured: {_how_measured(data.run)}.")
    if base is not None:
        lead += f" Baseline: {_how_measured(base.run)}."
    if data.tokens:
        lead += " Times here are per call and phase, not per token."
    source = lambda v: "" if is_missing(v) else str(v)  # noqa: E731
    body = ""
    if not data.communication.empty:
        body += ("<h3>Compute and communication per phase and rank</h3>"
                 + rank_table(data.communication, COMMUNICATION, of(base, "communication"), "comm"))
    if not data.imbalance.empty:
        rank = lambda v: "" if is_missing(v) else f"rank {int(v)}"  # noqa: E731
        body += ("<h3>Imbalance between ranks, per phase and role</h3>"
                 + rank_table(data.imbalance, IMBALANCE, of(base, "imbalance"), "imbalance",
                              [("slowest rank", "slowest_rank", rank), ("fastest rank", "fastest_rank", rank)]))
    if not data.collectives.empty:
        body += ("<h3>Collectives</h3><p>Each collective of a profiled layer per rank: its time is "
                 "the median over the calls timed, transfer the fastest rank's time for the same "
                 "call, wait the rest.</p>"
                 + rank_table(data.collectives, COLLECTIVES, of(base, "collectives"), "collectives",
                              [("timed by", "time_source", source)]))
    return lead, [fig_ranks(data.communication, of(base, "communication"))], body
