"""The `smlens` command: one short function per command over the library modules.

Data flows profiler -> views -> reports; this file is the one place that joins them.
Every SmlensError becomes one line on stderr and its exit code (README, "Exit codes"); anything
else is a bug, reported on one line with exit code 70 (SMLENS_TRACEBACK=1 shows the traceback).
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from profiler.cli_help import Command, example
from profiler.errors import SmlensError
from profiler.option_checks import check_output_file, is_stdout, read_option_file
from profiler.run.options import DEFAULT_WORKLOAD, DecoderOptions, DetGemmOptions, ProgramOptions


def one_line(message: str) -> str:
    """`smlens: message` on one line whatever a file or run name holds: control characters
    (newlines, terminal escapes) and undecodable bytes of a file name are shown escaped."""
    return "smlens: " + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)


# click's exceptions, wherever this typer takes click from (newer ones carry their own copy)
_click_errors = sys.modules[typer.BadParameter.__module__]
_UsageError = _click_errors.UsageError
_HelpInstead = getattr(_click_errors, "NoArgsIsHelpError", ())  # `smlens store`: the help, as before


class _OneLineUsageError(_UsageError):
    def show(self, file=None) -> None:
        typer.echo(one_line(self.message), err=True)


def _one_line_usage(err: _UsageError) -> _UsageError:
    """click's usage error (an unknown option, a bad --format, a missing argument) as one line that
    names the command and its --help, like every other bad input; exit code 2 as before."""
    names, ctx = [], err.ctx
    while ctx is not None:
        names.insert(0, ctx.info_name if ctx.parent else "smlens")
        ctx = ctx.parent
    names = names or ["smlens"]
    where = f"{' '.join(names[1:])}: " if names[1:] else ""
    # "Value error, " is how this typer words a value outside an enum (--format xml)
    message = err.format_message().replace("Value error, ", "").rstrip(".")
    return _OneLineUsageError(f"{where}{message}; see `{' '.join(names)} --help`", err.ctx)


class _Group(typer.core.TyperGroup):
    """The top-level group: every command's usage errors pass through here (see _one_line_usage)."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except _HelpInstead:
            raise
        except _UsageError as err:
            raise _one_line_usage(err) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (_HelpInstead, _OneLineUsageError):
            raise
        except _UsageError as err:
            raise _one_line_usage(err) from None


# Plain help (rich_markup_mode=None): option names are never cut to fit a panel.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_Group,
                  rich_markup_mode=None, help="What an NVIDIA GPU is really doing during LLM inference.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"smlens {version('smlens')}")
        except PackageNotFoundError:
            typer.echo("smlens (not installed: run from a source tree)")
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")):
    """What an NVIDIA GPU is really doing during LLM inference."""


class Format(str, Enum):
    table = "table"
    json = "json"


StoreOpt = typer.Option(None, "--store", envvar="SMLENS_STORE", metavar="PATH",
                        help="Store folder or s3://bucket/prefix (default ./smlens-store).")


EXIT_INTERNAL = 70  # a bug in smlens (BSD sysexits' EX_SOFTWARE)


def internal_error(err: Exception) -> str:
    """A bug's one line, or the traceback when SMLENS_TRACEBACK asks for it."""
    if os.environ.get("SMLENS_TRACEBACK"):
        raise err
    return (f"internal error ({type(err).__name__}: {str(err).strip()[:200]}); please report it "
            "(SMLENS_TRACEBACK=1 shows where)")


def store_path(store: Optional[str]):
    """The store's folder, or its URL as given (a Path would fold s3:// into s3:/)."""
    from profiler.errors import BadInput
    from profiler.ingest.objectstore import is_url

    if store and not all(c.isprintable() for c in store):  # e.g. SMLENS_STORE set from junk output
        raise BadInput(f"--store / SMLENS_STORE {store!r}: holds control characters; give a folder "
                       "or s3://bucket/prefix")
    return store if store and is_url(store) else Path(store or "smlens-store")


def fail(message: str, code: int = 2) -> None:
    typer.echo(one_line(message), err=True)
    raise typer.Exit(code)


