"""One kernel in depth (views/kernel_detail.py), in the terminal (`smlens show RUN --kernel ID`) and
in the report: every figure by view with the metric that gave it and the raw counters, each view's
validation, the kernel's name, NVTX range, shapes and launch, and the baseline's matched kernel
beside.

In the report a kernel's section `#kernel-<id>` is made when a link, a chart mark or the address
names it, and hidden when another is opened: the page's script (KERNEL_JS) builds it from one
packed JSON block of texts formatted here. Static tables for 188 kernels of 88 figures would add megabytes; the JSON
holds each figure's values over the kernels in one list, names each other text once, and is
gzipped: the demo's report grows by about 45 kB.
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
from reports.html_text import change_class
from reports.tables import Column, Prose, Rows, fit
from views import registry
from views.common import plain
from views.kernel_detail import FigureValue, KernelDetail

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
    """The JSON the page's script builds a kernel's section from, by column: one kernel's figure
    is much like another's (`0 %`, `100 %`, `n/a`), so a figure's values over every kernel in one
    list pack to two thirds of the same values kernel by kernel.

    `ids`: the kernels in order, `n` below their position. `strings`: each label, source, counter
    name, header line and validation text once. `views`: [view, title, [figure...]]; `figures`:
    each figure's label; `v[figure][n]` its value's text (`b` the baseline's and `d` the change,
    `+3.3 %|bad`, against one); `sources[s[n]][figure]` what gave it, `named[source]` the counters
    a source names, `c[counter][n]` their raw values; `h[n]` the header lines; `st[view][n]`,
    `dt[view][n]` each view's validation and its detail."""
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    first = details[0] if details else None
    views, figures = [], []
    for view in first.views if first else []:
        views.append([view.view, view.title, list(range(len(figures), len(figures) + len(view.figures)))])
        figures += [s(f.label) for f in view.figures]
    compare = any(d.baseline is not None for d in details)
    values = [[] for _ in figures]
    base = [[] for _ in figures] if compare else []
    change = [[] for _ in figures] if compare else []
    status = [[] for _ in views]
    detail = [[] for _ in views]
    counters: dict[int, list] = {}
    named: dict[int, dict] = {}
    source_lists: dict[tuple, int] = {}
    sources, heads = [], []
    for n, d in enumerate(details):
        shown = [f for view in d.views for f in view.figures]
        for i, f in enumerate(shown):
            values[i].append(_value(f, f.value))
            if compare:
                text, verdict = _change(f)
                base[i].append(_value(f, f.base_value) if d.baseline is not None else "")
                change[i].append(f"{text}|{verdict}" if verdict else text)
            for name, value in f.counters.items():  # as ncu gave it: a number
                counters.setdefault(s(name), [None] * len(details))[n] = _number(value)
                named.setdefault(s(f.source), {})[s(name)] = None  # a counter is named by a source
        sources.append(source_lists.setdefault(tuple(-1 if f.source is None else s(f.source) for f in shown),
                                               len(source_lists)))
        heads.append([s(line) for line in header_lines(d)])
        for v, view in enumerate(d.views):
            status[v].append(s(view.status))
            detail[v].append(s(view.detail))
    out = {"ids": [str(d.id) for d in details], "strings": list(strings), "views": views, "figures": figures,
           "v": values, "sources": [list(k) for k in source_lists], "s": sources, "h": heads, "st": status,
           "dt": detail, "c": counters, "named": {k: list(v) for k, v in named.items()}}
    if compare:
        out.update(b=base, d=change)
    return out


