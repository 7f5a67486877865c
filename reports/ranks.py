"""Terminal tables of a tensor-parallel run: compute against communication per phase and rank, and
the imbalance between ranks (the views result's `.communication` and `.imbalance`)."""
from __future__ import annotations

import pandas as pd
from rich.table import Table

from reports.terminal import _cell, _phase_heading, _table, pct, ratio, us

COMM_LEGEND = ("comm: the rank's collectives, timed with CUDA events in a run without ncu (ncu cannot "
               "replay them); on the compute stream, so all of it is exposed. wait: the part spent "
               "waiting for a slower rank (its time over the fastest rank's for the same call); "
               "transfer: the fastest rank's. bus: NCCL bus bandwidth over the transfer time.")


def communication_table(comm: pd.DataFrame) -> Table:
    table = _table("Compute and communication per phase and rank (µs)",
                   [("phase / rank", "left"), ("compute", "right"), ("comm", "right"),
                    ("comm %", "right"), ("wait", "right"), ("transfer", "right"),
                    ("bus GB/s", "right"), ("calls", "right")])
    previous = None
    for _, row in comm.iterrows():
        previous = _phase_heading(table, str(row["phase"]), previous)
        cells = [f"  rank {int(row['rank'])}", us(row["compute_ns"]), us(row["comm_ns"]),
                 pct(row["comm_share_pct"]), us(row["comm_wait_ns"]), us(row["comm_transfer_ns"]),
                 ratio(row["bus_gbps"]), str(int(row["collectives"]))]
        table.add_row(*[_cell(c) for c in cells])
    return table


def imbalance_table(imbalance: pd.DataFrame) -> Table:
    table = _table("Rank imbalance: the slowest rank's time over the mean rank's",
                   [("phase / role", "left"), ("min µs", "right"), ("max µs", "right"),
                    ("max/mean", "right"), ("slowest", "right")])
    previous = None
    for _, row in imbalance.iterrows():
        previous = _phase_heading(table, str(row["phase"]), previous)
        cells = [f"  {row['role']}", us(row["min_rank_time_ns"]), us(row["max_rank_time_ns"]),
                 ratio(row["imbalance"]), f"rank {int(row['slowest_rank'])}"]
        table.add_row(*[_cell(c) for c in cells])
    return table