def guarded(func):
    """The command body with every SmlensError turned into one stderr line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                # numpy's "invalid value" warnings: the views say n/a for such values themselves
                warnings.simplefilter("ignore", RuntimeWarning)
                return func(*args, **kwargs)
        except SmlensError as err:
            fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:  # `smlens ... | head`: stop quietly, and keep the final flush quiet too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as err:  # a bug: one line, not a traceback, unless asked for
            fail(internal_error(err), EXIT_INTERNAL)

    return wrapper


def command(func):
    """Register a top-level command (see `guarded`)."""
    return app.command(cls=Command, epilog=example(func.__name__))(guarded(func))


# --- store: ingest, runs, show, rm ------------------------------------------------------------
# (commands are added below by their owners; keep each a few lines over a library call)


@command
def ingest(files: List[Path] = typer.Argument(..., help="ncu CSV (raw or details page, gzip ok) or .ncu-rep"),
           store: Optional[str] = StoreOpt,
           name: Optional[str] = typer.Option(None, help="Run name (default: the file name)."),
           tag: Optional[List[str]] = typer.Option(None, help="KEY=VALUE, repeatable."),
           shapes: Optional[Path] = typer.Option(None, help="File of '[phase/]role M N K' lines for "
                                                 "captures whose NVTX ranges carry no shapes."),
           roles_from_eager_order: bool = typer.Option(
               False, help="CUDA-graph captures (--graph-profiling node): kernels without role "
                           "ranges take the roles of an eager step of the same phase, in order."),
           format: Format = typer.Option(Format.table, "--format")):
    """Read ncu captures into the Parquet store, one run per file."""
    from profiler.ingest.capture import check_readable, parse_shapes_file
    from profiler.ingest.store import check_name, parse_tags
    from profiler.ingest.stores import open_store
    from reports.runs import print_runs, run_record, support_lines
    from views.registry import input_columns, support
    import json
    import pandas as pd

    tags = parse_tags(tag)
    check_name(name)
    for file in files:  # a missing second file is refused before the first is stored
        check_readable(file)
    shape_map = parse_shapes_file(shapes) if shapes else None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    the_store = open_store(store_path(store))
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), transient=True, disable=not sys.stderr.isatty()) as bar:
        for file in files:
            task = bar.add_task(f"ingest {file.name}", total=None)
            run_name = name if name is None or len(files) == 1 else f"{name}-{file.name}"
            row, new = the_store.ingest(file, name=run_name, tags=tags, shapes=shape_map,
                                        roles_from_order=roles_from_eager_order,
                                        on_progress=lambda done, total: bar.update(task, completed=done, total=total))
            rows.append({**row, "new": new})
            if format == Format.table and not new:
                changed = " and ".join(row.get("changed") or [])
                typer.echo(f"{file}: already in the store as run {row['id']}"
                           + (f"; its {changed} updated" if changed else ""), err=True)
            elif format == Format.table:
                for note in json.loads(row.get("notes") or "[]"):
                    typer.echo(f"{file.name}: note: {note}", err=True)
                for line in support_lines(support(the_store.kernels(row["id"], columns=input_columns()))):
                    typer.echo(f"{file.name}: {line}", err=True)
    if format == Format.json:
        typer.echo(json.dumps([run_record(r) for r in rows], indent=2))
    else:
        print_runs(pd.DataFrame(rows))


@command
def runs(store: Optional[str] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """List the runs in the store."""
    from profiler.ingest.stores import open_store
    from reports.runs import print_runs, runs_json

    table = open_store(store_path(store), create=False).runs()
    typer.echo(runs_json(table)) if format == Format.json else print_runs(table)


RUN_HELP = "Run id, id prefix (4 characters or more), name or 'latest'."


@command
def show(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
         store: Optional[str] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """One run: where it came from, and its kernels by phase and role."""
    import json
    import pandas as pd
    from profiler.ingest.stores import open_store
    from reports.runs import print_run, run_summary

    the_store = open_store(store_path(store), create=False)
    kernels = the_store.kernels(run, columns=["phase", "role", "gpu__time_duration.sum"])
    if "gpu__time_duration.sum" in kernels:  # stores written before cells were checked hold text
        kernels["gpu__time_duration.sum"] = pd.to_numeric(kernels["gpu__time_duration.sum"], errors="coerce")
    summary = run_summary(the_store.run(run), kernels, metric_count=len(the_store.units(run)))
    typer.echo(json.dumps(summary, indent=2)) if format == Format.json else print_run(summary)


@command
def rm(run: List[str] = typer.Argument(..., help="Run id, id prefix (4 characters or more) or name; "
                                                 "several remove several."),
       yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking; needed when standard "
                                                           "input is not a terminal."),
       store: Optional[str] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """Remove runs from the store (all of them, or none when one reference is unknown or ambiguous).
    At a terminal it asks first; a script passes --yes."""
    import json
    from profiler.errors import BadInput
    from profiler.ingest.stores import open_store
    from reports.runs import run_record

    the_store = open_store(store_path(store), create=False)
    if not yes:
        runs = the_store.runs()
        ids = list(dict.fromkeys(the_store.resolve(ref, unique=True, runs=runs) for ref in run))
        if not _stdin_is_terminal():
            raise BadInput(f"nothing removed: standard input is not a terminal, so removing "
                           f"{'this run' if len(ids) == 1 else f'these {len(ids)} runs'} cannot be "
                           f"confirmed; pass --yes to remove without asking")
        names = runs.set_index("id").loc[ids, "name"]
        typer.echo("\n".join(f"  {run_id} {name}" for run_id, name in names.items()), err=True)
        try:
            confirmed = typer.confirm("remove this run?" if len(ids) == 1 else f"remove these {len(ids)} runs?",
                                      err=True)
        except typer.Abort as err:  # click's "Aborted!" and exit 1 for Ctrl-C or Ctrl-D at the question
            if isinstance(err.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            confirmed = False
        if not confirmed:
            raise BadInput("nothing removed (not confirmed; --yes skips the question)")
    rows = the_store.remove(run)
    if format == Format.json:
        typer.echo(json.dumps([run_record(row) for row in rows]))
    else:
        for row in rows:
            typer.echo(f"removed run {row['id']} ({row['name']})")


def _stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


store_app = typer.Typer(no_args_is_help=True, help="Check the store for damage, and repair it.")
app.add_typer(store_app, name="store")


@store_app.command("check")
@guarded
def store_check(store: Optional[str] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """Every inconsistency of the store and what `smlens store repair` would do: exit 0 when there
    is none, 2 when there are some."""
    import json
    from profiler.ingest.stores import check
    from reports.store_report import print_store_check

    report = check(store_path(store))
    typer.echo(json.dumps(report, indent=2)) if format == Format.json else print_store_check(report)
    raise typer.Exit(0 if report["ok"] else 2)


@store_app.command("repair")
@guarded
def store_repair(store: Optional[str] = StoreOpt, format: Format = typer.Option(Format.table, "--format")):
    """Make the store consistent: finish interrupted writes, rebuild the runs table from the run
    folders' own records, and move what cannot be read to quarantine/ (nothing is deleted)."""
    import json
    from profiler.ingest.stores import repair
    from reports.store_report import print_store_repair

    report = repair(store_path(store))
    typer.echo(json.dumps(report, indent=2)) if format == Format.json else print_store_repair(report)
    raise typer.Exit(0 if report["ok"] else 2)


