"""One kernel in depth on real H200 runs: every figure by view with the counter that gave it and
that counter's raw value, the validations, name, NVTX range, shapes and launch; against a baseline
the matched launch's values and the change; the terminal page and the report's packed data."""
from __future__ import annotations

import json

import pytest
from rich.console import Console

from reports.kernel_page import KERNEL_JS, kernel_data, kernel_sections, print_kernel, unpack
from tests.captures import kernels_of, views_of
from tests.conftest import DATA
from views import registry
from views.kernel_detail import kernel_detail, kernel_details, position

RUNS = DATA / "h200_runs"


@pytest.fixture(scope="module")
def llama_views():
    """Llama-3.1-8B at batch 8 and batch 1 (prompt 512): capture and views of each."""
    paths = {batch: RUNS / f"llama-3.1-8b-{batch}-p512.csv.gz" for batch in ("b8", "b1")}
    return {batch: (kernels_of(path), views_of(path)) for batch, path in paths.items()}


@pytest.fixture(scope="module")
def llama(llama_views):
    """Capture and views' kernels of each."""
    return {batch: (capture, result.kernels) for batch, (capture, result) in llama_views.items()}


@pytest.fixture(scope="module")
def details_b8(llama):
    """Every batch-8 kernel's detail against batch 1."""
    (capture8, b8), (_, b1) = llama["b8"], llama["b1"]
    return kernel_details(b8, capture8, b1)


def _rows(kernels, phase, role, kind):
    mask = (kernels["phase"] == phase) & (kernels["role"] == role) & (kernels["kind"] == kind)
    return [int(i) for i in mask.to_numpy().nonzero()[0]]


def _figure(detail, column):
    return next(f for v in detail.views for f in v.figures if f.column == column)


def test_every_figure_by_view_with_its_counter_and_raw_value(llama):
    capture, kernels = llama["b8"]
    at = _rows(kernels, "decode", "qkv_proj", "gemm")[0]
    detail = kernel_detail(kernels, at, capture)
    raw = capture.iloc[at]
    assert detail.id == raw["kernel_id"] and detail.name == raw["kernel_name"]
    assert detail.nvtx[-1] == "smlens:qkv_proj M=8 N=6144 K=4096"
    assert detail.shapes == {"M": 8, "N": 6144, "K": 4096}
    assert detail.launch["grid"] == raw["launch__grid_size"] and detail.launch["block"] == raw["launch__block_size"]
    assert detail.launch["registers per thread"] == raw["launch__registers_per_thread"]
    # the views in the registry's order, each view's figures in its catalog order
    assert [v.view for v in detail.views] == list(registry.VIEWS)
    for view in detail.views:
        assert [f.column for f in view.figures] == [f.column for f in registry.view_figures(view.view)
                                                    if f.column in kernels.columns]
        assert view.status == kernels[f"validation_{view.view}"].iloc[at]
    time = _figure(detail, "time_ns")
    assert time.source == "gpu__time_duration.sum"
    assert time.value == raw["gpu__time_duration.sum"] and time.counters == {"gpu__time_duration.sum": time.value}
    active = _figure(detail, "sm_active_pct")
    assert active.counters == {"sm__cycles_active.avg": raw["sm__cycles_active.avg"],
                               "sm__cycles_elapsed.avg": raw["sm__cycles_elapsed.avg"]}
    assert active.value == pytest.approx(100 * raw["sm__cycles_active.avg"] / raw["sm__cycles_elapsed.avg"])
    # the SM clock is cycles over time: those two counters, not every way its quantities have
    clock = _figure(detail, "sm_clock_ghz")
    assert set(clock.counters) == {"sm__cycles_elapsed.avg", "gpu__time_duration.sum"}
    assert _figure(detail, "mma_path").value == "gmma" and _figure(detail, "mma_path").counters == {}


