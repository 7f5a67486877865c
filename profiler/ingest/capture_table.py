"""The kernels table every reader returns (docs/SCHEMA.md), and the parts the readers share.

ncu's identity cells -> our identity columns; the NVTX stack and the kernel name -> the derived
columns (phase, role, kind, shape, rank: nvtx.py, carried across a streamed capture's blocks by
the Classifier); kernel names in one form; whether ncu measured a kernel at all; the run-level
facts the store keeps; the note on GEMMs without a shape.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from profiler.ingest import nvtx
from profiler.ingest.capture_cells import integers, xyz_columns

# ncu's identity columns -> ours. Everything else in a capture is a metric.
IDENTITY_COLUMNS = {
    "ID": "kernel_id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host",
    "Kernel Name": "kernel_name",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Device": "device",
    "CC": "cc",
}
PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
START_STOP_PREFIX = "Id:Domain:Start/Stop_Range"
INT_IDENTITY = ("process_id", "device", "context", "stream")
DERIVED_COLUMNS = ("nvtx_stack", "phase", "role", "role_source", "kind", "block", "shape_m", "shape_n",
                   "shape_k", *nvtx.ATTENTION_KEYS.values(), "rank")
# False for a kernel ncu could not measure: every counter null (seen in a public H800 report: NaN
# for every metric of one kernel). The device's attributes are no measurement of the kernel.
MEASURED = "measured"
NOT_COUNTERS = ("device__attribute_",)


@dataclass
class Capture:
    """What every reader returns: the kernels table, its metrics' base units, and notes."""

    kernels: pd.DataFrame
    units: dict[str, str]
    source_format: str  # raw, details or ncu-rep
    notes: list[str] = field(default_factory=list)  # lines a user should see (noise skipped, ...)


# --- the columns every format shares ------------------------------------------------------------


class Classifier:
    """NVTX stack + kernel name -> derived columns, carried across batches (cold/warm prefill
    depends on what came before)."""

    def __init__(self, shapes: dict | None = None, roles_from_order: bool = False):
        self.shapes = shapes or {}
        self._cache: dict = {}
        self._prefill = nvtx.PrefillOrder()
        self._eager = nvtx.EagerOrder() if roles_from_order else None
        self._rank_of_process: dict = {}  # a process's rank, once one of its kernels named it

    def _one(self, cell: str, kernel_name: str) -> tuple:
        key = (cell, kernel_name)
        if key not in self._cache:
            stack = nvtx.parse_stack(cell)
            self._cache[key] = (stack, nvtx.classify(stack, kernel_name))
        return self._cache[key]

    def derive(self, cells: pd.Series, names: pd.Series, processes: pd.Series) -> pd.DataFrame:
        pairs = [self._one(c, n) for c, n in zip(cells.fillna("").tolist(), names.fillna("").tolist())]
        derived = pd.DataFrame([info for _, info in pairs], index=cells.index,
                               columns=list(DERIVED_COLUMNS[1:]))
        derived.insert(0, "nvtx_stack", [stack for stack, _ in pairs])
        derived["phase"] = self._prefill.assign(list(derived["phase"]), list(processes))
        derived["rank"] = self._ranks(list(derived["rank"]), list(processes))
        if self._eager is not None:
            derived = self._roles_from_order(derived, names, processes)
        for column in ("shape_m", "shape_n", "shape_k", *nvtx.ATTENTION_KEYS.values(), "rank"):
            derived[column] = derived[column].astype("Int64")
        derived["block"] = derived["block"].astype("string")  # a block of kernels may all lack one
        return self._apply_shapes(derived)

    def _ranks(self, ranks: list, processes: list) -> list:
        """A kernel launched outside its process's `rank=` range (before it opened) takes the
        rank that process's other kernels name."""
        ranks = [None if pd.isna(rank) else int(rank) for rank in ranks]
        for rank, process in zip(ranks, processes):
            if rank is not None and not pd.isna(process):
                self._rank_of_process.setdefault(process, rank)
        return [rank if rank is not None or pd.isna(process) else self._rank_of_process.get(process)
                for rank, process in zip(ranks, processes)]

    def _roles_from_order(self, derived: pd.DataFrame, names: pd.Series, processes: pd.Series
                          ) -> pd.DataFrame:
        rows = derived.assign(stack=derived["nvtx_stack"], kernel_name=names.fillna("").tolist(),
                              process=processes.tolist()).to_dict("records")
        assigned = pd.DataFrame(self._eager.assign(rows), index=derived.index)
        return assigned[list(DERIVED_COLUMNS)]

    def _apply_shapes(self, derived: pd.DataFrame) -> pd.DataFrame:
        """Fill shapes the NVTX messages lack from a `--shapes` mapping: "phase/role" or "role"."""
        if not self.shapes:
            return derived
        for index in derived.index[derived["shape_m"].isna()]:
            phase, role = derived.at[index, "phase"], derived.at[index, "role"]
            shape = self.shapes.get(f"{phase}/{role}") or self.shapes.get(role)
            if phase.endswith("prefill") and shape is None:
                shape = self.shapes.get(f"prefill/{role}")
            if shape:
                for column, value in zip(("shape_m", "shape_n", "shape_k"), shape):
                    derived.at[index, column] = value
        return derived


