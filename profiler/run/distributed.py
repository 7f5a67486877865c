"""Tensor-parallel profiling: start one process per rank, plan ncu over all of them, time the
collectives in a run that ncu does not replay, and write the ranks into the capture.

What the lent 2 x H200 machine showed (docs/TENSOR_PARALLEL.md): ncu's kernel replay hangs at the
first NCCL all-reduce (a collective replayed on one rank waits for a peer that is not replaying
it), and so does application replay; with NCCL's kernels left out of profiling
(`--kernel-name regex:^(?!nccl)`) every rank's compute kernels are profiled. So:
- the ncu runs profile every process (`--target-processes all`) except NCCL's kernels (and vLLM's
  custom all-reduce, which spins on its peers in the same way);
- the collectives' time comes from a second run of the same workload without ncu, each all-reduce
  bracketed by CUDA events on its rank (profiler.workloads.tensor_parallel), and is merged into the
  capture as rows of role `allreduce` with `time_source` = `cuda_events`;
- every kernel carries its rank: the workload's `smlens_rank:rank=<r>` range, or for a program of
  the user's that has none, the GPU its process ran on (`source=device`).

    python -m profiler.run.distributed --nproc 2 -- python -m profiler.workloads.tensor_parallel ...

starts the ranks (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set), waits for them, and
when one fails stops the others and exits with its code after one line saying which.
"""
from __future__ import annotations

import csv
import functools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from profiler.errors import BadInput, EnvironmentProblem
from profiler.ingest.nvtx import RANK_DOMAIN, parse_stack, rank_marker
from profiler.run import ncu as ncu_mod
from profiler.run.annotate import collectives as program_collectives
from profiler.run.plan import ProfilePlan, with_no_multicast, workload_env
from profiler.workloads.models import shard
from views.vocabulary import COLLECTIVE_ROLES, ROLE_ALIASES

# Kernels ncu must not replay: NCCL's, and vLLM's custom all-reduce (both wait on their peers).
NOT_REPLAYED = "regex:^(?!nccl|cross_device_reduce)"
TIME_SOURCE = "time_source"        # column: ncu, or how a collective was timed
COMM_BYTES = "comm_bytes"          # column: bytes each rank contributes to the collective
COMM_SAMPLES = "comm_samples"      # column: timed calls the row's median is taken over
# The run that times the collectives has at least this many layers and decode steps (the same
# shapes): with the 2 of a profiled run, one call that waited for a late rank (a phase's first, or a
# first-call library heuristic on one rank) was half the median (seen on the H200). With 8 and 8 a
# prefill row is the median of 8 calls (one per layer) and a decode row of 56 (8 layers x the 7
# steps after the first); the run's tag `comm_calls` says how many each row had.
TIMING_LAYERS = 8
TIMING_DECODE_STEPS = 8
COMM_METHOD = {"cuda_events": "CUDA events around each all-reduce on its rank's stream, in a run "
                              f"of the same workload without ncu (at least {TIMING_LAYERS} layers and "
                              f"{TIMING_DECODE_STEPS} decode steps); "
                              "median over the layers (and decode steps after the first) that the "
                              "profiled layer stands for",
               "wall_clock": "wall clock around each all-reduce (CPU, gloo), in a run of the same "
                             f"workload without ncu (at least {TIMING_LAYERS} layers and "
                             f"{TIMING_DECODE_STEPS} decode steps); median over "
                             "the layers it stands for"}
# A program's collectives: timed by smlens's annotation in one more run of the program
# (profiler/run/annotate/collectives.py).
PROGRAM_METHOD = {"cuda_events": "CUDA events around each torch.distributed collective the program "
                                 "calls (async_op=False) on its rank's current stream, in one more run "
                                 "of the program without ncu; median over the layers (and decode steps "
                                 "after the first) that the profiled layer stands for",
                  "wall_clock": "wall clock around each torch.distributed collective the program calls "
                                "(CPU, gloo), in one more run of the program without ncu; median over "
                                "the layers (and decode steps after the first) it stands for"}


