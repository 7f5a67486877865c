"""One self-contained HTML report per run or comparison (plotly.js inlined, no network).

The input is the views' frames (`views.registry.ViewsResult`: kernels, groups, gap) under the
names of docs/VIEWS.md's machine-readable form; `from_views(result, run)` adapts one without importing
views or profiler. Escaping lives in reports/html_text.py, figures in html_figures.py, tables in
html_tables.py; this module assembles the page.
"""
from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from reports.html_figures import (fig_gap, fig_occupancy, fig_roofline, fig_stalls, fig_tensor,
                                  fig_time, fig_time_compare, fig_waves)
from reports.html_tables import (badge, columns_of, gap_table, group_table, kernel_table,
                                 names_table, selection_table, shares_table, validation_box, _table)
from reports.html_text import (REGRESSION_PCT, esc, fmt_time_ns, is_missing, numbers, script_json,
                               validation_frame, view_status)
from views import registry
from views.catalog import MEAN, MODE, RATIO, SUM

# --- the input ------------------------------------------------------------------------------------

@dataclass
class ReportInput:
    """One run's view results as plain frames, and what is known about the run and its device."""

    run: dict  # id, name, device_name, ncu_version, created, source (the store's runs row)
    kernels: pd.DataFrame  # one row per kernel: id, name, phase, role, figures, validation_V*
    groups: pd.DataFrame  # per phase and role, time-weighted
    gap: pd.DataFrame = field(default_factory=pd.DataFrame)  # also a phase's `all` rows
    device: dict = field(default_factory=dict)  # peak_dram_bytes_per_s, peak_flops_per_s_by_path
    view_ids: list = field(default_factory=lambda: list(registry.VIEWS))  # the views computed


# The views keep the kernels table's identity names; the report reads docs/VIEWS.md's JSON names.
_KERNEL_RENAMES = {"kernel_id": "id", "kernel_name": "name"}


def from_views(result: Any, run: dict, source_kernels: Optional[pd.DataFrame] = None) -> ReportInput:
    """Adapt a views result (`.kernels`, `.groups`, `.gap`, `.devices`) without importing views.

    `source_kernels`, the kernels table the views ran over (same rows, same order), lends the NVTX
    stack, which the views do not carry."""
    kernels = result.kernels.rename(columns={k: v for k, v in _KERNEL_RENAMES.items()
                                             if k in result.kernels.columns
                                             and v not in result.kernels.columns})
    if (source_kernels is not None and "nvtx_stack" in source_kernels.columns
            and "nvtx_stack" not in kernels.columns and len(source_kernels) == len(kernels)):
        kernels = kernels.assign(nvtx_stack=source_kernels["nvtx_stack"].to_numpy())
    run = dict(run)
    devices = getattr(result, "devices", None)
    if devices is not None and len(devices) and not run.get("device_name") and "name" in devices:
        run["device_name"] = ", ".join(str(n) for n in devices["name"].dropna().unique())
    return ReportInput(run=run, kernels=kernels,
                       groups=_frame(getattr(result, "groups", None)),
                       gap=_frame(getattr(result, "gap", None)),
                       view_ids=list(getattr(result, "view_ids", registry.VIEWS)))


def _frame(frame: Optional[pd.DataFrame]) -> pd.DataFrame:
    return frame.copy() if frame is not None else pd.DataFrame()


def filter_input(data: ReportInput, phase: Optional[str] = None,
                 role: Optional[str] = None) -> ReportInput:
    """Keep the kernels and groups of one phase and/or role (with a role, a phase's `all` row
    of the gap goes: it sums every role)."""

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if frame is None or frame.empty:
            return frame
        mask = pd.Series(True, index=frame.index)
        if phase and "phase" in frame.columns:
            mask &= frame["phase"] == phase
        if role and "role" in frame.columns:
            mask &= frame["role"] == role
        return frame[mask]

    return ReportInput(run=data.run, kernels=keep(data.kernels), groups=keep(data.groups),
                       gap=keep(data.gap), device=data.device, view_ids=data.view_ids)


# --- the page -------------------------------------------------------------------------------------

