"""examples/github-actions-gpu.yml: a workflow GitHub can load, whose smlens commands and options exist."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from profiler.cli import app

WORKFLOW = Path(__file__).resolve().parent.parent / "examples" / "github-actions-gpu.yml"


def smlens_calls(text: str) -> list[list[str]]:
    """Every `smlens ...` command line of the workflow, continuation lines joined, as words."""
    joined = re.sub(r"\\\n\s*", " ", text)
    calls = []
    for line in joined.splitlines():
        if re.match(r"\s*(#|-?\s*name:)", line):  # comments and step names are prose
            continue
        for match in re.finditer(r"(?:^|[\s(|$])smlens\s+([^|;)]*)", line):
            words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", match.group(1)), comments=True)
            calls.append(words)
    return calls


def test_workflow_smlens_commands_and_options_exist():
    command = typer.main.get_command(app)
    calls = smlens_calls(WORKFLOW.read_text())
    used = {words[0] for words in calls}
    assert {"doctor", "profile", "gate", "report", "runs"} <= used
    for words in calls:
        sub = command.commands[words[0]]
        known = {opt for param in sub.params for opt in getattr(param, "opts", [])}
        flags = [w.split("=")[0] for w in words[1:] if w.startswith("-")]
        unknown = [f for f in flags if f not in known]
        assert not unknown, f"smlens {words[0]}: {unknown}"


def test_workflow_gates_pull_requests_against_main_and_uploads_the_files():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"push", "pull_request"}
    steps = workflow["jobs"]["profile-and-gate"]["steps"]
    gate = next(s for s in steps if "smlens gate" in s.get("run", ""))
    assert gate["if"] == "github.event_name == 'pull_request'"
    assert "tag:branch=main~3" in gate["run"] and "--junit gate-junit.xml" in gate["run"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    assert set(upload["with"]["path"].split()) == {"report.html", "gate.md", "gate-junit.xml"}