# --- the launcher ----------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(command: list[str], nproc: int, grace_s: float = 10.0) -> int:
    """Run `command` once per rank; the exit code of the first rank that fails, else 0."""
    if nproc < 1:
        raise BadInput(f"--nproc must be 1 or more (got {nproc})")
    port = str(_free_port())
    ranks: dict[int, tuple[int, subprocess.Popen]] = {}
    for rank in range(nproc):
        env = with_no_multicast(dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                                     WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
        proc = subprocess.Popen(command, env=env)
        ranks[proc.pid] = (rank, proc)
    failed = 0
    try:
        while ranks:
            pid, status = os.wait()
            if pid not in ranks:
                continue
            rank, proc = ranks.pop(pid)
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            if code != 0:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                print(f"smlens tp: rank {rank} {how}; stopping the other {len(ranks)} rank(s)",
                      file=sys.stderr, flush=True)
                failed = code if code > 0 else 128 - code
                break
    except KeyboardInterrupt:
        failed = ncu_mod.EXIT_INTERRUPTED
    finally:
        _stop([proc for _, proc in ranks.values()], grace_s)
    return failed


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- GPUs ------------------------------------------------------------------------------------------

def visible_gpus() -> int | None:
    """GPUs a process started here may use: nvidia-smi's list narrowed by CUDA_VISIBLE_DEVICES;
    None when nvidia-smi is not there."""
    gpus = ncu_mod.list_gpus()
    if gpus is None:
        return None
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return len(gpus)
    return len([d for d in mask.split(",") if d.strip() and not d.strip().startswith("-")][:len(gpus)])


def require_gpus(tp: int) -> None:
    found = visible_gpus()
    if found is not None and found < tp:
        raise EnvironmentProblem(
            f"--tp {tp} needs {tp} GPUs, one per rank, and {found} are visible (nvidia-smi, "
            f"CUDA_VISIBLE_DEVICES): use --tp {max(found, 1)} or fewer, or a machine with more GPUs",
            ncu_mod.EXIT_NO_GPU)


# --- plans -------------------------------------------------------------------------------------------

def tp_program(config, tp: int, extra: list[str] = ()) -> list[str]:
    """The launcher's command line for the tensor-parallel workload with `config` (the whole model)."""
    return [sys.executable, "-m", "profiler.run.distributed", "--nproc", str(tp), "--",
            sys.executable, "-m", "profiler.workloads.tensor_parallel", *config.argv(), *extra]


def plan_tp(plan: ProfilePlan, config, tp: int, dedup: bool = True) -> ProfilePlan:
    """The decoder workload's `plan` (profile.plan_workload of `config`), each ncu run over `tp`
    ranks of the sharded stack."""
    part = shard(config.model, tp)
    for inv in plan.invocations:  # each rank launches what one GPU does, with its own shapes
        inv.program = tp_program(replace(config, phases=inv.phases), tp)
        inv.kernel_name = NOT_REPLAYED
        inv.expected_kernels *= tp
    plan.expected_kernels *= tp
    plan.skipped_estimate *= tp
    rank_model = part.rank_model
    kv = (f"{rank_model.kv_heads} KV head(s) per rank" if part.kv_layout == "split" else
          f"1 KV head per rank, each of the {config.model.kv_heads} held by {part.kv_copies} ranks")
    plan.title = plan.title.replace(config.model.id, f"{config.model.id} at TP {tp}", 1)
    shapes = part.gemm_shapes(config.batch * config.prompt)
    plan.notes = [
        f"tensor parallel: {tp} ranks, one process and GPU each (NCCL); per rank {rank_model.heads} "
        f"query heads, {kv}, MLP {rank_model.mlp}; prefill shapes per rank: "
        + ", ".join(f"{role} N={n} K={k}" for role, (_, n, k) in shapes.items()),
        f"every rank is profiled; NCCL kernels are not replayed (ncu --kernel-name {NOT_REPLAYED}: "
        "replaying a collective on one rank hangs its peers)",
        "communication: each all-reduce is timed with CUDA events in one more run without ncu, and "
        "merged as rows of role allreduce per rank"] + plan.notes
    plan.after_merge = lambda merged, failed, deadline: finish_capture(
        merged, tp, None if failed else functools.partial(_workload_rows, config, tp, dedup, deadline))
    return plan


def plan_program(plan, tp: int):
    """A user's multi-process program (torchrun, vLLM) under ncu: NCCL kernels not replayed unless
    --kernel-name says otherwise, ranks from the program's `rank=` ranges or its processes' GPUs;
    when annotated with smlens's own filters, its torch.distributed collectives timed in one more
    run without ncu."""
    for inv in plan.invocations:  # one per cache control (the annotated program's cold run, ...)
        if inv.kernel_name is None:
            inv.kernel_name = NOT_REPLAYED
    timed = bool(plan.annotated and plan.regions)
    plan.notes = [f"tensor parallel over {tp} ranks: every process is profiled; NCCL kernels are not "
                  f"replayed (--kernel-name {inv.kernel_name}); a kernel's rank comes from a "
                  "`rank=<r>` NVTX range of the program, else from the GPU its process used; "
                  + ("its torch.distributed collectives are timed in one more run of the program "
                     "without ncu" if timed else "collectives are not timed (that needs the "
                     "annotation and smlens's own filters)")] + plan.notes
    if not timed:
        plan.after_merge = lambda merged, failed, deadline: finish_capture(
            merged, tp, None, "a program's collectives are timed only with the annotation and smlens's "
            "own filters")
        return plan
    first = plan.invocations[0]
    phases = tuple(dict.fromkeys(r.phase for r in plan.regions))
    layer = _profiled_layer(plan.regions)
    dedup = layer is not None
    plan.after_merge = lambda merged, failed, deadline: finish_capture(
        merged, tp, None if failed else functools.partial(
            _program_rows, first.program, first.env, phases, layer if dedup else 0, dedup, deadline))
    return plan


def _profiled_layer(regions) -> int | None:
    """The layer the program's regions profile (dedup), None when they profile whole phases."""
    for region in regions:
        for message in region.ranges:
            if message.startswith("layer_") and message[6:].isdigit():
                return int(message[6:])
    return None


# --- communication time ----------------------------------------------------------------------------


def time_collectives(config, tp: int, deadline: float | None = None) -> list[dict]:
    """Run the workload once without ncu, each all-reduce timed; every rank's report."""
    timing = replace(config, layers=max(config.layers, TIMING_LAYERS),
                     decode_steps=max(config.decode_steps, TIMING_DECODE_STEPS))
    with tempfile.TemporaryDirectory(prefix="smlens-comm-") as folder:
        _run_timing(tp_program(timing, tp, ["--no-nvtx", "--time-collectives", folder]), workload_env(),
                    deadline, "the collectives")
        return [json.loads(path.read_text()) for path in sorted(Path(folder).glob("rank*.json"))]


def _run_timing(command: list[str], env: dict, deadline: float | None, what: str) -> None:
    """Run the command that times the collectives (no ncu); EnvironmentProblem when it fails."""
    timeout = max(30.0, deadline - time.monotonic()) if deadline else None
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"the run that times {what} did not finish in time",
                                 ncu_mod.EXIT_TIME_LIMIT) from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise EnvironmentProblem(f"the run that times {what} failed (exit code "
                                 f"{done.returncode}): {tail}", ncu_mod.EXIT_WORKLOAD_FAILED)


