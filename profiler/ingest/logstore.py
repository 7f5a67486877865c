"""A store on object storage: runs committed through a log of conditional writes (no rename, no lock).

    smlens-store.json                 marker: {"format": 1, "commits": "log"}
    _log/<version:020d>.json          commit <version>: add or remove one run; created with
                                      put-if-absent (S3 `If-None-Match: *`): the commit point
    runs.parquet                      the runs table as of the log version in its metadata
                                      (`smlens.log_version`), rewritten every CHECKPOINT_EVERY commits
    runs/run=<id>/kernels.parquet     published after the commit
    units/run=<id>/units.parquet
    _staging/<id>/<key>               the run's files, written before the commit, outside runs/

A writer stages its run's files, reads the runs table and the log after it, and creates the next
log entry; when another writer took that version first, the create fails, it reads the new entry
(a concurrent ingest of the same file is then recognised) and tries the next version. So two
writers both land, a run is listed once its entry exists and never before, and a writer killed at
any point leaves either no entry (its staged files are ignored, and removed by a later writer once
stale) or an entry whose files a later writer publishes. runs/ holds committed runs only, so a
reader of runs/*/kernels.parquet without smlens sees no half run. docs/SCHEMA.md has the protocol.
"""
from __future__ import annotations

import concurrent.futures
import datetime as dt
import io
import json
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from profiler.errors import BadInput
from profiler.ingest.objectstore import S3Objects, open_objects
from profiler.ingest.store import (FORMAT_VERSION, MARKER, READ_ERRORS, RUN_COLUMNS, RUN_META,
                                   Store, StoreDamaged, new_run_id, new_run_row, plain_row, reason,
                                   row_changes, write_json)

LOG = "_log/"
STAGING = "_staging/"
RUNS_TABLE = "runs.parquet"
VERSION_KEY = b"smlens.log_version"
CHECKPOINT_EVERY = 10
# staged files of no commit are a writer's in progress until this old, then abandoned
STALE_STAGING_S = 3600
MAX_COMMIT_ATTEMPTS = 200
READ_THREADS = 8


def log_key(version: int) -> str:
    return f"{LOG}{version:020d}.json"


def run_folder(run_id: str) -> str:
    return f"runs/run={run_id}/"


def units_folder(run_id: str) -> str:
    return f"units/run={run_id}/"


def kernels_key(run_id: str) -> str:
    return f"{run_folder(run_id)}kernels.parquet"


def units_key(run_id: str) -> str:
    return f"{units_folder(run_id)}units.parquet"


def staged_key(run_id: str, key: str) -> str:
    """Where a run's file waits for its commit: its key in the store, under _staging/<id>/."""
    return f"{STAGING}{run_id}/{key}"


@dataclass
class LogState:
    """The runs table as of log `version` (-1: an empty log)."""
    version: int
    runs: pd.DataFrame
    removed: frozenset = frozenset()


