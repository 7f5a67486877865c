"""The quantities the views read, each with every way a capture may carry it.

A view never reads a metric by name: it asks for a quantity (`value(ctx, "cycles_elapsed")`), and
the table below says where that quantity may be found, in order of preference: the ncu metric
names across ncu versions, sections and architectures, the details page's labels (ingest names a
label it does not map `"<Section>: <Metric Name>"`), and derivations from other quantities where a
capture has no direct metric (time from cycles over the clock, DRAM bytes from their rate times
the time). Per kernel row the first way that holds a value gives it, and `source(ctx, name)` says
which way that was, so that every figure can name the counter behind it. The first-preference
metric of each asked quantity is what smlens asks ncu for (`asked_metrics`): one list, not two.

Every quantity names the ncu section that carries it, for what a capture cannot support
(`support`). Equivalences were checked on real captures (tests/data): `gpc__cycles_elapsed.max`
runs 0.4 to 0.9 % above `sm__cycles_elapsed.avg` (the public A100 PCIe report), the SM clock's
`gpc__` and `sm__` rates agree to 1e-4, the stall reasons add to 0.99 of
`smsp__average_warp_latency_per_inst_issued.ratio` (A100 PCIe report; H200 sections: median 1.00),
and the tensor pipe's long `type_hmma_hgmma_...` name reads as its short one (H200 sections).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from views import device
from views.common import categorical, format_distinct, metric
from views.vocabulary import STALL_FAMILIES

# ncu's section identifiers (`ncu --list-sections`), named in what a capture cannot support
SOL, CWA, MWA = "SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis"
OCC, LAUNCH, WARPS = "Occupancy", "LaunchStats", "WarpStateStats"
ROOFLINE, TENSOR_ROOFLINE = "SpeedOfLight_RooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart"
DISTRIBUTION, INSTRUCTIONS = "WorkloadDistribution", "InstructionStats"
ATTRIBUTES = "any section (device attributes)"
# the details page's section titles, as its `Section Name` column prints them
_TITLES = {SOL: "GPU Speed Of Light Throughput", MWA: "Memory Workload Analysis",
           CWA: "Compute Workload Analysis", OCC: "Occupancy", LAUNCH: "Launch Statistics",
           WARPS: "Warp State Statistics", DISTRIBUTION: "GPU and Memory Workload Distribution"}


def label(section: str, name: str) -> str:
    """The column ingest makes of a details-page row it does not map to a metric name."""
    return f"{_TITLES[section]}: {name}"


@dataclass(frozen=True)
class Derived:
    """A way to compute a quantity from others; `text` names the inputs in braces, and a row's
    source is the text with each input's own source in place."""
    text: str
    inputs: tuple[str, ...]
    compute: Callable[..., np.ndarray]  # (ctx, *input values) -> values
    # the same counters in another form (a sum over SMs / the SM count): as good as measured where
    # its inputs were; False: a value from other quantities (time from cycles), not a measurement
    counted: bool = False


@dataclass(frozen=True)
class Quantity:
    name: str
    unit: str
    section: str  # the ncu section that carries it
    ways: tuple  # metric names, details-page columns and Derived, in order of preference
    ask: bool = True  # its first way is asked of ncu; False: read where a capture has it

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(w for w in self.ways if isinstance(w, str))


def _q(name, unit, section, *ways, ask=True) -> Quantity:
    return Quantity(name, unit, section, tuple(ways), ask)


def _dram_peak(ctx) -> np.ndarray:
    """The DRAM peak a derivation may use: the device's own (memory attributes, else the
    product's published peak), never one the kernels imply (that would be circular)."""
    peak = device.dram_peak_from_attributes(ctx)
    return np.where(np.isnan(peak), device.published_dram_peak(ctx), peak)


