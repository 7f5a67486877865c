"""Faults while writing the store: a SIGKILL at every step of an ingest and of an rm, SIGKILLs at
random moments of a real `smlens ingest`, a full disk and a read-only store. After each the store
is readable, lists no half run, shows Parquet readers committed runs only, and the next command
works and tidies what the dead one left."""
from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from profiler.errors import BadInput
from profiler.ingest import store as store_module
from profiler.ingest.store import Store
from profiler.ingest.store_check import check
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_bad_input import assert_refused, copy_store
from tests.test_store import snapshot

RAW = DATA / "decode12_raw.csv"
# the calls through which the store changes the file system: a fault is injected at each in turn
STEPS = ("mkdir", "rename", "replace", "unlink", "rmdir", "fsync")
# what a dead writer may leave, finished or undone by the next writer
LEFT_BY_A_KILL = {"interrupted", "unmoved"}


def copy_of(source: Path, folder: Path, variant: int) -> Path:
    """A distinct file (another SHA-256) with the same kernels."""
    path = folder / f"{source.stem}-{variant}{source.suffix}"
    path.write_bytes(source.read_bytes() + b"\n" * variant)
    return path


def assert_sound(store: Path) -> None:
    """Readable; every listed run whole; Parquet readers of runs/ see committed runs only."""
    runs = Store(store, create=False).runs()
    the_store = Store(store, create=False)
    for row in runs.to_dict("records"):
        assert len(the_store.kernels(row["id"])) == row["kernel_count"]
        assert the_store.units(row["id"])
    folders = {p.name[len("run="):] for p in (store / "runs").glob("run=*") if any(p.iterdir())}
    assert folders <= set(runs["id"])
    if folders:
        seen = pd.read_parquet(store / "runs", columns=["kernel_id", "run"])
        assert set(seen["run"].astype(str)) <= set(runs["id"])
    report = check(store)
    assert {p["kind"] for p in report["problems"]} <= LEFT_BY_A_KILL, report["problems"]