# Demanglers differ: ncu_report's and older ncu CSV exports write template integer arguments with
# their casts ("(int)128", "(bool)1") and PyTorch's kernels in `at::native::`; ncu 2025.3's CSV
# export writes "128", "1" and `at::`. Names are stored in the short form, so a kernel keeps one
# name however its capture was exported or read (a gate of a capture against its own .ncu-rep
# found 6 kernels both added and removed).
_INTEGER_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|bool|char|short|long|long long)\)(?=-?\d)")


def common_kernel_name(name: str) -> str:
    """A demangled kernel name in the one form the store keeps."""
    return _INTEGER_CAST.sub("", name).replace("at::native::", "at::")


def identity_frame(table: pa.Table, classifier: Classifier) -> pd.DataFrame:
    """Identity and derived columns from the identity cells of a block (strings)."""
    present = set(table.column_names)
    frame = pd.DataFrame({"kernel_id": integers(table.column("ID"))})  # callers drop <NA> IDs
    for source, target in IDENTITY_COLUMNS.items():
        if source == "ID" or source not in present:
            continue
        column = table.column(source)
        if target in INT_IDENTITY:
            frame[target] = integers(column)
        elif target in ("block_size", "grid_size"):
            frame = frame.join(xyz_columns(column, target.split("_")[0]))
        else:
            frame[target] = pd.Series(column.to_pandas(), dtype="string")
    if "kernel_name" in frame:  # one regex per distinct name, not per launch
        distinct = frame["kernel_name"].dropna().unique()
        common = {name: common_kernel_name(name) for name in distinct}
        frame["kernel_name"] = frame["kernel_name"].map(common).astype("string")
    push_pop = next((c for c in table.column_names if c.startswith(PUSH_POP_PREFIX)), None)
    blank = pd.Series([""] * len(frame), index=frame.index)
    cells = pd.Series(table.column(push_pop).to_pandas(), index=frame.index) if push_pop else blank
    processes = frame["process_id"] if "process_id" in frame else blank
    names = frame["kernel_name"] if "kernel_name" in frame else blank
    return frame.join(classifier.derive(cells, names, processes))


def measured_flags(kernels: pd.DataFrame, metrics: list[str]) -> pd.Series:
    """MEASURED for a table read whole: any numeric counter holds a value."""
    counters = [n for n in metrics if not n.startswith(NOT_COUNTERS)
                and pd.api.types.is_float_dtype(kernels[n].dtype)]
    return kernels[counters].notna().any(axis=1) if counters else pd.Series(False, index=kernels.index)


# --- what the capture says of the run as a whole ---------------------------------------------------


class RunFacts:
    """The run-level facts of a capture, gathered block by block (a raw capture streams): the
    devices it names, the kernels ncu could not measure, the replay passes per kernel. Stored with
    the run (`_run.json` "capture", the runs table's `capture`); docs/SCHEMA.md."""

    SHOWN_IDS = 20  # kernel IDs listed; the count is whole

    def __init__(self):
        self.devices: set[int] = set()
        self.unmeasured: list[int] = []
        self.unmeasured_count = 0
        self.passes: list[float] = []

    def add(self, table: pa.Table) -> None:
        names = table.column_names
        measured = (table.column(MEASURED).to_numpy(zero_copy_only=False) if MEASURED in names
                    else [True] * table.num_rows)
        if "device" in names:  # an unmeasured kernel's Device cell is empty: it names no GPU
            self.devices |= {int(d) for d in table.column("device").to_pylist() if d is not None}
        ids = table.column("kernel_id").to_pylist()
        lost = [i for i, m in zip(ids, measured) if not m]
        self.unmeasured_count += len(lost)
        self.unmeasured += lost[: self.SHOWN_IDS - len(self.unmeasured)]
        if "profiler__replayer_passes" in names:
            self.passes += [v for v in table.column("profiler__replayer_passes").to_pylist()
                            if isinstance(v, float) and math.isfinite(v)]

    def result(self) -> dict:
        passes = sorted(self.passes)
        return {"devices": sorted(self.devices), "device_count": len(self.devices),
                "unmeasured_kernels": self.unmeasured_count, "unmeasured_kernel_ids": self.unmeasured,
                # ncu replays a kernel once per pass group; the median says how the run was taken
                "replay_passes": passes[len(passes) // 2] if passes else None}


# --- GEMMs without a shape ----------------------------------------------------------------------


def unshaped_gemms(table: pa.Table) -> int:
    """GEMM kernels with no problem shape (M) in a block of the kernels table."""
    if "kind" not in table.column_names or "shape_m" not in table.column_names:
        return 0
    gemm = pc.fill_null(pc.equal(table["kind"].cast(pa.string()), "gemm"), False)
    return int(pc.sum(pc.and_(gemm, pc.is_null(table["shape_m"], nan_is_null=True))).as_py() or 0)


def shape_note(count: int) -> str:
    """What a user should know at ingest when GEMMs come without a shape, and what to do."""
    return (f"{count} GEMM kernel(s) have no problem shape (M N K): their fill and useful tensor work "
            "(V3) will be n/a; pass --shapes FILE ('[phase/]role M N K' lines), or profile with smlens, "
            "whose NVTX ranges carry M= N= K=")


def note_missing_shapes(capture: Capture) -> Capture:
    """A capture read whole, with the note on its GEMMs without a shape (a streamed raw capture
    notes them block by block instead)."""
    kernels = capture.kernels
    if {"kind", "shape_m"} <= set(kernels.columns):
        count = unshaped_gemms(pa.Table.from_pandas(kernels[["kind", "shape_m"]], preserve_index=False))
        if count:
            capture.notes.append(shape_note(count))
    return capture
