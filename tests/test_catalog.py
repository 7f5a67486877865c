"""The catalog of figures: every view declares its figures once, and every output reads them.

A throwaway ninth view, registered here and nowhere else, shows up in the terminal, the HTML
report, the views JSON and the gate.
"""
from __future__ import annotations

import io
import json
import types

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from reports import html as report
from reports.formats.views_json import views_json
from reports.gate import Rule, Run, run_gate
from reports.terminal import print_views
from views import registry
from views.catalog import HIGHER, MEAN, MODE, NEITHER, Figure
from views.common import Checks, metric
from views.registry import compute_views


def _compute(ctx) -> pd.DataFrame:
    threads = metric(ctx.kernels, "launch__block_size")
    warps = threads / 32
    return pd.DataFrame({"block_warps": warps,
                         "block_shape": np.where(warps >= 8, "wide", "narrow")},
                        index=ctx.kernels.index)


def _validate(ctx, figures: pd.DataFrame) -> pd.DataFrame:
    warps = figures["block_warps"].to_numpy()
    checks = Checks(len(ctx.kernels))
    checks.na(np.isnan(warps), "needs launch__block_size")
    whole = warps == np.round(warps)
    checks.passed(whole)
    checks.failed(~whole, lambda w: f"{w:.2f} warps per block: not whole warps", warps)
    return checks.frame(ctx.kernels.index)


NINTH = types.ModuleType("v9_block_size")
NINTH.ID = "V9"
NINTH.TITLE = "Block size in warps"
NINTH.QUANTITIES = ("block_threads",)  # views/quantities.py: launch__block_size first
NINTH.FIGURES = (
    Figure("block_warps", "block warps", "count", HIGHER, MEAN, "launch__block_size / 32"),
    Figure("block_shape", "block shape", "text", NEITHER, MODE, "wide from 8 warps per block up"),
)
NINTH.compute = _compute
NINTH.validate = _validate


@pytest.fixture
def ninth_view(monkeypatch):
    monkeypatch.setattr(registry, "VIEWS", {**registry.VIEWS, "V9": NINTH})


@pytest.fixture
def with_ninth(ninth_view, targeted_capture):
    return compute_views(targeted_capture.kernels)


def test_the_ninth_view_is_in_the_catalog_and_the_metric_list(ninth_view):
    assert registry.figures()["block_warps"].view == "V9"
    assert registry.view_ids(["9"]) == ["V9"]
    assert "launch__block_size" in registry.required_metrics(["V9"])


def test_the_ninth_view_in_the_views_json(with_ninth):
    document = json.loads(views_json(with_ninth, run="r"))
    assert document["views"]["V9"] == "Block size in warps"
    kernel = document["kernels"][45]  # the decode qkv GEMM: 384 threads
    assert kernel["block_warps"] == 12.0 and kernel["block_shape"] == "wide"
    assert kernel["validations"]["V9"] == "pass"
    group = next(g for g in document["groups"] if (g["phase"], g["role"]) == ("decode", "qkv_proj"))
    assert group["block_warps"] == 12.0 and group["block_shape"] == "wide"
    assert group["validations"]["V9"] == {"pass": 8, "fail": 0, "n/a": 0}


def test_the_ninth_view_in_the_terminal(with_ninth):
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(with_ninth, {"name": "targeted", "id": "t"}, console=console)
    text = console.export_text()
    table = text[text.index("V9 Block size in warps"):]
    assert "block warps" in table and "block shape" in table
    decode_qkv = table[table.index("decode"):].splitlines()[1].split()
    assert decode_qkv == ["qkv_proj", "12", "wide", "8/0/0"]
    assert "V9    Block size in warps" in text  # the validation summary


def test_the_ninth_view_in_the_html_report(with_ninth, targeted_capture):
    text = report.render_report(report.from_views(with_ninth, {"id": "t", "name": "targeted"},
                                                  targeted_capture.kernels))
    section = text[text.index('<section id="v9">'):]
    section = section[:section.index("</section>")]
    assert "V9 Block size in warps" in section
    assert '<th title="launch__block_size / 32">block warps</th>' in section  # its definition, on hover
    assert "block shape (share of time)" in section
    assert 'data-view="V9"' in section and "188 pass" in section
    kernels = text[text.index('<section id="kernels">'):]
    assert ">V9</th>" in kernels


