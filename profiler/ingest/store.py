"""The Parquet store: a runs table and one folder of Parquet files per run.

    <store>/smlens-store.json           marks the folder as a store (format version)
    <store>/runs.parquet                one row per run
    <store>/runs/run=<id>/kernels.parquet
    <store>/units/run=<id>/units.parquet   metric, unit (beside, so a scan of runs/ reads kernels only)

The layout is Hive-partitioned so pandas, polars and DuckDB read it with no smlens code. Every
write goes to a temporary name inside the store and is renamed into place; the runs table is
rewritten under an exclusive lock, so concurrent ingests both land whole and a killed one leaves
at most an ignored `.tmp-*` folder.
"""
from __future__ import annotations

import contextlib
import datetime as dt
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

from profiler.ingest import capture
from profiler.errors import BadInput

FORMAT_VERSION = 1
MARKER = "smlens-store.json"
RUN_COLUMNS = ["id", "name", "tags", "created", "source", "sha256", "source_format", "ncu_version",
               "device_name", "cc", "host", "kernel_count", "partial"]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_tags(pairs: list[str] | None) -> dict[str, str]:
    tags = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--tag {pair!r}: expected KEY=VALUE")
        tags[key.strip()] = value.strip()
    return tags


class Store:
    def __new__(cls, path=None, create: bool = True):
        """An s3:// URL, or a folder holding a store that commits through a log (one copied from
        object storage), opens as a LogStore (profiler.ingest.logstore)."""
        if cls is Store and path is not None and _commits_through_log(path):
            from profiler.ingest.logstore import LogStore

            return super().__new__(LogStore)
        return super().__new__(cls)

    def __init__(self, path, create: bool = True):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise BadInput(f"{self.path}: is a file, not a store folder")
        if self.path.is_dir() and not (self.path / MARKER).exists():
            if any(self.path.iterdir()):
                raise BadInput(f"{self.path}: not an smlens store (no {MARKER}); choose an empty or "
                               "new folder with --store")
        if create:
            self._create()
        elif not (self.path / MARKER).exists():
            raise BadInput(f"{self.path}: no smlens store here; ingest a capture first "
                           "(smlens ingest FILE --store DIR)")

    def _create(self) -> None:
        if (self.path / MARKER).exists():
            self._check_version()
            return
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "runs").mkdir(exist_ok=True)
        (self.path / "units").mkdir(exist_ok=True)
        self._atomic_write_bytes(self.path / MARKER, json.dumps({"format": FORMAT_VERSION}).encode())

    def _check_version(self) -> None:
        try:
            version = json.loads((self.path / MARKER).read_text()).get("format")
        except (OSError, ValueError):
            raise BadInput(f"{self.path / MARKER}: unreadable store marker") from None
        if version != FORMAT_VERSION:
            raise BadInput(f"{self.path}: store format {version}, this smlens reads {FORMAT_VERSION}")

    # --- writing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self):
        with open(self.path / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _atomic_write_bytes(self, target: Path, data: bytes) -> None:
        tmp = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
        tmp.write_bytes(data)
        os.replace(tmp, target)

    def _write_runs(self, runs: pd.DataFrame) -> None:
        tmp = self.path / f".tmp-{uuid.uuid4().hex}-runs.parquet"
        runs.to_parquet(tmp, index=False)
        os.replace(tmp, self.path / "runs.parquet")

    def ingest(self, source, name: str | None = None, tags: dict | None = None,
               shapes: dict | None = None, ncu_version: str | None = None,
               partial: bool = False, on_progress=None, roles_from_order: bool = False
               ) -> tuple[dict, bool]:
        """Store a capture as a new run. Returns (the run's row, whether it was new).

        A file already in the store (same SHA-256, read the same way: shapes, roles from order) is
        recognised and not stored twice. `roles_from_order`: see capture.read_capture.
        """
        source = Path(source)
        if not source.is_file():
            raise BadInput(f"{source}: no such file")
        sha256 = file_sha256(source)
        shapes_key = json.dumps(sorted((shapes or {}).items()))
        existing = self._find_sha(sha256, shapes_key, roles_from_order)
        if existing is not None:
            return existing, False
        run_id = uuid.uuid4().hex[:8]
        staging = self.path / f".tmp-{run_id}"
        staging.mkdir()
        try:
            summary = self._write_kernels(source, staging, run_id, shapes, on_progress, roles_from_order)
            row = {
                "id": run_id, "name": name or source.name, "tags": json.dumps(tags or {}),
                "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "source": str(source.resolve()), "sha256": sha256,
                "source_format": summary["source_format"],
                "ncu_version": ncu_version, "device_name": summary["device_name"],
                "cc": summary["cc"], "host": socket.gethostname(),
                "kernel_count": summary["kernel_count"], "partial": bool(partial),
                "shapes": shapes_key, "roles_from_order": bool(roles_from_order),
                "notes": json.dumps(summary["notes"]),
            }
            with self._locked():
                again = self._find_sha(sha256, shapes_key, roles_from_order)
                if again is not None:  # a concurrent ingest of the same file won
                    return again, False
                # the runs table is the commit point: a folder not named in it is not a run
                (self.path / "units" / f"run={run_id}").mkdir()
                os.replace(staging / "units.parquet", self.path / "units" / f"run={run_id}" / "units.parquet")
                os.replace(staging, self.path / "runs" / f"run={run_id}")
                runs = self._read_runs()
                runs = pd.concat([runs, pd.DataFrame([row])], ignore_index=True) if len(runs) else pd.DataFrame([row])
                self._write_runs(runs)
            return row, True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_kernels(self, source: Path, staging: Path, run_id: str, shapes: dict | None,
                       on_progress=None, roles_from_order: bool = False) -> dict:
        notes: list[str] = []
        kind = capture.sniff(source)
        kernels_path = staging / "kernels.parquet"
        count = 0
        first: pa.Table | None = None
        units: dict = {}
        if kind == "raw":  # streamed: a large capture never sits in memory whole
            writer = None
            try:
                for table, units in capture.iter_raw_tables(source, shapes, notes, on_progress,
                                                            roles_from_order):
                    table = table.append_column("run_id", pa.array([run_id] * table.num_rows))
                    if writer is None:
                        writer = pq.ParquetWriter(kernels_path, table.schema)
                        first = table.slice(0, 1)
                    writer.write_table(table.cast(writer.schema))
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
        pd.DataFrame({"metric": list(units), "unit": list(units.values())}).to_parquet(
            staging / "units.parquet", index=False)
        return {"source_format": kind, "kernel_count": count, "notes": notes,
                "device_name": _first_value(first, "device__attribute_display_name"),
                "cc": _first_value(first, "cc")}

    def remove(self, ref: str) -> dict:
        with self._locked():
            run_id = self.resolve(ref)
            runs = self._read_runs()
            row = runs[runs["id"] == run_id].iloc[0].to_dict()
            self._write_runs(runs[runs["id"] != run_id])
            trash = self.path / f".tmp-rm-{run_id}"
            trash.mkdir()
            os.replace(self.path / "runs" / f"run={run_id}", trash / "kernels")
            os.replace(self.path / "units" / f"run={run_id}", trash / "units")
        shutil.rmtree(trash, ignore_errors=True)
        return row

    # --- reading ----------------------------------------------------------------------------

    def _read_runs(self) -> pd.DataFrame:
        path = self.path / "runs.parquet"
        if not path.exists():
            return pd.DataFrame(columns=RUN_COLUMNS)
        return pd.read_parquet(path)

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

    def resolve(self, ref: str | None) -> str:
        """A run id from an id, a unique id prefix, a name (the newest run of that name), or
        `latest` / nothing (the newest run)."""
        runs = self._read_runs()
        if not len(runs):
            raise BadInput(f"{self.path}: the store holds no runs; ingest a capture first")
        runs = runs.sort_values("created", kind="stable")
        if ref in (None, "", "latest"):
            return runs["id"].iloc[-1]
        if ref in set(runs["id"]):
            return ref
        by_name = runs[runs["name"] == ref]
        if len(by_name):
            return by_name["id"].iloc[-1]
        by_prefix = runs[runs["id"].str.startswith(ref)]
        if len(by_prefix) == 1:
            return by_prefix["id"].iloc[0]
        if len(by_prefix) > 1:
            raise BadInput(f"run {ref!r} is ambiguous: {', '.join(by_prefix['id'])}")
        raise BadInput(f"no run {ref!r} in {self.path} (see `smlens runs`)")

    def run(self, ref: str | None) -> dict:
        run_id = self.resolve(ref)
        runs = self._read_runs()
        return runs[runs["id"] == run_id].iloc[0].to_dict()

    def kernels(self, ref: str | None, columns: list[str] | None = None) -> pd.DataFrame:
        """The run's kernels table. `columns` limits what is read (missing names are skipped)."""
        run_id = self.resolve(ref)
        path = self.path / "runs" / f"run={run_id}" / "kernels.parquet"
        if columns is not None:
            present = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in present]
        return pd.read_parquet(path, columns=columns)

    def units(self, ref: str | None) -> dict[str, str]:
        run_id = self.resolve(ref)
        frame = pd.read_parquet(self.path / "units" / f"run={run_id}" / "units.parquet")
        return dict(zip(frame["metric"], frame["unit"]))


def _commits_through_log(spec) -> bool:
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
