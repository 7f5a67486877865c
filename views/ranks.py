"""Tensor-parallel runs: communication against compute per phase and rank, and rank imbalance.

A TP run's kernels table holds two kinds of rows (docs/SCHEMA.md): kernels ncu profiled, and
collectives timed in a run without replay (`time_source` other than `ncu`; role `allreduce`),
because ncu cannot replay a collective on one rank while its peers wait. The timed rows carry a
time and nothing else, so the views' per-kernel figures are computed over the profiled kernels
only; the timed rows join the time shares (`with_timed`) and the communication table here.

Communication per phase and rank (`communication`):
- compute_ns: the rank's profiled kernel time; comm_ns: its collectives' time;
- comm_share_pct: comm / (compute + comm);
- exposed_comm_ns: communication not hidden behind compute. The built-in workload issues each
  all-reduce on the compute stream, which waits for it, so all of it is exposed;
- comm_wait_ns: the part of comm_ns spent waiting for slower ranks: a collective cannot finish
  before the last rank joins it, so the fastest rank's time for the same call is its transfer and
  the rest of a rank's time is waiting (imbalance in what came before the collective);
- bus_gbps: NCCL's bus bandwidth over the transfer time: bytes x 2(n-1)/n for an all-reduce,
  x (n-1)/n for an all-gather, reduce-scatter or all-to-all, x 1 for a broadcast (BUS_FACTOR).
Each timed collective per rank (`collectives`): its op, bytes, calls timed, time (the median over
them), wait, transfer and bus bandwidth, and how it was timed (`time_source`).
Rank imbalance per phase and role (`imbalance`): the slowest rank's time over the mean rank's, and
which ranks were slowest and fastest.
FIGURES declares each of these columns for the reports (label, unit, direction, definition).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.catalog import GROUP, HIGHER, LOWER, MEAN, NEITHER, RATIO, SUM, Figure
from views.common import STATUSES, metric, safe_div
from views.grouping import PHASE_ORDER, ROLE_ORDER, order
from views.vocabulary import COLLECTIVE_ROLES

TIME_SOURCE = "time_source"
PROFILED = "ncu"
COMM_COLUMNS = ["phase", "rank", "compute_ns", "comm_ns", "comm_share_pct", "exposed_comm_ns",
                "comm_wait_ns", "comm_transfer_ns", "comm_bytes", "bus_gbps", "collectives"]
IMBALANCE_COLUMNS = ["phase", "role", "ranks", "min_rank_time_ns", "max_rank_time_ns",
                     "mean_rank_time_ns", "imbalance", "slowest_rank", "fastest_rank"]
COLLECTIVE_COLUMNS = ["phase", "role", "after", "rank", "comm_bytes", "comm_samples", "comm_ns",
                      "comm_wait_ns", "comm_transfer_ns", "bus_gbps", TIME_SOURCE]
# Bytes on the bus per byte of the collective (NCCL's bus bandwidth), n ranks; an unknown op counts
# as an all-reduce, the collective the TP runs time.
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0}
_TIME = "the time a rank spends in its collectives, from the stream reaching each to its end " \
        "(CUDA events, or the wall clock on the CPU, in a run without ncu; a call's time is the " \
        "median over the calls it stands for): the transfer, waiting for a slower rank, and a host " \
        "late to launch it"
# The figures of the tables above, for the reports (views.registry.rank_figures()).
FIGURES = (
    Figure("compute_ns", "compute", "ns", LOWER, SUM,
           "the rank's profiled kernel time in the phase (ncu's gpu__time_duration.sum)"),
    Figure("comm_ns", "comm", "ns", LOWER, SUM, _TIME),
    Figure("comm_share_pct", "comm %", "%", LOWER, GROUP,
           "comm_ns / (compute_ns + comm_ns): the share of the rank's time spent in collectives",
           ratio_of=("comm_ns", "compute_ns"), bounds=(0, 100)),
    Figure("exposed_comm_ns", "exposed comm", "ns", LOWER, SUM,
           "communication not hidden behind compute: the collectives run on the compute stream, "
           "which waits for them, so all of comm_ns"),
    Figure("comm_wait_ns", "wait", "ns", LOWER, SUM,
           "a rank's time over the fastest rank's for the same call: waiting for a slower rank "
           "(imbalance in what came before the collective)"),
    Figure("comm_transfer_ns", "transfer", "ns", LOWER, SUM,
           "the fastest rank's time for the same call: a collective cannot end before the last "
           "rank joins it, so this is the transfer"),
    Figure("comm_bytes", "bytes", "bytes", NEITHER, SUM,
           "bytes each rank contributes to the collective (the tensor's numel x itemsize; an "
           "all-gather's output)"),
    Figure("bus_gbps", "bus", "GB/s", HIGHER, GROUP,
           "NCCL's bus bandwidth over the transfer time: bytes x 2(n-1)/n for an all-reduce, "
           "x (n-1)/n for an all-gather or reduce-scatter, x 1 for a broadcast",
           ratio_of=("comm_bytes", "comm_transfer_ns")),
    Figure("collectives", "calls", "count", NEITHER, SUM, "the collectives of the phase per rank "
           "(each standing for the layers and steps it is the median of)"),
    Figure("comm_samples", "timed", "count", NEITHER, SUM,
           "calls timed: the call's time is their median"),
    Figure("min_rank_time_ns", "fastest", "ns", LOWER, SUM, "the fastest rank's time in the role"),
    Figure("max_rank_time_ns", "slowest", "ns", LOWER, SUM, "the slowest rank's time in the role"),
    Figure("mean_rank_time_ns", "mean", "ns", LOWER, SUM, "the ranks' mean time in the role"),
    Figure("imbalance", "max/mean", "ratio", LOWER, GROUP,
           "the slowest rank's time over the mean rank's: 1 is balanced; the phase waits for the "
           "slowest rank at its next collective",
           ratio_of=("max_rank_time_ns", "mean_rank_time_ns"), bounds=(1, None)),
)
# (phase, step, layer, collective): what makes a timed row the same call on every rank
_CALL = ("phase", "step", "layer", "after")


def has_ranks(kernels: pd.DataFrame) -> bool:
    """A tensor-parallel table: some kernel names its rank."""
    return "rank" in kernels.columns and bool(kernels["rank"].notna().any())


def timed_rows(kernels: pd.DataFrame) -> np.ndarray:
    """Rows timed outside ncu (collectives): a `time_source` other than `ncu`."""
    if TIME_SOURCE not in kernels.columns:
        return np.zeros(len(kernels), dtype=bool)
    source = kernels[TIME_SOURCE].astype(object)
    return (source.notna() & (source != PROFILED)).to_numpy(dtype=bool)


def timed_frame(kernels: pd.DataFrame) -> pd.DataFrame:
    """The timed rows: identity, time, bytes, samples."""
    keep = [c for c in ("kernel_id", "kernel_name", "phase", "role", "rank", "device", "process_id",
                        "nvtx_stack", TIME_SOURCE, "comm_bytes", "comm_samples") if c in kernels.columns]
    out = kernels[keep].copy()
    out["time_ns"] = metric(kernels, "gpu__time_duration.sum")
    return out.reset_index(drop=True)


def rank_times(kernels: pd.DataFrame, timed: pd.DataFrame) -> dict:
    """Each rank's whole time (profiled kernels and timed collectives): the time shares' base."""
    if not has_ranks(kernels) and not has_ranks(timed):
        return {}
    both = pd.concat([f[["rank", "time_ns"]] for f in (kernels, timed) if not f.empty],
                     ignore_index=True)
    return {rank: float(t) for rank, t in both.groupby("rank", observed=True)["time_ns"].sum().items()}


def with_timed(groups: pd.DataFrame, phases: pd.DataFrame, timed: pd.DataFrame, total_time_ns: float,
               rank_time_ns: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The timed collectives as group rows (time and share only: no counter was read), and their
    time added to their phase's row."""
    if timed.empty:
        return groups, phases
    keys = ["phase", "role"] + (["rank"] if "rank" in groups.columns else [])
    summed = (timed.groupby(keys, observed=True, dropna=False)
              .agg(kernels=("time_ns", "size"), time_ns=("time_ns", "sum")).reset_index())
    summed["time_share_pct"] = _shares(summed, total_time_ns, rank_time_ns)
    phase_keys = ["phase"] + (["rank"] if "rank" in phases.columns else [])
    extra = summed.groupby(phase_keys, observed=True, dropna=False)[["kernels", "time_ns"]].sum()
    phases = phases.copy()
    for key, row in extra.iterrows():
        key = key if isinstance(key, tuple) else (key,)
        mask = np.ones(len(phases), dtype=bool)
        for column, value in zip(phase_keys, key):
            mask &= (phases[column] == value).to_numpy(dtype=bool, na_value=False)
        if mask.any():
            phases.loc[mask, "kernels"] += int(row["kernels"])
            phases.loc[mask, "time_ns"] += float(row["time_ns"])
        else:
            phases = pd.concat([phases, pd.DataFrame([{**dict(zip(phase_keys, key)), "role": "all",
                                                       "kernels": int(row["kernels"]),
                                                       "time_ns": float(row["time_ns"])}])],
                               ignore_index=True)
    phases["time_share_pct"] = _shares(phases, total_time_ns, rank_time_ns)
    groups = pd.concat([groups, summed], ignore_index=True)
    counts = [c for c in groups.columns if c.endswith(tuple(f"_{s}" for s in STATUSES))]
    groups[counts] = groups[counts].fillna(0).astype(int)  # no timed row was validated
    return groups, phases