def test_against_batch_1_the_matched_launch_and_its_change(llama):
    """The decode qkv GEMM at batch 8 against batch 1's: the token dimension fills the 64x8 tile's
    8 rows at M=8, one of them at M=1 (V3's useful MMA share 1 against 1/8)."""
    (capture8, b8), (_, b1) = llama["b8"], llama["b1"]
    at, base_at = _rows(b8, "decode", "qkv_proj", "gemm")[0], _rows(b1, "decode", "qkv_proj", "gemm")[0]
    detail = kernel_detail(b8, at, capture8, b1)
    assert detail.baseline["id"] == b1["kernel_id"].iloc[base_at]
    assert detail.baseline["shapes"] == {"M": 1, "N": 6144, "K": 4096}
    time = _figure(detail, "time_ns")
    assert time.base_value == b1["time_ns"].iloc[base_at]
    assert time.change_pct == pytest.approx(100 * (time.value / time.base_value - 1))
    fill = _figure(detail, "fill")
    assert fill.value == pytest.approx(1.0) and fill.base_value == pytest.approx(1 / 8)
    assert fill.change_pct == pytest.approx(700)


def test_a_launch_is_matched_in_its_own_range_and_order(llama, details_b8):
    """Decode's at::elementwise_kernel: at batch 8 five launches in rope_kv_cache and two in
    silu_mul, at batch 1 four in rope_kv_cache (its silu_mul runs a vectorized kernel). Each rope
    launch gets the rope launch of its order (the fifth the last), silu_mul's none."""
    (capture8, b8), (_, b1) = llama["b8"], llama["b1"]
    details = details_b8
    elementwise = [at for at in _rows(b8, "decode", "elementwise", "elementwise")
                   if b8["kernel_name"].iloc[at].startswith("void at::elementwise_kernel")]
    ranges = [b8["nvtx_stack"].iloc[at][-1] for at in elementwise]
    assert ranges == ["smlens:elementwise op=rope_kv_cache"] * 5 + ["smlens:elementwise op=silu_mul"] * 2
    base = [at for at in _rows(b1, "decode", "elementwise", "elementwise")
            if b1["kernel_name"].iloc[at].startswith("void at::elementwise_kernel")]
    base_ids = [b1["kernel_id"].iloc[at] for at in base]
    assert [details[at].baseline["id"] for at in elementwise[:5]] == base_ids + base_ids[-1:]
    assert [details[at].baseline for at in elementwise[5:]] == [None, None]
    # one kernel alone is matched the same way as all at once
    assert kernel_detail(b8, elementwise[2], capture8, b1).baseline == details[elementwise[2]].baseline


def test_a_kernel_the_baseline_lacks_has_no_baseline(llama):
    capture, kernels = llama["b8"]
    detail = kernel_detail(kernels, _rows(kernels, "decode", "qkv_proj", "gemm")[0], capture,
                           views_of(DATA / "targeted_raw.csv").kernels)
    assert detail.baseline is None and _figure(detail, "time_ns").base_value is None


def test_position_by_id(llama):
    _, kernels = llama["b8"]
    last = kernels["kernel_id"].iloc[-1]
    assert position(kernels, str(last)) == len(kernels) - 1 and position(kernels, "no such") is None


