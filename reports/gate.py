"""`smlens gate`: the views' figures of baseline and current runs compared under rules; a verdict.

Input is the per-kernel figure table of each run (`views.registry.compute_views(kernels).kernels`),
a few runs of the baseline and a few of the current build. For each rule (`reports.gate_rules`) the
kernels of every run are grouped (by default per phase, role and kernel family) and reduced to one
figure per group and run by the views' own rule (views/grouping.py) and the catalog's declaration
of the figure: a sum for extensive figures (time, DRAM bytes, ops), a ratio of sums for ratios
(fill), a time-weighted mean for the others, the value holding the most time for a text figure (a
top stall: the largest of the group's stall means); n/a when one kernel of the group lacks it or
holds a value outside its physical range. One run is then one sample.

A group regresses when its median moves in the rule's worse direction by at least the rule's
relative threshold *and* its absolute minimum effect, and, with several runs on each side, when the
move is also significant: a one-sided Mann-Whitney U test (exact; `reports.gate_stats` says why this
test) at the rule's alpha. When the run counts cannot reach that alpha at all (one run each; 2 vs 2
gives at best p = 0.17), the threshold alone decides, and the result says so.

Exit codes: 0 no regression, 1 regression, 2 the gate could not judge: a figure a rule needs is
`n/a` on one side only, a validation of the view behind a compared figure failed (docs/VIEWS.md) on
one side, a grouping column is missing, a side has no runs or no kernels. Could-not-judge wins
over regression: a figure that failed its own validation cannot convict anyone, and a human must
look. A validation that fails on both sides for the same group is a standing mismatch of that
kernel (seen: V4 on the batch-1 decode o_proj GEMM of every H200 run, achieved occupancy 22 %
over a theoretical 18.75 %): the figure is computed the same way on both sides, so the gate
compares it and warns (`on_validation_fail = "strict"` refuses instead).
Groups and kernels present on one side only (a library picked another kernel) are reported, never
an error; the per-role time rule still gates what the swap cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from reports.formatting import is_missing
from reports.gate_rules import (DEFAULT_RULES, GROUP_BY, Rule, RulesError, load_rules, parse_rules)
from reports.gate_stats import mann_whitney_u, smallest_p_value
from views import registry
from views.catalog import ARGMAX, MEAN, MODE, RATIO, SUM
from views.grouping import GroupSpec

__all__ = ["DEFAULT_RULES", "GROUP_BY", "Rule", "RulesError", "load_rules",
           "parse_rules", "Run", "Comparison", "GateResult", "run_gate", "compare_rule",
           "kernel_changes", "cannot_judge", "describe_method",
           "EXIT_PASS", "EXIT_REGRESSION", "EXIT_CANNOT_JUDGE"]

EXIT_PASS, EXIT_REGRESSION, EXIT_CANNOT_JUDGE = 0, 1, 2
UNKNOWN = "unknown"  # the group key of a kernel whose phase, role or family is null


@dataclass(frozen=True)
class Run:
    """One run's per-kernel figure table, with the label the output names it by."""

    label: str
    kernels: pd.DataFrame


# ---- per-run reduction -------------------------------------------------------------------------

@dataclass
class GroupFigure:
    """One group of kernels in one run, reduced under one rule."""

    value: object  # the figure (float, NaN when n/a; text or None for text figures)
    time_ns: float
    kernels: int
    failed: dict  # view -> (kernels whose validation failed, the first failure's detail)
    na_views: dict  # view -> detail, for views whose validation is n/a on every kernel of the group


def _group_indices(frame: pd.DataFrame, by: Sequence[str]) -> dict[tuple, np.ndarray]:
    """{(phase, role, ...): row positions}. Factorised per column, never cast row by row to text:
    a 100,000-kernel run groups in milliseconds. Null keys read as `unknown`."""
    if not len(frame):
        return {}
    codes, labels = [], []
    for column in by:
        code, uniques = pd.factorize(frame[column], use_na_sentinel=True)
        names = [str(u) for u in uniques] + [UNKNOWN]
        codes.append(np.where(code < 0, len(names) - 1, code))
        labels.append(names)
    combined = np.ravel_multi_index(codes, [len(names) for names in labels])
    uniques, inverse = np.unique(combined, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniques)))[:-1]
    groups: dict[tuple, np.ndarray] = {}
    for flat, rows in zip(uniques, np.split(order, bounds)):
        key = tuple(names[i] for names, i in zip(labels, np.unravel_index(flat, [len(n) for n in labels])))
        # values that print alike (1 and "1"; "unknown" and a null) make one group
        groups[key] = np.sort(np.concatenate([groups[key], rows])) if key in groups else rows
    return dict(sorted(groups.items()))


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float) if name in frame \
        else np.full(len(frame), np.nan)


