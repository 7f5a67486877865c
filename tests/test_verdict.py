"""The verdict (views/verdict.py) over the real H200 captures: each phase's share and bound, the
opportunities ranked by time x headroom, the setup kernels kept apart, and why when it cannot say."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from reports.verdict_text import group_text, hint_text, missing_text, summary_text, verdict_document
from tests.captures import kernels_of, views_of
from tests.cli import smlens
from tests.conftest import DATA
from views.registry import compute_views
from views.verdict import COVERAGE, LATENCY_BELOW_PCT, SHORT, STALL, verdict


@pytest.fixture(scope="module")
def result(targeted_capture):
    return compute_views(targeted_capture.kernels)


@pytest.fixture(scope="module")
def judged(result):
    return verdict(result)


def _group(judged, phase, role):
    return next(g for g in judged.groups if (g.phase, g.role) == (phase, role))


def test_setup_kernels_are_shown_apart_and_left_out_of_the_shares(result, judged):
    setup = result.kernels[result.kernels["phase"] == "other"]
    assert judged.setup.kernels == len(setup) == 22  # the capture's random-init kernels
    assert judged.setup.run_share_pct == pytest.approx(100 * setup["time_ns"].sum() / result.kernels["time_ns"].sum())
    assert judged.setup.run_share_pct == pytest.approx(13.9, abs=0.05)
    assert [p.phase for p in judged.phases] == ["cold_prefill", "warm_prefill", "decode"]
    assert sum(p.share_pct for p in judged.phases) == pytest.approx(100)
    assert not any(g.phase == "other" for g in judged.groups + judged.opportunities)
    workload = result.kernels.loc[result.kernels["phase"] != "other", "time_ns"].sum()
    decode = result.kernels.loc[result.kernels["phase"] == "decode", "time_ns"].sum()
    assert judged.phases[2].share_pct == pytest.approx(100 * decode / workload)


def test_each_group_is_bound_by_the_unit_nearest_its_peak(result, judged):
    groups = result.groups.set_index(["phase", "role"])
    # decode gate_up streams its weights at 67.9 % of DRAM peak: memory-bound, not tensor headroom
    gate_up = _group(judged, "decode", "gate_up_proj")
    assert gate_up.bound == "memory" and gate_up.dram_pct == pytest.approx(67.94, abs=0.01)
    assert gate_up.dram_pct == groups.loc[("decode", "gate_up_proj"), "dram_pct"]
    # prefill gate_up keeps the tensor pipe 88.5 % busy; its headroom is against the useful part
    prefill = _group(judged, "cold_prefill", "gate_up_proj")
    assert prefill.bound == "tensor" and prefill.tensor_pct == pytest.approx(88.5, abs=0.01)
    # V3's useful share: the pipe's elapsed share at the device's best rate, times fill (wgmma: the
    # best rate, so within the ops-to-pipe agreement of the pipe's share x fill)
    fill = groups.loc[("cold_prefill", "gate_up_proj"), "fill"]
    assert prefill.useful_tensor_pct == groups.loc[("cold_prefill", "gate_up_proj"), "useful_tensor_pct"]
    assert prefill.useful_tensor_pct == pytest.approx(prefill.tensor_pct * fill, rel=1e-4)
    assert prefill.saving_ns == pytest.approx(prefill.time_ns * (1 - prefill.useful_tensor_pct / 100))
    # nothing near a peak: latency, with the busiest unit named
    elementwise = _group(judged, "decode", "elementwise")
    assert elementwise.bound == "latency" and elementwise.busiest == "memory"
    assert max(elementwise.dram_pct, elementwise.tensor_pct, elementwise.fp32_pct) < LATENCY_BELOW_PCT
    assert "34 kernels averaging 8.4 µs" in group_text(elementwise)


def test_the_verdict_holds_figures_and_the_report_words_them(result, judged):
    """views/verdict.py gives each hint as its kind and the figures it found (decode's 34
    elementwise kernels average 8.4 µs; their grids reach 69 % of the SMs; long scoreboard leads
    V6); reports/verdict_text.py words them, and the JSON carries those words."""
    groups = result.groups.set_index(["phase", "role"])
    elementwise = _group(judged, "decode", "elementwise")
    short, coverage, stall = elementwise.hints
    assert (short.kind, short.count) == (SHORT, 34) and short.value == pytest.approx(285_664 / 34)
    assert coverage.kind == COVERAGE and coverage.value == groups.loc[("decode", "elementwise"), "sm_coverage"]
    assert (stall.kind, stall.detail) == (STALL, "long_scoreboard")
    assert [hint_text(h) for h in elementwise.hints] == [
        "34 kernels averaging 8.4 µs: launch and ramp-up weigh (fuse them, or replay them as a CUDA graph)",
        "the grid reaches 69 % of the SMs (V5)", "warps wait most on long scoreboard (V6)"]
    (told,) = [g for g in verdict_document(judged)["groups"] if (g["phase"], g["role"]) == ("decode", "elementwise")]
    assert told["hints"] == [hint_text(h) for h in elementwise.hints] and told["text"] == group_text(elementwise)
    assert judged.missing_units == () and verdict_document(judged)["missing"] is None


def test_opportunities_are_ranked_by_time_times_headroom(judged):
    savings = [g.saving_ns for g in judged.opportunities]
    assert savings == sorted(savings, reverse=True) and len(savings) == 5
    everyone = sorted((g.saving_ns for g in judged.groups if math.isfinite(g.saving_ns)), reverse=True)
    assert savings == everyone[:5]
    top = judged.opportunities[0]
    assert (top.phase, top.role) == ("decode", "elementwise")
    assert top.saving_ns == pytest.approx(top.time_ns * (1 - top.busiest_pct / 100))
    assert group_text(top).startswith("decode · elementwise: up to 279 µs to win of its 286 µs")
    assert "decode takes the most time (36 % of the workload)" in summary_text(judged)
    assert "decode · elementwise, up to 279 µs, 12 % of the workload's time" in summary_text(judged)


def test_a_phase_is_named_for_the_bound_holding_most_of_its_time(judged):
    decode = judged.phases[2]
    assert decode.bound == "latency" and sum(decode.bounds.values()) == pytest.approx(100)
    assert decode.bounds["memory"] == pytest.approx(100 * _group(judged, "decode", "gate_up_proj").time_ns
                                                    / decode.time_ns)


def test_a_bound_a_view_declares_in_these_words_is_taken(result):
    declared = result.groups.assign(bound=["fp32"] * len(result.groups))
    judged = verdict(type("R", (), {"groups": declared, "kernels": result.kernels, "devices": result.devices}))
    assert {g.bound for g in judged.groups} == {"fp32"}
    # V7's own bound speaks these words (the largest of the group's DRAM, tensor and FP32 shares)
    # and is the verdict's
    assert set(result.groups["bound"].dropna()) == {"memory", "tensor", "latency"}
    own = verdict(result)
    for _, row in result.groups.iterrows():
        if row["phase"] != "other":
            assert _group(own, row["phase"], row["role"]).bound == row["bound"]
    assert _group(own, "cold_prefill", "down_proj").bound == "latency"


def test_without_the_counters_it_says_why_and_what_to_do():
    from profiler.ingest.capture import read_capture

    kernels = read_capture(DATA / "decode12_raw.csv").kernels
    kernels = kernels[[c for c in kernels.columns if "__" not in c or c == "gpu__time_duration.sum"]]
    judged = verdict(compute_views(kernels))
    why = missing_text(judged)
    assert why and "dram__throughput" in why and "profile with smlens" in why
    assert judged.opportunities == [] and all(g.bound is None for g in judged.groups)
    json.dumps(verdict_document(judged), allow_nan=False)  # NaN figures are null


def test_views_json_carries_the_verdict(tmp_path, judged):
    store = tmp_path / "store"
    code, _, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", store, "--name", "t",
                          "--shapes", DATA.parent.parent / "profiler" / "data" / "h200_shapes.txt")
    assert code == 0, err
    code, out, err = smlens("views", "t", "--store", store, "--format", "json")
    assert code == 0, err
    document = json.loads(out)["verdict"]
    assert document["summary"].startswith("decode takes the most time")
    assert [p["phase"] for p in document["phases"]] == ["cold_prefill", "warm_prefill", "decode"]
    assert document["setup"]["kernels"] == 22
    top = document["opportunities"][0]
    assert (top["phase"], top["role"], top["bound"]) == ("decode", "elementwise", "latency")
    assert document["missing"] is None


def test_the_reports_verdict_never_puts_a_number_and_its_unit_on_two_lines(judged):
    """In the HTML the verdict's sentences (table cells do not wrap) join each number to its unit
    with a no-break space, as a browser wraps at any other space; the words are the verdict's."""
    import html
    import re
    from reports.html_verdict import verdict_section
    section = verdict_section(judged)
    sentences = " ".join(re.findall(r"<(?:p|li)\b[^>]*>(.*?)</(?:p|li)>", section))
    first = group_text(judged.opportunities[0])  # "decode · elementwise: up to 279 µs to win ..."
    assert re.search(r"\d µs", first) and not re.search(r"\d [%µ]", sentences)
    assert re.search(r"\d\u00a0µs", sentences) and re.search(r"\d\u00a0%", sentences)
    shown = html.unescape(re.sub(r"<[^>]+>", "", sentences)).replace("\u00a0", " ")
    assert first.split(": ", 1)[1] in shown and summary_text(judged) in shown


