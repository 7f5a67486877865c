"""Which kind of store lives at a path, and what takes either kind: opening, checking, repairing.

A folder committed in place is a Store (store.py, checked by store_check.py); an s3:// URL, or a
folder copied from object storage, commits through a log and is a LogStore (logstore.py, checked
by logstore_check.py). Those modules sit below this one and none of them chooses.

Each kind's modules are imported when a store of that kind is opened or checked: `smlens views`
on a folder needs neither the log's nor the checks' (BENCHMARKS.md, `smlens views` at the terminal).
"""
from __future__ import annotations

from profiler.ingest.store import Store, commits_through_log


def open_store(path, create: bool = True) -> Store:
    """The store at `path` (a folder or an s3:// URL): a LogStore when it commits through a log."""
    if commits_through_log(path):
        from profiler.ingest.logstore import LogStore

        return LogStore(path, create=create)
    return Store(path, create=create)


def _checks(path):
    """The module that checks and repairs the store at `path`."""
    if commits_through_log(path):
        from profiler.ingest import logstore_check

        return logstore_check
    from profiler.ingest import store_check

    return store_check


def check(path) -> dict:
    """`smlens store check`: what is wrong with the store at `path`, of either kind."""
    return _checks(path).check(path)


def repair(path) -> dict:
    """`smlens store repair`: make the store at `path` consistent; what was done and what is left."""
    return _checks(path).repair(path)
