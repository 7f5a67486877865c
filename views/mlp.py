"""The activation's share of the MLP's time, per phase.

A gated MLP runs gate/up, `act(gate) * up`, then down. The activation and the multiply are
elementwise kernels that write and read back a tokens x intermediate tensor; a GEMM with the
activation fused in its epilogue would not. Their share of the MLP block's time is what such a
fusion could save at most. The MLP block is the `mlp_block` range (the built-in decoder's, or the
annotation's around a model's MLP module): kernels whose `block` is `mlp`.
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
    activation = in_mlp & kernels["role"].astype(object).eq("elementwise").to_numpy(dtype=bool)
    phase = kernels["phase"].astype(object).to_numpy()
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
