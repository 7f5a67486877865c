"""The Parquet store: a runs table and one folder of Parquet files per run.

    <store>/smlens-store.json              marks the folder as a store (format version)
    <store>/runs.parquet                   the runs table: one row per committed run
    <store>/runs/run=<id>/kernels.parquet  the run's kernels
    <store>/runs/run=<id>/_run.json        the run's own row and metric units (Parquet readers
                                           skip names starting with `_`)
    <store>/units/run=<id>/units.parquet   metric, unit (beside, so a scan of runs/ reads kernels only)
    <store>/.staging/                      transactions in progress: invisible to every reader
    <store>/quarantine/                    what `smlens store repair` could not read

The layout is Hive-partitioned so pandas, polars and DuckDB read it with no smlens code, and they
only ever see committed runs. The protocol (docs/SCHEMA.md, "Writing the store"):
- a writer stages a run whole under `.staging/ingest-<id>/`, holding `.staging/ingest-<id>.lock`
  (an flock the kernel drops when the writer dies, however it dies);
- under the store lock `.lock` it replaces runs.parquet with one more row: the one commit point;
- it then renames the run's folders into runs/ and units/ (readers of a committed run not yet
  moved find it in staging); a crash there is finished by the next writer;
- every writer, under the store lock, first finishes or undoes what dead writers left in `.staging/`.
Removal moves the run's folders into `.staging/rm-<id>/` under the lock, then commits the runs
table without the row: until then the run is listed and readable (from staging), and a killed rm
is undone; after, it is gone, and its files are deleted.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from profiler.ingest.capture_source import check_readable
from profiler.errors import BadInput

FORMAT_VERSION = 1
MARKER = "smlens-store.json"
RUNS_TABLE = "runs.parquet"
STAGING = ".staging"
LOCK = ".lock"
RUN_META = "_run.json"
QUARANTINE = "quarantine"
RUN_COLUMNS = ["id", "name", "tags", "created", "source", "sha256", "source_format", "ncu_version",
               "device_name", "cc", "host", "kernel_count", "partial"]
REQUIRED_RUN_COLUMNS = ("id", "name", "tags", "created", "sha256", "kernel_count")
# what reading a damaged Parquet or JSON file raises (ArrowInvalid is a ValueError)
READ_ERRORS = (OSError, ValueError, EOFError, pa.ArrowException)


def random_hex8() -> str:
    return uuid.uuid4().hex[:8]


def new_run_id(taken=frozenset()) -> str:
    """Eight hex digits that start with a letter: a reader of the run=<id> folders (pyarrow, DuckDB,
    Spark) infers a partition value of digits alone as a number (`run=04404686` read back as 4404686,
    `12345e67` as a float)."""
    while (run_id := random_hex8())[0].isdigit() or run_id in taken:
        pass
    return run_id


class StoreDamaged(BadInput):
    """The store is inconsistent or a file of it cannot be read: one line and the way out."""

    def __init__(self, store: Path, problem: str):
        super().__init__(f"{store}: {problem}; run `smlens store check --store {store}`")
        self.problem = problem


def read_parquet_file(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """One Parquet file as pd.read_parquet reads it; `columns` limits what is read (missing names are
    skipped). Through pyarrow's ParquetFile: pd.read_parquet goes through pyarrow.dataset, whose
    import and discovery of one file cost `smlens views` 25 ms (BENCHMARKS.md)."""
    with pq.ParquetFile(path) as parquet:
        if columns is not None:
            present = set(parquet.schema_arrow.names)
            columns = [c for c in columns if c in present]
        return parquet.read(columns=columns, use_pandas_metadata=True).to_pandas()


def reason(err: BaseException) -> str:
    """An exception as a short clause: the OS's words when there are some."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({reason(err)})") from None
    return digest.hexdigest()


def _printable(text: str) -> bool:
    return all(c.isprintable() for c in text)


