"""Two runs side by side: the comparison verdict joined to its inputs, and times per token.

The matching of kernels and the verdict are pure and live in views/comparison.py (the kernel page
matches one kernel the same way); this module hands the verdict the gate's statistics and each
run's tokens.

Per token: each phase's figures that add up (time, bytes, FLOPs: the catalog's SUM figures) are
divided by the tokens the phase processed, the M of its GEMMs (one layer, one step: what smlens
profiles), else the run's batch and prompt tags.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np
import pandas as pd

from rich.console import Console
from rich.text import Text

from reports.comparison_text import explanation_text, headline_text, time_text
from reports.gate_stats import mann_whitney_u
from reports.tables import Column, Prose, Rows, fit
from views import registry
from views.comparison import (ADDED, GAIN, KEY, MATCHED, NOISE, REGRESSION, REMOVED,  # noqa: F401 (one place)
                              Change, ComparisonVerdict, column as _column, comparison_verdict,
                              kernel_baseline_time, kernel_changes, match_keys, number as _number)


def compare_runs(current: pd.DataFrame, baseline: pd.DataFrame, current_run: Optional[dict] = None,
                 base_run: Optional[dict] = None, current_repeats=(), base_repeats=(),
                 differences=()) -> ComparisonVerdict:
    """The comparison verdict of two views' kernels tables (and each side's repeats, for the noise
    floor), per token where both runs' tokens are known."""
    tokens = tokens_per_phase(current, current_run or {})
    base_tokens = tokens_per_phase(baseline, base_run or {})
    return comparison_verdict(current, baseline, current_repeats, base_repeats,
                              tokens if not missing_tokens(current, tokens) else None,
                              base_tokens if not missing_tokens(baseline, base_tokens) else None,
                              registry.figures(), mann_whitney_u, differences)

# --- per token --------------------------------------------------------------------------------------

def tokens_per_phase(kernels: pd.DataFrame, run: dict) -> dict[str, tuple[float, str]]:
    """phase -> (tokens one profiled layer step processes, where the number comes from)."""
    out: dict[str, tuple[float, str]] = {}
    gemm = _column(kernels, "kind") == "gemm"
    m = _number(kernels, "shape_m")
    phases = _column(kernels, "phase")
    for phase in dict.fromkeys(phases):
        values = m[(phases == phase) & gemm].dropna()
        if len(values):
            out[phase] = (float(values.median()), "the M of its GEMMs")
    tags = run.get("tags") or {}
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            tags = {}
    try:
        batch = float(tags.get("batch"))
        prompt = float(tags.get("prompt", "nan"))
    except (TypeError, ValueError):
        return out
    for phase in dict.fromkeys(phases):
        if phase in out or phase == "other":
            continue
        if phase == "decode":
            out[phase] = (batch, "the run's batch tag")
        elif "prefill" in str(phase) and not np.isnan(prompt):
            out[phase] = (batch * prompt, "the run's batch x prompt tags")
    return out


def missing_tokens(kernels: pd.DataFrame, tokens: dict) -> list[str]:
    """The phases (setup aside) whose token count is unknown."""
    return [p for p in dict.fromkeys(_column(kernels, "phase")) if p not in tokens and p != "other"]


def per_token(frame: Optional[pd.DataFrame], tokens: dict, columns: list[str]) -> Optional[pd.DataFrame]:
    """`frame` with `columns` divided by its phase's tokens (rows of other phases: NaN)."""
    if frame is None or frame.empty or "phase" not in frame.columns:
        return frame
    divisor = frame["phase"].astype(object).map(lambda p: tokens[p][0] if p in tokens else np.nan).astype(float)
    out = frame.copy()
    for column in columns:
        if column in out.columns:
            out[column] = pd.to_numeric(out[column], errors="coerce") / divisor.to_numpy()
    return out


# --- the comparison verdict, in the terminal ---------------------------------------------------------

# A change's colour: worse, better, or within the run-to-run noise (grey, neither)
SIGNIFICANCE_STYLES = {REGRESSION: "red", GAIN: "green", NOISE: "dim"}


