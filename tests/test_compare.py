"""A comparison report of real H200 runs: kernels matched by what they do, every chart with the
baseline, arrows and colours by each figure's better direction, per token, phase-filtered shares."""
from __future__ import annotations

import pytest

from reports import html as report
from reports.compare import kernel_baseline_time, kernel_changes, missing_tokens, tokens_per_phase
from tests.cli import smlens
from tests.conftest import DATA, TARGETED_SHAPES
from tests.report_cases import llama_comparison, views_input
from tests.test_html_report import Page, figures_of

RUNS = DATA / "h200_runs"


@pytest.fixture(scope="module")
def batches():
    """Llama-3.1-8B at batch 1 (baseline) and batch 8, prompt 512: their NVTX ranges carry shapes."""
    b1 = views_input(RUNS / "llama-3.1-8b-b1-p512.csv.gz", None, {"id": "b1", "name": "llama-b1"})
    b8 = views_input(RUNS / "llama-3.1-8b-b8-p512.csv.gz", None, {"id": "b8", "name": "llama-b8"})
    return b1, b8


def test_kernels_match_by_role_family_and_weights_not_by_tokens(batches):
    b1, b8 = batches
    changes = kernel_changes(b8.kernels, b1.kernels)
    assert set(changes["status"]) == {"matched"} and len(changes) == 30  # same model: nothing added
    qkv = changes[(changes["phase"] == "decode") & (changes["role"] == "qkv_proj")
                  & (changes["kernel"] == "cublaslt_nvjet")].iloc[0]
    assert qkv["weights"] == "N=6144 K=4096" and (qkv["tokens_base"], qkv["tokens"]) == ("1", "8")
    assert qkv["change_pct"] == pytest.approx(100 * (qkv["time_ns"] / qkv["time_ns_base"] - 1))


def test_other_models_show_their_kernels_added_and_removed():
    """Llama-3.1-8B decode (decode12) against the smaller targeted model: other weights, other keys."""
    current = views_input(DATA / "decode12_raw.csv", None, {"id": "d"})
    baseline = views_input(DATA / "targeted_raw.csv", TARGETED_SHAPES, {"id": "t"})
    changes = kernel_changes(current.kernels, baseline.kernels)
    counts = changes["status"].value_counts().to_dict()
    assert counts == {"removed": 30, "added": 6, "matched": 4}
    added = changes[changes["status"] == "added"]
    assert {"N=28672 K=4096", "N=6144 K=4096"} <= set(added["weights"])
    matched = set(changes.loc[changes["status"] == "matched", "kernel"])
    assert "cudnn_sdpa" in matched  # decode attention: same heads and head size in both
    base_time = kernel_baseline_time(current.kernels, baseline.kernels)  # per launch, matched ones only
    assert set(current.kernels.loc[base_time.notna(), "role"]) == {"attention", "elementwise"}


def test_tokens_per_phase_from_the_gemms_else_the_tags(batches):
    _, b8 = batches
    assert tokens_per_phase(b8.kernels, {}) == {"cold_prefill": (4096.0, "the M of its GEMMs"),
                                                "warm_prefill": (4096.0, "the M of its GEMMs"),
                                                "decode": (8.0, "the M of its GEMMs")}
    unshaped = b8.kernels.assign(shape_m=float("nan"))
    assert missing_tokens(unshaped, tokens_per_phase(unshaped, {})) == ["cold_prefill", "warm_prefill", "decode"]
    tagged = tokens_per_phase(unshaped, {"tags": '{"batch": "8", "prompt": "512"}'})
    assert tagged["decode"] == (8.0, "the run's batch tag") and tagged["cold_prefill"][0] == 4096.0


def test_every_chart_has_the_baseline_and_the_title_names_both_runs():
    text = llama_comparison()
    figures = figures_of(text)
    assert len(figures) >= 7
    for name, figure in figures.items():
        assert any(str(t.get("name", "")).startswith("baseline") for t in figure["data"]), name
    page = Page(text)
    assert "smlens report: llama-b8 against llama-b1" in "".join(page.text)
    assert "changes" in page.sections  # the kernel matching
    kernels = page.table("kernels")
    assert "\u0394 time" in kernels.columns


def test_per_token_puts_batch_8_and_batch_1_on_equal_terms(batches):
    b1, b8 = batches
    t1, t8 = tokens_per_phase(b1.kernels, b1.run), tokens_per_phase(b8.kernels, b8.run)
    text = report.render_report(b8, b1, tokens=t8, base_tokens=t1)
    page = Page(text)
    assert "per token: times, bytes and FLOPs divided by the tokens each phase processed" in "".join(page.text)
    row = page.raw_row("v1", 0, phase="decode", role="qkv_proj")
    groups = b8.groups.set_index(["phase", "role"])
    per_token = groups.loc[("decode", "qkv_proj"), "time_ns"] / 8
    assert row["time per token"][0].startswith(report.fmt_time_ns(per_token))
    # batch 8 reads the weights once for 8 tokens: far less time per token than batch 1
    base = b1.groups.set_index(["phase", "role"]).loc[("decode", "qkv_proj"), "time_ns"]
    assert per_token < base / 4
    assert "\u25bc" in row["time per token"][0] and "class=d good" in row["time per token"][1]


def test_a_phase_filtered_report_gives_shares_of_that_phase():
    data = views_input(DATA / "targeted_raw.csv", TARGETED_SHAPES, {"id": "t", "name": "t"})
    page = Page(report.render_report(data, phase="decode"))
    gap = page.table("gap")
    roles = gap[gap["role"] != "all"]
    assert sum(float(s.rstrip(" %")) for s in roles["share"]) == pytest.approx(100, abs=0.5)
    assert gap.loc[gap["role"] == "all", "share"].iloc[0] == "100 %"
    assert "time shares are of decode's kernel time (817 µs)" in "".join(page.text)


def test_report_per_token_on_the_command_line(tmp_path):
    store = tmp_path / "s"
    for run in ("llama-3.1-8b-b1-p512", "llama-3.1-8b-b8-p512"):
        code, _, err = smlens("ingest", RUNS / f"{run}.csv.gz", "--store", store, "--name", run)
        assert code == 0, err
    code, _, err = smlens("ingest", DATA / "sections_raw.csv", "--store", store, "--name", "sections")
    assert code == 0 and "GEMM kernel(s) have no problem shape" in err and "--shapes FILE" in err
    out = tmp_path / "r.html"
    code, _, err = smlens("report", "llama-3.1-8b-b8-p512", "--baseline", "llama-3.1-8b-b1-p512",
                          "--per-token", "--store", store, "-o", out)
    assert code == 0, err
    assert "time per token" in out.read_text(encoding="utf-8")
    code, _, err = smlens("report", "sections", "--per-token", "--store", store, "-o", tmp_path / "x.html")
    assert code == 2 and err.startswith("smlens: --per-token: run ") and err.count("\n") == 1
    assert "--shapes FILE" in err and not (tmp_path / "x.html").exists()
