"""`smlens store check` and `smlens store repair` for a store that commits through a log (an s3://
URL, or a folder copied from one): the same report as a folder store's (profiler.ingest.store_check).

check reads the whole log (not just the checkpoint and its tail), lists runs/, units/ and
_staging/ once each, and reads every run file's Parquet footer. repair appends log entries for
what it changes (runs delisted because their files are gone or unreadable, run folders the log
lost listed again from their kernels), writes a placeholder over a lost or unreadable log entry,
publishes committed runs a dead writer left staged, deletes staged files of no commit once stale
and the files of removed runs, copies unreadable files to quarantine/<time>/ before deleting them,
and rewrites the runs table checkpoint.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import asdict, dataclass, field

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from profiler.ingest import logstore as ls
from profiler.ingest.store_check import Problem

QUARANTINE = "quarantine/"


@dataclass
class Survey:
    store: ls.LogStore
    state: ls.LogState | None = None
    lost_versions: list = field(default_factory=list)  # log entries missing or unreadable
    problems: list = field(default_factory=list)
    in_progress: list = field(default_factory=list)
    unreadable: dict = field(default_factory=dict)  # run id -> keys that cannot be read
    unlisted: dict = field(default_factory=dict)  # run id -> its published kernels' key
    removed_files: list = field(default_factory=list)  # keys of runs the log removed
    junk_files: list = field(default_factory=list)  # keys of unreadable runs the log never listed
    unpublished: dict = field(default_factory=dict)  # run id -> staged keys
    abandoned: list = field(default_factory=list)  # staged keys of no commit, stale

    def add(self, kind: str, path: str, detail: str, repair: str) -> None:
        self.problems.append(Problem(kind, path, detail, repair))


def _read_log(found: Survey) -> None:
    """The whole log, entry by entry; a missing or unreadable entry is skipped and reported."""
    store = found.store
    keys = {e.key for e in store.objects.list(ls.LOG) if e.key.endswith(".json")}
    last = max((int(k[len(ls.LOG):-len(".json")]) for k in keys if k[len(ls.LOG):-5].isdigit()),
               default=-1)
    entries = []
    for version in range(last + 1):
        key = ls.log_key(version)
        try:
            entry = json.loads(store.objects.read(key)) if key in keys else None
        except ValueError:
            entry = None
        if entry is None or entry.get("version") != version:
            found.lost_versions.append(version)
            found.add("log", key, "missing" if key not in keys else "unreadable",
                      "a placeholder entry written in its place; runs it listed are listed again "
                      "from their files")
            continue
        entries.append(entry)
    found.state = ls.apply_entries(ls.LogState(-1, pd.DataFrame(columns=["id"])), entries)
    if found.state.version < last:
        found.state = ls.LogState(last, found.state.runs, found.state.removed)


def _check_checkpoint(found: Survey) -> None:
    store = found.store
    try:
        table = pq.read_table(pa.BufferReader(store.objects.read(ls.RUNS_TABLE)))
        version = int((table.schema.metadata or {})[ls.VERSION_KEY])
    except FileNotFoundError:
        if found.state.version >= 0:
            found.add("runs-table", ls.RUNS_TABLE, "missing: readers replay the whole log",
                      "rewritten from the log")
        return
    except (KeyError, ValueError, pa.ArrowException):
        found.add("runs-table", ls.RUNS_TABLE, "unreadable: readers replay the whole log",
                  "rewritten from the log")
        return
    if version > found.state.version:
        found.add("runs-table", ls.RUNS_TABLE, f"as of log version {version}, past the log's end "
                  f"({found.state.version})", "rewritten from the log")


def _footer_ok(store: ls.LogStore, key: str) -> bool:
    try:
        pq.read_metadata(pa.BufferReader(store.objects.read(key)))
        return True
    except (FileNotFoundError, pa.ArrowException, OSError):
        return False


def _check_runs(found: Survey) -> None:
    store = found.store
    live = set(found.state.runs["id"])
    present: dict[str, set] = {}
    for prefix in ("runs/", "units/"):
        for entry in store.objects.list(prefix):
            folder, _, name = entry.key[len(prefix):].partition("/")
            if folder.startswith("run="):
                present.setdefault(folder[len("run="):], set()).add(entry.key)
    staged: dict[str, list] = {}
    for entry in store.objects.list(ls.STAGING):
        run_id, _, key = entry.key[len(ls.STAGING):].partition("/")
        staged.setdefault(run_id, []).append((key, entry))
    for run_id in sorted(live):
        for key in (ls.kernels_key(run_id), ls.units_key(run_id)):
            where = key if key in present.get(run_id, ()) else ls.staged_key(run_id, key)
            if not _footer_ok(store, where):
                found.unreadable[run_id] = sorted(present.get(run_id, set()) | {
                    e.key for _, e in staged.get(run_id, [])})
                found.add("run-file", key, "missing or unreadable for a listed run",
                          "the run delisted (a remove entry); what is left of it copied to quarantine/")
    for run_id, keys in sorted(present.items()):
        if run_id in live:
            continue
        if run_id in found.state.removed:
            found.removed_files += sorted(keys)
            found.add("removed-run-files", ls.run_folder(run_id), "files of a removed run",
                      "deleted (as rm would have)")
        elif ls.kernels_key(run_id) in keys and _footer_ok(store, ls.kernels_key(run_id)):
            found.unlisted[run_id] = ls.kernels_key(run_id)
            found.add("unlisted", ls.run_folder(run_id), "a complete run folder the log does not list",
                      "listed again (an add entry, its row from its _run.json or its kernels)")
        else:
            found.junk_files += sorted(keys)
            found.add("unlisted", ls.run_folder(run_id), "an unreadable run folder the log does not list",
                      "copied to quarantine/, then deleted")
    now = dt.datetime.now(dt.timezone.utc)
    for run_id, entries in sorted(staged.items()):
        if run_id in found.unreadable:
            continue  # delisted and quarantined whole
        if run_id in live:
            found.unpublished[run_id] = [key for key, _ in entries]
            found.add("unpublished", f"{ls.STAGING}{run_id}/", "a committed run its writer did not publish "
                      "(readers find it here)", "published (so does the next ingest or rm)")
        elif run_id in found.state.removed or all(
                (now - e.modified).total_seconds() > ls.STALE_STAGING_S for _, e in entries):
            found.abandoned += [e.key for _, e in entries]
            found.add("interrupted", f"{ls.STAGING}{run_id}/", "staged files of no commit (a killed "
                      "writer)", "deleted (so does the next ingest or rm)")
        else:
            found.in_progress.append(f"{ls.STAGING}{run_id}/")


def survey(store: ls.LogStore) -> Survey:
    found = Survey(store)
    _read_log(found)
    _check_checkpoint(found)
    _check_runs(found)
    return found


def check(spec) -> dict:
    found = survey(ls.LogStore(spec, create=False))
    return {"store": found.store.path, "ok": not found.problems, "runs": len(found.state.runs),
            "problems": [asdict(p) for p in found.problems], "in_progress": found.in_progress}


def _recovered_row(store: ls.LogStore, run_id: str, key: str) -> dict:
    """The row of a run whose log entry is lost: its folder's _run.json, or failing that what its
    kernels file says."""
    recorded = store.meta(run_id).get("run")
    if isinstance(recorded, dict) and recorded.get("id") == run_id:
        return recorded
    table = pq.read_table(pa.BufferReader(store.objects.read(key)))
    first = table.slice(0, 1).to_pylist()[0] if table.num_rows else {}
    return {"id": run_id, "name": f"recovered-{run_id}", "tags": "{}",
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "source": None, "sha256": None, "source_format": None, "ncu_version": None,
            "device_name": _text(first.get("device__attribute_display_name")),
            "cc": _text(first.get("cc")), "host": _text(first.get("host")), "kernel_count": table.num_rows,
            "partial": False, "shapes": "[]", "roles_from_order": False,
            "notes": json.dumps(["recovered by `smlens store repair`: its log entry was lost"])}


def _text(value):
    return None if value is None else str(value)


def repair(spec) -> dict:
    store = ls.LogStore(spec, create=False)
    found = survey(store)
    actions: list[str] = []
    if not found.problems:
        return {"store": store.path, "actions": [], "runs": len(found.state.runs), "ok": True}
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    for version in found.lost_versions:
        store.objects.put(ls.log_key(version), json.dumps(
            {"version": version, "action": "lost", "committed": stamp, "host": "smlens store repair"}
        ).encode())
        actions.append(f"wrote a placeholder for {ls.log_key(version)}")

    def quarantine(keys) -> None:
        for key in keys:
            try:
                store.objects.copy(key, f"{QUARANTINE}{stamp}/{key}")
            except FileNotFoundError:
                continue
            actions.append(f"copied {key} to {QUARANTINE}{stamp}/{key}")
        store.objects.delete(keys)

    for run_id, keys in found.unreadable.items():
        store.commit(lambda state, run_id=run_id: {"action": "remove", "ids": [run_id], "reason": "repair"}
                      if run_id in set(state.runs["id"]) else None)
        quarantine(keys)
        actions.append(f"delisted run {run_id}")
    for run_id, key in found.unlisted.items():
        row = _recovered_row(store, run_id, key)
        store.commit(lambda state, row=row: {"action": "add", "run": row}
                      if row["id"] not in set(state.runs["id"]) else None)
        actions.append(f"listed run {run_id} again from {key}")
    quarantine(found.junk_files)
    if found.removed_files:
        store.objects.delete(found.removed_files)
        actions += [f"deleted {key}" for key in found.removed_files]
    for run_id, keys in found.unpublished.items():
        store.publish(run_id, keys)
        actions.append(f"published run {run_id}")
    if found.abandoned:
        store.objects.delete(found.abandoned)
        actions += [f"deleted {key}" for key in found.abandoned]
    state = store.log_state(fresh=True)
    store.checkpoint(state)
    actions.append(f"wrote {ls.RUNS_TABLE} (log version {state.version}, {len(state.runs)} runs)")
    left = check(spec)
    return {"store": store.path, "actions": actions, "runs": left["runs"], "ok": left["ok"],
            "problems": left["problems"]}
