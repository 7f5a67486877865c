"""One kernel in depth on real H200 runs: every figure by view with the counter that gave it and
that counter's raw value, the validations, name, NVTX range, shapes and launch; against a baseline
the matched launch's values and the change; the terminal page and the report's packed data."""
from __future__ import annotations

import json

import pytest
from rich.console import Console

from profiler.ingest.capture import read_capture
from reports.kernel_page import KERNEL_JS, anchor, kernel_data, kernel_sections, print_kernel, unpack
from tests.conftest import DATA
from views import registry
from views.kernel_detail import kernel_detail, kernel_details, position
from views.registry import compute_views

RUNS = DATA / "h200_runs"


@pytest.fixture(scope="module")
def llama():
    """Llama-3.1-8B at batch 8 and batch 1 (prompt 512): capture and views' kernels of each."""
    out = {}
    for batch in ("b8", "b1"):
        capture = read_capture(RUNS / f"llama-3.1-8b-{batch}-p512.csv.gz").kernels
        out[batch] = (capture, compute_views(capture).kernels)
    return out


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
    (capture8, b8), (capture1, b1) = llama["b8"], llama["b1"]
    at, base_at = _rows(b8, "decode", "qkv_proj", "gemm")[0], _rows(b1, "decode", "qkv_proj", "gemm")[0]
    detail = kernel_detail(b8, at, capture8, b1, capture1)
    assert detail.baseline["id"] == b1["kernel_id"].iloc[base_at]
    assert detail.baseline["shapes"] == {"M": 1, "N": 6144, "K": 4096}
    time = _figure(detail, "time_ns")
    assert time.base_value == b1["time_ns"].iloc[base_at]
    assert time.change_pct == pytest.approx(100 * (time.value / time.base_value - 1))
    fill = _figure(detail, "fill")
    assert fill.value == pytest.approx(1.0) and fill.base_value == pytest.approx(1 / 8)
    assert fill.change_pct == pytest.approx(700)


def test_a_launch_is_matched_in_its_own_range_and_order(llama):
    """Decode's at::elementwise_kernel: at batch 8 five launches in rope_kv_cache and two in
    silu_mul, at batch 1 four in rope_kv_cache (its silu_mul runs a vectorized kernel). Each rope
    launch gets the rope launch of its order (the fifth the last), silu_mul's none."""
    (capture8, b8), (capture1, b1) = llama["b8"], llama["b1"]
    details = kernel_details(b8, capture8, b1, capture1)
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
    assert kernel_detail(b8, elementwise[2], capture8, b1, capture1).baseline == details[elementwise[2]].baseline


def test_a_kernel_the_baseline_lacks_has_no_baseline(llama):
    capture, kernels = llama["b8"]
    other = read_capture(DATA / "targeted_raw.csv").kernels
    detail = kernel_detail(kernels, _rows(kernels, "decode", "qkv_proj", "gemm")[0], capture,
                           compute_views(other).kernels, other)
    assert detail.baseline is None and _figure(detail, "time_ns").base_value is None


def test_position_by_id(llama):
    _, kernels = llama["b8"]
    last = kernels["kernel_id"].iloc[-1]
    assert position(kernels, str(last)) == len(kernels) - 1 and position(kernels, "no such") is None


def test_the_terminal_page_fits_80_columns_and_cuts_no_name(llama):
    (capture8, b8), (capture1, b1) = llama["b8"], llama["b1"]
    at = _rows(b8, "decode", "elementwise", "elementwise")[0]
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    print_kernel(kernel_detail(b8, at, capture8, b1, capture1), console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "".join(b8["kernel_name"].iloc[at].split()) in "".join(text.split())  # wrapped, whole
    for view in registry.VIEWS:
        assert any(line.startswith(f"{view} {registry.title(view)}: ") for line in lines)
    assert "baseline" in lines[0] or any(line.startswith("baseline: kernel") for line in lines)
    time = b8["time_ns"].iloc[at]
    assert f"gpu__time_duration.sum ({time:,.0f})" in " ".join(text.split())


def test_the_reports_data_names_every_figure_of_every_kernel(llama):
    (capture8, b8), (capture1, b1) = llama["b8"], llama["b1"]
    details = kernel_details(b8, capture8, b1, capture1)
    html = kernel_sections(details)
    assert html.count('class="kpage" hidden') == len(b8)
    assert f'id="{anchor(b8["kernel_id"].iloc[0])}"' in html
    packed = html.split('id="smlens-kernels">', 1)[1].split("</script>", 1)[0]
    data = unpack(packed)
    assert data == json.loads(json.dumps(kernel_data(details)))
    strings = data["strings"]
    figures = sum(len(v[2]) for v in data["views"])
    at = _rows(b8, "decode", "qkv_proj", "gemm")[0]
    record = data["kernels"][str(b8["kernel_id"].iloc[at])]
    assert len(record["v"]) == len(record["b"]) == len(record["d"]) == figures
    assert strings[record["h"][1]] == f"name: {b8['kernel_name'].iloc[at]}"
    time_at = data["views"][0][2][0]
    assert strings[data["figures"][time_at]] == "time"
    assert strings[data["sources"][record["s"]][time_at]] == "gpu__time_duration.sum"
    counters = {strings[int(k)]: strings[v] for k, v in record["c"].items()}  # JSON keys are texts
    assert counters["gpu__time_duration.sum"] == f"{b8['time_ns'].iloc[at]:,.0f}"
    # the page's script reads these keys, and writes texts only through textContent
    for key in ("strings", "views", "figures", "sources", "named", ".h", ".v", ".s", ".st", ".c", ".b", ".d"):
        assert key.lstrip(".") in KERNEL_JS
    assert "innerHTML" not in KERNEL_JS
