"""The store on S3 (a real S3 server on loopback, tests/s3server.py): every store command, commits
through the log, concurrent writers, killed writers, and what a wrong endpoint, key or bucket says."""
from __future__ import annotations

import json
import multiprocessing
import multiprocessing.pool
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from profiler.errors import BadInput
from profiler.ingest import logstore
from profiler.ingest.logstore import LogStore
from profiler.ingest.store import Store
from profiler.ingest.stores import open_store
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_profile import QUICK, fake_env  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[1]


def objects_of(url: str) -> dict[str, int]:
    """Every object under the store with its size."""
    return {e.key: e.size_bytes for e in LogStore(url, create=False).objects.list("")}


def plain_runs(url: str) -> set[str]:
    """The run ids a reader without smlens finds under runs/ (a Hive-partitioned Parquet dataset)."""
    if not url.startswith("s3://"):
        return {p.parent.name[len("run="):] for p in Path(url).glob("runs/*/kernels.parquet")}
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                           client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    return {p.rsplit("/", 2)[-2][len("run="):] for p in fs.glob(f"{url[len('s3://'):]}/runs/*/kernels.parquet")}


def variant(tmp_path: Path, source: Path, n: int) -> Path:
    """A different file (its own SHA-256) with the same kernels: trailing blank lines are skipped."""
    path = tmp_path / f"{source.stem}-{n}{source.suffix}"
    path.write_bytes(source.read_bytes() + b"\n" * n)
    return path


def test_every_store_command_on_s3(s3_store, tmp_path):
    code, out, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", s3_store,
                            "--tag", "branch=main", "--format", "json")
    assert code == 0, err
    first = json.loads(out)[0]
    assert first["kernel_count"] == 188 and first["new"] is True
    code, out, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", s3_store)
    assert code == 0 and "already in the store" in err
    code, out, _ = smlens("ingest", DATA / "decode12.ncu-rep.gz", "--store", s3_store, "--name", "d12",
                          "--tag", "branch=main", "--format", "json")
    assert code == 0
    code, out, _ = smlens("runs", "--store", s3_store, "--format", "json")
    assert [r["name"] for r in json.loads(out)] == ["targeted_raw.csv", "d12"]
    code, out, _ = smlens("show", "d12", "--store", s3_store, "--format", "json")
    shown = json.loads(out)
    assert {(g["phase"], g["role"]): g["kernels"] for g in shown["phases"]}[("decode", "o_proj")] == 3
    code, out, err = smlens("views", first["id"], "--store", s3_store, "--format", "json")
    assert code == 0, err
    groups = {(g["phase"], g["role"]): g for g in json.loads(out)["groups"]}
    assert groups[("cold_prefill", "qkv_proj")]["time_ns"] == 72384.0
    code, out, err = smlens("gate", "--baseline", first["id"], "--current", "tag:branch=main~1",
                            "--store", s3_store)
    assert code in (0, 1, 2) and "gate:" in out, err  # d12 against a whole run: judged or refused
    code, out, err = smlens("gate", "--baseline", first["id"], "--current", first["id"][:5],
                            "--store", s3_store)
    assert code == 0 and "gate: pass" in out, err
    report = tmp_path / "r.html"
    code, _, err = smlens("report", first["id"], "--store", s3_store, "-o", report)
    assert code == 0 and report.stat().st_size > 100_000, err
    code, out, _ = smlens("rm", "d12", "--store", s3_store, "--yes")
    assert code == 0 and "removed" in out
    keys = objects_of(s3_store)
    assert f"runs/run={first['id']}/kernels.parquet" in keys
    assert not [k for k in keys if k.startswith("_staging/")]
    assert plain_runs(s3_store) == {first["id"]}
    # what a reader without smlens gets from the same bytes
    table = pq.read_table(pa.BufferReader(LogStore(s3_store).objects.read(
        f"runs/run={first['id']}/kernels.parquet")))
    kernels = table.to_pandas()
    assert kernels.loc[kernels.kernel_id == 95, "gpu__time_duration.sum"].iloc[0] == 6624.0


