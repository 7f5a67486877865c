"""What each test costs, measured (tests/durations.json), and what the suite does with it: the `slow`
marker (`bash scripts/test.sh --quick` leaves those out) and the order two xdist workers take the
work in. `bash scripts/test.sh --record-durations` runs the whole suite and writes the record again.

The record holds, per test function, the longest parameter's setup and its whole time (setup, call,
teardown), and its parameters' whole times summed, in seconds, as measured under `-n 2` on the
2-core machine.
A test not in it yet (added since) counts as quick and cheap until the record is written again.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).parent / "durations.json"
SLOW_S = 1.5  # the `slow` marker: over this on the 2-core machine
PARAMETERS_S = 3.0  # a function whose parameters together take longer keeps only its first in --quick
UNKNOWN_S = 0.1
FIRST_RESULTS = 72  # pytest's first line of progress: a dot a result


def function_key(item) -> str:
    """`tests/test_x.py::test_f`: a test function, whatever its parameters and xdist group."""
    return _function(item.nodeid)


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0].split("@", 1)[0]


def load_record(path: Path = RECORD) -> dict[str, dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def uses_a_module_fixture(item) -> bool:
    definitions = getattr(item, "_fixtureinfo", None)
    return definitions is not None and any(
        defs and defs[-1].scope == "module" for defs in definitions.name2fixturedefs.values())


def mark_and_order(items: list, record: dict[str, dict], under_xdist: bool,
                   first_results: int = FIRST_RESULTS) -> None:
    """Mark the slow tests; group a file's tests that share a module-scoped fixture on one worker;
    under xdist, order the work longest first (the group's sum, or the test's own time), after the
    `first_results` cheapest single tests.

    A module fixture's cost lands on the first test that sets it up, and which one that is depends
    on the selection: in a file where some test's setup took over SLOW_S, every test sharing its
    module fixtures is slow, so that `--quick` never pays the fixture for one cheap test. A function
    whose parameters together took over PARAMETERS_S runs its first parameter in `--quick`.
    """
    heavy_setup_files = {key.split("::", 1)[0] for key, cost in record.items() if cost["setup_s"] > SLOW_S}
    unit_cost: dict[str, float] = defaultdict(float)
    unit_of = {}
    seen_functions = set()
    for item in items:
        key = function_key(item)
        cost = record.get(key, {})
        shared = uses_a_module_fixture(item)
        path = item.nodeid.split("::", 1)[0]
        # a check over every committed capture: its first capture in --quick, all of them in the suite
        later_parameter = key in seen_functions and cost.get("params_s", 0) > PARAMETERS_S
        seen_functions.add(key)
        if cost.get("total_s", 0) > SLOW_S or later_parameter or (shared and path in heavy_setup_files):
            item.add_marker(pytest.mark.slow)
        if shared:
            item.add_marker(pytest.mark.xdist_group(Path(path).name))
        unit_of[item.nodeid] = unit = path if shared else item.nodeid
        unit_cost[unit] += cost.get("total_s", UNKNOWN_S)
    if under_xdist:  # each worker collects: the same order on both (scripts/test.sh: --no-loadscope-reorder)
        items.sort(key=lambda item: -unit_cost[unit_of[item.nodeid]])
        # pytest shows a result when a test ends, and the longest work takes minutes: the cheapest
        # single tests first, for a line of progress within seconds of the start
        cheapest = sorted((item for item in items if unit_of[item.nodeid] == item.nodeid),
                          key=lambda item: unit_cost[item.nodeid])[:first_results]
        first = {item.nodeid for item in cheapest}
        items[:] = [item for item in items if item.nodeid in first] + [item for item in items if item.nodeid not in first]


class DurationRecorder:
    """`--record-durations`: each test function's longest setup and whole time, into RECORD."""

    def __init__(self, path: Path = RECORD):
        self.path = path
        self.phases: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.skipped: set[str] = set()

    def pytest_runtest_logreport(self, report):
        self.phases[report.nodeid][report.when] += report.duration
        if report.skipped:  # a test skipped here (no vLLM, no GPU) costs nothing here, not everywhere
            self.skipped.add(report.nodeid)

    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):
            return  # the controller writes what the workers reported
        # what was not run (or skipped) this time keeps its old figures, while the test is there
        root = session.config.rootpath
        record = {key: cost for key, cost in load_record(self.path).items() if names_a_test(root, key)}
        measured = set()
        for nodeid, phases in self.phases.items():
            if nodeid in self.skipped:
                continue
            key = _function(nodeid)
            total = sum(phases.values())
            if key not in measured:
                measured.add(key)
                record[key] = {"setup_s": 0.0, "total_s": 0.0, "params_s": 0.0}
            known = record[key]
            known["setup_s"] = max(known["setup_s"], round(phases.get("setup", 0.0), 2))
            known["total_s"] = max(known["total_s"], round(total, 2))
            known["params_s"] = round(known["params_s"] + total, 2)
        write_record(record, self.path)


def names_a_test(root: Path, key: str) -> bool:
    """Whether `tests/test_x.py::test_f` (or `::Class::test_f`) is still defined in its file."""
    path, function = key.split("::", 1)
    file = root / path
    return file.exists() and f"def {function.split('::')[-1]}(" in file.read_text(encoding="utf-8")


def write_record(record: dict[str, dict], path: Path = RECORD) -> None:
    """One test function a line, sorted: a new measurement's diff shows what changed."""
    lines = [f"{json.dumps(key)}: {json.dumps(cost)}" for key, cost in sorted(record.items())]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
