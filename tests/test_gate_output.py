"""What `smlens gate` writes: JUnit XML that validates, Markdown that renders as tables, a terminal
table that fits, JSON with nulls for missing values."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from reports.gate import Run, cannot_judge, run_gate
from reports.gate_output import render_table, short_kernel_name, to_junit, to_markdown
from tests.gate_cases import capture_figures

XSD = Path(__file__).parent / "data" / "junit.xsd"


@pytest.fixture(scope="module")
def targeted(targeted_capture):
    from views.registry import compute_views

    return compute_views(targeted_capture.kernels).kernels


@pytest.fixture(scope="module")
def sections(sections_capture):
    from views.registry import compute_views

    return compute_views(sections_capture.kernels).kernels


@pytest.fixture(scope="module")
def decode12(data_dir):
    return capture_figures(data_dir / "decode12_raw.csv")


@pytest.fixture(scope="module")
def results(targeted, sections, decode12):
    """One result of each verdict, from real captures."""
    decode = targeted[targeted["phase"] == "decode"]
    return {
        "pass": run_gate([Run("base", targeted)], [Run("head", targeted)]),
        "regression": run_gate([Run("small", decode)], [Run("llama8b", decode12)]),
        "could not judge": run_gate([Run("targeted", targeted)], [Run("sections", sections)]),
        "broken input": cannot_judge("--current nope.csv: no such file", ["base.csv"], ["nope.csv"]),
    }


def check_junit_structure(root: ET.Element, result) -> None:
    """The common JUnit schema, checked by hand: counts add up and match the verdict."""
    assert root.tag == "testsuites"
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in root:
        assert suite.tag == "testsuite" and suite.get("name")
        cases = suite.findall("testcase")
        counts = {"tests": len(cases),
                  "failures": sum(c.find("failure") is not None for c in cases),
                  "errors": sum(c.find("error") is not None for c in cases),
                  "skipped": sum(c.find("skipped") is not None for c in cases)}
        for key, value in counts.items():
            assert int(suite.get(key)) == value, (suite.get("name"), key)
            totals[key] += value
        for case in cases:
            assert case.get("name") and case.get("classname")
            outcomes = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
            assert len(outcomes) <= 1
    for key, value in totals.items():
        assert int(root.get(key)) == value
    assert totals["failures"] == len(result.by_status("regression"))
    assert (totals["errors"] > 0) == (result.exit_code == 2)


@pytest.mark.parametrize("verdict", ["pass", "regression", "could not judge", "broken input"])
def test_junit_validates_against_the_junit_schema(results, verdict):
    result = results[verdict]
    text = to_junit(result)
    root = ET.fromstring(text.encode("utf-8"))
    check_junit_structure(root, result)
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(XSD)).validate(text)


def test_junit_names_the_regression_and_the_reason_the_gate_refused(results):
    root = ET.fromstring(to_junit(results["regression"]))
    failures = {(case.get("classname"), case.get("name")): case.find("failure")
                for case in root.iter("testcase") if case.find("failure") is not None}
    failure = failures[("smlens.gate.wave_efficiency", "decode/gate_up_proj/cublaslt_nvjet")]
    assert failure.get("type") == "regression" and "baseline 1, current 0.848" in failure.get("message")

    refused = ET.fromstring(to_junit(results["broken input"]))
    errors = list(refused.iter("error"))
    assert [e.get("message") for e in errors] == ["--current nope.csv: no such file"]


def test_junit_escapes_kernel_and_group_names(targeted):
    hostile = targeted.copy()
    hostile["kernel_family"] = hostile["kernel_family"].astype(object).where(
        hostile["kernel_family"] != "aten", 'at::<lambda>&"</testcase>')
    result = run_gate([Run("a", hostile)], [Run("b", hostile)])
    root = ET.fromstring(to_junit(result))
    names = {case.get("name") for case in root.iter("testcase")}
    assert 'decode/elementwise/at::<lambda>&"</testcase>' in names


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of the rendered Markdown, as rows of cell texts (header row first)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables, rows, row = [], None, None
    for token in tokens:
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close":
            rows.append(row)
            row = None
        elif token.type == "table_close":
            tables.append(rows)
    return tables


def test_markdown_renders_a_summary_table_and_the_findings(results):
    result = results["regression"]
    text = to_markdown(result)
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<table>") == 2
    summary, findings = markdown_tables(text)
    assert summary[0][:3] == ["rule", "threshold", "compared"]
    assert {row[0] for row in summary[1:]} == {"time per kernel family", "time per role",
                                                "useful_tensor_pct", "fill", "achieved_occupancy_pct",
                                                "wave_efficiency", "dram_bytes"}
    # the group's phase, role and family in columns of their own, as in the terminal table
    assert findings[0] == ["status", "rule", "phase", "role", "family", "baseline", "current", "change",
                           "threshold", "test"]
    regressions = [row for row in findings[1:] if row[0] == "regression"]
    assert len(regressions) == len(result.by_status("regression"))
    assert ["regression", "wave_efficiency", "decode", "gate_up_proj", "cublaslt_nvjet", "1", "0.848",
            "-15.2%", "−10% and 0.05"] in [row[:9] for row in regressions]
    # a rule grouped by phase and role only leaves the family cell blank
    assert ["improved", "time per role", "decode", "attention", "", "83.7 µs", "7.01 µs", "-91.6%"] in \
        [row[:8] for row in findings[1:]]
    assert "| ---: | ---: | ---: |" in text  # baseline, current and change right-aligned
    assert "## smlens gate: ❌ regression (exit 1)" in text
    assert "threshold alone decides" in text
    assert "**Kernels appeared**" in text and "`cublasLt::splitKreduce_kernel`" in text


@pytest.mark.parametrize("case", ["gate-b4-r1 against gate-b4-r2", "pass", "regression"])
def test_markdown_summary_counts_the_passes_the_terminal_counts(results, data_dir, case):
    """Issue 29: the summary table had no pass column, so in the H200 run-to-run case a rule read
    `compared 8` with every outcome 0 while the terminal said 45 pass."""
    if case in results:
        result = results[case]
    else:
        runs = data_dir / "h200_runs"
        result = run_gate([Run("gate-b4-r1", capture_figures(runs / "gate-b4-r1.csv.gz"))],
                          [Run("gate-b4-r2", capture_figures(runs / "gate-b4-r2.csv.gz"))])
        assert sum(c.status == "pass" for c in result.comparisons) == 45
    summary = markdown_tables(to_markdown(result))[0]
    heading = summary[0]
    assert heading[2:] == ["compared", "regression", "cannot judge", "within noise", "improved", "pass",
                           "n/a or small"]
    rows = [dict(zip(heading, row)) for row in summary[1:]]
    for row in rows:  # every comparison made is in one outcome's column
        outcomes = ("regression", "cannot judge", "within noise", "improved", "pass")
        assert int(row["compared"]) == sum(int(row[o]) for o in outcomes), row
    passes = sum(c.status == "pass" for c in result.comparisons)
    assert passes and sum(int(row["pass"]) for row in rows) == passes
    console = Console(width=200, record=True)
    console.print(render_table(result, width=200))
    assert f"{passes} pass" in console.export_text()  # the terminal's count, the same
    same = {c.rule.label for c in result.comparisons if c.status == "pass"}
    assert {row["rule"] for row in rows if int(row["pass"])} == same


def test_markdown_of_a_pass_and_a_refusal_still_renders_a_table(results):
    for verdict in ("pass", "could not judge", "broken input"):
        text = to_markdown(results[verdict])
        assert "<table>" in MarkdownIt("commonmark").enable("table").render(text), verdict
    refused = to_markdown(results["could not judge"])
    # sections_raw lacks the tensor-op counters (its DRAM bytes come from MemoryWorkloadAnalysis's rate)
    assert "**The gate could not judge:**" in refused and "sm__ops_path_tensor_*" in refused


def test_markdown_escapes_pipes_in_cells(targeted):
    piped = targeted.copy()
    piped["kernel_family"] = piped["kernel_family"].astype(object).where(
        piped["kernel_family"] != "cudnn_sdpa", "cudnn|sdpa")
    base = piped[piped["phase"] == "decode"]
    slower = base.copy()
    slower["time_ns"] = slower["time_ns"] * 1.5  # every group past the threshold
    text = to_markdown(run_gate([Run("a", base)], [Run("b", slower)]))
    findings = markdown_tables(text)[1]
    assert all(len(row) == 10 for row in findings)
    assert any(row[2:5] == ["decode", "attention", "cudnn|sdpa"] for row in findings)


def test_terminal_table_fits_eighty_columns(results):
    for verdict, result in results.items():
        console = Console(width=80, record=True, color_system=None)
        console.print(render_table(result))
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= 80, verdict
        assert lines[0].startswith(f"gate: {result.verdict}")


def test_json_has_the_verdict_every_comparison_and_nulls(results):
    document = json.loads(json.dumps(results["regression"].to_json(), allow_nan=False))
    assert document["verdict"] == "regression" and document["exit_code"] == 1
    assert document["regressions"] == len(results["regression"].by_status("regression"))
    appeared = [c for c in document["comparisons"] if c["status"] == "appeared"]
    assert appeared and all(c["baseline_median"] is None and c["change"] is None for c in appeared)
    assert any(k["kernel_name"] == "cublasLt::splitKreduce_kernel" or
               k["kernel_name"].startswith("void cublasLt::splitKreduce_kernel")
               for k in document["appeared"])


def test_short_kernel_names():
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<8, at::Fn<float>>(int, T2)") == \
        "at::native::vectorized_elementwise_kernel"
    assert short_kernel_name("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert len(short_kernel_name("x" * 200)) == 60