def _is(frame: pd.DataFrame, column: str, value: str) -> np.ndarray:
    return (frame[column] == value).to_numpy(dtype=bool, na_value=False)


GATE_GROUP = "gate_group"  # the column that numbers the rule's groups for views.grouping
GROUPED = (MEAN, SUM, RATIO, MODE, ARGMAX)  # the catalog's aggregates that combine over a group


def group_spec(rule: Rule) -> GroupSpec:
    """How the rule's figure combines over a group: the catalog's declaration (registry.spec_of),
    or the rule's own `aggregate`, or for a column no view declares (or one declared per kernel
    only) a time-weighted mean."""
    declared = rule.declared
    if rule.aggregate is None and declared is not None and declared.aggregate in GROUPED:
        return registry.spec_of([declared])
    how = rule.how
    return GroupSpec(means=[rule.figure] if how == "mean" else [], sums=[rule.figure] if how == "sum" else [],
                     modes={rule.figure: None} if how == "mode" else {})


def _reduce(frame: pd.DataFrame, rule: Rule, groups: dict[tuple, np.ndarray]) -> dict[tuple, GroupFigure]:
    """Each group's figure and time under the views' own grouping rule (views/grouping.py, by
    way of registry.group_figures: time-weighted, a figure one kernel lacks is n/a for the
    group), with its kernels' validation failures."""
    codes = np.zeros(len(frame), dtype=np.int64)
    for number, rows in enumerate(groups.values()):
        codes[rows] = number
    spec = group_spec(rule)
    combined = registry.group_figures(frame.assign(**{GATE_GROUP: codes}), spec, [GATE_GROUP])
    combined = combined.set_index(GATE_GROUP)
    views = [v for v in rule.checked_views if f"validation_{v}" in frame]
    # a view fails this figure where its cross-checks fail or the figure is out of its bounds
    failing = {v: registry.failed_for(frame, v, rule.figure) for v in views}
    not_applicable = {v: _is(frame, f"validation_{v}", "n/a") for v in views}

    def detail(view: str, row: int) -> str:
        column = f"validation_detail_{view}"
        value = frame[column].iat[row] if column in frame else ""
        return "" if is_missing(value) else str(value)

    def figure(number: int, column: str, missing: object) -> object:
        value = combined.at[number, column] if number in combined.index and column in combined else missing
        return missing if is_missing(value) else value

    text = rule.how == "mode"
    out = {}
    for number, (key, rows) in enumerate(groups.items()):
        value = figure(number, rule.figure, None if text else math.nan)
        value = value if text or value is None else float(value)
        failed, na_views = {}, {}
        for view in views:
            bad = rows[failing[view][rows]]
            if len(bad):
                failed[view] = (len(bad), detail(view, int(bad[0])))
            if not_applicable[view][rows].all():
                na_views[view] = detail(view, int(rows[0]))
        out[key] = GroupFigure(value, float(figure(number, "time_ns", math.nan)), len(rows), failed, na_views)
    return out


# ---- comparison -------------------------------------------------------------------------------

@dataclass
class Comparison:
    """One rule on one group: the samples, the change, the test and what was decided."""

    rule: Rule
    group: dict[str, str]
    status: str  # regression, improved, pass, noise, n/a, appeared, disappeared, small, cannot judge
    baseline: list = field(default_factory=list)  # one figure per baseline run holding the group
    current: list = field(default_factory=list)
    baseline_center: object = None  # median (numbers) or the value (text)
    current_center: object = None
    change: float | None = None  # current - baseline, in the figure's unit
    change_pct: float | None = None
    p_value: float | None = None
    test: str = ""  # how it was decided, e.g. "Mann-Whitney U exact, p=0.014" or "threshold only: 1 vs 1 run"
    note: str = ""
    time_share_pct: float | None = None

    @property
    def group_label(self) -> str:
        return "/".join(self.group.values())

    def to_json(self) -> dict:
        return {
            "rule": self.rule.label, "figure": self.rule.figure, "worse": self.rule.direction,
            "group": self.group, "status": self.status,
            "baseline": [_json_value(v) for v in self.baseline],
            "current": [_json_value(v) for v in self.current],
            "baseline_median": _json_value(self.baseline_center),
            "current_median": _json_value(self.current_center),
            "change": _json_value(self.change), "change_pct": _json_value(self.change_pct),
            "relative_pct_threshold": self.rule.relative_pct, "min_effect": self.rule.min_effect,
            "p_value": _json_value(self.p_value), "alpha": self.rule.alpha,
            "test": self.test, "note": self.note,
            "time_share_pct": _json_value(self.time_share_pct),
        }


