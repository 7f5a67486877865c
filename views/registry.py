"""The eight views, the catalog of their figures, the metric list they need, and the function
that runs them.

A view is one module: ID, TITLE, METRICS (the ncu metrics it reads), FIGURES (catalog.Figure: what
each column it computes is, for the reports), compute(ctx) and validate(ctx, figures). VIEWS below
is the one list of them: everything else (the metric list the profiler collects, the group figures,
the JSON keys, the terminal's and the report's tables, the gate's figures) is derived from the
modules, so adding a view touches its module and that list only.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np
import pandas as pd

from views.catalog import ARGMAX, MEAN, MODE, RATIO, SUM, Figure
from views.common import FAIL, NA, STATUSES, Checks, categorical, combine, format_distinct, metric
from views.context import Context, names
from views.vocabulary import PHASE_ORDER
from views import quantities as q
from views import (device, gap as gap_module, grouping, mlp, ranks, v1_time, v2_tensor, v3_fill,
                   v4_occupancy, v5_waves, v6_stalls, v7_memory, v8_selection)

VIEWS = {m.ID: m for m in (v1_time, v2_tensor, v3_fill, v4_occupancy, v5_waves, v6_stalls,
                           v7_memory, v8_selection)}

IDENTITY = ("kernel_id", "kernel_name", "nvtx_stack", "phase", "role", "role_source", "kind", "block",
            "shape_m", "shape_n", "shape_k", "attn_batch", "attn_heads", "attn_kv_heads", "attn_q_len",
            "attn_kv_len", "attn_head_dim", "attn_causal", "grid_blocks", "block_threads", "device", "cc",
            "process_id", "run_id", "rank", "time_source", "comm_bytes", "comm_samples", "measured")
# The identity every kernel's JSON record opens with (kernel_id and kernel_name under short names).
JSON_IDENTITY = {"id": "kernel_id", "name": "kernel_name", "phase": "phase", "role": "role",
                 "role_source": "role_source", "kind": "kind"}
# How a group tells where its role came from: the source holding the most of its time (`nvtx`, a
# role range; `order`, an eager run's order; `name`, guessed from kernel names).
GROUP_TEXT_IDENTITY = ("role_source",)
# V8's per phase and role summary of what ran (ViewsResult.selection).
SELECTION_VIEW = v8_selection.ID


def figures() -> Mapping[str, Figure]:
    """The catalog: every figure the views declare, by column, in view order, each with its view."""
    return _catalog(tuple(VIEWS.values()))


@functools.lru_cache(maxsize=4)
def _catalog(modules: tuple) -> Mapping[str, Figure]:
    catalog: dict[str, Figure] = {}
    for module in modules:
        for figure in module.FIGURES:
            if figure.column in catalog:
                raise ValueError(f"{module.ID} declares {figure.column}, which "
                                 f"{catalog[figure.column].view} declares already")
            catalog[figure.column] = replace(figure, view=module.ID)
    return MappingProxyType(catalog)


def view_figures(view: str) -> list[Figure]:
    """One view's figures, in its order."""
    return [f for f in figures().values() if f.view == view]


def title(view: str) -> str:
    return VIEWS[view].TITLE


def json_kernel_keys() -> tuple[str, ...]:
    """The keys every kernel's JSON record carries (null when its view did not run): the identity
    and each view's summary figures."""
    return (*JSON_IDENTITY, *(c for c, f in figures().items() if f.summary))


def gap_figures() -> Mapping[str, Figure]:
    """The gap's own figures (its factors), computed per group from the views' figures."""
    return MappingProxyType({f.column: replace(f, view="gap") for f in gap_module.FIGURES})


def rank_figures() -> Mapping[str, Figure]:
    """The figures of a tensor-parallel run's tables (views.ranks): communication per phase and
    rank, each timed collective, the imbalance between ranks."""
    return MappingProxyType({f.column: replace(f, view="ranks") for f in ranks.FIGURES})


def gap_views() -> list[str]:
    """The views whose figures the gap (headline -> useful) reads: they are computed whatever is
    asked."""
    catalog = figures()
    read = (gap_module.HEADLINE, *gap_module.STEPS, *gap_module.MEMORY, *gap_module.EXPLAINERS)
    owners = {v for c in read if c in catalog for v in catalog[c].vouched_by}
    return [v for v in VIEWS if v in owners]


