"""The comparison verdict's sentences (views/comparison.py computes its figures): what explains
each change, the headline and the paragraph, and the verdict's JSON, which carries them."""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Optional

from reports.verdict_text import time_words
from views import registry
from views.common import plain
from views.comparison import ADDED, GAIN, KEY, MATCHED, NOISE, REGRESSION, Change, ComparisonVerdict
from views.gap import STEPS


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def time_text(ns: float) -> str:
    """Nanoseconds in the unit that reads best (the verdict's sentences)."""
    return "n/a" if _missing(ns) else time_words(ns)


def _signed_time(ns: float) -> str:
    return ("+" if ns > 0 else "\u2212" if ns < 0 else "") + time_text(abs(ns))


def _pct(value: float) -> str:
    return "n/a" if _missing(value) or not math.isfinite(value) else f"{value:+.1f} %"


def _figure_words(name: str, before: float, after: float, catalog) -> str:
    figure = catalog.get(name)
    label = figure.label if figure is not None else name
    view = f" ({figure.view})" if figure is not None and figure.view else ""
    unit = figure.unit if figure is not None else ""
    if unit == "%":
        text = f"{before:.3g} % \u2192 {after:.3g} %"
    elif unit == "share":
        text = f"{100 * before:.3g} % \u2192 {100 * after:.3g} %"
    elif unit == "bytes":
        text = f"{before / 1e6:.3g} MB \u2192 {after / 1e6:.3g} MB"
    else:
        text = f"{before:.3g} \u2192 {after:.3g}"
    step = " (a step of the gap)" if name in STEPS else view
    return f"{label} {text}{step}"


def explanation_text(c: Change, catalog: Optional[dict] = None) -> str:
    """What explains a change, in words: `tokens (M) 512 → 4096, tile 176x128x64 → 320x128x64`.
    `catalog`: the figures' labels, units and views (registry.figures(), as the verdict judged by)."""
    why, by = c.why, c.explained_by
    if by == "kernel":
        if c.status == ADDED:
            return f"added ({c.launches} launches)" + (f", in place of {why.replaced}" if why.replaced else "")
        return f"removed ({c.base_launches} launches)" + (f", replaced by {why.replaced}" if why.replaced else "")
    if by == "tokens":
        tile = f", tile {why.tiles[0]} \u2192 {why.tiles[1]}" if why.tiles else ""
        return f"tokens (M) {why.before} \u2192 {why.after}{tile}"
    if by == "tile":
        return f"tile {why.before} \u2192 {why.after}"
    if by == "launches":
        return f"launches {why.before} \u2192 {why.after}"
    if by == "bound":
        return f"bound {why.before} \u2192 {why.after} (V7)"
    if not by:
        return "no figure moved with the time"
    return _figure_words(by, why.before, why.after, registry.figures() if catalog is None else catalog)


def _change_words(c: Change) -> str:
    pct = "" if c.status != MATCHED else f" ({_pct(c.change_pct)})"
    return f"{c.label} {_signed_time(c.delta_ns)}{pct}: {explanation_text(c)}"


def headline_text(v: ComparisonVerdict) -> str:
    """The workload's change, per token, against the noise (and, when no kernel changed beyond
    it, that too): what the terminal and the report print first."""
    return _sentences(v)[0]


def summary_text(v: ComparisonVerdict) -> str:
    """The headline, then the largest changes beyond the noise."""
    return _sentences(v)[1]


def _sentences(v: ComparisonVerdict) -> tuple[str, str]:
    direction = {REGRESSION: "slower", GAIN: "faster"}.get(v.significance, "")
    text = (f"The workload took {time_text(v.time_ns)} against {time_text(v.base_time_ns)}: "
            f"{_signed_time(v.delta_ns)} ({_pct(v.change_pct)})")
    if not _missing(v.per_token_ns) and math.isfinite(v.per_token_ns):
        text += (f", {time_text(v.per_token_ns)} per token against {time_text(v.base_per_token_ns)} "
                 f"({_pct(v.per_token_change_pct)})")
    if v.noise is not None:
        text += (f"; the run-to-run noise over {v.noise.runs} runs is {v.noise.workload_pct:.2g} % of the "
                 f"workload's time and {time_text(v.noise.per_launch_ns)} per kernel launch")
        text += f", so this is {direction}" if direction else ", so this is within the noise"
    elif direction:
        text += f": {direction} (no repeats to measure the run-to-run noise)"
    text += "."
    if v.differences:
        text = "The runs differ: " + "; ".join(v.differences) + ". " + text
    headline = text
    for title, listed in (("Largest regressions", v.regressions), ("Largest gains", v.gains)):
        real = [c for c in listed if c.significance != NOISE]
        if real:
            text += f" {title}: " + "; ".join(_change_words(c) for c in real[:3]) + "."
    if v.noise is not None and not any(c.significance != NOISE for c in v.regressions + v.gains):
        text += " No kernel changed beyond the noise."
        headline = text
    return headline, text


def _change_dict(c: Change) -> dict:
    out = {k: value for k, value in asdict(c).items() if k != "why"}
    return out | {"explanation": explanation_text(c), "label": c.label}


def comparison_document(v: ComparisonVerdict) -> dict:
    """Plain JSON values (NaN as null), with the sentences; the noise floor's per-key spreads as a list."""
    noise = None
    if v.noise is not None:
        noise = {"runs": v.noise.runs, "workload_pct": v.noise.workload_pct,
                 "per_launch_ns": v.noise.per_launch_ns,
                 "keys": [dict(zip(KEY, k), spread_ns=s) for k, s in v.noise.by_key.items()]}
    headline, summary = _sentences(v)
    figures = {"time_ns": v.time_ns, "base_time_ns": v.base_time_ns, "delta_ns": v.delta_ns,
               "change_pct": v.change_pct, "per_token_ns": v.per_token_ns, "base_per_token_ns": v.base_per_token_ns,
               "per_token_change_pct": v.per_token_change_pct, "significance": v.significance,
               "runs": v.runs, "base_runs": v.base_runs, "differences": list(v.differences)}
    return plain({"summary": summary, **figures, "headline": headline, "noise": noise,
                  "phases": [asdict(p) for p in v.phases],
                  "regressions": [_change_dict(c) for c in v.regressions],
                  "gains": [_change_dict(c) for c in v.gains]})
