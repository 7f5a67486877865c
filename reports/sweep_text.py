"""A sweep's sentences (views/sweep.py finds the changes and holds their figures): each change's
detail, each finding's sentence, as the terminal, the JSON and the report tell them."""
from __future__ import annotations

import pandas as pd

from views.v7_memory import BOUND_FLOOR_PCT


# What each kind of change does, as a finding says it.
CHANGE_PHRASES = {"bound": "the bound flips", "kernel": "the library picks another kernel",
                  "waves": "the main kernel's wave count crosses an integer", "fill": "the useful MMA share jumps"}


def _num(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.2f}"


def line_label(key: tuple) -> str:
    """A line of the sweep (model, the axis held, its value): `llama-3.1-8b, prompt 512`."""
    model, other, value = key
    return ", ".join(([model] if model else []) + [f"{other} {value}"])


def point_label(row: dict) -> str:
    """`llama-3.1-8b b8 p512`."""
    return " ".join(([row["model"]] if isinstance(row.get("model"), str) else [])
                    + [f"b{int(row['batch'])}", f"p{int(row['prompt'])}"])


def _bound_words(side: dict) -> str:
    pct = side["bound_pct"]
    at = f" at {pct:.0f} %" if pct is not None and not pd.isna(pct) and side["bound"] != "latency" else ""
    if at and side["near_floor"]:
        at += f" (near V7's {BOUND_FLOOR_PCT:.0f} % floor)"
    dram = side["dram_pct"]
    extra = (f" (DRAM {dram:.0f} %)" if side["bound"] == "latency" and dram is not None and not pd.isna(dram)
             else "")
    return f"{side['bound']}{at}{extra}"


def change_detail(change: dict) -> str:
    """One change between neighbours in words: `memory at 71 % → latency (DRAM 38 %)`."""
    a, b = change["figures"]
    if change["kind"] == "bound":
        return f"{_bound_words(a)} → {_bound_words(b)}"
    if change["kind"] == "waves":
        wb = b["wave_count"]
        return (f"{a['waves']:.2f} → {b['waves']:.2f} waves ({a['wave_count']} → {wb} "
                f"wave{'s' if wb > 1 else ''}, wave efficiency {_num(a['wave_efficiency'])} → "
                f"{_num(b['wave_efficiency'])})")
    if change["kind"] == "fill":
        return f"useful MMA share {change['before']} → {change['after']}"
    return f"{change['before']} → {change['after']}"  # the kernel chosen


def changes_told(changes: pd.DataFrame) -> pd.DataFrame:
    """The changes with each one's detail in words in place of its figures."""
    details = [change_detail(c) for c in changes.to_dict("records")]
    told = changes.copy()
    told["figures"] = pd.Series(details, index=changes.index, dtype=object)
    return told.rename(columns={"figures": "detail"})


def _token_step(steps: list[tuple], prefill: bool) -> str:
    """Where a GEMM's change happens in tokens: between the most tokens before it and the fewest
    after it when those agree (every step below the one, every step above the other), else each
    step seen."""
    unit = "tokens (batch x prompt)" if prefill else "(batch)"
    low, high = max(f for f, _ in steps), min(t for _, t in steps)
    if low < high:
        return f"between {low:,.0f} and {high:,.0f} {unit}" if prefill else f"between batch {low:,.0f} and {high:,.0f}"
    said = list(dict.fromkeys(f"{f:,.0f} → {t:,.0f}" for f, t in steps))
    shown = ", ".join(said[:4]) + (f" and {len(said) - 4} more" if len(said) > 4 else "")
    return f"at {shown} {unit}" if prefill else f"at batch {shown}"


def _along(values: list[tuple], axis: str) -> str:
    """'0.12, 0.50, 1.00 at batch 1, 4, 16', or '' when none is known."""
    shown = [f"{v:.2f}" if not pd.isna(v) else "n/a" for _, v in values]
    if not shown or all(v == "n/a" for v in shown):
        return ""
    return f"{', '.join(shown)} at {axis} {', '.join(str(x) for x, _ in values)}"


def finding_text(finding: dict) -> str:
    """A finding in a sentence, with the largest share of a run's time its groups hold."""
    told = finding["told"]
    if finding["kind"] == "points":
        listed = "; ".join(f"{point_label(r)}: {r['status']}" + (f" ({r['note']})" if r["note"] else "")
                           for r in told["points"])
        return f"{len(told['points'])} of {told['of']} point(s) not measured whole: {listed}."
    kind, role, first = finding["kind"], told["role"], told["first"]
    phases = " and ".join(told["phases"])
    if told["by_tokens"]:
        models = told["models"]
        where = f"{phases} · {role}" + (f" ({', '.join(models)})" if models else "")
        step = _token_step(told["token_steps"], told["prefill"])
    else:
        where = f"{phases} · {role} ({'; '.join(line_label(k) for k in told['lines'])})"
        step = f"at {first['axis']} {first['from']} → {first['to']}"
    # a jump in the useful MMA share names the share once: in the phrase
    said = f"{first['before']} → {first['after']}" if kind == "fill" else change_detail(first)
    text = f"{where}: {CHANGE_PHRASES[kind]} {step}: {said}"
    if kind == "bound":
        fill = _along(told["fill_along"], first["axis"])
        text += f"; useful MMA share {fill}" if fill else ""
    return f"{text} (up to {finding['weight_pct']:.1f} % of a run's time)."


def findings_told(findings: list[dict]) -> list[dict]:
    """The findings with their sentence (`text`) in place of their figures."""
    return [{k: v for k, v in f.items() if k != "told"} | {"text": finding_text(f)} for f in findings]


def mixed_text(mixed: tuple[str, dict]) -> str:
    """views/sweep.mixed's finding in a line: `the runs are of different devices (H200: run a, b; ...)`."""
    what, values = mixed
    sides = "; ".join(f"{v[:40]}: run {', '.join(r[:3])}{' ...' if len(r) > 3 else ''}" for v, r in values.items())
    return f"the runs are of different {what} ({sides})"