def _utf8(text: str) -> bool:
    """False for a string holding undecodable bytes of an argument (Python's surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


NAME_MAX_CHARS = 200  # a name is shown in tables and report titles
MIN_ID_PREFIX = 4  # a shorter prefix names no run: `smlens rm 0` must not pick one by chance


def parse_tags(pairs: list[str] | None) -> dict[str, str]:
    tags = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--tag {pair!r}: expected KEY=VALUE")
        if not _printable(pair):
            raise BadInput(f"--tag {pair!r}: control characters (a newline, a terminal escape) "
                           "cannot be shown in a table; use plain text")
        tags[key.strip()] = value.strip()
    return tags


def check_name(name: str | None) -> None:
    """A run name that every command can show and find again."""
    if name is None:
        return
    if not name.strip():
        raise BadInput("--name is empty: give a name, or leave --name out for the file name")
    if not _printable(name) or not _utf8(name):
        raise BadInput(f"--name {name!r}: control characters (a newline, a terminal escape) or bytes "
                       "that are not UTF-8 cannot be shown in a table; use plain text")
    if len(name) > NAME_MAX_CHARS:
        raise BadInput(f"--name holds {len(name):,} characters: give at most {NAME_MAX_CHARS}")
    if name == "latest" or name.startswith("tag:"):
        raise BadInput(f"--name {name}: reserved (`latest` and `tag:K=V` select runs); choose another")


def looks_like_store(path: Path) -> bool:
    """Holds runs (a runs table or run folders), whatever its marker says."""
    return (path / RUNS_TABLE).exists() or any((path / "runs").glob("run=*"))


# --- files: written whole, then renamed into place ---------------------------------------------

def fsync_path(path: Path) -> None:
    """Flush a file or a folder's entries to disk (a rename is durable once its folder is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, value) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(value, out)
        out.flush()
        os.fsync(out.fileno())


def hold_lock(path: Path) -> int:
    """An exclusive flock on `path`, held until the descriptor is closed. A cleaner that removed
    the file between our open and our lock leaves us holding a dead inode: then lock it again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def claim_stale(lock: Path) -> int | None:
    """-1 when `lock` is absent, a held descriptor when its owner is gone, None while it lives."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        os.close(fd)


