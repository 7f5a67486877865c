"""`smlens store check` finds every kind of damage; `smlens store repair` mends it, rebuilding the
runs table from the run folders' own records and moving what cannot be read to quarantine/."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from profiler.ingest.store import Store
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_bad_input import assert_refused, copy_store

RAW = DATA / "decode12_raw.csv"
B1 = DATA / "h200_runs" / "gate-b1-r1.csv.gz"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("repair") / "store"
    Store(path).ingest(RAW, name="d12", tags={"batch": "4"})
    Store(path).ingest(B1, name="b1", tags={"batch": "1", "branch": "main"})
    return path


@pytest.fixture()
def store(base, tmp_path) -> Path:
    return copy_store(base, tmp_path)


def ids(store: Path) -> dict[str, str]:
    runs = Store(store, create=False).runs()
    return dict(zip(runs["name"], runs["id"]))


def check_json(store: Path) -> tuple[int, dict]:
    code, out, err = smlens("store", "check", "--store", store, "--format", "json")
    assert "Traceback" not in err
    return code, json.loads(out)


def folder(store: Path, name: str, part: str = "runs") -> Path:
    return store / part / f"run={ids(store)[name]}"


def test_a_sound_store_checks_clean(store):
    code, report = check_json(store)
    assert code == 0 and report["ok"] and report["runs"] == 2 and report["problems"] == []
    code, out, _ = smlens("store", "check", "--store", store)
    assert code == 0 and "no problems (2 runs)" in " ".join(out.split())
    code, out, _ = smlens("store", "repair", "--store", store)
    assert code == 0 and "nothing to repair" in " ".join(out.split())


def _unlisted(store: Path) -> None:  # a run folder the table does not name (an older smlens killed)
    runs = pd.read_parquet(store / "runs.parquet")
    runs[runs["name"] != "b1"].to_parquet(store / "runs.parquet", index=False)


def _stray(store: Path) -> None:
    (store / "runs" / "notes.txt").write_text("not a run")


def _stale_ingest(store: Path) -> None:  # an ingest killed while staging
    staged = store / ".staging" / "ingest-0badc0de" / "runs" / "run=0badc0de"
    staged.mkdir(parents=True)
    (staged / "kernels.parquet").write_bytes(b"half")


def _old_temporary(store: Path) -> None:  # what smlens before the staging folder left
    (store / ".tmp-0123abcd").mkdir()
    (store / ".tmp-0123abcd" / "kernels.parquet").write_bytes(b"x" * 100)


def _record_differs(store: Path) -> None:
    meta_path = folder(store, "d12") / "_run.json"
    meta = json.loads(meta_path.read_text())
    meta["run"]["name"] = "something else"
    meta_path.write_text(json.dumps(meta))


def _no_records(store: Path) -> None:  # a store written before run folders carried their record
    for path in store.glob("runs/run=*/_run.json"):
        path.unlink()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# damage -> (kinds `store check` reports, what the runs table holds after repair)
DAMAGE = {
    "runs table gone": (lambda s: (s / "runs.parquet").unlink(), {"runs-table"}, {"d12", "b1"}),
    "runs table truncated": (lambda s: _truncate(s / "runs.parquet"), {"runs-table"}, {"d12", "b1"}),
    "runs table random": (lambda s: (s / "runs.parquet").write_bytes(os.urandom(999)), {"runs-table"},
                          {"d12", "b1"}),
    "marker gone": (lambda s: (s / "smlens-store.json").unlink(), {"marker"}, {"d12", "b1"}),
    "marker junk": (lambda s: (s / "smlens-store.json").write_text("]["), {"marker"}, {"d12", "b1"}),
    "kernels truncated": (lambda s: _truncate(folder(s, "b1") / "kernels.parquet"), {"kernels"}, {"d12"}),
    "kernels gone": (lambda s: (folder(s, "b1") / "kernels.parquet").unlink(), {"kernels"}, {"d12"}),
    "run folder gone": (lambda s: shutil.rmtree(folder(s, "b1")), {"missing"}, {"d12"}),
    "units gone": (lambda s: shutil.rmtree(folder(s, "b1", "units")), {"units"}, {"d12", "b1"}),
    "units truncated": (lambda s: _truncate(folder(s, "b1", "units") / "units.parquet"), {"units"},
                        {"d12", "b1"}),
    "unlisted run folder": (_unlisted, {"unlisted"}, {"d12", "b1"}),
    "stray file in runs/": (_stray, {"stray"}, {"d12", "b1"}),
    "interrupted ingest": (_stale_ingest, {"interrupted"}, {"d12", "b1"}),
    "older smlens temporary": (_old_temporary, {"old-temporary"}, {"d12", "b1"}),
    "record disagrees": (_record_differs, {"record"}, {"d12", "b1"}),
    "no records (older store)": (_no_records, {"record"}, {"d12", "b1"}),
    "table and records gone": (lambda s: (_no_records(s), (s / "runs.parquet").unlink()),
                               {"runs-table", "unlisted"}, set()),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_check_names_the_damage_and_repair_mends_it(damage, store):
    before = ids(store) if "marker" not in damage else None
    tables = {name: Store(store, create=False).kernels(run_id) for name, run_id in ids(store).items()}
    hurt, kinds, kept = DAMAGE[damage]
    hurt(store)
    code, report = check_json(store)
    assert code == 2 and not report["ok"]
    assert {p["kind"] for p in report["problems"]} == kinds, report["problems"]
    assert all(p["path"] and p["detail"] and p["repair"] for p in report["problems"])
    code, out, err = smlens("store", "repair", "--store", store, "--format", "json")
    assert code == 0, out + err
    repaired = json.loads(out)
    assert repaired["ok"] and repaired["actions"]
    code, report = check_json(store)
    assert code == 0 and report["problems"] == [], report
    now = ids(store)
    assert set(now) == kept
    for name in kept:  # the same runs, ids, tags and kernels as before the damage
        assert before is None or now[name] == before[name]
        pd.testing.assert_frame_equal(Store(store, create=False).kernels(name), tables[name])
        code, out, err = smlens("show", name, "--store", store)
        assert code == 0, err
    if kept:
        tags = json.loads(Store(store, create=False).run(sorted(kept)[0])["tags"])
        assert tags["batch"] in ("1", "4")
    # what could not be read is kept aside, never deleted
    lost = {"d12", "b1"} - kept
    if lost:
        assert (store / "quarantine").is_dir() and any((store / "quarantine").rglob("*"))
    code, out, _ = smlens("store", "repair", "--store", store)
    assert code == 0 and "nothing to repair" in " ".join(out.split())


def test_repair_rebuilds_the_runs_table_as_it_was(store):
    original = pd.read_parquet(store / "runs.parquet")
    (store / "runs.parquet").unlink()
    assert_refused(*smlens("runs", "--store", store), "runs table runs.parquet is missing",
                   "smlens store check")
    code, out, err = smlens("store", "repair", "--store", store)
    assert code == 0, err
    rebuilt = pd.read_parquet(store / "runs.parquet")
    columns = ["id", "name", "tags", "created", "sha256", "kernel_count", "device_name", "notes"]
    pd.testing.assert_frame_equal(rebuilt[columns].reset_index(drop=True),
                                  original[columns].reset_index(drop=True), check_dtype=False)


def test_check_of_what_is_no_store(tmp_path):
    assert_refused(*smlens("store", "check", "--store", tmp_path / "none"), "no store folder")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("x")
    assert_refused(*smlens("store", "repair", "--store", tmp_path / "other"), "not an smlens store")


def test_an_interrupted_rm_is_undone_by_the_next_writer(store):
    """An rm killed after moving the run out, before its commit: the run is still listed and read
    (from staging); the next writer puts it back."""
    run_id = ids(store)["b1"]
    work = store / ".staging" / f"rm-{run_id}"
    (work / "runs").mkdir(parents=True)
    (work / "units").mkdir()
    os.rename(store / "runs" / f"run={run_id}", work / "runs" / f"run={run_id}")
    os.rename(store / "units" / f"run={run_id}", work / "units" / f"run={run_id}")
    assert len(Store(store, create=False).kernels("b1")) == 18
    code, report = check_json(store)
    assert [p["kind"] for p in report["problems"]] == ["interrupted"]
    assert "goes back" in report["problems"][0]["repair"]
    Store(store).ingest(RAW, name="renamed")  # any write
    assert (store / "runs" / f"run={run_id}" / "kernels.parquet").exists()
    assert check_json(store)[1]["ok"]
