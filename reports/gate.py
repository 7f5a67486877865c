"""`smlens gate`: rules over the views' figures, statistics over repeated runs, a verdict, an exit code.

Input is the per-kernel figure table of each run (`views.registry.compute_views(kernels).kernels`),
a few runs of the baseline and a few of the current build. For each rule the kernels of every run
are grouped (by default per phase, role and kernel family) and reduced to one figure per group and
run: a sum for extensive figures (time, DRAM bytes, ops), a time-weighted mean for the others.
One run is then one sample.

A group regresses when its median moves in the rule's worse direction by at least the rule's
relative threshold *and* its absolute minimum effect, and, with several runs on each side, when the
move is also significant: a one-sided Mann-Whitney U test (exact; see `reports.gate_stats` for why
this test) at the rule's alpha. When the run counts cannot reach that alpha at all (one run each;
2 vs 2 gives at best p = 0.17), the threshold alone decides, and the result says so.

Exit codes: 0 no regression, 1 regression, 2 the gate could not judge: a figure a rule needs is
`n/a` on one side only, a validation of the view behind a compared figure failed (VIEWS.md), or a
grouping column is missing. Could-not-judge wins over regression: a figure that failed its own
validation cannot convict anyone, and a human must look.
Groups and kernels present on one side only (a library picked another kernel) are reported, never
an error; the per-role time rule still gates what the swap cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from reports.gate_stats import mann_whitney_u, smallest_p_value

GROUP_BY = ("phase", "role", "kernel_family")
WORSE = ("higher", "lower", "either", "changed")
STATISTICS = ("mann-whitney", "threshold")
ON_VALIDATION = ("error", "warn", "ignore")

EXIT_PASS, EXIT_REGRESSION, EXIT_CANNOT_JUDGE = 0, 1, 2


class RulesError(ValueError):
    """A rule file or rule that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Figure:
    """What the gate knows of a figure column: the views whose validations vouch for it, its unit,
    and how launches of one group and run are combined."""

    views: tuple[str, ...]
    unit: str
    aggregate: str  # "sum", "mean" (time-weighted) or "mode" (time-weighted, for text figures)


# Figure columns of ViewsResult.kernels (VIEWS.md). A figure not listed here can still be gated:
# it is averaged (time-weighted) and no validation is checked unless the rule names its `views`.
FIGURES: dict[str, Figure] = {
    "time_ns": Figure(("V1",), "ns", "sum"),
    "sm_active_pct": Figure(("V1",), "%", "mean"),
    "sm_throughput_pct": Figure(("V1",), "%", "mean"),
    "tensor_pipe_pct": Figure(("V2",), "%", "mean"),
    "tensor_ops": Figure(("V2",), "ops", "sum"),
    "mma_path": Figure(("V2",), "", "mode"),
    "fill": Figure(("V2", "V3"), "", "mean"),
    "useful_tensor_pct": Figure(("V2", "V3"), "%", "mean"),
    "achieved_occupancy_pct": Figure(("V4",), "%", "mean"),
    "theoretical_occupancy_pct": Figure(("V4",), "%", "mean"),
    "occupancy_limiter": Figure(("V4",), "", "mode"),
    "waves": Figure(("V5",), "waves", "mean"),
    "wave_efficiency": Figure(("V5",), "", "mean"),
    "sm_coverage": Figure(("V5",), "", "mean"),
    "sm_imbalance": Figure(("V5",), "", "mean"),
    "top_stall": Figure(("V6",), "", "mode"),
    "top_stall_share": Figure(("V6",), "", "mean"),
    "issue_active_pct": Figure(("V6",), "%", "mean"),
    "dram_bytes": Figure(("V7",), "bytes", "sum"),
    "dram_pct": Figure(("V7",), "%", "mean"),
    "l2_hit_pct": Figure(("V7",), "%", "mean"),
    "flops": Figure(("V7",), "flops", "sum"),
    "intensity": Figure(("V7",), "flop/byte", "mean"),
    "kernel_family": Figure(("V8",), "", "mode"),
    "tile": Figure(("V8",), "", "mode"),
}