def _gate_runs(refs: Optional[List[str]], side: str, store: Path, shapes: Optional[dict],
               identities: list) -> list:
    """The runs one side of the gate names, each with its views' per-kernel figures; `identities`
    receives what each run was measured on (gate_match)."""
    from profiler.gate_inputs import load_runs
    from reports.gate import Run
    from views.registry import compute_views

    return [Run(label, compute_views(kernels).kernels)
            for label, kernels in load_runs(refs, side, store, shapes, identities)]


@command
def gate(baseline: Optional[List[str]] = typer.Option(
             None, "--baseline", "-b", help="Baseline run(s): a capture file, a stored run (id, id prefix "
             "of 4 characters or more, name, 'latest'), or tag:KEY=VALUE[~N]. Repeat the option or "
             "separate with commas."),
         current: Optional[List[str]] = typer.Option(
             None, "--current", "-c", help="Current run(s), the same forms as --baseline."),
         rules: Optional[Path] = typer.Option(None, "--rules", help="gate.toml (default: built-in rules)."),
         markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here."),
         junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
         shapes: Optional[Path] = typer.Option(None, help="File of '[phase/]role M N K' lines for "
                                               "capture files whose NVTX ranges carry no shapes."),
         allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="Gate runs of different "
                                             "devices, workloads, model shapes or phases (refused "
                                             "by default: exit 2)."),
         store: Optional[str] = StoreOpt,
         format: Format = typer.Option(Format.table, "--format")):
    """Gate current runs against baseline runs: exit 0 pass, 1 regression, 2 could not judge."""
    import json
    from profiler.errors import BadInput
    from profiler.gate_match import mismatches
    from reports.gate import RulesError, cannot_judge, load_rules, run_gate
    from reports.gate_output import render_table, to_junit, to_markdown

    for path, option in ((markdown, "--markdown"), (junit, "--junit")):
        if path:  # where the verdict goes must be sound before there is one
            check_output_file(path, option, store_path(store), stdout_ok=True)
    if is_stdout(markdown) and is_stdout(junit):
        raise BadInput("--markdown and --junit both name standard output: give one of them a file")
    to_stdout = is_stdout(markdown) or is_stdout(junit)  # the report alone goes there
    error = None
    try:  # a run or rules file that cannot be read is still a verdict CI must see: exit 2, reports written
        from profiler.ingest.capture import parse_shapes_file
        if rules:
            read_option_file(rules, "--rules")
        rule_set = load_rules(rules) if rules else None
        shape_map = parse_shapes_file(shapes) if shapes else None
        from rich.console import Console
        identities: tuple[list, list] = ([], [])
        with Console(stderr=True).status("reading the runs and computing their views"):
            base_runs = _gate_runs(baseline, "baseline", store_path(store), shape_map, identities[0])
            current_runs = _gate_runs(current, "current", store_path(store), shape_map, identities[1])
        differences = mismatches(*identities)
        if differences and not allow_mismatch:
            raise BadInput("the runs do not compare like with like: " + "; ".join(differences)
                           + "; compare runs of one device and workload, or pass --allow-mismatch")
        result = run_gate(base_runs, current_runs, rule_set)
        result.warnings.extend(f"compared despite --allow-mismatch: {d}" for d in differences)
    except (SmlensError, RulesError) as err:
        error = str(err)
        result = cannot_judge(error, baseline or [], current or [])
    except Exception as err:  # a bug is no verdict either: exit 2 with the reports, not 1
        error = internal_error(err)
        result = cannot_judge(error, baseline or [], current or [])
    for path, text in ((markdown, to_markdown), (junit, to_junit)):
        if is_stdout(path):
            _print_report(text(result))
        elif path:
            try:
                Path(path).write_text(text(result), encoding="utf-8")
            except OSError as err:
                raise BadInput(f"cannot write {path}: {err.strerror or err}") from None
    if format == Format.json:
        typer.echo(json.dumps(result.to_json(), indent=2), err=to_stdout)
    else:
        from rich.console import Console
        from reports.terminal import output_console
        console = Console(stderr=True) if to_stdout else output_console()
        console.print(render_table(result, width=console.width))
    if error is not None:  # exit 2 whatever the cause: the gate's code for "could not judge"
        raise SmlensError(error, exit_code=2)
    raise typer.Exit(result.exit_code)


