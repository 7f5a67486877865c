"""The decoder stack split over TP ranks (Megatron-style), one process per rank.

Each rank holds a slice of every layer, as vLLM and Megatron-LM split it:
- qkv_proj and gate_up_proj are column-parallel: each rank computes its own query heads, KV heads
  and MLP columns (N divided by the TP degree);
- attention runs on the rank's own heads;
- o_proj and down_proj are row-parallel: each rank multiplies its slice of K and the partial
  outputs are summed by an all-reduce (a range `allreduce` right after each of them);
- norms, rotary embedding and residual adds run whole on every rank.
When a model has fewer KV heads than ranks (and the TP degree is a multiple of them), each rank
holds one KV head and ranks share copies of it, as vLLM does; other splits are refused.

A rank's layer is the single-GPU decoder layer of a smaller model (`models.Shard.rank_model`): its
role ranges carry the per-rank shapes, e.g. for Llama-3.1-70B at TP 2 `qkv_proj M=512 N=5120 K=8192`,
`o_proj M=512 N=8192 K=4096`. All the rank's ranges sit inside a range of its own domain,
`smlens_rank:rank=<r> tp=<n> device=<d>`, which tells the capture reader which rank launched a
kernel (a domain of its own, so ncu's include filters on the `smlens` domain are unchanged).

Run one rank per process under a launcher that sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (`python -m profiler.run.distributed --nproc 2 -- python -m
profiler.workloads.tensor_parallel --model llama-3.1-70b ...`, or torchrun). With
`--time-collectives DIR` each rank also times every collective with CUDA events (wall clock on
the CPU) and writes `DIR/rank<r>.json`: the communication time of a run that no profiler replays.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from profiler.ingest.nvtx import RANK_DOMAIN
from profiler.workloads import decoder
from profiler.workloads.models import shard

# Exit codes of a rank, which the launcher passes on: the process group could not start, or the
# rank failed after it had.
EXIT_INIT_FAILED = 3
EXIT_RANK_FAILED = 1
COLLECTIVE = "allreduce"  # the role range around each all-reduce


# --- the collective and where it happens ---------------------------------------------------------

class TrackedAnnotator(decoder.Annotator):
    """An Annotator that also keeps the messages of the open ranges, NVTX or not, so a collective
    knows its phase, decode step and layer in a run with no profiler attached."""

    def __init__(self, enabled: bool = True):
        super().__init__(enabled=enabled)
        self.open: list[str] = []

    @contextlib.contextmanager
    def range(self, message: str):
        self.open.append(message)
        try:
            with super().range(message):
                yield
        finally:
            self.open.pop()

    def where(self) -> dict:
        """phase, step and layer of the innermost open ranges (None where not inside one)."""
        found = {"phase": None, "step": None, "layer": None}
        for message in self.open:
            word = message.split()[0]
            if word in decoder.PHASES:
                found["phase"] = word
            elif word.startswith("step_") and word[5:].isdigit():
                found["step"] = int(word[5:])
            elif word.startswith("layer_") and word[6:].isdigit():
                found["layer"] = int(word[6:])
        return found


_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


class AllReduce:
    """Sums a row-parallel GEMM's partial outputs over the ranks, inside an `allreduce` range.

    With `timed`, each call is bracketed by CUDA events (on the GPU) or the wall clock (on the
    CPU, where gloo's all-reduce returns when it is done), and recorded with its place."""

    def __init__(self, dist, ann: TrackedAnnotator, device: str, timed: bool):
        self.dist, self.ann, self.device, self.timed = dist, ann, device, timed
        self.records: list[dict] = []
        self._pending: list = []

    @property
    def method(self) -> str:
        return "cuda_events" if self.device.startswith("cuda") else "wall_clock"

    def __call__(self, tensor, after: str):
        size_bytes = tensor.numel() * tensor.element_size()
        dtype = _DTYPE_NAMES.get(str(tensor.dtype).replace("torch.", ""), str(tensor.dtype))
        with self.ann.range(f"{COLLECTIVE} op=sum bytes={size_bytes} dtype={dtype} after={after}"):
            if not self.timed:
                self.dist.all_reduce(tensor)
                return tensor
            place = {**self.ann.where(), "after": after, "bytes": size_bytes, "dtype": dtype}
            if self.device.startswith("cuda"):
                import torch
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                self.dist.all_reduce(tensor)
                end.record()
                self._pending.append((place, start, end))
            else:
                began = time.perf_counter_ns()
                self.dist.all_reduce(tensor)
                self.records.append({**place, "time_ns": time.perf_counter_ns() - began})
        return tensor

    def collect(self) -> list[dict]:
        """Every timed call so far (waits for the GPU to finish the pending ones)."""
        if self._pending:
            import torch
            torch.cuda.synchronize()
            for place, start, end in self._pending:
                self.records.append({**place, "time_ns": round(start.elapsed_time(end) * 1e6)})
            self._pending.clear()
        return self.records


# --- one rank ------------------------------------------------------------------------------------

def _fail(rank: int, message: str, code: int) -> int:
    print(f"smlens tp: rank {rank}: {message}", file=sys.stderr, flush=True)
    return code


def _parse(argv):
    parser = decoder.build_parser("python -m profiler.workloads.tensor_parallel",
                                  "One tensor-parallel rank of the annotated decoder stack.")
    parser.add_argument("--backend", default=None, help="nccl (default with a GPU) or gloo")
    parser.add_argument("--time-collectives", default=None, metavar="DIR",
                        help="time each all-reduce and write DIR/rank<r>.json")
    return parser.parse_args(argv)


def run_rank(argv: list[str] | None = None) -> int:
    """One rank: join the process group, run the sharded stack, leave. Returns an exit code."""
    from profiler.errors import SmlensError
    env = os.environ
    try:
        rank, world, local = (int(env[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    except (KeyError, ValueError):
        print("smlens tp: RANK, WORLD_SIZE and LOCAL_RANK must be set: start the ranks with "
              "`python -m profiler.run.distributed --nproc N -- ...` or torchrun", file=sys.stderr)
        return 2
    try:
        args = _parse(argv)
        config = decoder.config_from_args(args)
        rank_config = replace(config, model=shard(config.model, world).rank_model)
    except SmlensError as err:
        return _fail(rank, str(err), 2)
    import torch
    import torch.distributed as dist
    on_gpu = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    backend = args.backend or ("nccl" if on_gpu else "gloo")
    device = f"cuda:{local}" if on_gpu else "cpu"
    ann = TrackedAnnotator(enabled=not args.no_nvtx)
    rank_ann = decoder.Annotator(RANK_DOMAIN, enabled=not args.no_nvtx)
    with rank_ann.range(f"rank={rank} tp={world} device={local if on_gpu else -1}"):
        try:
            if on_gpu:
                torch.cuda.set_device(local)
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    **({"device_id": torch.device(device)} if on_gpu else {}))
            # The first collective sets up the connections between ranks (seconds with NCCL):
            # done here, outside every phase, so no phase pays for it.
            warm = torch.ones(1, device=device)
            dist.all_reduce(warm)
            if float(warm.item()) != world:
                raise RuntimeError(f"a test all-reduce gave {float(warm.item())}, not {world}")
        except Exception as err:  # noqa: BLE001 (whatever the backend raises: one line, then exit)
            return _fail(rank, f"the {backend} process group could not start: "
                         f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}",
                         EXIT_INIT_FAILED)
        reduce = AllReduce(dist, ann, device, timed=args.time_collectives is not None)
        try:
            result = decoder.run(rank_config, device=device, ann=ann, reduce=reduce)
            records = reduce.collect()
        except Exception as err:  # noqa: BLE001
            return _fail(rank, f"{type(err).__name__}: {str(err).strip()[:300]}", EXIT_RANK_FAILED)
        finally:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    if args.time_collectives:
        out = Path(args.time_collectives)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".rank{rank}.json.tmp"
        tmp.write_text(json.dumps({
            "rank": rank, "tp": world, "device": local if on_gpu else None, "backend": backend,
            "method": reduce.method, "pid": os.getpid(), "model": config.model.id,
            "records": records}))
        os.replace(tmp, out / f"rank{rank}.json")
    # one write per line: the ranks share stdout, and print's separate newline interleaves them
    sys.stdout.write(json.dumps({"workload": "tensor_parallel", "rank": rank, "tp": world,
                                 "model": rank_config.model.id, "device": device, **result}) + "\n")
    sys.stdout.flush()
    return 0 if result["finite"] else 1


if __name__ == "__main__":
    sys.exit(run_rank())
