"""What a person reads in a terminal: --help in words with an example, --version, `runs` and `show`
that cut no name or digest and order phases as a request meets them, the gate's findings with the
group in columns."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from profiler.cli_help import EXAMPLES
from reports.runs import print_run, print_runs, run_summary
from tests.cli import smlens
from tests.conftest import DATA

COMMANDS = [["ingest"], ["runs"], ["show"], ["rm"], ["gate"], ["views"], ["report"], ["demo"], ["profile"],
            ["doctor"], ["bench", "determinism"], ["bench", "compare"], ["store", "check"], ["store", "repair"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_names_values_in_words_and_gives_an_example(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = smlens(*command, "--help")
    assert code == 0
    assert not re.search(r"<(list\[|str>|bool>|int>|float>|path>|Path>)", out), out  # no Python types
    assert "\u2026" not in out  # no option name cut to fit a panel
    assert "Example:" in out and EXAMPLES[" ".join(command)] in out


def test_long_option_names_stay_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = smlens("ingest", "--help")
    assert "--roles-from-eager-order / --no-roles-from-eager-order" in out
    assert "--store PATH" in out and "--format table|json" in out
    _, out, _ = smlens("report", "--help")
    assert "--per-token" in out


def test_version():
    code, out, _ = smlens("--version")
    assert code == 0 and re.fullmatch(r"smlens \S+\n", out)


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("runs") / "store"
    for run in ("gate-b1-r1", "gate-b1-r2", "gate-b4-r1"):
        code, _, err = smlens("ingest", DATA / "h200_runs" / f"{run}.csv.gz", "--store", store)
        assert code == 0, err
    code, _, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", store, "--name", "targeted")
    assert code == 0, err
    return store


def _store(path):
    from profiler.ingest.store import Store

    return Store(path, create=False)


def test_runs_keeps_every_name_whole_at_80_columns(runs_store):
    console = Console(width=80, record=True, file=io.StringIO())
    print_runs(_store(runs_store).runs(), console)
    text = console.export_text()
    for name in ("gate-b1-r1.csv.gz", "gate-b1-r2.csv.gz", "gate-b4-r1.csv.gz", "targeted"):
        assert name in text
    assert "\u2026" not in text and max(len(line) for line in text.splitlines()) <= 80


def test_show_orders_phases_as_a_request_meets_them_with_shares(runs_store):
    store = _store(runs_store)
    row = store.run("targeted")
    summary = run_summary(row, store.kernels("targeted", columns=["phase", "role", "gpu__time_duration.sum"]), 1)
    phases = list(dict.fromkeys(g["phase"] for g in summary["phases"]))
    assert phases == ["cold_prefill", "warm_prefill", "decode", "other"]
    assert sum(g["time_share_pct"] for g in summary["phases"]) == pytest.approx(100)
    console = Console(width=80, record=True, file=io.StringIO())
    print_run(summary, console)
    text = console.export_text()
    assert re.search(rf"^sha256\s+{row['sha256']}\s*$", text, re.M)  # the digest on one line
    decode = next(line for line in text.splitlines() if line.startswith("decode "))
    assert decode.split() == ["decode", "122", "817.4", "30.6"]  # kernels, µs, share of the run
    assert "other (setup)" in text


def test_gate_findings_put_phase_role_and_family_in_columns():
    from profiler.ingest.capture import read_capture
    from reports.gate import Run, run_gate
    from reports.gate_output import render_table
    from views.registry import compute_views

    runs = {name: Run(name, compute_views(read_capture(DATA / "h200_runs" / f"{name}.csv.gz").kernels).kernels)
            for name in ("gate-b1-r1", "gate-b4-r1")}
    result = run_gate([runs["gate-b1-r1"]], [runs["gate-b4-r1"]])
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(render_table(result, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80 and "\u2026" not in text
    assert re.search(r"^status\s+phase\s+role\s+family\s+baseline\s+current\s+change", text, re.M)
    # each rule heads its own table with its threshold; a row is one line, its cells whole
    assert re.search(r"^dram_bytes \(worse: \+10% and 1 MB\)", text, re.M)
    assert re.search(r"^regression\s+decode\s+attention\s+cudnn_sdpa\s+\S+ kB\s+\S+ MB\s+\+\S+%$", text, re.M)