# --- report, demo ------------------------------------------------------------------------------

def _views_of_run(the_store, ref: Optional[str]):
    """A stored run -> (its row, its views result, the report's input)."""
    from reports.html import from_views
    from views.registry import compute_views

    run = the_store.run(ref)
    kernels = the_store.kernels(run["id"])
    result = compute_views(kernels)
    return run, result, from_views(result, run, source_kernels=kernels)


def _check_filter(phase: Optional[str], role: Optional[str]) -> None:
    from profiler.errors import BadInput
    from views.vocabulary import KERNEL_ROLES, PHASE_ORDER

    if phase is not None and phase not in PHASE_ORDER:
        raise BadInput(f"--phase {phase}: expected one of {', '.join(PHASE_ORDER)}")
    if role is not None and role not in KERNEL_ROLES:
        raise BadInput(f"--role {role}: expected one of {', '.join(KERNEL_ROLES)}")


def _write_html(output: Path, data, baseline=None, phase=None, role=None, tokens=None,
                base_tokens=None) -> int:
    from profiler.errors import BadInput
    from reports.html import render_report, write_report

    html = render_report(data, baseline, phase=phase, role=role, tokens=tokens, base_tokens=base_tokens)
    try:
        return _print_report(html) if is_stdout(output) else write_report(output, html)
    except OSError as err:
        raise BadInput(f"cannot write {output}: {err.strerror or err}") from None


def _print_report(text: str) -> int:
    """A report written to standard output as it is (`-o -`); returns its size in bytes."""
    data = text.encode("utf-8")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return len(data)


class ViewsFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


