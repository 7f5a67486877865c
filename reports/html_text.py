"""Text for the HTML report: escaping, number formatting, ordering, validation status.

Every string that came from a capture (kernel names, NVTX messages, even phase and role names) is
untrusted: HTML gets `esc` (html.escape), JSON inside <script> gets `script_json` (`<`, `>`, `&`,
U+2028 and U+2029 as `\\uXXXX`), and text handed to plotly, which reads a little HTML in its labels,
gets `plot_text` (entities, which plotly shows as the characters themselves).
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import pandas as pd
from reports.formatting import NUMBER_UNIT_SPACE, bytes_text, is_missing, na_advice, number_text, short_kernel_name, time_text
from views import registry
from views.catalog import HIGHER, LOWER
from views.grouping import ROLE_ORDER
from views.vocabulary import PHASE_ORDER

# A change against a baseline worse than this, in the direction the catalog calls worse, is marked;
# the CI gate (reports/gate.py) owns real statistics.
REGRESSION_PCT = 5.0

# --- escaping -------------------------------------------------------------------------------------

def esc(value: Any) -> str:
    """Text for HTML content or a quoted attribute; missing values are an em dash."""
    if is_missing(value):
        return "\u2014"
    return html.escape(str(value), quote=True)


def prose(value: Any) -> str:
    """`esc` for a sentence: a number and its unit joined by a no-break space, so a browser never
    puts them on two lines."""
    return NUMBER_UNIT_SPACE.sub("\\1\u00a0", esc(value))


def plot_text(value: Any) -> str:
    """Text for a plotly label or hover: plotly reads <br>, <b>, <a href> and entities in labels,
    so markup is turned into entities that plotly shows as the characters themselves."""
    if is_missing(value):
        return "\u2014"
    return html.escape(str(value), quote=False)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                  "\u2029": "\\u2029"}


def script_json(obj: Any) -> str:
    """JSON that is safe inside <script>: no `</script>`, `<!--` or line separators can appear,
    NaN and infinities become null."""
    text = json.dumps(_plain(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group(0)], text)


def _plain(obj: Any) -> Any:
    """Python containers and numbers only, with NaN and +-inf as None, floats rounded to 5
    significant digits (the report shows 3; this keeps per-kernel data small)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return _plain(obj.tolist())
    if obj is None or obj is pd.NA or obj is pd.NaT:
        return None
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.5g}")
    if hasattr(obj, "item"):  # numpy scalar
        return _plain(obj.item())
    return str(obj)


# --- small helpers --------------------------------------------------------------------------------

def order_key(values: Iterable, order: tuple) -> list:
    rank = {v: i for i, v in enumerate(order)}
    return [rank.get(v, len(order)) for v in values]


def sort_groups(frame: pd.DataFrame, role_first: bool = False) -> pd.DataFrame:
    """Phases in time order, roles in layer order (a phase's `all` last); stable within."""
    if frame is None or frame.empty or "phase" not in frame.columns:
        return frame
    out = frame.copy()
    out["_p"] = order_key(out["phase"], PHASE_ORDER)
    out["_r"] = order_key(out["role"], ROLE_ORDER) if "role" in out.columns else 0
    keys = ["_r", "_p"] if role_first else ["_p", "_r"]
    keys += ["rank"] if "rank" in out.columns else []  # tensor parallel: a group per rank
    return out.sort_values(keys, kind="stable").drop(columns=["_p", "_r"])


def group_keys(frame: pd.DataFrame) -> list:
    """Each group's (phase, role, rank): rank None but in a tensor-parallel run's groups."""
    ranks = [None if is_missing(v) else int(v) for v in frame["rank"]] if "rank" in frame.columns \
        else [None] * len(frame)
    return list(zip(col(frame, "phase"), col(frame, "role"), ranks))


def group_label(phase: Any, role: Any, rank: Any = None) -> str:
    return f"{phase} \u00b7 {role}" + ("" if rank is None else f" r{rank}")


def short_name(name: Any, limit: int = 80) -> str:
    """`void ns::kernel<...>(...)` -> `ns::kernel`: the part that tells kernels apart at a glance."""
    return short_kernel_name(name, limit, missing="")