def _shares(frame: pd.DataFrame, total_time_ns: float, rank_time_ns: dict) -> np.ndarray:
    """Time shares: of the rank's own time when the run has ranks, else of the whole run's."""
    time_ns = frame["time_ns"].to_numpy(dtype=float)
    if rank_time_ns and "rank" in frame.columns:
        base = frame["rank"].map(rank_time_ns).to_numpy(dtype=float, na_value=np.nan)
    else:
        base = np.full(len(frame), total_time_ns, dtype=float)
    return 100 * safe_div(time_ns, base)


def _calls(timed: pd.DataFrame) -> pd.DataFrame:
    """One row per timed call: where it happened (from its NVTX stack) and its time."""
    def place(stack) -> tuple:
        step = layer = after = None
        for entry in list(stack) if stack is not None else []:
            message = entry.partition(":")[2]
            word = message.split()[0] if message.split() else ""
            if word.startswith("step_"):
                step = word
            elif word.startswith("layer_"):
                layer = word
            elif "after=" in message:
                after = message.split("after=", 1)[1].split()[0]
        return step, layer, after

    out = timed.copy()
    stacks = out["nvtx_stack"] if "nvtx_stack" in out else pd.Series([None] * len(out))
    places = [place(s) for s in stacks]
    out["step"], out["layer"], out["after"] = ([p[i] for p in places] for i in range(3))
    out["phase"] = out["phase"].astype(object)
    return out


