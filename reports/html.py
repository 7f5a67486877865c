"""One self-contained HTML report per run or comparison (a bar-and-scatter plotly.js inlined, no network).

The input is the views' frames (`views.registry.ViewsResult`: kernels, groups, gap, devices) under
the names of the views JSON; `from_views(result, run)` adapts one. The page opens with the verdict
(views/verdict.py), then the gap, the kernels that take the most time, each view, every kernel and
the validations. Escaping lives in reports/html_text.py, figures in html_figures.py, tables in
html_tables.py, the verdict in html_verdict.py, the matching of two runs in compare.py; this module
assembles the page and its one script (drawing, sorting, filtering), which the page's
Content-Security-Policy allows by its hash and nothing else.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import html
import os
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pandas as pd

from reports import compare, html_ranks
from reports.html_figures import (fig_gap, fig_occupancy, fig_roofline, fig_stalls, fig_tensor,
                                  fig_time, fig_time_compare, fig_waves)
from reports.html_tables import (badge, changes_table, columns_of, gap_table, group_reasons, group_table,
                                 html_table, kernel_table, launch_table, mlp_table, names_table,
                                 selection_table, shares_table, top_kernels_table, validation_box)
from reports.html_text import (REGRESSION_PCT, esc, fmt_time_ns, is_missing, numbers, script_json,
                               validation_frame, view_status)
from reports.html_verdict import comparison_section, verdict_section
from reports.kernel_page import KERNEL_JS, kernel_sections
from views import registry
from views.catalog import ARGMAX, MEAN, MODE, RATIO, SUM
from views.comparison import NOISE, ComparisonVerdict, key_tuples
from views.kernel_detail import kernel_details
from views.verdict import Verdict, verdict as make_verdict

# --- the input ------------------------------------------------------------------------------------

@dataclass
class ReportInput:
    """One run's view results as plain frames, and what is known about the run and its device."""

    run: dict  # id, name, device_name, ncu_version, created, source, tags (the store's runs row)
    kernels: pd.DataFrame  # one row per kernel: id, name, phase, role, figures, validation_V*
    groups: pd.DataFrame  # per phase and role, time-weighted
    gap: pd.DataFrame = field(default_factory=pd.DataFrame)  # also a phase's `all` rows
    device: dict = field(default_factory=dict)  # peak_dram_bytes_per_s, peak_flops_per_s_by_path
    view_ids: list = field(default_factory=lambda: list(registry.VIEWS))  # the views computed
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)  # the views' device constants
    share_of: str = ""  # what the time shares are of, when not the whole run
    phase_time_ns: dict = field(default_factory=dict)  # after a phase filter: registry.share_basis
    tokens: Optional[dict] = None  # phase -> (tokens, source) when figures are per token
    mlp: pd.DataFrame = field(default_factory=pd.DataFrame)  # activation share of MLP time per phase
    # tensor parallel (views/ranks.py), empty for one GPU: per phase and rank, per role, per collective
    communication: pd.DataFrame = field(default_factory=pd.DataFrame)
    imbalance: pd.DataFrame = field(default_factory=pd.DataFrame)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the kernels table the views ran over, row for row with `kernels` (same index): the kernel
    # pages' raw counters
    source: pd.DataFrame = field(default_factory=pd.DataFrame)


# The views keep the kernels table's identity names; the report reads the views JSON's names.
_KERNEL_RENAMES = {"kernel_id": "id", "kernel_name": "name"}
# What the kernels table lends the report beside the views' figures: the NVTX stack and the launch.
LENT_COLUMNS = ("nvtx_stack", "launch__registers_per_thread", "launch__shared_mem_per_block_static",
                "launch__shared_mem_per_block_dynamic", "launch__shared_mem_per_block",
                "launch__grid_size", "launch__block_size")


def from_views(result: Any, run: dict, source_kernels: Optional[pd.DataFrame] = None) -> ReportInput:
    """Adapt a views result (`.kernels`, `.groups`, `.gap`, `.devices`) without importing views.

    `source_kernels`, the kernels table the views ran over (same rows, same order), lends the NVTX
    stack and the launch statistics, which the views do not carry."""
    kernels = result.kernels.rename(columns={k: v for k, v in _KERNEL_RENAMES.items()
                                             if k in result.kernels.columns
                                             and v not in result.kernels.columns})
    if source_kernels is not None and len(source_kernels) == len(kernels):
        lent = {c: source_kernels[c].to_numpy() for c in LENT_COLUMNS
                if c in source_kernels.columns and c not in kernels.columns}
        if lent:
            kernels = kernels.assign(**lent)
    run = dict(run)
    devices = getattr(result, "devices", None)
    if devices is not None and len(devices) and not run.get("device_name") and "name" in devices:
        run["device_name"] = ", ".join(str(n) for n in devices["name"].dropna().unique())
    aligned = source_kernels is not None and len(source_kernels) == len(kernels)
    return ReportInput(run=run, kernels=kernels,
                       source=source_kernels.set_axis(kernels.index) if aligned else pd.DataFrame(),
                       groups=_frame(getattr(result, "groups", None)),
                       gap=_frame(getattr(result, "gap", None)),
                       view_ids=list(getattr(result, "view_ids", registry.VIEWS)),
                       devices=_frame(devices), mlp=_frame(getattr(result, "mlp", None)),
                       **{name: _frame(getattr(result, name, None)) for name in RANK_FRAMES})


