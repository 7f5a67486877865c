"""The report's tensor-parallel section, on the real 2 x H200 captures (tests/data/h200_tp): the
numbers in its tables are the views' (views/ranks.py), its headings the declared figures'
(views.registry.rank_figures), its lead the run's tags; against a baseline each figure shows the
baseline's value of the same phase and rank; a single-GPU run has no such section."""
from __future__ import annotations

import json

import pytest

from reports import html as report
from reports.html_tables import figure_format
from tests.conftest import DATA
from tests.report_cases import views_input
from tests.test_html_report import Page
from views import registry

TP = DATA / "h200_tp"
TAGS = json.dumps({"tp": "2", "rank_source": "nvtx", "comm_time": "CUDA events around each all-reduce"})


@pytest.fixture(scope="module")
def b8():
    return views_input(TP / "llama-3.1-8b-tp2-b8-p512.csv.gz", None, {"id": "b8", "name": "tp-b8", "tags": TAGS})


@pytest.fixture(scope="module")
def b1():
    return views_input(TP / "llama-3.1-8b-tp2-b1-p512.csv.gz", None, {"id": "b1", "name": "tp-b1"})


@pytest.fixture(scope="module")
def page(b8):
    return Page(report.render_report(b8))


@pytest.fixture(scope="module")
def against_b1(b8, b1):
    """b8's report against b1 (10 s to render), for the tests that read it."""
    return report.render_report(b8, b1)


def _rows(page: Page, index: int) -> list[dict]:
    frame = page.table("tp", index)
    return frame.to_dict("records")


def _key(value) -> str:
    return value if isinstance(value, str) else f"rank {int(value)}"


def _assert_table_is_the_views(page: Page, index: int, frame, keys: tuple, columns: tuple):
    """Every figure cell of the table is the views' value, formatted by its declared unit, under its
    declared label; one row per row of the views' frame, in its order."""
    declared = registry.rank_figures()
    shown = _rows(page, index)
    assert len(shown) == len(frame)
    for cells, (_, row) in zip(shown, frame.iterrows()):
        assert [cells[{"after": "call"}.get(k, k)] for k in keys] == [_key(row[k]) for k in keys]
        for column in columns:
            figure = declared[column]
            assert cells[figure.label] == figure_format(figure)(row[column]), (column, cells)


def test_communication_per_phase_and_rank_is_the_views(page, b8):
    comm = b8.communication
    _assert_table_is_the_views(page, 0, comm, ("phase", "rank"),
                               ("compute_ns", "comm_ns", "comm_share_pct", "exposed_comm_ns",
                                "comm_wait_ns", "comm_transfer_ns", "comm_bytes", "bus_gbps", "collectives"))
    rows = {(r["phase"], r["rank"]): r for r in _rows(page, 0)}
    # the measured values of the batch-8 Llama-3.1-8B capture (tests/data/h200_tp/PROVENANCE.md)
    assert rows[("warm_prefill", "rank 0")]["comm"] == "305 µs"
    assert rows[("warm_prefill", "rank 0")]["bus"] == "220 GB/s"
    assert rows[("decode", "rank 0")]["wait"] == "2.84 ms" and rows[("decode", "rank 1")]["wait"] == "0 ns"
    assert rows[("cold_prefill", "rank 0")]["comm %"] == "88.6 %"


def test_imbalance_names_the_slowest_and_fastest_rank(page, b8):
    _assert_table_is_the_views(page, 1, b8.imbalance, ("phase", "role"),
                               ("min_rank_time_ns", "max_rank_time_ns", "mean_rank_time_ns", "imbalance"))
    rows = {(r["phase"], r["role"]): r for r in _rows(page, 1)}
    allreduce = rows[("cold_prefill", "allreduce")]
    assert (allreduce["slowest rank"], allreduce["fastest rank"], allreduce["max/mean"]) == ("rank 0", "rank 1", "1.93")
    assert (allreduce["slowest"], allreduce["fastest"]) == ("12.1 ms", "419 µs")
    assert rows[("decode", "gate_up_proj")]["slowest rank"] == "rank 1"


