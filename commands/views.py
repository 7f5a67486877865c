"""`smlens views`, `report` and `demo`: a stored run's views in the terminal, as JSON or CSV, and
as one self-contained HTML report."""
from __future__ import annotations

import json
import re
import sys
import tempfile
from importlib.resources import as_file, files
from pathlib import Path
from typing import Optional, Sequence

from commands.common import print_report, say, store_path, working
from profiler.errors import BadInput
from profiler.ingest.stores import open_store
from profiler.option_checks import check_output_file, is_stdout
from reports.formats import Format, ViewsFormat, kernels_csv
from reports.formats.views_json import views_document
from reports.terminal import brief_document, output_console, print_brief, print_views, verdict_of
from reports.verdict_text import verdict_document
from views.registry import compute_views, input_columns, view_ids
from views.vocabulary import KERNEL_ROLES, PHASE_ORDER


def check_filter(phase: Optional[str], role: Optional[str]) -> None:
    if phase is not None and phase not in PHASE_ORDER:
        raise BadInput(f"--phase {phase}: expected one of {', '.join(PHASE_ORDER)}")
    if role is not None and role not in KERNEL_ROLES:
        raise BadInput(f"--role {role}: expected one of {', '.join(KERNEL_ROLES)}")


def views_of_run(the_store, ref: Optional[str]):
    """A stored run -> (its row, its views result, the report's input)."""
    # the report's modules only where one is written: `smlens views` prints in a second (BENCHMARKS.md)
    from reports.html import from_views

    run = the_store.run(ref)
    kernels = the_store.kernels(run["id"])
    result = compute_views(kernels)
    return run, result, from_views(result, run, source_kernels=kernels)


def write_html(output: Path, data, baseline=None, phase=None, role=None, tokens=None,
               base_tokens=None, comparison=None) -> int:
    """The report to `output` (or standard output for `-`); returns its size in bytes."""
    from reports.html import render_report, write_report

    html = render_report(data, baseline, phase=phase, role=role, tokens=tokens, base_tokens=base_tokens,
                         comparison=comparison)
    try:
        return print_report(html) if is_stdout(output) else write_report(output, html)
    except OSError as err:
        raise BadInput(f"cannot write {output}: {err.strerror or err}") from None


def show_views(run: Optional[str], phase: Optional[Sequence[str]] = None, role: Optional[Sequence[str]] = None,
               kernel: Optional[str] = None, view: Optional[Sequence[str]] = None,
               store: Optional[str] = None, format: ViewsFormat = ViewsFormat.table,
               baseline: Optional[Sequence[str]] = None, repeat: Optional[Sequence[str]] = None,
               brief: bool = False) -> None:
    """A stored run's views (of some phases, roles, kernels or views) in the terminal, as the
    views JSON with the verdict, or as the per-kernel CSV; against `baseline` (its runs, the
    first the baseline) what changed comes first (`comparison` in the JSON); `brief`: one screen
    (its JSON with --format json); `view`: those views alone."""
    if baseline:  # the comparison's modules only for a comparison: `smlens views` prints in a second
        from commands.compare import compare_stored
        from reports.compare import print_comparison
        from reports.comparison_text import comparison_document
    if (repeat and not baseline) or (baseline and format == ViewsFormat.csv):
        raise BadInput("--repeat needs --baseline" if repeat and not baseline else
                       "--baseline: the CSV holds one run's kernels; compare with --format table or json")
    for value in phase or []:
        check_filter(value, None)
    for value in role or []:
        check_filter(None, value)
    try:
        ids = view_ids(view)
        if kernel:
            re.compile(kernel)
    except ValueError as err:
        raise BadInput(f"--view: {err}") from None
    except re.error as err:
        raise BadInput(f"--kernel {kernel!r} is not a regular expression ({err})") from None
    the_store = open_store(store_path(store), create=False)
    row = the_store.run(run)
    with working("computing the views"):
        kernels = the_store.kernels(row["id"], columns=input_columns(ids))
        result = compute_views(kernels, ids).filter(phase=phase, role=role, kernel=kernel)
        comparison = (compare_stored(the_store, row, kernels, result, baseline, repeat or (), ids, phase, role,
                                     kernel) if baseline and not result.kernels.empty else None)
    if result.kernels.empty:
        raise BadInput(f"run {row['id']} has no kernels for --phase {phase or 'any'}, --role "
                       f"{role or 'any'}, --kernel {kernel or 'any'}")
    if format == ViewsFormat.json and brief and comparison is None:
        say(json.dumps(brief_document(result, row["id"], raw=kernels), allow_nan=False))
    elif format == ViewsFormat.json:
        document = views_document(result, run=row["id"])
        document["verdict"] = verdict_document(verdict_of(result))
        if comparison is not None:
            document["comparison"] = comparison_document(comparison)
        say(json.dumps(document, allow_nan=False))
    elif format == ViewsFormat.csv:
        sys.stdout.write(kernels_csv(result))
    else:
        if comparison is not None:
            console = output_console()
            print_comparison(comparison, the_store.run(baseline[0]), console, run=row, brief=brief)
            console.print()
        if brief:
            print_brief(result, row, raw=kernels)
        else:
            print_views(result, row, raw=kernels, only_views=bool(view))