@dataclass(frozen=True)
class Rule:
    """One gated figure. `relative_pct` and `min_effect` must both be exceeded in the `worse`
    direction (`min_effect` in the figure's own unit); `statistic` says whether several runs must
    also differ significantly (`mann-whitney`) or the threshold alone decides (`threshold`)."""

    figure: str
    worse: str
    relative_pct: float = 10.0
    min_effect: float = 0.0
    statistic: str = "mann-whitney"
    alpha: float = 0.05
    by: tuple[str, ...] = GROUP_BY
    aggregate: str | None = None  # None: the figure's own (FIGURES), else "mean"
    views: tuple[str, ...] | None = None  # None: the figure's own (FIGURES)
    min_time_share_pct: float = 0.5  # groups below this share of the baseline time are not gated
    on_validation_fail: str = "error"
    required: bool = False  # n/a on both sides everywhere: could-not-judge rather than a note
    name: str = ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return f"{self.figure} by {'/'.join(self.by)}" if self.by != GROUP_BY else self.figure

    @property
    def how(self) -> str:
        return self.aggregate or FIGURES.get(self.figure, Figure((), "", "mean")).aggregate

    @property
    def checked_views(self) -> tuple[str, ...]:
        if self.views is not None:
            return self.views
        return FIGURES[self.figure].views if self.figure in FIGURES else ()

    @property
    def unit(self) -> str:
        return FIGURES[self.figure].unit if self.figure in FIGURES else ""


# Chosen against repeated H200 captures of one workload made in separate ncu runs (tests/data/
# h200_runs): run-to-run noise there stays well under these thresholds, while a batch-size change
# or a different kernel moves several figures far past them. Time gets a small absolute floor so a
# 1 us kernel's jitter does not count; counters that do not depend on clocks (fill, waves, DRAM
# bytes) get tighter thresholds than time.
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("time_ns", "higher", relative_pct=10, min_effect=2_000, name="time per kernel family"),
    Rule("time_ns", "higher", relative_pct=10, min_effect=5_000, by=("phase", "role"),
         name="time per role"),
    Rule("useful_tensor_pct", "lower", relative_pct=10, min_effect=2.0),
    Rule("fill", "lower", relative_pct=5, min_effect=0.02),
    Rule("achieved_occupancy_pct", "lower", relative_pct=10, min_effect=5.0),
    Rule("wave_efficiency", "lower", relative_pct=10, min_effect=0.05),
    Rule("dram_bytes", "higher", relative_pct=10, min_effect=1e6),
)


# ---- rules from TOML -------------------------------------------------------------------------

_RULE_KEYS = {"figure", "worse", "relative_pct", "min_effect", "statistic", "alpha", "by",
              "aggregate", "views", "min_time_share_pct", "on_validation_fail", "required", "name"}
_DEFAULT_KEYS = {"alpha", "statistic", "min_time_share_pct", "on_validation_fail", "by",
                 "include_default_rules"}


def _toml_loads(text: str) -> dict:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise RulesError("reading a rules file on Python 3.10 needs the tomli package: "
                             "pip install tomli") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise RulesError(f"not valid TOML: {err}") from None