def view_ids(requested=None) -> list[str]:
    """Normalise view names ("V2", "v2", "2"), in the registry's order; all when None or empty."""
    if not requested:
        return list(VIEWS)
    wanted = set()
    for item in requested:
        for part in str(item).split(","):
            name = part.strip().upper()
            name = f"V{name}" if name.isdigit() else name
            if name not in VIEWS:
                raise ValueError(f"unknown view {part.strip()!r}: choose from {', '.join(VIEWS)}")
            wanted.add(name)
    return [v for v in VIEWS if v in wanted]


def view_quantities(view_ids_=None) -> list[str]:
    """The quantities (views/quantities.py) the views read, each once, in view order."""
    return list(dict.fromkeys(name for view in view_ids(view_ids_) for name in VIEWS[view].QUANTITIES))


def required_metrics(view_ids_=None) -> list[str]:
    """The ncu metric names smlens asks for: each quantity's first preference, once, in view order."""
    return q.asked_metrics(view_quantities(view_ids_))


def input_columns(view_ids_=None) -> list[str]:
    """The kernels-table columns the views (and the gap) read: identity, metrics, device attributes.
    A store reads only these (the others of a `--set full` capture are thousands)."""
    ids = sorted(set(view_ids(view_ids_)) | set(gap_views()))
    return list(dict.fromkeys(list(IDENTITY) + q.read_columns(view_quantities(ids)) + device.DEVICE_METRICS))


SOURCE_PREFIX = "source_"  # a kernel column naming what gave a figure (Figure.reads)


def support(kernels: pd.DataFrame, view_ids_=None) -> pd.DataFrame:
    """Which views a capture supports: per view, its figures that name their quantities
    (Figure.reads), how many this table can show, and for the rest the quantity missing and the
    ncu section that carries it. `status`: supported, partial, or cannot."""
    rows = []
    for view in view_ids(view_ids_):
        declared = [f for f in view_figures(view) if f.reads or f.reads_any]
        missing: dict[str, str] = {}
        shown = 0
        for figure in declared:
            lacking = [name for name in figure.reads if not q.present(kernels, name)]
            if figure.reads_any and not any(q.present(kernels, n) for n in figure.reads_any):
                lacking.append(figure.reads_any[0])
            for name in lacking:
                quantity = q.QUANTITIES[name]
                # a family (the op counters by type): any of them would do
                family = figure.reads_any and name == figure.reads_any[0]
                metric_name = quantity.columns[0] if quantity.columns else name
                missing.setdefault(f"{figure.column}'s counters" if family else name,
                                   f"{metric_name}{' or its kind' if family else ''} (ncu section {quantity.section})")
            shown += not lacking
        status = "supported" if shown == len(declared) else "cannot" if shown == 0 else "partial"
        # a view whose figures name no counters (V8: the kernel names) needs none
        rows.append({"view": view, "title": VIEWS[view].TITLE, "status": status, "figures_shown": shown,
                     "figures": len(declared), "missing": [f"{k}: {v}" for k, v in missing.items()]})
    return pd.DataFrame(rows, columns=["view", "title", "status", "figures_shown", "figures", "missing"])


def figure_source(ctx: Context, figure: Figure) -> pd.Categorical:
    """Per kernel, what gave the figure: the metric or derivation of each quantity it reads; of a
    family (reads_any), those that counted something (else the first that holds a value)."""
    parts = [q.source(ctx, name) for name in figure.reads]
    if figure.reads_any:
        parts.append(ctx.once(_family_source, figure.reads_any))
    if len(parts) == 1:
        return parts[0]
    rows = np.arange(len(ctx.kernels))
    codes, texts = format_distinct(lambda *s: "; ".join(str(t) for t in s if isinstance(t, str)) or None,
                                   parts, rows)
    return _texts(codes, texts)


def _texts(codes: np.ndarray, texts: list) -> pd.Categorical:
    """Codes into texts (None: null, a text twice: one category) as a categorical."""
    distinct = list(dict.fromkeys(t for t in texts if t is not None))
    lookup = np.array([-1 if t is None else distinct.index(t) for t in texts] + [-1], dtype=np.int64)
    return categorical(lookup[codes], distinct)