@command
def views(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
          phase: Optional[List[str]] = typer.Option(None, "--phase", help="Only this phase (repeatable; "
                                                    "time shares become shares of it)."),
          role: Optional[List[str]] = typer.Option(None, "--role", help="Only this role (repeatable)."),
          kernel: Optional[str] = typer.Option(None, "--kernel",
                                               help="Only kernels whose name matches this regular expression."),
          view: Optional[List[str]] = typer.Option(None, "--view",
                                                   help="Only these views, V1..V8 (repeatable, or V2,V3)."),
          store: Optional[str] = StoreOpt,
          format: ViewsFormat = typer.Option(ViewsFormat.table, "--format")):
    """The eight counter-validated views of a run: the gap per phase and role, then each view."""
    import re
    from rich.console import Console
    from profiler.errors import BadInput
    from profiler.ingest.stores import open_store
    from reports.terminal import kernels_csv, print_views
    from views.registry import compute_views, input_columns, view_ids

    for value in phase or []:
        _check_filter(value, None)
    for value in role or []:
        _check_filter(None, value)
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
    with Console(stderr=True).status("computing the views"):
        kernels = the_store.kernels(row["id"], columns=input_columns(ids))
        result = compute_views(kernels, ids).filter(phase=phase, role=role, kernel=kernel)
    if result.kernels.empty:
        raise BadInput(f"run {row['id']} has no kernels for --phase {phase or 'any'}, --role "
                       f"{role or 'any'}, --kernel {kernel or 'any'}")
    if format == ViewsFormat.json:
        import json
        from views.verdict import verdict

        document = result.to_dict(run=row["id"])
        document["verdict"] = verdict(result).to_dict()
        typer.echo(json.dumps(document, allow_nan=False))
    elif format == ViewsFormat.csv:
        sys.stdout.write(kernels_csv(result))
    else:
        print_views(result, row)


ReportOut = typer.Option(Path("smlens-report.html"), "--output", "-o", help="HTML file to write.")


@command
def report(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
           baseline: Optional[str] = typer.Option(None, "--baseline",
                                                  help="Compare with this run: figures as value (Δ %)."),
           phase: Optional[str] = typer.Option(None, help="Only this phase (time shares become "
                                               "shares of it)."),
           role: Optional[str] = typer.Option(None, help="Only this role."),
           per_token: bool = typer.Option(False, "--per-token", help="Times, bytes and FLOPs per token "
                                          "of each phase (the M of its GEMMs, else the batch and "
                                          "prompt tags): batch 8 against batch 1 on equal terms."),
           output: Path = ReportOut, store: Optional[str] = StoreOpt,
           format: Format = typer.Option(Format.table, "--format")):
    """One self-contained HTML report of a run (or a comparison) that opens offline."""
    import json
    from rich.console import Console
    from profiler.errors import BadInput
    from profiler.ingest.stores import open_store
    from reports.compare import missing_tokens, tokens_per_phase
    from reports.html import filter_input

    _check_filter(phase, role)
    check_output_file(output, "--output", store_path(store), stdout_ok=True)
    the_store = open_store(store_path(store), create=False)
    with Console(stderr=True).status("computing the views"):
        row, _, data = _views_of_run(the_store, run)
        base = _views_of_run(the_store, baseline)[2] if baseline else None
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
    with Console(stderr=True).status(f"writing {output}"):
        size = _write_html(output, data, base, phase, role, tokens, base_tokens)
    to_stdout = is_stdout(output)  # then stdout holds the report alone
    if format == Format.json:
        typer.echo(json.dumps({"report": str(output), "bytes": size, "run": row["id"],
                               "baseline": base.run["id"] if base else None}), err=to_stdout)
    elif not to_stdout:
        typer.echo(f"wrote {output} ({size / 1e6:.1f} MB): open it in a browser")


@command
def demo(output: Path = typer.Option(Path("smlens-demo.html"), "--output", "-o",
                                     help="HTML file to write."),
         format: Format = typer.Option(Format.table, "--format")):
    """No GPU needed: a bundled real H200 capture into a temporary store, its views and its report."""
    import json
    import tempfile
    from importlib.resources import as_file, files
    from profiler.ingest.capture import parse_shapes_file
    from profiler.ingest.stores import open_store
    from rich.console import Console
    from reports.terminal import print_views

    check_output_file(output, "--output")
    bundled = files("profiler") / "data"
    with as_file(bundled / "h200_targeted_raw.csv.gz") as capture, \
            as_file(bundled / "h200_shapes.txt") as shapes, \
            tempfile.TemporaryDirectory(prefix="smlens-demo-") as folder, \
            Console(stderr=True).status("ingesting the bundled H200 capture, computing the views"):
        the_store = open_store(Path(folder) / "store")
        row, _ = the_store.ingest(capture, name="h200-demo", tags={"source": "bundled"},
                                  shapes=parse_shapes_file(shapes))
        run, result, data = _views_of_run(the_store, row["id"])
        size = _write_html(output, data)
    if format == Format.json:
        typer.echo(json.dumps({"report": str(output), "bytes": size,
                               "views": json.loads(result.to_json(run=run["id"]))}))
    else:
        print_views(result, run)
        typer.echo(f"wrote {output} ({size / 1e6:.1f} MB): open it in a browser")