def time_program_collectives(program: list[str], env: dict, deadline: float | None = None) -> list[dict]:
    """Run a program once without ncu, its torch.distributed collectives timed by the annotation
    (profiler/run/annotate/collectives.py); every process's report that timed any."""
    with tempfile.TemporaryDirectory(prefix="smlens-comm-") as folder:
        _run_timing(list(program), workload_env({**env, program_collectives.ENV: folder}), deadline,
                    "the program's collectives")
        return [json.loads(path.read_text()) for path in sorted(Path(folder).glob("collectives-*.json"))]


def _median_rows(reports: list[dict], key_of) -> list[dict]:
    """One row per rank and key (phase, step, layer, call site): the median of the records that
    `key_of(record)` gives that key (None: left out)."""
    rows = []
    for report in reports:
        groups: dict[tuple, list[dict]] = {}
        for record in report["records"]:
            key = key_of(record)
            if key is not None:
                groups.setdefault(key, []).append(record)
        for (phase, step_index, layer, after), records in groups.items():
            rows.append({"rank": report["rank"], "tp": report["tp"], "device": report["device"],
                         "pid": report.get("pid"), "backend": report["backend"],
                         "method": report["method"], "phase": phase, "step": step_index,
                         "layer": layer, "after": after, "op": records[0].get("op"),
                         "bytes": records[0]["bytes"], "dtype": records[0]["dtype"],
                         "samples": len(records),
                         "time_ns": statistics.median(r["time_ns"] for r in records)})
    return rows


def comm_rows(reports: list[dict], config, dedup: bool = True) -> list[dict]:
    """One row per rank, phase, decode step, layer and collective, as the profiled kernels are
    chosen from `config`: with dedup, layer 0 (of the representative decode step) stands for all,
    its time the median over every layer (and decode step after the first) timed; without, each
    call of the profiled layers and steps."""
    from profiler.workloads import decoder

    step = decoder.representative_decode_step(config.decode_steps)

    def key_of(record):
        phase, decode = record["phase"], record["phase"] == "decode"
        if phase not in config.phases:
            return None
        if dedup:
            if decode and config.decode_steps > 1 and record["step"] == 0:
                return None  # like the profiled step, the first decode step's calls are left out
            return (phase, step if decode else None, 0, record["after"])
        if record["layer"] < config.layers and (not decode or record["step"] < config.decode_steps):
            return (phase, record["step"], record["layer"], record["after"])
        return None

    return _median_rows(reports, key_of)