def _family_source(ctx: Context, names: tuple[str, ...]) -> pd.Categorical:
    kernels = ctx.kernels
    collected = [n for n in names if q.collected(kernels, n) or q.present(kernels, n)]
    if not collected:
        return categorical(np.full(len(kernels), -1), [])
    sources = [q.source(ctx, n) for n in collected]
    counted = [(q.value(ctx, n) > 0).astype(np.int8) for n in collected]

    def join(*cells):
        names_, flags = cells[: len(collected)], cells[len(collected):]
        some = [s for s, f in zip(names_, flags) if f and isinstance(s, str)]
        if some:
            return " + ".join(some)
        return next((s for s in names_ if isinstance(s, str)), None)

    codes, texts = format_distinct(join, [*sources, *counted], np.arange(len(kernels)))
    return _texts(codes, texts)


@dataclass
class ViewsResult:
    kernels: pd.DataFrame  # identity + figures + validation_V* + validation_detail_V*
    groups: pd.DataFrame  # per phase and role, time-weighted
    gap: pd.DataFrame  # headline -> useful per phase and role, and per phase ("all")
    selection: pd.DataFrame  # V8: what ran per phase and role, and what changed
    devices: pd.DataFrame  # the device constants the views used, and where they came from
    view_ids: list[str] = field(default_factory=list)
    total_time_ns: float = float("nan")  # of the whole run: time shares stay shares of it after filter()
    # Tensor parallel (views.ranks), empty for a single-GPU run: the collectives timed without
    # replay, compute against communication per phase and rank, and the imbalance between ranks.
    timed: pd.DataFrame = field(default_factory=pd.DataFrame)
    communication: pd.DataFrame = field(default_factory=pd.DataFrame)
    imbalance: pd.DataFrame = field(default_factory=pd.DataFrame)
    rank_time_ns: dict = field(default_factory=dict)  # each rank's whole time: its shares' base
    mlp: pd.DataFrame = field(default_factory=pd.DataFrame)  # the activation's share of MLP time per phase
    # After a phase filter, each selected phase's whole time (share_basis): time shares are of its
    # sum. Empty: shares of the whole run.
    phase_time_ns: dict = field(default_factory=dict)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)  # each timed collective per rank

    def filter(self, phase=None, role=None, kernel=None) -> "ViewsResult":
        """The kernels of some phases, roles or names (a regular expression), with groups, gap and
        selection recomputed over them; per-kernel figures keep the whole capture's references."""
        if not (phase or role or kernel):  # nothing left out: recomputing it all cost `smlens views` 0.1 s
            return self

        def selected(frame: pd.DataFrame) -> pd.DataFrame:
            mask = np.ones(len(frame), dtype=bool)
            if phase:
                mask &= frame["phase"].isin(_as_list(phase)).to_numpy()
            if role:
                mask &= frame["role"].isin(_as_list(role)).to_numpy()
            if kernel:
                pattern = re.compile(kernel)
                mask &= frame["kernel_name"].astype(str).str.contains(pattern, na=False).to_numpy()
            return frame[mask]

        timed = selected(self.timed) if not self.timed.empty else self.timed
        if not phase:
            return replace(_assemble(selected(self.kernels), self.view_ids, self.devices,
                                     self.total_time_ns, timed, self.rank_time_ns),
                           phase_time_ns=self.phase_time_ns)
        # shares of the selected phases' whole time (per rank: of the rank's time in them)
        basis = share_basis(self.kernels, phase, self.timed)
        rank_time_ns = {}
        if self.rank_time_ns:
            in_phases = [f[f["phase"].isin(_as_list(phase)).to_numpy()] if not f.empty else f
                         for f in (self.kernels, self.timed)]
            rank_time_ns = ranks.rank_times(*in_phases)
        return replace(_assemble(selected(self.kernels), self.view_ids, self.devices,
                                 sum(basis.values()), timed, rank_time_ns), phase_time_ns=basis)

    def validation_summary(self) -> pd.DataFrame:
        rows = []
        for view in self.view_ids:
            status = self.kernels[f"validation_{view}"]
            rows.append({"view": view, "title": VIEWS[view].TITLE,
                         **{s: int((status == s).sum()) for s in STATUSES}})
        return pd.DataFrame(rows, columns=["view", "title", *STATUSES])


def _as_list(value) -> list:
    return [value] if isinstance(value, str) else list(value)