def _json_value(value: object) -> object:
    if isinstance(value, (float, np.floating)):  # NaN and the infinite change from 0: null
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


@dataclass
class GateResult:
    verdict: str  # "pass", "regression", "could not judge"
    exit_code: int
    comparisons: list[Comparison]
    problems: list[str]  # why the gate could not judge; each names run, group, figure or view
    warnings: list[str]
    appeared: list[dict]  # kernels present only in the current runs: phase, role, kernel_name, ...
    disappeared: list[dict]
    baseline_runs: list[str]
    current_runs: list[str]
    method: str  # one sentence: what decided

    def by_status(self, *statuses: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.status in statuses]

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict, "exit_code": self.exit_code, "method": self.method,
            "baseline_runs": self.baseline_runs, "current_runs": self.current_runs,
            "problems": self.problems, "warnings": self.warnings,
            "regressions": len(self.by_status("regression")),
            "appeared": self.appeared, "disappeared": self.disappeared,
            "comparisons": [c.to_json() for c in self.comparisons],
        }


def describe_method(n_baseline: int, n_current: int, alpha: float = 0.05) -> str:
    """The sentence the output opens with: what decides at these run counts."""
    runs = f"{n_baseline} baseline vs {n_current} current run{'s' if n_current != 1 else ''}"
    if n_baseline == 1 and n_current == 1:
        return (f"{runs}: the threshold alone decides (a difference cannot be tested for "
                "significance with one run per side; profile with --repeat 3 or more).")
    floor = smallest_p_value(n_baseline, n_current)
    if floor > alpha:
        return (f"{runs}: the threshold alone decides (the smallest p-value these run counts can "
                f"give is {floor:.2f} > alpha {alpha:g}; use at least 3 runs per side).")
    return (f"{runs}: a change must pass the threshold and a one-sided Mann-Whitney U test "
            f"(exact, per-run figures, alpha {alpha:g}).")


def _numeric_comparison(rule: Rule, comp: Comparison, base: list[float], cur: list[float]) -> None:
    """Decides `comp` from the per-run figures; its centers (the medians) are already set."""
    b, c = comp.baseline_center, comp.current_center
    comp.change = c - b
    comp.change_pct = (c - b) / abs(b) * 100 if b != 0 else (math.inf if c != b else 0.0)
    direction = rule.direction

    def passes_threshold(effect: float) -> bool:
        relative = abs(effect) / abs(b) * 100 if b != 0 else math.inf
        return effect > 0 and effect >= rule.min_effect and relative >= rule.relative_pct

    worse_effect = {"higher": c - b, "lower": b - c, "either": abs(c - b)}[direction]
    better_effect = {"higher": b - c, "lower": c - b, "either": 0.0}[direction]
    worse, better = passes_threshold(worse_effect), passes_threshold(better_effect)

    floor = smallest_p_value(len(base), len(cur), direction)
    threshold_only = rule.statistic == "threshold" or floor > rule.alpha
    if threshold_only:
        why = "rule says so" if rule.statistic == "threshold" else \
            f"{len(base)} vs {len(cur)} run{'s' if len(cur) != 1 else ''}"
        comp.test = f"threshold only ({why})"
        significant = True
    else:
        test_direction = direction if worse or not better else \
            {"higher": "lower", "lower": "higher", "either": "either"}[direction]
        result = mann_whitney_u(base, cur, test_direction)
        comp.p_value = result.p_value
        comp.test = f"Mann-Whitney U {result.method}, p={result.p_value:.3g}"
        significant = result.p_value <= rule.alpha
    if worse:
        comp.status = "regression" if significant else "noise"
        if not significant:
            comp.note = f"past the threshold but not significant (p={comp.p_value:.3g} > {rule.alpha:g})"
    elif better and significant:
        comp.status = "improved"
    else:
        comp.status = "pass"


