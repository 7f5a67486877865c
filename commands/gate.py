"""`smlens gate`: current runs against baseline runs, with the gate's error policy: a run or a
rules file that cannot be read is still a verdict CI must see (exit 2, the reports written)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console

from commands.common import print_report, say, store_path, working, write_text
from profiler.errors import BadInput, SmlensError, internal_error
from profiler.gate_inputs import load_runs
from profiler.gate_match import mismatches
from profiler.ingest.shapes import parse_shapes_file
from profiler.option_checks import check_output_file, is_stdout, read_option_file
from reports.formats import Format
from reports.gate import GateResult, RulesError, Run, cannot_judge, load_rules, run_gate
from reports.gate_output import render_table, to_junit, to_markdown
from reports.terminal import output_console
from views.registry import compute_views


def gate_runs(refs: Optional[Sequence[str]], side: str, store, shapes: Optional[dict],
              identities: list) -> list[Run]:
    """The runs one side of the gate names, each with its views' per-kernel figures; `identities`
    receives what each run was measured on (gate_match)."""
    return [Run(label, compute_views(kernels).kernels)
            for label, kernels in load_runs(refs, side, store, shapes, identities)]


def judge(baseline: Optional[Sequence[str]], current: Optional[Sequence[str]], rules: Optional[Path] = None,
          shapes: Optional[Path] = None, allow_mismatch: bool = False,
          store: Optional[str] = None) -> tuple[GateResult, Optional[str]]:
    """The gate's verdict, and what kept it from judging (a run or rules that cannot be read, runs
    of different devices or workloads, a bug): then the verdict is could not judge, with that reason."""
    try:
        if rules:
            read_option_file(rules, "--rules")
        rule_set = load_rules(rules) if rules else None
        shape_map = parse_shapes_file(shapes) if shapes else None
        identities: tuple[list, list] = ([], [])
        with working("reading the runs and computing their views"):
            base_runs = gate_runs(baseline, "baseline", store_path(store), shape_map, identities[0])
            current_runs = gate_runs(current, "current", store_path(store), shape_map, identities[1])
        differences = mismatches(*identities)
        if differences and not allow_mismatch:
            raise BadInput("the runs do not compare like with like: " + "; ".join(differences)
                           + "; compare runs of one device and workload, or pass --allow-mismatch")
        result = run_gate(base_runs, current_runs, rule_set)
        result.warnings.extend(f"compared despite --allow-mismatch: {d}" for d in differences)
        return result, None
    except (SmlensError, RulesError) as err:
        error = str(err)
    except Exception as err:  # a bug is no verdict either: exit 2 with the reports, not 1
        error = internal_error(err)
    return cannot_judge(error, baseline or [], current or []), error


def gate(baseline: Optional[Sequence[str]], current: Optional[Sequence[str]], rules: Optional[Path] = None,
         markdown: Optional[Path] = None, junit: Optional[Path] = None, shapes: Optional[Path] = None,
         allow_mismatch: bool = False, store: Optional[str] = None, format: Format = Format.table) -> int:
    """Judge, write the Markdown and JUnit reports (a file, or `-` for stdout, which then holds
    the report alone), print the verdict; the exit code: 0 pass, 1 regression, 2 could not judge
    (raised as the SmlensError that says why, after the reports are written)."""
    for path, option in ((markdown, "--markdown"), (junit, "--junit")):
        if path:  # where the verdict goes must be sound before there is one
            check_output_file(path, option, store_path(store), stdout_ok=True)
    if is_stdout(markdown) and is_stdout(junit):
        raise BadInput("--markdown and --junit both name standard output: give one of them a file")
    to_stdout = is_stdout(markdown) or is_stdout(junit)
    result, error = judge(baseline, current, rules, shapes, allow_mismatch, store)
    for path, text in ((markdown, to_markdown), (junit, to_junit)):
        if is_stdout(path):
            print_report(text(result))
        elif path:
            write_text(path, text(result))
    if format == Format.json:
        say(json.dumps(result.to_json(), indent=2), err=to_stdout)
    else:
        console = Console(stderr=True) if to_stdout else output_console()
        console.print(render_table(result, width=console.width))
    if error is not None:  # exit 2 whatever the cause: the gate's code for "could not judge"
        raise SmlensError(error, exit_code=2)
    return result.exit_code
