"""NVTX stack -> phase, role and shape; the kernel's kind from the one name parser.

The stack is what ncu's push/pop column holds: the ranges open on the launching thread, outermost
first. A phase is the outermost range whose first word names one; a role the innermost range whose
first word names one; a shape is `M=.. N=.. K=..` in the role range's message (docs/VIEWS.md).
"""
from __future__ import annotations

import re
import shlex

from views.kernel_names import kind_of
from views.vocabulary import (ANNOTATION_KEY, BLOCKS, COLLECTIVE_ROLES, COMPILED_KEY, KINDS,  # noqa: F401
                               LIBRARY_DOMAINS, PHASES, RANK_DOMAIN, ROLE_ALIASES, ROLES, SETUP_PHASE)

_RANK = re.compile(r"^rank\s*=\s*(\d+)\b")

_SHAPE = re.compile(r"\b([MNK])\s*=\s*(\d+)")
# attention ranges: `attention B=8 H=32 KVH=8 Sq=1 Skv=513 D=128 causal=0`
ATTENTION_KEYS = {"B": "attn_batch", "H": "attn_heads", "KVH": "attn_kv_heads", "Sq": "attn_q_len",
                  "Skv": "attn_kv_len", "D": "attn_head_dim", "causal": "attn_causal"}
_ATTENTION = re.compile(r"\b(B|H|KVH|Sq|Skv|D|causal)\s*=\s*(\d+)")
_ANNOTATED = re.compile(rf"\s{ANNOTATION_KEY}=\S")
_COMPILED = re.compile(rf"\s{COMPILED_KEY}=1\b")
# the sources of a role that an eager (or compiled) step's ranges gave: what EagerOrder walks along
RANGE_SOURCES = ("nvtx", "annotation", "compiled")
_BLOCK_WORDS = {f"{block}_block": block for block in BLOCKS}


def parse_stack(cell: str | None) -> list[str]:
    """ncu's push/pop cell -> ["domain:message", ...], outermost first.

    The cell is `<tid>  "<domain>:<message>:<PL_Type>:...:<Msg>"  "..."`: the thread id, then one
    quoted entry per open range. The message may itself hold colons, so the six trailing payload
    fields are cut from the right.
    """
    if not cell or '"' not in cell:
        return []
    try:
        tokens = shlex.split(cell)
    except ValueError:  # an unbalanced quote: take what lies between quote pairs
        tokens = cell.split('"')[1::2]
    entries = []
    for token in tokens:
        if ":" not in token:
            continue  # the thread id
        parts = token.split(":")
        if len(parts) >= 8:
            parts = parts[:-6]  # drop PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg
        entries.append(":".join(parts))
    return entries


def _message(entry: str) -> str:
    domain, _, message = entry.partition(":")
    return message if message else domain


def _first_word(entry: str) -> str:
    words = _message(entry).strip().split()
    return words[0].lower() if words else ""


def canonical_role(word: str) -> str | None:
    word = word.lower()
    if word in ROLES or word in COLLECTIVE_ROLES:
        return word
    return ROLE_ALIASES.get(word)


def _program_ranges(stack: list[str]) -> list[str]:
    """The stack without library ranges and rank markers: what can name a phase or a role."""
    return [entry for entry in stack if entry.partition(":")[0] not in LIBRARY_DOMAINS
            and not _RANK.match(_message(entry).strip())]


def rank_marker(stack: list[str]) -> int | None:
    """The rank a `rank=<r>` range names (the innermost), or None."""
    for entry in reversed(stack):
        found = _RANK.match(_message(entry).strip())
        if found:
            return int(found.group(1))
    return None


def phase_of(stack: list[str]) -> str:
    """`prefill` alone is returned as-is: cold or warm is decided by order (see PrefillOrder)."""
    for entry in _program_ranges(stack):
        word = _first_word(entry)
        if word in PHASES or word in ("prefill", SETUP_PHASE):
            return word
    return "other"


def block_of(stack: list[str]) -> str | None:
    """The innermost `<block>_block` range (`attention`, `mlp`), or None."""
    for entry in reversed(stack):
        block = _BLOCK_WORDS.get(_first_word(entry))
        if block:
            return block
    return None


def role_range(stack: list[str]) -> str | None:
    """The innermost entry that names a role, or None."""
    for entry in reversed(_program_ranges(stack)):
        if canonical_role(_first_word(entry)):
            return entry
    return None


def shape_of(entry: str | None) -> tuple[int | None, int | None, int | None]:
    if not entry:
        return (None, None, None)
    found = {axis: int(value) for axis, value in _SHAPE.findall(_message(entry))}
    return (found.get("M"), found.get("N"), found.get("K"))


def attention_shape_of(entry: str | None) -> dict:
    """attn_batch, attn_heads, attn_q_len, attn_kv_len, attn_head_dim, attn_causal (None if absent)."""
    found = dict(_ATTENTION.findall(_message(entry))) if entry else {}
    return {column: (int(found[key]) if key in found else None) for key, column in ATTENTION_KEYS.items()}