def communication(kernels: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    """Compute against communication per phase and rank (the module's docstring says each column)."""
    if timed.empty or not has_ranks(timed):
        return pd.DataFrame(columns=COMM_COLUMNS)
    calls = _calls(timed)
    world = int(calls["rank"].nunique())
    calls["transfer_ns"] = calls.groupby(list(_CALL), dropna=False, observed=True)["time_ns"].transform("min")
    calls["wait_ns"] = calls["time_ns"] - calls["transfer_ns"]
    calls["bus_bytes"] = _bus_bytes(calls, world)
    comm = (calls.groupby(["phase", "rank"], observed=True)
            .agg(comm_ns=("time_ns", "sum"), comm_wait_ns=("wait_ns", "sum"),
                 comm_transfer_ns=("transfer_ns", "sum"), comm_bytes=("comm_bytes", "sum")
                 if "comm_bytes" in calls else ("time_ns", "size"),
                 bus_bytes=("bus_bytes", "sum"), collectives=("time_ns", "size")))
    compute = (kernels.assign(phase=kernels["phase"].astype(object))
               .groupby(["phase", "rank"], observed=True)["time_ns"].sum().rename("compute_ns"))
    out = comm.join(compute, how="left").reset_index()
    out["exposed_comm_ns"] = out["comm_ns"]  # on the compute stream: nothing overlaps it
    out["comm_share_pct"] = 100 * safe_div(out["comm_ns"], out["compute_ns"] + out["comm_ns"])
    out["bus_gbps"] = safe_div(out["bus_bytes"], out["comm_transfer_ns"])  # bytes/ns = GB/s
    out["rank"] = out["rank"].astype("Int64")
    return _in_phase_order(out)[COMM_COLUMNS]


def _bus_bytes(calls: pd.DataFrame, world: int) -> pd.Series:
    bytes_ = pd.to_numeric(calls["comm_bytes"], errors="coerce") if "comm_bytes" in calls else np.nan
    factor = calls["role"].astype(object).map(lambda r: BUS_FACTOR.get(r, BUS_FACTOR["allreduce"])(world))
    return bytes_ * factor.astype(float)


def collectives(timed: pd.DataFrame) -> pd.DataFrame:
    """Each timed collective per rank: its time, the fastest rank's for the same call (transfer),
    the rest (wait), and the bus bandwidth over the transfer."""
    if timed.empty or not has_ranks(timed):
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    calls = _calls(timed).astype({"role": object})
    world = int(calls["rank"].nunique())
    calls["comm_ns"] = calls["time_ns"]
    calls["comm_transfer_ns"] = calls.groupby(list(_CALL), dropna=False, observed=True)["time_ns"].transform("min")
    calls["comm_wait_ns"] = calls["comm_ns"] - calls["comm_transfer_ns"]
    calls["bus_gbps"] = safe_div(_bus_bytes(calls, world), calls["comm_transfer_ns"])
    for column in ("comm_bytes", "comm_samples", TIME_SOURCE):
        if column not in calls:
            calls[column] = np.nan
    calls["rank"] = calls["rank"].astype("Int64")
    return _in_phase_order(calls, with_role=True, then=("after",))[COLLECTIVE_COLUMNS]


def imbalance(kernels: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    """Per phase and role: each rank's time, and the slowest rank's over the mean."""
    frames = [f[["phase", "role", "rank", "time_ns"]] for f in (kernels, timed)
              if not f.empty and has_ranks(f)]
    if not frames:
        return pd.DataFrame(columns=IMBALANCE_COLUMNS)
    both = pd.concat(frames, ignore_index=True).astype({"phase": object, "role": object})
    per_rank = both.groupby(["phase", "role", "rank"], observed=True)["time_ns"].sum().reset_index()
    grouped = per_rank.groupby(["phase", "role"], observed=True)
    out = grouped["time_ns"].agg(ranks="size", min_rank_time_ns="min", max_rank_time_ns="max",
                                 mean_rank_time_ns="mean").reset_index()
    for name, pick in (("slowest_rank", grouped["time_ns"].idxmax()), ("fastest_rank", grouped["time_ns"].idxmin())):
        chosen = per_rank.loc[pick.to_numpy(), ["phase", "role", "rank"]]
        out = out.merge(chosen.rename(columns={"rank": name}), on=["phase", "role"])
        out[name] = out[name].astype("Int64")
    out["imbalance"] = safe_div(out["max_rank_time_ns"], out["mean_rank_time_ns"])
    return _in_phase_order(out, with_role=True)[IMBALANCE_COLUMNS]


def _in_phase_order(frame: pd.DataFrame, with_role: bool = False, then: tuple = ()) -> pd.DataFrame:
    ranked = frame.assign(_p=frame["phase"].map({p: i for i, p in enumerate(PHASE_ORDER)}).fillna(99))
    keys = ["_p", "phase"]
    if with_role:
        ranked["_r"] = ranked["role"].map({r: i for i, r in enumerate(ROLE_ORDER)}).fillna(99)
        keys += ["_r", "role"]
    keys += list(then)
    if "rank" in ranked:
        keys.append("rank")
    return ranked.sort_values(keys, kind="stable").drop(columns=[c for c in ("_p", "_r") if c in ranked]
                                                        ).reset_index(drop=True)


def across_ranks(groups: pd.DataFrame, catalog) -> pd.DataFrame:
    """A tensor-parallel run's groups with its ranks merged: one row per phase and role (the ranks
    run the same kernels side by side, so a chart per rank shows every group twice), each figure
    combined as its declaration says (`catalog`: column -> Figure): a mean weighted by the ranks'
    time, a sum, or a ratio of the summed parts; missing if any rank lacks it. The timed
    collectives have no counters and go (views.ranks.communication shows them). Groups without a
    rank come back as they are."""
    if groups is None or groups.empty or "rank" not in groups.columns:
        return groups
    frame = groups[~groups["role"].astype(object).isin(COLLECTIVE_ROLES).to_numpy()]
    if frame.empty:
        return groups.iloc[0:0].drop(columns=["rank"])
    keys = [frame["phase"].astype(object), frame["role"].astype(object)]
    raw = frame.drop(columns=["phase", "role", "rank"])
    numeric = raw.apply(pd.to_numeric, errors="coerce")

    # every column's candidates in a few whole-table groupbys (a group and a column at a time was
    # thousands of pandas calls: half a second for each of a report's 24 charts), each by the
    # groups' position, as a MultiIndex to align at every step cost most of what was left
    def per_group(table, reduce: str, *args, **kwargs):
        return getattr(table.groupby(keys, sort=False), reduce)(*args, **kwargs).reset_index(drop=True)

    time_sum = per_group(numeric["time_ns"], "sum")
    missing = per_group(numeric.isna(), "any")  # a figure is missing if any rank lacks it
    sums = per_group(numeric, "sum").where(~missing)
    weighted = per_group(numeric.mul(numeric["time_ns"], axis=0), "sum").div(time_sum, axis=0).where(~missing)
    mean_applies = per_group(numeric.notna(), "any") & (time_sum > 0).to_numpy()[:, None]
    shared = per_group(raw, "nunique", dropna=False) == 1  # a text the ranks share (a role's source)
    first = per_group(raw, "nth", 0)
    index = raw.groupby(keys, sort=False).size().index
    merged = {"phase": index.get_level_values(0), "role": index.get_level_values(1),
              "ranks": per_group(frame["rank"], "nunique").astype(int)}
    for column in raw.columns:
        figure = catalog.get(column)
        if column in ("kernels", "time_ns") or (figure is not None and figure.aggregate == SUM):
            merged[column] = sums[column]
        elif figure is not None and figure.aggregate == RATIO and set(figure.ratio_of) <= set(raw.columns):
            top, bottom = (sums[c] for c in figure.ratio_of)
            merged[column] = top / bottom.where(bottom != 0)
        else:
            own = first[column].where(shared[column])
            mean = mean_applies[column] & ((figure is None or figure.aggregate in (MEAN, RATIO))
                                           and raw[column].dtype.kind in "fiu")
            if mean.any():
                own = own.astype(float).where(~mean, weighted[column])
            if shared[column].any() or mean.any():
                merged[column] = own
    # each column typed from its values, as a table of the ranks' own rows would be
    return order(pd.DataFrame(pd.DataFrame(merged).to_dict("records")))