def _number(value):
    """A counter as a JSON number (12000 rather than 12000.0), text as it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    return value


# Python's base85 alphabet with `<`, `>` and `&` swapped for characters it does not use, so the
# packed data can hold no markup (`<!--`, `</script`) inside its <script> element
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
PAGE_B85 = _B85.translate(str.maketrans("<>&", ",.:"))


def pack(data: dict) -> str:
    """The kernels' JSON gzipped in base85 (a quarter more than the bytes, base64 a third)."""
    # not html_text.script_json: it rounds numbers to what a chart shows, and counters stay raw; packed,
    # no text can close the script
    text = json.dumps(plain(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    raw = gzip.compress(text.encode("utf-8"), mtime=0)
    return base64.b85encode(raw).decode("ascii").translate(str.maketrans(_B85, PAGE_B85))


def unpack(text: str) -> dict:
    """The kernels' data as the page holds it, back to JSON (what KERNEL_JS reads; for tests)."""
    raw = base64.b85decode(text.translate(str.maketrans(PAGE_B85, _B85)))
    return json.loads(gzip.decompress(raw).decode("utf-8"))


def kernel_sections(details: list[KernelDetail]) -> str:
    """The kernels' data packed (the JSON of the demo's 188 kernels is 260 kB, 40 kB packed; the
    browser unpacks it with DecompressionStream when a kernel is first opened), and the place
    KERNEL_JS puts each kernel's section, `#kernel-<id>`, when linked."""
    return (f'<div id="kernel-pages"></div>'
            f'<script type="application/octet-stream" id="smlens-kernels">{pack(kernel_data(details))}</script>')


# Builds a kernel's section when the address names it (#kernel-<id>): every text goes in through
# textContent, so nothing a capture holds becomes markup. Closes the one open before.
KERNEL_JS = (r"""
(function(){
  var node = document.getElementById('smlens-kernels');
  if (!node) return;
  var data = null, S = null, open = null, loading = null;
  function bytes(text){  // base85 (kernel_page.PAGE_B85's alphabet) -> bytes
    var A = %(alphabet)s, n = text.length, full = Math.floor(n / 5) * 4, tail = n %% 5;
    var out = new Uint8Array(full + (tail ? tail - 1 : 0)), o = 0;
    for (var i = 0; i < n; i += 5) {
      var v = 0;
      for (var j = 0; j < 5; j++) v = v * 85 + (i + j < n ? A.indexOf(text.charAt(i + j)) : 84);
      for (var k = 3; k >= 0; k--) { if (o + 3 - k < out.length) out[o + 3 - k] = (v >>> (8 * k)) & 255; }
      o += 4;
    }
    return out;
  }
  function load(){  // the gzipped JSON, unpacked once, the first time a kernel is opened
    if (!loading) {
      var raw = bytes(node.textContent.trim());
      var stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream('gzip'));
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
  function build(section, n){
    var sources = data.sources[data.s[n]], compare = !!data.b;
    section.appendChild(el('h2', S[data.h[n][0]]));
    data.h[n].slice(1).forEach(function(line){ section.appendChild(el('p', S[line], 'meta')); });
    data.views.forEach(function(view, v){
      var status = S[data.st[v][n]], h = el('h3', view[0] + ' ' + view[1] + ' ');
      h.appendChild(el('b', status, {pass:'ok', fail:'bad'}[status] || 'na'));
      section.appendChild(h);
      if (S[data.dt[v][n]]) section.appendChild(el('p', S[data.dt[v][n]], 'd'));
      var table = el('table'), tr = el('tr');
      ['figure', 'value'].concat(compare ? ['baseline', 'change'] : [], ['from', 'counters']).forEach(function(t){
        tr.appendChild(el('th', t));
      });
      table.appendChild(el('thead')).appendChild(tr);
      var body = table.appendChild(el('tbody'));
      view[2].forEach(function(f){
        var row = body.appendChild(el('tr'));
        row.appendChild(el('td', S[data.figures[f]]));
        row.appendChild(el('td', data.v[f][n]));
        if (compare) {
          row.appendChild(el('td', data.b[f][n]));
          var parts = data.d[f][n].split('|');
          row.appendChild(el('td', parts[0], parts[1] ? 'd ' + parts[1] : 'd'));
        }
        var src = sources[f];
        row.appendChild(el('td', src < 0 ? 'from the figures above' : S[src], 'd'));
        var counts = (data.named[src] || []).filter(function(c){ return data.c[c][n] !== null; })
          .map(function(c){ return S[c] + ' = ' + String(data.c[c][n]); });
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
    if (id === null) return;
    load().then(function(){
      var n = data.ids.indexOf(id);
      if (n < 0 || location.hash !== '#kernel-' + m[1]) return;
      var section = document.getElementById('kernel-' + id);
      if (!section) {  // made the first time it is opened, then kept (hidden when another is)
        section = el('section', null, 'kpage');
        section.id = 'kernel-' + id;
        build(section, n);
        document.getElementById('kernel-pages').appendChild(section);
      }
      section.hidden = false;
      open = section;
      section.scrollIntoView();
    });
  }
  window.addEventListener('hashchange', show);
  // a kernel's id in the kernel table opens its page
  document.addEventListener('click', function(e){
    var cell = e.target.closest('#kernel-table tbody td:first-child');
    if (cell) location.hash = 'kernel-' + cell.textContent.trim();
  });
  show();
})();
""" % {"alphabet": json.dumps(PAGE_B85)})