def test_a_unit_not_measured_is_never_read_as_latency(judged):
    """`--set full` exported as a details page (the real full_details.csv.gz: the workload of
    targeted_raw.csv) has DRAM % but no tensor-pipe or FP32 counter. Its prefill gate_up GEMM runs
    the tensor pipe 88 % busy (targeted_raw.csv); from DRAM's 21 % alone it is not latency-bound,
    nor is the 79 % of its time that DRAM leaves idle a saving."""
    from profiler.ingest.capture import read_capture

    assert _group(judged, "warm_prefill", "gate_up_proj").bound == "tensor"
    full = verdict(compute_views(read_capture(DATA / "full_details.csv.gz").kernels))
    gemm = _group(full, "warm_prefill", "gate_up_proj")
    assert gemm.bound is None and gemm.busiest == "memory" and 15 < gemm.busiest_pct < 30
    assert math.isnan(gemm.saving_ns)
    assert "Bound unknown: the tensor pipe and the FP32 pipes not measured" in group_text(gemm)
    assert "latency" not in group_text(gemm).lower()
    # DRAM at 60 % or more bounds a group whatever the other units (V7's rule)
    assert _group(full, "decode", "gate_up_proj").bound == "memory"
    assert all(g.bound in (None, "memory") for g in full.groups)
    phases = {p.phase: p for p in full.phases}
    assert phases["warm_prefill"].bound is None and phases["warm_prefill"].bounds == {}
    # 15 % of decode's time is memory-bound, the rest unknown: decode is not "mostly memory-bound"
    assert phases["decode"].bound is None and 10 < phases["decode"].bounds["memory"] < 20
    assert "what bounds most of it is unknown (the tensor pipe and the FP32 pipes not measured)" in summary_text(full)
    assert all(o.bound == "memory" for o in full.opportunities)


