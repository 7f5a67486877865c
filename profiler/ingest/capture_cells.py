"""ncu's cells -> typed values: numbers as ncu prints them, integers, "(x, y, z)" dimensions.

ncu writes every value as text: thousands separators ("18,720"), "n/a" for no value, "inf" and
"nan", and in a damaged file anything. A column is numeric when numbers are the majority of its
filled cells; its other cells become null and are counted, for a note per kind. Every reader types
its cells with these functions, so a value reads the same from any format.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# a number as ncu prints it: thousands separators allowed, never empty
_NUMBER = r"^[-+]?((\d{1,3}(,\d{3})+|\d+)(\.\d*)?|\.\d+)([eE][-+]?\d+)?$"
_NON_FINITE = r"^[-+]?(inf|infinity|nan)$"
NO_VALUE = ("", "n/a", "N/A", "-")  # ncu's ways of printing "no value": null, no note


def unique_names(names: list[str], notes: list | None = None) -> list[str]:
    """The header's names, a repeated one numbered (`X#1`); a note names the repeated ones."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 0
        out.append(name)
    repeated = [name for name, copies in seen.items() if copies]
    if repeated and notes is not None:
        notes.append(f"the header names {len(repeated)} column(s) more than once ("
                     + ", ".join(repeated[:4]) + (" ..." if len(repeated) > 4 else "")
                     + f"): the later copies are stored as {repeated[0]}#1 and so on")
    return out


@dataclass
class CellCounts:
    """What a column's text cells held."""

    numbers: int = 0  # finite numbers
    text: int = 0  # neither a number nor one of ncu's no-value spellings
    non_finite: int = 0  # inf, nan, or a number beyond float64 (1e400)
    example: str | None = None  # the first text cell

    @property
    def numeric(self) -> bool:
        """A numeric column: numbers are the majority of its filled cells."""
        filled = self.numbers + self.non_finite
        return filled > 0 and filled >= self.text


def _count(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def classify_cells(array: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Text cells -> (float64 values, null unless a finite number ("18,720" too); which cells are
    text, neither a number nor a no-value spelling; which hold a value that is not finite)."""
    text = pc.utf8_trim_whitespace(array.cast(pa.string()))
    no_value = pc.or_kleene(pc.is_null(text), pc.fill_null(pc.is_in(text, pa.array(NO_VALUE)), False))
    number = pc.fill_null(pc.match_substring_regex(text, _NUMBER), False)
    spelled = pc.fill_null(pc.match_substring_regex(text, _NON_FINITE, ignore_case=True), False)
    values = pc.cast(pc.if_else(number, pc.replace_substring(text, ",", ""),
                                pa.scalar(None, pa.string())), pa.float64())
    overflow = pc.fill_null(pc.invert(pc.is_finite(values)), False)  # 1e400
    values = pc.if_else(overflow, pa.scalar(None, pa.float64()), values)
    is_text = pc.invert(pc.or_(pc.or_(no_value, number), spelled))
    return values, is_text, pc.or_(spelled, overflow)


def parse_numbers(array: pa.Array) -> tuple[pa.Array, CellCounts]:
    """float64 from text cells, and what the cells held (see classify_cells)."""
    values, is_text, non_finite = classify_cells(array)
    counts = CellCounts(numbers=len(values) - values.null_count, text=_count(is_text),
                         non_finite=_count(non_finite))
    if counts.text:
        counts.example = pc.filter(pc.utf8_trim_whitespace(array.cast(pa.string())), is_text)[0].as_py()
    return values, counts


def finite_values(values: pa.Array) -> tuple[pa.Array, int]:
    """Non-finite values (inf, nan) made null, and how many there were."""
    bad = pc.fill_null(pc.invert(pc.is_finite(values)), False)
    count = _count(bad)
    return (pc.if_else(bad, pa.scalar(None, pa.float64()), values) if count else values), count


def cell_notes(unreadable: Counter, examples: dict, non_finite: Counter) -> list[str]:
    """One note per kind of unreadable cell, with a count per column."""
    def per_column(counts: Counter, shown_examples: dict, shown: int = 6) -> str:
        parts = [f"{name} {count}" + (f" (e.g. {shown_examples[name][:24]!r})"
                                      if name in shown_examples else "")
                 for name, count in counts.most_common(shown)]
        more = len(counts) - shown
        return ", ".join(parts) + (f" and {more} more column(s)" if more > 0 else "")

    notes = []
    if unreadable:
        notes.append("cells that are not numbers in numeric columns, stored as null: "
                     + per_column(unreadable, examples))
    if non_finite:
        notes.append("values that are not finite (inf, nan, beyond float64), stored as null: "
                     + per_column(non_finite, {}))
    return notes


def integers(values) -> pd.Series:
    """Integers from text cells ("1,056" too); anything else is <NA>."""
    index = values.index if isinstance(values, pd.Series) else None
    if index is not None:
        values = pa.array(values.astype("string").to_numpy(na_value=None), pa.string())
    text = pc.utf8_trim_whitespace(pc.replace_substring(values.cast(pa.string()), ",", ""))
    whole = pc.fill_null(pc.match_substring_regex(text, r"^[-+]?\d{1,18}$"), False)
    numbers = pc.cast(pc.if_else(whole, text, pa.scalar(None, pa.string())), pa.int64())
    return pd.Series(numbers.to_pandas().to_numpy(), dtype="Int64", index=index)


def xyz_columns(values, prefix: str) -> pd.DataFrame:
    """"(256, 1, 1)" -> prefix_x, prefix_y, prefix_z and their product."""
    parts = pc.extract_regex(pc.fill_null(values.cast(pa.string()), ""),
                             r"\(\s*(?P<x>\d+)\s*,\s*(?P<y>\d+)\s*,\s*(?P<z>\d+)\s*\)")
    out = pd.DataFrame({f"{prefix}_{axis}": integers(pc.struct_field(parts, axis)) for axis in "xyz"})
    total_name = "block_threads" if prefix == "block" else "grid_blocks"
    out[total_name] = out[f"{prefix}_x"] * out[f"{prefix}_y"] * out[f"{prefix}_z"]
    return out