def test_smlens_store_env_names_the_store(s3_store, monkeypatch, tmp_path):
    monkeypatch.setenv("SMLENS_STORE", s3_store)
    code, _, err = smlens("ingest", DATA / "decode12_raw.csv")
    assert code == 0, err
    code, out, _ = smlens("runs", "--format", "json")
    assert [r["kernel_count"] for r in json.loads(out)] == [12]
    run = json.loads(out)[0]["id"]
    code, out, err = smlens("show", run, "--format", "json")
    assert code == 0 and json.loads(out)["kernel_count"] == 12, err
    code, out, err = smlens("views", run, "--format", "json")
    assert code == 0, err
    assert sum(g["kernels"] for g in json.loads(out)["groups"]) == 12
    code, out, err = smlens("gate", "--baseline", run, "--current", "latest")
    assert code == 0 and "gate: pass" in out, err
    code, _, err = smlens("report", run, "-o", tmp_path / "r.html")
    assert code == 0 and (tmp_path / "r.html").stat().st_size > 100_000, err
    code, _, err = smlens("rm", run, "--yes")
    assert code == 0, err
    assert len(open_store(s3_store, create=False).runs()) == 0 and plain_runs(s3_store) == set()


@pytest.mark.parametrize("case", ["wrong secret", "unknown key", "no bucket", "no server"])
def test_unusable_s3_store_is_one_line_exit_2(s3_store, s3_server, monkeypatch, case):
    assert smlens("ingest", DATA / "decode12_raw.csv", "--store", s3_store)[0] == 0
    before = objects_of(s3_store)
    store = s3_store
    if case == "wrong secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        expected = "access denied"
    elif case == "unknown key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
        expected = "access denied"
    elif case == "no bucket":
        store = "s3://no-such-bucket-here/team"
        expected = "no bucket 'no-such-bucket-here'"
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
        expected = "cannot reach the S3 endpoint http://127.0.0.1:9 (Could not connect"
    for args in (["runs"], ["ingest", DATA / "decode12_details.csv"],
                 ["gate", "--baseline", "latest", "--current", "latest"]):
        code, out, err = smlens(*args, "--store", store)
        assert code == 2, (args, out, err)
        assert err.startswith("smlens: ") and expected in err and len(err.strip().splitlines()) == 1
        assert "Traceback" not in out + err
    monkeypatch.undo()
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    assert objects_of(s3_store) == before


def test_not_a_store_and_no_store(s3_store, s3_server):
    bucket = s3_store[len("s3://"):].split("/")[0]
    s3_server.client().put_object(Bucket=bucket, Key="team/other/notes.txt", Body=b"keep me")
    code, _, err = smlens("ingest", DATA / "decode12_raw.csv", "--store", f"s3://{bucket}/team/other")
    assert code == 2 and "not an smlens store" in err
    code, _, err = smlens("runs", "--store", f"s3://{bucket}/team/none")
    assert code == 2 and "no smlens store here" in err
    code, _, err = smlens("runs", "--store", "gs://bucket/x")
    assert code == 2 and "only folders and s3:// URLs" in err


def test_a_writer_that_loses_the_race_commits_next(s3_store):
    """Both read the log at the same version; the second to create that entry is refused (412),
    reads the winner's entry and commits after it."""
    first, second = open_store(s3_store), open_store(s3_store)
    create = first.objects.put_if_absent
    lost = []

    def racing(key, data):
        if key.startswith("_log/") and not lost:
            lost.append(key)
            second.ingest(DATA / "decode12_raw.csv")  # takes the version `first` is about to create
        return create(key, data)

    first.objects.put_if_absent = racing
    row, new = first.ingest(DATA / "targeted_raw.csv")
    assert new and lost == [logstore.log_key(0)]
    log = [json.loads(first.objects.read(logstore.log_key(v))) for v in (0, 1)]
    assert [e["run"]["kernel_count"] for e in log] == [12, 188] and log[1]["run"]["id"] == row["id"]
    assert list(open_store(s3_store, create=False).runs()["kernel_count"]) == [12, 188]


def test_the_same_file_racing_is_stored_once(s3_store):
    first, second = open_store(s3_store), open_store(s3_store)
    create = first.objects.put_if_absent
    won = []

    def racing(key, data):
        if key.startswith("_log/") and not won:
            won.append(second.ingest(DATA / "decode12_raw.csv")[0])
        return create(key, data)

    first.objects.put_if_absent = racing
    row, new = first.ingest(DATA / "decode12_raw.csv")
    assert not new and row["id"] == won[0]["id"]
    assert len(open_store(s3_store, create=False).runs()) == 1
    assert not [k for k in objects_of(s3_store) if k.startswith("_staging/")]


