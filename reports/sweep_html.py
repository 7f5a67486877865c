"""A sweep as one self-contained HTML page: the findings in sentences first, each linking to its
chart and naming the runs behind it; every point with its run and status; then per phase and role
the followed figures against batch size and against prompt length, one line per model and value
of the other axis. The page shell (CSS, the Content-Security-Policy, plotly.js and the drawing
script) is the run report's (reports/html.py)."""
from __future__ import annotations

from typing import Optional

from reports.formatting import is_missing
from reports.html import CSS, chart_scripts, content_security_policy, drawn_figure, figure_div
from reports.html_figures import plot_layout
from reports.html_text import esc
from reports.sweep import catalog
from reports.sweep_text import findings_told, point_label
from views import sweep as sweep_view

# The panels of each chart: a figure each, by catalog column, in a grid of PANEL_COLUMNS.
PANELS = ("time_per_token_ns", "useful_tensor_pct", "fill", "main_waves", "achieved_occupancy_pct",
          "dram_pct")
PANEL_COLUMNS = 2
# What a point's hover says beside its value: the text figures.
HOVER = ("bound", "main_kernel", "occupancy_limiter", "top_stall_family", "status")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _value(value, unit: str):
    if is_missing(value):
        return None
    return float(value) / 1000 if unit == "ns" else float(value)


def _panel_title(figure) -> str:
    unit = "µs" if figure.unit == "ns" else figure.unit if figure.unit in ("%", "waves") else ""
    return f"{figure.label}{' (' + unit + ')' if unit else ''}"