class Store:
    """A store folder committed in place. An s3:// URL, or a folder holding a store that commits
    through a log (one copied from object storage), is a LogStore (profiler.ingest.logstore):
    `profiler.ingest.stores.open_store` opens either."""

    @classmethod
    def unchecked(cls, path) -> "Store":
        """A store object for `smlens store repair`, whose marker may itself be damaged."""
        store = cls.__new__(cls)
        store.path = Path(path)
        return store

    def __init__(self, path, create: bool = True):
        if type(self) is Store and commits_through_log(path):
            raise BadInput(f"{path}: a store that commits through a log; open it with "
                           "profiler.ingest.stores.open_store")
        self.path = Path(path)
        try:
            if self.path.exists() and not self.path.is_dir():
                raise BadInput(f"{self.path}: is a file, not a store folder")
            if self.path.is_dir() and not (self.path / MARKER).exists():
                if looks_like_store(self.path):
                    raise StoreDamaged(self.path, f"the store marker {MARKER} is missing")
                if any(p.name not in ("runs", "units", STAGING, LOCK) for p in self.path.iterdir()):
                    raise BadInput(f"{self.path}: not an smlens store (no {MARKER}); choose an empty or "
                                   "new folder with --store")
        except OSError as err:
            raise BadInput(f"{self.path}: cannot read the store folder ({reason(err)})") from None
        if create:
            self._create()
        elif not (self.path / MARKER).exists():
            raise BadInput(f"{self.path}: no smlens store here; ingest a capture first "
                           "(smlens ingest FILE --store DIR)")
        else:
            self._check_version()

    def _create(self) -> None:
        if (self.path / MARKER).exists():
            self._check_version()
            if not os.access(self.path, os.W_OK):
                raise BadInput(f"{self.path}: the store is read-only (no write permission or a "
                               "read-only file system); nothing was stored")
            return
        with self.writing("no store was created"):
            self.path.mkdir(parents=True, exist_ok=True)
            for folder in ("runs", "units", STAGING):
                (self.path / folder).mkdir(exist_ok=True)
            tmp = self.path / STAGING / f"tmp-{uuid.uuid4().hex}-{MARKER}"
            write_json(tmp, {"format": FORMAT_VERSION})
            os.replace(tmp, self.path / MARKER)

    def _check_version(self) -> None:
        try:
            version = json.loads((self.path / MARKER).read_text()).get("format")
        except (OSError, ValueError, AttributeError) as err:
            raise StoreDamaged(self.path, f"the store marker {MARKER} cannot be read ({reason(err)})") from None
        if version != FORMAT_VERSION:
            raise BadInput(f"{self.path}: store format {version}, this smlens reads {FORMAT_VERSION}")

    # --- writing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, outcome: str):
        """OSErrors of a write (disk full, read-only, permission) as one line saying what happened."""
        try:
            yield
        except OSError as err:
            if err.errno == errno.ENOSPC:
                cause = "the disk is full"
            elif err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                cause = f"it is read-only ({reason(err)})"
            else:
                cause = reason(err)
            raise BadInput(f"{self.path}: cannot write to the store: {cause}; {outcome}") from None

    @contextlib.contextmanager
    def locked(self):
        """Hold the store's lock: one writer changes the runs table at a time."""
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def staging(self) -> Path:
        """The store's staging folder, where writes wait for their commit."""
        staging = self.path / STAGING
        staging.mkdir(exist_ok=True)  # stores made before staging existed
        return staging

    def write_runs(self, runs: pd.DataFrame) -> None:
        """Replace the runs table: the commit point of every change (call under the lock)."""
        tmp = self.staging() / f"tmp-{uuid.uuid4().hex}-{RUNS_TABLE}"
        try:
            runs.to_parquet(tmp, index=False)
            fsync_path(tmp)
            os.replace(tmp, self.path / RUNS_TABLE)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
        # committed: nothing after this may fail the caller
        with contextlib.suppress(OSError):
            fsync_path(self.path)

    def _write_meta(self, run_dir: Path, row: dict, units: dict | None) -> None:
        tmp = self.staging() / f"tmp-{uuid.uuid4().hex}-{RUN_META}"
        try:
            write_json(tmp, {"format": FORMAT_VERSION, "run": row, "units": units})
            os.replace(tmp, run_dir / RUN_META)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise

    def ingest(self, source, name: str | None = None, tags: dict | None = None,
               shapes: dict | None = None, ncu_version: str | None = None,
               partial: bool = False, on_progress=None, roles_from_order: bool = False
               ) -> tuple[dict, bool]:
        """Store a capture as a new run. Returns (the run's row, whether it was new).

        A file already in the store (same SHA-256, read the same way: shapes, roles from order) is
        recognised and not stored twice; a new `name` or `tags` for it update that run (the row
        then lists them under `changed`). `roles_from_order`: see capture.read_capture.
        """
        source, sha256, shapes_key, existing = self._identify(source, name, shapes, roles_from_order)
        if existing is not None:
            return self._update(existing, name, tags), False
        run_id = new_run_id()
        with self.writing("nothing was stored"):
            staging = self.staging()
            lock_fd = hold_lock(staging / f"ingest-{run_id}.lock")
        work = staging / f"ingest-{run_id}"
        committed = False
        try:
            with self.writing("nothing was stored"):
                run_dir = work / "runs" / f"run={run_id}"
                units_dir = work / "units" / f"run={run_id}"
                run_dir.mkdir(parents=True)
                units_dir.mkdir(parents=True)
                summary = self._write_kernels(source, run_dir, units_dir, run_id, shapes, on_progress,
                                              roles_from_order)
                row = new_run_row(run_id, source, name, tags, sha256, shapes_key, summary,
                                  ncu_version, partial, roles_from_order)
                self._write_meta(run_dir, row, summary["units"])
                fsync_path(run_dir)
                with self.locked():
                    self.housekeep()
                    again = self._find_sha(sha256, shapes_key, roles_from_order)
                    if again is not None:  # a concurrent ingest of the same file won
                        return self._update(again, name, tags, locked=True), False
                    runs = self._read_runs()
                    new = pd.DataFrame([row])
                    self.write_runs(pd.concat([runs, new], ignore_index=True) if len(runs) else new)
                    committed = True
                    self._publish(work, run_id)
            return row, True
        finally:
            if not committed:
                shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(OSError):  # a lock file left behind is the next writer's to remove
                (staging / f"ingest-{run_id}.lock").unlink(missing_ok=True)
            os.close(lock_fd)

    def _identify(self, source, name: str | None, shapes: dict | None, roles_from_order: bool):
        """A capture to ingest: its path, SHA-256 and shapes key, and the run already made from it
        read the same way (None when new)."""
        source = Path(source)
        check_name(name)
        check_readable(source)
        sha256 = file_sha256(source)
        shapes_key = json.dumps(sorted((shapes or {}).items()))
        return source, sha256, shapes_key, self._find_sha(sha256, shapes_key, roles_from_order)

    def _publish(self, work: Path, run_id: str) -> None:
        """Move a committed run's staged folders into place (units first: a run visible in runs/
        has its units). Idempotent; a failure leaves the rest to the next writer."""
        try:
            for part in ("units", "runs"):
                staged, final = work / part / f"run={run_id}", self.path / part / f"run={run_id}"
                if staged.exists() and not final.exists():
                    (self.path / part).mkdir(exist_ok=True)
                    os.rename(staged, final)
            fsync_path(self.path / "runs")
            shutil.rmtree(work)
        except OSError:
            pass  # the run is committed; readers find it in staging until a writer finishes this

    def housekeep(self) -> None:
        """Finish or undo what dead writers left in staging (call under the store lock)."""
        staging = self.path / STAGING
        listed: set | None = None
        for entry in sorted(staging.iterdir()) if staging.is_dir() else []:
            if entry.is_dir():
                lock = staging / f"{entry.name}.lock"
                fd = claim_stale(lock)
                if fd is None:
                    continue  # a live writer's
                try:
                    if listed is None:
                        listed = set(self._read_runs()["id"])
                    self._finish(entry, listed)
                    lock.unlink(missing_ok=True)
                finally:
                    release(fd)
            elif entry.name.endswith(".lock"):
                if (staging / entry.name[: -len(".lock")]).exists():
                    continue
                fd = claim_stale(entry)
                if fd is not None:
                    entry.unlink(missing_ok=True)
                    release(fd)
            else:  # tmp-*: written only under the store lock we hold, so a dead writer's
                entry.unlink(missing_ok=True)
        for entry in self.path.glob(".tmp-*"):  # temporaries of smlens versions before staging
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)

    def _finish(self, work: Path, listed: set) -> None:
        """Roll a dead writer's transaction forward or back: a listed run's staged folders go
        (back) into place; an unlisted run's staged folders are deleted."""
        kind, _, run_id = work.name.partition("-")
        if kind in ("ingest", "rm") and run_id in listed:
            self._publish(work, run_id)
            return
        if kind == "update" and run_id in listed:
            runs = self._read_runs()
            self.sync_meta(runs[runs["id"] == run_id].iloc[0].to_dict())
        shutil.rmtree(work, ignore_errors=True)

    def _move_out(self, run_id: str, work: Path) -> None:
        for part in ("runs", "units"):
            folder = self.path / part / f"run={run_id}"
            if folder.exists():
                (work / part).mkdir(parents=True, exist_ok=True)
                os.rename(folder, work / part / folder.name)

    def sync_meta(self, row: dict) -> None:
        """Rewrite a run folder's _run.json from its row in the runs table."""
        run_dir = self.path / "runs" / f"run={row['id']}"
        if run_dir.is_dir():
            self._write_meta(run_dir, plain_row(row), self.meta(row["id"]).get("units"))

    def _update(self, row: dict, name: str | None, tags: dict | None, locked: bool = False) -> dict:
        """A new name or new tags for a stored run (tags merge: a given key takes the new value)."""
        changes = row_changes(row, name, tags)
        if not changes:
            return row
        with self.writing("the run's name and tags are unchanged"), \
                (contextlib.nullcontext() if locked else self.locked()):
            if not locked:
                self.housekeep()
            runs = self._read_runs()
            where = runs["id"] == row["id"]
            if not where.any():
                raise BadInput(f"run {row['id']} was removed meanwhile; ingest the file again")
            intent = self.staging() / f"update-{row['id']}"
            intent.mkdir(exist_ok=True)
            for column, value in changes.items():
                runs.loc[where, column] = value
            self.write_runs(runs)
            new_row = runs[where].iloc[0].to_dict()
            with contextlib.suppress(OSError):  # committed: the intent makes the next writer do it
                self.sync_meta(new_row)
                intent.rmdir()
        return {**new_row, "changed": sorted(changes)}

    def _write_kernels(self, source: Path, run_dir: Path, units_dir: Path, run_id: str,
                       shapes: dict | None, on_progress=None, roles_from_order: bool = False) -> dict:
        # the capture readers only where one is read: `smlens views` reads a stored run (BENCHMARKS.md)
        from profiler.ingest import capture, capture_raw
        from profiler.ingest.capture_table import MEASURED, RunFacts

        notes: list[str] = []
        kind = capture.sniff(source)
        kernels_path = run_dir / "kernels.parquet"
        count = 0
        first: pa.Table | None = None
        units: dict = {}
        facts = RunFacts()
        if kind == "raw":  # streamed: a large capture never sits in memory whole
            writer = None
            try:
                for table, units in capture_raw.iter_raw_tables(source, shapes, notes, on_progress,
                                                                roles_from_order):
                    table = table.append_column("run_id", pa.array([run_id] * table.num_rows))
                    if writer is None:
                        writer = pq.ParquetWriter(kernels_path, table.schema)
                        first = table.slice(0, 1)
                    writer.write_table(table.cast(writer.schema))
                    facts.add(table)
                    count += table.num_rows
            finally:
                if writer is not None:
                    writer.close()
        else:
            result = capture.read_capture(source, shapes=shapes, roles_from_order=roles_from_order)
            notes, units = result.notes, result.units
            frame = result.kernels.assign(run_id=run_id)
            frame.to_parquet(kernels_path, index=False)
            count = len(frame)
            first = pa.Table.from_pandas(frame.head(1), preserve_index=False)
            facts.add(pa.Table.from_pandas(frame[[c for c in ("kernel_id", "device", MEASURED,
                                                              "profiler__replayer_passes") if c in frame]],
                                           preserve_index=False))
        fsync_path(kernels_path)
        units_path = units_dir / "units.parquet"
        write_units(units_path, units)
        return {"source_format": kind, "kernel_count": count, "notes": notes, "units": dict(units),
                "device_name": _first_value(first, "device__attribute_display_name"),
                "cc": _first_value(first, "cc"), "capture": facts.result()}

    def remove(self, refs) -> list[dict]:
        """Remove runs (every reference must name exactly one run, or nothing is removed)."""
        refs = [refs] if isinstance(refs, str) else list(refs)
        with self.writing("nothing was removed"):
            staging = self.staging()
            with self.locked():
                self.housekeep()
                runs = self._read_runs()
                ids = list(dict.fromkeys(self.resolve(ref, unique=True, runs=runs) for ref in refs))
                rows = [runs[runs["id"] == run_id].iloc[0].to_dict() for run_id in ids]
                works = [staging / f"rm-{run_id}" for run_id in ids]
                committed = False
                try:  # out of Parquet readers' sight first, then the commit
                    for run_id, work in zip(ids, works):
                        work.mkdir(exist_ok=True)
                        self._move_out(run_id, work)
                    self.write_runs(runs[~runs["id"].isin(ids)])
                    committed = True
                finally:
                    if not committed:  # put back what was moved
                        for run_id, work in zip(ids, works):
                            self._publish(work, run_id)
        for work in works:
            shutil.rmtree(work, ignore_errors=True)
        return rows

    # --- reading ----------------------------------------------------------------------------

    def _read_runs(self) -> pd.DataFrame:
        path = self.path / RUNS_TABLE
        if not path.exists():
            if any((self.path / "runs").glob("run=*")):
                raise StoreDamaged(self.path, f"the runs table {RUNS_TABLE} is missing but run folders exist")
            return pd.DataFrame(columns=RUN_COLUMNS)
        try:
            runs = read_parquet_file(path)
        except READ_ERRORS as err:
            raise StoreDamaged(self.path, f"the runs table {RUNS_TABLE} cannot be read ({reason(err)})") from None
        missing = [c for c in REQUIRED_RUN_COLUMNS if c not in runs]
        if missing:
            raise StoreDamaged(self.path, f"the runs table {RUNS_TABLE} lacks {', '.join(missing)}")
        if runs["id"].duplicated().any():
            raise StoreDamaged(self.path, f"the runs table {RUNS_TABLE} lists a run twice")
        return runs

    def runs(self) -> pd.DataFrame:
        return self._read_runs()

    def _find_sha(self, sha256: str, shapes_key: str, roles_from_order: bool) -> dict | None:
        """The run already made from this file, read the same way."""
        runs = self._read_runs()
        if not len(runs):
            return None
        by_order = runs["roles_from_order"].fillna(False) if "roles_from_order" in runs else False
        same = runs[(runs["sha256"] == sha256) & (runs.get("shapes", "") == shapes_key)
                    & (by_order == bool(roles_from_order))]
        return same.iloc[0].to_dict() if len(same) else None

    def resolve(self, ref: str | None, unique: bool = False, runs: pd.DataFrame | None = None) -> str:
        """A run id from an id, an id prefix of at least MIN_ID_PREFIX characters that one run's id
        begins with, a name (the newest run of that name), or `latest` / nothing (the newest run).
        `unique`: a name several runs share is refused. Every command that names a stored run
        (show, rm, views, report, gate) comes here."""
        if ref is not None and not str(ref).strip():
            raise BadInput("an empty run reference (an unset shell variable?): give a run id, id "
                           "prefix, name or 'latest'")
        runs = self._read_runs() if runs is None else runs
        if not len(runs):
            raise BadInput(f"{self.path}: the store holds no runs; ingest a capture first")
        if ref is not None and not _utf8(ref):  # undecodable bytes of a file name: no run's name
            raise BadInput(f"no run {ref!r} in {self.path} (see `smlens runs`)")
        runs = runs.sort_values("created", kind="stable")
        if ref in (None, "latest"):
            return runs["id"].iloc[-1]
        if ref in set(runs["id"]):
            return ref
        by_name = runs[runs["name"] == ref]
        if unique and len(by_name) > 1:
            raise BadInput(f"run {ref!r} is ambiguous: {len(by_name)} runs have that name "
                           f"({', '.join(by_name['id'])}); give an id")
        if len(by_name):
            return by_name["id"].iloc[-1]
        by_prefix = runs[runs["id"].str.startswith(ref)]
        if len(by_prefix) and len(ref) < MIN_ID_PREFIX:
            matching = "one run's id begins" if len(by_prefix) == 1 else f"{len(by_prefix)} runs' ids begin"
            raise BadInput(f"run {ref!r} is too short an id prefix: give at least {MIN_ID_PREFIX} "
                           f"characters, or the run's name ({matching} with {ref!r}; see `smlens runs`)")
        if len(by_prefix) == 1:
            return by_prefix["id"].iloc[0]
        if len(by_prefix) > 1:
            raise BadInput(f"run {ref!r} is ambiguous: {', '.join(by_prefix['id'])}")
        raise BadInput(f"no run {ref!r} in {self.path} (see `smlens runs`)")

    def run(self, ref: str | None) -> dict:
        runs = self._read_runs()
        run_id = self.resolve(ref, runs=runs)
        return runs[runs["id"] == run_id].iloc[0].to_dict()

    def run_file(self, run_id: str, part: str, name: str) -> Path:
        """A listed run's file: in place, or in staging while (or because: its writer was killed)
        an ingest moves it in or an rm moves it out (the next writer finishes either)."""
        relative = Path(part) / f"run={run_id}" / name
        for path in (self.path / relative, self.path / STAGING / f"ingest-{run_id}" / relative,
                     self.path / STAGING / f"rm-{run_id}" / relative):
            if path.exists():
                return path
        raise StoreDamaged(self.path, f"run {run_id} is listed but {relative} is missing")

    def _read_file(self, run_id: str, part: str, name: str, read):
        for attempt in (1, 2):  # a file moved into place between finding and reading it
            path = self.run_file(run_id, part, name)
            try:
                return read(path)
            except FileNotFoundError:
                if attempt == 2:
                    raise StoreDamaged(self.path, f"run {run_id}: {path} vanished while being read") from None
            except READ_ERRORS as err:
                shown = path.relative_to(self.path)
                raise StoreDamaged(self.path, f"run {run_id}: {shown} cannot be read ({reason(err)})") from None

    def kernels(self, ref: str | None, columns: list[str] | None = None) -> pd.DataFrame:
        """The run's kernels table. `columns` limits what is read (missing names are skipped)."""
        run_id = self.resolve(ref)
        return self._read_file(run_id, "runs", "kernels.parquet", lambda path: read_parquet_file(path, columns))

    def units(self, ref: str | None) -> dict[str, str]:
        run_id = self.resolve(ref)
        frame = self._read_file(run_id, "units", "units.parquet", read_parquet_file)
        if not {"metric", "unit"} <= set(frame.columns):
            raise StoreDamaged(self.path, f"run {run_id}: units/run={run_id}/units.parquet lacks metric, unit")
        return dict(zip(frame["metric"], frame["unit"]))

    def meta(self, run_id: str) -> dict:
        """The run folder's own record ({} when absent or unreadable: older stores lack it)."""
        try:
            meta = json.loads((self.path / "runs" / f"run={run_id}" / RUN_META).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(meta, dict):
            return {}
        if meta.get("units") is None:
            with contextlib.suppress(BadInput):
                meta["units"] = self.units(run_id)
        return meta


def new_run_row(run_id: str, source: Path, name: str | None, tags: dict | None, sha256: str,
                shapes_key: str, summary: dict, ncu_version: str | None, partial: bool,
                roles_from_order: bool) -> dict:
    """The runs-table row of a capture just read (`summary`: what _write_kernels returned)."""
    return {
        "id": run_id, "name": name or source.name, "tags": json.dumps(tags or {}),
        # microseconds: the order of runs (`latest`) survives a rebuild of the table
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
        "source": str(source.resolve()), "sha256": sha256,
        "source_format": summary["source_format"],
        "ncu_version": ncu_version, "device_name": summary["device_name"],
        "cc": summary["cc"], "host": socket.gethostname(),
        "kernel_count": summary["kernel_count"], "partial": bool(partial),
        "shapes": shapes_key, "roles_from_order": bool(roles_from_order),
        "notes": json.dumps(summary["notes"]),
        # what the capture says of the run (capture_table.RunFacts); stores before it lack the column
        "capture": json.dumps(summary.get("capture") or {}),
    }


def row_changes(row: dict, name: str | None, tags: dict | None) -> dict:
    """The columns a re-ingest with `name` and `tags` changes (tags merge: a given key takes the
    new value)."""
    old_tags = json.loads(row.get("tags") or "{}")
    changes = {}
    if name is not None and name != row["name"]:
        changes["name"] = name
    if tags and {**old_tags, **tags} != old_tags:
        changes["tags"] = json.dumps({**old_tags, **tags})
    return changes


def write_units(path: Path, units: dict) -> None:
    pd.DataFrame({"metric": list(units), "unit": list(units.values())},
                 dtype="object").to_parquet(path, index=False)
    fsync_path(path)


def plain_row(row: dict) -> dict:
    """A runs-table row as JSON-safe values (numpy scalars, NaN and NA made plain)."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if value is pd.NA or (isinstance(value, float) and value != value):
            value = None
        out[key] = value
    return out


def commits_through_log(spec) -> bool:
    from profiler.ingest.objectstore import is_url

    if is_url(spec):
        return True
    try:
        return json.loads((Path(spec) / MARKER).read_text()).get("commits") == "log"
    except (OSError, ValueError, AttributeError):
        return False


def _first_value(table: pa.Table | None, column: str):
    if table is None or column not in table.column_names or table.num_rows == 0:
        return None
    value = table.column(column)[0].as_py()
    return None if value is None else str(value)