def _most_common(values: list[str]) -> str:
    return max(sorted(set(values)), key=values.count)  # ties: the first in sorted order


def _text_comparison(comp: Comparison, base: list[str], cur: list[str]) -> None:
    comp.baseline_center, comp.current_center = _most_common(base), _most_common(cur)
    comp.test = "text figure: changed when no current run shows a baseline value"
    # a value that flips between runs on one side is noise, not a change
    comp.status = "regression" if not set(base) & set(cur) else "pass"


class _Problems:
    """Could-not-judge reasons of one rule, gathered per cause so that 60 groups lacking one
    metric make one line, not 60."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.causes: dict[str, list[str]] = {}

    def add(self, cause: str, group_label: str) -> None:
        self.causes.setdefault(cause, []).append(group_label)

    def lines(self) -> list[str]:
        out = []
        for cause, groups in self.causes.items():
            shown = ", ".join(groups[:3]) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")
            out.append(f"{self.rule.label}: {cause} in {len(groups)} group"
                       f"{'s' if len(groups) != 1 else ''} ({shown})")
        return out


def _na_cause(rule: Rule, side: str, figures: list[GroupFigure], other: list[GroupFigure]) -> str:
    """`fill is n/a on the current side only (V2 needs ...)`: the views n/a on this side for a
    reason the other side does not share say why (usually a metric the capture lacks)."""
    na_here: dict[str, str] = {}
    for figure in figures:
        for view, detail in figure.na_views.items():
            na_here.setdefault(view, detail)
    shared = {(view, detail) for figure in other for view, detail in figure.na_views.items()}
    why = [f"{view} {detail}" for view, detail in na_here.items()
           if detail and (view, detail) not in shared]
    return f"{rule.figure} is n/a on the {side} side only" + (f" ({'; '.join(why)})" if why else "")


class _Failure(NamedTuple):
    """A view's validation failing on some kernels of one group in one run."""

    view: str
    side: str  # "baseline" or "current"
    cause: str  # "validation V6 failed on baseline run small": the could-not-judge line's cause
    failed_kernels: int
    kernels: int
    detail: str  # the first failing kernel's discrepancy


def _validation_failures(base: list[GroupFigure], cur: list[GroupFigure],
                         labels: dict[str, list[str]]) -> list[_Failure]:
    return [_Failure(view, side, f"validation {view} failed on {side} run {label}", count, figure.kernels,
                     detail)
            for side, figures in (("baseline", base), ("current", cur))
            for label, figure in zip(labels[side], figures)
            for view, (count, detail) in figure.failed.items()]


def _blocked_by_validation(rule: Rule, comp: Comparison, failures: list[_Failure], runs: int,
                           problems: _Problems, warnings: list[str]) -> bool:
    """Whether the failed validations keep the gate from judging `comp` (then it says why);
    failures it compares anyway become one warning per view."""
    sides: dict[str, set[str]] = {}
    for failure in failures:
        sides.setdefault(failure.view, set()).add(failure.side)
    # A view failing on one side only means that side's measurement is suspect. Failing on
    # both sides it is a standing mismatch of that kernel, the same in both: like for like.
    one_sided = [f for f in failures if len(sides[f.view]) == 1]
    blocking = failures if rule.on_validation_fail == "strict" else \
        one_sided if rule.on_validation_fail == "error" else []
    if blocking:
        comp.status = "cannot judge"
        comp.note = "; ".join(f"{f.cause} ({f.failed_kernels} of {f.kernels} kernels: {f.detail})"
                              for f in failures)
        for failure in blocking:
            problems.add(failure.cause, comp.group_label)
        return True
    for view, view_sides in sides.items():  # one line per view: how many runs, and the first discrepancy
        failed = [f for f in failures if f.view == view]
        where = "on both sides, compared like for like" if len(view_sides) == 2 else \
            f"on the {next(iter(view_sides))} side, compared anyway"
        warnings.append(f"{rule.label}: {comp.group_label}: validation {view} fails {where} "
                        f"({len(failed)} of {runs} runs; {failed[0].detail})")
    return False


