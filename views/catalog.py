"""What a view declares about each figure it computes.

A figure is a column of the views' per-kernel table. Its declaration, next to the view's compute
and validate, says everything the reports need to show, compare and gate it without knowing the
view: a label, a unit, which way is better, how a group of kernels combines it, and one line on
what it is. The registry collects every view's figures into one catalog (`registry.figures()`),
and the terminal, the HTML report, the JSON and the gate read it from there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# How a group of kernels (a phase and role, a kernel family) combines the figure.
MEAN = "mean"  # weighted by kernel time
SUM = "sum"  # extensive: time, bytes, ops
RATIO = "ratio"  # a ratio of two sums (`ratio_of`), over the kernels that do some of the denominator
MODE = "mode"  # a text figure: the value that holds the most kernel time
# a text figure: which of several figures (`argmax_of`) is the largest in the group's time-weighted
# means, so that a group's top stall or bound agrees with the group's own shares and percentages
ARGMAX = "argmax"
KERNEL = "kernel"  # per kernel only: an input of a validation, or a detail no group sums up
GROUP = "group"  # no kernel has it: computed from a group's other figures (the gap's factors)
AGGREGATES = (MEAN, SUM, RATIO, MODE, ARGMAX, KERNEL, GROUP)

HIGHER, LOWER, NEITHER = "higher", "lower", "neither"
BETTER = (HIGHER, LOWER, NEITHER)

# How far past a bound is still rounding, relative to the bound (to 1 for a bound of 0). A
# percentage: 0.5 % of 100 (ncu prints to 0.01; seen on the H200: an L2 hit rate of 100.11 % on a
# 14 us kernel, and 101.6 % to 823 % on short decode kernels, which fail). A share or ratio: 0.5 %.
BOUND_SLACK = {"%": 0.005, "share": 0.005, "ratio": 0.005}

# `%`: percent of a peak or of cycles; `share`: a part of a whole as a fraction 0..1 (shown as a
# percentage); `ratio`: a plain ratio (shown as 0.50); `text` and `flag`: not numbers.
UNITS = ("ns", "%", "share", "ratio", "GHz", "ops", "FLOP", "FLOP/byte", "bytes", "bytes/s", "GB/s",
         "ops/cycle/SM", "warps/issue", "waves", "count", "text", "flag")


@dataclass(frozen=True)
class Figure:
    column: str
    label: str  # a column heading: short, without the unit
    unit: str
    better: str  # which way a change is an improvement
    aggregate: str
    definition: str  # one line: the formula and the counters it reads
    ratio_of: tuple[str, str] | None = None  # RATIO: (numerator, denominator) figure columns
    # MODE: a value a group shows only when none of its kernels has another (mma_path's `none`: a
    # GEMM's range runs gmma even where its elementwise kernels take longer)
    mode_fallback: str | None = None
    # MODE: (kernel figure, group column): the group column receives that figure's time-weighted
    # mean over the kernels holding the group's value (a bound's `bound_pct`: the bounding unit's
    # share of its peak in the kernels it bounds)
    mode_value: tuple[str, str] | None = None
    # MODE: each value's share of the group's time as `<column>_<value>_time_share`, and the value
    # the group's only where it holds no less time than its kernels without one (a bound: a phase
    # whose kernels are mostly of unknown bound is not "mostly memory-bound")
    mode_shares: bool = False
    # ARGMAX: (value, figure column) pairs; the text is the value whose column is largest
    argmax_of: tuple[tuple[str, str], ...] = ()
    # ARGMAX: (floor, value): the text when even the largest is below the floor (a bound's `latency`)
    argmax_floor: tuple[float, str] | None = None
    # ARGMAX: the group column that receives the winning column's value (the top stall's share)
    argmax_value: str | None = None
    # the physical range (low, high; None: open): a value outside it beyond BOUND_SLACK fails the
    # view's validation, and the raw value is kept (a hit rate of 140 %, a negative time)
    bounds: tuple[float | None, float | None] | None = None
    rests_on: tuple[str, ...] = ()  # other views whose figures this one is computed from
    summary: bool = False  # one of the figures that sum up a kernel (every kernel's JSON carries it)
    # the quantities (views/quantities.py) it is computed from: each kernel's JSON names the
    # metric or derivation that gave each (its `sources`), and a capture without them cannot show it
    reads: tuple[str, ...] = ()
    # a family of quantities any of which gives it (the tensor ops by type and path): its source
    # names those that counted something
    reads_any: tuple[str, ...] = ()
    # a value out of its bounds on a short kernel is how ncu's replay accumulates the counter (L2
    # hits over several passes), not a wrong counter: n/a with that reason, not a failure
    replay_noise: bool = False
    view: str = ""  # the view that declares it; the registry fills it in

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"figure {self.column}: aggregate {self.aggregate!r} is none of {AGGREGATES}")
        if self.better not in BETTER:
            raise ValueError(f"figure {self.column}: better {self.better!r} is none of {BETTER}")
        if self.unit not in UNITS:
            raise ValueError(f"figure {self.column}: unit {self.unit!r} is none of {UNITS}")
        if (self.aggregate in (RATIO, GROUP)) != (self.ratio_of is not None):
            raise ValueError(f"figure {self.column}: a RATIO or GROUP figure and only one names its ratio_of")
        if self.aggregate in (MODE, ARGMAX) and self.unit != "text":
            raise ValueError(f"figure {self.column}: MODE and ARGMAX combine text figures only")
        if (self.aggregate == ARGMAX) != bool(self.argmax_of):
            raise ValueError(f"figure {self.column}: an ARGMAX figure and only one names its argmax_of")
        if self.mode_fallback is not None and self.aggregate != MODE:
            raise ValueError(f"figure {self.column}: only a MODE figure has a mode_fallback")
        if (self.mode_value is not None or self.mode_shares) and self.aggregate != MODE:
            raise ValueError(f"figure {self.column}: only a MODE figure has a mode_value or mode_shares")

    def outside(self, values):
        """Where `values` lie outside the physical bounds by more than rounding (a boolean array)."""
        values = np.asarray(values, dtype=float)
        out = np.zeros(values.shape, dtype=bool)
        if self.bounds is None:
            return out
        low, high = self.bounds
        slack = BOUND_SLACK.get(self.unit, 0.0)
        with np.errstate(invalid="ignore"):
            if low is not None:
                out |= values < low - slack * max(abs(low), 1.0)
            if high is not None:
                out |= values > high + slack * max(abs(high), 1.0)
        return out

    @property
    def is_text(self) -> bool:
        return self.unit == "text"

    @property
    def vouched_by(self) -> tuple[str, ...]:
        """The views whose validations vouch for this figure: its own and those it rests on."""
        return tuple(dict.fromkeys((*self.rests_on, self.view)))
