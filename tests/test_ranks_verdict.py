"""The verdict of a tensor-parallel run, on the real 2 x H200 capture (tests/data/h200_tp, Llama-3.1-8B
TP 2, batch 8): the time a rank waits at an all-reduce for the other is shown apart and left out of
the phase shares, exposed communication is an opportunity, and a phase and role is one opportunity
however many ranks ran it (issue 29 item 2)."""
from __future__ import annotations

import math

import pytest

from reports.verdict_text import group_text, summary_text, verdict_document, waiting_text
from tests.conftest import DATA
from tests.report_cases import views_input
from views.registry import compute_views
from views.verdict import verdict

TP = DATA / "h200_tp"


@pytest.fixture(scope="module")
def result():
    from profiler.ingest.capture import read_capture

    return compute_views(read_capture(TP / "llama-3.1-8b-tp2-b8-p512.csv.gz").kernels)


@pytest.fixture(scope="module")
def judged(result):
    return verdict(result)


def test_waiting_for_the_other_rank_is_apart_and_out_of_the_shares(result, judged):
    """Cold prefill read 67.6 % of the workload next to warm prefill's 16.4 % with nearly equal
    kernel time: its share held 11.7 ms of rank 0 waiting at the all-reduce for rank 1 to start.
    Without the waits the two prefill phases weigh about the same, as their kernels do."""
    comm = result.communication
    waits = {(p, int(r)): w for p, r, w in zip(comm["phase"], comm["rank"], comm["comm_wait_ns"]) if w >= 1_000}
    assert waits[("cold_prefill", 0)] == pytest.approx(11.69e6, rel=1e-3)
    assert judged.waiting is not None
    assert judged.waiting.time_ns == pytest.approx(sum(waits.values()), rel=1e-9)
    assert "cold_prefill rank 0 11.7 ms" in waiting_text(judged.waiting)
    phases = {p.phase: p for p in judged.phases}
    groups = result.groups[result.groups["role"] != "all"]
    for name, phase in phases.items():
        whole = groups.loc[groups["phase"] == name, "time_ns"].sum()
        assert phase.time_ns == pytest.approx(whole - sum(w for (p, _), w in waits.items() if p == name), rel=1e-9)
    assert sum(p.share_pct for p in judged.phases) == pytest.approx(100)
    cold, warm = phases["cold_prefill"], phases["warm_prefill"]
    assert abs(cold.share_pct - warm.share_pct) < 5 and 40 < cold.share_pct < 50
    assert verdict_document(judged)["waiting"]["time_ns"] == pytest.approx(judged.waiting.time_ns)


def test_exposed_communication_is_an_opportunity(result, judged):
    """The all-reduces run on the compute stream, which waits for them (exposed_comm_ns = comm_ns):
    overlapping them would save their transfer. Communication was never an opportunity."""
    comm = result.communication.set_index(["phase", "rank"])
    found = {g.phase: g for g in judged.opportunities if g.role == "allreduce"}
    assert set(found) >= {"cold_prefill", "warm_prefill"}
    cold = found["cold_prefill"]
    transfer = [comm.loc[("cold_prefill", r), "comm_transfer_ns"] for r in (0, 1)]
    assert cold.saving_ns == pytest.approx(sum(transfer) / 2, rel=1e-6) and cold.ranks == 2
    assert cold.bound == "communication" and "exposed" in group_text(cold) and "160 GB/s" in group_text(cold)
    groups = {g.label: g for g in judged.groups}  # without an overlap nothing is won: the rule, not a constant
    assert groups["decode · allreduce r1"].saving_ns == pytest.approx(comm.loc[("decode", 1), "comm_ns"], rel=1e-6)


def test_rank_pairs_are_one_opportunity(judged):
    """Four of five opportunities were rank 0 / rank 1 duplicates of the same phase and role."""
    keys = [(g.phase, g.role) for g in judged.opportunities]
    assert len(keys) == len(set(keys)) == 5
    by_label = {g.label: g for g in judged.groups}
    elementwise = next(g for g in judged.opportunities if (g.phase, g.role) == ("cold_prefill", "elementwise"))
    ranks = [by_label[f"cold_prefill · elementwise r{r}"] for r in (0, 1)]
    assert elementwise.rank is None and elementwise.ranks == 2
    assert elementwise.saving_ns == pytest.approx(sum(g.saving_ns for g in ranks) / 2)
    assert elementwise.share_pct == pytest.approx(sum(g.share_pct for g in ranks))
    assert "per rank (2 ranks)" in group_text(elementwise)
    ordered = [g.saving_ns * g.ranks for g in judged.opportunities]
    assert ordered == sorted(ordered, reverse=True) and all(math.isfinite(v) for v in ordered)


def test_the_report_shows_the_wait_apart():
    from reports import html as report
    from tests.test_html_report import Page

    data = views_input(TP / "llama-3.1-8b-tp2-b8-p512.csv.gz", None, {"id": "tp"})
    page = Page(report.render_report(data))
    text = "".join(page.text).replace("\u00a0", " ")  # prose joins a number to its unit
    assert "Waiting at collectives for a slower rank: 14.5 ms" in text
    shares = dict(zip(page.table("verdict")["phase"], page.table("verdict")["share"]))
    assert shares["cold_prefill"] == "46 %" and shares["warm_prefill"] == "43.9 %"
    times = dict(zip(page.table("verdict")["phase"], page.table("verdict")["time"]))
    assert times["cold_prefill"] == "3.96 ms"  # compute and transfer of both ranks, no waiting


def test_the_terminal_shows_the_wait_apart(judged):
    from reports.terminal import verdict_parts

    texts = [str(getattr(p, "text", "")) for p in verdict_parts(judged, 200)]
    assert waiting_text(judged.waiting) in texts
    assert texts.index(waiting_text(judged.waiting)) > texts.index(summary_text(judged))