def killed_at_step(step: int, action) -> tuple[bool, int]:
    """Run `action` in a forked child that SIGKILLs itself at its `step`-th file-system change.
    Returns (whether it was killed, how many changes it made)."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        calls = [0]

        def counting(function):
            def change(*args, **kwargs):
                calls[0] += 1
                if calls[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                return function(*args, **kwargs)
            return change

        code = 0
        try:
            for name in STEPS:
                setattr(os, name, counting(getattr(os, name)))
            action()
        except BaseException:
            code = 3
        finally:
            os.write(write, str(calls[0]).encode())
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        calls = int(pipe.read() or 0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True, step
    assert os.WEXITSTATUS(status) == 0, "the action failed without being killed"
    return False, calls


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> tuple[Path, str, str]:
    """A store of two runs: `first` (decode12_raw.csv) and `doomed` (a copy of it)."""
    folder = tmp_path_factory.mktemp("faults")
    path = folder / "store"
    first = Store(path).ingest(RAW, name="first")[0]["id"]
    doomed = Store(path).ingest(copy_of(RAW, folder, 1), name="doomed")[0]["id"]
    return path, first, doomed


@pytest.mark.parametrize("operation", ["ingest", "rm", "rename"])
def test_a_kill_at_every_step_leaves_a_sound_store_and_the_next_command_tidies(operation, base_store,
                                                                             tmp_path):
    base, first, doomed = base_store
    source = copy_of(RAW, tmp_path, 2)
    action = {"ingest": lambda path: Store(path).ingest(source, name="new"),
              "rm": lambda path: Store(path).remove([doomed]),
              "rename": lambda path: Store(path).ingest(RAW, name="renamed", tags={"k": "v"})}[operation]
    before = {first, doomed}
    for step in range(1, 200):
        path = copy_store(base, tmp_path, f"store{step}")
        killed, changes = killed_at_step(step, lambda: action(path))
        assert_sound(path)
        runs = Store(path).runs().set_index("id")
        after = set(runs.index)
        if operation == "ingest":  # the new run is there whole, or nothing is
            assert after == before or (after > before and len(after - before) == 1)
        elif operation == "rm":  # the run is there whole, or gone
            assert after in (before, before - {doomed})
        else:  # the run under its old name and tags or its new ones; its record agrees (assert_sound)
            assert after == before and (runs.at[first, "name"], runs.at[first, "tags"]) in (
                ("first", "{}"), ("renamed", '{"k": "v"}'))
        Store(path).ingest(RAW, name=f"next-{step}")  # the next writer (a rename: quick)
        assert check(path)["ok"], check(path)["problems"]
        assert not list((path / store_module.STAGING).iterdir())
        shutil.rmtree(path)
        if not killed:
            break
    # every change of the file system was a kill point until the operation ran through
    assert not killed and changes == step - 1
    assert changes >= {"ingest": 12, "rm": 4, "rename": 3}[operation]


def test_kills_at_random_moments_of_smlens_ingest(tmp_path):
    """The real command in its own process, killed at random moments, a bounded number of times."""
    rng = random.Random(15)
    big = tmp_path / "big.csv"
    lines = (DATA / "targeted_raw.csv").read_text().splitlines(keepends=True)
    header_at = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = lines[header_at + 2:]
    with open(big, "w") as out:  # 2,000 kernels, ~5 MB: long enough to be caught mid-write
        out.writelines(lines[: header_at + 2])
        out.writelines(f'"{n}"' + rows[n % len(rows)][rows[n % len(rows)].index(","):] for n in range(2000))
    store = tmp_path / "store"
    command = [sys.executable, "-m", "profiler.cli", "ingest", "--store", str(store)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.monotonic()
    done = subprocess.run(command + [str(copy_of(big, tmp_path, 0))], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    whole = time.monotonic() - started
    kills = 0
    for attempt in range(1, 7):
        if time.monotonic() - started > 60:
            break
        child = subprocess.Popen(command + [str(copy_of(big, tmp_path, attempt))], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:  # a bounded wait for a random moment of the command's life, not a sleep
            child.wait(timeout=rng.uniform(0.2, 1.0) * whole)
        except subprocess.TimeoutExpired:
            child.kill()
            kills += 1
        child.wait()
        assert child.returncode in (0, -signal.SIGKILL), child.stderr.read()
        child.stderr.close()
        assert_sound(store)
    assert kills >= 3
    done = subprocess.run(command + [str(copy_of(big, tmp_path, 100))], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert check(store)["ok"] and not list((store / store_module.STAGING).iterdir())
    runs = Store(store, create=False).runs()
    assert set(runs["kernel_count"]) == {2000}
    assert len(pd.read_parquet(store / "runs", columns=["kernel_id"])) == 2000 * len(runs)


def test_a_full_disk_at_every_step_is_one_line_and_nothing_half_stored(base_store, tmp_path, monkeypatch):
    base = base_store[0]
    source = copy_of(RAW, tmp_path, 2)
    outcomes = []
    originals = {name: getattr(os, name) for name in STEPS}
    for step in range(1, 200):
        path = copy_store(base, tmp_path, f"store{step}")
        calls = [0]

        def failing(function):
            def change(*args, **kwargs):
                calls[0] += 1
                if calls[0] == step:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return function(*args, **kwargs)
            return change

        before = snapshot(path)
        for name in STEPS:
            monkeypatch.setattr(os, name, failing(originals[name]))
        try:
            Store(path).ingest(source, name="new")
            outcomes.append("stored")
        except BadInput as err:
            assert str(err) == f"{path}: cannot write to the store: the disk is full; nothing was stored"
            outcomes.append("refused")
        finally:
            for name in STEPS:
                monkeypatch.setattr(os, name, originals[name])
        if outcomes[-1] == "refused":
            assert snapshot(path) == before
        assert_sound(path)
        Store(path).ingest(RAW, name=f"next-{step}")  # the next writer (a rename: quick)
        assert check(path)["ok"]
        shutil.rmtree(path)
        if calls[0] < step:
            break
    # refused before the commit, stored after it (what fails then, the next writer finishes);
    # a few failures are harmless before it too (a mkdir of a folder that exists); the number of
    # write calls before the commit depends on the Python version (7 refusals seen under 3.10)
    assert outcomes.count("refused") >= 7 and outcomes[-1] == "stored"


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A small file system of its own (root only: CI runs as root; elsewhere the test skips)."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_really_full_disk(tmp_path):
    with tmpfs(tmp_path / "small", "640k") as disk:
        store = disk / "store"
        code, out, err = smlens("ingest", RAW, "--store", store, "--name", "small")
        assert code == 0, err
        before = snapshot(store)
        assert_refused(*smlens("ingest", DATA / "sections_raw.csv", "--store", store),
                       str(store), "the disk is full; nothing was stored")
        assert snapshot(store) == before and not list((store / ".staging").iterdir())
        code, out, err = smlens("show", "small", "--store", store)
        assert code == 0 and "decode" in out, err
        assert check(store)["ok"]


def test_a_read_only_store_is_read_and_never_written(tmp_path):
    with tmpfs(tmp_path / "ro", "8m") as disk:
        store = disk / "store"
        Store(store).ingest(RAW, name="d12")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = snapshot(store)
        assert_refused(*smlens("ingest", DATA / "targeted_raw.csv", "--store", store), "read-only")
        assert_refused(*smlens("rm", "d12", "--yes", "--store", store), "read-only", "nothing was removed")
        assert_refused(*smlens("ingest", RAW, "--store", disk / "new"), "new", "read-only")
        for args in (["runs"], ["show", "d12"], ["views", "d12", "--view", "V1"], ["store", "check"]):
            code, out, err = smlens(*args, "--store", store)
            assert code == 0, (args, err)
        assert snapshot(store) == before


def test_an_unwritable_store_folder_without_root(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through permissions (the tmpfs test covers a read-only store)")
    store = tmp_path / "store"
    Store(store).ingest(RAW, name="d12")
    store.chmod(0o555)
    try:
        assert_refused(*smlens("ingest", DATA / "targeted_raw.csv", "--store", store), "read-only")
    finally:
        store.chmod(0o755)


def test_parquet_readers_never_see_a_staged_run(tmp_path):
    """A run mid-ingest lives in .staging/: docs/STORE.md's pandas and DuckDB recipes do not see it."""
    path = tmp_path / "store"
    Store(path).ingest(RAW, name="d12")
    staged = path / ".staging" / "ingest-deadbeef" / "runs" / "run=deadbeef"
    staged.mkdir(parents=True)
    shutil.copy(next((path / "runs").glob("run=*/kernels.parquet")), staged / "kernels.parquet")
    assert len(pd.read_parquet(path / "runs")) == 12
    duckdb = pytest.importorskip("duckdb")
    count = duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}/runs/*/kernels.parquet', "
                       "hive_partitioning = true)").fetchall()[0][0]
    assert count == 12
    assert pq.read_metadata(staged / "kernels.parquet").num_rows == 12