def _ingest_at_barrier(url: str, source: str, barrier, results) -> None:
    """A writer process: stage, wait for the other writer, then commit at the same moment."""
    commit = LogStore.commit

    def at_barrier(self, decide):
        barrier.wait(timeout=120)
        return commit(self, decide)

    LogStore.commit = at_barrier
    results.put(open_store(url).ingest(source)[0]["id"])


def test_two_writer_processes_both_land_repeatedly(s3_store, tmp_path):
    context = multiprocessing.get_context("spawn")
    sources = [variant(tmp_path, DATA / "decode12_raw.csv", n) for n in range(1, 7)]
    open_store(s3_store)
    for round_ in range(3):
        barrier, results = context.Barrier(2), context.Queue()
        writers = [context.Process(target=_ingest_at_barrier,
                                   args=(s3_store, str(sources[2 * round_ + i]), barrier, results))
                   for i in range(2)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(timeout=180)
            assert writer.exitcode == 0
        ids = {results.get(timeout=5), results.get(timeout=5)}
        runs = open_store(s3_store, create=False).runs()
        assert ids <= set(runs["id"]) and len(runs) == 2 * (round_ + 1)
    store = open_store(s3_store, create=False)
    versions = [json.loads(store.objects.read(e.key))["version"] for e in store.objects.list("_log/")]
    assert versions == list(range(6))
    assert plain_runs(s3_store) == set(store.runs()["id"])


class _Killed(BaseException):
    """The writer stops dead at an object operation (nothing after it runs)."""


def _dying_at(store: LogStore, op: int) -> list[str]:
    """Make `store` die before its `op`-th object operation; returns the operations it made."""
    done: list[str] = []
    for name in ("read", "put", "put_if_absent", "upload", "copy", "list", "delete"):
        method = getattr(store.objects, name)

        def counted(*args, _method=method, _name=name, **kwargs):
            if len(done) == op:
                raise _Killed
            done.append(f"{_name} {args[0] if args else ''}")
            return _method(*args, **kwargs)

        setattr(store.objects, name, counted)
    return done


def _ingest_steps(url: str) -> list[str]:
    """The object operations of one ingest into a store holding one run."""
    LogStore(url).ingest(DATA / "decode12_raw.csv")
    counting = LogStore(url)
    steps = _dying_at(counting, op=10**6)
    assert counting.ingest(DATA / "decode12_details.csv")[1]
    return steps


def _killed_at(url: str, op: int, tmp_path: Path) -> bool:
    """Kill an ingest before its `op`-th object operation, check what readers see and that the next
    writer recovers. Returns whether the killed run is listed."""
    LogStore(url).ingest(DATA / "decode12_raw.csv")
    writer = LogStore(url)
    _dying_at(writer, op)
    with pytest.raises(_Killed):
        writer.ingest(DATA / "decode12_details.csv")
    after = LogStore(url, create=False)
    listed = list(after.runs()["kernel_count"])
    assert listed in ([12], [12, 12]), op
    if len(listed) == 2:  # committed: readable now, from its staged files if not yet published
        assert len(after.kernels("latest")) == 12
    assert plain_runs(url) <= set(after.runs()["id"])
    # the next writer lands and publishes what the dead one committed; a stale sweep leaves no
    # staged file
    LogStore(url).ingest(variant(tmp_path, DATA / "decode12_raw.csv", 1))
    final = LogStore(url, create=False)
    assert plain_runs(url) == set(final.runs()["id"]) and len(final.runs()) == len(listed) + 1
    final._sweep_staging(final.log_state(), stale_after_s=0)  # as a writer an hour later would
    assert not [e for e in final.objects.list("_staging/")]
    return len(listed) == 2


def test_a_writer_killed_at_any_step_leaves_nothing_listed(tmp_path):
    """Every step of an ingest, on a folder (the protocol is the same on S3, next test)."""
    steps = _ingest_steps(str(tmp_path / "count"))
    commit = next(i for i, s in enumerate(steps) if s.startswith("put_if_absent _log/"))
    assert 0 < commit < len(steps) - 1
    listed = [_killed_at(str(tmp_path / f"at{op}"), op, tmp_path) for op in range(len(steps))]
    # dead before its log entry is created: not listed; dead after it: listed
    assert listed == [False] * (commit + 1) + [True] * (len(steps) - commit - 1)


def test_a_writer_killed_around_its_commit_on_s3(s3_store, tmp_path):
    steps = _ingest_steps(f"{s3_store}-count")
    commit = next(i for i, s in enumerate(steps) if s.startswith("put_if_absent _log/"))
    assert steps[commit + 1].startswith("copy _staging/")
    # before the commit, just after it (nothing published), after the first copy
    assert [_killed_at(f"{s3_store}-{op}", op, tmp_path) for op in (commit, commit + 1, commit + 2)
            ] == [False, True, True]


def test_a_killed_cli_writer_leaves_nothing_listed(s3_store):
    """SIGKILL to `smlens ingest` once its files are staged: before or during its commit."""
    base = open_store(s3_store)
    base.ingest(DATA / "decode12_raw.csv")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-m", "profiler.cli", "ingest",
                                str(DATA / "targeted_raw.csv"), "--store", s3_store], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while not base.objects.list("_staging/") and process.poll() is None:
            assert time.monotonic() < deadline, "the writer never staged its files"
            time.sleep(0.005)  # polling for the staged object, not waiting a fixed time
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    after = open_store(s3_store, create=False)
    assert list(after.runs()["kernel_count"]) in ([12], [12, 188])
    assert plain_runs(s3_store) <= set(after.runs()["id"])
    open_store(s3_store).ingest(DATA / "decode12.ncu-rep.gz")
    assert len(open_store(s3_store, create=False).runs()) in (2, 3)