def _compare_group(rule: Rule, comp: Comparison, base: list[GroupFigure], cur: list[GroupFigure],
                   labels: dict[str, list[str]], problems: _Problems, warnings: list[str]) -> None:
    """Decides `comp`, whose per-run figures (`baseline`, `current`) are set."""
    base_ok = [v for v in comp.baseline if not is_missing(v)]
    cur_ok = [v for v in comp.current if not is_missing(v)]
    if rule.how != "mode":
        comp.baseline_center = float(np.median(base_ok)) if base_ok else None
        comp.current_center = float(np.median(cur_ok)) if cur_ok else None
    if not base_ok and not cur_ok:
        comp.status, comp.note = "n/a", f"{rule.figure} is n/a on both sides"
        return
    # before the n/a of one side: a figure out of its physical range is n/a in its group (the
    # views' rule), and the failed validation says why
    failures = _validation_failures(base, cur, labels)
    if failures and rule.on_validation_fail != "ignore" and \
            _blocked_by_validation(rule, comp, failures, len(base) + len(cur), problems, warnings):
        return
    if not base_ok or not cur_ok:
        side = "baseline" if not base_ok else "current"
        cause = _na_cause(rule, side, base if side == "baseline" else cur,
                          cur if side == "baseline" else base)
        comp.status, comp.note = "cannot judge", cause
        problems.add(cause, comp.group_label)
        return
    if rule.how == "mode":
        _text_comparison(comp, [str(v) for v in base_ok], [str(v) for v in cur_ok])
    else:
        _numeric_comparison(rule, comp, [float(v) for v in base_ok], [float(v) for v in cur_ok])


def compare_rule(rule: Rule, baseline: Sequence[Run], current: Sequence[Run],
                 problems: list[str], warnings: list[str], cache: dict | None = None) -> list[Comparison]:
    """Every group of one rule, compared; could-not-judge reasons go into `problems`."""
    for side, runs in (("baseline", baseline), ("current", current)):
        for run in runs:
            missing = [col for col in rule.by if col not in run.kernels]
            if missing:
                problems.append(f"{rule.label}: {side} run {run.label} has no "
                                f"{', '.join(missing)} column to group by")
                return []
    cache = {} if cache is None else cache

    def grouped(run: Run) -> dict[tuple, np.ndarray]:
        key = (id(run.kernels), rule.by)  # the rules share groupings: each is made once per run
        if key not in cache:
            cache[key] = _group_indices(run.kernels, rule.by)
        return cache[key]

    reduced = {"baseline": [_reduce(run.kernels, rule, grouped(run)) for run in baseline],
               "current": [_reduce(run.kernels, rule, grouped(run)) for run in current]}
    total_time = float(np.median([sum(g.time_ns for g in groups.values() if np.isfinite(g.time_ns))
                                  for groups in reduced["baseline"]]))
    found = _Problems(rule)
    comparisons: list[Comparison] = []
    for key in sorted({k for groups in reduced["baseline"] + reduced["current"] for k in groups}):
        base = [groups[key] for groups in reduced["baseline"] if key in groups]
        cur = [groups[key] for groups in reduced["current"] if key in groups]
        comp = Comparison(rule=rule, group=dict(zip(rule.by, key)), status="pass",
                          baseline=[g.value for g in base], current=[g.value for g in cur])
        comparisons.append(comp)
        labels = {"baseline": [r.label for r, g in zip(baseline, reduced["baseline"]) if key in g],
                  "current": [r.label for r, g in zip(current, reduced["current"]) if key in g]}
        # the larger side's time against the baseline's total: a group that grew is never "small"
        medians = [float(np.median(t)) for t in ([g.time_ns for g in side if np.isfinite(g.time_ns)]
                                                 for side in (base, cur)) if t]
        if medians and total_time > 0:
            comp.time_share_pct = max(medians) / total_time * 100
        if not base or not cur:
            comp.status = "disappeared" if base else "appeared"
            comp.note = f"present in the {'baseline' if base else 'current'} runs only"
            continue
        if comp.time_share_pct is not None and comp.time_share_pct < rule.min_time_share_pct:
            comp.status = "small"
            comp.note = f"{comp.time_share_pct:.2f}% of the time, under {rule.min_time_share_pct:g}%"
            continue
        _compare_group(rule, comp, base, cur, labels, found, warnings)
        partial = [f"in {len(labels[s])} of {len(runs)} {s} runs"
                   for s, runs in (("baseline", baseline), ("current", current))
                   if len(labels[s]) < len(runs)]
        if partial:
            comp.note = "; ".join(filter(None, [comp.note, "present " + ", ".join(partial)]))
    problems += found.lines()
    if rule.required:
        if not any(rule.figure in run.kernels for run in list(baseline) + list(current)):
            problems.append(f"{rule.label}: no run has a {rule.figure} column: check the figure's "
                            "name against `smlens views --format json`")
        elif comparisons and not any(c.status in ("pass", "noise", "improved", "regression",
                                                  "cannot judge") for c in comparisons) \
                and any(c.status == "n/a" for c in comparisons):
            problems.append(f"{rule.label}: {rule.figure} is n/a on both sides in every group: "
                            "the captures lack the metrics of its view")
    return comparisons


