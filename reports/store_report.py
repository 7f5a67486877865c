"""Terminal form of `smlens store check` and `smlens store repair`."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def print_store_check(report: dict, console: Console | None = None) -> None:
    console = console or Console()
    runs = "unknown" if report["runs"] is None else report["runs"]
    if report["ok"]:
        console.print(f"{escape(report['store'])}: no problems ({runs} runs)")
    else:
        table = Table(title=f"{escape(report['store'])}: {len(report['problems'])} problem(s)",
                      title_justify="left")
        for column in ("problem", "where", "what", "`smlens store repair`"):
            table.add_column(column, overflow="fold")
        for problem in report["problems"]:
            table.add_row(problem["kind"], escape(problem["path"]), escape(problem["detail"]),
                          escape(problem["repair"]))
        console.print(table)
    for entry in report.get("in_progress", []):
        console.print(f"in progress: {escape(entry)} (a running command's)")


def print_store_repair(report: dict, console: Console | None = None) -> None:
    console = console or Console()
    for action in report["actions"]:
        console.print(escape(action))
    if not report["actions"]:
        console.print(f"{escape(report['store'])}: nothing to repair")
    for problem in report.get("problems", []):
        console.print(f"[red]still wrong[/]: {escape(problem['path'])}: {escape(problem['detail'])}")
    if report["ok"]:
        console.print(f"{escape(report['store'])}: consistent ({report['runs']} runs)")
