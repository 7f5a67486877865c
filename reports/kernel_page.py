"""One kernel in depth (views/kernel_detail.py), in the terminal (`smlens show RUN --kernel ID`) and
in the report: every figure by view with the metric that gave it and the raw counters, each view's
validation, the kernel's name, NVTX range, shapes and launch, and the baseline's matched kernel
beside.

In the report every kernel has a section `#kernel-<id>`, empty and hidden until a link, a chart
mark or the address names it; the page's script (KERNEL_JS) then builds it from one JSON block of
texts formatted here. Static tables for 188 kernels of 88 figures would add megabytes; the JSON
names each text once (a table of strings) and holds per kernel only indices into it, and it is
gzipped: the demo's report grows by about 70 kB.
"""
from __future__ import annotations

import base64
import gzip
import json
import re
from typing import Optional

from rich.console import Console
from rich.text import Text

from reports.formatting import number_text
from reports.html_tables import figure_format
from reports.html_text import change_class, esc, script_json
from reports.tables import Column, Prose, Rows, fit
from views import registry
from views.kernel_detail import FigureValue, KernelDetail

ANCHOR = "kernel-"  # a kernel's section is #kernel-<id>


def anchor(kernel_id) -> str:
    return f"{ANCHOR}{kernel_id}"


def _value(f: FigureValue, value) -> str:
    figure = registry.figures().get(f.column)
    return figure_format(figure)(value) if figure is not None else number_text(value, missing="\u2014")


def _change(f: FigureValue) -> tuple[str, str]:
    """(`+3.3 %`, good/bad/''): the change and its colour by the figure's better direction."""
    if f.change_pct != f.change_pct:  # NaN: no baseline value, or a text
        changed = f.base_value is not None and f.value != f.base_value
        return ("changed" if changed else "", "")
    return f"{f.change_pct:+.1f} %", change_class(f.column, f.change_pct)


def counter_text(value) -> str:
    """A raw counter as ncu gave it: integers whole, the rest to 6 significant digits."""
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, (int, float)):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def sourced_text(f: FigureValue) -> str:
    """The figure's source with each raw counter's value after its name:
    `sm__cycles_active.avg (59,029.9); sm__cycles_elapsed.avg (62,520.6)`."""
    text = f.source or ""
    for name, value in f.counters.items():
        text = re.sub(re.escape(name) + r"(?![\w.])", lambda m, v=value: f"{m.group(0)} ({counter_text(v)})", text,
                      count=1)
    return text


def header_lines(d: KernelDetail) -> list[str]:
    """Who the kernel is, a line each: where it ran, its full name, NVTX range, shape, launch, baseline."""
    role_from = f" (role from {d.role_source})" if d.role_source and d.role_source != "nvtx" else ""
    lines = [f"kernel {d.id} \u00b7 {d.phase} \u00b7 {d.role}{role_from} \u00b7 {d.kind or 'unknown kind'} \u00b7 "
             f"{_value(FigureValue('time_ns', '', 'ns', '', d.time_ns, None, {}), d.time_ns)}",
             f"name: {d.name}"]
    if d.nvtx:
        lines.append("NVTX: " + " / ".join(d.nvtx))
    if d.shapes:
        lines.append("shape: " + " ".join(f"{k}={_plain_number(v)}" for k, v in d.shapes.items()))
    if d.launch:
        lines.append("launch: " + ", ".join(f"{k} {_plain_number(v)}" for k, v in d.launch.items()))
    if d.baseline:
        b = d.baseline
        shape = " ".join(f"{k}={_plain_number(v)}" for k, v in (b.get("shapes") or {}).items())
        lines.append(f"baseline: kernel {b['id']} ({b.get('phase')} \u00b7 {b.get('role')}"
                     + (f", {shape}" if shape else "") + f"), {b.get('name')}")
    if d.out_of_bounds:
        lines.append("outside their physical range (raw values kept): " + ", ".join(d.out_of_bounds))
    return lines