def change_line(change: Change) -> str:
    """`▲ +1.09 ms (+672 %) cold_prefill · gate_up_proj · cublaslt_nvjet: tokens (M) 512 → 4096`."""
    sign = "\u25b2" if change.delta_ns > 0 else "\u25bc"
    pct = f" ({change.change_pct:+.1f} %)" if change.change_pct == change.change_pct else ""
    noise = " within the noise" if change.significance == NOISE else ""
    floor = f" (floor {time_text(change.noise_ns)})" if change.noise_ns == change.noise_ns else ""
    return (f"{sign} {'+' if change.delta_ns > 0 else chr(0x2212)}{time_text(abs(change.delta_ns))}{pct}{noise}"
            f"{floor if noise else ''} {change.label}: {explanation_text(change)}")


def phase_columns(verdict: ComparisonVerdict) -> tuple[Rows, list[Column]]:
    """Each phase's time against the baseline's, and per token where both runs' tokens are known."""
    rows = Rows()
    cells: dict[str, list] = {k: [] for k in ("time", "baseline", "change", "change %", "per token",
                                               "baseline per token", "per token change %")}
    for p in verdict.phases:
        rows.row(p.phase, SIGNIFICANCE_STYLES.get(p.significance) if p.significance != NOISE else None)
        for key, value in (("time", time_text(p.time_ns)), ("baseline", time_text(p.base_time_ns)),
                           ("change", _signed(p.delta_ns)), ("change %", _pct(p.change_pct)),
                           ("per token", time_text(p.per_token_ns)), ("baseline per token", time_text(p.base_per_token_ns)),
                           ("per token change %", _pct(p.per_token_change_pct))):
            cells[key].append(value)
    per_token = any(p.per_token_ns == p.per_token_ns for p in verdict.phases)
    keys = [k for k in cells if per_token or "per token" not in k]
    return rows, [Column(k, cells[k]) for k in keys]


def _signed(ns: float) -> str:
    if ns != ns:
        return "n/a"
    return ("+" if ns > 0 else "\u2212" if ns < 0 else "") + time_text(abs(ns))


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{value:+.1f}"


def run_name(run: Optional[dict]) -> str:
    """`llama-b1 (run 3f2a9c1e)`, or the id alone."""
    run = run or {}
    return " ".join(str(x) for x in (run.get("name"), f"(run {run['id']})" if run.get("id") else None) if x)


# In a brief answer, the changes beyond the noise alone, this many of each kind
BRIEF_CHANGES = 3


def print_comparison(verdict: ComparisonVerdict, base_run: Optional[dict] = None,
                     console: Optional[Console] = None, width: Optional[int] = None,
                     run: Optional[dict] = None, brief: bool = False) -> None:
    """The comparison verdict: its headline, each phase's change, the largest regressions and
    gains (red, green; grey within the noise). `brief`: only the changes beyond the noise, at most
    BRIEF_CHANGES of each, and how many more were left out."""
    console = console or Console()
    width = width or console.width
    runs = f", {verdict.base_runs} runs" if verdict.base_runs > 1 else ""
    title = f"{run_name(run)} against the baseline" if run else "Against the baseline"
    console.print(Text(f"{title} {run_name(base_run)}{runs}".rstrip(), style="bold"))
    console.print(Prose(headline_text(verdict)))  # the changes it names follow, one a line
    rows, columns = phase_columns(verdict)
    for table in fit("", "phase", rows, columns, width):
        console.print(table)
    for title, changes in (("Largest regressions", verdict.regressions), ("Largest gains", verdict.gains)):
        shown = [c for c in changes if c.significance != NOISE][:BRIEF_CHANGES] if brief else changes
        if shown:
            console.print(Text(title, style="bold"))
            for change in shown:
                console.print(Prose(change_line(change), style=SIGNIFICANCE_STYLES[change.significance]))
        if brief and len(shown) < len(changes):
            quiet = sum(c.significance == NOISE for c in changes)
            louder = len(changes) - len(shown) - quiet
            left = ", ".join(part for part in (f"{quiet} within the noise" if quiet else "",
                                               f"{louder} more beyond it" if louder else "") if part)
            console.print(Prose(f"and {left}" if shown else f"{title}: {left}", style="dim"))
    if verdict.noise is None:
        console.print(Prose("No repeats: pass --baseline more than once (runs of one build) for a noise floor.",
                            style="dim"))
