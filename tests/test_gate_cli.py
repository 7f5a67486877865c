"""`smlens gate` on the command line: exit codes, files written for CI, inputs from files and the store."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.cli import smlens
from tests.conftest import DATA

# The rules the targeted and sections captures can both be judged on (sections lacks the tensor,
# DRAM and stall counters).
SHARED_RULES = """
[defaults]
include_default_rules = false

[[rule]]
figure = "time_ns"
worse = "higher"
relative_pct = 10
min_effect = 2000

[[rule]]
figure = "achieved_occupancy_pct"
worse = "lower"
relative_pct = 10
min_effect = 5
"""


def gate(*args):
    return smlens("gate", *args)


@pytest.fixture()
def shared_rules(tmp_path):
    path = tmp_path / "gate.toml"
    path.write_text(SHARED_RULES)
    return path


def test_two_capture_files_of_one_workload_pass_and_ci_files_are_written(tmp_path, shared_rules):
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    code, out, err = gate("--baseline", DATA / "targeted_raw.csv", "--current", DATA / "sections_raw.csv",
                            "--rules", shared_rules, "--junit", junit, "--markdown", markdown,
                            "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["verdict"] == "pass" and document["exit_code"] == 0
    assert document["baseline_runs"] == [str(DATA / "targeted_raw.csv")]
    assert {c["rule"] for c in document["comparisons"]} == {"time_ns", "achieved_occupancy_pct"}
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("errors") == "0"
    assert "## smlens gate: ✅ pass (exit 0)" in markdown.read_text()


def test_missing_metrics_exit_2_with_the_table_naming_them(tmp_path):
    code, out, err = gate("--baseline", DATA / "targeted_raw.csv", "--current", DATA / "sections_raw.csv")
    assert code == 2
    # sections_raw has no tensor-op counters (its DRAM bytes come from the MemoryWorkloadAnalysis rate)
    assert "gate: could not judge" in out and "useful_tensor_pct is n/a on the current side only" in out
    assert "dram_bytes is n/a" not in out
    assert "Traceback" not in out + err


def test_a_missing_file_exits_2_with_one_line_and_still_writes_the_ci_files(tmp_path):
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    code, out, err = gate("-b", DATA / "targeted_raw.csv", "-c", tmp_path / "nope.csv",
                            "--junit", junit, "--markdown", markdown)
    assert code == 2
    assert err.strip().splitlines() == [f"smlens: --current {tmp_path / 'nope.csv'}: no such file"]
    errors = list(ET.parse(junit).getroot().iter("error"))
    assert len(errors) == 1 and "no such file" in errors[0].get("message")
    assert "could not judge" in markdown.read_text()


def test_a_broken_capture_and_a_broken_rules_file_exit_2(tmp_path):
    broken = tmp_path / "broken.csv"
    broken.write_text("this is not,an ncu capture\n1,2\n")
    code, _, err = gate("-b", broken, "-c", broken)
    assert code == 2 and err.startswith("smlens: ") and len(err.strip().splitlines()) == 1
    rules = tmp_path / "gate.toml"
    rules.write_text('[[rule]]\nfigure = "time_ns"\nworse = "slower"\n')
    code, _, err = gate("-b", DATA / "targeted_raw.csv", "-c", DATA / "targeted_raw.csv", "--rules", rules)
    assert code == 2 and str(rules) in err and "`worse` must be one of" in err


def test_no_baseline_given_exits_2():
    code, _, err = gate("--current", DATA / "targeted_raw.csv")
    assert code == 2 and "no baseline given" in err


def test_stored_runs_by_name_and_tag(tmp_path, shared_rules):
    store = tmp_path / "store"
    for file, name in (("targeted_raw.csv", "main-1"), ("sections_raw.csv", "pr-1")):
        code, _, err = smlens("ingest", DATA / file, "--store", store, "--name", name,
                              "--tag", f"branch={name.split('-')[0]}")
        assert code == 0, err
    code, out, err = gate("--baseline", "tag:branch=main~3", "--current", "pr-1", "--store", store,
                            "--rules", shared_rules, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["baseline_runs"][0].startswith("main-1 (") and document["current_runs"][0].startswith("pr-1 (")
    code, _, err = gate("--baseline", "tag:branch=release", "--current", "pr-1", "--store", store)
    assert code == 2 and "no run tagged branch=release" in err
    code, _, err = gate("--baseline", "main-2", "--current", "pr-1", "--store", store)
    assert code == 2 and "no run 'main-2'" in err


def test_a_quoted_glob_names_every_matching_capture_and_one_matching_none_exits_2():
    runs = DATA / "h200_runs"
    code, out, err = gate("--baseline", runs / "gate-b4-r*.csv.gz", "--current", runs / "gate-b4-r1.csv.gz",
                            "--format", "json")
    assert code == 0, err
    assert json.loads(out)["baseline_runs"] == [str(runs / f"gate-b4-r{i}.csv.gz") for i in (1, 2, 3)]
    code, _, err = gate("--baseline", runs / "gate-b9-r*.csv.gz", "--current", runs / "gate-b4-r1.csv.gz")
    assert code == 2 and err.strip() == f"smlens: --baseline {runs / 'gate-b9-r*.csv.gz'}: no file matches"
