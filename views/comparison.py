"""Two runs compared: their kernels matched by what they do, and the comparison verdict.

Kernels are matched by what they do, not by their position in the run: the phase and role, the
kernel family (for GEMMs and attention; other kernels by their short name) and the problem's fixed
dimensions, a GEMM's N and K (its weights) or attention's heads and head size. The token
dimension (M: batch x sequence) stays out of the key, so batch 8 is compared with batch 1 kernel
for kernel; it is shown beside. The launches of one key are summed per run; a key only one run
has is a kernel added or removed.

The verdict says what changed: the workload's time (setup left out, as the verdict's shares) and
per token, each phase's, and the largest regressions and gains by absolute time, each with the
figure that explains it: the kernel added or removed, the tokens, the tile, the launches, the
bound, else the gap step (or the figure behind it) that moved most the same way as the time. A
change is told from run-to-run noise by repeats when there are some (several runs of a side): a
key's noise floor is the largest of its own spread over one side's runs, the spread per launch most
keys stay within times its launches, and the workload's relative spread times its time
(NoiseFloor); with enough runs on both sides the gate's Mann-Whitney U test (reports/gate_stats.py,
passed in as `u_test`: views import no report) must also find it significant. Within the floor a
change is `noise`, shown grey. Without repeats there is no floor: every change counts.

The verdict holds figures only; its sentences (the headline, each change's explanation) are
reports/comparison_text.py's.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from views.catalog import LOWER, SUM
from views.gap import STEPS
from views.kernel_names import short_kernel_name
from views.vocabulary import CHOSEN_KINDS, OUTSIDE_PHASES, PHASE_ORDER

MATCHED, ADDED, REMOVED = "matched", "added", "removed"
KEY = ["phase", "role", "kernel", "weights"]
REGRESSION, GAIN, NOISE = "regression", "gain", "noise"
TOP = 5
NOISE_QUANTILE = 0.9
# The gate's significance level: with enough runs on both sides a change must reach it
ALPHA = 0.05
# The figures that may explain a matched kernel's change, in the gap's order: its steps, then the
# figures of the views that explain the steps, then the memory side
EXPLAINING = (*STEPS, "sm_coverage", "wave_efficiency", "achieved_occupancy_pct", "issue_active_pct",
              "dram_pct", "dram_bytes")


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column as objects, or nulls where the frame has none."""
    if name in frame.columns:
        return frame[name].astype(object)
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def number(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(column(frame, name), errors="coerce")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _dims(*pairs) -> str:
    return " ".join(f"{label}={value:.0f}" for label, value in pairs if not _missing(value))


def name_column(frame: pd.DataFrame) -> str:
    """The kernel name's column: the kernels table's `kernel_name`, the report's `name`."""
    return "name" if "name" in frame.columns else "kernel_name"


def match_keys(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: phase, role, kernel (family or short name), weights (the fixed dimensions),
    tokens (M) and tile."""
    kind = column(kernels, "kind")
    family = column(kernels, "kernel_family")
    names = column(kernels, name_column(kernels))
    by_family = kind.isin(CHOSEN_KINDS) & family.notna()
    kernel = [f if use else short_kernel_name(n, 80, missing="unknown")
              for f, n, use in zip(family, names, by_family)]
    n, k = number(kernels, "shape_n"), number(kernels, "shape_k")
    heads, dim = number(kernels, "attn_heads"), number(kernels, "attn_head_dim")
    weights = [_dims(("N", a), ("K", b)) if not (_missing(a) and _missing(b)) else _dims(("H", h), ("D", d))
               for a, b, h, d in zip(n, k, heads, dim)]
    return pd.DataFrame({"phase": column(kernels, "phase").to_numpy(), "role": column(kernels, "role").to_numpy(),
                         "kernel": kernel, "weights": weights,
                         "tokens": number(kernels, "shape_m").to_numpy(),
                         "tile": column(kernels, "tile").to_numpy(),
                         "time_ns": number(kernels, "time_ns").to_numpy()}, index=kernels.index)


def _summed(keys: pd.DataFrame) -> pd.DataFrame:
    def joined(values):
        distinct = sorted({str(v) for v in values if not _missing(v)})
        return "/".join(distinct)

    def tokens(values):
        distinct = sorted({int(v) for v in values if not _missing(v)})
        return "/".join(str(v) for v in distinct)

    return (keys.groupby(KEY, sort=False, dropna=False)
            .agg(launches=("time_ns", "size"), time_ns=("time_ns", lambda t: t.sum(min_count=len(t))),
                 tokens=("tokens", tokens), tile=("tile", joined))
            .reset_index())


def kernel_changes(current: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """One row per key of either run: launches, time, tokens (M) and tile on each side, the time
    change in %, and `status` (matched, added, removed). Matched first, by baseline time."""
    cur, base = _summed(match_keys(current)), _summed(match_keys(baseline))
    merged = cur.merge(base, on=KEY, how="outer", suffixes=("", "_base"), indicator=True)
    merged["status"] = merged["_merge"].map({"both": MATCHED, "left_only": ADDED, "right_only": REMOVED})
    with np.errstate(divide="ignore", invalid="ignore"):
        change = 100 * (merged["time_ns"] - merged["time_ns_base"]) / merged["time_ns_base"]
    merged["change_pct"] = change.where(np.isfinite(change))
    order = {MATCHED: 0, ADDED: 1, REMOVED: 2}
    merged["_o"] = merged["status"].map(order)
    merged["_t"] = merged["time_ns_base"].fillna(merged["time_ns"])
    merged = merged.sort_values(["_o", "_t"], ascending=[True, False], kind="stable")
    return merged.drop(columns=["_merge", "_o", "_t"]).reset_index(drop=True)


def key_tuples(kernels: pd.DataFrame) -> list[tuple]:
    """Each kernel's key (phase, role, kernel, weights), as kernel_changes and the verdict name it."""
    return list(match_keys(kernels)[KEY].itertuples(index=False, name=None))


def kernel_baseline_time(current: pd.DataFrame, baseline: pd.DataFrame) -> pd.Series:
    """Per current kernel: the baseline's mean time per launch of its key (NaN: no such key)."""
    base = _summed(match_keys(baseline))
    base["mean_ns"] = base["time_ns"] / base["launches"]
    lookup = {tuple(k): v for k, v in zip(base[KEY].itertuples(index=False, name=None), base["mean_ns"])}
    return pd.Series([lookup.get(k, np.nan) for k in key_tuples(current)], index=current.index, dtype=float)


# the problem's dimensions in a range's message: they differ between batches, the operation does not
_SHAPE_WORDS = re.compile(r"\s*\b(?:M|N|K|B|H|Sq|Skv|D|causal)=\S+")


def innermost_range(stack) -> str | None:
    """The innermost NVTX range's message without its shape (`smlens:elementwise op=silu_mul`)."""
    if stack is None or isinstance(stack, float):
        return None
    items = [stack] if isinstance(stack, str) else list(stack)
    return _SHAPE_WORDS.sub("", str(items[-1])).strip() if items else None


def matched_launches(current: pd.DataFrame, baseline: pd.DataFrame) -> np.ndarray:
    """Per current kernel, the position of its baseline launch: of its key's launches, those in the
    same innermost NVTX range (rope_kv_cache's elementwise kernel against rope_kv_cache's, not
    silu_mul's), the one of the same order (the third against the third), else the last; -1 where
    the baseline has no such key, or has it only in other ranges."""
    def keyed(frame):
        ranges = [innermost_range(s) for s in column(frame, "nvtx_stack")]
        return [(*key, r) for key, r in zip(key_tuples(frame), ranges)]

    positions: dict[tuple, list[int]] = {}
    for position, key in enumerate(keyed(baseline)):
        positions.setdefault(key, []).append(position)
        positions.setdefault((*key[:-1], None), []).append(position)
    seen: dict[tuple, int] = {}
    out = np.full(len(current), -1, dtype=np.int64)
    for row, key in enumerate(keyed(current)):
        launches = positions.get(key)
        nth = seen.get(key, 0)
        seen[key] = nth + 1
        if launches:
            out[row] = launches[min(nth, len(launches) - 1)]
    return out


# --- the noise floor ------------------------------------------------------------------------------

@dataclass(frozen=True)
class NoiseFloor:
    """How much a time moves from run to run, from repeats of one side. A short kernel's time jitters
    by a few hundred ns whatever its length (launch, clock ramp-up; ncu's timer counts in 32 ns on
    the H200), a long one's by a share of it: a key's floor is the largest of its own spread, the
    keys' spread per launch (NOISE_QUANTILE of them) times its launches, and the workload's relative spread times
    its time."""

    runs: int  # the most runs of one side it was measured over
    workload_pct: float  # the workload's time: its spread over the repeats, % of their median
    per_launch_ns: float  # the keys' spread per launch, NOISE_QUANTILE of them
    by_key: dict = field(default_factory=dict)  # (phase, role, kernel, weights) -> its spread, ns

    def floor_ns(self, key: tuple, launches: int, time_ns: float) -> float:
        return max(self.by_key.get(key, 0.0), launches * self.per_launch_ns,
                   self.workload_pct / 100 * np.nan_to_num(time_ns))


def _workload(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the workload: those outside any phase range are setup (views/verdict.py)."""
    phases = column(kernels, "phase")
    outside = phases.isin(OUTSIDE_PHASES)
    return kernels[~outside.to_numpy()] if (~outside).any() else kernels


def _key_times(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per key (the index): launches and summed time of the workload's kernels."""
    summed = _summed(match_keys(_workload(kernels)))
    return summed.set_index(KEY)[["launches", "time_ns"]]


def spread_pct(values: Sequence[float]) -> float:
    """The range of a few runs' values as a share of their median (NaN: fewer than two)."""
    values = np.asarray([v for v in values if not _missing(v)], dtype=float)
    if len(values) < 2:
        return float("nan")
    median = float(np.median(values))
    return 100 * float(values.max() - values.min()) / median if median > 0 else float("nan")


def noise_floor(sides: Sequence[Sequence[pd.DataFrame]]) -> Optional[NoiseFloor]:
    """The floor from each side's runs (the compared run and its repeats): a key's spread is the
    largest over the sides that have two runs or more. None when no side has two."""
    sides = [list(s) for s in sides if len(s) >= 2]
    if not sides:
        return None
    by_key: dict[tuple, float] = {}
    per_launch: dict[tuple, float] = {}
    workload = []
    for runs in sides:
        keyed = [_key_times(r) for r in runs]
        times = pd.concat([k["time_ns"] for k in keyed], axis=1)
        launches = pd.concat([k["launches"] for k in keyed], axis=1).max(axis=1)
        for key, row in times.iterrows():
            values = row.dropna().to_numpy(dtype=float)
            if len(values) >= 2:
                spread = float(values.max() - values.min())
                by_key[key] = max(spread, by_key.get(key, 0.0))
                per_launch[key] = by_key[key] / max(float(launches[key]), 1.0)
        workload.append(spread_pct([float(number(_workload(r), "time_ns").sum()) for r in runs]))
    # what noise alone reaches on nine keys of ten, not the typical key's: a floor from a few runs
    # must not paint the other half of the unchanged kernels
    typical = float(np.quantile(list(per_launch.values()), NOISE_QUANTILE)) if per_launch else 0.0
    return NoiseFloor(max(len(s) for s in sides), float(np.nanmax(workload)), typical, by_key)


# --- the verdict ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Why:
    """The figures behind what explains a change (Change.explained_by says which)."""

    before: Any = None  # the baseline's tokens (M), tile, launches, bound or explaining figure
    after: Any = None  # the current run's
    tiles: Optional[tuple] = None  # tokens: (before, after) when the tile changed with them
    replaced: str = ""  # a kernel added or removed: the other run's kernels of its phase and role


@dataclass(frozen=True)
class Change:
    """One kernel key's change in time, and what explains it."""

    phase: str
    role: str
    kernel: str
    weights: str
    status: str  # matched, added, removed
    time_ns: float  # summed over the key's launches; NaN for a removed kernel
    base_time_ns: float
    delta_ns: float
    change_pct: float
    launches: int
    base_launches: int
    noise_ns: float  # the key's floor (NaN: no repeats)
    significance: str  # regression, gain, or noise (within the floor: grey)
    p_value: float  # the gate's U test of the key's runs, where both sides have enough; else NaN
    explained_by: str  # what explains it: kernel, tokens, tile, launches, bound, a figure column or ''
    why: Why  # its figures before and after ("tile 64x8 -> 128x8" in words)

    @property
    def label(self) -> str:
        return f"{self.phase} · {self.role} · {self.kernel}"


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    time_ns: float
    base_time_ns: float
    delta_ns: float
    change_pct: float
    per_token_ns: float  # NaN where a side's tokens are unknown
    base_per_token_ns: float
    per_token_change_pct: float
    significance: str


@dataclass
class ComparisonVerdict:
    time_ns: float
    base_time_ns: float
    delta_ns: float
    change_pct: float
    per_token_ns: float
    base_per_token_ns: float
    per_token_change_pct: float
    significance: str
    phases: list[PhaseChange] = field(default_factory=list)
    regressions: list[Change] = field(default_factory=list)  # largest first, by absolute time
    gains: list[Change] = field(default_factory=list)
    noise: Optional[NoiseFloor] = None
    runs: int = 1  # runs of the current side
    base_runs: int = 1
    differences: list[str] = field(default_factory=list)  # how the runs differ (device, shapes)
    # every key's significance ((phase, role, kernel, weights) -> regression, gain or noise): what
    # the report's tables colour by; not in the JSON, whose lists name the largest
    by_key: dict = field(default_factory=dict)


def judge(delta_ns: float, floor_ns: float, p_value: float = float("nan")) -> str:
    """regression (slower), gain (faster), or noise: within the floor, or not significant by the
    gate's test where both sides had runs enough for it."""
    if _missing(delta_ns) or delta_ns == 0:
        return NOISE
    if not _missing(floor_ns) and abs(delta_ns) <= floor_ns:
        return NOISE
    if not _missing(p_value) and p_value > ALPHA:
        return NOISE
    return REGRESSION if delta_ns > 0 else GAIN


def _per_key_figures(kernels: pd.DataFrame, catalog) -> pd.DataFrame:
    """Per key: each explaining figure (a mean per launch for sums, else time-weighted), the bound
    and the tile holding the most time."""
    keys = match_keys(kernels)
    time_ns = number(kernels, "time_ns").to_numpy(dtype=float)
    grouped = {}
    for key, positions in keys.groupby(KEY, sort=False, dropna=False).indices.items():
        weights = np.nan_to_num(time_ns[positions])
        row = {}
        for name in EXPLAINING:
            values = number(kernels, name).to_numpy(dtype=float)[positions]
            known = ~np.isnan(values)
            if not known.any():
                continue
            if name in catalog and catalog[name].aggregate == SUM or weights[known].sum() <= 0:
                row[name] = float(values[known].mean())
            else:
                row[name] = float(np.average(values[known], weights=weights[known]))
        for name in ("bound", "tile"):
            values = column(kernels, name).to_numpy()[positions]
            held: dict = {}
            for value, w in zip(values, weights):
                if not _missing(value):
                    held[value] = held.get(value, 0.0) + w
            row[name] = max(held, key=held.get) if held else None
        grouped[key] = row
    return grouped


def _explain(row: pd.Series, cur: dict, base: dict, catalog, replaced: str) -> tuple[str, Why]:
    """(what explains a key's change, its figures): the tokens, the tile, the launches, the bound, else the figure
    that moved most in the direction of the time (worse for a regression, better for a gain)."""
    if row["status"] in (ADDED, REMOVED):
        return "kernel", Why(replaced=replaced)
    tiles = ((base["tile"], cur["tile"])
             if cur.get("tile") and base.get("tile") and cur["tile"] != base["tile"] else None)
    if row["tokens"] and row["tokens_base"] and row["tokens"] != row["tokens_base"]:
        # more work: the tokens explain the time, a tile chosen for them comes with them
        return "tokens", Why(row["tokens_base"], row["tokens"], tiles)
    if tiles:
        return "tile", Why(*tiles)
    if row["launches"] != row["launches_base"]:
        return "launches", Why(int(row["launches_base"]), int(row["launches"]))
    if cur.get("bound") and base.get("bound") and cur["bound"] != base["bound"]:
        return "bound", Why(base["bound"], cur["bound"])
    slower = row["time_ns"] > row["time_ns_base"]
    best, best_move = None, 0.0
    for name in EXPLAINING:
        before, after = base.get(name), cur.get(name)
        if before is None or after is None or before <= 0:
            continue
        move = (after - before) / before
        figure = catalog.get(name)
        # which way is worse: less of a higher-is-better share, more bytes
        worse = move > 0 if figure is not None and figure.better == LOWER else move < 0
        if name == "dram_bytes":
            worse = move > 0
        if worse == slower and abs(move) > best_move:
            best, best_move = name, abs(move)
    if best is None:
        return "", Why()
    return best, Why(base[best], cur[best])


def _replacements(changes: pd.DataFrame) -> dict:
    """Per added or removed key, the kernels the other run has in its place (same phase and role)."""
    out = {}
    for status, other in ((ADDED, REMOVED), (REMOVED, ADDED)):
        for index, row in changes[changes["status"] == status].iterrows():
            same = changes[(changes["status"] == other) & (changes["phase"] == row["phase"])
                           & (changes["role"] == row["role"])]
            out[index] = ", ".join(dict.fromkeys(same["kernel"].astype(str)))
    return out


def _tokens_total(tokens: Optional[dict], phases: Sequence[str]) -> float:
    if not tokens or any(p not in tokens for p in phases):
        return float("nan")
    return float(sum(tokens[p][0] for p in phases))


def _phase_times(kernels: pd.DataFrame) -> dict:
    work = _workload(kernels)
    times = number(work, "time_ns").groupby(column(work, "phase").to_numpy(), sort=False).sum()
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return {p: float(times[p]) for p in sorted(times.index, key=lambda p: rank.get(p, len(rank)))}


def comparison_verdict(current: pd.DataFrame, baseline: pd.DataFrame,
                       current_repeats: Sequence[pd.DataFrame] = (),
                       base_repeats: Sequence[pd.DataFrame] = (),
                       tokens: Optional[dict] = None, base_tokens: Optional[dict] = None,
                       catalog=None, u_test: Optional[Callable] = None,
                       differences: Sequence[str] = (), top: int = TOP) -> ComparisonVerdict:
    """What changed from `baseline` to `current` (views' kernels tables: time_ns and the figures).

    `*_repeats`: more runs of the same side (run-to-run repeats), for the noise floor. `tokens`:
    phase -> (tokens, source) of each side, for the change per token. `catalog`: the views' figures
    (registry.figures()), for the explaining figures' labels and directions. `u_test(baseline,
    current, direction)`: the gate's Mann-Whitney U test, asked where both sides have several runs.
    `differences`: how the runs differ in what they ran (the gate's mismatches), said first."""
    catalog = catalog or {}
    cur_runs, base_runs = [current, *current_repeats], [baseline, *base_repeats]
    noise = noise_floor([cur_runs, base_runs])
    changes = kernel_changes(_workload(current), _workload(baseline))
    cur_figures, base_figures = _per_key_figures(current, catalog), _per_key_figures(baseline, catalog)
    replaced = _replacements(changes)
    cur_keys = [_key_times(r)["time_ns"].to_dict() for r in cur_runs]
    base_keys = [_key_times(r)["time_ns"].to_dict() for r in base_runs]
    made = []
    for index, row in changes.iterrows():
        key = tuple(row[KEY])
        time_ns = float(row["time_ns"]) if not _missing(row["time_ns"]) else float("nan")
        base_ns = float(row["time_ns_base"]) if not _missing(row["time_ns_base"]) else float("nan")
        delta = np.nan_to_num(time_ns) - np.nan_to_num(base_ns)
        p_value = _p_value(u_test, [t.get(key, np.nan) for t in base_keys], [t.get(key, np.nan) for t in cur_keys],
                           delta)
        floor = noise.floor_ns(key, int(np.nan_to_num(row["launches_base"])), base_ns) \
            if noise is not None and row["status"] == MATCHED else float("nan")
        by, why = _explain(row, cur_figures.get(key, {}), base_figures.get(key, {}), catalog,
                             replaced.get(index, ""))
        made.append(Change(*(str(v) for v in key), row["status"], time_ns, base_ns, float(delta),
                           float(row["change_pct"]) if not _missing(row["change_pct"]) else float("nan"),
                           int(np.nan_to_num(row["launches"])), int(np.nan_to_num(row["launches_base"])),
                           floor, judge(delta, floor, p_value), p_value, by, why))
    cur_phases, base_phases = _phase_times(current), _phase_times(baseline)
    phases = []
    for phase in dict.fromkeys([*base_phases, *cur_phases]):
        now, before = cur_phases.get(phase, float("nan")), base_phases.get(phase, float("nan"))
        per, base_per = _per_token(now, tokens, phase), _per_token(before, base_tokens, phase)
        change = _change_pct(now, before)
        phases.append(PhaseChange(phase, now, before, now - before, change, per, base_per,
                                  _change_pct(per, base_per), judge(now - before, _relative_floor(noise, before))))
    total, base_total = sum(cur_phases.values()), sum(base_phases.values())
    per = total / _tokens_total(tokens, list(cur_phases))
    base_per = base_total / _tokens_total(base_tokens, list(base_phases))
    change = _change_pct(total, base_total)
    p_value = _p_value(u_test, [float(number(_workload(r), "time_ns").sum()) for r in base_runs],
                       [float(number(_workload(r), "time_ns").sum()) for r in cur_runs], total - base_total)
    significance = judge(total - base_total, _relative_floor(noise, base_total), p_value)
    regressions = sorted((c for c in made if c.delta_ns > 0), key=lambda c: -c.delta_ns)[:top]
    gains = sorted((c for c in made if c.delta_ns < 0), key=lambda c: c.delta_ns)[:top]
    return ComparisonVerdict(total, base_total, total - base_total, change, per, base_per,
                             _change_pct(per, base_per), significance, phases, regressions, gains, noise,
                             len(cur_runs), len(base_runs), list(differences),
                             by_key={(c.phase, c.role, c.kernel, c.weights): c.significance for c in made})


def _relative_floor(noise: Optional[NoiseFloor], time_ns: float) -> float:
    return float("nan") if noise is None else noise.workload_pct / 100 * time_ns


def _p_value(u_test: Optional[Callable], base: list, cur: list, delta_ns: float) -> float:
    """The gate's one-sided test in the direction the time moved, where both sides have runs
    enough to reach ALPHA at all (3 against 3)."""
    base = [v for v in base if not _missing(v)]
    cur = [v for v in cur if not _missing(v)]
    if u_test is None or len(base) < 2 or len(cur) < 2 or not delta_ns:
        return float("nan")
    result = u_test(base, cur, "higher" if delta_ns > 0 else "lower")
    return float(result.p_value) if result.min_p_value <= ALPHA else float("nan")


def _per_token(time_ns: float, tokens: Optional[dict], phase: str) -> float:
    if not tokens or phase not in tokens or not tokens[phase][0]:
        return float("nan")
    return time_ns / tokens[phase][0]


def _change_pct(now: float, before: float) -> float:
    if _missing(now) or _missing(before) or not before:
        return float("nan")
    return 100 * (now - before) / before