class LogStore(Store):
    """The Store interface over a folder or an s3:// URL, committing through the log."""

    def __init__(self, spec, create: bool = True):
        self.objects = open_objects(spec)
        self.path = self.objects.url
        self._state_cache: LogState | None = None
        if isinstance(self.objects, S3Objects):
            self.objects.check_bucket()
        marker = self._marker()
        if marker is None:
            if not create:
                raise BadInput(f"{self.path}: no smlens store here; ingest a capture first "
                               f"(smlens ingest FILE --store {self.path})")
            # objects but no marker: not a store, unless a concurrent creator just made it
            if self.objects.list("", limit=1) and self._marker() is None:
                raise BadInput(f"{self.path}: not an smlens store (no {MARKER}); choose an empty "
                               "or new prefix with --store")
            # concurrent creators: one creates it, the others find it
            content = json.dumps({"format": FORMAT_VERSION, "commits": "log"}).encode()
            if self.objects.put_if_absent(MARKER, content) and self.objects.put_if_absent(MARKER, content):
                raise BadInput(f"{self.path}: this server ignores conditional writes (If-None-Match), "
                               "so concurrent commits could overwrite each other; use one that "
                               "honours them (AWS S3, MinIO, R2)")
            marker = self._marker()
        if marker.get("format") != FORMAT_VERSION or marker.get("commits") != "log":
            raise BadInput(f"{self.path}: store format {marker.get('format')} "
                           f"({marker.get('commits', 'folder')} commits), this smlens reads "
                           f"{FORMAT_VERSION} with log commits here")

    def _marker(self) -> dict | None:
        try:
            marker = json.loads(self.objects.read(MARKER))
        except FileNotFoundError:
            return None
        except ValueError:
            marker = None
        if not isinstance(marker, dict):
            raise StoreDamaged(self.path, f"the store marker {MARKER} cannot be read")
        return marker

    # --- the log ---------------------------------------------------------------------------

    def _snapshot(self) -> LogState:
        """runs.parquet and the version it reflects; an empty state where it is missing or
        unreadable (it is only a checkpoint: the log alone is complete)."""
        try:
            data = self.objects.read(RUNS_TABLE)
            table = pq.read_table(pa.BufferReader(data))
            version = int((table.schema.metadata or {})[VERSION_KEY])
            return LogState(version, table.to_pandas())
        except (FileNotFoundError, KeyError, ValueError, pa.ArrowException):
            return LogState(-1, pd.DataFrame(columns=RUN_COLUMNS))

    def _entries_after(self, version: int) -> list[dict]:
        keys = [e.key for e in self.objects.list(LOG, start_after=log_key(version))
                if e.key.endswith(".json")]
        with concurrent.futures.ThreadPoolExecutor(READ_THREADS) as pool:
            blobs = list(pool.map(self.objects.read, keys))
        entries = []
        for expected, (key, blob) in enumerate(zip(keys, blobs), start=version + 1):
            try:
                entry = json.loads(blob)
            except ValueError:
                raise StoreDamaged(self.path, f"the log entry {key} cannot be read") from None
            if entry.get("version") != expected or key != log_key(expected):
                raise StoreDamaged(self.path, f"log entry {expected} is missing (found {key})")
            entries.append(entry)
        return entries

    def _advance(self, state: LogState) -> LogState:
        """`state` moved forward over the log entries written since."""
        return apply_entries(state, self._entries_after(state.version))

    def log_state(self, fresh: bool = False) -> LogState:
        """The committed runs, read once per store object (one consistent snapshot per command);
        `fresh`: moved forward over what was committed since."""
        if self._state_cache is None:
            self._state_cache = self._advance(self._snapshot())
        elif fresh:
            self._state_cache = self._advance(self._state_cache)
        return self._state_cache

    def commit(self, decide) -> tuple[LogState, dict | None]:
        """Write the next log entry that `decide(state)` returns (None: nothing to commit).
        Returns the state including the entry, and the entry."""
        state = self.log_state(fresh=True)
        for _ in range(MAX_COMMIT_ATTEMPTS):
            entry = decide(state)
            if entry is None:
                return state, None
            entry = {"version": state.version + 1, **entry,
                     "committed": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds"),
                     "host": socket.gethostname()}
            if self.objects.put_if_absent(log_key(entry["version"]), json.dumps(entry).encode()):
                state = self._state_cache = apply_entries(state, [entry])
                if state.version % CHECKPOINT_EVERY == 0:
                    self.checkpoint(state)
                return state, entry
            state = self._advance(state)  # another writer took that version: read it, decide again
        raise BadInput(f"{self.path}: could not commit after {MAX_COMMIT_ATTEMPTS} attempts "
                       "(too many concurrent writers); try again")

    def checkpoint(self, state: LogState) -> None:
        """Write `state`'s runs table as the checkpoint a reader starts from."""
        table = pa.Table.from_pandas(state.runs, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               VERSION_KEY: str(state.version).encode()})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        self.objects.put(RUNS_TABLE, buffer.getvalue())

    # --- writing ---------------------------------------------------------------------------

    def ingest(self, source, name: str | None = None, tags: dict | None = None,
               shapes: dict | None = None, ncu_version: str | None = None,
               partial: bool = False, on_progress=None, roles_from_order: bool = False
               ) -> tuple[dict, bool]:
        """As Store.ingest: the file's run (new, or the one already made from it, with a new name
        or tags applied) and whether it is new."""
        source, sha256, shapes_key, existing = self._identify(source, name, shapes, roles_from_order)
        if existing is not None:
            return self._update(existing, name, tags), False
        run_id = new_run_id(set(self.log_state().runs["id"]))
        with tempfile.TemporaryDirectory(prefix="smlens-stage-") as folder:
            with self.writing("nothing was stored"):
                run_dir, units_dir = Path(folder) / run_folder(run_id), Path(folder) / units_folder(run_id)
                run_dir.mkdir(parents=True)
                units_dir.mkdir(parents=True)
                summary = self._write_kernels(source, run_dir, units_dir, run_id, shapes, on_progress,
                                              roles_from_order)
                row = plain_row(new_run_row(run_id, source, name, tags, sha256, shapes_key, summary,
                                             ncu_version, partial, roles_from_order))
                write_json(run_dir / RUN_META, {"format": FORMAT_VERSION, "run": row,
                                                "units": summary["units"]})
            row, new = self.add_staged(row, Path(folder))
        return (row, True) if new else (self._update(row, name, tags), False)

    def add_staged(self, row: dict, folder: Path) -> tuple[dict, bool]:
        """Commit a run whose files lie under `folder` as they will in the store (runs/run=<id>/...,
        units/run=<id>/...): stage them, commit the row, publish them. Returns (row, new); an
        ingest of the same file committed meanwhile wins and its row is returned."""
        run_id = row["id"]
        keys = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        for key in keys:
            self.objects.upload(staged_key(run_id, key), folder / key)
        winner = {}

        def decide(state: LogState):
            self._state_cache = state
            if run_id in set(state.runs["id"]):
                raise BadInput(f"{self.path}: run id {run_id} was taken meanwhile; ingest again")
            winner["row"] = self._find_sha(row["sha256"], row["shapes"], row["roles_from_order"])
            return None if winner["row"] else {"action": "add", "run": row}

        # a failure from here on leaves the staged files to the sweep: the commit may have landed
        state, entry = self.commit(decide)
        if entry is None:
            self.objects.delete([staged_key(run_id, key) for key in keys])
            return winner["row"], False
        self.publish(run_id, keys)
        self._sweep_staging(state)
        return row, True

    def publish(self, run_id: str, keys: list[str]) -> None:
        """A committed run's staged files into place, then the staged copies away."""
        for key in keys:
            try:
                self.objects.copy(staged_key(run_id, key), key)
            except FileNotFoundError:
                pass  # published already by another writer
        self.objects.delete([staged_key(run_id, key) for key in keys])

    def _sweep_staging(self, state: LogState, stale_after_s: float = STALE_STAGING_S) -> list[str]:
        """Publish staged runs that were committed (their writer died after the commit) and delete
        staged files of no commit once stale. Returns the run ids touched."""
        now = dt.datetime.now(dt.timezone.utc)
        live = set(state.runs["id"])
        by_run: dict[str, list] = {}
        for entry in self.objects.list(STAGING):
            run_id, _, key = entry.key[len(STAGING):].partition("/")
            by_run.setdefault(run_id, []).append((key, entry))
        touched = []
        for run_id, staged in by_run.items():
            if run_id in live:
                self.publish(run_id, [key for key, _ in staged])
            elif run_id in state.removed or all(
                    (now - e.modified).total_seconds() > stale_after_s for _, e in staged):
                self.objects.delete([e.key for _, e in staged])
            else:
                continue  # a writer in progress
            touched.append(run_id)
        return touched

    def _delete_run_files(self, run_id: str) -> None:
        self.objects.delete([e.key for prefix in (run_folder(run_id), units_folder(run_id),
                                                  f"{STAGING}{run_id}/")
                             for e in self.objects.list(prefix)])

    def _update(self, row: dict, name: str | None, tags: dict | None, locked: bool = False) -> dict:
        """A new name or new tags for a stored run: a log entry, then the run's _run.json."""
        changes = row_changes(row, name, tags)
        if not changes:
            return row

        def decide(state: LogState):
            if row["id"] not in set(state.runs["id"]):
                raise BadInput(f"run {row['id']} was removed meanwhile; ingest the file again")
            return {"action": "update", "id": row["id"], "changes": changes}

        state, _ = self.commit(decide)
        new_row = plain_row(state.runs[state.runs["id"] == row["id"]].iloc[0].to_dict())
        meta = self.meta(row["id"])
        if meta:  # the run folder's record follows; the log is what readers trust
            self.objects.put(f"{run_folder(row['id'])}{RUN_META}",
                             json.dumps({**meta, "run": new_row}).encode())
        return {**new_row, "changed": sorted(changes)}

    def remove(self, refs) -> list[dict]:
        """Remove runs: one log entry for all of them (every reference must name exactly one run,
        or nothing is removed), then their files."""
        refs = [refs] if isinstance(refs, str) else list(refs)
        rows: list[dict] = []

        def decide(state: LogState):
            ids = list(dict.fromkeys(self.resolve(ref, unique=True, runs=state.runs) for ref in refs))
            rows[:] = [state.runs[state.runs["id"] == run_id].iloc[0].to_dict() for run_id in ids]
            return {"action": "remove", "ids": ids}

        self.commit(decide)
        for row in rows:
            self._delete_run_files(row["id"])
        return rows

    # --- reading ---------------------------------------------------------------------------

    def _read_runs(self) -> pd.DataFrame:
        return self.log_state().runs

    def _run_file(self, run_id: str, key: str) -> bytes:
        """A committed run's file: published, or still staged when its writer died after the commit."""
        for candidate in (key, staged_key(run_id, key)):
            try:
                return self.objects.read(candidate)
            except FileNotFoundError:
                continue
        raise StoreDamaged(self.path, f"run {run_id} is listed but {key} is missing")

    def _read_parquet(self, run_id: str, key: str, columns: list[str] | None = None) -> pd.DataFrame:
        reader = pa.BufferReader(self._run_file(run_id, key))
        try:
            if columns is not None:
                present = set(pq.read_schema(reader).names)
                columns = [c for c in columns if c in present]
            return pq.read_table(reader, columns=columns).to_pandas()
        except READ_ERRORS as err:
            raise StoreDamaged(self.path, f"run {run_id}: {key} cannot be read ({reason(err)})") from None

    def kernels(self, ref: str | None, columns: list[str] | None = None) -> pd.DataFrame:
        run_id = self.resolve(ref)
        return self._read_parquet(run_id, kernels_key(run_id), columns)

    def units(self, ref: str | None) -> dict[str, str]:
        run_id = self.resolve(ref)
        frame = self._read_parquet(run_id, units_key(run_id))
        if not {"metric", "unit"} <= set(frame.columns):
            raise StoreDamaged(self.path, f"run {run_id}: {units_key(run_id)} lacks metric, unit")
        return dict(zip(frame["metric"], frame["unit"]))

    def meta(self, run_id: str) -> dict:
        """The run folder's own record ({} when absent or unreadable)."""
        try:
            meta = json.loads(self._run_file(run_id, f"{run_folder(run_id)}{RUN_META}"))
        except (BadInput, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}


def apply_entries(state: LogState, entries: list[dict]) -> LogState:
    """The runs table after `entries` (consecutive log entries following `state`)."""
    if not entries:
        return state
    runs, removed = state.runs, set(state.removed)
    added: list[dict] = []

    def flush(runs):  # rows added so far, in log order, before an entry that may touch them
        if not added:
            return runs
        new = pd.DataFrame(added)
        added.clear()
        return pd.concat([runs, new], ignore_index=True) if len(runs) else new

    for entry in entries:
        if entry["action"] == "add":
            added.append(entry["run"])
            continue
        runs = flush(runs)
        if entry["action"] == "remove":
            removed.update(entry["ids"])
            runs = runs[~runs["id"].isin(entry["ids"])]
        elif entry["action"] == "update":
            runs = runs.copy()
            for column, value in entry["changes"].items():
                runs.loc[runs["id"] == entry["id"], column] = value
        # "lost": the placeholder `smlens store repair` writes over a lost entry
    runs = flush(runs)
    return LogState(entries[-1]["version"], runs.reset_index(drop=True), frozenset(removed))
