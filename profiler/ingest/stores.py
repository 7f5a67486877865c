"""Which kind of store lives at a path, and what takes either kind: opening, checking, repairing.

A folder committed in place is a Store (store.py, checked by store_check.py); an s3:// URL, or a
folder copied from object storage, commits through a log and is a LogStore (logstore.py, checked
by logstore_check.py). Those modules sit below this one and none of them chooses.
"""
from __future__ import annotations

from profiler.ingest import logstore_check, store_check
from profiler.ingest.logstore import LogStore
from profiler.ingest.store import Store, commits_through_log


def open_store(path, create: bool = True) -> Store:
    """The store at `path` (a folder or an s3:// URL): a LogStore when it commits through a log."""
    return (LogStore if commits_through_log(path) else Store)(path, create=create)


def check(path) -> dict:
    """`smlens store check`: what is wrong with the store at `path`, of either kind."""
    return (logstore_check if commits_through_log(path) else store_check).check(path)


def repair(path) -> dict:
    """`smlens store repair`: make the store at `path` consistent; what was done and what is left."""
    return (logstore_check if commits_through_log(path) else store_check).repair(path)