def _plain_number(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- the terminal ---------------------------------------------------------------------------------

def print_kernel(d: KernelDetail, console: Optional[Console] = None) -> None:
    """The kernel page: the header, then per view its validation, its figures (value, the
    baseline's and the change, the source) and the raw counters they were read from."""
    from reports.terminal import output_console

    console = console or output_console()
    for number, line in enumerate(header_lines(d)):
        console.print(Prose(line, style="bold" if number == 0 else ""))
    compare = d.baseline is not None
    for view in d.views:
        console.print()
        status = {"pass": "green", "fail": "red"}.get(view.status, "dim")
        console.print(Text.assemble((f"{view.view} {view.title}: ", "bold"), (view.status, status)))
        if view.detail:
            console.print(Prose(view.detail, style="dim"))
        rows, values, base, change = Rows(), [], [], []
        for f in view.figures:
            rows.row(f.label)
            values.append(_value(f, f.value))
            if compare:
                base.append(_value(f, f.base_value))
                change.append(_change(f)[0])
        columns = [Column("value", values)]
        if compare:
            columns += [Column("baseline", base), Column("change", change)]
        for table in fit("", "figure", rows, columns, console.width):
            console.print(table)
        # a metric name is longer than a table's column: what gave each figure goes below, in lines
        sourced = [f"{f.label} \u2190 {sourced_text(f)}" for f in view.figures if f.source]
        if sourced:
            console.print(Prose("from: " + "; ".join(sourced), style="dim"))


# --- the report -----------------------------------------------------------------------------------

def kernel_data(details: list[KernelDetail]) -> dict:
    """The JSON the page's script builds a kernel's section from. Every text is in `strings` once
    (labels, values, sources, counter names, validation details); `views` is [view, title,
    [figure...]], `figures` each figure's label, `sources` the lists of sources kernels share, and
    `named` which counters each source names. Per kernel id: its header lines, values, source list,
    validations and counters (and the baseline's values and changes), all as string indices."""
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    source_lists: dict[tuple, int] = {}
    views: list = []
    figures: list = []
    kernels: dict = {}
    named: dict = {}
    for d in details:
        if not views:
            for view in d.views:
                views.append([view.view, view.title, list(range(len(figures), len(figures) + len(view.figures)))])
                figures += [s(f.label) for f in view.figures]
        values, sources, base, change, counters = [], [], [], [], {}
        for view in d.views:
            for f in view.figures:
                values.append(s(_value(f, f.value)))
                sources.append(-1 if f.source is None else s(f.source))
                if d.baseline is not None:
                    text, verdict = _change(f)
                    base.append(s(_value(f, f.base_value)))
                    change.append(s(f"{text}|{verdict}" if verdict else text))
                for name, value in f.counters.items():
                    counters[s(name)] = s(counter_text(value))
                    if f.source is not None:  # which counters each source names, over every kernel
                        named.setdefault(s(f.source), {})[s(name)] = None
        record = {"h": [s(line) for line in header_lines(d)], "v": values,
                  "s": source_lists.setdefault(tuple(sources), len(source_lists)),
                  "st": [[s(view.status), s(view.detail)] for view in d.views], "c": counters}
        if d.baseline is not None:
            record.update(b=base, d=change)
        kernels[str(d.id)] = record
    return {"strings": list(strings), "views": views, "figures": figures, "sources": list(map(list, source_lists)),
            "kernels": kernels, "named": {index: list(counted) for index, counted in named.items()}}


def kernel_sections(details: list[KernelDetail]) -> str:
    """A hidden, empty section per kernel (filled by KERNEL_JS when linked) and their data, gzipped
    and in base64: the JSON of the demo's 188 kernels is 257 kB, a quarter of that packed, and the
    browser unpacks it (DecompressionStream) only when a kernel is opened."""
    placeholders = "".join(f'<section id="{esc(anchor(d.id))}" class="kpage" hidden></section>' for d in details)
    packed = base64.b64encode(gzip.compress(script_json(kernel_data(details)).encode("utf-8"), mtime=0)).decode()
    return placeholders + f'<script type="application/octet-stream" id="smlens-kernels">{packed}</script>'


def unpack(page_data: str) -> dict:
    """The kernels' data as the page holds it, back to JSON (what KERNEL_JS reads; for tests)."""
    return json.loads(gzip.decompress(base64.b64decode(page_data)).decode("utf-8"))


def kernel_link(text: str, kernel_id) -> str:
    """`text` (escaped already) linking to the kernel's page."""
    return f'<a href="#{esc(anchor(kernel_id))}">{text}</a>'


# Builds a kernel's section when the address names it (#kernel-<id>): every text goes in through
# textContent, so nothing a capture holds becomes markup. Closes the one open before.
KERNEL_JS = r"""
(function(){
  var node = document.getElementById('smlens-kernels');
  if (!node) return;
  var data = null, S = null, open = null, loading = null;
  function load(){  // the gzipped JSON, unpacked once, the first time a kernel is opened
    if (!loading) {
      var bytes = Uint8Array.from(atob(node.textContent.trim()), function(c){ return c.charCodeAt(0); });
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
      loading = new Response(stream).text().then(function(text){ data = JSON.parse(text); S = data.strings; });
    }
    return loading;
  }
  function el(tag, text, cls){
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function build(section, k){
    var head = k.h, sources = data.sources[k.s];
    section.appendChild(el('h2', S[head[0]]));
    head.slice(1).forEach(function(line){ section.appendChild(el('p', S[line], 'meta')); });
    var at = 0, compare = !!k.b;
    data.views.forEach(function(view, v){
      var st = k.st[v], status = S[st[0]], h = el('h3', view[0] + ' ' + view[1] + ' ');
      h.appendChild(el('b', status, {pass:'ok', fail:'bad'}[status] || 'na'));
      section.appendChild(h);
      if (S[st[1]]) section.appendChild(el('p', S[st[1]], 'd'));
      var table = el('table'), tr = el('tr');
      ['figure', 'value'].concat(compare ? ['baseline', 'change'] : [], ['from', 'counters']).forEach(function(t){
        tr.appendChild(el('th', t));
      });
      table.appendChild(el('thead')).appendChild(tr);
      var body = table.appendChild(el('tbody'));
      view[2].forEach(function(f){
        var row = body.appendChild(el('tr')), i = at++;
        row.appendChild(el('td', S[data.figures[f]]));
        row.appendChild(el('td', S[k.v[i]]));
        if (compare) {
          row.appendChild(el('td', S[k.b[i]]));
          var parts = S[k.d[i]].split('|');
          row.appendChild(el('td', parts[0], parts[1] ? 'd ' + parts[1] : 'd'));
        }
        var src = sources[i];
        row.appendChild(el('td', src < 0 ? 'from the figures above' : S[src], 'd'));
        var counts = (data.named[src] || []).filter(function(c){ return k.c[c] !== undefined; })
          .map(function(c){ return S[c] + ' = ' + S[k.c[c]]; });
        row.appendChild(el('td', counts.join('; '), 'd'));
      });
      var wrap = el('div', null, 'tw');
      wrap.appendChild(table);
      section.appendChild(wrap);
    });
  }
  function show(){
    var m = /^#kernel-(.+)$/.exec(location.hash), id = m ? decodeURIComponent(m[1]) : null;
    if (open) { open.hidden = true; open = null; }
    var section = id !== null && document.getElementById('kernel-' + id);
    if (!section) return;
    load().then(function(){
      var k = data.kernels[id];
      if (!k || location.hash !== '#kernel-' + m[1]) return;
      if (!section.firstChild) build(section, k);
      section.hidden = false;
      open = section;
      section.scrollIntoView();
    });
  }
  window.addEventListener('hashchange', show);
  show();
})();
"""