# --- profile, doctor ---------------------------------------------------------------------------

def _profile_metrics(views: Optional[str], metrics: Optional[str]) -> list[str]:
    """`--metrics` as given, else what the chosen views (default all) need."""
    from profiler.errors import BadInput
    from profiler.run.profile import parse_metrics_option
    from views.registry import required_metrics

    explicit = parse_metrics_option(metrics)
    if explicit:
        return list(dict.fromkeys(explicit))
    try:
        return list(required_metrics(views.split(",") if views else None))
    except (KeyError, ValueError) as err:
        raise BadInput(f"--views: {err}") from None


MAX_REPEAT = 100


@command
def profile(ctx: typer.Context,
            program: Optional[List[str]] = typer.Argument(
                None, help="After `--`: a program to profile instead of the built-in decoder workload."),
            workload: str = typer.Option(DEFAULT_WORKLOAD, help="Built-in workload: decoder (layers of a "
                                         "model) or det-gemm (the deterministic GEMMs and baselines "
                                         "on the model's projections, one run per --impl)."),
            model: str = typer.Option(DecoderOptions.model, help="Built-in workload: llama-3.1-8b, "
                                      "llama-3.1-70b, qwen2.5-7b, mistral-7b, gemma-2-9b, tiny."),
            tokens: str = typer.Option(DetGemmOptions.tokens, help="det-gemm: GEMM rows M; M <= 64 "
                                       "is decode, more is prefill."),
            impl: str = typer.Option(DetGemmOptions.impl, help="det-gemm: det, cublas_bf16, "
                                     "layercast, bi_tc, portable."),
            layers: int = typer.Option(DecoderOptions.layers, help="Decoder layers in the stack."),
            batch: str = typer.Option(DecoderOptions.batch, help="Batch size(s), e.g. 1,8,32: one run each."),
            prompt: str = typer.Option(DecoderOptions.prompt, help="Prompt length(s), e.g. 512,2048: "
                                       "one run each."),
            decode_steps: int = typer.Option(DecoderOptions.decode_steps,
                                             help="Decode steps after the prompt."),
            dtype: str = typer.Option(DecoderOptions.dtype, help="bf16, fp16, fp32, or fp8 (e4m3 weights, torch._scaled_mm)."),
            phases: str = typer.Option(DecoderOptions.phases, help="Phases to profile."),
            views: Optional[str] = typer.Option(None, help="Views to collect metrics for, e.g. V1,V3 "
                                                "(default all)."),
            metrics: Optional[str] = typer.Option(None, help="Collect exactly these ncu metrics "
                                                  "(comma-separated, or @FILE) instead of the views'."),
            dedup: bool = typer.Option(DecoderOptions.dedup, help="Profile one layer per phase and "
                                       "one decode step."),
            tp: int = typer.Option(DecoderOptions.tp, "--tp", help="Tensor parallel: ranks, one "
                                   "process and GPU each (the decoder split Megatron-style, or the "
                                   "ranks of a program after `--`)."),
            layer: int = typer.Option(DecoderOptions.layer, help="With dedup: the layer profiled "
                                      "(default the first)."),
            include: Optional[List[str]] = typer.Option(None, help="Program only: `setup` also "
                                                        "profiles what runs outside forwards "
                                                        "(labelled phase setup)."),
            annotate: bool = typer.Option(ProgramOptions.annotate, help="Program only: annotate its "
                                          "torch modules (phases, layers, roles, shapes) with NVTX "
                                          "ranges."),
            cache_control: str = typer.Option("auto", help="auto (cold prefill flushed, the rest "
                                              "not), all or none."),
            graph_profiling: Optional[str] = typer.Option(None, help="node or graph (CUDA graphs)."),
            nvtx_include: Optional[List[str]] = typer.Option(None, help="Program only: ncu NVTX "
                                                             "include filter, repeatable."),
            launch_skip: Optional[int] = typer.Option(None, help="Program only: kernels to skip."),
            launch_count: Optional[int] = typer.Option(None, help="Program only: kernels to profile."),
            kernel_name: Optional[str] = typer.Option(None, help="Program only: ncu --kernel-name."),
            time_limit: Optional[float] = typer.Option(None, help="Seconds; stop and keep what was "
                                                       "profiled (partial)."),
            repeat: int = typer.Option(1, help="Profile each configuration N times (for `smlens gate`)."),
            name: Optional[str] = typer.Option(None, help="Run name (default from the workload)."),
            tag: Optional[List[str]] = typer.Option(None, help="KEY=VALUE, repeatable."),
            plan: bool = typer.Option(False, "--plan", help="Print the ncu commands, metrics and "
                                      "expected kernel count; run nothing."),
            ncu: Optional[str] = typer.Option(None, help="ncu executable (default: PATH)."),
            keep: Optional[Path] = typer.Option(None, help="Keep ncu reports, CSVs and logs here."),
            quiet: bool = typer.Option(False, help="No progress bar."),
            store: Optional[str] = StoreOpt,
            format: Format = typer.Option(Format.table, "--format")):
    """Profile LLM prefill and decode with ncu and store the run (see --plan first)."""
    import json
    from profiler.run import ncu as ncu_mod
    from profiler.run import profile as prof
    from profiler.errors import BadInput
    from profiler.ingest.store import check_name, parse_tags
    from profiler.option_checks import check_folder_option, check_positive_number

    if not 1 <= repeat <= MAX_REPEAT:  # each repeat profiles every configuration again
        raise BadInput(f"--repeat {repeat}: give 1 to {MAX_REPEAT} (the gate's statistics need 3 or more)")
    # what would otherwise fail after minutes of profiling, or quietly mean something else
    check_name(name)
    parse_tags(tag)
    check_positive_number(time_limit, "--time-limit")
    if keep:
        check_folder_option(keep, "--keep")
    # the options the user gave, not their defaults: another workload's are refused
    given = {key: value for key, value in ctx.params.items()
             if getattr(ctx.get_parameter_source(key), "name", "DEFAULT") != "DEFAULT"}
    options = prof.workload_options(workload, program, given)
    plans = prof.build_plans(options, _profile_metrics(views, metrics), cache_control, graph_profiling)
    if plan:
        try:
            ncu_path = ncu_mod.find_ncu(ncu)
        except SmlensError:
            ncu_path = ncu or "ncu"
        if format == Format.json:
            typer.echo(prof.plan_json(plans, ncu_path))
        else:
            typer.echo("\n\n".join(prof.format_plan(p, ncu_path) for p in plans))
        return
    if program:
        from profiler.run.program import check_program
        check_program(program)
    ncu_path = ncu_mod.find_ncu(ncu)
    ncu_mod.require_gpu()
    if getattr(options, "tp", 1) > 1:
        from profiler.run.distributed import require_gpus
        require_gpus(options.tp)
    outcomes = []
    for the_plan, run_name, tags in prof.planned_runs(plans, name, repeat, parse_tags(tag)):
        keep_dir = keep / run_name if keep else None
        outcome = prof.execute(the_plan, store_path(store), run_name, tags, ncu_path, time_limit,
                               keep_dir, progress=not quiet)
        outcomes.append(outcome)
        if format == Format.table and outcome.failure is None:
            typer.echo(prof.summary_line(outcome), err=True)
            for note in outcome.notes:
                typer.echo(f"smlens: note: {note}", err=True)
        if outcome.failure is not None:
            break
    if format == Format.json:
        typer.echo(json.dumps([o.to_dict() for o in outcomes], indent=2))
    failure = outcomes[-1].failure if outcomes else None
    if failure is not None:
        run_id = (outcomes[-1].run or {}).get("id")
        raise SmlensError(f"{failure}; kept {outcomes[-1].kernels} profiled kernel(s) as run "
                          f"{run_id}, marked partial", failure.exit_code)