def program_comm_rows(reports: list[dict], phases: tuple, layer: int, dedup: bool = True) -> list[dict]:
    """A program's timed collectives as rows, as its kernels were profiled (profiler/run/program.py):
    with dedup, `layer` of each prefill and of decode step 1 stands for every layer and step, its
    time the median over them (the first decode step left out when there are more); without, each
    call in a layer. Calls outside the decoder layers are left out: no profiled kernel stands
    beside them."""
    from profiler.run.program import DECODE_STEP

    steps = {r.get("step") for report in reports for r in report["records"] if r.get("phase") == "decode"}
    skip_first = len(steps - {None}) > 1

    def key_of(record):
        phase, decode = record.get("phase"), record.get("phase") == "decode"
        if phase not in phases or record.get("layer") is None or record.get("time_ns") is None:
            return None
        if not dedup:
            return (phase, record["step"], record["layer"], record["site"])
        if decode and skip_first and record.get("step") == 0:
            return None
        return (phase, DECODE_STEP if decode else None, layer, record["site"])

    return _median_rows(reports, key_of)


def _workload_rows(config, tp: int, dedup: bool, deadline) -> tuple[list[dict], dict]:
    return comm_rows(time_collectives(config, tp, deadline), config, dedup), COMM_METHOD


def _program_rows(program, env, phases, layer, dedup, deadline) -> tuple[list[dict], dict]:
    return program_comm_rows(time_program_collectives(program, env, deadline), phases, layer, dedup), \
        PROGRAM_METHOD


def collective_role(op: str) -> str:
    """The role of a torch.distributed function's timed rows: all_gather_into_tensor -> allgather."""
    base = op
    for suffix in ("_into_tensor", "_tensor", "_single"):
        base = base.removesuffix(suffix)
    role = ROLE_ALIASES.get(base, base)
    return role if role in COLLECTIVE_ROLES else "communication"


# --- the capture -------------------------------------------------------------------------------------

def _cell(entries: list[tuple[str, str]]) -> str:
    """A push/pop cell as ncu writes it, for (domain, message) entries, outermost first."""
    return "  ".join(f'"{domain}:{message}:none:none:none:none:none:none"' for domain, message in entries)


def finish_capture(path: Path, tp: int, measure, why_not: str = "the profiled run failed") -> dict:
    """Rewrite a merged raw CSV of a TP run: a rank marker on every process that lacks one, a
    `time_source` column, and the timed collectives as rows (`measure()`: the rows, and what each
    timing method means in words; None: not measured, `why_not`). Returns the tags that say how
    communication was measured (or why it was not)."""
    # the merged exports (profiler.ingest.merge): the header, the units row, then one row per kernel
    with open(path, newline="", encoding="utf-8") as handle:
        header, units, *rows = list(csv.reader(handle)) or [[], []]
    if not header:
        return {}
    tags = {"tp": str(tp)}
    column = {name: i for i, name in enumerate(header)}
    push_pop = next((name for name in header if name.startswith("thread Domain:Push/Pop_Range")), None)
    if push_pop is None:
        push_pop = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
        header, units = header + [push_pop], units + [""]
        rows = [row + [""] for row in rows]
        column[push_pop] = len(header) - 1
    tags.update(_mark_ranks(rows, column, push_pop, tp))
    added = []
    if measure is not None:
        try:
            added, methods = measure()
        except EnvironmentProblem as err:
            print(f"smlens: note: {err}; the run is stored without communication rows",
                  file=sys.stderr)
            tags["comm_time"] = f"not measured: {err}"
        else:
            tags["comm_time"] = methods.get(added[0]["method"], added[0]["method"]) if added else \
                "no collectives in the profiled phases"
            if added:
                tags["comm_calls"] = calls_tag(added)
    else:
        tags["comm_time"] = f"not measured ({why_not})"
    extra = [TIME_SOURCE, COMM_BYTES, COMM_SAMPLES]
    header = header + extra
    units = units + ["", "byte", ""]
    out_rows = [row + ["ncu", "", ""] for row in rows]
    out_rows += _comm_csv_rows(added, header, units, rows, column, push_pop)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerows([header, units, *out_rows])
    os.replace(tmp, path)
    return tags


