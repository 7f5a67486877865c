"""The application layer (commands/) called directly, as the CLI calls it, on the committed
H200 captures; and the CLI over it kept thin: each command a few lines over one call."""
from __future__ import annotations

import ast
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import commands
from profiler import cli
from profiler.errors import BadInput, SmlensError
from reports.formats import Format, ViewsFormat
from tests.cli import smlens
from tests.conftest import DATA

RUNS = DATA / "h200_runs"
B1 = [str(RUNS / f"gate-b1-r{i}.csv.gz") for i in (1, 2, 3)]
B4 = [str(RUNS / f"gate-b4-r{i}.csv.gz") for i in (1, 2, 3)]


def test_ingest_show_and_remove_a_real_capture(tmp_path, capsys, monkeypatch):
    store = str(tmp_path / "store")
    rows = commands.store.ingest([RUNS / "gate-b1-r1.csv.gz"], store, name="b1", tags=["batch=1"],
                                 format=Format.json)
    printed = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["kernel_count"], r["device_name"], r["new"]) for r in rows] == [("b1", 18, "NVIDIA H200", True)]
    assert printed[0]["tags"] == {"batch": "1"} and printed[0]["id"] == rows[0]["id"]
    again = commands.store.ingest([RUNS / "gate-b1-r1.csv.gz"], store, name="b1", format=Format.table)
    assert again[0]["new"] is False and "already in the store as run" in capsys.readouterr().err
    summary = commands.store.show_run("b1", store, Format.json)
    decode = {p["role"]: p for p in summary["phases"] if p["phase"] == "decode"}
    assert decode["gate_up_proj"]["time_ns"] == 58624.0 and decode["elementwise"]["kernels"] == 11
    assert sum(p["kernels"] for p in summary["phases"]) == 18
    # no way to confirm (a script): nothing removed; at a terminal, only after a yes
    with pytest.raises(BadInput, match="standard input is not a terminal"):
        commands.store.remove_runs(["b1"], store, confirm=lambda question: True)
    monkeypatch.setattr(commands.store, "stdin_is_terminal", lambda: True)
    asked = []
    with pytest.raises(BadInput, match="not confirmed"):
        commands.store.remove_runs(["b1"], store, confirm=lambda question: asked.append(question))
    assert asked == ["remove this run?"] and len(commands.store.list_runs(store)) == 1
    removed = commands.store.remove_runs(["b1"], store, yes=True)
    assert [r["name"] for r in removed] == ["b1"]
    assert commands.store.check_store(store, Format.json) == 0


def test_the_gate_judges_the_committed_runs():
    result, error = commands.gate.judge(B1[:2], B1[2:])
    assert error is None and (result.verdict, result.exit_code) == ("pass", 0)
    assert result.baseline_runs == B1[:2] and result.current_runs == B1[2:]
    # batch 4 against batch 1 is another workload: refused, with the shape that differs
    result, error = commands.gate.judge(B1, B4)
    assert result.verdict == "could not judge" and result.exit_code == 2
    assert "do not compare like with like" in error and "B=1 H=32 Sq=1 Skv=130 D=128 vs B=4" in error
    result, error = commands.gate.judge(B1, B4, allow_mismatch=True)
    assert error is None and result.verdict == "regression" and result.exit_code == 1
    assert any("compared despite --allow-mismatch" in w for w in result.warnings)


def test_a_gate_that_cannot_judge_still_writes_its_reports(tmp_path):
    markdown, junit = tmp_path / "gate.md", tmp_path / "junit.xml"
    with pytest.raises(SmlensError) as raised:
        commands.gate.gate([str(tmp_path / "missing.csv.gz")], B1[:1], markdown=markdown, junit=junit,
                           store=str(tmp_path / "store"))
    assert raised.value.exit_code == 2 and "missing.csv.gz" in str(raised.value)
    assert "could not judge" in markdown.read_text() and "missing.csv.gz" in markdown.read_text()
    assert "<testsuites" in junit.read_text()


