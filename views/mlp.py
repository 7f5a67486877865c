"""The activation's share of the MLP's time, per phase.

A gated MLP runs gate/up, `act(gate) * up`, then down. The activation and the multiply are
elementwise kernels that write and read back a tokens x intermediate tensor; a GEMM with the
activation fused in its epilogue would not. Their share of the MLP block's time is what such a
fusion could save at most. The MLP block is the `mlp_block` range (the built-in decoder's, or the
annotation's around a model's MLP module): kernels whose `block` is `mlp`.

The activation's kernels are the elementwise ones launched between a gate/up GEMM and the next
down GEMM of the same process: in a dense MLP exactly `act` and `* up`; in a mixture of experts also
what else passes over the intermediate tensor there (transformers' masking of unused rows), but not
its routing (softmax, top-k, sorts) or the gathers of tokens and expert weights, which are not work
an epilogue would absorb (`gather` kernels: transformers' decode gathers the down weights between
the two GEMMs). An MLP block with no gate/up GEMM (roles from kernel names alone) counts all its
elementwise kernels.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.common import metric
from views.vocabulary import PHASE_ORDER

COLUMNS = ("phase", "mlp_kernels", "mlp_time_ns", "activation_kernels", "activation_time_ns",
           "activation_share_of_mlp_pct")


def activation_share(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per phase that ran MLP kernels (COLUMNS); the share is null when a kernel's time is."""
    if "block" not in kernels.columns or kernels.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    in_mlp = kernels["block"].astype(object).eq("mlp").to_numpy(dtype=bool)
    if not in_mlp.any():
        return pd.DataFrame(columns=list(COLUMNS))
    time_ns = (kernels["time_ns"].to_numpy(dtype=float) if "time_ns" in kernels.columns
               else metric(kernels, "gpu__time_duration.sum"))
    role = kernels["role"].astype(object).to_numpy()
    phase = kernels["phase"].astype(object).to_numpy()
    activation = _between_gate_up_and_down(kernels, in_mlp, role, phase)
    rows = []
    ranks = {p: i for i, p in enumerate(PHASE_ORDER)}
    for name in sorted(set(phase[in_mlp]), key=lambda p: (ranks.get(p, len(ranks)), str(p))):
        mine = in_mlp & (phase == name)
        act = activation & mine
        mlp_ns, act_ns = time_ns[mine].sum(), time_ns[act].sum()  # NaN stays NaN: no guess
        rows.append({"phase": name, "mlp_kernels": int(mine.sum()), "mlp_time_ns": mlp_ns,
                     "activation_kernels": int(act.sum()), "activation_time_ns": act_ns,
                     "activation_share_of_mlp_pct": 100 * act_ns / mlp_ns if mlp_ns > 0 else np.nan})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _between_gate_up_and_down(kernels: pd.DataFrame, in_mlp: np.ndarray, role: np.ndarray,
                              phase: np.ndarray) -> np.ndarray:
    """The activation's kernels (see the module's docstring), in each process's launch order."""
    elementwise = in_mlp & (role == "elementwise")
    names = kernels["kernel_name"].astype(str) if "kernel_name" in kernels.columns else pd.Series("", index=kernels.index)
    elementwise &= ~names.str.contains("gather", case=False, regex=False).to_numpy(dtype=bool)
    gemm = kernels["kind"].astype(object).eq("gemm").to_numpy(dtype=bool) if "kind" in kernels.columns \
        else np.ones(len(kernels), dtype=bool)
    gate_up = in_mlp & gemm & (role == "gate_up_proj")
    down = in_mlp & gemm & (role == "down_proj")
    order = np.arange(len(kernels))
    if "kernel_id" in kernels.columns:
        order = np.lexsort((order, pd.to_numeric(kernels["kernel_id"], errors="coerce").to_numpy(dtype=float)))
    process = (kernels["process_id"].astype(object).to_numpy() if "process_id" in kernels.columns
               else np.zeros(len(kernels), dtype=object))
    between = np.zeros(len(kernels), dtype=bool)
    inside: dict = {}  # process -> after a gate/up GEMM, before the down GEMM
    for i in order:
        if gate_up[i]:
            inside[process[i]] = True
        elif down[i]:
            inside[process[i]] = False
        elif elementwise[i] and inside.get(process[i], False):
            between[i] = True
    # a phase whose MLP has no gate/up GEMM: every elementwise kernel of its block
    for name in set(phase[in_mlp]):
        mine = phase == name
        if not (gate_up & mine).any():
            between |= elementwise & mine
    return between
