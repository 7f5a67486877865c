"""Size of the demo's report and how soon headless Chromium paints it: the first contentful paint
(the verdict's text), the page's load event, and when every chart is drawn, each the median of
several fresh tabs. Needs Chromium (apt-get install -y chromium).

    PYTHONPATH=. python3 benchmarks/bench_report_paint.py [TABS] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.ingest.capture import read_capture  # noqa: E402
from profiler.ingest.shapes import parse_shapes_file  # noqa: E402
from reports import html as report  # noqa: E402
from suite import arguments  # noqa: E402
from tests.chromium import Browser, find_chromium  # noqa: E402
from views.registry import compute_views  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "profiler" / "data"

# ms since navigation start: first contentful paint, load, and every figure div holding its svg
TIMES_JS = """new Promise(function (done) {
  (function poll() {
    var figs = Array.from(document.querySelectorAll('div.fig'));
    // plotly draws each chart in two svgs: a chart is drawn when it holds one
    if (figs.some(function (el) { return !el.querySelector('svg.main-svg'); })) { setTimeout(poll, 10); return; }
    var paint = performance.getEntriesByName('first-contentful-paint')[0];
    var nav = performance.getEntriesByType('navigation')[0];
    done({fcp: paint ? paint.startTime : null, load: nav.loadEventEnd, drawn: performance.now(),
          figures: figs.length});
  })();
})"""


def demo_report(folder: Path) -> Path:
    kernels = read_capture(DATA / "h200_targeted_raw.csv.gz",
                           shapes=parse_shapes_file(DATA / "h200_shapes.txt")).kernels
    data = report.from_views(compute_views(kernels), {"id": "demo", "name": "h200-demo"}, kernels)
    path = folder / "demo.html"
    report.write_report(path, report.render_report(data))
    return path


def main(tabs: int) -> None:
    binary = find_chromium()
    if binary is None:
        raise SystemExit("no chromium on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as folder:
        path = demo_report(Path(folder))
        size = path.stat().st_size
        browser = Browser(binary, window=(1440, 900))
        try:
            runs = []
            for _ in range(tabs):
                session = browser.open(path.resolve().as_uri())
                runs.append(browser.evaluate(session, TIMES_JS))
                assert browser.errors(session) == [], browser.errors(session)
        finally:
            browser.close()
    median = {k: statistics.median(r[k] for r in runs) for k in ("fcp", "load", "drawn")}
    print(f"report: {size / 1e6:.2f} MB ({size:,} bytes), {runs[0]['figures']} charts; "
          f"plotly.js {len(report.plotly_js().encode()) / 1e6:.2f} MB of it")
    print(f"median of {tabs} tabs (ms): first contentful paint {median['fcp']:.0f}, "
          f"load {median['load']:.0f}, every chart drawn {median['drawn']:.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tabs", type=int, nargs="?", default=5, help="fresh tabs, one paint each")
    main(arguments(parser, quick={"tabs": 1}).tabs)