RANK_FRAMES = ("communication", "imbalance", "collectives")


def _frame(frame: Optional[pd.DataFrame]) -> pd.DataFrame:
    return frame.copy() if frame is not None else pd.DataFrame()


def filter_input(data: ReportInput, phase: Optional[str] = None,
                 role: Optional[str] = None) -> ReportInput:
    """Keep the kernels and groups of one phase and/or role (with a role, a phase's `all` row
    of the gap goes: it sums every role). With a phase, time shares become shares of that
    phase's time."""

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if frame is None or frame.empty:
            return frame
        mask = pd.Series(True, index=frame.index)
        if phase and "phase" in frame.columns:
            mask &= frame["phase"] == phase
        if role and "role" in frame.columns:
            mask &= frame["role"] == role
        return frame[mask]

    groups, gap, share_of = keep(data.groups), keep(data.gap), data.share_of
    phase_time_ns = data.phase_time_ns
    if phase and not data.kernels.empty:
        phase_time_ns = registry.share_basis(data.kernels, phase)  # as `smlens views --phase`
        basis = sum(phase_time_ns.values())
        if basis > 0:
            groups, gap = (_shares_of(f, basis) for f in (groups, gap))
            share_of = f"{phase}'s kernel time ({fmt_time_ns(basis)})"
    mlp = data.mlp if data.mlp.empty or not phase else data.mlp[data.mlp["phase"] == phase]
    # communication per phase and rank sums every role: with a role it goes, like the gap's `all`
    ranks = {"communication": keep(data.communication) if not role else pd.DataFrame(),
             "imbalance": keep(data.imbalance), "collectives": keep(data.collectives)}
    kernels = keep(data.kernels)
    source = data.source.loc[kernels.index] if len(data.source) else data.source
    return replace(data, kernels=kernels, groups=groups, gap=gap, share_of=share_of,
                   mlp=mlp, phase_time_ns=phase_time_ns, source=source, **ranks)


def _shares_of(frame: pd.DataFrame, basis: float) -> pd.DataFrame:
    if frame is None or frame.empty or "time_ns" not in frame.columns:
        return frame
    return frame.assign(time_share_pct=100 * numbers(frame, "time_ns") / basis)


def per_token(data: ReportInput, tokens: dict) -> ReportInput:
    """Figures that add up (the catalog's SUM figures: time, bytes, FLOPs) per token of their phase
    (compare.tokens_per_phase)."""
    columns = [c for c, f in registry.figures().items() if f.aggregate == SUM]
    return replace(data, kernels=compare.per_token(data.kernels, tokens, columns),
                   groups=compare.per_token(data.groups, tokens, columns),
                   gap=compare.per_token(data.gap, tokens, columns), tokens=tokens)


def _verdict(data: ReportInput, tokens: Optional[dict] = None) -> Verdict:
    """The verdict of the (absolute) figures; with `tokens` (phase -> (tokens, source)) its times
    are told per token."""
    kernels = data.kernels.rename(columns={v: k for k, v in _KERNEL_RENAMES.items()})
    return make_verdict(SimpleNamespace(groups=data.groups, kernels=kernels, devices=data.devices,
                                        phase_time_ns=data.phase_time_ns, communication=data.communication),
                        tokens={p: t for p, (t, _) in tokens.items()} if tokens else None)


# --- the page -------------------------------------------------------------------------------------

