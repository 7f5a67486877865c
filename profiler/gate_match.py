"""Does `smlens gate` compare like with like? What each run was measured on and what it ran.

A regression gate answers "did the change make the same work slower": two runs of another GPU,
another model, another batch size or another set of phases differ for reasons no threshold knows
about, and a gate that passes or fails them misleads. Each run is described by its device, its
workload (the stored `workload` and `model` tags, or else the roles its NVTX ranges name), the
shapes its ranges carry (GEMM M, N, K and attention B, H, Sq, Skv, D per phase and role) and its
phases; the gate refuses runs that differ in any of these unless told otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

_GEMM_SHAPE = ("shape_m", "shape_n", "shape_k")
_ATTENTION_SHAPE = ("attn_batch", "attn_heads", "attn_q_len", "attn_kv_len", "attn_head_dim")
_SHAPE_NAMES = {"shape_m": "M", "shape_n": "N", "shape_k": "K", "attn_batch": "B", "attn_heads": "H",
                "attn_q_len": "Sq", "attn_kv_len": "Skv", "attn_head_dim": "D"}


@dataclass(frozen=True)
class RunIdentity:
    label: str
    device: str | None  # "NVIDIA H200 (cc 9.0)"; None when the capture does not say
    workload: str | None  # "det-gemm llama-3.1-8b" from stored tags; None for capture files
    roles: frozenset  # roles an NVTX range named
    shapes: dict  # "phase/role" -> "M=4 N=6144 K=4096" (every distinct shape, sorted, joined)
    phases: frozenset  # phases other than `other`
    # the device's parts; a details-page export names no device, only its cc
    device_name: str | None = None
    cc: str | None = None
    # kernel name -> its share of the run's kernel time: what is left to compare two captures that
    # carry no workload tags, NVTX roles or phases
    name_time_share: tuple = ()


def _first(kernels: pd.DataFrame, column: str) -> str | None:
    if column not in kernels:
        return None
    values = kernels[column].dropna()
    return str(values.iloc[0]) if len(values) else None


def _shapes(kernels: pd.DataFrame) -> dict:
    out: dict[str, set] = {}
    for columns in (_GEMM_SHAPE, _ATTENTION_SHAPE):
        if not set(columns) <= set(kernels.columns) or "phase" not in kernels or "role" not in kernels:
            continue
        known = kernels.dropna(subset=list(columns))
        for row in known[["phase", "role", *columns]].drop_duplicates().itertuples(index=False):
            text = " ".join(f"{_SHAPE_NAMES[c]}={int(v)}" for c, v in zip(columns, row[2:]))
            out.setdefault(f"{row[0]}/{row[1]}", set()).add(text)
    return {key: ", ".join(sorted(values)) for key, values in out.items()}


def identify(kernels: pd.DataFrame, label: str, tags: dict | None = None) -> RunIdentity:
    """A run's identity from its kernels table (docs/SCHEMA.md) and, for a stored run, its tags."""
    name, cc = _first(kernels, "device__attribute_display_name"), _first(kernels, "cc")
    device = " ".join(part for part in (name, f"(cc {cc})" if cc else None) if part) or None
    tags = tags or {}
    workload = " ".join(tags[k] for k in ("workload", "model") if tags.get(k)) or None
    named = kernels["role_source"] == "nvtx" if "role_source" in kernels else pd.Series(False, kernels.index)
    roles = frozenset(kernels.loc[named.fillna(False).astype(bool), "role"].dropna()) if "role" in kernels \
        else frozenset()
    phases = frozenset(kernels["phase"].dropna()) - {"other"} if "phase" in kernels else frozenset()
    return RunIdentity(label, device, workload, roles, _shapes(kernels), phases, name, cc,
                       _name_time_share(kernels))


def _name_time_share(kernels: pd.DataFrame) -> tuple:
    """Each kernel name's share of the run's kernel time (of its launches where no time was
    captured)."""
    if "kernel_name" not in kernels:
        return ()
    time_ns = pd.to_numeric(kernels["gpu__time_duration.sum"], errors="coerce") \
        if "gpu__time_duration.sum" in kernels else pd.Series(1.0, index=kernels.index)
    by_name = time_ns.groupby(kernels["kernel_name"].astype(str)).sum()
    total = by_name.sum()
    return tuple((by_name / total).items()) if total > 0 else ()


# Below this share of either run's kernel time in kernels both ran, two captures with nothing else
# to compare are taken for different programs (two unrelated A100 exports shared one CUTLASS kernel)
MIN_SHARED_TIME = 0.25


def _shared_time(a: RunIdentity, b: RunIdentity) -> tuple[float, float] | None:
    if not a.name_time_share or not b.name_time_share:
        return None
    a_share, b_share = dict(a.name_time_share), dict(b.name_time_share)
    both = a_share.keys() & b_share.keys()
    return sum(a_share[n] for n in both), sum(b_share[n] for n in both)


def _names(values) -> str:
    return ",".join(sorted(values)) or "none"


def _differences(a: RunIdentity, b: RunIdentity) -> list[str]:
    out = []
    # a part one side does not give cannot differ (the same capture's raw and details pages)
    if any(x and y and x != y for x, y in ((a.device_name, b.device_name), (a.cc, b.cc))):
        out.append(f"device {a.device} vs {b.device}")
    if a.workload and b.workload and a.workload != b.workload:
        out.append(f"workload {a.workload} vs {b.workload}")
    elif a.roles and b.roles and a.roles != b.roles:
        out.append(f"workload (roles its NVTX ranges name) {_names(a.roles)} vs {_names(b.roles)}")
    for key in sorted(set(a.shapes) & set(b.shapes)):
        if a.shapes[key] != b.shapes[key]:
            out.append(f"model shape {key} {a.shapes[key]} vs {b.shapes[key]}")
            break  # one is enough to say why; the rest usually follow from it
    # phases are never a part one side leaves out: a capture with no phase ranges and one with
    # them share no kernel group (an unannotated A100 export against an H200 decoder run)
    if a.phases != b.phases:
        out.append(f"phases {_names(a.phases)} vs {_names(b.phases)}")
    nothing_else = not (a.workload or b.workload or a.roles or b.roles or a.phases or b.phases)
    shared = _shared_time(a, b) if nothing_else else None
    if shared and min(shared) < MIN_SHARED_TIME:
        out.append(f"kernels (no workload, roles or phases to compare): the kernels both ran are "
                   f"{shared[0]:.0%} of {a.label}'s kernel time (or launches) and {shared[1]:.0%} of "
                   f"{b.label}'s")
    return out


def mismatches(baseline: list[RunIdentity], current: list[RunIdentity]) -> list[str]:
    """How the runs differ from the first baseline run, one clause per run that differs."""
    if not baseline:
        return []
    first = baseline[0]
    out = []
    for side, runs in (("baseline", baseline[1:]), ("current", current)):
        for run in runs:
            differences = _differences(first, run)
            if differences:
                out.append(f"{side} {run.label} against baseline {first.label}: " + ", ".join(differences))
    return out