def share_basis(kernels: pd.DataFrame, phase=None, timed: pd.DataFrame | None = None) -> dict[str, float]:
    """What time shares are of under a filter, one rule for the terminal, the JSON, the report and
    the verdict: with `phase` (a name or several), each selected phase's whole time (every role and
    kernel, the collectives timed without replay included), in run order; time shares are of their
    sum. Without a phase: empty, shares of the whole run."""
    if not phase:
        return {}
    frames = [f[["phase", "time_ns"]] for f in (kernels, timed) if f is not None and not f.empty]
    if not frames:
        return {}
    both = pd.concat(frames, ignore_index=True)
    both = both[both["phase"].isin(_as_list(phase)).to_numpy()]
    times = both.groupby(both["phase"].astype(object), sort=False)["time_ns"].sum()
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return {str(p): float(times[p]) for p in sorted(times.index, key=lambda p: rank.get(p, len(rank)))}


def _computed_views(ids: list[str]) -> list[str]:
    """The views that run: those asked for, and those the gap reads."""
    gap = gap_views()
    return [v for v in VIEWS if v in ids or v in gap]


def _group_spec(ids: list[str]) -> grouping.GroupSpec:
    computed = _computed_views(ids)
    spec = spec_of([f for f in figures().values() if f.view in computed])
    spec.modes.update({c: None for c in GROUP_TEXT_IDENTITY})
    return spec


def spec_of(shown: list[Figure]) -> grouping.GroupSpec:
    """How a group combines these figures: each as its catalog declaration says."""
    argmaxes = {f.column: (f.argmax_of, f.argmax_floor, f.argmax_value) for f in shown
                if f.aggregate == ARGMAX}
    # the figures an ARGMAX chooses among are averaged too, even those no table shows
    compared = [column for candidates, _, _ in argmaxes.values() for _, column in candidates]
    return grouping.GroupSpec(means=list(dict.fromkeys([f.column for f in shown if f.aggregate == MEAN]
                                                       + compared)),
                              sums=[f.column for f in shown if f.aggregate == SUM],
                              ratios={f.column: f.ratio_of for f in shown if f.aggregate == RATIO},
                              modes={f.column: f.mode_fallback for f in shown if f.aggregate == MODE},
                              argmaxes=argmaxes,
                              mode_values={f.column: f.mode_value for f in shown
                                           if f.aggregate == MODE and f.mode_value},
                              mode_shares=[f.column for f in shown if f.aggregate == MODE and f.mode_shares])


def group_figures(kernels: pd.DataFrame, spec: grouping.GroupSpec, by: list[str]) -> pd.DataFrame:
    """The per-kernel figures of `kernels` combined per group of the `by` columns by the views'
    own rule (views/grouping.py: time-weighted, a figure missing on one kernel missing for the
    group, a figure out of its physical range missing): one row per group with its `kernels` and
    `time_ns`. Kernels ncu could not measure are left out, as from the views' groups. For a
    grouping of its own (the gate's phase, role and kernel family); `spec_of` says how."""
    kernels = kernels[device.measured(kernels)] if len(kernels) else kernels
    parts = grouping.partials(_within_bounds(kernels), spec, [], list(by))
    return grouping.finish(parts, float("nan"), spec.modes, spec.argmaxes, spec.mode_values, spec.mode_shares)


def _assemble(kernels: pd.DataFrame, ids: list[str], devices: pd.DataFrame,
              total_time_ns: float | None = None, timed: pd.DataFrame | None = None,
              rank_time_ns: dict | None = None) -> ViewsResult:
    timed = timed if timed is not None else pd.DataFrame()
    # a kernel ncu could not measure stays in the kernel rows (n/a, marked) but out of every sum:
    # one such kernel must not blank its phase's time and share
    rows, measured = kernels, device.measured(kernels)
    kernels = kernels if measured.all() else kernels[measured]
    if total_time_ns is None:
        time_ns = kernels["time_ns"].to_numpy(dtype=float)
        if not timed.empty:
            time_ns = np.concatenate([time_ns, timed["time_ns"].to_numpy(dtype=float)])
        total_time_ns = float(time_ns.sum()) if len(time_ns) and not np.isnan(time_ns).any() else float("nan")
    if rank_time_ns is None:
        rank_time_ns = ranks.rank_times(kernels, timed) if not timed.empty or ranks.has_ranks(kernels) else {}
    groups, phases = grouping.groups_and_phases(_within_bounds(kernels), _group_spec(ids), ids, total_time_ns,
                                                rank_time_ns)
    groups, phases = ranks.with_timed(groups, phases, timed, total_time_ns, rank_time_ns)
    gap = gap_module.gap(grouping.order(pd.concat([groups, phases], ignore_index=True)))
    selection = (v8_selection.selection(kernels) if SELECTION_VIEW in ids else
                 pd.DataFrame(columns=v8_selection.SELECTION_COLUMNS))
    tp = not timed.empty or ranks.has_ranks(kernels)
    return ViewsResult(rows, grouping.order(groups), gap, selection, devices, ids, total_time_ns,
                       timed, ranks.communication(kernels, timed) if tp else pd.DataFrame(),
                       ranks.imbalance(kernels, timed) if tp else pd.DataFrame(), rank_time_ns,
                       mlp.activation_share(kernels),
                       collectives=ranks.collectives(timed) if tp else pd.DataFrame())