def _check_rule(rule: Rule, where: str) -> Rule:
    if not rule.figure or not isinstance(rule.figure, str):
        raise RulesError(f"{where}: `figure` must name a figure column, e.g. \"time_ns\"")
    if rule.worse not in WORSE:
        raise RulesError(f"{where}: `worse` must be one of {', '.join(WORSE)}, not {rule.worse!r}")
    if rule.statistic not in STATISTICS:
        raise RulesError(f"{where}: `statistic` must be one of {', '.join(STATISTICS)}, "
                         f"not {rule.statistic!r}")
    if rule.on_validation_fail not in ON_VALIDATION:
        raise RulesError(f"{where}: `on_validation_fail` must be one of {', '.join(ON_VALIDATION)}")
    if rule.aggregate not in (None, "sum", "mean", "mode"):
        raise RulesError(f"{where}: `aggregate` must be sum, mean or mode")
    for key in ("relative_pct", "min_effect", "min_time_share_pct"):
        value = getattr(rule, key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 \
                or math.isnan(value):
            raise RulesError(f"{where}: `{key}` must be a number >= 0")
    if not isinstance(rule.alpha, (int, float)) or not 0 < rule.alpha < 1:
        raise RulesError(f"{where}: `alpha` must lie between 0 and 1, e.g. 0.05")
    if not rule.by or not all(isinstance(col, str) for col in rule.by):
        raise RulesError(f"{where}: `by` must list grouping columns, e.g. [\"phase\", \"role\"]")
    text_figure = rule.how == "mode"
    if text_figure and rule.worse != "changed":
        raise RulesError(f'{where}: {rule.figure} is a text figure: use worse = "changed"')
    if not text_figure and rule.worse == "changed":
        raise RulesError(f"{where}: {rule.figure} is a number: worse must be higher, lower or "
                         "either (or set aggregate = \"mode\" for a text figure)")
    return rule


def parse_rules(document: Mapping) -> tuple[Rule, ...]:
    """Rules from a parsed gate.toml: a `[defaults]` table and `[[rule]]` entries (examples/gate.toml)."""
    unknown = set(document) - {"defaults", "rule"}
    if unknown:
        raise RulesError(f"unknown top-level key(s) {', '.join(sorted(unknown))}: "
                         "expected [defaults] and [[rule]]")
    defaults = dict(document.get("defaults", {}))
    bad = set(defaults) - _DEFAULT_KEYS
    if bad:
        raise RulesError(f"[defaults]: unknown key(s) {', '.join(sorted(bad))}; "
                         f"known: {', '.join(sorted(_DEFAULT_KEYS))}")
    include_defaults = defaults.pop("include_default_rules", "rule" not in document)
    if "by" in defaults:
        defaults["by"] = tuple(defaults["by"])
    entries = document.get("rule", [])
    if not isinstance(entries, list):
        raise RulesError("`rule` must be an array of tables: write [[rule]]")
    rules: list[Rule] = []
    if include_defaults:
        rules.extend(_check_rule(replace(r, **defaults), "[defaults]") for r in DEFAULT_RULES)
    for index, entry in enumerate(entries, 1):
        where = f"rule {index}" + (f" ({entry['figure']})" if "figure" in entry else "")
        bad = set(entry) - _RULE_KEYS
        if bad:
            raise RulesError(f"{where}: unknown key(s) {', '.join(sorted(bad))}; "
                             f"known: {', '.join(sorted(_RULE_KEYS))}")
        if "figure" not in entry or "worse" not in entry:
            raise RulesError(f"{where}: every rule needs `figure` and `worse`")
        values = {**defaults, "required": True, **entry}  # a rule someone wrote must apply
        for key in ("by", "views"):
            if key in values and values[key] is not None:
                values[key] = tuple(values[key])
        rules.append(_check_rule(Rule(**values), where))
    if not rules:
        raise RulesError("no rules: add [[rule]] entries or set include_default_rules = true")
    return tuple(rules)


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise RulesError(f"cannot read rules file {path}: {err.strerror or err}") from None
    try:
        return parse_rules(_toml_loads(text))
    except RulesError as err:
        raise RulesError(f"{path}: {err}") from None


# ---- per-run reduction -------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One run's per-kernel figure table, with the label the output names it by."""

    label: str
    kernels: pd.DataFrame


def _group_keys(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    keys = frame[list(by)].astype("object")
    return keys.where(keys.notna(), "unknown").astype(str)


def _reduce(frame: pd.DataFrame, rule: Rule) -> tuple[dict[tuple, object], dict[tuple, float]]:
    """{group key: the figure of that group in this run} and {group key: its time in ns}."""
    keys = _group_keys(frame, rule.by)
    key_tuples = list(keys.itertuples(index=False, name=None))
    time = pd.to_numeric(frame["time_ns"], errors="coerce") if "time_ns" in frame else \
        pd.Series(np.nan, index=frame.index)
    grouped_rows: dict[tuple, list[int]] = {}
    for position, key in enumerate(key_tuples):
        grouped_rows.setdefault(key, []).append(position)
    figures: dict[tuple, object] = {}
    times: dict[tuple, float] = {}
    column = frame[rule.figure] if rule.figure in frame else None
    for key, rows in grouped_rows.items():
        weight = time.iloc[rows].to_numpy(dtype=float)
        times[key] = float(np.nansum(weight)) if np.isfinite(weight).any() else math.nan
        if column is None:
            figures[key] = None
            continue
        values = column.iloc[rows]
        if rule.how == "mode":
            figures[key] = _weighted_mode(values, weight)
            continue
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
        if rule.how == "sum":
            # a sum with a hole in it is not the group's total: n/a
            figures[key] = float(numbers.sum()) if np.isfinite(numbers).all() else math.nan
        else:
            figures[key] = _weighted_mean(numbers, weight)
    return figures, times


def _weighted_mean(numbers: np.ndarray, weight: np.ndarray) -> float:
    ok = np.isfinite(numbers)
    if not ok.any():
        return math.nan
    w = weight[ok]
    if np.isfinite(w).all() and w.sum() > 0:
        return float((numbers[ok] * w).sum() / w.sum())
    return float(numbers[ok].mean())  # no times: launches count equally


def _weighted_mode(values: pd.Series, weight: np.ndarray) -> str | None:
    totals: dict[str, float] = {}
    for value, w in zip(values, weight):
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
            continue
        totals[str(value)] = totals.get(str(value), 0.0) + (w if np.isfinite(w) else 1.0)
    if not totals:
        return None
    return max(sorted(totals), key=lambda v: totals[v])


def _is_na(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


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
            "rule": self.rule.label, "figure": self.rule.figure, "worse": self.rule.worse,
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
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
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
    b, c = float(np.median(base)), float(np.median(cur))
    comp.baseline_center, comp.current_center = b, c
    comp.change = c - b
    comp.change_pct = (c - b) / abs(b) * 100 if b != 0 else (math.inf if c != b else 0.0)
    direction = rule.worse

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


def _text_comparison(comp: Comparison, base: list[str], cur: list[str]) -> None:
    comp.baseline_center = max(sorted(set(base)), key=base.count)
    comp.current_center = max(sorted(set(cur)), key=cur.count)
    comp.test = "text figure: changed when no current run shows a baseline value"
    # a value that flips between runs on one side is noise, not a change
    comp.status = "regression" if not set(base) & set(cur) else "pass"


def _validation_failures(run: Run, rule: Rule, key: tuple) -> list[str]:
    frame = run.kernels
    keys = _group_keys(frame, rule.by)
    mask = (keys == pd.Series(key, index=rule.by)).all(axis=1).to_numpy()
    failures = []
    for view in rule.checked_views:
        column = f"validation_{view}"
        if column not in frame:
            continue
        status = frame.loc[mask, column].astype(str)
        failed = status == "fail"
        if failed.any():
            detail_col = f"validation_detail_{view}"
            detail = ""
            if detail_col in frame:
                details = frame.loc[mask, detail_col][failed.to_numpy()].dropna().astype(str)
                detail = f": {details.iloc[0]}" if len(details) else ""
            failures.append(f"{view} failed on {int(failed.sum())} of {int(mask.sum())} "
                            f"kernel(s){detail}")
    return failures


def compare_rule(rule: Rule, baseline: Sequence[Run], current: Sequence[Run],
                 problems: list[str], warnings: list[str]) -> list[Comparison]:
    """Every group of one rule, compared; could-not-judge reasons go into `problems`."""
    for side, runs in (("baseline", baseline), ("current", current)):
        for run in runs:
            missing = [col for col in rule.by if col not in run.kernels]
            if missing:
                problems.append(f"{rule.label}: {side} run {run.label} has no "
                                f"{', '.join(missing)} column to group by")
                return []
    reduced = {side: [_reduce(run.kernels, rule) for run in runs]
               for side, runs in (("baseline", baseline), ("current", current))}
    total_base_time = float(np.median([np.nansum(list(t.values())) for _, t in reduced["baseline"]]))
    keys = sorted({k for figs, _ in reduced["baseline"] + reduced["current"] for k in figs})
    comparisons: list[Comparison] = []
    for key in keys:
        group = dict(zip(rule.by, key))
        comp = Comparison(rule=rule, group=group, status="pass")
        base = [figs[key] for figs, _ in reduced["baseline"] if key in figs]
        cur = [figs[key] for figs, _ in reduced["current"] if key in figs]
        base_times = [t[key] for _, t in reduced["baseline"] if key in t]
        cur_times = [t[key] for _, t in reduced["current"] if key in t]
        share_times = base_times or cur_times
        if share_times and total_base_time > 0:
            comp.time_share_pct = float(np.nanmedian(share_times)) / total_base_time * 100 \
                if np.isfinite(share_times).any() else None
        comparisons.append(comp)
        if not base or not cur:
            comp.status = "disappeared" if base else "appeared"
            comp.baseline, comp.current = base, cur
            continue
        partial = []
        if len(base) < len(baseline):
            partial.append(f"in {len(base)} of {len(baseline)} baseline runs")
        if len(cur) < len(current):
            partial.append(f"in {len(cur)} of {len(current)} current runs")
        if comp.time_share_pct is not None and comp.time_share_pct < rule.min_time_share_pct:
            comp.status = "small"
            comp.note = f"{comp.time_share_pct:.2f}% of the time, under {rule.min_time_share_pct:g}%"
            comp.baseline, comp.current = base, cur
            continue
        base_ok = [v for v in base if not _is_na(v)]
        cur_ok = [v for v in cur if not _is_na(v)]
        comp.baseline, comp.current = base, cur
        if not base_ok and not cur_ok:
            comp.status = "n/a"
            comp.note = f"{rule.figure} is n/a on both sides"
            continue
        if not base_ok or not cur_ok:
            side = "baseline" if not base_ok else "current"
            comp.status = "cannot judge"
            comp.note = f"{rule.figure} is n/a on the {side} side only"
            problems.append(f"{rule.label}: {comp.group_label}: {comp.note}")
            continue
        failures = []
        for side, runs in (("baseline", baseline), ("current", current)):
            for run in runs:
                failures += [f"{side} run {run.label}: {f}" for f in _validation_failures(run, rule, key)]
        if failures and rule.on_validation_fail != "ignore":
            message = f"{rule.label}: {comp.group_label}: validation " + "; ".join(failures)
            if rule.on_validation_fail == "error":
                comp.status = "cannot judge"
                comp.note = "validation failed: " + "; ".join(failures)
                problems.append(message)
                continue
            warnings.append(message)
        if rule.how == "mode":
            _text_comparison(comp, [str(v) for v in base_ok], [str(v) for v in cur_ok])
        else:
            _numeric_comparison(rule, comp, [float(v) for v in base_ok], [float(v) for v in cur_ok])
        if partial:
            comp.note = "; ".join(filter(None, [comp.note, "present " + ", ".join(partial)]))
    if rule.required and comparisons and all(c.status in ("n/a", "appeared", "disappeared", "small")
                                             for c in comparisons):
        if any(c.status == "n/a" for c in comparisons):
            problems.append(f"{rule.label}: {rule.figure} is n/a on both sides in every group: "
                            "the capture lacks the metrics of its view")
    if rule.required and not any(rule.figure in run.kernels for run in list(baseline) + list(current)):
        problems.append(f"{rule.label}: no run has a {rule.figure} column: check the figure's name")
    return comparisons


def kernel_changes(baseline: Sequence[Run], current: Sequence[Run]) -> tuple[list[dict], list[dict]]:
    """Kernels (by phase, role and name) present in no baseline run / no current run."""
    def launches(runs: Sequence[Run]) -> dict[tuple, tuple[int, float]]:
        found: dict[tuple, list[tuple[int, float]]] = {}
        for run in runs:
            frame = run.kernels
            if "kernel_name" not in frame:
                continue
            by = [c for c in ("phase", "role", "kernel_name") if c in frame]
            keys = _group_keys(frame, by)
            time = pd.to_numeric(frame.get("time_ns", pd.Series(np.nan, index=frame.index)),
                                 errors="coerce")
            for key, rows in keys.groupby(by).groups.items():
                key = key if isinstance(key, tuple) else (key,)
                found.setdefault(key, []).append((len(rows), float(time.loc[rows].sum())))
        return {k: (int(np.median([n for n, _ in v])), float(np.median([t for _, t in v])))
                for k, v in found.items()}

    base, cur = launches(baseline), launches(current)

    def rows(keys: Iterable[tuple], source: dict) -> list[dict]:
        return [{"phase": k[0], "role": k[1], "kernel_name": k[-1], "launches": source[k][0],
                 "time_ns": source[k][1]} for k in sorted(keys)]

    return rows(set(cur) - set(base), cur), rows(set(base) - set(cur), base)


def run_gate(baseline: Sequence[Run], current: Sequence[Run],
             rules: Sequence[Rule] | None = None) -> GateResult:
    """Compare the current runs against the baseline runs under `rules` (DEFAULT_RULES if None)."""
    rules = tuple(rules) if rules is not None else DEFAULT_RULES
    problems: list[str] = []
    warnings: list[str] = []
    if not baseline or not current:
        problems.append("no " + ("baseline" if not baseline else "current") + " run given")
    for side, runs in (("baseline", baseline), ("current", current)):
        for run in runs:
            if run.kernels is None or len(run.kernels) == 0:
                problems.append(f"{side} run {run.label} has no kernels")
    comparisons: list[Comparison] = []
    if not problems:
        for rule in rules:
            comparisons += compare_rule(rule, baseline, current, problems, warnings)
        appeared, disappeared = kernel_changes(baseline, current)
    else:
        appeared, disappeared = [], []
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