# Raw: its CSS escapes (`\25b2`, the sort arrow) must reach the page as written, not as Python's.
CSS = r"""
:root{--fg:#1d1d1f;--mute:#6e6e73;--line:#e5e5ea;--ok:#1e7b34;--bad:#b3261e;--na:#8e8e93;--head:#f5f5f7}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:#fafafa}
header{padding:18px 28px;background:#fff;border-bottom:1px solid var(--line)}h1{font-size:20px;margin:0 0 4px}
.meta{color:var(--mute);font-size:13px}.meta b{color:var(--fg);font-weight:600}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);font-size:13px;position:sticky;top:0;z-index:9}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}@media(max-width:1000px){nav{white-space:nowrap;overflow-x:auto}}
section[id]{scroll-margin-top:64px}
main{padding:8px 28px 40px;max-width:1600px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px;min-width:0}
section h2{font-size:17px;margin:0 0 4px}section h3{font-size:15px;margin:14px 0 2px}.lead{color:var(--mute);margin:0 0 10px;max-width:120ch}
p.verdict{font-size:15px;margin:4px 0 10px;max-width:120ch}ol.opps{margin:4px 0 8px;padding-left:22px;max-width:140ch}ol.opps li{margin:3px 0}
.setup{color:var(--mute);margin:6px 0}
.row{display:grid;grid-template-columns:minmax(0,1fr) 330px;gap:18px}.row.wide{grid-template-columns:minmax(0,1fr)}@media(max-width:1000px){.row{grid-template-columns:minmax(0,1fr)}}
.fig{min-height:200px}p.figcap{font-weight:600;font-size:13.5px;margin:10px 0 0}
aside.valid{border-left:3px solid var(--line);padding:0 0 0 12px;font-size:12.5px}aside.valid h4{margin:2px 0 6px;font-size:13px}
.vrow{margin:0 0 8px}.vrow ul{margin:4px 0 0 0;padding-left:18px;color:var(--bad)}.vrow li{word-break:break-word}.vrow ul.why{color:var(--mute)}
b.ok,b.bad,b.na{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;color:#fff;min-width:30px;text-align:center}
b.ok{background:var(--ok)}b.bad{background:var(--bad);cursor:help}b.na{background:var(--na)}b[title]{cursor:help}
.tw{overflow:auto;margin:8px 0;max-width:100%;width:max-content;border:1px solid var(--line);border-radius:6px}.tw.scroll{max-height:72vh}
table{border-collapse:separate;border-spacing:0;font-size:12.5px}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap;background:#fff}
th{background:var(--head);font-weight:600;position:sticky;top:0;z-index:2;cursor:pointer;user-select:none}
th[title]{text-decoration:underline dotted #aaa;text-underline-offset:3px}
th[aria-sort=ascending]::after{content:" \25b2";font-size:9px}th[aria-sort=descending]::after{content:" \25bc";font-size:9px}
.sticky1 tr>:first-child,.sticky2 tr>:first-child,.sticky2 tr>:nth-child(2){position:sticky;z-index:1}
.sticky1 tr>:first-child,.sticky2 tr>:first-child{left:0}
.sticky2 tr>:first-child{min-width:var(--k0);max-width:var(--k0);overflow:hidden;text-overflow:ellipsis}
.sticky2 tr>:nth-child(2){left:var(--k0);box-shadow:inset -1px 0 0 var(--line)}.sticky1 tr>:first-child{box-shadow:inset -1px 0 0 var(--line)}
.sticky1 th:first-child,.sticky2 th:first-child,.sticky2 th:nth-child(2){z-index:3}
table{--k0:108px}table.kernels,table.top{--k0:48px}
tr.hit td{background:#fff3c4}tr.total td{border-top:1px solid #c7c7cc}tbody tr:hover td{background:#f7f9ff}
table.kernels td,table.names td{font-size:12px}table.top td:last-child{white-space:normal;min-width:320px}table.names td:last-child{white-space:normal;word-break:break-all}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}a.kl{color:#0b57d0;text-decoration:none}a.kl:hover{text-decoration:underline}
.d{color:var(--mute);font-size:11.5px}.d.bad{color:var(--bad);font-weight:600}.d.good{color:var(--ok);font-weight:600}
.chg{color:#a15c00;white-space:normal;display:inline-block;min-width:300px}.na{color:var(--mute)}
.st{font-size:11px;font-weight:600;padding:0 5px;border-radius:8px;background:#eee}.st.added{background:#dff0e3}.st.removed{background:#f8dcda}
.filters{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin:6px 0}.filters input{width:320px;padding:4px 8px}
.filters select,.filters input,.filters button{font:inherit;font-size:13px;border:1px solid #c7c7cc;border-radius:6px;background:#fff;padding:3px 6px}
details summary{cursor:pointer;color:#0b57d0;margin:6px 0}
.sum td{white-space:normal}
footer{color:var(--mute);font-size:12px;padding:0 28px 30px}
@media(max-width:640px){header,nav{padding-left:10px;padding-right:10px}main{padding:4px 8px 30px}section{padding:10px 10px}}
"""