def test_views_as_csv_and_json_from_the_library(tmp_path, capsys):
    store = str(tmp_path / "store")
    commands.store.ingest([RUNS / "gate-b1-r1.csv.gz"], store, name="b1", format=Format.json)
    capsys.readouterr()
    commands.views.show_views("b1", role=["gate_up_proj"], store=store, format=ViewsFormat.csv)
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table["role"]) == ["gate_up_proj"] and " > " in table["nvtx_stack"][0]  # the stack joined
    commands.views.show_views("b1", store=store, format=ViewsFormat.json)
    document = json.loads(capsys.readouterr().out)
    assert len(document["kernels"]) == 18 and document["verdict"]["phases"][0]["phase"] == "decode"
    with pytest.raises(BadInput, match="--phase warmup: expected one of"):
        commands.views.show_views("b1", phase=["warmup"], store=store)


def test_the_profile_request_is_built_in_one_place(capsys):
    request = commands.profile.ProfileRequest.from_options(
        {"batch": "1,8", "tag": ["owner=ci"], "views": None, "repeat": 2, "plan": True, "model": "tiny",
         "format": Format.json}, given={"batch", "model"})
    assert request.given == {"batch": "1,8", "model": "tiny"} and request.tag == ("owner=ci",)
    assert request.views is None and request.repeat == 2 and request.plan
    commands.profile.profile(request)
    plans = json.loads(capsys.readouterr().out)
    assert [p["title"].split(", ")[1] for p in plans] == ["batch 1", "batch 8"]
    with pytest.raises(BadInput, match="--impl is for --workload det-gemm"):
        commands.profile.profile(commands.profile.ProfileRequest(plan=True, given={"impl": "det"}))
    with pytest.raises(BadInput, match="--repeat 0"):
        commands.profile.profile(commands.profile.ProfileRequest(plan=True, repeat=0))


# --- the CLI stays thin ---------------------------------------------------------------------------

def _command_functions() -> list[ast.FunctionDef]:
    """The functions cli.py registers as commands (`@command`, or `command(func, ...)`)."""
    tree = ast.parse(Path(cli.__file__).read_text(encoding="utf-8"))
    registered = {node.args[0].id for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and getattr(node.func, "id", None) == "command" and node.args
                  and isinstance(node.args[0], ast.Name)}
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and (node.name in registered or any(getattr(d, "id", None) == "command" for d in node.decorator_list))]


def test_every_command_is_a_few_lines_over_one_call_of_the_application_layer():
    found = _command_functions()
    assert {f.name for f in found} >= {"ingest", "runs", "show", "rm", "store_check", "store_repair", "gate",
                                       "views", "report", "demo", "profile", "doctor", "determinism", "compare"}
    for func in found:
        body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        calls = [ast.unparse(n.func) for s in body for n in ast.walk(s) if isinstance(n, ast.Call)]
        assert len(body) <= 2, f"{func.name}: {len(body)} statements; move the work to commands/"
        assert any(re.fullmatch(r"commands\.\w+\.\w+", c) for c in calls), f"{func.name} calls {calls}"
        assert not any(isinstance(n, (ast.Import, ast.ImportFrom, ast.Try, ast.If, ast.For, ast.With))
                       for s in body for n in ast.walk(s)), func.name


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_top_level_help_gives_each_command_summary_whole(columns, monkeypatch):
    """click cut each summary to one line ending in "...", even at 200 columns."""
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = smlens("--help")
    listed = out.split("Commands:")[1]
    assert code == 0 and "..." not in listed
    flat = " ".join(listed.split())
    for name in ("rm", "gate", "views", "report", "demo", "profile", "doctor"):
        first_sentence = re.split(r"(?<=[.?])\s", " ".join(cli.app.registered_commands[
            [c.callback.__name__ for c in cli.app.registered_commands].index(name)].callback.__doc__.split()))[0]
        assert f"{name} {first_sentence}" in flat, name


@pytest.mark.parametrize("words", [["store", "check"], ["store", "repair"]])
def test_store_check_and_repair_help_give_an_example(words):
    code, out, _ = smlens(*words, "--help")
    assert code == 0 and "Example:" in out and f"smlens {' '.join(words)}" in out.split("Example:")[1]
