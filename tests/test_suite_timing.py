"""The suite's own plan (tests/suite_timing.py): which tests are slow, which stay on one worker, the
order the workers take them in, and the record `--record-durations` writes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests import suite_timing


class FakeItem:
    """What mark_and_order reads of a collected test: its id, its fixtures' scopes, its markers."""

    def __init__(self, nodeid: str, module_fixture: bool = False):
        self.nodeid = nodeid
        scope = "module" if module_fixture else "function"
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={"f": [SimpleNamespace(scope=scope)]})
        self.markers = []

    def add_marker(self, marker):
        self.markers.append((marker.name, marker.args))

    @property
    def marker_names(self) -> set:
        return {name for name, _ in self.markers}


RECORD = {
    "tests/test_a.py::test_cheap": {"setup_s": 0.0, "total_s": 0.2},
    "tests/test_a.py::test_long": {"setup_s": 0.1, "total_s": 9.0},
    "tests/test_b.py::test_first": {"setup_s": 6.0, "total_s": 6.5},   # paid b's module fixture
    "tests/test_b.py::test_second": {"setup_s": 0.0, "total_s": 0.3},  # shares it
    "tests/test_b.py::test_alone": {"setup_s": 0.0, "total_s": 0.3},   # uses none
    "tests/test_c.py::test_each": {"setup_s": 0.0, "total_s": 1.0, "params_s": 4.0},  # 4 captures, 1 s each
}


def _items():
    return [FakeItem("tests/test_a.py::test_cheap"), FakeItem("tests/test_a.py::test_long[x]"),
            FakeItem("tests/test_a.py::test_long[y]"), FakeItem("tests/test_b.py::test_first", True),
            FakeItem("tests/test_b.py::test_second", True), FakeItem("tests/test_b.py::test_alone"),
            FakeItem("tests/test_c.py::test_new")] + [FakeItem(f"tests/test_c.py::test_each[{i}]") for i in range(4)]


def test_slow_is_what_took_over_the_limit_or_shares_a_costly_module_fixture():
    items = _items()
    suite_timing.mark_and_order(items, RECORD, under_xdist=False)
    slow = [item.nodeid for item in items if "slow" in item.marker_names]
    assert slow == ["tests/test_a.py::test_long[x]", "tests/test_a.py::test_long[y]",
                    "tests/test_b.py::test_first", "tests/test_b.py::test_second",
                    "tests/test_c.py::test_each[1]", "tests/test_c.py::test_each[2]", "tests/test_c.py::test_each[3]"]
    grouped = {item.nodeid: args for item in items for name, args in item.markers if name == "xdist_group"}
    assert grouped == {"tests/test_b.py::test_first": ("test_b.py",), "tests/test_b.py::test_second": ("test_b.py",)}


def test_under_xdist_the_longest_work_comes_first_and_a_group_stays_together():
    items = _items()
    suite_timing.mark_and_order(items, RECORD, under_xdist=True, first_results=0)
    assert [item.nodeid for item in items] == [
        "tests/test_a.py::test_long[x]", "tests/test_a.py::test_long[y]",   # 9 s each
        "tests/test_b.py::test_first", "tests/test_b.py::test_second",      # the group: 6.8 s
        *[f"tests/test_c.py::test_each[{i}]" for i in range(4)],             # 1 s each
        "tests/test_b.py::test_alone", "tests/test_a.py::test_cheap",       # 0.3, 0.2
        "tests/test_c.py::test_new"]                                         # not measured yet
    # a line of progress first: the cheapest single tests, then the longest work
    items = _items()
    suite_timing.mark_and_order(items, RECORD, under_xdist=True, first_results=2)
    assert [item.nodeid for item in items][:4] == ["tests/test_a.py::test_cheap", "tests/test_c.py::test_new",
                                                   "tests/test_a.py::test_long[x]", "tests/test_a.py::test_long[y]"]
    one_process = _items()
    suite_timing.mark_and_order(one_process, RECORD, under_xdist=False)
    assert [item.nodeid for item in one_process] == [item.nodeid for item in _items()]  # -n 0: as collected


def test_the_recorder_keeps_each_functions_longest_parameter_and_what_it_did_not_run(tmp_path):
    record = tmp_path / "durations.json"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_f(n):\n    pass\n")
    (tmp_path / "tests" / "test_b.py").write_text("def test_kept():\n    pass\n\ndef test_skipped_here():\n    pass\n")
    suite_timing.write_record({"tests/test_b.py::test_kept": {"setup_s": 1.0, "total_s": 2.0},
                               "tests/test_b.py::test_skipped_here": {"setup_s": 15.0, "total_s": 20.0},
                               "tests/test_gone.py::test_x": {"setup_s": 0.0, "total_s": 5.0},
                               "tests/test_a.py::test_f": {"setup_s": 0.0, "total_s": 99.0}}, record)
    recorder = suite_timing.DurationRecorder(record)
    for nodeid, when, seconds in [("tests/test_a.py::test_f[1]", "setup", 0.5), ("tests/test_a.py::test_f[1]", "call", 1.0),
                                  ("tests/test_a.py::test_f[2]", "setup", 0.25), ("tests/test_a.py::test_f[2]", "call", 3.0),
                                  ("tests/test_a.py::test_f[2]", "teardown", 0.5)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when=when, duration=seconds, skipped=False))
    recorder.pytest_runtest_logreport(SimpleNamespace(nodeid="tests/test_b.py::test_skipped_here", when="setup",
                                                      duration=0.01, skipped=True))
    recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(rootpath=tmp_path)))
    assert json.loads(record.read_text()) == {
        "tests/test_a.py::test_f": {"setup_s": 0.5, "total_s": 3.75, "params_s": 5.25},  # measured again: 99 s gone
        "tests/test_b.py::test_kept": {"setup_s": 1.0, "total_s": 2.0},  # not run: kept; a deleted test's dropped
        "tests/test_b.py::test_skipped_here": {"setup_s": 15.0, "total_s": 20.0}}  # skipped (no vLLM here): kept
    assert len(record.read_text().splitlines()) == 5  # a function a line


def test_the_committed_record_names_only_tests_that_exist():
    """A renamed or deleted test leaves the record when it is written again."""
    root = suite_timing.RECORD.parent.parent
    assert [key for key in suite_timing.load_record() if not suite_timing.names_a_test(root, key)] == []


def test_two_workers_keep_a_module_fixtures_tests_together(tmp_path):
    """The plan as xdist carries it out (under pytest 9, xdist 3.8's groups were silently split):
    three tests sharing a module fixture run on one worker, whatever else there is to do."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\nfrom tests import suite_timing\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    suite_timing.mark_and_order(items, {}, under_xdist=hasattr(config, 'workerinput'))\n")
    (tmp_path / "test_shared.py").write_text(
        "import pytest\n\n@pytest.fixture(scope='module')\ndef shared():\n    return 1\n\n"
        + "".join(f"def test_shared_{i}(shared):\n    pass\n\n" for i in range(3))
        + "".join(f"def test_alone_{i}():\n    pass\n\n" for i in range(6)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "-v", "-p", "no:cacheprovider", str(tmp_path / "test_shared.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stdout[-2000:]
    workers = {re.search(r"test_shared_\d", line).group(): line.split()[0]
               for line in done.stdout.splitlines() if "PASSED" in line and "test_shared_" in line}
    assert len(workers) == 3 and len(set(workers.values())) == 1, done.stdout[-2000:]
