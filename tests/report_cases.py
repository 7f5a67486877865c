"""Reports of real captures for the report tests: the bundled H200 capture, and a copy of it whose
kernel names, NVTX messages and run name carry markup and script."""
from __future__ import annotations

import csv
import io
import re
from functools import lru_cache
from pathlib import Path

from reports import html as report
from tests.captures import DATA, committed, kernels_of, views_of

# Each would run, or show up as an element, if any of it reached the page unescaped.
HOSTILE_NAME = ("</script><script>window.__pwned=1;document.title='pwned'</script>"
                "<img src=x onerror='window.__pwned=2'><b>bold</b>&amp;")
HOSTILE_ROLE_MESSAGE = ("<i>it</i></script><script>window.__pwned=3</script>"
                        "<svg onload='window.__pwned=4'></svg>")
HOSTILE_PHASE_MESSAGE = "</title><script>document.title='pwned'</script>"
HOSTILE_RUN_NAME = "run<script>window.__pwned=5</script>"
PWN_MARKERS = ("__pwned", "pwned'")

_ENTRY = re.compile(r'"(<default domain>:)([a-z_]+)(:none:none:none:none:none:none)"')


def hostile_capture(source: Path, target: Path) -> Path:
    """`source` (an ncu raw CSV) with every GEMM's name and every NVTX message made hostile.
    The first word of each message stays, so phases and roles are still recognised."""
    text = source.read_text()
    lines = text.splitlines(True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    header = rows[0]
    name_at = header.index("Kernel Name")
    nvtx_at = next(i for i, h in enumerate(header) if h.startswith("thread Domain:Push/Pop_Range"))
    for row in rows[2:]:
        if row[name_at].startswith("nvjet"):
            row[name_at] = row[name_at] + HOSTILE_NAME

        def poison(match):
            word = match.group(2)
            extra = HOSTILE_PHASE_MESSAGE if word in ("prefill", "decode") else HOSTILE_ROLE_MESSAGE
            return f'"{match.group(1)}{word} {extra}{match.group(3)}"'

        row[nvtx_at] = _ENTRY.sub(poison, row[nvtx_at])
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows(rows)
    target.write_text("".join(lines[:start]) + out.getvalue())
    return target


def views_input(path: Path, shapes: dict | None, run: dict):
    """capture -> views -> the report's input, the way `smlens report` joins them. A committed
    capture without a shapes file is read and its views computed once (tests/captures.py): the
    input's frames are the test's own all the same (from_views copies them)."""
    from profiler.ingest.capture import read_capture
    from views.registry import compute_views

    if shapes is None and committed(path):
        return report.from_views(views_of(path), run, source_kernels=kernels_of(path))
    kernels = read_capture(path, shapes=shapes).kernels
    return report.from_views(compute_views(kernels), run, source_kernels=kernels)


@lru_cache(maxsize=None)
def llama_comparison() -> str:
    """Llama-3.1-8B batch 8 against batch 1 (prompt 512, tests/data/h200_runs), as `smlens report
    --baseline` renders it: the report several files read (1.5 s to render), rendered once."""
    runs = DATA / "h200_runs"
    b8 = views_input(runs / "llama-3.1-8b-b8-p512.csv.gz", None, {"id": "b8", "name": "llama-b8"})
    b1 = views_input(runs / "llama-3.1-8b-b1-p512.csv.gz", None, {"id": "b1", "name": "llama-b1"})
    return report.render_report(b8, b1)