def calls_tag(rows: list[dict]) -> str:
    """How many calls the rows' medians are taken over, for the run's tags."""
    samples = [row["samples"] for row in rows]
    low, high = min(samples), max(samples)
    each = f"{low}" if low == high else f"{low} to {high}"
    return f"each row the median of {each} calls ({sum(samples)} in all)"


def _mark_ranks(rows: list[list[str]], column: dict, push_pop: str, tp: int) -> dict:
    """Give every process without a `rank=` range one: the GPU it ran on, when each process used
    one GPU and they did not all use the same one (several ncu runs start a rank's process once
    each); else the order in which the processes first appear."""
    pid_col, dev_col = column.get("Process ID"), column.get("Device")
    cells = column[push_pop]
    marked, devices, order = set(), {}, []
    for row in rows:
        pid = row[pid_col] if pid_col is not None else ""
        if pid not in devices:
            devices[pid] = set()
            order.append(pid)
        if dev_col is not None and row[dev_col].strip():
            devices[pid].add(row[dev_col].strip())
        if rank_marker(parse_stack(row[cells])) is not None:
            marked.add(pid)
    unmarked = [pid for pid in order if pid not in marked]
    if not unmarked:
        return {"rank_source": "nvtx"}
    used = [devices[pid] for pid in unmarked]
    by_device = (all(len(d) == 1 and next(iter(d)).isdigit() for d in used)
                 and len(set.union(*used)) > 1)
    rank_of = {pid: int(next(iter(devices[pid]))) if by_device else index
               for index, pid in enumerate(unmarked)}
    source = "device" if by_device else "process_order"
    for row in rows:
        pid = row[pid_col] if pid_col is not None else ""
        if pid in rank_of:
            marker = _cell([(RANK_DOMAIN, f"rank={rank_of[pid]} tp={tp} source={source}")])
            row[cells] = f"{marker}  {row[cells]}".strip()
    return {"rank_source": source if not marked else f"nvtx and {source}"}


def _comm_csv_rows(added: list[dict], header: list[str], units: list[str], rows: list[list[str]],
                   column: dict, push_pop: str) -> list[list[str]]:
    """The timed collectives as raw-CSV rows: identity, NVTX stack, time, and blanks elsewhere."""
    from profiler.ingest.units import to_base
    from profiler.workloads import decoder
    from profiler.workloads.tensor_parallel import COLLECTIVE

    if not added:
        return []
    _, to_ns = to_base(units[header.index("gpu__time_duration.sum")]) \
        if "gpu__time_duration.sum" in header else ("ns", 1.0)
    first = rows[0] if rows else [""] * len(header)
    next_id = max((int(r[column["ID"]]) for r in rows if r[column["ID"]].strip().isdigit()), default=-1) + 1
    out = []
    for index, item in enumerate(added):
        entries = [(RANK_DOMAIN, f"rank={item['rank']} tp={item['tp']} device={item['device']}"),
                   (decoder.DOMAIN, item["phase"])]
        if item["step"] is not None:
            entries.append((decoder.DOMAIN, decoder.step_range(item["step"])))
        op = item.get("op")  # a program's torch.distributed function; the workload's all-reduce
        collective = f"{collective_role(op)} op={op}" if op else f"{COLLECTIVE} op=sum"
        entries += [(decoder.DOMAIN, decoder.layer_range(item["layer"])),
                    (decoder.DOMAIN, f"{collective} bytes={item['bytes']} dtype={item['dtype']} "
                                     f"after={item['after']}")]
        cells = {"ID": str(next_id + index), "Process ID": str(item.get("pid") or ""),
                 "Process Name": "python3", "Host Name": first[column["Host Name"]] if "Host Name" in column else "",
                 push_pop: _cell(entries), "Kernel Name": f"{item['backend'] or 'torch.distributed'} {op or 'all_reduce'}",
                 "Device": "" if item["device"] is None else str(item["device"]),
                 "CC": first[column["CC"]] if "CC" in column else "",
                 "gpu__time_duration.sum": f"{item['time_ns'] / to_ns:.6g}",
                 TIME_SOURCE: item["method"], COMM_BYTES: str(item["bytes"]),
                 COMM_SAMPLES: str(item["samples"])}
        out.append([cells.get(name, "") for name in header])
    return out


# --- the launcher's command line ---------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m profiler.run.distributed --nproc N -- COMMAND [ARGS...]"
    if "--" not in argv:
        print(usage, file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if len(options) != 2 or options[0] != "--nproc" or not options[1].isdigit() or not command:
        print(usage, file=sys.stderr)
        return 2
    return launch(command, int(options[1]))


if __name__ == "__main__":
    sys.exit(main())