def _within_bounds(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernels as their groups combine them: a figure outside its physical range is a wrong
    counter, not a measurement (an L2 hit rate of 823 % on a 3 µs decode kernel, seen on the H200),
    so it is missing there and the group's figure n/a by grouping's strict rule, never an
    impossible 408 %. The kernel rows keep the raw value, failing their validation."""
    named = kernels["out_of_bounds"] if "out_of_bounds" in kernels else None
    if named is None or not named.notna().any():
        return kernels
    masked = {}
    catalog = figures()
    for position, names in enumerate(named.to_numpy(dtype=object)):
        for name in names.split(", ") if isinstance(names, str) else ():
            # a group's ratio comes from its sums: an impossible ratio's numerator goes too (a
            # useful MMA share of 1.5 from a wrong shape leaves no group share of 1.5)
            ratio = catalog[name].ratio_of if name in catalog and catalog[name].aggregate == RATIO else None
            for column in (name, ratio[0]) if ratio else (name,):
                if column != "time_ns" and column in kernels:  # the weights stay: a group keeps its time
                    masked.setdefault(column, []).append(position)
    columns = {}
    for name, positions in masked.items():
        values = kernels[name].to_numpy(dtype=float, copy=True)
        values[positions] = np.nan
        columns[name] = values
    return kernels.assign(**columns)


def _devices(ctx: Context, result: pd.DataFrame) -> pd.DataFrame:
    """One row per device: the constants the views used and where each came from."""
    kernels = ctx.kernels
    if kernels.empty:
        return pd.DataFrame()
    key = device.device_key(ctx)
    # a kernel ncu could not measure names no device (its Device and CC cells are empty): it is
    # no second GPU
    counted = device.measured(kernels)
    first = np.unique(key[counted] if counted.any() else key, return_index=True)[1]
    first = np.flatnonzero(counted)[first] if counted.any() else first
    sub = Context(kernels.iloc[first])
    out = pd.DataFrame({
        "device": sub.kernels["device"].to_numpy(dtype=object) if "device" in sub.kernels else None,
        "name": sub.kernels["device__attribute_display_name"].to_numpy(dtype=object)
        if "device__attribute_display_name" in sub.kernels else None,
        "cc": device.cc(sub),
        "sm_count": device.sm_count(sub),
        "max_warps_per_sm": device.max_warps_per_sm(sub),
        # bf16, the type LLM inference runs; every path and type in tensor_rates
        "tensor_ops_per_cycle_per_sm_gmma": device.tensor_rate(sub, "gmma", "bf16"),
        "tensor_ops_per_cycle_per_sm_hmma": device.tensor_rate(sub, "hmma", "bf16"),
        "tensor_rates": [device.TENSOR_RATES.get(str(c)) for c in device.cc(sub)],
        "dram_peak_from_attributes_bytes_per_s": device.dram_peak_from_attributes(sub),
        "dram_peak_published_bytes_per_s": device.published_dram_peak(sub),
        # the clocks of the whole device's kernels, and where each constant came from
        "max_clock_hz": device.max_clock_hz(ctx)[first],
        "max_clock_source": device.max_clock_source(ctx)[first],
        "sm_count_source": device.sm_count_source(sub),
        "sm_clock_measured_hz": device.device_sm_clock_hz(ctx)[first],
        "clocks": device.clock_state(ctx)[first],
    })
    if "dram_peak_bytes_per_s" in result:
        implied = result["implied_dram_peak_bytes_per_s"].to_numpy()
        peak, source = v7_memory.device_dram_peak(ctx)
        out["dram_peak_bytes_per_s"] = peak[first]
        out["dram_peak_source"] = source[first]
        out["implied_peak_kernels"] = np.bincount(key, weights=~np.isnan(implied),
                                                  minlength=key.max() + 1)[key[first]].astype(int)
        flops = out["tensor_ops_per_cycle_per_sm_gmma"] * out["sm_count"] * out["max_clock_hz"]
        out["ridge_flops_per_byte_gmma"] = flops / out["dram_peak_bytes_per_s"]
    return out.reset_index(drop=True)


TEXT_IDENTITY = ("kernel_name", "phase", "role", "role_source", "kind", "cc", "host")


def _text_as_category(kernels: pd.DataFrame) -> pd.DataFrame:
    """Identity text as categoricals: a million kernel rows hold a few hundred distinct names, and
    every comparison and grouping then works on integer codes."""
    changed = {c: kernels[c].astype("category") for c in TEXT_IDENTITY
                if c in kernels.columns and not isinstance(kernels[c].dtype, pd.CategoricalDtype)}
    for column in ("phase", "role"):
        values = changed.get(column, kernels[column]) if column in kernels.columns else None
        if values is None:
            changed[column] = pd.Categorical(np.full(len(kernels), "other"))
        elif values.isna().any():
            if "other" not in values.cat.categories:
                values = values.cat.add_categories("other")
            changed[column] = values.fillna("other")
    return kernels.assign(**changed) if changed else kernels


def compute_views(kernels: pd.DataFrame, view_ids_=None) -> ViewsResult:
    """Every requested view over a kernels table (docs/SCHEMA.md). A view whose metrics the table
    lacks is n/a, and every other view still runs."""
    ids = view_ids(view_ids_)
    if "kernel_name" not in kernels.columns:
        raise ValueError("the kernels table has no kernel_name column: not an smlens kernels table")
    kernels = _text_as_category(kernels.reset_index(drop=True))
    if "measured" not in kernels.columns:  # a store written before ingest marked them
        kernels = kernels.assign(measured=device.measured(kernels))
    timed_mask = ranks.timed_rows(kernels)
    timed = ranks.timed_frame(kernels[timed_mask]) if timed_mask.any() else None
    if timed is not None:  # collectives timed without replay: no counters to compute views from
        kernels = kernels[~timed_mask].reset_index(drop=True)
    return _compute(Context(kernels), ids, timed)


def _bound_text(figure: Figure, value: float) -> str:
    low, high = figure.bounds
    side = f"below {low:g}" if low is not None and value < low else f"above {high:g}"
    unit = " %" if figure.unit == "%" else ""
    return (f"{figure.column} {value:.4g}{unit} is {side}{unit}: physically impossible, a counter "
            "is wrong (the raw value is kept)")


# A counter ncu accumulates over its replay passes can leave its range on a short kernel, whose
# traffic differs from pass to pass: seen on the H200, L2 hit rates of 101.6 to 823 % on 204
# kernels of 1.8 to 11.9 us across the bundled runs, none on a longer one. Below this duration such
# a figure is n/a with that reason; above it, it is a wrong counter and fails.
REPLAY_NOISE_BELOW_NS = 20_000.0


def _noise_text(figure: Figure, value: float, time_ns: float) -> str:
    return (f"{figure.column} {value:.4g} % on a {time_ns / 1000:.3g} us kernel: ncu accumulates it over "
            "its replay passes, and a kernel this short differs from pass to pass (replay noise, not "
            "a measurement; the raw value is kept)")


def bounds_checks(figures: pd.DataFrame, declared, time_ns=None) -> dict[str, pd.DataFrame]:
    """Per declared figure that leaves its physical bounds somewhere (a hit rate of 140 %, a
    negative time), a check failing those kernels (n/a for replay noise on a kernel shorter than
    REPLAY_NOISE_BELOW_NS, Figure.replay_noise); empty when every value is in range."""
    out = {}
    for figure in declared:
        if figure.bounds is None or figure.column not in figures:
            continue
        values = figures[figure.column].to_numpy(dtype=float)
        outside = figure.outside(values)
        if outside.any():
            checks = Checks(len(values))
            if figure.replay_noise and time_ns is not None:
                with np.errstate(invalid="ignore"):
                    short = outside & (time_ns < REPLAY_NOISE_BELOW_NS)
                checks.na(short, lambda v, t, f=figure: _noise_text(f, v, t), values, time_ns)
            checks.failed(outside, lambda v, f=figure: _bound_text(f, v), values)
            out[figure.column] = checks.frame(figures.index, leftover="")
    return out


def _noise_is_na(checked: pd.DataFrame, outside: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """A kernel whose figure is replay noise is n/a for its view, with the reason, unless a check
    failed: the other checks passing cannot vouch for a figure that is no measurement."""
    status = checked["status"].to_numpy(dtype=object).copy()
    detail = checked["detail"].to_numpy(dtype=object).copy()
    for check in outside.values():
        noise = (check["status"] == NA).to_numpy() & (check["detail"] != "").to_numpy()
        take = noise & (status != FAIL)
        status[take] = NA
        others = detail[take]
        reason = check["detail"].to_numpy(dtype=object)[take]
        detail[take] = [r if not o or o == r else f"{r}; {o}" for r, o in zip(reason, others)]
    return pd.DataFrame({"status": pd.Categorical(status, categories=list(STATUSES)),
                         "detail": pd.Categorical(detail)}, index=checked.index)


def failed_for(kernels: pd.DataFrame, view: str, figure: str) -> np.ndarray:
    """The kernels on which `view` fails to vouch for `figure`: its cross-checks failed, or the
    figure itself left its physical bounds. Another figure out of bounds (an impossible L2 hit
    rate) fails the view's validation but says nothing against this one (DRAM bytes)."""
    checks = kernels.get(f"validation_checks_{view}", kernels.get(f"validation_{view}"))
    if checks is None:
        return np.zeros(len(kernels), dtype=bool)
    failed = (checks == "fail").to_numpy(dtype=bool, na_value=False)
    if "out_of_bounds" in kernels:
        named = kernels["out_of_bounds"].astype(object).to_numpy()
        failed = failed | np.array([isinstance(n, str) and figure in n.split(", ") for n in named], dtype=bool)
    return failed


def _compute(ctx: Context, ids: list[str], timed: pd.DataFrame | None = None) -> ViewsResult:
    kernels = ctx.kernels
    parts = {c: kernels[c] for c in IDENTITY if c in kernels.columns}
    if "kind" not in parts:
        parts["kind"] = pd.Series(names(ctx)["kind"], index=kernels.index)
    parts["time_ns"] = pd.Series(v1_time.time_ns(ctx), index=kernels.index)

    figure_frames, validation = [], {}
    out_of_bounds = np.full(len(kernels), None, dtype=object)  # the figures out of range, by name
    # the gap's views always run (their figures feed it); only the requested ones are validated
    for view in _computed_views(ids):
        module = VIEWS[view]
        figures = module.compute(ctx)
        figure_frames.append(figures)
        if view not in ids:
            continue
        checked = module.validate(ctx, figures)
        outside = bounds_checks(figures, module.FIGURES, parts["time_ns"].to_numpy(dtype=float))
        if outside:
            validation[f"validation_checks_{view}"] = checked["status"]  # the cross-checks alone
            checked = _noise_is_na(combine(kernels.index, checked, *outside.values()), outside)
            for name, check in outside.items():
                rows = np.flatnonzero((check["status"] != "pass").to_numpy()
                                      & (check["detail"] != "").to_numpy())
                out_of_bounds[rows] = [f"{o}, {name}" if o else name for o in out_of_bounds[rows]]
        validation[f"validation_{view}"] = checked["status"]
        validation[f"validation_detail_{view}"] = checked["detail"]
    columns = dict(parts)
    for frame in figure_frames:
        for name in frame.columns:
            if name not in columns:  # the first view's column of a name, never the identity's
                columns[name] = frame[name]
    columns.update(validation)
    columns["out_of_bounds"] = pd.Series(out_of_bounds, index=kernels.index)
    for view in _computed_views(ids):  # what gave each figure that names its quantities
        for figure in VIEWS[view].FIGURES:
            if (figure.reads or figure.reads_any) and figure.column in columns:
                named = figure_source(ctx, figure)
                # a figure the kernel does not have was given by nothing
                missing = pd.isna(columns[figure.column]).to_numpy(dtype=bool)
                named = categorical(np.where(missing, -1, named.codes), list(named.categories))
                columns[SOURCE_PREFIX + figure.column] = pd.Series(named, index=kernels.index)
    # copy=False: a million rows of ~100 figures are not copied into one block
    result = pd.DataFrame(columns, index=kernels.index, copy=False)
    return _assemble(result, ids, _devices(ctx, result), timed=timed)
