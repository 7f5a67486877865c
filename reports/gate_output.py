"""What `smlens gate` writes: a terminal table (rich), Markdown for a pull-request comment, JUnit XML
for CI systems. JSON is `GateResult.to_json()`.

Every form opens with the verdict and the sentence saying what decided (threshold alone, or
threshold and Mann-Whitney U), names every reason the gate could not judge, lists regressions
first, and reports kernels that appeared or disappeared.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections import Counter

from rich.console import Group
from rich.text import Text

from reports.formatting import bytes_text, is_missing, short_kernel_name, time_text
from reports.gate import Comparison, GateResult
from reports.terminal import Column, Prose, Rows, fit

# statuses worth a row in the table and the Markdown findings. The others are counted; "cannot
# judge" rows are summed up per cause in the problem lines, groups on one side only in the kernel
# lines (JSON and JUnit keep every comparison)
SHOWN = ("regression", "noise", "improved")
_ORDER = {status: i for i, status in enumerate(SHOWN)}
# the outcomes of a comparison made, in the Markdown summary's columns
COMPARED = ("regression", "cannot judge", "noise", "improved", "pass")
_STYLE = {"regression": "bold red", "cannot judge": "bold yellow", "improved": "green",
          "noise": "dim", "appeared": "cyan", "disappeared": "cyan", "pass": "green",
          "could not judge": "bold yellow"}


def format_value(value: object, unit: str = "") -> str:
    if is_missing(value):
        return "n/a"
    if isinstance(value, str):
        return value
    if unit == "ns":
        return time_text(value)
    if unit == "bytes":
        return bytes_text(value)
    if unit == "%":
        return f"{float(value):.1f}%"
    return f"{float(value):.3g}"


def format_change(comp: Comparison) -> str:
    if comp.change is None:
        return ""
    if comp.change_pct is None or math.isinf(comp.change_pct):
        return f"{'+' if comp.change >= 0 else ''}{format_value(comp.change, comp.rule.unit)}"
    return f"{comp.change_pct:+.1f}%"


def threshold_text(comp: Comparison) -> str:
    rule = comp.rule
    if rule.direction == "changed":
        return "changed"
    sign = {"higher": "+", "lower": "−", "either": "±"}[rule.direction]
    effect = f"{rule.min_effect:g} pts" if rule.unit == "%" else format_value(rule.min_effect, rule.unit)
    floor = f" and {effect}" if rule.min_effect else ""
    return f"{sign}{rule.relative_pct:g}%{floor}"


def shown(result: GateResult) -> list[Comparison]:
    rows = [c for c in result.comparisons if c.status in _ORDER]
    return sorted(rows, key=lambda c: (_ORDER[c.status], c.rule.label, c.group_label))


def summary_line(result: GateResult) -> str:
    counts = Counter(c.status for c in result.comparisons)
    parts = [f"{counts[s]} {s}" for s in ("regression", "cannot judge", "noise", "improved", "pass",
                                          "n/a", "small", "appeared", "disappeared") if counts[s]]
    return f"{len(result.comparisons)} comparisons: " + ", ".join(parts) if parts else "no comparisons"


def finding_columns(comps: list[Comparison]) -> list[Column]:
    """The findings' columns, in the terminal table and the Markdown alike: the group's keys (phase,
    role, family) each in a column of its own (blank where a rule does not group by it), then
    baseline, current, change and, when a test gave one, p."""
    keys = list(dict.fromkeys(k for comp in comps for k in comp.group))
    columns = [Column(k.replace("kernel_family", "family"), [c.group.get(k, "") for c in comps], "left")
               for k in keys]
    columns += [Column("baseline", [format_value(c.baseline_center, c.rule.unit) for c in comps]),
                Column("current", [format_value(c.current_center, c.rule.unit) for c in comps]),
                Column("change", [format_change(c) for c in comps])]
    if any(c.p_value is not None for c in comps):
        columns.append(Column("p", ["" if c.p_value is None else f"{c.p_value:.3g}" for c in comps]))
    return columns


def _launches(kernel: dict) -> str:
    count = kernel["launches"]
    return f"{count} launch{'es' if count != 1 else ''}, {format_value(kernel['time_ns'], 'ns')}"


# ---- terminal ----------------------------------------------------------------------------------

def render_table(result: GateResult, limit: int = 40, width: int = 80):
    """A rich renderable: verdict, method, problems, the findings (a heading row per rule with its
    threshold, the group's phase, role and family in columns of their own), kernel changes. Fits
    `width` columns: a table that does not is split, its columns never cut."""
    parts: list = [Text.assemble(("gate: ", "bold"), (result.verdict, _STYLE.get(result.verdict, "")),
                                 f"  (exit {result.exit_code})"),
                   Text(result.method), Text(summary_line(result), style="dim")]
    for problem in result.problems:
        parts.append(Prose(f"could not judge: {problem}", style="yellow"))
    for warning in result.warnings:
        parts.append(Prose(f"warning: {warning}", style="dim"))
    rows = shown(result)[:limit]
    by_rule: dict[str, list[Comparison]] = {}
    for comp in rows:
        by_rule.setdefault(comp.rule.label, []).append(comp)
    for label, comps in by_rule.items():  # a table per rule, titled with its threshold
        table_rows = Rows()
        for comp in comps:
            table_rows.row(comp.status, _STYLE.get(comp.status))
        columns = finding_columns(comps)
        parts += fit(f"{label} (worse: {threshold_text(comps[0])})", "status", table_rows, columns, width)
        parts += [Prose(f"  note: {c.group_label}: {c.note}", style="dim") for c in comps if c.note]
    if len(shown(result)) > limit:
        parts.append(Text(f"… {len(shown(result)) - limit} more rows: see --format json or --markdown",
                          style="dim"))
    for label, kernels in (("appeared", result.appeared), ("disappeared", result.disappeared)):
        for kernel in kernels[:10]:
            parts.append(Text(f"kernel {label}: {kernel['phase']}/{kernel['role']} "
                              f"{short_kernel_name(kernel['kernel_name'])} ({_launches(kernel)})", style="cyan"))
        if len(kernels) > 10:
            parts.append(Text(f"… {len(kernels) - 10} more kernels {label}", style="dim"))
    return Group(*parts)


# ---- Markdown ----------------------------------------------------------------------------------

def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(result: GateResult) -> str:
    """A pull-request comment: verdict, method, problems, a per-rule summary table (always
    present), the findings table, and kernel changes."""
    icon = {"pass": "✅", "regression": "❌", "could not judge": "⚠️"}.get(result.verdict, "")
    lines = [f"## smlens gate: {icon} {result.verdict} (exit {result.exit_code})", "",
             result.method, "",
             f"Baseline: {', '.join(result.baseline_runs) or 'none'}  ",
             f"Current: {', '.join(result.current_runs) or 'none'}", ""]
    if result.problems:
        lines += ["**The gate could not judge:**", ""]
        lines += [f"- {_cell(p)}" for p in result.problems] + [""]
    by_rule: dict[str, Counter] = {}
    for comp in result.comparisons:
        by_rule.setdefault(comp.rule.label, Counter())[comp.status] += 1
    # "compared" is the sum of the five outcomes after it, each counted as the terminal's summary
    # line counts it (summary_line), so the pass column sums to its "N pass"
    lines += ["| rule | threshold | compared | regression | cannot judge | within noise | improved | pass "
              "| n/a or small |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rule_thresholds = {c.rule.label: threshold_text(c) for c in result.comparisons}
    for label, counts in by_rule.items():
        compared = sum(counts[s] for s in COMPARED)
        lines.append(f"| {_cell(label)} | {_cell(rule_thresholds[label])} | {compared} | "
                     + " | ".join(str(counts[s]) for s in COMPARED)
                     + f" | {counts['n/a'] + counts['small']} |")
    if not by_rule:
        lines.append("| (none) | | 0 | 0 | 0 | 0 | 0 | 0 | 0 |")
    rows = shown(result)
    if rows:
        columns = [Column("status", [c.status for c in rows], "left"),
                   Column("rule", [c.rule.label for c in rows], "left"), *finding_columns(rows),
                   Column("threshold", [threshold_text(c) for c in rows], "left"),
                   Column("test", [c.note or c.test for c in rows], "left")]
        lines += ["", "| " + " | ".join(_cell(c.heading) for c in columns) + " |",
                  "| " + " | ".join("---:" if c.justify == "right" else "---" for c in columns) + " |"]
        for index in range(len(rows)):
            lines.append("| " + " | ".join(_cell(c.cells[index]) for c in columns) + " |")
    for label, kernels in (("appeared", result.appeared), ("disappeared", result.disappeared)):
        if kernels:
            lines += ["", f"**Kernels {label}** (a library may have picked another kernel):", ""]
            lines += [f"- {k['phase']}/{k['role']}: `{short_kernel_name(k['kernel_name'])}` "
                      f"({_launches(k)})" for k in kernels]
    if result.warnings:
        lines += ["", "<details><summary>Warnings</summary>", ""]
        lines += [f"- {_cell(w)}" for w in result.warnings] + ["", "</details>"]
    return "\n".join(lines) + "\n"


# ---- JUnit XML ---------------------------------------------------------------------------------

def to_junit(result: GateResult) -> str:
    """JUnit XML: one <testsuite> per rule, one <testcase> per group. A regression is a <failure>,
    a comparison the gate could not judge an <error>, a group not compared (n/a on both sides,
    under the time share, present on one side only) <skipped>. Problems that belong to no group
    become an <error> test case of their own suite."""
    root = ET.Element("testsuites", name="smlens gate")
    suites: dict[str, list[Comparison]] = {}
    for comp in result.comparisons:
        suites.setdefault(comp.rule.label, []).append(comp)
    grouped_problems = {f"{c.rule.label}: {c.group_label}" for c in result.comparisons
                        if c.status == "cannot judge"}
    loose = [p for p in result.problems if not any(p.startswith(g) for g in grouped_problems)]
    totals = Counter()
    for label, comps in suites.items():
        suite = ET.SubElement(root, "testsuite", name=label)
        counts = Counter()
        for comp in comps:
            case = ET.SubElement(suite, "testcase", name=comp.group_label,
                                 classname=f"smlens.gate.{comp.rule.figure}")
            detail = (f"{comp.rule.figure} {comp.group_label}: baseline "
                      f"{format_value(comp.baseline_center, comp.rule.unit)}, current "
                      f"{format_value(comp.current_center, comp.rule.unit)} ({format_change(comp)}; "
                      f"threshold {threshold_text(comp)}; {comp.test})")
            if comp.status == "regression":
                ET.SubElement(case, "failure", message=detail, type="regression").text = detail
                counts["failures"] += 1
            elif comp.status == "cannot judge":
                ET.SubElement(case, "error", message=comp.note, type="cannot-judge").text = comp.note
                counts["errors"] += 1
            elif comp.status in ("n/a", "small", "appeared", "disappeared"):
                ET.SubElement(case, "skipped", message=comp.note or comp.status)
                counts["skipped"] += 1
            else:
                ET.SubElement(case, "system-out").text = f"{comp.status}: {detail}"
            counts["tests"] += 1
        _set_counts(suite, counts)
        totals.update(counts)
    if loose:
        suite = ET.SubElement(root, "testsuite", name="inputs")
        for index, problem in enumerate(loose, 1):
            case = ET.SubElement(suite, "testcase", name=f"input {index}", classname="smlens.gate.inputs")
            ET.SubElement(case, "error", message=problem, type="cannot-judge").text = problem
        counts = Counter(tests=len(loose), errors=len(loose))
        _set_counts(suite, counts)
        totals.update(counts)
    _set_counts(root, totals)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _set_counts(element: ET.Element, counts: Counter) -> None:
    for key in ("tests", "failures", "errors", "skipped"):
        element.set(key, str(counts[key]))
