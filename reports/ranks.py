"""Terminal tables of a tensor-parallel run: compute against communication per phase and rank, and
the imbalance between ranks (the views result's `.communication` and `.imbalance`)."""
from __future__ import annotations

import pandas as pd
from rich.table import Table

from reports.terminal import Column, Rows, fit, pct, ratio, us

COMM_LEGEND = ("comm: the rank's collectives, timed with CUDA events in a run without ncu (ncu cannot "
               "replay them); on the compute stream, so all of it is exposed. wait: the part spent "
               "waiting for a slower rank (its time over the fastest rank's for the same call); "
               "transfer: the fastest rank's. bus: NCCL bus bandwidth over the transfer time.")


def _by_phase(frame: pd.DataFrame, key) -> tuple[Rows, list]:
    """Rows under a heading per phase (the key column's text from `key(row)`), and each row's
    record, None on heading rows."""
    rows, records, previous = Rows(), [], None
    for _, record in frame.iterrows():
        if str(record["phase"]) != previous:
            previous = str(record["phase"])
            rows.phase(previous)
            records.append(None)
        rows.row(f"  {key(record)}")
        records.append(record)
    return rows, records


def _column(heading: str, records: list, show) -> Column:
    return Column(heading, [None if r is None else show(r) for r in records])


def communication_table(comm: pd.DataFrame, width: int = 10_000) -> list[Table]:
    rows, records = _by_phase(comm, lambda r: f"rank {int(r['rank'])}")
    columns = [_column("compute", records, lambda r: us(r["compute_ns"])),
               _column("comm", records, lambda r: us(r["comm_ns"])),
               _column("comm %", records, lambda r: pct(r["comm_share_pct"])),
               _column("wait", records, lambda r: us(r["comm_wait_ns"])),
               _column("transfer", records, lambda r: us(r["comm_transfer_ns"])),
               _column("bus GB/s", records, lambda r: ratio(r["bus_gbps"])),
               _column("calls", records, lambda r: str(int(r["collectives"])))]
    return fit("Compute and communication per phase and rank (µs)", "phase / rank", rows, columns, width)


def imbalance_table(imbalance: pd.DataFrame, width: int = 10_000) -> list[Table]:
    rows, records = _by_phase(imbalance, lambda r: str(r["role"]))
    columns = [_column("min µs", records, lambda r: us(r["min_rank_time_ns"])),
               _column("max µs", records, lambda r: us(r["max_rank_time_ns"])),
               _column("max/mean", records, lambda r: ratio(r["imbalance"])),
               _column("slowest", records, lambda r: f"rank {int(r['slowest_rank'])}")]
    return fit("Rank imbalance: the slowest rank's time over the mean rank's", "phase / role", rows,
               columns, width)