def test_runs_table_is_a_checkpoint_the_log_is_the_truth(s3_store):
    store = open_store(s3_store)
    for _ in range(6):  # 12 commits
        store.ingest(DATA / "decode12_raw.csv")
        store.remove("latest")
    run = store.ingest(DATA / "decode12_raw.csv")[0]
    runs_table = pq.read_table(pa.BufferReader(store.objects.read("runs.parquet")))
    assert runs_table.schema.metadata[logstore.VERSION_KEY] == b"10"  # rewritten every 10 commits
    # as of commit 10 (an add); the log after it removes that run (11) and adds another (12)
    assert runs_table.num_rows == 1 and runs_table.column("id")[0].as_py() != run["id"]
    assert list(open_store(s3_store).runs()["id"]) == [run["id"]]
    store.objects.put("runs.parquet", b"not parquet")  # damaged: the log alone still says it all
    assert list(open_store(s3_store, create=False).runs()["id"]) == [run["id"]]
    store.objects.delete([logstore.log_key(5)])
    code, _, err = smlens("runs", "--store", s3_store)
    assert code == 2 and "log entry 5 is missing" in err and "smlens store check" in err


def test_a_folder_copied_from_s3_opens_as_a_log_store(tmp_path):
    folder = tmp_path / "copy"
    LogStore(folder).ingest(DATA / "decode12_raw.csv")
    assert type(open_store(folder, create=False)) is LogStore
    with pytest.raises(BadInput, match="open_store"):  # the plain store does not open it as one of its own
        Store(folder, create=False)
    code, out, _ = smlens("runs", "--store", folder, "--format", "json")
    assert code == 0 and json.loads(out)[0]["kernel_count"] == 12
    assert {p.name for p in (folder / "runs").iterdir()} == {f"run={json.loads(out)[0]['id']}"}


def test_log_store_refuses_a_store_of_another_kind(tmp_path):
    open_store(tmp_path / "plain").ingest(DATA / "decode12_raw.csv")
    with pytest.raises(BadInput, match="folder commits"):
        LogStore(tmp_path / "plain")


def test_a_server_that_ignores_conditional_writes_is_refused(tmp_path, monkeypatch):
    from profiler.ingest.objectstore import LocalObjects

    monkeypatch.setattr(LocalObjects, "put_if_absent", lambda self, key, data: self.put(key, data) or True)
    with pytest.raises(BadInput, match="ignores conditional writes"):
        LogStore(tmp_path / "store")