def col(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column, or all-missing when the views did not produce it."""
    if frame is not None and name in frame.columns:
        return frame[name]
    return pd.Series([float("nan")] * (0 if frame is None else len(frame)),
                     index=None if frame is None else frame.index, dtype="float64")


def numbers(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column as numbers (text and missing values as NaN)."""
    return pd.to_numeric(col(frame, name), errors="coerce")


def fmt(value: Any, digits: int = 3, unit: str = "") -> str:
    """A number with `digits` significant digits (thousands separated), or an em dash."""
    return number_text(value, digits, unit, missing="\u2014")


def fmt_time_ns(ns: Any) -> str:
    return time_text(ns, missing="\u2014")


def fmt_bytes(b: Any) -> str:
    return bytes_text(b, missing="\u2014")


def delta_pct(current: Any, base: Any) -> Optional[float]:
    if is_missing(current) or is_missing(base):
        return None
    try:
        current, base = float(current), float(base)
    except (TypeError, ValueError):  # text (a stall reason, a limiter): no percentage
        return None
    if base == 0:
        return None
    return (current - base) / abs(base) * 100.0


def is_regression(figure: str, delta: Optional[float]) -> bool:
    return change_class(figure, delta) == "bad"


def change_class(figure: str, delta: Optional[float]) -> str:
    """`good` or `bad` when the change passes REGRESSION_PCT in a direction the catalog calls
    better or worse; empty when it does not, or the figure has no better direction."""
    declared = registry.figures().get(figure) or registry.rank_figures().get(figure)
    if delta is None or declared is None or abs(delta) <= REGRESSION_PCT:
        return ""
    if declared.better == HIGHER:
        return "good" if delta > 0 else "bad"
    if declared.better == LOWER:
        return "bad" if delta > 0 else "good"
    return ""


def arrow(delta: Optional[float]) -> str:
    """Up for an increase, down for a decrease: the direction of the change, not its merit."""
    if delta is None or delta == 0:
        return ""
    return "\u25b2" if delta > 0 else "\u25bc"


# --- validation status ----------------------------------------------------------------------------

def validation_frame(kernels: pd.DataFrame, view_ids: Iterable[str]) -> pd.DataFrame:
    """Columns `V1`..`V8` (pass / fail / n/a) and `detail_V1`.. per kernel, from either the
    `validation_V*` columns or a `validations` mapping column (JSON form)."""
    out = pd.DataFrame(index=kernels.index)
    mapping = kernels["validations"] if "validations" in kernels.columns else None
    for view in view_ids:
        if f"validation_{view}" in kernels.columns:
            status = kernels[f"validation_{view}"]
        elif mapping is not None:
            status = mapping.map(lambda m, v=view: m.get(v) if isinstance(m, dict) else None)
        else:
            status = pd.Series([None] * len(kernels), index=kernels.index, dtype="object")
        out[view] = status.map(lambda s: "n/a" if is_missing(s) or s not in ("pass", "fail") else s)
        out[f"detail_{view}"] = col(kernels, f"validation_detail_{view}").astype("object")
    return out


def na_reasons(kernels: pd.DataFrame, view: str, checks: pd.DataFrame, limit: int = 3) -> list:
    """(count, reason with what to do) of the view's n/a kernels, commonest first."""
    if view not in checks.columns:
        return []
    reasons = checks.loc[checks[view] == "n/a", f"detail_{view}"].astype(object)
    reasons = reasons[reasons.map(lambda r: not is_missing(r) and r != "").astype(bool).to_numpy()]
    return [(int(count), na_advice(reason)) for reason, count in reasons.value_counts().head(limit).items()]


@dataclass
class ViewStatus:
    view: str
    passed: int
    failed: int
    not_available: int
    failures: list  # (kernel id, short name, detail)

    @property
    def status(self) -> str:
        if self.failed:
            return "fail"
        return "pass" if self.passed else "n/a"


def view_status(kernels: pd.DataFrame, view: str, checks: pd.DataFrame) -> ViewStatus:
    status = checks[view] if view in checks.columns else pd.Series(dtype="object")
    failures = []
    for idx in status.index[status == "fail"]:
        failures.append((kernels.at[idx, "id"] if "id" in kernels.columns else idx,
                         short_name(kernels.at[idx, "name"]) if "name" in kernels.columns else "",
                         checks.at[idx, f"detail_{view}"]))
    return ViewStatus(view, int((status == "pass").sum()), int((status == "fail").sum()),
                      int((status == "n/a").sum()), failures)