# Draws the figures, sorts a table by a click on a heading, filters the kernel table (search,
# phase, role), and shows the kernels a link (a.kl) or a clicked chart mark names.
APP_JS = r"""
(function(){
  var UNITS = {ns:1, 'µs':1e3, us:1e3, ms:1e6, s:1e9, B:1, kB:1e3, MB:1e6, GB:1e9, TB:1e12,
               k:1e3, M:1e6, G:1e9, T:1e12, P:1e15};
  function key(cell){
    var t = cell.textContent.trim().replace(/^[\u25b2\u25bc\u00d7]\s*/, '');
    if (t === '' || t === '\u2014' || t === 'n/a') return null;
    var m = /^([+\-\u2212]?[\d,]*\.?\d+(?:e[+\-]?\d+)?)\s*([A-Za-z\u00b5]*)/.exec(t);
    if (!m) return t.toLowerCase();
    return parseFloat(m[1].replace(/,/g, '').replace('\u2212', '-')) * (UNITS[m[2]] || 1);
  }
  function compare(a, b){
    if (a === b) return 0;
    if (a === null) return 1;
    if (b === null) return -1;
    if (typeof a === typeof b) return a < b ? -1 : 1;
    return typeof a === 'number' ? -1 : 1;
  }
  function sortBy(th){
    var table = th.closest('table'), body = table.tBodies[0], index = th.cellIndex;
    var order = th.getAttribute('aria-sort') === 'descending' ? 'ascending' : 'descending';
    Array.prototype.forEach.call(th.parentNode.cells, function(c){ c.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', order);
    var sign = order === 'ascending' ? 1 : -1;
    var rows = Array.prototype.map.call(body.rows, function(r, i){
      return [key(r.cells[index]), i, r, r.classList.contains('total')]; });
    rows.sort(function(a, b){  // a row that sums others (a phase's `all`) stays after them
      if (a[3] !== b[3]) return a[3] ? 1 : -1;
      var c = (a[0] === null || b[0] === null) ? compare(a[0], b[0]) : sign * compare(a[0], b[0]);
      return c || a[1] - b[1];
    });
    rows.forEach(function(r){ body.appendChild(r[2]); });
  }
  document.addEventListener('click', function(e){
    var th = e.target.closest('table.sortable thead th');
    if (th) { sortBy(th); return; }
    var a = e.target.closest('a.kl');
    if (a) { e.preventDefault(); show(a.dataset.f !== undefined ? a.dataset.f : '?' + a.dataset.q); }
  });

  var table = document.getElementById('kernel-table');
  var search = document.getElementById('kq'), phase = document.getElementById('kp'),
      role = document.getElementById('kr'), count = document.getElementById('kn');
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  var text = [];
  function apply(){
    var q = search.value.trim().toLowerCase(), p = phase.value, r = role.value, shown = 0;
    rows.forEach(function(tr, i){
      if (q && text[i] === undefined) text[i] = tr.textContent.toLowerCase();
      var ok = (!p || tr.cells[2].textContent === p) && (!r || tr.cells[3].textContent === r)
               && (!q || text[i].indexOf(q) >= 0);
      tr.style.display = ok ? '' : 'none';
      if (ok) shown++;
    });
    count.textContent = shown + ' of ' + rows.length + ' kernels shown';
  }
  function show(spec){
    if (!table) return;
    rows.forEach(function(tr){ tr.classList.remove('hit'); });
    search.value = ''; phase.value = ''; role.value = '';
    var target = document.getElementById('kernels');
    if (spec.charAt(0) === '#') {
      apply();
      var id = spec.slice(1);
      var hit = rows.filter(function(tr){ return tr.cells[0].textContent === id; })[0];
      if (hit) { hit.classList.add('hit'); target.scrollIntoView(); hit.scrollIntoView({block: 'center'}); return; }
    } else if (spec.charAt(0) === '?') {
      search.value = spec.slice(1);
    } else {
      var parts = spec.split('|');
      phase.value = parts[0] || ''; role.value = parts[1] || '';
    }
    apply();
    target.scrollIntoView();
  }
  if (table) {
    [search, phase, role].forEach(function(el){ el.addEventListener('input', apply); });
    document.getElementById('kx').addEventListener('click', function(){ show(''); });
    window.smlensShow = show;
  }

})();
"""

# Draws the charts, after the page's own script (its tables sort and filter before plotly.js is
# read). One chart per animation frame, so the page stays responsive while they are drawn. On a
# narrow screen (a phone: under 640 px) a legend beside a chart goes above it and category labels
# stand upright, so the plot keeps its width and no label runs into another.
DRAW_JS = r"""
(function(){
  var figs = JSON.parse(document.getElementById('smlens-figures').textContent);
  var ids = Object.keys(figs);
  function narrow(el, layout){
    if (el.clientWidth >= 640) return layout;
    layout = JSON.parse(JSON.stringify(layout));
    // a legend beside the plot would take most of its width: above it, in rows
    if (layout.legend && layout.legend.orientation === 'v')
      layout.legend = {orientation: 'h', x: 0, y: 1, yanchor: 'bottom'};
    layout.margin = {l: 40, r: 8, t: layout.margin.t, b: 40};
    if (layout.xaxis && layout.xaxis.tickangle !== undefined) {  // upright labels: the plot keeps its height
      layout.xaxis.tickangle = -90;
      layout.height = (layout.height || 400) + 140;
      el.style.height = layout.height + 'px';
    }
    return layout;
  }
  function draw(){
    var id = ids.shift();
    if (id === undefined) return;
    var el = document.getElementById(id);
    var small = el.clientWidth < 640;  // a phone: no tool bar over the legend
    Plotly.newPlot(el, figs[id].data, narrow(el, figs[id].layout),
                   {displaylogo:false, responsive:true, displayModeBar: small ? false : 'hover',
                    modeBarButtonsToRemove:['select2d','lasso2d']});
    el.on('plotly_click', function(ev){
      var point = ev && ev.points && ev.points[0];
      var spec = point && point.customdata ? String(point.customdata) : '';
      // a kernel's mark opens its page (reports/kernel_page.py); a group's, its kernels
      if (spec.charAt(0) === '#' && document.getElementById('kernel-' + spec.slice(1)))
        location.hash = 'kernel-' + spec.slice(1);
      else if (spec && window.smlensShow) window.smlensShow(spec);
    });
    requestAnimationFrame(draw);
  }
  requestAnimationFrame(draw);
})();
"""