CSS = """
:root{--fg:#1d1d1f;--mute:#6e6e73;--line:#e5e5ea;--ok:#1e7b34;--bad:#b3261e;--na:#8e8e93}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:#fafafa}
header{padding:18px 28px;background:#fff;border-bottom:1px solid var(--line)}h1{font-size:20px;margin:0 0 4px}
.meta{color:var(--mute);font-size:13px}.meta b{color:var(--fg);font-weight:600}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);font-size:13px;position:sticky;top:0;z-index:5}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
main{padding:8px 28px 40px;max-width:1500px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px}
section h2{font-size:17px;margin:0 0 4px}.lead{color:var(--mute);margin:0 0 10px;max-width:110ch}
.row{display:grid;grid-template-columns:minmax(0,1fr) 330px;gap:18px}.row.wide{grid-template-columns:1fr}@media(max-width:1000px){.row{grid-template-columns:1fr}}
.fig{min-height:200px}
aside.valid{border-left:3px solid var(--line);padding:0 0 0 12px;font-size:12.5px}aside.valid h4{margin:2px 0 6px;font-size:13px}
.vrow{margin:0 0 8px}.vrow ul{margin:4px 0 0 0;padding-left:18px;color:var(--bad)}.vrow li{word-break:break-word}
.b{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;color:#fff;min-width:30px;text-align:center}
.b.ok{background:var(--ok)}.b.bad{background:var(--bad);cursor:help}.b.na{background:var(--na)}
.tw{overflow-x:auto;margin:8px 0}table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f5f5f7;font-weight:600}
table.kernels td,table.names td{font-size:12px}table.names td:last-child{white-space:normal;word-break:break-all}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.d{color:var(--mute);font-size:11.5px}.d.reg{color:var(--bad);font-weight:600}.regmark{color:var(--bad)}
.chg{color:#a15c00;white-space:normal;display:inline-block;min-width:300px}.na{color:var(--mute)}
details summary{cursor:pointer;color:#0b57d0;margin:6px 0}
.sum td{white-space:normal}
footer{color:var(--mute);font-size:12px;padding:0 28px 30px}
"""

RENDER_JS = """
(function(){
  var figs = JSON.parse(document.getElementById('smlens-figures').textContent);
  Object.keys(figs).forEach(function(id){
    var el = document.getElementById(id);
    Plotly.newPlot(el, figs[id].data, figs[id].layout,
                   {displaylogo:false, responsive:true, modeBarButtonsToRemove:['select2d','lasso2d']});
  });
})();
"""


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    source = get_plotlyjs()
    # The bundle goes inside <script>; it must not be able to close it.
    if "</script" in source.lower():
        source = re.sub(r"</(script)", r"<\\/\1", source, flags=re.I)
    return source


@dataclass
class Section:
    anchor: str
    title: str
    lead: str
    figures: list  # plotly figures, drawn one below the other (None: nothing to draw)
    body: str
    views: tuple
    has_pictures: bool = True  # False: a wide table, no figure expected


# The report's pictures of some views, by view. A view without one still gets its section: the
# table of its figures (labels, units and directions from the catalog) and its validation.
PICTURES: dict[str, Callable[["ReportInput", Optional["ReportInput"]], list]] = {
    "V1": lambda d, b: [fig_time(d.groups), fig_time_compare(d.groups, b.groups if b else None)],
    "V3": lambda d, b: [fig_tensor(d.groups)],
    "V4": lambda d, b: [fig_occupancy(d.groups)],
    "V5": lambda d, b: [fig_waves(d.kernels)],
    "V6": lambda d, b: [fig_stalls(d.groups)],
    "V7": lambda d, b: [fig_roofline(d.kernels, d.device)],
}
# Tables of their own some views add below their figures' table.
TABLES: dict[str, Callable[["ReportInput"], str]] = {
    registry.SELECTION_VIEW: lambda d: selection_table(d.kernels),
}


