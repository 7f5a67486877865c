"""`smlens(...)` for tests: the command line run in-process, as (exit code, stdout, stderr)."""
from __future__ import annotations

from typer.testing import CliRunner

from profiler.cli import app

_runner = CliRunner()


def smlens(*args, input: str | None = None) -> tuple[int, str, str]:
    """`smlens ARGS...`; each argument may be a Path or a number; `input`: what stdin reads."""
    result = _runner.invoke(app, [str(a) for a in args], input=input)
    return result.exit_code, result.stdout, result.stderr