# A partial bundle of plotly.js with the bar and scatter traces, all the report draws, built the way
# plotly builds its own (scripts/plotly_bundle.sh), vendored with its licence (reports/vendor/).
PLOTLY_BUNDLE = Path(__file__).resolve().parent / "vendor" / "plotly-bar-scatter.min.js"


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    source = PLOTLY_BUNDLE.read_text(encoding="utf-8")
    # The bundle goes inside <script>; it must not be able to close it.
    if "</script" in source.lower():
        source = re.sub(r"</(script)", r"<\\/\1", source, flags=re.I)
    return source


@functools.lru_cache(maxsize=4)
def script_hash(source: str) -> str:
    """The CSP source that allows exactly this inline script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode() + "'"


def content_security_policy(*scripts: str) -> str:
    """Nothing may reach the network, and no script runs but the report's (its page script, the
    charts' drawing, plotly.js) and `scripts`, each allowed by its hash."""
    allowed = " ".join(script_hash(s) for s in (APP_JS, *scripts, plotly_js(), DRAW_JS))
    return (f"default-src 'none'; script-src {allowed}; "
            "style-src 'unsafe-inline'; img-src data: blob:; font-src data:")


def chart_scripts(figures: dict) -> str:
    """The scripts that draw `figures` (div id -> plotly figure, each div made by `figure_div`),
    for the end of a page's <body>, after everything a reader reads first: the figures' JSON,
    plotly.js, and the drawing. The page's Content-Security-Policy is `content_security_policy()`
    (with the hashes of any scripts of its own). Each figure is drawn as `drawn_figure` has it (its
    title the text `figure_div` puts above it). The HTML sweep report embeds its charts so."""
    drawn = {div_id: drawn_figure(figure) for div_id, figure in figures.items()}
    return (f'<script type="application/json" id="smlens-figures">{script_json(drawn)}</script>'
            f"<script>{plotly_js()}</script><script>{DRAW_JS}</script>")


@dataclass
class Section:
    anchor: str
    title: str
    lead: str
    figures: list  # plotly figures, drawn one below the other (None: nothing to draw)
    body: str
    views: tuple
    has_pictures: bool = True  # False: a wide table, no figure expected
    nav: str = ""  # its link in the navigation bar (default: the title)


# The report's pictures of some views, by view. A view without one still gets its section: the
# table of its figures (labels, units and directions from the catalog) and its validation.
PICTURES: dict[str, Callable[["ReportInput", Optional["ReportInput"]], list]] = {
    "V1": lambda d, b: [fig_time(d.groups, b.groups if b else None, _time_unit(d), _per(d)),
                        fig_time_compare(d.groups, b.groups if b else None, _time_unit(d), _per(d))],
    "V3": lambda d, b: [fig_tensor(d.groups, b.groups if b else None)],
    "V4": lambda d, b: [fig_occupancy(d.groups, b.groups if b else None)],
    "V5": lambda d, b: [fig_waves(d.kernels, b.kernels if b else None)],
    "V6": lambda d, b: [fig_stalls(d.groups, b.groups if b else None)],
    "V7": lambda d, b: [fig_roofline(d.kernels, d.device, b.kernels if b else None)],
}
# Tables of their own some views add below their figures' table.
TABLES: dict[str, Callable[["ReportInput", Optional["ReportInput"]], str]] = {
    "V1": lambda d, b: mlp_table(d.mlp),
    "V4": lambda d, b: launch_table(d.kernels),
    registry.SELECTION_VIEW: lambda d, b: selection_table(d.kernels, b.kernels if b else None),
}


# Text figures one of TABLES shows with more beside them (the limiter, with the launch).
COVERED = {"occupancy_limiter"}


def _time_unit(data: ReportInput) -> str:
    return "µs" if data.tokens else "ms"


def _per(data: ReportInput) -> str:
    return " per token" if data.tokens else ""


def _time_label(data: ReportInput) -> str:
    return "time per token" if data.tokens else "time"


