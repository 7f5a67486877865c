"""store check and repair of a store that commits through a log (a folder here: the same code runs
over S3, where test_store_s3.py drives it through the CLI)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from profiler.ingest import logstore as ls
from profiler.ingest.logstore import LogStore
from profiler.ingest.logstore_check import check, repair
from tests.conftest import DATA


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def three_runs(tmp_path) -> tuple[Path, list[dict]]:
    root = tmp_path / "store"
    store = LogStore(root)
    rows = [store.ingest(DATA / name)[0] for name in ("targeted_raw.csv", "decode12_raw.csv",
                                                      "decode12_details.csv")]
    return root, rows


def kinds(report: dict) -> dict[str, str]:
    return {p["path"]: p["kind"] for p in report["problems"]}


def test_a_sound_store_checks_clean(three_runs):
    root, _ = three_runs
    assert check(root) == {"store": str(root), "ok": True, "runs": 3, "problems": [], "in_progress": []}
    assert repair(root)["actions"] == []


def test_check_finds_every_damage_and_repair_mends_it(three_runs):
    root, (whole, lost, broken) = three_runs
    # the log entry that listed `lost`, the kernels of `broken`, the checkpoint, a killed writer's
    # staged file (an hour old), and a committed run its writer did not publish
    (root / ls.log_key(1)).unlink()
    (root / ls.kernels_key(broken["id"])).write_bytes(b"not parquet")
    (root / ls.RUNS_TABLE).write_bytes(b"junk")
    dead = root / ls.staged_key("deadbeef", ls.kernels_key("deadbeef"))
    dead.parent.mkdir(parents=True)
    dead.write_bytes(b"half")
    os.utime(dead, (0, 0))
    unpublished = root / ls.staged_key(whole["id"], ls.units_key(whole["id"]))
    unpublished.parent.mkdir(parents=True, exist_ok=True)
    (root / ls.units_key(whole["id"])).rename(unpublished)
    before = snapshot(root)
    report = check(root)
    assert snapshot(root) == before  # check never writes
    assert not report["ok"] and report["runs"] == 2  # `lost` is not listed: its entry is gone
    assert kinds(report) == {
        ls.log_key(1): "log", ls.RUNS_TABLE: "runs-table",
        ls.kernels_key(broken["id"]): "run-file", ls.run_folder(lost["id"]): "unlisted",
        f"_staging/{whole['id']}/": "unpublished", "_staging/deadbeef/": "interrupted"}
    done = repair(root)
    assert done["ok"] and done["problems"] == [], done
    runs = LogStore(root, create=False).runs().set_index("id")
    assert sorted(runs.index) == sorted([whole["id"], lost["id"]])
    assert runs.loc[lost["id"], "kernel_count"] == 12 and runs.loc[lost["id"], "device_name"] == "NVIDIA H200"
    assert (root / ls.units_key(whole["id"])).is_file() and not (root / "_staging").exists()
    quarantined = list((root / "quarantine").rglob("kernels.parquet"))
    assert [p.read_bytes() for p in quarantined] == [b"not parquet"]
    assert check(root)["ok"]
    # and the store goes on
    store = LogStore(root)
    assert store.ingest(DATA / "sections_raw.csv")[1] and len(store.runs()) == 3
