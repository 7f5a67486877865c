"""The rules of `smlens gate`: which figure, which direction is worse, how far is too far.

A rule names a figure column of the views' per-kernel table (`views.registry.compute_views(...)
.kernels`), a relative threshold (`relative_pct`) and an absolute minimum effect (`min_effect`, in
the figure's own unit) that must both be passed, the statistic that must also agree over repeated
runs, and how kernels are grouped (`by`). What the figure is comes from the catalog
(`views.registry.figures()`): its unit, the views that vouch for it, how a group combines it and
which way is better, so the direction that is worse is the catalog's unless a rule says otherwise
(`either`, or a figure the catalog gives no direction). Rules come from a gate.toml
(examples/gate.toml says every key) or `DEFAULT_RULES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from views import registry
from views.catalog import HIGHER, LOWER, RATIO, SUM, Figure

GROUP_BY = ("phase", "role", "kernel_family")
WORSE = ("higher", "lower", "either", "changed")
STATISTICS = ("mann-whitney", "threshold")
ON_VALIDATION = ("error", "strict", "warn", "ignore")
AGGREGATES = ("sum", "mean", "mode")  # what a rule's `aggregate` may ask instead of the catalog's


class RulesError(ValueError):
    """A rule file or rule that cannot be used; the message says what to change."""


def gate_aggregate(figure: Figure | None) -> str:
    """How a group combines the figure, as the catalog declares it: a sum, a ratio of sums, `mode`
    for a text figure (the value holding the most time, or for a top stall the largest of its
    group's means), else a time-weighted mean; views/grouping.py does each. A column the catalog
    does not declare, or declares per kernel only, is averaged."""
    if figure is None:
        return "mean"
    if figure.is_text:  # a tile, declared per kernel, is gated as the value holding the most time
        return "mode"
    return {SUM: "sum", RATIO: "ratio"}.get(figure.aggregate, "mean")


def catalog_worse(figure: Figure | None) -> str | None:
    """The direction the catalog calls worse: against its better one; `changed` for a text figure;
    None where it declares no direction (the rule must say)."""
    if figure is None:
        return None
    if figure.is_text:
        return "changed"
    return {HIGHER: "lower", LOWER: "higher"}.get(figure.better)


@dataclass(frozen=True)
class Rule:
    """One gated figure. `relative_pct` and `min_effect` must both be exceeded in the `worse`
    direction (`min_effect` in the figure's own unit); `statistic` says whether several runs must
    also differ significantly (`mann-whitney`) or the threshold alone decides (`threshold`)."""

    figure: str
    worse: str | None = None  # None: the catalog's (catalog_worse)
    relative_pct: float = 10.0
    min_effect: float = 0.0
    statistic: str = "mann-whitney"
    alpha: float = 0.05
    by: tuple[str, ...] = GROUP_BY
    aggregate: str | None = None  # None: the figure's own (gate_aggregate)
    views: tuple[str, ...] | None = None  # None: the views that vouch for the figure (the catalog)
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
    def declared(self) -> Figure | None:
        """The catalog's declaration of the figure; None for a column no view declares (it is
        averaged, and no validation is checked unless the rule names its `views`)."""
        return registry.figures().get(self.figure)

    @property
    def how(self) -> str:
        return self.aggregate or gate_aggregate(self.declared)

    @property
    def direction(self) -> str | None:
        """Which way is worse: the rule's own, else the catalog's."""
        return self.worse or catalog_worse(self.declared)

    @property
    def checked_views(self) -> tuple[str, ...]:
        if self.views is not None:
            return self.views
        return self.declared.vouched_by if self.declared else ()

    @property
    def unit(self) -> str:
        return self.declared.unit if self.declared else ""


# Chosen against repeated H200 captures of one workload made in separate ncu processes
# (tests/data/h200_runs/gate-b1-r*.csv.gz). Their run-to-run spread per phase, role and family:
# time up to 3.4 % (6.4 % and 0.2 us on a 3 us split-K reduce), DRAM bytes under 1 %, fill and
# wave efficiency none, achieved occupancy under 3.5 % except a 3.3 us split-K reduce kernel
# (16.7 % to 23.4 %: a 32-block grid's occupancy is mostly ramp-up). So:
# - time: 10 % and an absolute floor (2 us per family, 5 us per role) that a few-us kernel's
#   jitter cannot reach; the per-role rule also prices a kernel swap the per-family rule only sees
#   as one family leaving and another arriving.
# - the intensive figures (averages, not totals) are gated on groups of at least 3 % of the GPU
#   time: a smaller group cannot move the total by more than that, its averages are its noisiest,
#   and its time stays gated by the time rules.
# - counters that do not depend on clocks (fill, waves, DRAM bytes) get thresholds far above their
#   spread and far below what a batch-size change does (fill 0.125 -> 0.5 from batch 1 to 4).
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("time_ns", relative_pct=10, min_effect=2_000, name="time per kernel family"),
    Rule("time_ns", relative_pct=10, min_effect=5_000, by=("phase", "role"), name="time per role"),
    Rule("useful_tensor_pct", relative_pct=10, min_effect=0.2, min_time_share_pct=3),
    Rule("fill", relative_pct=5, min_effect=0.02, min_time_share_pct=3),
    Rule("achieved_occupancy_pct", relative_pct=10, min_effect=2.0, min_time_share_pct=3),
    Rule("wave_efficiency", relative_pct=10, min_effect=0.05, min_time_share_pct=3),
    Rule("dram_bytes", relative_pct=10, min_effect=1e6),
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
    if rule.worse is not None and rule.worse not in WORSE:
        raise RulesError(f"{where}: `worse` must be one of {', '.join(WORSE)}, not {rule.worse!r}")
    if rule.direction is None:
        raise RulesError(f"{where}: the catalog gives {rule.figure} no better direction: say `worse` "
                         f"({', '.join(WORSE)})")
    if rule.statistic not in STATISTICS:
        raise RulesError(f"{where}: `statistic` must be one of {', '.join(STATISTICS)}, "
                         f"not {rule.statistic!r}")
    if rule.on_validation_fail not in ON_VALIDATION:
        raise RulesError(f"{where}: `on_validation_fail` must be one of {', '.join(ON_VALIDATION)}")
    if rule.aggregate is not None and rule.aggregate not in AGGREGATES:
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
    if text_figure and rule.direction != "changed":
        raise RulesError(f'{where}: {rule.figure} is a text figure: use worse = "changed"')
    if not text_figure and rule.direction == "changed":
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
        if "figure" not in entry:
            raise RulesError(f"{where}: every rule needs `figure` (and `worse` where the catalog "
                             "gives it no direction)")
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