def kernel_changes(baseline: Sequence[Run], current: Sequence[Run]) -> tuple[list[dict], list[dict]]:
    """Kernels (by phase, role and name) present in no baseline run / in no current run."""
    def launches(runs: Sequence[Run]) -> dict[tuple, tuple[int, float]]:
        found: dict[tuple, list[tuple[int, float]]] = {}
        for run in runs:
            frame = run.kernels
            if not all(c in frame for c in ("phase", "role", "kernel_name")):
                continue
            time = _column(frame, "time_ns")
            for key, rows in _group_indices(frame, ("phase", "role", "kernel_name")).items():
                found.setdefault(key, []).append((len(rows), float(np.nansum(time[rows]))))
        return {k: (int(np.median([n for n, _ in v])), float(np.median([t for _, t in v])))
                for k, v in found.items()}

    base, cur = launches(baseline), launches(current)

    def rows(keys: Iterable[tuple], source: dict) -> list[dict]:
        return [{"phase": k[0], "role": k[1], "kernel_name": k[2], "launches": source[k][0],
                 "time_ns": source[k][1]} for k in sorted(keys)]

    return rows(set(cur) - set(base), cur), rows(set(base) - set(cur), base)


def run_gate(baseline: Sequence[Run], current: Sequence[Run],
             rules: Sequence[Rule] | None = None) -> GateResult:
    """Compare the current runs against the baseline runs under `rules` (DEFAULT_RULES if None)."""
    rules = tuple(rules) if rules is not None else DEFAULT_RULES
    problems: list[str] = []
    warnings: list[str] = []
    for side, runs in (("baseline", baseline), ("current", current)):
        if not runs:
            problems.append(f"no {side} run given")
        for run in runs:
            if run.kernels is None or len(run.kernels) == 0:
                problems.append(f"{side} run {run.label} has no kernels")
    comparisons: list[Comparison] = []
    appeared: list[dict] = []
    disappeared: list[dict] = []
    if not problems:
        cache: dict = {}
        for rule in rules:
            comparisons += compare_rule(rule, baseline, current, problems, warnings, cache)
        appeared, disappeared = kernel_changes(baseline, current)
        if comparisons and all(c.status in ("appeared", "disappeared") for c in comparisons):
            problems.append("the baseline and current runs have no kernel group in common (phase, "
                            "role and kernel): nothing was compared; gate runs of one workload")
    alpha = min((r.alpha for r in rules), default=0.05)
    method = describe_method(len(baseline), len(current), alpha) if baseline and current else ""
    if problems:
        verdict, code = "could not judge", EXIT_CANNOT_JUDGE
    elif any(c.status == "regression" for c in comparisons):
        verdict, code = "regression", EXIT_REGRESSION
    else:
        verdict, code = "pass", EXIT_PASS
    return GateResult(verdict=verdict, exit_code=code, comparisons=comparisons, problems=problems,
                      warnings=warnings, appeared=appeared, disappeared=disappeared,
                      baseline_runs=[r.label for r in baseline],
                      current_runs=[r.label for r in current], method=method)


def cannot_judge(problem: str, baseline_labels: Sequence[str] = (),
                 current_labels: Sequence[str] = ()) -> GateResult:
    """The result when the inputs themselves could not be read (missing run, broken file)."""
    return GateResult(verdict="could not judge", exit_code=EXIT_CANNOT_JUDGE, comparisons=[],
                      problems=[problem], warnings=[], appeared=[], disappeared=[],
                      baseline_runs=list(baseline_labels), current_runs=list(current_labels),
                      method="")
