"""Column access and validation bookkeeping shared by the views.

Everything here works on whole columns: the views run over a million kernel rows, so nothing loops
over rows. Text results (paths, limiters, statuses, details) are categoricals built from integer
codes, and a detail with numbers in it is formatted once per distinct combination of its values.
A metric a capture lacks reads as an all-NaN column, never as zeros.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np
import pandas as pd

PASS, FAIL, NA = "pass", "fail", "n/a"
STATUSES = (PASS, FAIL, NA)
_STATUS_CODE = {PASS: 0, FAIL: 1, NA: 2}


def plain(value):
    """A result as plain JSON values: numpy numbers as Python's, NaN and infinities as None, dict
    keys as texts, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return None if value is pd.NA else value


def metric(kernels: pd.DataFrame, name: str) -> np.ndarray:
    """A metric column as float64 values; all NaN when the capture lacks it."""
    if name not in kernels.columns:
        return np.full(len(kernels), np.nan)
    column = kernels[name]
    if column.dtype == np.float64:
        return column.to_numpy()
    if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)  # Int64, int64, float32, ...
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def first_metric(kernels: pd.DataFrame, *names: str) -> np.ndarray:
    """The first of several equivalent columns that holds a value, row by row."""
    out = np.full(len(kernels), np.nan)
    for name in names:
        if name in kernels.columns:
            out = np.where(np.isnan(out), metric(kernels, name), out)
    return out


def equals(kernels: pd.DataFrame, name: str, *values: str) -> np.ndarray:
    """Row is one of `values` in text column `name` (False where missing or null)."""
    if name not in kernels.columns:
        return np.zeros(len(kernels), dtype=bool)
    return kernels[name].isin(values).to_numpy(dtype=bool, na_value=False)


def group_codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """One integer per distinct combination of `columns` (nulls are a value of their own), numbered
    0..k-1. Cheaper than a groupby on categorical and integer columns."""
    key = np.zeros(len(frame), dtype=np.int64)
    span = 1
    for column in columns:
        codes, uniques = pd.factorize(frame[column], use_na_sentinel=False)
        if span * (len(uniques) + 1) >= 2 ** 62:  # many keys of many values: renumber before int64 overflows
            key = pd.factorize(key)[0]
            span = len(frame) + 1
        key = key * (len(uniques) + 1) + codes
        span *= len(uniques) + 1
    if not columns or len(key) == 0:
        return key
    if span <= 4 * len(key) + 1024:  # small key space: number the keys present without hashing
        present = np.zeros(span, dtype=np.int64)
        present[key] = 1
        return (np.cumsum(present) - 1)[key]
    return pd.factorize(key)[0]


def safe_div(numerator, denominator) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 or NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(numerator, dtype=np.float64) / np.asarray(denominator, dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def categorical(codes: np.ndarray, categories: Sequence[str]) -> pd.Categorical:
    """Text from integer codes into `categories`; -1 is null."""
    categories = tuple(categories)
    dtype = (_text_categories(categories) if all(type(c) is str for c in categories)
             else pd.CategoricalDtype(list(categories)))
    return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), dtype=dtype)


@functools.lru_cache(maxsize=1024)
def _text_categories(categories: tuple[str, ...]) -> pd.CategoricalDtype:
    # the same few lists (statuses, a figure's sources) recur: validating texts as categories
    # costs 0.3 ms, and the views build 156 categoricals (BENCHMARKS.md, `smlens views`)
    return pd.CategoricalDtype(list(categories))


def choose(conditions: Sequence[np.ndarray], labels: Sequence[str]) -> pd.Categorical:
    """The label of the first true condition per row, null where none holds (like np.select)."""
    codes = np.select(list(conditions), list(range(len(labels))), default=-1)
    return categorical(codes, labels)


def argmax_label(columns: Sequence[np.ndarray], labels: Sequence[str],
                 floor: tuple[float, str] | None = None) -> tuple[pd.Categorical, np.ndarray]:
    """Per row, the label of the largest column and its value. With `floor` (value, label): that
    label where even the largest is below the value; a row missing a column is labelled only when
    the columns it has already reach the floor (a missing one could be larger, but the row is bound
    either way). Without a floor, a column missing everywhere (a counter the chip lacks) takes no
    part and a row missing any other is null."""
    n = len(columns[0]) if len(columns) else 0
    present = [i for i, c in enumerate(columns) if floor is not None or not np.isnan(c).all()]
    if not present:
        return categorical(np.full(n, -1), list(labels)), np.full(n, np.nan)
    table = np.column_stack([np.asarray(columns[i], dtype=float) for i in present])
    complete = ~np.isnan(table).any(axis=1)
    best = np.argmax(np.where(np.isnan(table), -np.inf, table), axis=1)
    top = table[np.arange(n), best]
    codes = np.asarray(present)[best]
    names = list(labels)
    if floor is None:
        decided = complete
    else:
        decided = complete | (top >= floor[0])
        names.append(floor[1])
        codes = np.where(top < floor[0], len(labels), codes)
    return categorical(np.where(decided, codes, -1), names), np.where(decided, top, np.nan)