def test_the_terminal_page_fits_80_columns_and_cuts_no_name(llama):
    (capture8, b8), (_, b1) = llama["b8"], llama["b1"]
    at = _rows(b8, "decode", "elementwise", "elementwise")[0]
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    print_kernel(kernel_detail(b8, at, capture8, b1), console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "".join(b8["kernel_name"].iloc[at].split()) in "".join(text.split())  # wrapped, whole
    for view in registry.VIEWS:
        assert any(line.startswith(f"{view} {registry.title(view)}: ") for line in lines)
    assert "baseline" in lines[0] or any(line.startswith("baseline: kernel") for line in lines)
    time = b8["time_ns"].iloc[at]
    assert f"gpu__time_duration.sum ({time:,.0f})" in " ".join(text.split())


def test_the_reports_data_names_every_figure_of_every_kernel(llama, details_b8):
    capture8, b8 = llama["b8"]
    details = details_b8
    html = kernel_sections(details)
    packed = html.split('id="smlens-kernels">', 1)[1].split("</script>", 1)[0]
    data = unpack(packed)
    assert data == json.loads(json.dumps(kernel_data(details)))
    strings = data["strings"]
    figures = sum(len(v[2]) for v in data["views"])
    assert data["ids"] == [str(i) for i in b8["kernel_id"]]
    assert len(data["v"]) == len(data["b"]) == len(data["d"]) == figures == len(data["figures"])
    assert all(len(column) == len(b8) for column in data["v"] + data["b"] + data["d"])
    n = _rows(b8, "decode", "qkv_proj", "gemm")[0]
    assert strings[data["h"][n][1]] == f"name: {b8['kernel_name'].iloc[n]}"
    time_at = data["views"][0][2][0]
    assert strings[data["figures"][time_at]] == "time"
    assert data["v"][time_at][n] == f"{b8['time_ns'].iloc[n] / 1000:.3g} \u00b5s"
    assert strings[data["sources"][data["s"][n]][time_at]] == "gpu__time_duration.sum"
    counters = {strings[int(k)]: values[n] for k, values in data["c"].items() if values[n] is not None}
    assert counters["gpu__time_duration.sum"] == capture8["gpu__time_duration.sum"].iloc[n] == 17888  # raw
    fill_at = [f.column for v in details[n].views for f in v.figures].index("fill")
    assert (data["v"][fill_at][n], data["b"][fill_at][n], data["d"][fill_at][n]) == ("1.00", "0.12", "+700.0 %|good")
    for view, statuses in zip(data["views"], data["st"]):
        assert strings[statuses[n]] == b8[f"validation_{view[0]}"].iloc[n]
    # the page's script reads these keys, and writes texts only through textContent
    for key in ("ids", "strings", "views", "figures", "sources", "named", "data.h", "data.v", "data.s",
                "data.st", "data.dt", "data.c", "data.b", "data.d"):
        assert key in KERNEL_JS
    assert "innerHTML" not in KERNEL_JS


# --- in the report ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def comparison_report():
    """Llama-3.1-8B batch 8 against batch 1, as `smlens report --baseline` renders it."""
    from tests.report_cases import llama_comparison

    return llama_comparison()


def test_the_report_holds_every_kernels_page_and_the_comparison_first(llama, comparison_report):
    (capture8, b8), (_, b1) = llama["b8"], llama["b1"]
    text = comparison_report
    packed = text.split('id="smlens-kernels">', 1)[1].split("</script>", 1)[0]
    data = unpack(packed)
    assert data["ids"] == [str(i) for i in b8["kernel_id"]] and "b" in data  # against the baseline
    assert text.index('<section id="comparison">') < text.index('<section id="verdict">')
    assert '<a href="#comparison">What changed</a>' in text
    # each opportunity links to the page of its group's longest kernel
    verdict = text[text.index('<section id="verdict">'):]
    verdict = verdict[:verdict.index("</section>")]
    linked = [int(i) for i in __import__("re").findall(r'href="#kernel-(\d+)"', verdict)]
    assert linked
    for kernel_id in linked:
        row = b8[b8["kernel_id"] == kernel_id].iloc[0]
        group = b8[(b8["phase"] == row["phase"]) & (b8["role"] == row["role"])]
        assert row["time_ns"] == group["time_ns"].max()
    # the page's script is allowed by the policy's hash, like the others
    from reports import html as report
    assert report.script_hash(KERNEL_JS) in text[:text.index("</head>")]


def _once_shown(kernel_id, result: str, before: str = "") -> str:
    """A script's promise of `result` (an expression of `s`, the section #kernel-<id>) once that
    section is shown, or after 20 s; `before` runs first (a click that opens it)."""
    return """new Promise(function (done) {%s
        var t0 = Date.now();
        (function poll() {
          var s = document.getElementById('kernel-%s');
          if ((s && !s.hidden) || Date.now() - t0 > 20000) done(%s);
          else setTimeout(poll, 50);
        })();
    })""" % (before, kernel_id, result)


@pytest.mark.slow
def test_a_kernels_page_opens_in_the_browser_when_linked(tmp_path, comparison_report, llama):
    """Chromium opens #kernel-<id>: the section is built from the packed data (DecompressionStream),
    shows each figure of each view with the baseline's value and change, and a click on another
    kernel's id in the kernel table opens that one and hides the first."""
    from tests.chromium import Browser, require_chromium

    binary = require_chromium()
    _, b8 = llama["b8"]
    path = tmp_path / "compare.html"
    path.write_text(comparison_report, encoding="utf-8")
    at = _rows(b8, "decode", "qkv_proj", "gemm")[0]
    kernel_id = b8["kernel_id"].iloc[at]
    browser = Browser(binary, window=(1400, 1000))
    try:
        session = browser.open(path.resolve().as_uri() + f"#kernel-{kernel_id}")
        page = browser.evaluate(session, _once_shown(kernel_id, """s && {hidden: s.hidden,
            title: s.querySelector('h2').textContent,
            views: Array.from(s.querySelectorAll('h3')).map(function (h) { return h.textContent; }),
            rows: Array.from(s.querySelectorAll('tbody tr')).map(function (r) {
              return Array.from(r.cells).map(function (c) { return c.textContent; }); })}"""))
        assert page and not page["hidden"]
        assert page["title"].startswith(f"kernel {kernel_id} \u00b7 decode \u00b7 qkv_proj")
        assert [v.split(" ")[0] for v in page["views"]] == list(registry.VIEWS)
        assert len(page["rows"]) == sum(1 for f in registry.figures() if f in b8.columns)
        fill = next(r for r in page["rows"] if r[0] == "useful MMA share")
        assert fill[1:4] == ["1.00", "0.12", "+700.0 %"]
        time = next(r for r in page["rows"] if r[0] == "time")
        assert time[4] == "gpu__time_duration.sum" and time[5] == f"gpu__time_duration.sum = {int(b8['time_ns'].iloc[at])}"
        other = b8["kernel_id"].iloc[0]
        state = browser.evaluate(session, _once_shown(other, """{hash: location.hash, opened: !!s && !s.hidden,
            first: document.getElementById('kernel-%s').hidden}""" % kernel_id, before="""
            Array.from(document.querySelectorAll('#kernel-table tbody td:first-child'))
              .filter(function (c) { return c.textContent === '%s'; })[0].click();""" % other))
        assert state == {"hash": f"#kernel-{other}", "opened": True, "first": True}
        assert browser.errors(session) == []
    finally:
        browser.close()


# --- from the store -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from profiler.ingest.stores import open_store

    folder = tmp_path_factory.mktemp("kernel-store") / "store"
    the_store = open_store(folder)
    for batch in ("b8", "b1"):
        the_store.ingest(RUNS / f"llama-3.1-8b-{batch}-p512.csv.gz", name=f"llama-{batch}")
    return folder


def test_show_kernel_from_the_store_as_json(store, llama, capsys):
    from commands.compare import show_kernel
    from reports.formats import Format

    _, b8 = llama["b8"]
    at = _rows(b8, "decode", "qkv_proj", "gemm")[0]
    document = show_kernel("llama-b8", str(b8["kernel_id"].iloc[at]), "llama-b1", str(store), Format.json)
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(document))
    assert printed["baseline"] and printed["shapes"] == {"M": 8, "N": 6144, "K": 4096}
    assert printed["baseline"] != printed["run"] and printed["name"] == b8["kernel_name"].iloc[at]
    fill = next(f for v in printed["views"] for f in v["figures"] if f["column"] == "fill")
    assert (fill["value"], fill["base_value"]) == (pytest.approx(1.0), pytest.approx(0.125))
    time = next(f for v in printed["views"] for f in v["figures"] if f["column"] == "time_ns")
    assert time["counters"] == {"gpu__time_duration.sum": 17888}