def _view_section(view: str, data: ReportInput, base: Optional[ReportInput]) -> Section:
    """One view: its pictures, the table of its figures per phase and role (value, or value (Δ %)
    against the baseline), each text figure's share of the time, and its validation."""
    groups = data.groups
    figures = registry.view_figures(view)
    numeric = [f for f in figures if f.aggregate in (MEAN, SUM, RATIO) and f.column in groups.columns]
    texts = [f for f in figures if f.aggregate == MODE]
    body = group_table(groups, columns_of(numeric), base.groups if base is not None else None,
                       with_time=False) if numeric else ""
    body += "".join(shares_table(data.kernels, f) for f in texts)
    body += TABLES[view](data) if view in TABLES else ""
    # what its table shows; a view whose figures are all per kernel: what sums a kernel up
    described = numeric + texts or [f for f in figures if f.summary]
    lead = " ".join(f"{f.label[:1].upper()}{f.label[1:]}: {f.definition}." for f in described)
    pictures = PICTURES[view](data, base) if view in PICTURES else []
    return Section(view.lower(), f"{view} {registry.title(view)}", lead, pictures, body, (view,),
                   has_pictures=view in PICTURES)


def _sections(data: ReportInput, base: Optional[ReportInput]) -> list:
    gap = _drop_lone_all(data.gap if not data.gap.empty else data.groups)
    base_gap = None if base is None else (base.gap if not base.gap.empty else base.groups)
    gap_section = Section(
        "gap", "The gap: headline against useful tensor work",
        "Nsight Compute's SM throughput, the figure usually quoted, against the share of "
        "cycles the SMs had work, the share the tensor pipe was busy, and the tensor work "
        "that was useful (not padding). Each step is a factor (\u00d7) and the figures of "
        "the views that explain it. A phase's `all` row sums its roles.",
        [fig_gap(gap)], gap_table(gap, base_gap), tuple(registry.gap_views()))
    return [gap_section] + [_view_section(view, data, base) for view in data.view_ids]


def _drop_lone_all(gap: pd.DataFrame) -> pd.DataFrame:
    """A phase's `all` row says nothing new when the phase has one role."""
    if gap.empty or "role" not in gap.columns:
        return gap
    roles = gap[gap["role"] != "all"].groupby("phase", observed=True)["role"].nunique()
    lone = gap["phase"].map(roles).fillna(0) <= 1
    return gap[~((gap["role"] == "all") & lone)]


def _figure_div(div_id: str, figure: dict) -> str:
    # A fixed height: a responsive plot in a div of no height of its own shrinks on resize.
    height = int(figure["layout"].get("height", 400))
    return f'<div class="fig" id="{esc(div_id)}" style="height:{height}px"></div>'


NO_FIGURE = "Nothing to draw: the capture lacks the metrics of this figure (its views are n/a)."


def _has_data(figure: Optional[dict]) -> bool:
    """A figure with at least one value to draw (all missing would render blank)."""
    if figure is None:
        return False
    for trace in figure["data"]:
        axis = "x" if trace.get("orientation") == "h" else "y"
        if trace.get("mode") != "lines" and any(v is not None for v in trace.get(axis, [])):
            return True
    return False


def _known(value: Any) -> bool:
    return not is_missing(value) and value != ""


def _header(data: ReportInput, base: Optional[ReportInput], phase, role) -> str:
    run = data.run

    def describe(r: dict) -> str:
        bits = [f"<b>{esc(r.get('name') or r.get('id'))}</b>"]
        if r.get("id") and r.get("name"):
            bits.append(f"run {esc(r.get('id'))}")
        # The capture's file name, not its path: a report is shared, the local folders are not.
        shown = {"device_name": r.get("device_name"),
                 "ncu_version": f"ncu {r.get('ncu_version')}" if _known(r.get("ncu_version")) else None,
                 "created": str(r.get("created"))[:16].replace("T", " ") if _known(r.get("created")) else None,
                 "source": f"from {Path(str(r.get('source'))).name}" if _known(r.get("source")) else None}
        bits += [esc(v) for v in shown.values() if _known(v)]
        return " \u00b7 ".join(bits)

    k = data.kernels
    lines = [f'<div class="meta">{describe(run)} \u00b7 {len(k)} kernels \u00b7 '
             f'{esc(fmt_time_ns(numbers(k, "time_ns").sum()))} kernel time</div>']
    if base is not None:
        lines.append(f'<div class="meta">against baseline {describe(base.run)}: figures show '
                     f'value (\u0394 %), <span class="d reg">regressions</span> \u25bc beyond '
                     f'{REGRESSION_PCT:g} %</div>')
    if phase or role:
        lines.append(f'<div class="meta">only phase {esc(phase or "any")}, role {esc(role or "any")}</div>')
    title = esc(run.get("name") or run.get("id") or "run")
    return f"<header><h1>smlens report: {title}</h1>{''.join(lines)}</header>"