def _take(values, positions: np.ndarray):
    if isinstance(values, pd.Series):
        return values.iloc[positions].to_numpy()
    if isinstance(values, pd.Categorical):
        return values.take(positions)
    return np.asarray(values)[positions]


def format_distinct(template: Callable[..., str], values: Sequence, positions: np.ndarray
                    ) -> tuple[np.ndarray, list[str]]:
    """`template(*row values)` for the rows at `positions`, evaluated once per distinct combination:
    (codes per position, texts)."""
    if not values:
        return np.zeros(len(positions), dtype=np.int64), [template()]
    key = np.zeros(len(positions), dtype=np.int64)
    uniques = []
    for column in values:
        codes, unique = pd.factorize(_take(column, positions), use_na_sentinel=False)
        key = key * (len(unique) + 1) + codes
        uniques.append((codes, unique))
    distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    texts = [template(*(unique[codes[i]] for codes, unique in uniques)) for i in first]
    return inverse.reshape(-1), texts


class Checks:
    """Per-row validation status and detail, decided rule by rule: the first rule that claims a row
    decides it. A detail is a text, or a template over value arrays (one argument per array)."""

    def __init__(self, n: int):
        self.status = np.full(n, _STATUS_CODE[NA], dtype=np.int8)
        self.detail = np.zeros(n, dtype=np.int64)
        self.texts: dict[str, int] = {"": 0}
        self.decided = np.zeros(n, dtype=bool)

    def _code(self, text: str) -> int:
        return self.texts.setdefault(text, len(self.texts))

    def set(self, mask, status: str, detail: str | Callable[..., str] = "", *values) -> None:
        rows = np.asarray(mask, dtype=bool) & ~self.decided
        if not rows.any():
            return
        self.decided |= rows
        self.status[rows] = _STATUS_CODE[status]
        if callable(detail):
            positions = np.flatnonzero(rows)
            codes, texts = format_distinct(detail, values, positions)
            lookup = np.array([self._code(t) for t in texts], dtype=np.int64)
            self.detail[positions] = lookup[codes]
        else:
            self.detail[rows] = self._code(detail)

    def na(self, mask, detail="", *values) -> None:
        self.set(mask, NA, detail, *values)

    def passed(self, mask, detail="", *values) -> None:
        self.set(mask, PASS, detail, *values)

    def failed(self, mask, detail="", *values) -> None:
        self.set(mask, FAIL, detail, *values)

    def frame(self, index, leftover: str = "not checked") -> pd.DataFrame:
        self.detail[~self.decided] = self._code(leftover)
        texts = sorted(self.texts, key=self.texts.get)
        return pd.DataFrame({"status": categorical(self.status, STATUSES),
                             "detail": categorical(self.detail, texts)}, index=index, copy=False)


def combine(index, *parts: pd.DataFrame) -> pd.DataFrame:
    """Several checks of one view -> one status: fail if any fails, pass if any passes, else n/a.
    The detail comes from the checks that decided: failures joined with '; ', else the first."""
    codes = [p["status"].cat.codes.to_numpy() for p in parts]  # 0 pass, 1 fail, 2 n/a
    status = np.full(len(index), _STATUS_CODE[NA], dtype=np.int8)
    for c in codes:
        status = np.where((c == 0) & (status == 2), 0, status)
    for c in codes:
        status = np.where(c == 1, 1, status)
    texts: dict[str, int] = {"": 0}
    detail = np.zeros(len(index), dtype=np.int64)
    decided = np.zeros(len(index), dtype=bool)
    failing = []
    for part, c in zip(parts, codes):
        categories = list(part["detail"].cat.categories)
        part_codes = part["detail"].cat.codes.to_numpy()
        has_text = np.array([t != "" for t in categories] + [False])[part_codes]  # -1: null
        lookup = np.array([texts.setdefault(t, len(texts)) for t in categories] + [0], dtype=np.int64)
        rows = (c == status) & has_text & ~decided
        detail[rows] = lookup[part_codes[rows]]
        decided |= rows
        failing.append((c == 1) & has_text)
    several = np.sum(failing, axis=0) >= 2
    if several.any():
        positions = np.flatnonzero(several)
        values = [p["detail"] for p in parts] + [f.astype(np.int8) for f in failing]
        n = len(parts)
        joined, joined_texts = format_distinct(
            lambda *v: "; ".join(t for t, f in zip(v[:n], v[n:]) if f), values, positions)
        lookup = np.array([texts.setdefault(t, len(texts)) for t in joined_texts], dtype=np.int64)
        detail[positions] = lookup[joined]
    ordered = sorted(texts, key=texts.get)
    return pd.DataFrame({"status": categorical(status, STATUSES),
                         "detail": categorical(detail, ordered)}, index=index, copy=False)