def test_an_unknown_kernel_is_a_one_line_error(store, llama):
    from commands.compare import show_kernel
    from profiler.errors import BadInput

    last = llama["b8"][1]["kernel_id"].max()
    with pytest.raises(BadInput, match=rf"^run \w+ has no kernel '999': its kernels are 0 to {last} "):
        show_kernel("llama-b8", "999", store=str(store))


def test_each_top_kernel_links_to_its_longest_launch(comparison_report, llama):
    import re

    _, b8 = llama["b8"]
    top = comparison_report[comparison_report.index('<section id="top">'):]
    top = top[:top.index("</section>")]
    linked = [int(i) for i in re.findall(r'href="#kernel-(\d+)"', top)]
    assert len(linked) == len(re.findall(r"<tr><td>", top)) > 0
    first = b8[b8["kernel_id"] == linked[0]].iloc[0]
    same = b8[b8["kernel_name"] == first["kernel_name"]]
    assert first["time_ns"] == same["time_ns"].max()


def test_show_kernel_on_the_command_line(store, llama, monkeypatch):
    from tests.cli import smlens

    _, b8 = llama["b8"]
    at = _rows(b8, "decode", "qkv_proj", "gemm")[0]
    kernel_id = b8["kernel_id"].iloc[at]
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = smlens("show", "llama-b8", "--kernel", kernel_id, "--baseline", "llama-b1", "--store", store)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"kernel {kernel_id} \u00b7 decode \u00b7 qkv_proj \u00b7 gemm \u00b7 ")
    assert lines[1] == f"name: {b8['kernel_name'].iloc[at]}"
    assert max(len(line) for line in lines) <= 100
    code, out, err = smlens("show", "llama-b8", "--baseline", "llama-b1", "--store", store)
    assert code == 2 and out == "" and "--baseline needs --kernel ID" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_hostile_kernel_name_on_its_page_stays_text(tmp_path):
    """The targeted capture with script and markup in every GEMM's name and NVTX message: its page
    shows them character for character and runs none of them."""
    from reports import html as report
    from tests.chromium import Browser, require_chromium
    from tests.conftest import TARGETED_SHAPES
    from tests.report_cases import HOSTILE_NAME, hostile_capture, views_input

    binary = require_chromium()
    capture = hostile_capture(DATA / "targeted_raw.csv", tmp_path / "hostile.csv")
    data = views_input(capture, TARGETED_SHAPES, {"id": "evil", "name": "evil"})
    hostile = data.kernels[data.kernels["name"].str.endswith(HOSTILE_NAME)]
    kernel_id = hostile["id"].iloc[0]
    path = tmp_path / "hostile.html"
    path.write_text(report.render_report(data), encoding="utf-8")
    browser = Browser(binary, window=(1400, 1000))
    try:
        session = browser.open(path.resolve().as_uri() + f"#kernel-{kernel_id}")
        shown = browser.evaluate(session, _once_shown(kernel_id, """{
            lines: s ? Array.from(s.querySelectorAll('p.meta')).map(function (p) { return p.textContent; }) : [],
            pwned: window.__pwned === undefined ? null : window.__pwned, title: document.title,
            tags: s ? Array.from(s.querySelectorAll('script, img, svg, i')).length : -1}"""))
        assert shown["lines"][0] == f"name: {hostile['name'].iloc[0]}"
        assert shown["pwned"] is None and "pwned" not in shown["title"] and shown["tags"] == 0
        assert browser.errors(session) == []
    finally:
        browser.close()
