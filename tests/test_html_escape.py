"""The report's escaping and formatting helpers, on the real kernel names of the H200 capture."""
from __future__ import annotations

import html
import json
import math
import os

import numpy as np
import pytest

from reports import html as page
from reports import html_text as report

HOSTILE = ('</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
           "<!-- & \u2028 '")


@pytest.fixture(scope="module")
def names(targeted_capture):
    return sorted(set(targeted_capture.kernels["kernel_name"]))


def test_script_json_cannot_close_a_script_and_round_trips(names):
    payload = {"names": names + [HOSTILE], "nan": float("nan"), "inf": float("inf"),
               "ints": np.arange(3), "f": np.float32(0.5)}
    text = report.script_json(payload)
    for char in "<>&\u2028\u2029":
        assert char not in text
    back = json.loads(text)
    assert back["names"] == names + [HOSTILE]  # template names hold < > &: all survive as data
    assert back["nan"] is None and back["inf"] is None  # missing is null, never 0
    assert back["ints"] == [0, 1, 2] and back["f"] == 0.5


def test_html_and_plot_text_escape_template_names(names):
    templated = [n for n in names if "<" in n]
    assert templated, "the capture has C++ template kernel names"
    for name in templated + [HOSTILE]:
        for escaped in (report.esc(name), report.plot_text(name)):
            assert "<" not in escaped and ">" not in escaped
            assert html.unescape(escaped) == name
    assert '"' not in report.esc(HOSTILE)  # safe inside a quoted attribute too


def test_short_name_keeps_the_part_that_tells_kernels_apart(names):
    shorts = {report.short_name(n) for n in names}
    assert "at::vectorized_elementwise_kernel" in shorts
    assert "cublasLt::splitKreduce_kernel" in shorts
    assert "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT" in shorts  # no template: unchanged
    longest = max(names, key=len)
    assert len(longest) > 1000 and len(report.short_name(longest)) <= 80
    # A name that is all markup still shows something (escaped later), never nothing.
    assert report.short_name("<b>") == "<b>"


def test_missing_values_show_as_a_dash_never_zero():
    for value in (None, float("nan"), np.nan, report.pd.NA):
        assert report.fmt(value) == "\u2014"
        assert report.esc(value) == "\u2014"
    assert report.fmt(0.0) == "0"
    assert report.fmt_time_ns(83_700) == "83.7 \u00b5s"
    assert report.fmt_bytes(12_620_000) == "12.6 MB"


@pytest.mark.parametrize("figure,current,base,regression", [
    ("time_ns", 110.0, 100.0, True),  # slower
    ("time_ns", 104.0, 100.0, False),  # within 5 %
    ("time_ns", 80.0, 100.0, False),  # faster
    ("tensor_pipe_pct", 40.0, 50.0, True),  # less tensor work
    ("useful_tensor_pct", 60.0, 50.0, False),
    ("fill", 0.5, 1.0, True),
    ("top_stall", 1.0, 2.0, False),  # no direction: never marked
])
def test_regression_direction(figure, current, base, regression):
    delta = report.delta_pct(current, base)
    assert math.isclose(delta, (current - base) / base * 100)
    assert report.is_regression(figure, delta) is regression


def test_delta_of_a_missing_baseline_is_none():
    assert report.delta_pct(1.0, None) is None
    assert report.delta_pct(1.0, 0.0) is None
    assert report.delta_pct(float("nan"), 1.0) is None


def test_plotly_bundle_cannot_close_its_script():
    bundle = page.plotly_js()
    assert len(bundle) > 1_000_000 and "</script" not in bundle.lower()


def test_write_report_is_atomic(tmp_path):
    target = tmp_path / "sub" / "r.html"
    assert page.write_report(target, "<p>\u00b5</p>") == len("<p>\u00b5</p>".encode())
    assert target.read_text(encoding="utf-8") == "<p>\u00b5</p>"
    assert [p.name for p in target.parent.iterdir()] == ["r.html"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # shareable, not mkstemp's 0600