@command
def doctor(ncu: Optional[str] = typer.Option(None, help="ncu executable (default: PATH)."),
           deep: bool = typer.Option(False, help="Profile one tiny kernel to test counter access."),
           format: Format = typer.Option(Format.table, "--format")):
    """Can this machine profile? ncu, GPU and driver, counter permission, packages."""
    import json
    from profiler.run import doctor as doc

    checks = doc.run_checks(lambda: _profile_metrics(None, None), ncu, deep)
    if format == Format.json:
        typer.echo(json.dumps(doc.to_json(checks), indent=2))
    else:
        from rich.console import Console
        from rich.table import Table
        table = Table("check", "status", "detail", "what to do")
        colour = {"ok": "green", "warn": "yellow", "problem": "red"}
        for c in checks:
            table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix)
        Console().print(table)
    raise typer.Exit(doc.exit_code(checks))


# --- bench: the determinism benchmark ----------------------------------------------------------

bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Deterministic FP32-FMA GEMMs: bits and speed.")
app.add_typer(bench_app, name="bench")


def _bench_command(func):
    return bench_app.command(cls=Command, epilog=example(func.__name__))(guarded(func))


@_bench_command
def determinism(model: str = typer.Option("llama-3.1-8b", help="Model whose four projections to run."),
                batches: str = typer.Option("1..256", help="Batch sizes for batch invariance, e.g. 1..256 or 1,2,4."),
                repeats: int = typer.Option(50, min=1, help="Runs per digest set and timed replays per case."),
                impl: str = typer.Option("det,layercast,cublas_bf16,bi_tc", help="Implementations (det first)."),
                bits: bool = typer.Option(True, help="Check batch invariance, run to run and the CPU reference."),
                layer: bool = typer.Option(True, help="Also time a decoder layer: prefill 2048 + 32 decode steps."),
                timing: bool = typer.Option(True, help="Time each projection (decode M=1,8,16, prefill 2048)."),
                emulate: bool = typer.Option(False, help="Emulate a sample of det's outputs on the CPU at "
                                             "M = 1..2048 and compare the bits."),
                generate: bool = typer.Option(False, help="Greedy-decode a prompt alone and in batches of 2, 8, "
                                              "32 (det, cuBLAS bf16, LayerCast) and compare logits and tokens."),
                seed: int = typer.Option(0, help="Input seed (inputs are drawn on the CPU: the same everywhere)."),
                out: Optional[Path] = typer.Option(None, "--out", help="Write the JSON result here."),
                format: Format = typer.Option(Format.table, "--format")):
    """Bits (batch invariance, run to run, CPU reference) and speed against the baselines, on the GPU."""
    import json
    from profiler.workloads.deterministic import bench
    from profiler.workloads.deterministic.kernels import IMPLS
    from reports.bench import render_result
    impls = [i.strip() for i in impl.split(",") if i.strip()]
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        raise SmlensError(f"--impl: unknown {', '.join(bad) or 'empty list'}; choose from {', '.join(IMPLS)}")
    batch_list = bench.parse_batches(batches)
    from profiler.workloads.models import get_model
    get_model(model)  # unknown model: a clear error before the GPU is touched
    if out is not None:
        check_output_file(out, "--out")
    from rich.console import Console
    err = Console(stderr=True)
    with err.status("starting") as status:
        result = bench.run_determinism(model, batch_list, repeats, impls, layer=layer, timing=timing, seed=seed,
                                       bits=bits, emulate=emulate, generate=generate,
                                       progress=lambda m: status.update(m), command=" ".join(sys.argv))
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    if format == Format.json:
        typer.echo(json.dumps(result))
    else:
        render_result(result)