def _summary(data: ReportInput, checks: pd.DataFrame) -> str:
    rows = []
    for view in data.view_ids:
        st = view_status(data.kernels, view, checks)
        rows.append([badge(st.status), esc(view), esc(registry.title(view)), esc(st.passed),
                     esc(st.failed), esc(st.not_available)])
    return ('<section id="validation"><h2>Validation</h2><p class="lead">Every figure is checked '
            'against an independent counter or formula (docs/VIEWS.md in smlens). A failed check '
            'keeps its figure but says by how much it disagrees; n/a means the inputs were missing.</p>'
            + _table(["status", "view", "", "pass", "fail", "n/a"], rows, "sum") + "</section>")


def render_report(data: ReportInput, baseline: Optional[ReportInput] = None,
                  phase: Optional[str] = None, role: Optional[str] = None) -> str:
    """The whole report as one HTML string."""
    data = filter_input(data, phase, role)
    if baseline is not None:
        baseline = filter_input(baseline, phase, role)
    checks = validation_frame(data.kernels, data.view_ids)
    figures: dict = {}
    parts = []
    nav = []
    for s in _sections(data, baseline):
        nav.append(f'<a href="#{esc(s.anchor)}">{esc(s.title.split(":")[0])}</a>')
        drawn = [figure for figure in s.figures if _has_data(figure)]
        shown = ""
        for number, figure in enumerate(drawn, 1):
            div_id = f"fig-{s.anchor}" + (f"-{number}" if number > 1 else "")
            figures[div_id] = figure
            shown += _figure_div(div_id, figure)
        if not drawn and s.has_pictures:
            shown = f'<p class="na">{esc(NO_FIGURE)}</p>'
        parts.append(
            f'<section id="{esc(s.anchor)}"><h2>{esc(s.title)}</h2><p class="lead">{esc(s.lead)}</p>'
            # A section with no figure is a wide table: its validation goes below it.
            f'<div class="row{"" if drawn else " wide"}"><div>{shown}{s.body}</div>'
            f'{validation_box(data.kernels, s.views, checks)}</div></section>')
    nav.append('<a href="#kernels">Kernels</a><a href="#validation">Validation</a>')
    kernels_section = (
        '<section id="kernels"><h2>Kernels</h2><p class="lead">Every profiled kernel launch. '
        'Hover a red badge for the discrepancy.</p>' + kernel_table(data.kernels, checks, data.view_ids)
        + f'<details><summary>Full kernel names ({data.kernels["name"].nunique() if "name" in data.kernels.columns else 0})'
        '</summary>' + names_table(data.kernels) + "</details></section>")
    title = esc(f"smlens report: {data.run.get('name') or data.run.get('id') or 'run'}")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        # Nothing in the report may reach the network.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:\">"
        f"<title>{title}</title><style>{CSS}</style>"
        f"<script>{_plotly_js()}</script></head><body>"
        + _header(data, baseline, phase, role)
        + f"<nav>{''.join(nav)}</nav><main>" + "".join(parts) + kernels_section
        + _summary(data, checks) + "</main>"
        "<footer>Made by smlens from Nsight Compute counters. Figures of groups are weighted by "
        "kernel time. Badges: <span class=\"b ok\">pass</span> <span class=\"b bad\">fail</span> "
        "<span class=\"b na\">n/a</span>.</footer>"
        f"<script type=\"application/json\" id=\"smlens-figures\">{script_json(figures)}</script>"
        f"<script>{RENDER_JS}</script></body></html>\n")


def write_report(path: Path | str, text: str) -> int:
    """Write atomically (a reader never sees half a report); returns the size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    # open(..., "xb") rather than mkstemp: the report gets the umask's mode (0644), not 0600,
    # since it is meant to be shared and uploaded.
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "xb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(data)