def report(run: Optional[str], output: Path, baseline=None, phase: Optional[str] = None,
           role: Optional[str] = None, per_token: bool = False, store: Optional[str] = None,
           format: Format = Format.table, repeat: Optional[Sequence[str]] = None) -> int:
    """The HTML report of a run (or of it against `baseline`: a run, or several of one build, the
    first the baseline and the rest with `repeat`, more runs of this one, giving what changed its
    noise floor) to `output`; returns its size in bytes."""
    baselines = [baseline] if isinstance(baseline, str) else list(baseline or [])
    if repeat and not baselines:
        raise BadInput("--repeat needs --baseline")
    from commands.compare import compare_stored
    from reports.compare import missing_tokens, tokens_per_phase
    from reports.html import filter_input

    check_filter(phase, role)
    check_output_file(output, "--output", store_path(store), stdout_ok=True)
    the_store = open_store(store_path(store), create=False)
    with working("computing the views"):
        row, result, data = views_of_run(the_store, run)
        base = views_of_run(the_store, baselines[0])[2] if baselines else None
        comparison = (compare_stored(the_store, row, data.source, result.filter(phase=phase, role=role), baselines,
                                     repeat or (), None, phase, role) if len(baselines) > 1 or repeat else None)
    if (phase or role) and filter_input(data, phase, role).kernels.empty:
        raise BadInput(f"run {row['id']} has no kernels in phase {phase or 'any'}, role {role or 'any'}")

    def tokens_of(side):
        found = tokens_per_phase(side.kernels, side.run)
        missing = missing_tokens(filter_input(side, phase, role).kernels, found)
        if missing:
            raise BadInput(f"--per-token: run {side.run['id']} has no token count for "
                           f"{', '.join(map(str, missing))} (no GEMM shape, no batch/prompt tags): ingest it "
                           "with --shapes FILE or --tag batch=N --tag prompt=N, or profile with smlens")
        return found

    tokens = tokens_of(data) if per_token else None
    base_tokens = tokens_of(base) if per_token and base is not None else None
    with working(f"writing {output}"):
        size = write_html(output, data, base, phase, role, tokens, base_tokens, comparison)
    to_stdout = is_stdout(output)  # then stdout holds the report alone
    if format == Format.json:
        say(json.dumps({"report": str(output), "bytes": size, "run": row["id"],
                        "baseline": base.run["id"] if base else None}), err=to_stdout)
    elif not to_stdout:
        say(f"wrote {output} ({size / 1e6:.1f} MB): open it in a browser")
    return size


def demo(output: Path, format: Format = Format.table) -> int:
    """The bundled H200 capture into a temporary store, its views and its report; returns the
    report's size in bytes."""
    from profiler.ingest.shapes import parse_shapes_file  # NVTX's parsers: only `demo` ingests

    check_output_file(output, "--output")
    bundled = files("profiler") / "data"
    with as_file(bundled / "h200_targeted_raw.csv.gz") as capture, \
            as_file(bundled / "h200_shapes.txt") as shapes, \
            tempfile.TemporaryDirectory(prefix="smlens-demo-") as folder, \
            working("ingesting the bundled H200 capture, computing the views"):
        the_store = open_store(Path(folder) / "store")
        row, _ = the_store.ingest(capture, name="h200-demo", tags={"source": "bundled"},
                                  shapes=parse_shapes_file(shapes))
        run, result, data = views_of_run(the_store, row["id"])
        size = write_html(output, data)
    if format == Format.json:
        say(json.dumps({"report": str(output), "bytes": size,
                        "views": views_document(result, run=run["id"])}, allow_nan=False))
    else:
        print_views(result, run, raw=data.source)
        say(f"wrote {output} ({size / 1e6:.1f} MB): open it in a browser")
    return size
