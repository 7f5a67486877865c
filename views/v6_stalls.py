"""V6 Stall signature: why resident warps do not issue.

Each `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` is the warps waiting on
that reason per issued instruction; as shares of their sum they say where the time goes, grouped in
families. `selected` (the warp that issued) is counted in the sum and the scheduling family but is
no stall, so it is left out of the top three. The validation: the reasons add up to the warps
active per issue (`smsp__average_warps_active_per_issue_active.ratio`), within 10 % on kernels of
5 µs and more; shorter kernels are n/a (their counters come from different replay passes: seen up
to 15 % apart on 2 to 8 µs kernels).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from views.catalog import ARGMAX, HIGHER, KERNEL, MEAN, NEITHER, Figure
from views import quantities as q
from views.common import Checks, categorical, safe_div
from views.context import Context
from views.vocabulary import STALL_FAMILIES as FAMILIES

ID = "V6"
TITLE = "Stall signature"
REASONS = tuple(r for reasons in FAMILIES.values() for r in reasons)
NOT_A_STALL = "selected"
WARPS_PER_ISSUE = "smsp__average_warps_active_per_issue_active.ratio"
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
QUANTITIES = (*(q.stall_quantity(r) for r in REASONS), "warps_per_issue", "issue_active_pct", "time_ns")
if set(REASONS) != set(q.STALL_REASONS):
    raise ValueError("views/vocabulary.py's stall reasons and views/quantities.py's differ")
FIGURES = (
    Figure("issue_active_pct", "issue active", "%", HIGHER, MEAN,
           f"{ISSUE_ACTIVE}: the share of active cycles a warp was issued", reads=("issue_active_pct",)),
    Figure("stall_sum", "stall sum", "warps/issue", NEITHER, KERNEL,
           "the sum of the stall reasons: what the validation holds against ncu's warps per issue"),
    *(Figure(f"stall_{family}_share", f"{family} stalls", "share", NEITHER, MEAN,
             f"the {family} reasons ({', '.join(reasons)}) as a share of the stall sum", bounds=(0, 1))
      for family, reasons in FAMILIES.items()),
    # per reason: a group's top stall is the largest of their time-weighted means
    *(Figure(f"stall_{reason}_share", f"{reason} stalls", "share", NEITHER, KERNEL,
             f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio as a share of the "
             "stall sum", bounds=(0, 1)) for reason in REASONS),
    Figure("top_stall", "top stall", "text", NEITHER, ARGMAX,
           "the reason most warps waited on (selected, the warp that issued, left out); a group's: "
           "the largest of its time-weighted reason shares", summary=True,
           reads_any=tuple(q.stall_quantity(r) for r in REASONS),
           argmax_of=tuple((r, f"stall_{r}_share") for r in REASONS if r != NOT_A_STALL),
           argmax_value="top_stall_share"),
    Figure("top_stall_share", "top stall share", "share", NEITHER, KERNEL,
           "the top stall's share of the stall sum", bounds=(0, 1)),
    *(figure for rank, word in ((2, "second"), (3, "third")) for figure in (
        Figure(f"stall_{rank}", f"{word} stall", "text", NEITHER, KERNEL, f"the {word} most waited-on reason"),
        Figure(f"stall_{rank}_share", f"{word} stall share", "share", NEITHER, KERNEL,
               f"the {word} stall's share of the stall sum"))),
)

TOLERANCE = 0.10
MIN_DURATION_NS = 5000.0
BLOCK_ROWS = 1 << 16


def _add(columns: list[np.ndarray]) -> np.ndarray:
    """Σ of the columns, NaN only where all are NaN (a reason this chip lacks adds nothing)."""
    total = np.zeros(len(columns[0])) if columns else np.zeros(0)
    missing = None  # rows where every column so far is NaN (None: no NaN seen at all)
    for column in columns:
        gaps = np.isnan(column)
        if gaps.any():  # the common case, a capture with every reason counted, skips this
            missing = gaps if missing is None else missing & gaps
            total += np.where(gaps, 0.0, column)
        else:
            missing = np.zeros(len(total), dtype=bool)
            total += column
    if missing is not None and missing.any():
        total[missing] = np.nan
    return total


def compute(ctx: Context) -> pd.DataFrame:
    kernels = ctx.kernels
    present = [r for r in REASONS if q.collected(kernels, q.stall_quantity(r))]
    values = {r: q.value(ctx, q.stall_quantity(r)) for r in present}
    n = len(kernels)
    family_sums = {f: _add([values[r] for r in reasons if r in values]) if any(r in values for r in reasons)
                   else None for f, reasons in FAMILIES.items()}
    total = _add([s for s in family_sums.values() if s is not None]) if values else np.full(n, np.nan)
    known = total > 0
    denominator = np.where(known, total, np.nan)
    out = {"issue_active_pct": q.value(ctx, "issue_active_pct"), "stall_sum": total}
    for family, family_sum in family_sums.items():
        out[f"stall_{family}_share"] = family_sum / denominator if family_sum is not None else np.full(n, np.nan)
    for reason in REASONS:
        out[f"stall_{reason}_share"] = values[reason] / denominator if reason in values else np.full(n, np.nan)
    # the top three stalls ('selected' aside): repeated argmax over a float32 block of rows at a
    # time, small enough to stay in cache (a million rows at once is slower on a small machine)
    stalls = [r for r in present if r != NOT_A_STALL]
    codes = np.array([REASONS.index(r) for r in stalls] or [0])
    best = np.full((3, n), -1, dtype=np.int64)
    top = np.full((3, n), -1.0)
    block = np.empty((min(n, BLOCK_ROWS), max(len(stalls), 1)), dtype=np.float32)
    for start in range(0, n if stalls else 0, BLOCK_ROWS):
        stop = min(n, start + BLOCK_ROWS)
        table = block[: stop - start]
        for i, reason in enumerate(stalls):
            column = values[reason][start:stop]
            table[:, i] = np.where(np.isnan(column), -1.0, column)
        rows = np.arange(stop - start)
        for rank in range(3):
            winner = table.argmax(axis=1)
            best[rank, start:stop] = winner
            top[rank, start:stop] = table[rows, winner]
            table[rows, winner] = -2.0
    for rank in range(3):
        valid = known & (top[rank] >= 0)
        label = "top_stall" if rank == 0 else f"stall_{rank + 1}"
        out[label] = categorical(np.where(valid, codes[best[rank]], -1), REASONS)
        out[f"{label}_share"] = np.where(valid, top[rank] / denominator, np.nan)
    return pd.DataFrame(out, index=kernels.index, copy=False)


def validate(ctx: Context, figures: pd.DataFrame) -> pd.DataFrame:
    kernels = ctx.kernels
    total = figures["stall_sum"].to_numpy()
    expected = q.value(ctx, "warps_per_issue")
    time_ns = q.value(ctx, "time_ns")
    checks = Checks(len(kernels))
    checks.na(np.isnan(total) | np.isnan(expected), f"needs the stall reasons and {WARPS_PER_ISSUE} (ncu section {q.WARPS})")
    checks.na(time_ns < MIN_DURATION_NS, "shorter than 5 µs: the stall and issue counters come "
                                         "from different replay passes")
    ratio = safe_div(total, expected)
    close = np.abs(ratio - 1) <= TOLERANCE
    checks.passed(close)
    checks.failed(~close, lambda t, e: f"stall reasons add to {t:.2f} warps per issue, ncu counts "
                  f"{e:.2f} ({100 * (t / e - 1):+.1f} %)", total, expected)
    return checks.frame(kernels.index)