def _view_section(view: str, data: ReportInput, base: Optional[ReportInput], reasons: dict) -> Section:
    """One view: its pictures, the table of its figures per phase and role (value, or value (Δ %)
    against the baseline), each text figure's share of the time, and its validation."""
    groups = data.groups
    figures = registry.view_figures(view)
    # a group's own value (ARGMAX: its top stall; V7's bound, each bound's share beside) sits in the
    # table with its numbers
    numeric = [f for f in figures if (f.aggregate in (MEAN, SUM, RATIO, ARGMAX) or f.mode_shares)
               and f.column in groups.columns]
    texts = [f for f in figures if f.aggregate == MODE]
    per_token = " per token" if data.tokens else ""
    body = group_table(groups, columns_of(numeric, lambda f: per_token if f.aggregate == SUM else ""),
                       base.groups if base is not None else None, with_time=False, reasons=reasons) if numeric else ""
    body += "".join(shares_table(data.kernels, f) for f in texts if f.column not in COVERED)
    body += TABLES[view](data, base) if view in TABLES else ""
    # a view whose figures are all per kernel (V8): what sums a kernel up, in words
    lead = ("Hover a column heading for its definition; click a role for its kernels." if numeric or texts
            else " ".join(f"{f.label[:1].upper()}{f.label[1:]}: {f.definition}." for f in figures if f.summary))
    pictures = PICTURES[view](data, base) if view in PICTURES else []
    return Section(view.lower(), f"{view} {registry.title(view)}", lead, pictures, body, (view,),
                   has_pictures=view in PICTURES)


def _sections(data: ReportInput, base: Optional[ReportInput], reasons: dict,
              comparison: Optional[ComparisonVerdict] = None) -> list:
    gap = _drop_lone_all(data.gap if not data.gap.empty else data.groups)
    base_gap = None if base is None else (base.gap if not base.gap.empty else base.groups)
    gap_section = Section(
        "gap", "The gap: from elapsed time to useful tensor work",
        "Every step is a share of elapsed time and at most the one before: the SMs had work, the "
        "tensor pipe was busy, that MMA work at the device's best rate for its type, and the part "
        "of it that was not padding. Each step's factor (\u00d7) says what it loses, beside the "
        "figures of the views that explain it. Nsight Compute's SM throughput, the figure usually "
        "quoted as SM utilization, stands beside as the headline: it is no step. DRAM's share of "
        "its peak and the bound say whether a low tensor share is headroom at all (memory-bound at "
        "80 % of DRAM peak is not). A phase's row named all sums its roles; setup kernels (phase "
        "other) stay out of the chart; the ‘role from’ column says which roles were guessed from kernel names. "
        "Hover a heading for its definition (docs/VIEWS.md has them all), click a role or a bar for "
        "its kernels.",
        [fig_gap(gap, base_gap)], gap_table(gap, base_gap, reasons, _time_label(data)),
        tuple(registry.gap_views()), nav="The gap")
    top = Section("top", "The kernels that take the most time",
                  "By name, over all their launches; the launch (registers per thread, shared memory per "
                  "block, grid \u00d7 block) beside. Click a name for its launches in the kernel table.",
                  [], top_kernels_table(data.kernels, time_label=f"total {_time_label(data)}"), (),
                  has_pictures=False, nav="Top kernels")
    sections = [gap_section, top]
    if html_ranks.has_ranks(data):
        lead, figures, body = html_ranks.tp_body(data, base)
        sections.insert(1, Section(html_ranks.ANCHOR, "Tensor parallel: ranks and communication", lead,
                                   figures, body, (), has_pictures=False, nav="Ranks"))
    if base is not None:
        changes = compare.kernel_changes(data.kernels, base.kernels)
        counts = changes["status"].value_counts()
        sections.insert(0, Section(
            "changes", "Kernels matched between the runs",
            f"Matched by phase, role, kernel family and the problem's fixed dimensions (a GEMM's N and K, "
            f"attention's heads and head size), not by position; the tokens (M) may differ. "
            f"{counts.get('matched', 0)} matched, {counts.get('added', 0)} only in this run (added), "
            f"{counts.get('removed', 0)} only in the baseline (removed).",
            [], changes_table(changes, _time_label(data), comparison.by_key if comparison else None), (),
            has_pictures=False, nav="Kernel changes"))
    return sections + [_view_section(view, data, base, reasons) for view in data.view_ids]


def _drop_lone_all(gap: pd.DataFrame) -> pd.DataFrame:
    """A phase's `all` row says nothing new when the phase has one role."""
    if gap.empty or "role" not in gap.columns:
        return gap
    roles = gap[gap["role"] != "all"].groupby("phase", observed=True)["role"].nunique()
    lone = gap["phase"].map(roles).fillna(0) <= 1
    return gap[~((gap["role"] == "all") & lone)]


def figure_div(div_id: str, figure: dict) -> str:
    """The chart's title as text above it (it wraps on a narrow screen; inside the chart it would run
    into the legend), and its div."""
    # A fixed height: a responsive plot in a div of no height of its own shrinks on resize.
    height = int(figure["layout"].get("height", 400))
    title = html.unescape(str((figure["layout"].get("title") or {}).get("text") or ""))
    caption = f'<p class="figcap">{esc(title)}</p>' if title else ""
    return f'{caption}<div class="fig" id="{esc(div_id)}" style="height:{height}px"></div>'


