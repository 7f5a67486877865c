"""`smlens store check` and `smlens store repair`: every inconsistency of a store, and the way back.

`check` reads and never writes. `repair`, under the store lock, finishes or undoes interrupted
transactions, rebuilds the runs table from the run folders' own records (`_run.json`) when the
table is missing or unreadable, lists again complete run folders the table lacks, rewrites records
that disagree with the table, and moves what cannot be read to `quarantine/<time>/`: nothing is
deleted. Like `git fsck`, check says what is wrong and what repair would do about it.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from profiler.errors import BadInput
from profiler.ingest import store as st

_RUN_FOLDER = re.compile(r"^run=([0-9A-Za-z_-]+)$")


@dataclass
class Problem:
    kind: str  # a short code a script can match
    path: str  # relative to the store
    detail: str
    repair: str  # what `smlens store repair` does about it


@dataclass
class Survey:
    """What a store holds, file by file, and what is wrong with it."""

    store: Path
    table_ok: bool = True
    listed: dict = field(default_factory=dict)  # id -> runs-table row
    folders: dict = field(default_factory=dict)  # id -> {"meta": dict|None, "rows": int|None}
    problems: list = field(default_factory=list)
    in_progress: list = field(default_factory=list)
    quarantine: list = field(default_factory=list)  # relative paths repair moves away
    unlisted_ok: list = field(default_factory=list)  # run folders repair lists again
    sync_meta: list = field(default_factory=list)  # ids whose _run.json repair rewrites
    delist: list = field(default_factory=list)  # ids whose files are gone

    def add(self, kind: str, path, detail: str, repair: str) -> None:
        self.problems.append(Problem(kind, str(path), detail, repair))


def _open(path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"{path}: no store folder here" if not path.exists() else f"{path}: not a folder")
    if not (path / st.MARKER).exists() and not st.looks_like_store(path):
        raise BadInput(f"{path}: not an smlens store (no {st.MARKER}, no runs)")
    return path


def survey(path) -> Survey:
    root = _open(path)
    found = Survey(root)
    _check_marker(found)
    _check_table(found)
    _check_run_folders(found)
    _check_units(found)
    _check_staging(found)
    for entry in sorted(root.glob(".tmp-*")):
        found.add("old-temporary", entry.name, "a temporary left by an older smlens that was killed",
                  "removed")
    return found


def _check_marker(found: Survey) -> None:
    marker = found.store / st.MARKER
    try:
        version = json.loads(marker.read_text()).get("format")
    except FileNotFoundError:
        found.add("marker", st.MARKER, "the store marker is missing", "written again")
        return
    except (OSError, ValueError, AttributeError) as err:
        found.add("marker", st.MARKER, f"the store marker cannot be read ({st.reason(err)})",
                  "written again")
        return
    if version != st.FORMAT_VERSION:
        raise BadInput(f"{found.store}: store format {version}, this smlens reads {st.FORMAT_VERSION}")


def _check_table(found: Survey) -> None:
    try:
        table = st.Store.unchecked(found.store).runs()
    except st.StoreDamaged as err:
        found.table_ok = False
        found.add("runs-table", st.RUNS_TABLE, err.problem,
                  "moved to quarantine; the table is rebuilt from the run folders' _run.json")
        return
    found.listed = {row["id"]: row for row in table.to_dict("records")}


def _read_meta(run_dir: Path) -> tuple[dict | None, str | None]:
    try:
        meta = json.loads((run_dir / st.RUN_META).read_text())
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as err:
        return None, st.reason(err)
    run = meta.get("run") if isinstance(meta, dict) else None
    if not isinstance(run, dict) or not all(k in run for k in st.REQUIRED_RUN_COLUMNS):
        return None, "not a run record"
    return meta, None


def _same_record(row: dict, run: dict) -> bool:
    keys = ("id", "name", "tags", "sha256", "kernel_count")
    return all(str(row.get(k)) == str(run.get(k)) for k in keys)


def _check_run_folders(found: Survey) -> None:
    runs_dir = found.store / "runs"
    entries = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    for entry in entries:
        relative = entry.relative_to(found.store)
        match = _RUN_FOLDER.match(entry.name)
        if not match or not entry.is_dir():
            found.add("stray", relative, "not a run folder: Parquet readers of runs/ trip on it",
                      "moved to quarantine")
            found.quarantine.append(relative)
            continue
        run_id = match.group(1)
        rows, read_error = None, None
        try:
            rows = pq.read_metadata(entry / "kernels.parquet").num_rows
        except st.READ_ERRORS as err:
            read_error = "missing" if isinstance(err, FileNotFoundError) else st.reason(err)
        meta, meta_error = _read_meta(entry)
        found.folders[run_id] = {"meta": meta, "rows": rows}
        row = found.listed.get(run_id)
        if read_error is not None:
            what = "listed" if row is not None else "unlisted"
            found.add("kernels", relative / "kernels.parquet",
                      f"the kernels of {what} run {run_id} cannot be read ({read_error})",
                      "the run folder is moved to quarantine" + (" and delisted" if row else ""))
            found.quarantine += [relative, Path("units") / entry.name]
            found.delist.append(run_id)
            continue
        if row is not None:
            if int(row["kernel_count"]) != rows:
                found.add("kernel-count", relative / "kernels.parquet",
                          f"run {run_id} is listed with {row['kernel_count']} kernels, its file holds {rows}",
                          "the run folder is moved to quarantine and delisted")
                found.quarantine += [relative, Path("units") / entry.name]
                found.delist.append(run_id)
            elif (meta is None or not _same_record(row, meta["run"])) and \
                    not (found.store / st.STAGING / f"update-{run_id}").exists():  # reported there
                state = meta_error or "disagrees with the runs table"
                found.add("record", relative / st.RUN_META, f"run {run_id}'s record is {state}",
                          "written again from the runs table")
                found.sync_meta.append(run_id)
        elif not found.table_ok and meta is not None and int(meta["run"]["kernel_count"]) == rows:
            found.unlisted_ok.append(run_id)  # the table is rebuilt from these: not a problem of its own
        elif meta is not None and int(meta["run"]["kernel_count"]) == rows:
            found.add("unlisted", relative, f"run {run_id} ({meta['run'].get('name')}) is complete but "
                      "not in the runs table: Parquet readers of runs/ see it, smlens does not",
                      "listed again from its _run.json")
            found.unlisted_ok.append(run_id)
        else:
            found.add("unlisted", relative, f"run folder {run_id} is not in the runs table and has no "
                      f"usable record ({meta_error or 'its kernel count disagrees'})",
                      "moved to quarantine")
            found.quarantine += [relative, Path("units") / entry.name]
    for run_id, row in found.listed.items():
        if run_id in found.folders:
            continue
        if (found.store / st.STAGING / f"ingest-{run_id}" / "runs" / f"run={run_id}").is_dir():
            found.add("unmoved", Path(st.STAGING) / f"ingest-{run_id}",
                      f"run {run_id} is committed but its files are still in staging (its writer was "
                      "killed): smlens reads it, Parquet readers of runs/ do not yet",
                      "moved into place (so does the next ingest or rm)")
            continue
        if (found.store / st.STAGING / f"rm-{run_id}" / "runs" / f"run={run_id}").is_dir():
            continue  # an rm killed before its commit: reported with the staging folder
        found.add("missing", Path("runs") / f"run={run_id}",
                  f"run {run_id} ({row.get('name')}) is listed but its folder is gone",
                  "delisted (its row and units are kept in quarantine)")
        found.delist.append(run_id)
        found.quarantine.append(Path("units") / f"run={run_id}")


def _check_units(found: Survey) -> None:
    units_dir = found.store / "units"
    for entry in sorted(units_dir.iterdir()) if units_dir.is_dir() else []:
        relative = entry.relative_to(found.store)
        match = _RUN_FOLDER.match(entry.name)
        run_id = match.group(1) if match and entry.is_dir() else None
        if run_id is None or run_id not in found.folders and run_id not in found.listed:
            if relative not in found.quarantine:
                found.add("stray", relative, "units of no run", "moved to quarantine")
                found.quarantine.append(relative)
            continue
        if run_id in found.delist:
            continue
        try:
            frame = pd.read_parquet(entry / "units.parquet")
            if not {"metric", "unit"} <= set(frame.columns):
                raise ValueError("no metric, unit columns")
        except st.READ_ERRORS as err:
            meta = (found.folders.get(run_id) or {}).get("meta") or {}
            fix = "written again from the run's _run.json" if meta.get("units") is not None else \
                "moved to quarantine; an empty units table takes its place (units unknown)"
            found.add("units", relative / "units.parquet", f"run {run_id}'s units cannot be read "
                      f"({'missing' if isinstance(err, FileNotFoundError) else st.reason(err)})", fix)
    for run_id in found.folders:
        if run_id not in found.delist and not (units_dir / f"run={run_id}").exists():
            meta = found.folders[run_id]["meta"] or {}
            fix = "written again from the run's _run.json" if meta.get("units") is not None else \
                "an empty units table is written (units unknown)"
            found.add("units", Path("units") / f"run={run_id}", f"run {run_id} has no units folder", fix)


def _check_staging(found: Survey) -> None:
    staging = found.store / st.STAGING
    for entry in sorted(staging.iterdir()) if staging.is_dir() else []:
        if entry.name.endswith(".lock") and (staging / entry.name[: -len(".lock")]).exists():
            continue
        if entry.is_dir():
            fd = st.claim_stale(staging / f"{entry.name}.lock")
            if fd is None:
                found.in_progress.append(entry.name)
                continue
            st.release(fd)
            kind, _, run_id = entry.name.partition("-")
            committed = run_id in found.listed
            outcome = {("ingest", False): "removed", ("rm", True): "undone: the run goes back into place",
                       ("rm", False): "the removal is finished",
                       ("update", True): "the run's _run.json is written again from the runs table",
                       }.get((kind, committed), "removed")
            if kind == "ingest" and committed:
                continue  # reported as "unmoved" with its run
            found.add("interrupted", Path(st.STAGING) / entry.name,
                      f"an interrupted {kind} (its command was killed)", outcome + " (so does the next ingest or rm)")
        elif entry.name.endswith(".lock"):
            fd = st.claim_stale(entry)
            if fd is None:
                found.in_progress.append(entry.name)
            else:
                st.release(fd)
        else:
            found.add("interrupted", Path(st.STAGING) / entry.name, "a temporary of a killed command",
                      "removed (so does the next ingest or rm)")


def check(path) -> dict:
    """`smlens store check` of a store folder committed in place (stores.check takes either kind)."""
    found = survey(path)
    return {"store": str(found.store), "ok": not found.problems,
            "runs": len(found.listed) if found.table_ok else None,
            "problems": [asdict(p) for p in found.problems], "in_progress": found.in_progress}


def repair(path) -> dict:
    """Make a store folder committed in place consistent; return what was done and what still
    needs a person (stores.repair takes either kind)."""
    root = _open(path)
    actions: list[str] = []
    store = st.Store.unchecked(root)
    with store.writing("the store was not repaired (nothing changed)"), store.locked():
        found = survey(root)
        if not found.problems:
            return {"store": str(root), "actions": [], "runs": len(found.listed), "ok": True}
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
        quarantine = root / st.QUARANTINE / stamp

        def move_away(relative: Path) -> None:
            source = root / relative
            if source.exists():
                (quarantine / relative).parent.mkdir(parents=True, exist_ok=True)
                os.rename(source, quarantine / relative)
                actions.append(f"moved {relative} to {quarantine.relative_to(root) / relative}")

        if any(p.kind == "marker" for p in found.problems):
            tmp = store.staging() / f"tmp-{uuid.uuid4().hex}-{st.MARKER}"
            st.write_json(tmp, {"format": st.FORMAT_VERSION})
            os.replace(tmp, root / st.MARKER)
            actions.append(f"wrote {st.MARKER}")
        rows = dict(found.listed)
        if not found.table_ok:
            move_away(Path(st.RUNS_TABLE))
        for relative in dict.fromkeys(found.quarantine):
            move_away(relative)
        gone = [rows.pop(run_id) for run_id in found.delist if run_id in rows]
        if gone:
            quarantine.mkdir(parents=True, exist_ok=True)
            st.write_json(quarantine / "delisted-runs.json", [st.plain_row(r) for r in gone])
            actions += [f"delisted run {r['id']} ({r.get('name')})" for r in gone]
        for run_id in found.unlisted_ok:
            rows[run_id] = found.folders[run_id]["meta"]["run"]
            actions.append(f"listed run {run_id} ({rows[run_id].get('name')}) from its _run.json")
        if rows != found.listed or not found.table_ok:
            table = pd.DataFrame([st.plain_row(r) for r in rows.values()] or None, columns=None
                                 if rows else st.RUN_COLUMNS)
            if len(table):
                table = table.sort_values("created", kind="stable")
            store.write_runs(table.reset_index(drop=True))
            actions.append(f"wrote {st.RUNS_TABLE} ({len(rows)} runs)")
        actions += [f"removed {entry.name}" for entry in root.glob(".tmp-*")]
        store.housekeep()
        actions += [f"finished {p.path}" for p in found.problems if p.kind in ("interrupted", "unmoved")]
        for run_id in found.sync_meta:
            store.sync_meta(rows[run_id])
            actions.append(f"wrote runs/run={run_id}/{st.RUN_META}")
        for problem in found.problems:
            if problem.kind != "units":
                continue
            run_id = _RUN_FOLDER.match(Path(problem.path).parts[1]).group(1)
            if run_id not in rows:
                continue
            units = ((found.folders.get(run_id) or {}).get("meta") or {}).get("units")
            if units is None:
                move_away(Path("units") / f"run={run_id}")
            folder = root / "units" / f"run={run_id}"
            folder.mkdir(parents=True, exist_ok=True)
            st.write_units(folder / "units.parquet", units or {})
            actions.append(f"wrote units/run={run_id}/units.parquet"
                           + ("" if units is not None else " (empty: the units were lost)"))
    left = check(root)
    return {"store": str(root), "actions": actions, "runs": left["runs"], "ok": left["ok"],
            "problems": left["problems"]}