def test_the_ninth_view_in_the_gate(ninth_view, targeted_capture):
    base = compute_views(targeted_capture.kernels).kernels
    wider = targeted_capture.kernels.assign(**{"launch__block_size": targeted_capture.kernels["launch__block_size"] * 2})
    rule = Rule("block_warps", "higher", relative_pct=10)
    assert rule.checked_views == ("V9",) and rule.unit == "count" and rule.how == "mean"
    result = run_gate([Run("base", base)], [Run("wider", compute_views(wider).kernels)], [rule])
    assert result.verdict == "regression"
    assert {c.status for c in result.comparisons} <= {"regression", "small"}
    # a validation of the ninth view that fails on one side stops the gate, as for any view
    odd = targeted_capture.kernels.assign(**{"launch__block_size": targeted_capture.kernels["launch__block_size"] + 1})
    blocked = run_gate([Run("base", base)], [Run("odd", compute_views(odd).kernels)], [rule])
    assert blocked.verdict == "could not judge"
    assert any("validation V9 failed on current run odd" in p for p in blocked.problems)


def test_each_view_computes_exactly_the_figures_it_declares(targeted_capture):
    from views.context import Context

    ctx = Context(targeted_capture.kernels)
    for view, module in registry.VIEWS.items():
        declared = [f.column for f in module.FIGURES]
        assert list(module.compute(ctx).columns) == declared, view


def test_the_catalog_refuses_a_figure_declared_twice(monkeypatch):
    twice = types.ModuleType("twice")
    twice.ID, twice.FIGURES = "V9", (Figure("fill", "fill", "ratio", HIGHER, MEAN, "again"),)
    monkeypatch.setattr(registry, "VIEWS", {**registry.VIEWS, "V9": twice})
    with pytest.raises(ValueError, match="V9 declares fill, which V3 declares already"):
        registry.figures()


def test_a_declaration_names_known_units_and_aggregates():
    with pytest.raises(ValueError, match="unit"):
        Figure("x", "x", "furlongs", HIGHER, MEAN, "")
    with pytest.raises(ValueError, match="ratio_of"):
        Figure("x", "x", "ratio", HIGHER, "ratio", "")
    with pytest.raises(ValueError, match="combine text figures only"):
        Figure("x", "x", "%", HIGHER, MODE, "")
    with pytest.raises(ValueError, match="argmax_of"):
        Figure("x", "x", "text", HIGHER, "argmax", "")


def test_the_gap_reads_every_view_and_the_json_keys_cover_views_md():
    # the steps (V1 to V3), what explains them (V4 to V6), the memory side (V7), the MMA path (V8)
    assert registry.gap_views() == ["V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8"]
    promised = {"id", "name", "phase", "role", "role_source", "time_ns", "sm_active_pct",
                "sm_throughput_pct", "kind", "tensor_pipe_elapsed_pct", "tensor_device_pct",
                "tensor_dtype", "dram_pct", "bound", "useful_intensity",
                "tensor_pipe_pct", "tensor_ops", "mma_path", "fill", "useful_tensor_pct",
                "achieved_occupancy_pct", "theoretical_occupancy_pct", "occupancy_limiter", "waves",
                "wave_efficiency", "top_stall", "dram_bytes", "intensity", "kernel_family", "tile",
                "split_k"}
    assert promised <= set(registry.json_kernel_keys())


def test_labels_say_useful_mma_share_where_the_data_says_fill(targeted_capture):
    """The words of a table are an Nsight Compute user's: no label or view title says `fill`; the
    column keeps its name in the data, and its definition stands in the legend under the table."""
    import re

    declared = {**registry.figures(), **registry.gap_figures()}
    words = [f.label for f in declared.values()] + [m.TITLE for m in registry.VIEWS.values()]
    assert [w for w in words if re.search(r"\bfill\b", w, re.I)] == []
    assert (declared["fill"].label, declared["fill_factor"].label) == ("useful MMA share", "× useful MMA share")

    result = compute_views(targeted_capture.kernels, ["V3"])
    assert result.groups.set_index(["phase", "role"]).loc[("decode", "qkv_proj"), "fill"] == 0.5
    console = Console(width=80, record=True, file=io.StringIO())
    print_views(result, {"name": "targeted"}, console=console)
    text = console.export_text()
    v3 = text[re.search(r"^V3 Useful MMA work *$", text, re.M).start():]
    assert re.search(r"^\s+useful\s+useful\s*$", v3, re.M) and re.search(r"^\s+MMA\s+tensor\s*$", v3, re.M)
    assert re.search(r"^  qkv_proj +1\.00 +77\.4 ", v3, re.M)  # cold prefill: every tile row useful
    assert re.search(r"^  qkv_proj +0\.50 +0\.7 ", v3, re.M)  # decode: 4 tokens in the tile's 8
    assert "useful MMA share: useful FLOPs / tensor ops: the share of the MMA work that was" in v3
    assert "× useful MMA share: useful_tensor_pct / tensor_device_pct" in " ".join(text.split())
