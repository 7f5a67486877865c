"""What the gate tests share: the views' figure table of a real capture, computed once a session,
and the one comparison of a rule on a group."""
from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd


@functools.lru_cache(maxsize=None)
def capture_figures(path: Path) -> pd.DataFrame:
    """The views' per-kernel figures of a capture file whose NVTX ranges carry the shapes (the
    tests copy the frame before changing it)."""
    from profiler.ingest.capture import read_capture
    from views.registry import compute_views

    return compute_views(read_capture(path).kernels).kernels


def find(result, rule_label: str, group: str):
    matches = [c for c in result.comparisons if c.rule.label == rule_label and c.group_label == group]
    assert len(matches) == 1, f"{rule_label} {group}: {len(matches)} comparisons"
    return matches[0]
