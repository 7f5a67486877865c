"""A committed capture read, and its views computed, once per test process: several files' tests
read the same capture's views (the verdict's and the gap's bound over every H200 capture, the
report's and the views' checks of the same runs), and each paid read_capture and compute_views
again (0.2 to 0.6 s a capture).

What these return is shared by every test that asks: read it, never write into it (copy it first;
under pandas' copy-on-write a frame derived from it is the test's own). A test that mutates what
it reads calls read_capture / compute_views itself."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DATA = (Path(__file__).parent / "data").resolve()


def committed(path: Path) -> bool:
    """Whether `path` is a committed capture (under tests/data): a file a test writes may change
    under the same name, so only those are kept."""
    return DATA in Path(path).resolve().parents


def kernels_of(path: Path):
    """read_capture(path).kernels, read once (no shapes file: the capture's own NVTX shapes)."""
    return _kernels(_committed(path))


def views_of(path: Path):
    """compute_views(kernels_of(path)): every view of the capture, computed once."""
    return _views(_committed(path))


def _committed(path: Path) -> Path:
    if not committed(path):
        raise ValueError(f"{path} is no committed capture: read it with read_capture")
    return Path(path).resolve()


@lru_cache(maxsize=None)
def _kernels(path: Path):
    from profiler.ingest.capture import read_capture

    return read_capture(path).kernels


@lru_cache(maxsize=None)
def _views(path: Path):
    from views.registry import compute_views

    return compute_views(_kernels(path))