# Every committed H200 capture: the verdict and the gap table name the same bound, V7's.
_CAPTURES = sorted(str(p.relative_to(DATA)) for d in ("h200_runs", "h200_hf", "h200_compiled", "h200_tp")
                   for p in (DATA / d).rglob("*.csv.gz"))


@pytest.mark.parametrize("name", _CAPTURES)
def test_the_verdict_and_the_gap_table_name_the_same_bound(name):
    """One rule, V7's: a group's bound is the bound holding the most of its kernels' time (never the
    group's averaged units against the floor: a batch-8 decode with 57 % of its time in GEMMs at
    79 % of the DRAM peak averages 51 % DRAM and read "latency 51 %" in the gap's phase row while
    the verdict said "memory"). Each group's bound and each phase's agree; a tensor-parallel run's
    gap phase rows are per rank, the verdict's phases over all ranks: there its groups agree."""
    from views.grouping import ALL

    try:
        kernels_of(DATA / name)
    except Exception as error:  # a capture ncu cut short may not read
        pytest.skip(f"{name} does not read: {error}")
    result = views_of(DATA / name)
    judged = verdict(result)
    gap = result.gap
    ranked = "rank" in gap.columns and gap["rank"].notna().any()

    def bound(value):
        return value if isinstance(value, str) else None

    rows = {(r["phase"], r["role"], None if not ranked or pd.isna(r["rank"]) else int(r["rank"])): bound(r["bound"])
            for _, r in gap.iterrows()}
    groups = [g for g in judged.groups if g.bound != "communication"]
    assert groups
    for g in groups:
        assert g.bound == rows[(g.phase, g.role, g.rank)], g.label
    if not ranked:
        assert judged.phases
        for p in judged.phases:
            assert p.bound == rows[(p.phase, ALL, None)], p.phase
            # the shares the verdict prints are the gap row's
            row = gap[(gap["phase"] == p.phase) & (gap["role"] == ALL)].iloc[0]
            if p.bound is not None:
                assert p.bound_share_pct == pytest.approx(100 * row["bound_time_share"], abs=1e-6)