def _ratio(ctx, a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a / b
    return np.where(np.isfinite(out), out, np.nan)


_PATH_OPS = "sm__ops_path_tensor_op_"
_SRC_OPS = "sm__ops_path_tensor_src_"
STALL_REASONS = tuple(reason for family in STALL_FAMILIES.values() for reason in family)
# MMA ops per input type, whatever the path (dense first where ncu has a dense-only variant);
# Volta/Turing/Ampere's one counter for every float type with fp32 accumulate comes last: on sm70
# and sm75 (no bf16, no tf32) its ops are fp16's (seen on a public T4 WMMA GEMM: 137.4 G).
TENSOR_SOURCES = {
    "bf16": (f"{_SRC_OPS}bf16_dst_fp32.sum",),
    "fp16": (f"{_SRC_OPS}fp16.sum", f"{_SRC_OPS}fp16_bf16_tf32_dst_fp32.sum"),
    "tf32": (f"{_SRC_OPS}tf32_dst_fp32.sum",),
    "fp8": (f"{_SRC_OPS}fp8_sparsity_off.sum", f"{_SRC_OPS}fp8.sum"),
    "int8": (f"{_SRC_OPS}int8.sum",),
}
# MMA ops of one path and type, dense first (Hopper's wgmma: hgmma, igmma; mma.sync: hmma, imma);
# two quantities of one path and type add up (hmma fp16 into fp16 and into fp32).
TENSOR_PATHS = {
    ("gmma", "bf16", "bf16"): ("hgmma_src_bf16_dst_fp32",),
    ("gmma", "fp16", "fp16"): ("hgmma_src_fp16",),
    ("gmma", "tf32", "tf32"): ("hgmma_src_tf32_dst_fp32",),
    ("gmma", "int8", "int8"): ("igmma_src_int8",),
    ("hmma", "bf16", "bf16"): ("hmma_src_bf16_dst_fp32",),
    ("hmma", "fp16", "fp16_fp16"): ("hmma_src_fp16_dst_fp16",),
    ("hmma", "fp16", "fp16_fp32"): ("hmma_src_fp16_dst_fp32",),
    ("hmma", "tf32", "tf32"): ("hmma_src_tf32_dst_fp32",),
    ("imma", "int8", "int8"): ("imma_src_int8",),
}


def tensor_source_quantity(dtype: str) -> str:
    return f"tensor_ops_{dtype}"


def tensor_path_quantity(path: str, key: str) -> str:
    return f"tensor_ops_{path}_{key}"


def stall_quantity(reason: str) -> str:
    return f"stall_{reason}_warps_per_issue"


def _fp32(op: str) -> Quantity:
    return _q(f"{op}_thread_inst", "count", ROOFLINE, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum",
              f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum",
              # the roofline chart's own form: per elapsed cycle of an SM sub-partition
              Derived(f"{{{op}_thread_inst_per_cycle}} x {{smsp_cycles_elapsed}}",
                      (f"{op}_thread_inst_per_cycle", "smsp_cycles_elapsed"), lambda c, a, b: a * b))


_TABLE = [
    # --- time, cycles, clocks --------------------------------------------------------------------
    _q("time_ns", "ns", SOL, "gpu__time_duration.sum", label(SOL, "Duration"),
       Derived("{cycles_elapsed} / {sm_clock_hz}", ("cycles_elapsed", "sm_clock_hz"),
               lambda c, cycles, hz: 1e9 * _ratio(c, cycles, hz))),
    _q("cycles_elapsed", "cycles", SOL, "sm__cycles_elapsed.avg",
       Derived("{sm_cycles_elapsed_sum} / {sm_count}", ("sm_cycles_elapsed_sum", "sm_count"), _ratio,
               counted=True),
       # SpeedOfLight's Elapsed Cycles: the busiest GPC's, 0.4 to 0.9 % above the SMs' mean
       "gpc__cycles_elapsed.max", label(SOL, "Elapsed Cycles"),
       Derived("{time_ns} x {sm_clock_hz}", ("time_ns", "sm_clock_hz"), lambda c, t, hz: t * 1e-9 * hz)),
    _q("sm_cycles_elapsed_sum", "cycles", DISTRIBUTION, "sm__cycles_elapsed.sum",
       label(DISTRIBUTION, "Total SM Elapsed Cycles"), ask=False),
    _q("cycles_active", "cycles", SOL, "sm__cycles_active.avg", label(SOL, "SM Active Cycles"),
       label(DISTRIBUTION, "Average SM Active Cycles")),
    _q("cycles_active_max", "cycles", DISTRIBUTION, "sm__cycles_active.max"),
    _q("smsp_cycles_elapsed", "cycles", ROOFLINE, "smsp__cycles_elapsed.avg",
       Derived("{cycles_elapsed}", ("cycles_elapsed",), lambda c, x: x), ask=False),
    _q("sm_clock_hz", "Hz", SOL, "sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second",
       "smsp__cycles_elapsed.avg.per_second", label(SOL, "SM Frequency"), ask=False),
    _q("sm_throughput_pct", "%", SOL, "sm__throughput.avg.pct_of_peak_sustained_elapsed",
       label(SOL, "Compute (SM) Throughput")),
    # --- memory ----------------------------------------------------------------------------------
    _q("dram_read_bytes", "bytes", MWA, "dram__bytes_read.sum"),
    _q("dram_write_bytes", "bytes", MWA, "dram__bytes_write.sum"),
    _q("dram_bytes", "bytes", MWA,
       Derived("{dram_read_bytes} + {dram_write_bytes}", ("dram_read_bytes", "dram_write_bytes"),
               lambda c, r, w: r + w, counted=True),
       "dram__bytes.sum",
       Derived("{dram_bytes_per_s} x {time_ns}", ("dram_bytes_per_s", "time_ns"), lambda c, r, t: r * t * 1e-9),
       Derived("{dram_pct} x the DRAM peak x {time_ns}", ("dram_pct", "time_ns"),
               lambda c, pct, t: pct / 100 * _dram_peak(c) * t * 1e-9)),
    _q("dram_bytes_per_s", "bytes/s", MWA, "dram__bytes.sum.per_second", label(MWA, "Memory Throughput"),
       ask=False),
    _q("dram_pct", "%", SOL, "dram__throughput.avg.pct_of_peak_sustained_elapsed",
       # SpeedOfLight's DRAM Throughput in the standard sections since ncu 2023
       "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", label(SOL, "DRAM Throughput"),
       Derived("{dram_bytes} / {time_ns} / the DRAM peak", ("dram_bytes", "time_ns"),
               lambda c, b, t: 100 * _ratio(c, b / (t * 1e-9), _dram_peak(c)))),
    _q("l2_hit_pct", "%", MWA, "lts__t_sector_hit_rate.pct", label(MWA, "L2 Hit Rate")),
    # --- tensor pipe and its instructions --------------------------------------------------------
    _q("tensor_pipe_active_pct", "%", CWA, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
       # an older metric list's HMMA/HGMMA/QGMMA pipe alone: blind to IMMA (an int8 GEMM on the
       # H200 reads 0 % there and 71 % on the whole pipe)
       "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
       Derived("{tensor_pipe_elapsed_pct} x {cycles_elapsed} / {cycles_active}",
               ("tensor_pipe_elapsed_pct", "cycles_elapsed", "cycles_active"),
               lambda c, pct, elapsed, active: pct * _ratio(c, elapsed, active))),
    _q("tensor_pipe_elapsed_pct", "%", CWA, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
       "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    _q("tensor_pipe_imma_pct", "%", CWA, "sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active",
       ask=False),
    _q("hmma_inst", "count", INSTRUCTIONS, "sm__inst_executed_pipe_tensor_op_hmma.sum"),
    _q("gmma_inst", "count", INSTRUCTIONS, "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    _q("hfma2_mma_inst", "count", INSTRUCTIONS, "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"),
    _q("imma_inst", "count", INSTRUCTIONS, "sm__inst_executed_pipe_tensor_op_imma.sum"),
    *(_q(tensor_source_quantity(d), "ops", TENSOR_ROOFLINE, *names) for d, names in TENSOR_SOURCES.items()),
    *(_q(tensor_path_quantity(p, key), "ops", TENSOR_ROOFLINE,
         *(f"{_PATH_OPS}{base}{suffix}.sum" for base in bases for suffix in ("_sparsity_off", "")))
      for (p, _, key), bases in TENSOR_PATHS.items()),
    # --- FP32 work -------------------------------------------------------------------------------
    *(_fp32(op) for op in ("ffma", "fadd", "fmul")),
    *(_q(f"{op}_thread_inst_per_cycle", "count/cycle", ROOFLINE,
         f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed", ask=False)
      for op in ("ffma", "fadd", "fmul")),
    # --- occupancy and launch --------------------------------------------------------------------
    _q("achieved_occupancy_pct", "%", OCC, "sm__warps_active.avg.pct_of_peak_sustained_active",
       label(OCC, "Achieved Occupancy")),
    _q("theoretical_occupancy_pct", "%", OCC, "sm__maximum_warps_per_active_cycle_pct",
       label(OCC, "Theoretical Occupancy")),
    *(_q(f"occupancy_limit_{n}_blocks", "count", OCC, f"launch__occupancy_limit_{n}",
         label(OCC, f"Block Limit {t}"))
      for n, t in (("registers", "Registers"), ("shared_mem", "Shared Mem"), ("warps", "Warps"),
                   ("blocks", "SM"), ("barriers", "Barriers"))),
    _q("block_threads", "count", LAUNCH, "launch__block_size", "block_threads", label(LAUNCH, "Block Size")),
    _q("grid_blocks", "count", LAUNCH, "launch__grid_size", "grid_blocks", label(LAUNCH, "Grid Size")),
    _q("registers_per_thread", "count", LAUNCH, "launch__registers_per_thread",
       label(LAUNCH, "Registers Per Thread")),
    _q("shared_mem_per_block_bytes", "bytes", LAUNCH, "launch__shared_mem_per_block"),
    _q("shared_mem_config_bytes", "bytes", LAUNCH, "launch__shared_mem_config_size",
       label(LAUNCH, "Shared Memory Configuration Size")),
    _q("barrier_count", "count", LAUNCH, "launch__barrier_count"),
    _q("shared_mem_static_bytes", "bytes", LAUNCH, "launch__shared_mem_per_block_static",
       label(LAUNCH, "Static Shared Memory Per Block"), ask=False),
    _q("shared_mem_dynamic_bytes", "bytes", LAUNCH, "launch__shared_mem_per_block_dynamic",
       label(LAUNCH, "Dynamic Shared Memory Per Block"), ask=False),
    _q("shared_mem_driver_bytes", "bytes", LAUNCH, "launch__shared_mem_per_block_driver",
       label(LAUNCH, "Driver Shared Memory Per Block"), ask=False),
    _q("waves", "waves", LAUNCH, "launch__waves_per_multiprocessor", label(LAUNCH, "Waves Per SM")),
    _q("cluster_size", "count", LAUNCH, "launch__cluster_size", label(LAUNCH, "Cluster Size")),
    _q("sm_count", "count", LAUNCH, "launch__sm_count", "device__attribute_multiprocessor_count",
       label(LAUNCH, "# SMs")),
    # --- the device's limits and clocks (views/device.py reads them) -------------------------------
    *(_q(name, "count", ATTRIBUTES, f"device__attribute_{name}") for name in (
        "max_warps_per_multiprocessor", "max_blocks_per_multiprocessor",
        "max_registers_per_multiprocessor", "max_shared_memory_per_multiprocessor",
        "max_gpu_frequency_khz", "clock_rate", "memory_clock_rate", "global_memory_bus_width",
        "display_name")),
    # --- warp states -----------------------------------------------------------------------------
    *(_q(stall_quantity(r), "warps/issue", WARPS,
         f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio") for r in STALL_REASONS),
    # the stall reasons' sum: warps active per issue; WarpStateStats gives the warp cycles per
    # issued instruction, the same over a scheduler's cycles (one issue per issue-active cycle)
    _q("warps_per_issue", "warps/issue", WARPS, "smsp__average_warps_active_per_issue_active.ratio",
       "smsp__average_warp_latency_per_inst_issued.ratio", label(WARPS, "Warp Cycles Per Issued Instruction")),
    _q("issue_active_pct", "%", CWA, "smsp__issue_active.avg.pct_of_peak_sustained_active",
       label(CWA, "Issue Slots Busy"),
       Derived("100 x {issue_active_per_cycle}", ("issue_active_per_cycle",), lambda c, x: 100 * x)),
    _q("issue_active_per_cycle", "ratio", CWA, "smsp__issue_active.avg.per_cycle_active", ask=False),
]
QUANTITIES: Mapping[str, Quantity] = MappingProxyType({q.name: q for q in _TABLE})
if len(QUANTITIES) != len(_TABLE):
    raise ValueError("a quantity is declared twice")


# --- reading ------------------------------------------------------------------------------------


class Read:
    """One quantity over a kernels table: its values and, per row, the way that gave each."""

    def __init__(self, values: np.ndarray, codes: np.ndarray, texts: list[str], derived: np.ndarray):
        self.values = values
        self.codes = codes  # into texts; -1 where no way gave a value
        self.texts = texts
        self.derived = derived  # the row's value was computed from other quantities

    @property
    def source(self) -> pd.Categorical:
        return categorical(self.codes, self.texts)


def read(ctx, name: str) -> Read:
    """The quantity `name` over the context's kernels (cached per context)."""
    return ctx.once(_read, name, frozenset())


def value(ctx, name: str) -> np.ndarray:
    """Per row, the quantity's value from its first way that holds one; NaN where none does."""
    return read(ctx, name).values


def source(ctx, name: str) -> pd.Categorical:
    """Per row, the metric, details-page column or derivation that gave the value; null where none."""
    return read(ctx, name).source


def measured(ctx, name: str) -> np.ndarray:
    """The value where a metric gave it, NaN where it was derived (a check must not be fed the
    counters its figure was computed from: a time derived from cycles gives back their rate)."""
    got = read(ctx, name)
    return np.where(got.derived, np.nan, got.values)


def _read(ctx, name: str, busy: frozenset) -> Read:
    quantity = QUANTITIES[name]
    kernels = ctx.kernels
    n = len(kernels)
    values = np.full(n, np.nan)
    codes = np.full(n, -1, dtype=np.int64)
    texts: list[str] = []
    derived = np.zeros(n, dtype=bool)
    busy = busy | {name}
    for way in quantity.ways:
        missing = np.isnan(values)
        if not missing.any():
            break
        if isinstance(way, str):
            if way not in kernels.columns:
                continue
            got, text_codes, text_list = metric(kernels, way), np.zeros(n, dtype=np.int64), [way]
        else:
            if busy & set(way.inputs):  # a derivation of a quantity from itself
                continue
            inputs = [ctx.once(_read, i, busy) for i in way.inputs]
            if any((r.codes < 0).all() for r in inputs):
                continue
            got = np.asarray(way.compute(ctx, *(r.values for r in inputs)), dtype=float)
            take = missing & ~np.isnan(got)
            if not take.any():
                continue
            positions = np.flatnonzero(take)
            text_codes = np.zeros(n, dtype=np.int64)
            text_codes[positions], text_list = format_distinct(
                lambda *sources: _fill(way, sources), [r.source for r in inputs], positions)
        take = missing & ~np.isnan(got)
        if not take.any():
            continue
        values[take] = got[take]
        codes[take] = text_codes[take] + len(texts)
        texts.extend(text_list)
        if not isinstance(way, str):
            derived |= take & (True if not way.counted else np.logical_or.reduce([r.derived for r in inputs]))
    # the same text twice (two derivations naming one source) is one category
    distinct = list(dict.fromkeys(texts))
    remap = np.array([distinct.index(t) for t in texts] + [-1], dtype=np.int64)
    return Read(values, remap[codes], distinct, derived)


def _fill(way: Derived, sources: Sequence) -> str:
    text = way.text
    for name, src in zip(way.inputs, sources):
        text = text.replace("{" + name + "}", str(src))
    return text


# --- what ncu is asked for, and what a store reads ----------------------------------------------


def asked_metrics(names: Sequence[str]) -> list[str]:
    """The ncu metrics to ask for these quantities: each asked quantity's first way (a derivation
    first: its inputs' first ways), each once, in order."""
    return _ways_walked(names, lambda quantity: quantity.ways[:1] if quantity.ask else ())


def read_columns(names: Sequence[str]) -> list[str]:
    """Every kernels-table column these quantities may be read from, their derivations' included."""
    return _ways_walked(names, lambda quantity: quantity.ways)


def _ways_walked(names: Sequence[str], ways_of) -> list[str]:
    """The metric names reached from `names` through `ways_of(quantity)`, a derivation followed into
    its inputs, each once, in order."""
    out: dict[str, None] = {}

    def walk(name: str, seen: frozenset) -> None:
        if name in seen:
            return
        for way in ways_of(QUANTITIES[name]):
            if isinstance(way, str):
                out.setdefault(way, None)
            else:
                for i in way.inputs:
                    walk(i, seen | {name})

    for name in names:
        walk(name, frozenset())
    return list(out)


def collected(kernels: pd.DataFrame, name: str) -> bool:
    """Does the table have a column of one of the quantity's direct ways (values or not)?"""
    return any(c in kernels.columns for c in QUANTITIES[name].columns)


def present(kernels: pd.DataFrame, name: str, seen: frozenset = frozenset()) -> bool:
    """Could any row of this table give the quantity (a way's column holds a value somewhere)?"""
    if name in seen:
        return False
    for way in QUANTITIES[name].ways:
        if isinstance(way, str):
            if way in kernels.columns and kernels[way].notna().any():
                return True
        elif all(present(kernels, i, seen | {name}) for i in way.inputs):
            return True
    return False
