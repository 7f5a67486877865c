"""`smlens doctor` in the terminal: each check, its status in colour, and what to do."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

COLOURS = {"ok": "green", "warn": "yellow", "problem": "red"}


def print_checks(checks: list[dict], console: Console | None = None) -> None:
    """The checks as `smlens doctor --format json` gives them (name, status, detail, fix)."""
    table = Table("check", "status", "detail", "what to do")
    for check in checks:
        table.add_row(check["name"], f"[{COLOURS[check['status']]}]{check['status']}[/]", check["detail"],
                      check["fix"])
    (console or Console()).print(table)