def test_writers_creating_the_store_at_once(s3_store):
    with multiprocessing.pool.ThreadPool(4) as pool:
        stores = pool.map(lambda _: LogStore(s3_store), range(4))
    assert len(stores) == 4 and list(objects_of(s3_store)) == ["smlens-store.json"]


def test_profile_into_an_s3_store(fake_env, s3_store):
    """`smlens profile` (a fake ncu replaying a real H200 capture) stores its runs on S3."""
    code, out, err = smlens("profile", "--store", s3_store, "--format", "json", "--quiet", "--repeat", "2",
                            "--metrics", "gpu__time_duration.sum", "--no-annotate", "--", *QUICK)
    assert code == 0, err
    assert [o["kernels"] for o in json.loads(out)] == [149, 149]
    runs = open_store(s3_store, create=False).runs()
    assert sorted(json.loads(t)["repeat"] for t in runs["tags"]) == ["1", "2"]
    assert plain_runs(s3_store) == set(runs["id"])


def test_racing_creates_of_one_key_have_one_winner(s3_store):
    """What every commit rests on, held of the test server too: of writers creating the same key
    at the same moment, exactly one succeeds."""
    writers = [LogStore(s3_store).objects for _ in range(6)]
    barrier = multiprocessing.pool.threading.Barrier(len(writers))

    def create(args):
        objects, key = args
        barrier.wait(timeout=60)
        return objects.put_if_absent(key, os.urandom(16))

    with multiprocessing.pool.ThreadPool(len(writers)) as pool:
        for n in range(20):
            wins = pool.map(create, [(objects, f"race/{n}") for objects in writers])
            assert sum(wins) == 1, n


def test_reingest_renames_and_rm_of_several_runs_on_s3(s3_store):
    code, out, _ = smlens("ingest", DATA / "targeted_raw.csv", "--store", s3_store, "--tag", "branch=main",
                          "--format", "json")
    first = json.loads(out)[0]
    code, out, err = smlens("ingest", DATA / "targeted_raw.csv", "--store", s3_store, "--name", "base",
                            "--tag", "branch=dev", "--format", "json")
    assert code == 0 and json.loads(out)[0]["changed"] == ["name", "tags"], err
    store = open_store(s3_store, create=False)
    row = store.run("base")
    assert row["id"] == first["id"] and json.loads(row["tags"]) == {"branch": "dev"}
    assert store.meta(first["id"])["run"]["name"] == "base"  # the run folder's record follows
    second = store.ingest(DATA / "decode12_raw.csv")[0]
    code, out, err = smlens("rm", "base", second["id"], "--yes", "--store", s3_store)
    assert code == 0, err
    assert len(open_store(s3_store, create=False).runs()) == 0 and plain_runs(s3_store) == set()
    assert json.loads(store.objects.read(logstore.log_key(3)))["ids"] == [first["id"], second["id"]]


def test_store_check_and_repair_on_s3(s3_store):
    store = open_store(s3_store)
    kept = store.ingest(DATA / "targeted_raw.csv")[0]
    lost = store.ingest(DATA / "decode12_raw.csv")[0]
    last = store.ingest(DATA / "decode12_details.csv")[0]
    assert smlens("store", "check", "--store", s3_store)[0] == 0
    store.objects.delete([logstore.log_key(1)])
    store.objects.put("runs.parquet", b"junk")
    code, out, err = smlens("runs", "--store", s3_store)
    assert code == 2 and "log entry 1 is missing" in err and "smlens store check" in err
    code, out, _ = smlens("store", "check", "--store", s3_store, "--format", "json")
    report = json.loads(out)
    assert code == 2 and {p["kind"] for p in report["problems"]} == {"log", "runs-table", "unlisted"}
    code, out, err = smlens("store", "repair", "--store", s3_store, "--format", "json")
    assert code == 0 and json.loads(out)["ok"], out + err
    runs = open_store(s3_store, create=False).runs().set_index("id")
    assert sorted(runs.index) == sorted([kept["id"], lost["id"], last["id"]])
    assert runs.loc[lost["id"], "name"] == "decode12_raw.csv"  # from the run folder's _run.json
    assert smlens("store", "check", "--store", s3_store)[0] == 0