def drawn_figure(figure: dict) -> dict:
    """The figure as the page draws it: its title is the text above it (figure_div), its legend
    sits where the title was."""
    layout = {k: v for k, v in figure["layout"].items() if k != "title"}
    layout["margin"] = {**layout.get("margin", {}), "t": 36}
    return {**figure, "layout": layout}


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


def _name(run: dict) -> str:
    return str(run.get("name") or run.get("id") or "run")


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
    from reports.terminal import capture_line, device_line

    conditions = [line for line in (device_line(data.devices), capture_line(data.devices, k, run)) if line]
    lines = [f'<div class="meta">{describe(run)} \u00b7 {len(k)} kernels'
             + ("" if data.tokens else f' \u00b7 {esc(fmt_time_ns(numbers(k, "time_ns").sum()))} kernel time')
             + "</div>"]
    if conditions:  # one line folded: the verdict and the tables stay in the first screen
        summary = "device and capture" + (": clocks locked at base" if "clocks locked" in conditions[-1] else "")
        lines.append(f'<details class="meta"><summary>{esc(summary)}</summary>'
                     + "".join(f"<div>{esc(line)}</div>" for line in conditions) + "</details>")
    if base is not None:
        lines.append(f'<div class="meta">against baseline {describe(base.run)} \u00b7 {len(base.kernels)} kernels: '
                     f'figures show value and change (\u25b2 up, \u25bc down); '
                     f'<span class="d good">green</span> better, <span class="d bad">red</span> worse by '
                     f'the figure\u2019s direction, beyond {REGRESSION_PCT:g} %</div>')
    if data.tokens:
        tokens = ", ".join(f"{p} {t:,.0f} ({source})" for p, (t, source) in data.tokens.items())
        lines.append(f'<div class="meta">per token: times, bytes and FLOPs divided by the tokens each phase '
                     f'processed, {esc(tokens)}</div>')
    if phase or role:
        lines.append(f'<div class="meta">only phase {esc(phase or "any")}, role {esc(role or "any")}'
                     + (f"; time shares are of {esc(data.share_of)}" if data.share_of else "") + "</div>")
    title = esc(_title(data, base))
    return f"<header><h1>{title}</h1>{''.join(lines)}</header>"


def _title(data: ReportInput, base: Optional[ReportInput]) -> str:
    title = f"smlens report: {_name(data.run)}"
    return f"{title} against {_name(base.run)}" if base is not None else title


def _summary(data: ReportInput, checks: pd.DataFrame) -> str:
    rows = []
    for view in data.view_ids:
        st = view_status(data.kernels, view, checks)
        rows.append([badge(st.status), esc(view), esc(registry.title(view)), esc(st.passed),
                     esc(st.failed), esc(st.not_available)])
    return ('<section id="validation"><h2>Validation</h2><p class="lead">Every figure is checked '
            'against an independent counter or formula (docs/VIEWS.md in smlens says which and why). A '
            'failed check keeps its figure but says by '
            'how much it disagrees; n/a says which input was missing (each view\u2019s box above '
            'says why, and what to do).</p>'
            + html_table(["status", "view", "", "pass", "fail", "n/a"], rows, "sum") + "</section>")


def _options(values) -> str:
    return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)


def _kernels_section(data: ReportInput, checks: pd.DataFrame, base: Optional[ReportInput],
                     comparison: Optional[ComparisonVerdict] = None) -> str:
    k = data.kernels
    base_time = quiet = None
    if base is not None:
        base_kernels = base.kernels
        base_time = compare.kernel_baseline_time(k, base_kernels)
    if comparison is not None:  # a kernel whose key moved within the run-to-run noise: grey
        quiet = [comparison.by_key.get(key) == NOISE for key in key_tuples(k)]
    phases = list(dict.fromkeys(k["phase"].astype(object))) if "phase" in k.columns else []
    roles = list(dict.fromkeys(k["role"].astype(object))) if "role" in k.columns else []
    filters = (f'<div class="filters"><input type="search" id="kq" placeholder="search: name, phase, role, '
               f'NVTX, family\u2026" aria-label="search the kernels"><select id="kp" aria-label="phase">'
               f'<option value="">every phase</option>{_options(phases)}</select><select id="kr" '
               f'aria-label="role"><option value="">every role</option>{_options(roles)}</select>'
               f'<button id="kx" type="button">show all</button><span id="kn" class="d">{len(k)} of '
               f'{len(k)} kernels shown</span></div>')
    names = k["name"].nunique() if "name" in k.columns else 0
    return ('<section id="kernels"><h2>Kernels</h2><p class="lead">Every profiled kernel launch, the '
            'figures that tell most first. Search, filter by phase and role, click a heading to sort; '
            'hover a badge for its validation detail.</p>' + filters
            + kernel_table(k, checks, data.view_ids, base_time, _time_label(data), quiet)
            + f'<details><summary>Full kernel names ({names})</summary>' + names_table(k) + "</details></section>")


