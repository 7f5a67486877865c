"""`smlens views` over a store holding the real H200 captures, and the terminal printer."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from reports.verdict_text import group_text
from reports.formatting import number_text
from reports.terminal import print_views, short_name
from tests.cli import smlens
from tests.conftest import DATA
from views.registry import compute_views

SHAPES = Path(__file__).parents[1] / "profiler" / "data" / "h200_shapes.txt"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("views") / "store"
    for file, name in (("targeted_raw.csv", "targeted"), ("sections_raw.csv", "sections")):
        code, _, err = smlens("ingest", DATA / file, "--store", path, "--name", name, "--shapes", SHAPES)
        assert code == 0, err
    return path


def test_table_starts_with_the_gap_then_each_view(store):
    code, out, err = smlens("views", "targeted", "--store", store)
    assert code == 0, err
    assert out.index("Verdict") < out.index("The gap") < out.index("Validations") \
        < out.index("V1 Time and SM activity") < out.index("V8 Kernel selection")
    assert "1. decode · elementwise: up to 279 µs to win" in out  # the first opportunity
    assert "Setup: 22 kernels outside any phase range" in out
    words = " ".join(out.split())
    assert ("NVIDIA H200: CC 9.0, 132 SMs (capture: launch__sm_count), max clock 1.98 GHz (capture: device__attribute_max_gpu_frequency_khz), DRAM peak 4.81 TB/s (capture: device__attribute_memory_clock_rate x bus width)") in words
    assert "Capture: SM clock 1.96 GHz measured, 99 % of its 1.98 GHz maximum: clocks not locked" in words
    # the roles no role range named (the capture's norms and copies) are marked as guessed
    assert "  elementwise?" in out and "  qkv_proj?" not in out
    words = " ".join(out.split())  # the terminal wraps long cells
    # the one V6 failure is shown with its discrepancy
    assert "stall reasons add to 23.42 warps per issue, ncu counts 26.31 (-11.0 %)" in words
    assert "split-K 3" in words and "* cublaslt_nvjet" in words


def test_filters_and_view_choice(store):
    code, out, err = smlens("views", "targeted", "--store", store, "--phase", "decode", "--role", "qkv_proj",
                            "--view", "V3", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert len(document["kernels"]) == 8
    assert {k["validations"]["V3"] for k in document["kernels"]} == {"pass"}
    assert all(set(k["validations"]) == {"V3"} for k in document["kernels"])
    assert {k["fill"] for k in document["kernels"]} == {0.5}
    gap = [g for g in document["gap"] if g["role"] == "qkv_proj"][0]
    assert gap["sm_throughput_pct"] == pytest.approx(6.0, abs=0.1)  # the gap is there with any view


def test_kernel_regex_and_csv(store):
    code, out, err = smlens("views", "targeted", "--store", store, "--kernel", "^nvjet_.*splitK", "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 8
    assert {r["validation_V3"] for r in rows} == {"pass"}
    assert {r["split_k_factor"] for r in rows} == {"3.0"}
    assert rows[0]["nvtx_stack"] == "<default domain>:decode > <default domain>:down_proj"


def test_sections_run_prints_na_not_zero(store):
    code, out, err = smlens("views", "sections", "--store", store, "--format", "json")
    assert code == 0, err
    kernel = json.loads(out)["kernels"][45]
    assert kernel["tensor_ops"] is None and kernel["mma_path"] is None
    # the store reads the columns every way of a quantity needs: SpeedOfLight's elapsed cycles
    assert kernel["sm_active_pct"] == pytest.approx(27.28, abs=0.01)
    assert kernel["sources"]["sm_active_pct"] == "sm__cycles_active.avg; gpc__cycles_elapsed.max"
    code, out, _ = smlens("views", "sections", "--store", store, "--view", "V2")
    assert code == 0
    v2 = out[out.index("V2 Tensor-pipe utilization"):]
    assert "n/a" in v2 and " 0 " not in v2.split("\n")[4]


@pytest.mark.parametrize("args, message", [
    (["--view", "V9"], "unknown view 'V9'"),
    (["--kernel", "["], "is not a regular expression"),
    (["--phase", "prefil"], "--phase prefil: expected one of"),
    (["--role", "mlp"], "--role mlp: expected one of"),
    (["--kernel", "no_such_kernel"], "has no kernels for"),
    (["no_such_run"], "no run 'no_such_run'"),
])
def test_bad_input_is_one_line_and_exit_2(store, args, message):
    code, out, err = smlens("views", *args, "--store", store)
    assert code == 2
    assert err.startswith("smlens: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in out + err


def test_no_store_is_exit_2(tmp_path):
    code, _, err = smlens("views", "--store", tmp_path / "nothing")
    assert code == 2 and "no smlens store here" in err


def test_printer_fits_80_columns_and_cuts_nothing(targeted_capture):
    result = compute_views(targeted_capture.kernels)
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": "targeted", "id": "abc"}, console=console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.startswith("  qkv_proj") for line in lines)
    assert "\u2026" not in text  # no cell, heading or name is cut to fit
    # a table too wide for 80 columns goes on below, the phase and role repeated
    assert "The gap (continued)" in text and "  gate_up_proj" in text and "long_scoreboard" in text
    # every column of the gap has its heading and its one-line definition
    for heading in ("time %", "SM throughput %", "tensor pipe %", "SM coverage %", "top stall", "useful MMA share"):
        assert f"{heading}: " in text, heading


def test_piped_output_is_as_wide_as_its_tables(store):
    """Not a terminal (a pipe, CliRunner): no table is split or cut to 80 columns."""
    code, out, err = smlens("views", "targeted", "--store", store, "--view", "V6")
    assert code == 0, err
    table = out[out.index("\nV6 Stall signature\n"):].splitlines()
    assert "(continued)" not in out
    header = next(line for line in table if line.startswith("phase / role")).split()
    assert header[-1] == "checks" and "stall" in header  # headings wrap between words, never cut
    down = next(line for line in table if line.startswith("  down_proj"))
    assert down.split()[-1] == "8/0/0" and max(len(line) for line in out.splitlines()) > 80


def test_number_and_name_formatting():
    assert number_text(float("nan")) == "n/a" and number_text(None) == "n/a" and number_text(0.0) == "0"
    assert number_text(4795.2) == "4,795" and number_text(0.4889) == "0.489"
    assert number_text(float("inf"), missing="\u2014") == "\u2014" and number_text(12.5, unit=" %") == "12.5 %"
    name = ("void at::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, 1>(int, T2, const T1 *)")
    assert short_name(name) == "at::vectorized_layer_norm_kernel"
    assert short_name("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"


@pytest.mark.parametrize("role, roles", [(None, ["qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj",
                                                 "elementwise"]), ("attention", ["attention"])])
def test_a_phase_filter_gives_shares_of_that_phase_in_every_output(store, tmp_path, monkeypatch, role, roles):
    """`--phase decode` (with or without --role): the gap's time %, the verdict's shares, the JSON
    and the report all share decode's whole time (817 µs of the targeted capture's 2.67 ms)."""
    from tests.test_html_report import Page

    extra = ["--role", role] if role else []
    code, out, err = smlens("views", "targeted", "--store", store, "--phase", "decode", *extra, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["time_shares_of"]["phase_time_ns"] == {"decode": 817_376}
    gap = {g["role"]: g["time_share_pct"] for g in document["gap"]}
    decode_elementwise = 100 * 285_664 / 817_376  # 34.95 %: its time over decode's
    if role is None:
        assert gap["all"] == pytest.approx(100) and gap["elementwise"] == pytest.approx(decode_elementwise)
    assert gap["attention"] == pytest.approx(10.24, abs=0.01)
    verdict = document["verdict"]
    assert {g["role"]: g["share_pct"] for g in verdict["groups"]} == {r: pytest.approx(gap[r]) for r in roles}
    assert verdict["phases"][0]["share_pct"] == pytest.approx(gap["all"] if role is None else gap["attention"])

    monkeypatch.setenv("COLUMNS", "120")
    code, out, err = smlens("views", "targeted", "--store", store, "--phase", "decode", *extra)
    assert code == 0, err
    assert "time shares are of decode's kernel time (817.4 µs)" in out
    assert re.search(r"^  attention +10\.2 ", out, re.M)
    if role is None:
        assert re.search(r"^  all +100\.0 ", out, re.M) and re.search(r"^  elementwise\? +34\.9 ", out, re.M)
        assert "(100 % of the workload)" in out and "286 µs (35 % of the workload)" in out

    report = tmp_path / "decode.html"
    code, _, err = smlens("report", "targeted", "--store", store, "--phase", "decode", *extra, "-o", report)
    assert code == 0, err
    page = Page(report.read_text())
    shares = dict(zip(page.table("gap")["role"], page.table("gap")["share"]))
    assert shares["attention"] == "10.2 %" and page.table("verdict")["share"].iloc[0] == \
        ("100 %" if role is None else "10.2 %")
    if role is None:
        assert shares["all"] == "100 %" and shares["elementwise"] == "34.9 %"


def test_a_number_and_its_unit_stay_on_one_line_at_80_columns(targeted_capture):
    """The verdict, legends and reasons wrap between words, never between `2.5` and `%` (rich alone
    breaks there: `DRAM at 2.5` / `%). 34 kernels`, `371` / `µs` on the bundled capture)."""
    from views.verdict import verdict

    result = compute_views(targeted_capture.kernels)
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": "targeted"}, console=console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    unit = re.compile(r"(%|[µmn]s|s|[kMGT]?B(/s)?|GHz|[kMGT])(?![\w/])")
    split = [(a, b) for a, b in zip(lines, lines[1:]) if re.search(r"\d$", a) and unit.match(b.lstrip())]
    assert split == []
    text = "\n".join(lines)
    assert re.search(r"\(busiest: DRAM at\n2\.5 %\)\. 34 kernels averaging 8\.4 µs", text)
    assert re.search(r"^371 µs, 14 % of the captured time; left out of the shares above\.$", text, re.M)
    # the sentences themselves keep plain spaces (the JSON's and the report's)
    assert "DRAM at 2.5 %" in group_text(verdict(result).opportunities[0])
