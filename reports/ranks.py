"""Terminal tables of a tensor-parallel run: compute against communication per phase and rank, each
timed collective, and the imbalance between ranks (the views result's `.communication`,
`.collectives` and `.imbalance`); headings are the declared figures' labels
(views.registry.rank_figures)."""
from __future__ import annotations

import pandas as pd
from rich.table import Table

from reports.formatting import bytes_text
from reports.tables import Column, Rows, fit, pct, ratio, us
from views import registry

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


def _figure(column: str, records: list, show) -> Column:
    """A declared figure's column: its label, and its unit where the table's title does not say it."""
    figure = registry.rank_figures()[column]
    unit = f" {figure.unit}" if figure.unit == "GB/s" else ""
    return _column(figure.label + unit, records, lambda r: show(r[column]))


def communication_table(comm: pd.DataFrame, width: int = 10_000) -> list[Table]:
    rows, records = _by_phase(comm, lambda r: f"rank {int(r['rank'])}")
    columns = [_figure("compute_ns", records, us), _figure("comm_ns", records, us),
               _figure("comm_share_pct", records, pct), _figure("comm_wait_ns", records, us),
               _figure("comm_transfer_ns", records, us), _figure("bus_gbps", records, ratio),
               _figure("collectives", records, lambda v: str(int(v)))]
    return fit("Compute and communication per phase and rank (µs)", "phase / rank", rows, columns, width)


def collectives_table(collectives: pd.DataFrame, width: int = 10_000) -> list[Table]:
    """Each timed collective per rank, named by where it is called (`allreduce after o_proj`)."""
    rows, records = _by_phase(collectives, lambda r: f"{r['role']} after {r['after']}, rank {int(r['rank'])}")
    count = lambda v: "n/a" if pd.isna(v) else str(int(v))  # noqa: E731
    columns = [_figure("comm_bytes", records, bytes_text), _figure("comm_samples", records, count),
               _figure("comm_ns", records, us), _figure("comm_wait_ns", records, us),
               _figure("comm_transfer_ns", records, us), _figure("bus_gbps", records, ratio)]
    return fit("Each timed collective per rank (µs; time: the median call)", "phase / collective", rows,
               columns, width)


def imbalance_table(imbalance: pd.DataFrame, width: int = 10_000) -> list[Table]:
    rows, records = _by_phase(imbalance, lambda r: str(r["role"]))
    columns = [_figure("min_rank_time_ns", records, us), _figure("max_rank_time_ns", records, us),
               _figure("imbalance", records, ratio),
               _column("slowest rank", records, lambda r: f"rank {int(r['slowest_rank'])}")]
    return fit("Rank imbalance: the slowest rank's time over the mean rank's (µs)", "phase / role", rows,
               columns, width)