def render_report(data: ReportInput, baseline: Optional[ReportInput] = None,
                  phase: Optional[str] = None, role: Optional[str] = None,
                  tokens: Optional[dict] = None, base_tokens: Optional[dict] = None,
                  comparison: Optional[ComparisonVerdict] = None) -> str:
    """The whole report as one HTML string. `tokens` (and `base_tokens`): phase -> (tokens,
    source), to show figures that add up per token (compare.tokens_per_phase). `comparison`: what
    changed against the baseline, with the repeats' noise floor (made here without repeats if not
    given)."""
    data = filter_input(data, phase, role)
    if baseline is not None:
        baseline = filter_input(baseline, phase, role)
    verdict = _verdict(data, tokens)
    base_verdict = _verdict(baseline, base_tokens if tokens else None) if baseline is not None else None
    # each kernel's page and what changed, in absolute times (before figures go per token)
    pages = kernel_sections(kernel_details(data.kernels, data.source if len(data.source) else None,
                                           baseline.kernels if baseline is not None else None, data.view_ids))
    if baseline is not None and comparison is None:
        comparison = compare.compare_runs(data.kernels, baseline.kernels, data.run, baseline.run)
    changed = comparison_section(comparison, _name(baseline.run)) if baseline is not None else ""
    if tokens:
        data = per_token(data, tokens)
        if baseline is not None and base_tokens:
            baseline = per_token(baseline, base_tokens)
    phase_times = _phase_times(data)
    checks = validation_frame(data.kernels, data.view_ids)
    reasons = group_reasons(data.kernels, checks, data.view_ids)
    figures: dict = {}
    # per token, each phase's time over its tokens; else the verdict's own (a TP run's collectives
    # in, the waiting for a slower rank out)
    parts = ([changed] if changed else []) + [
        verdict_section(verdict, base_verdict, phase_times if tokens else None,
                        _phase_times(baseline) if tokens else None, _time_label(data), data.kernels)]
    nav = (['<a href="#comparison">What changed</a>'] if changed else []) + ['<a href="#verdict">Verdict</a>']
    for s in _sections(data, baseline, reasons, comparison):
        nav.append(f'<a href="#{esc(s.anchor)}">{esc(s.nav or s.title)}</a>')
        drawn = ""
        for number, figure in enumerate(filter(_has_data, s.figures), 1):
            div_id = f"fig-{s.anchor}" + (f"-{number}" if number > 1 else "")
            figures[div_id] = figure
            drawn += figure_div(div_id, figure)
        if not drawn and s.has_pictures:
            drawn = f'<p class="na">{esc(NO_FIGURE)}</p>'
        aside = validation_box(data.kernels, s.views, checks) if s.views else ""
        if drawn:  # the figures beside their validation, the tables below at full width
            inner = f'<div class="row{"" if aside else " wide"}"><div>{drawn}</div>{aside}</div>{s.body}'
        else:
            inner = f'{s.body}<div class="row wide">{aside}</div>' if aside else s.body
        lead = f'<p class="lead">{esc(s.lead)}</p>' if s.lead else ""
        parts.append(f'<section id="{esc(s.anchor)}"><h2>{esc(s.title)}</h2>{lead}{inner}</section>')
    nav.append('<a href="#kernels">Kernels</a><a href="#validation">Validation</a>')
    title = esc(_title(data, baseline))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{content_security_policy(KERNEL_JS)}\">"
        f"<title>{title}</title><style>{CSS}</style></head><body>"
        + _header(data, baseline, phase, role)
        + f"<nav>{''.join(nav)}</nav><main>" + "".join(parts) + _kernels_section(data, checks, baseline, comparison)
        + _summary(data, checks) + pages + "</main>"
        "<footer>Made by smlens from Nsight Compute counters. Figures of groups are weighted by "
        "kernel time. Badges: <b class=\"ok\">pass</b> <b class=\"bad\">fail</b> "
        "<b class=\"na\">n/a</b>.</footer>"
        # the page's script first (sorting, filtering), then the charts: nothing waits for plotly.js
        f"<script>{APP_JS}</script><script>{KERNEL_JS}</script>{chart_scripts(figures)}</body></html>\n")


def _phase_times(data: Optional[ReportInput]) -> dict:
    """phase -> its time as the report shows it (per token when asked)."""
    if data is None or data.kernels.empty:
        return {}
    frame = data.kernels.assign(_t=numbers(data.kernels, "time_ns"))
    return {p: float(t) for p, t in frame.groupby(frame["phase"].astype(object), sort=False)["_t"].sum(min_count=1).items()}


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