def role_from_kind(kind: str) -> str:
    """The classifier's guess when no NVTX range names the role."""
    return {"attention": "attention", "gemm": "gemm", "splitk_reduce": "gemm",
            "elementwise": "elementwise", "communication": "communication"}.get(kind, "other")


def classify(stack: list[str], kernel_name: str) -> dict:
    """phase, role, role_source, kind, block, shape and rank for one kernel."""
    kind = kind_of(kernel_name)
    entry = role_range(stack)
    block = block_of(stack)
    if entry is not None:
        role = canonical_role(_first_word(entry))
        message = _message(entry)
        source = ("compiled" if _COMPILED.search(message) else
                  "annotation" if _ANNOTATED.search(message) else "nvtx")
    else:
        role, source = role_from_kind(kind), "name"
        if block == "attention" and kind == "gemm":
            role = "attention"  # eager attention's own matmuls (QK^T, PV): no projection range is open
    shape_m, shape_n, shape_k = shape_of(entry)
    return {"phase": phase_of(stack), "role": role, "role_source": source, "kind": kind,
            "block": block, "shape_m": shape_m, "shape_n": shape_n, "shape_k": shape_k,
            **attention_shape_of(entry), "rank": rank_marker(stack)}


class PrefillOrder:
    """Bare `prefill` -> cold_prefill for a process's first contiguous prefill stretch (in launch
    order), warm_prefill for every later one. Holds its state, so a capture read in blocks gets
    the same answer as one read whole."""

    def __init__(self):
        self.seen: set = set()       # processes that had a prefill stretch
        self.current: dict = {}      # process -> label of the stretch it is in, or None

    def assign(self, phases: list[str], processes: list) -> list[str]:
        out = []
        for phase, process in zip(phases, processes):
            if phase == "prefill":
                if self.current.get(process) is None:
                    self.current[process] = "warm_prefill" if process in self.seen else "cold_prefill"
                    self.seen.add(process)
                phase = self.current[process]
            else:
                self.current[process] = None
            out.append(phase)
        return out


ORDER_COLUMNS = ("role", "block", "shape_m", "shape_n", "shape_k", *ATTENTION_KEYS.values())


class EagerOrder:
    """Roles for kernels replayed from a CUDA graph, taken from an eager run of the same step.

    Under `ncu --graph-profiling node` a graph's kernels carry only the ranges open on the host at
    replay (the phase): the role ranges open during capture are gone (docs/NCU_ON_H200.md). An eager
    step of the same phase, run with its role ranges, launches nearly the same kernels in the same
    order, so the range-less kernels of that phase are walked along that order: the same name at
    the cursor or a few places ahead (the graph may lack a kernel or two, e.g. a copy), else, once
    the walk is in step, a kernel of the same kind in the cursor's slot (seen on the H200: a
    residual add vectorized in the graph, not in the eager step). A kernel that fits neither
    keeps the name classifier's guess and puts the walk out of step. Opt-in: in a capture without
    graphs a range-less kernel is in no role.
    """

    LOOKAHEAD = 4  # eager kernels a graph may lack in a row

    def __init__(self):
        self._eager: dict = {}   # (process, phase) -> (step range, [(name, kind, role info)])
        self._cursor: dict = {}  # (process, phase) -> next position in that order
        self._in_step: dict = {}  # (process, phase) -> the last kernel matched by name

    @staticmethod
    def _step(stack: list[str], phase: str) -> str:
        """The range right inside the phase (`smlens:step_0`), which tells eager steps apart."""
        words = [_first_word(entry) for entry in stack]
        inner = words.index(phase) + 1 if phase in words else len(stack)
        return stack[inner] if inner < len(stack) else ""

    def _match(self, order: list, start: int, name: str, kind: str, in_step: bool
               ) -> tuple[int | None, bool]:
        """(position in the eager order or None, whether it matched by name)."""
        for offset in range(min(self.LOOKAHEAD + 1, len(order))):
            if order[(start + offset) % len(order)][0] == name:
                return (start + offset) % len(order), True
        return (start if in_step and order[start][1] == kind else None), False

    def assign(self, rows: list[dict]) -> list[dict]:
        """rows: dicts with phase, stack, kernel_name, process and the classify() columns;
        range-less rows that fit the eager order get its role and shape, and role_source `order`."""
        for row in rows:
            key = (row["process"], row["phase"])
            if row["role_source"] in RANGE_SOURCES:
                step = self._step(row["stack"], row["phase"])
                if key not in self._eager or self._eager[key][0] != step:
                    self._eager[key], self._cursor[key] = (step, []), 0
                self._eager[key][1].append((row["kernel_name"], row["kind"],
                                            {c: row[c] for c in ORDER_COLUMNS}))
                continue
            order = self._eager.get(key, ("", []))[1]
            if not order:
                continue
            position, by_name = self._match(order, self._cursor.get(key, 0), row["kernel_name"],
                                            row["kind"], self._in_step.get(key, False))
            self._in_step[key] = by_name or position is not None and self._in_step.get(key, False)
            if position is not None:
                row.update(order[position][2], role_source="order")
                self._cursor[key] = (position + 1) % len(order)
        return rows