def test_collectives_table_op_bytes_time_bus_and_how_timed(page, b8):
    _assert_table_is_the_views(page, 2, b8.collectives, ("phase", "role", "after", "rank"),
                               ("comm_bytes", "comm_samples", "comm_ns", "comm_wait_ns", "comm_transfer_ns",
                                "bus_gbps"))
    rows = _rows(page, 2)
    assert len(rows) == 12 and {r["role"] for r in rows} == {"allreduce"}
    assert {r["timed by"] for r in rows} == {"cuda_events"}
    warm = next(r for r in rows if (r["phase"], r["call"], r["rank"]) == ("warm_prefill", "o_proj", "rank 1"))
    # 32 MiB of bf16 per all-reduce; the committed rows are medians of 2 calls
    assert (warm["bytes"], warm["timed"], warm["comm"], warm["wait"]) == ("33.6 MB", "2", "178 µs", "15.7 µs")


def test_headings_and_lead_come_from_the_declarations_and_tags(page):
    declared = registry.rank_figures()
    headings = [text for text, _ in page.sections["tp"]["tables"][0][0]]
    assert headings == ["phase", "rank"] + [declared[c].label for c in
                                            ("compute_ns", "comm_ns", "comm_share_pct", "exposed_comm_ns",
                                             "comm_wait_ns", "comm_transfer_ns", "comm_bytes", "bus_gbps",
                                             "collectives")]
    assert ("th", {"title": declared["comm_wait_ns"].definition}) in page.tags  # each heading's tooltip
    text = "".join(page.text)
    assert "communication: CUDA events around each all-reduce" in text and "ranks found from: nvtx" in text
    assert ("a", {"href": "#tp"}) in page.tags


def test_against_a_baseline_each_figure_shows_the_baselines_same_rank(against_b1, b1):
    page = Page(against_b1)
    base = b1.communication.set_index(["phase", "rank"])
    cells = page.raw_row("tp", 0, phase="decode", rank="rank 1")
    assert f"baseline {figure_format(registry.rank_figures()['compute_ns'])(base.loc[('decode', 1), 'compute_ns'])}" \
        in cells["compute"][1]
    collective = page.raw_row("tp", 2, phase="warm_prefill", call="o_proj", rank="rank 0")
    assert "baseline 4.19 MB" in collective["bytes"][1]  # batch 1: 512 tokens x 4096 x bf16
    # the gap's rows are per rank too, each against the baseline's row of the same rank
    gap = page.table("gap")
    assert {"qkv_proj r0", "qkv_proj r1"} <= set(gap["role"])


def test_filters_keep_the_phase_and_drop_per_phase_totals_for_a_role(b8):
    page = Page(report.render_report(b8, phase="decode"))
    assert {r["phase"] for i in (0, 1, 2) for r in _rows(page, i)} == {"decode"}
    page = Page(report.render_report(b8, role="allreduce"))
    headings = [[text for text, _ in table[0]] for table in page.sections["tp"]["tables"]]
    assert "compute" not in headings[0] and len(headings) == 2  # imbalance and collectives remain


def test_a_single_gpu_run_has_no_tensor_parallel_section():
    data = views_input(DATA / "h200_runs" / "llama-3.1-8b-b8-p512.csv.gz", None, {"id": "one"})
    page = Page(report.render_report(data))
    assert "tp" not in page.sections and ("a", {"href": "#tp"}) not in page.tags


def test_the_chart_stacks_compute_transfer_and_wait_per_rank(against_b1, b8, b1):
    from tests.test_html_report import figures_of
    figure = figures_of(against_b1)["fig-tp"]
    comm = b8.communication
    labels = [f"{p} \u00b7 rank {r}" for p, r in zip(comm["phase"], comm["rank"])]
    declared = registry.rank_figures()
    for column in ("compute_ns", "comm_transfer_ns", "comm_wait_ns"):
        trace = next(t for t in figure["data"] if t["name"] == declared[column].label)
        assert trace["x"] == labels and trace["y"] == pytest.approx((comm[column] / 1e3).tolist(), rel=1e-4)
    assert figure["layout"]["barmode"] == "stack"
    baseline = next(t for t in figure["data"] if t["name"].startswith("baseline"))
    base = b1.communication
    assert baseline["y"] == pytest.approx(((base["compute_ns"] + base["comm_ns"]) / 1e3).tolist(), rel=1e-4)
