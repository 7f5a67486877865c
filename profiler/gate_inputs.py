"""The runs `smlens gate` compares: `--baseline` / `--current` arguments -> labelled kernels tables
(cli.py computes their views and hands them to the gate).

An argument is a stored run (id, id prefix, name, `latest`), a capture file (read directly,
nothing is written to the store), or `tag:KEY=VALUE` (every stored run with that tag;
`tag:KEY=VALUE~N` the newest N). A stored run wins over a file of the same name: a run's default
name is its capture's file name. Several may be given by repeating the option or separating them
with commas; a quoted glob (`'captures/base_*.csv'`) expands here.
"""
from __future__ import annotations

import glob
import json
from pathlib import Path

import pandas as pd

from profiler.errors import BadInput

_CAPTURE_SUFFIXES = (".csv", ".gz", ".ncu-rep", ".txt")


def split_refs(values: list[str] | None) -> list[str]:
    refs = []
    for value in values or []:
        refs += [part.strip() for part in str(value).split(",") if part.strip()]
    return refs


def _is_glob(ref: str) -> bool:
    return any(c in ref for c in "*?[")


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith(_CAPTURE_SUFFIXES) or _is_glob(ref)


def _tagged_runs(store, selector: str) -> list[str]:
    spec, _, newest = selector.partition("~")
    key, sep, value = spec.partition("=")
    if not sep or not key:
        raise BadInput(f"tag:{selector}: expected tag:KEY=VALUE (optionally ~N for the newest N)")
    if newest and not (newest.isdigit() and int(newest) > 0):
        raise BadInput(f"tag:{selector}: ~N must be a whole number of runs, 1 or more")
    runs = store.runs()
    if not len(runs):
        raise BadInput(f"{store.path}: the store holds no runs; ingest a capture first")
    runs = runs.sort_values("created", kind="stable")
    ids = [row["id"] for _, row in runs.iterrows()
           if json.loads(row.get("tags") or "{}").get(key) == value]
    if not ids:
        raise BadInput(f"no run tagged {key}={value} in {store.path} (see `smlens runs`)")
    return ids[-int(newest):] if newest else ids


def _capture_files(ref: str, side: str) -> list[str]:
    """The capture files `ref` names (a file or a glob), or none where it names no file."""
    if Path(ref).exists():  # a folder or a pipe too: the capture reader says why it cannot be read
        return [ref]
    if not _is_glob(ref):
        return []
    matches = sorted(glob.glob(ref))
    if not matches:
        raise BadInput(f"--{side} {ref}: no file matches")
    return matches


def _labelled(kernels: pd.DataFrame | None, label: str) -> tuple[str, pd.DataFrame]:
    if kernels is None or not len(kernels):
        raise BadInput(f"{label}: holds no kernels")
    return label, kernels


def _stored_run(store_dir: Path, ref: str) -> str | None:
    """The id of the stored run `ref` names, or None (no store, no such run, or the store cannot
    be read: then `ref` may still be a file, and if it is not, resolving it again says why)."""
    from profiler.ingest.store import MARKER
    from profiler.ingest.stores import open_store

    if ref.startswith("tag:") or _is_glob(ref) or not (Path(store_dir) / MARKER).exists():
        return None
    try:
        return open_store(store_dir, create=False).resolve(ref)
    except BadInput:
        return None


def load_runs(values: list[str] | None, side: str, store_dir: Path,
              shapes: dict | None = None, identities: list | None = None
              ) -> list[tuple[str, pd.DataFrame]]:
    """Every run one side of the gate names, as (label, kernels table). Raises BadInput for what is
    missing. `shapes` (role -> M, N, K) applies to capture files whose NVTX ranges carry none, as
    in ingest. `identities`, when given, receives each run's gate_match.RunIdentity."""
    from profiler.gate_match import identify
    from profiler.ingest.capture import read_capture
    from profiler.ingest.stores import open_store

    refs = split_refs(values)
    if not refs:
        raise BadInput(f"no {side} given: --{side} RUN|FILE (repeat it for several runs)")
    runs: list[tuple[str, pd.DataFrame]] = []
    store = None

    def add(kernels, label: str, tags: dict | None = None) -> None:
        if identities is not None:
            identities.append(identify(kernels, label, tags))
        runs.append(_labelled(kernels, label))

    for ref in refs:
        stored = _stored_run(store_dir, ref)
        files = [] if stored else _capture_files(ref, side)
        for path in files:
            add(read_capture(path, shapes=shapes).kernels, path)
        if files:
            continue
        if not stored and _looks_like_path(ref) and not ref.startswith("tag:"):
            raise BadInput(f"--{side} {ref}: no such file")
        if store is None:
            store = open_store(store_dir, create=False)
        ids = _tagged_runs(store, ref[4:]) if ref.startswith("tag:") else [stored or store.resolve(ref)]
        for run_id in ids:
            row = store.run(run_id)
            add(store.kernels(run_id), f"{row['name']} ({run_id})", json.loads(row.get("tags") or "{}"))
    return runs