def chart(rows: list[dict], phase: str, role: str, axis: str) -> Optional[dict]:
    """The figure of one phase and role (`rows`: its series records) against `axis`: a panel per
    PANELS figure, a line per model and value of the other axis."""
    if len({r[axis] for r in rows}) < 2:
        return None
    figures = catalog()
    other = "prompt" if axis == "batch" else "batch"
    lines: dict[tuple, list[dict]] = {}
    for r in rows:
        lines.setdefault((r.get("model"), r[other]), []).append(r)
    data, annotations = [], []
    rows_n = -(-len(PANELS) // PANEL_COLUMNS)
    drawn = []
    for (model, fixed), these in lines.items():
        these = sorted(these, key=lambda r: r[axis])
        name = ", ".join(([model] if isinstance(model, str) else []) + [f"{other} {fixed}"])
        hover = ["<br>".join(f"{h}: {esc(r.get(h))}" for h in HOVER if isinstance(r.get(h), str))
                 + f"<br>run {esc(r.get('run_id'))}" for r in these]
        drawn.append((name, [int(r[axis]) for r in these], these, hover))
    for number, column in enumerate(PANELS, 1):
        suffix = "" if number == 1 else str(number)
        unit = figures[column].unit
        for line, (name, x, these, hover) in enumerate(drawn):
            colour = COLOURS[line % len(COLOURS)]
            data.append({"type": "scatter", "mode": "lines+markers", "name": name, "legendgroup": name,
                         "showlegend": number == 1, "x": x, "y": [_value(r.get(column), unit) for r in these],
                         "text": hover, "hovertemplate": "%{x}: %{y:.3g}<br>%{text}<extra>" + esc(name) + "</extra>",
                         "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "line": {"color": colour},
                         "marker": {"color": colour}})
        annotations.append({"text": esc(_panel_title(figures[column])), "showarrow": False,
                            "xref": f"x{suffix} domain", "yref": f"y{suffix} domain",
                            "x": 0, "y": 1.12, "xanchor": "left", "font": {"size": 12}})
    ticks = sorted({int(r[axis]) for r in rows})
    axes = {}
    for number in range(1, len(PANELS) + 1):
        suffix = "" if number == 1 else str(number)
        bottom = number > len(PANELS) - PANEL_COLUMNS
        axes[f"xaxis{suffix}"] = {"type": "log", "title": {"text": axis if bottom else ""}, "tickvals": ticks}
        axes[f"yaxis{suffix}"] = {"rangemode": "tozero"}
    layout = plot_layout(f"{phase} · {role} against {axis}", height=240 * rows_n + 80,
                         grid={"rows": rows_n, "columns": PANEL_COLUMNS, "pattern": "independent",
                               "ygap": 0.35, "xgap": 0.12},
                         annotations=annotations, **axes)
    # the legend under the panels: above them it would sit on the first panels' titles
    layout["legend"] = {**layout.get("legend", {}), "y": -0.9 / rows_n / 2, "yanchor": "top"}
    layout["margin"] = {**layout.get("margin", {}), "b": 90}
    return {"data": data, "layout": layout}


def _points_table(result) -> str:
    head = "<tr><th>point</th><th>run</th><th>status</th><th>note</th></tr>"
    body = "".join(
        f"<tr><td>{esc(point_label(r))}</td><td><code>{esc(r['run_id'] or '')}</code> {esc(r['name'] or '')}</td>"
        f"<td>{'' if r['status'] == sweep_view.COMPLETE else '<b class=bad>'}{esc(r['status'])}"
        f"{'' if r['status'] == sweep_view.COMPLETE else '</b>'}</td><td>{esc(r['note'] or '')}</td></tr>"
        for r in result.points.to_dict("records"))
    return f'<table class="tbl"><thead>{head}</thead><tbody>{body}</tbody></table>'


def _findings(result) -> str:
    if not result.findings:
        return ("<p>Nothing changes between neighbouring points: the bound, the kernels chosen, the "
                "wave counts and the useful MMA shares hold across the sweep.</p>")
    items = []
    for f in findings_told(result.findings):
        links = " ".join(f'<a href="#fig-{esc(c)}">{esc(_chart_name(c))}</a>' for c in f.get("charts", []))
        runs = ", ".join(f"<code>{esc(r)}</code>" for r in f.get("runs", []))
        items.append(f"<li>{esc(f['text'])} {links}{' · runs ' + runs if runs else ''}</li>")
    return f"<ol>{''.join(items)}</ol>"


def _chart_name(chart: str) -> str:
    """A finding's link: the chart's phase and axis (its role is the finding's)."""
    phase, _, axis = chart.partition("-")[0], None, chart.rsplit("-", 1)[-1]
    return f"{phase} by {axis}"


def render_sweep(result: sweep_view.SweepResult, sweep_id: Optional[str] = None) -> str:
    """The page as one HTML string."""
    series = result.series
    figures: dict = {}
    sections = []
    groups: dict[tuple, list[dict]] = {}
    for r in series.to_dict("records") if not series.empty else []:
        groups.setdefault((r["phase"], r["role"]), []).append(r)
    if groups:
        for (phase, role), rows in groups.items():
            drawn = ""
            for axis in sweep_view.AXES:
                figure = chart(rows, phase, role, axis)
                if figure is None:
                    continue
                div_id = f"fig-{sweep_view.chart_id(phase, role, axis)}"
                figures[div_id] = drawn_figure(figure)
                drawn += figure_div(div_id, figure)
            if drawn:
                sections.append(f'<section id="{esc(phase)}-{esc(role)}"><h2>{esc(phase)} · {esc(role)}</h2>'
                                f"{drawn}</section>")
    definitions = "".join(f"<li><b>{esc(f.label)}</b>: {esc(f.definition)}</li>"
                          for c, f in catalog().items() if c in PANELS or c in HOVER)
    title = f"smlens sweep {sweep_id or ''}".strip()
    axes = "; ".join(f"{a} {', '.join(str(v) for v in result.axis_values(a))}" for a in sweep_view.AXES)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{content_security_policy()}\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{len(result.points)} point(s): {esc(axes)}</p></header><main>"
        f'<section id="findings"><h2>Findings</h2>{_findings(result)}</section>'
        f'<section id="points"><h2>Points</h2>{_points_table(result)}</section>'
        + "".join(sections)
        + f'<section id="definitions"><h2>Figures</h2><ul>{definitions}</ul></section></main>'
        "<footer>Made by smlens from Nsight Compute counters, one stored run per point.</footer>"
        f"{chart_scripts(figures)}</body></html>\n")
