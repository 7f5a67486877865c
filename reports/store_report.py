"""Terminal form of `smlens store check` and `smlens store repair`."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from reports.tables import NOTE_INDENT as INDENT, broken_lines, output_console


def print_store_check(report: dict, console: Console | None = None) -> None:
    console = console or output_console()
    runs = "unknown" if report["runs"] is None else report["runs"]
    if report["ok"]:
        console.print(f"{escape(report['store'])}: no problems ({runs} runs)")
    else:
        # each problem its kind and file on a line, what and the repair indented below: a file's
        # path breaks between folders, never inside a name (a table's column cut `kernels.parquet`)
        console.print(Text(f"{report['store']}: {len(report['problems'])} problem(s)", style="bold"))
        for problem in report["problems"]:
            where = broken_lines(problem["path"], max(1, console.width - len(problem["kind"]) - 2), after="/")
            console.print(Text(f"{problem['kind']}  {where[0]}"), crop=False)
            for line in where[1:]:
                console.print(Text(" " * (len(problem["kind"]) + 2) + line), crop=False)
            for text, style in ((problem["detail"], ""), (f"smlens store repair: {problem['repair']}", "dim")):
                for line in broken_lines(text, max(1, console.width - len(INDENT)), after=" /"):
                    console.print(Text(INDENT + line, style=style), crop=False)
    for entry in report.get("in_progress", []):
        console.print(f"in progress: {escape(entry)} (a running command's)")


def print_store_repair(report: dict, console: Console | None = None) -> None:
    console = console or output_console()
    for action in report["actions"]:
        console.print(escape(action))
    if not report["actions"]:
        console.print(f"{escape(report['store'])}: nothing to repair")
    for problem in report.get("problems", []):
        console.print(f"[red]still wrong[/]: {escape(problem['path'])}: {escape(problem['detail'])}")
    if report["ok"]:
        console.print(f"{escape(report['store'])}: consistent ({report['runs']} runs)")
