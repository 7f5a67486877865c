"""The README's pictures, from the bundled and test captures: the report, a comparison, the
terminal at 80 columns, and a sweep's chart (the H200 study). Needs Chromium (apt-get install chromium).

    PYTHONPATH=. python3 scripts/screenshots.py docs/
"""
from __future__ import annotations

import base64
import io
import re
import sys
import tempfile
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reports import html as report  # noqa: E402
from reports.compare import tokens_per_phase  # noqa: E402
from reports.terminal import gap_tables, legend, verdict_parts  # noqa: E402
from tests.chromium import Browser, find_chromium  # noqa: E402
from tests.conftest import DATA, TARGETED_SHAPES  # noqa: E402
from tests.report_cases import views_input  # noqa: E402
from views.registry import compute_views  # noqa: E402
from views.verdict import verdict  # noqa: E402

WIDTH = 1440


def _shoot(browser: Browser, page: Path, out: Path, height: int, width: int = WIDTH) -> None:
    session = browser.open(page.resolve().as_uri())
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False}, session=session)
    browser.evaluate(session, "new Promise(function (done) { setTimeout(done, 1500); })")
    shot = browser.call("Page.captureScreenshot", {"format": "png", "clip": {
        "x": 0, "y": 0, "width": width, "height": height, "scale": 1}}, session=session)
    out.write_bytes(base64.b64decode(shot["data"]))
    errors = browser.errors(session)
    if errors:
        raise SystemExit(f"{page}: console errors: {errors}")


def _shoot_section(browser: Browser, page: Path, out: Path, anchor: str, height: int, width: int = WIDTH) -> None:
    """`height` pixels of the page from the top of its section `anchor` (the sweep's page is long:
    its picture is one phase and role's chart against batch)."""
    session = browser.open(page.resolve().as_uri())
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False}, session=session)
    # the page draws its charts one a frame, in order: wait until the section's first is drawn
    browser.evaluate(session, "new Promise(function (done) { var t = setInterval(function () { if ("
                     f"document.querySelector('#{anchor} .main-svg')) {{ clearInterval(t); "
                     "setTimeout(done, 500); } }, 200); })")
    top = browser.evaluate(session, f"document.getElementById({anchor!r}).getBoundingClientRect().top + window.scrollY")
    shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
        "x": 0, "y": int(top), "width": width, "height": height, "scale": 1}}, session=session)
    out.write_bytes(base64.b64decode(shot["data"]))
    errors = browser.errors(session)
    if errors:
        raise SystemExit(f"{page}: console errors: {errors}")


def sweep_page(path: Path) -> None:
    """The sweep report of the H200 study's Llama-3.1-8B grid (tests/data/h200_sweep)."""
    import shutil
    from commands import sweep as sweep_command
    from profiler.ingest.stores import open_store
    from reports.sweep_html import render_sweep

    store = path.parent / "sweep-store"
    shutil.copytree(DATA / "h200_sweep" / "store", store)
    the_store = open_store(store, create=False)
    result = sweep_command.analyse(sweep_command.stored_points(the_store, ["tag:sweep=sw-b903bf6aee"]), the_store)
    report.write_report(path, render_sweep(result, "sw-b903bf6aee"))


def terminal_svg(path: Path) -> None:
    """`smlens views` of the bundled capture at 80 columns: the verdict and the gap."""
    from profiler.ingest.capture import read_capture
    from profiler.ingest.shapes import parse_shapes_file

    bundled = ROOT / "profiler" / "data"
    kernels = read_capture(bundled / "h200_targeted_raw.csv.gz",
                           shapes=parse_shapes_file(bundled / "h200_shapes.txt")).kernels
    result = compute_views(kernels)
    console = Console(width=80, record=True, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print("$ smlens views h200-demo", style="bold")
    for part in verdict_parts(verdict(result), 80):
        console.print(part)
    console.print()
    tables, columns = gap_tables(result.gap, 80)
    console.print(tables[0])
    console.print(legend(tables[0].columns))  # the first table's columns (the key column is apart)
    svg = console.export_svg(title="smlens views, 80 columns")
    # the picture is made offline: the web font's URL goes, a local monospace font stands in
    svg = re.sub(r',?\s*url\("https?://[^"]*"\)\s*format\("[a-z0-9]+"\)', "", svg)
    path.write_text(svg, encoding="utf-8")


def main(folder: str) -> None:
    out = Path(folder)
    binary = find_chromium()
    if binary is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        demo = views_input(ROOT / "profiler" / "data" / "h200_targeted_raw.csv.gz", TARGETED_SHAPES,
                           {"id": "demo", "name": "h200-demo", "device_name": "NVIDIA H200"})
        report.write_report(tmp / "demo.html", report.render_report(demo))
        runs = DATA / "h200_runs"
        b1 = views_input(runs / "llama-3.1-8b-b1-p512.csv.gz", None, {"id": "b1", "name": "llama-3.1-8b-b1-p512"})
        b8 = views_input(runs / "llama-3.1-8b-b8-p512.csv.gz", None, {"id": "b8", "name": "llama-3.1-8b-b8-p512"})
        report.write_report(tmp / "compare.html", report.render_report(
            b8, b1, tokens=tokens_per_phase(b8.kernels, b8.run), base_tokens=tokens_per_phase(b1.kernels, b1.run)))
        terminal_svg(tmp / "terminal.svg")
        sweep_page(tmp / "sweep.html")
        browser = Browser(binary, window=(WIDTH, 900))
        try:
            _shoot(browser, tmp / "demo.html", out / "report.png", 1400)
            _shoot(browser, tmp / "compare.html", out / "comparison.png", 1400)
            _shoot_section(browser, tmp / "sweep.html", out / "sweep.png", "decode-gate_up_proj", 720)
            width, height = (int(float(v)) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', (
                tmp / "terminal.svg").read_text()).groups())
            _shoot(browser, tmp / "terminal.svg", out / "terminal.png", height, width)
        finally:
            browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs")
