"""Text for values, shared by the terminal tables, the HTML report and the gate's outputs."""
from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from views.kernel_names import short_kernel_name  # noqa: F401 (the reports' name for it)

# the space between a number and its unit (`2.5 %`, `371 µs`, `4.81 TB/s`, `12.6 M`): prose wraps
# never there (the terminal's Prose, the report's `prose`)
NUMBER_UNIT_SPACE = re.compile(r"(\d) (?=(?:%|[µun]?s|ms|[kMGTP]?B(?:/s)?|[kMGT]?Hz|[kMGTP]?FLOP(?:/s|/byte)?|ops|"
                               r"[kMGTP])(?![\w/]))")


def is_missing(value: Any) -> bool:
    """None, NA, NaT or NaN: a figure that was not measured (never shown as 0)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    try:
        return bool(pd.isna(value)) if not isinstance(value, (list, tuple, dict, str)) else False
    except (TypeError, ValueError):
        return False


def number_text(value: Any, digits: int = 3, unit: str = "", missing: str = "n/a") -> str:
    """A number to `digits` significant digits, thousands grouped from 10**digits up; text as it
    is; `missing` for a missing or infinite value."""
    if is_missing(value):
        return missing
    if isinstance(value, str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(number):
        return missing
    if number != 0 and abs(number) >= 10 ** digits:
        return f"{number:,.0f}{unit}"
    return f"{number:.{digits}g}{unit}"


def in_units(value: float, units: tuple[tuple[float, str], ...]) -> str:
    """`value` to three significant digits in the first of `units` ((size, suffix), largest first)
    that it reaches, else in the last."""
    size, suffix = next(((s, u) for s, u in units if abs(value) >= s), units[-1])
    return f"{value / size:.3g}{suffix}"


def time_text(ns: Any, missing: str = "n/a") -> str:
    """Nanoseconds, three significant digits in the unit that fits: 83.7 µs, 1.25 ms."""
    if is_missing(ns):
        return missing
    return in_units(float(ns), ((1e9, " s"), (1e6, " ms"), (1e3, " µs"), (1, " ns")))


def bytes_text(count: Any, missing: str = "n/a") -> str:
    """Bytes, decimal units as ncu prints them: 12.6 MB."""
    if is_missing(count):
        return missing
    return in_units(float(count), ((1e9, " GB"), (1e6, " MB"), (1e3, " kB"), (1, " B")))


# Values of text figures in words an Nsight Compute user reads without a key: the MMA path is
# named by the instruction (ncu's counters say gmma for wgmma, hmma for mma.sync).
VALUE_WORDS = {"mma_path": {"gmma": "wgmma", "hmma": "mma.sync", "none": "no MMA"},
               "occupancy_limiter": {"shared_mem": "shared memory"}}


def value_text(column: str, value: Any) -> str:
    """A text figure's value as shown: `gmma` -> `wgmma`, `registers+shared_mem` -> `registers +
    shared memory`."""
    words = VALUE_WORDS.get(column, {})
    text = str(value)
    if column == "occupancy_limiter":
        return " + ".join(words.get(part, part) for part in text.split("+"))
    return words.get(text, text)


# What to do when a figure is n/a because the capture lacks its inputs (the reasons the views give
# start with these words); a reason that says the figure does not apply (not a GEMM) needs nothing.
_NA_ADVICE = (("needs ", "profile with smlens (it collects every metric the views read), or add them "
               "to ncu --metrics"),
              ("no sm__ops_path_tensor", "profile with smlens, or add the sm__ops_path_tensor_* "
               "metrics to ncu --metrics"),
              ("no problem shape", "pass --shapes FILE to smlens ingest, or profile with smlens "
               "(its NVTX ranges carry M= N= K=)"))


def na_advice(reason: Any) -> str:
    """An n/a reason with what to do about it, where something can be done."""
    text = "" if is_missing(reason) else str(reason)
    for start, advice in _NA_ADVICE:
        if text.startswith(start) and advice not in text:
            return f"{text}: {advice}"
    return text