@_bench_command
def compare(a: Path = typer.Argument(..., help="Result of `smlens bench determinism --out` on one GPU."),
            b: Path = typer.Argument(..., help="The same on another GPU (or software stack)."),
            impl: str = typer.Option("det", help="Implementations whose bits decide the exit code."),
            format: Format = typer.Option(Format.table, "--format")):
    """Did two runs give the same bits? Names every differing case. Exit 0 when the bits of every
    case of --impl match, 1 when some differ, 2 when a case of --impl could not be compared."""
    import json
    from profiler.workloads.deterministic import bench
    from reports.bench import render_comparison
    impls = [i.strip() for i in impl.split(",") if i.strip()]
    if not impls:
        raise SmlensError("--impl is empty: give the implementations whose bits decide, e.g. --impl det")
    cmp = bench.compare_results(bench.load_result(a), bench.load_result(b))
    if format == Format.json:
        typer.echo(json.dumps(cmp))
    else:
        render_comparison(cmp)
    code = bench.compare_exit_code(cmp, impls)
    unjudged = [r["status"] for r in cmp["rows"] if r["impl"] in impls
                and r["status"] not in ("same bits", "different bits")]
    if code == 2 and len(unjudged) < sum(r["impl"] in impls for r in cmp["rows"]):
        raise SmlensError(f"{len(unjudged)} case(s) of {', '.join(impls)} in {a} could not be compared "
                          f"({', '.join(sorted(set(unjudged)))}): the bits are not known to match")
    if code == 2:
        raise SmlensError(f"{a} and {b} hold no comparable case of {', '.join(impls)} (missing, other inputs "
                          "or no digest in common); run both with the same --seed and --impl")
    if code:
        raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
