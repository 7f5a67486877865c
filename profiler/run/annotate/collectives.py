"""Timing a profiled program's torch.distributed collectives, in a run of it without ncu.

ncu cannot replay a collective on one rank while its peers wait (docs/TENSOR_PARALLEL.md), so
`smlens profile --tp N -- CMD` runs the program once more without ncu, with SMLENS_TIME_COLLECTIVES
set to a folder. Then `boot/sitecustomize.py` starts this module instead of the plain annotation:
- the annotation (runtime.Annotator) runs with a domain that only keeps the open ranges' messages
  (`StackDomain`; no NVTX tool is attached in this run), so a call knows its phase, decode step,
  layer and the module it is called in;
- torch.distributed's collectives (COLLECTIVES) are wrapped: each call with async_op=False is
  timed, with CUDA events on the current stream when its tensor is on a GPU (the stream waits for
  the collective), else with the wall clock (gloo on the CPU returns when it is done);
- at exit each process that called any writes `<folder>/collectives-<pid>.json`: its rank, world
  size, backend, device, and per call op, bytes (numel x itemsize of the tensor that fixes the
  size: an all-gather's output, a reduce-scatter's input), dtype, phase, step, layer, site and
  time_ns. `site` is where in the layer the call is: the innermost range's first word (the role or
  block of the module it is called in) and the call's order in the layer (`o_proj#0`), the same on
  every rank, so the same call can be matched across ranks.
profiler/run/distributed.py merges them into the capture. Like runtime.py, this file imports
nothing of smlens by package name and is loaded by file path.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time

ENV = "SMLENS_TIME_COLLECTIVES"
# torch.distributed function -> the index (or keyword) of the tensor (or tensor list) whose size
# is the collective's: NCCL's own convention for the bus bandwidth
COLLECTIVES = {"all_reduce": (0, "tensor"), "broadcast": (0, "tensor"), "reduce": (0, "tensor"),
               "all_gather_into_tensor": (0, "output_tensor"), "all_gather": (0, "tensor_list"),
               "reduce_scatter_tensor": (1, "input"), "reduce_scatter": (1, "input_list"),
               "all_to_all_single": (1, "input"), "all_to_all": (1, "input_tensor_list")}
_MAX_CALLS = 200_000  # a long-running program keeps its first calls only
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


class StackDomain:
    """An NVTX domain stand-in that keeps each thread's open ranges: (message, serial), outermost
    first; the serial tells one opening of a range from the next."""

    def __init__(self):
        self._local = threading.local()
        self._serial = 0

    def stack(self) -> list:
        if not hasattr(self._local, "open"):
            self._local.open = []
        return self._local.open

    def get_event_attributes(self, message: str = "") -> str:
        return message

    def push_range(self, attributes) -> None:
        self._serial += 1
        self.stack().append((str(attributes), self._serial))

    def pop_range(self) -> None:
        if self.stack():
            self.stack().pop()


def _size(value) -> tuple[int, str]:
    """(bytes, dtype) of a tensor or a list of tensors."""
    tensors = list(value) if isinstance(value, (list, tuple)) else [value]
    total = sum(int(t.numel()) * int(t.element_size()) for t in tensors)
    dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else ""
    return total, _DTYPES.get(dtype, dtype)


class CollectiveTimer:
    """The wrappers, the calls they timed, and the report written at exit."""

    def __init__(self, domain: StackDomain, phases: tuple, folder: str):
        self.domain, self.phases, self.folder = domain, phases, folder
        self.records: list[dict] = []
        self._pending: list = []  # (record, start event, end event): read once the GPU is done
        self._order: dict = {}    # (layer serial, word) -> calls so far in that layer
        self._layer = None
        self.dist = None
        self.identity: dict = {}  # rank, world size, backend: read at the first call (the group is up)
        self.error: str | None = None

    def install(self, torch) -> None:
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return
        self.dist, self._torch = dist, torch
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._wrap(name, original))
        atexit.register(self.write)

    def _untimeable(self) -> bool:
        """Inside torch.compile's tracing or a CUDA graph's capture: no events, no clock."""
        torch = self._torch
        if torch.compiler.is_compiling():
            return True
        return bool(torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())

    def place(self) -> dict:
        """Phase, decode step, layer and site of a call made now, from the open ranges."""
        found = {"phase": None, "step": None, "layer": None}
        layer_serial, word = None, "outside"
        for message, serial in self.domain.stack():
            first = message.split()[0] if message.split() else ""
            if first in self.phases:
                found["phase"] = first
            elif first.startswith("step_") and first[5:].isdigit():
                found["step"] = int(first[5:])
            elif first.startswith("layer_") and first[6:].isdigit():
                found["layer"], layer_serial = int(first[6:]), serial
            word = first
        if layer_serial != self._layer:  # a new layer (or none): its calls are counted from 0
            self._layer, self._order = layer_serial, {}
        index = self._order.get(word, 0)
        self._order[word] = index + 1
        return {**found, "site": f"{word}#{index}"}

    def _wrap(self, name: str, original):
        position, keyword = COLLECTIVES[name]
        timer = self

        @functools.wraps(original)
        def timed(*args, **kwargs):
            if kwargs.get("async_op") or len(timer.records) + len(timer._pending) >= _MAX_CALLS \
                    or timer.error is not None or timer._untimeable():
                return original(*args, **kwargs)  # an async call ends at its wait(): not timed
            try:
                tensor = args[position] if len(args) > position else kwargs[keyword]
                size, dtype = _size(tensor)
                first = tensor[0] if isinstance(tensor, (list, tuple)) else tensor
                record = {"op": name, "bytes": size, "dtype": dtype, **timer.place()}
                on_gpu = first.is_cuda
                if not timer.identity and timer.dist.is_initialized():
                    timer.identity = {"rank": timer.dist.get_rank(), "tp": timer.dist.get_world_size(),
                                      "backend": str(timer.dist.get_backend())}
            except Exception as err:  # noqa: BLE001 - an odd call goes untimed, the program runs on
                timer.error = f"{name}: {type(err).__name__}: {err}"
                return original(*args, **kwargs)
            if on_gpu:
                torch = timer._torch
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                result = original(*args, **kwargs)
                end.record()
                timer._pending.append((record, start, end))
                record["device"] = first.device.index
            else:
                began = time.perf_counter_ns()
                result = original(*args, **kwargs)
                record["time_ns"] = time.perf_counter_ns() - began
                timer.records.append(record)
            return result

        return timed

    def report(self) -> dict:
        if self._pending:
            self._torch.cuda.synchronize()
            for record, start, end in self._pending:
                self.records.append({**record, "time_ns": round(start.elapsed_time(end) * 1e6)})
            self._pending = []
        env = os.environ
        identity = {"rank": int(env.get("RANK", 0)), "tp": int(env.get("WORLD_SIZE", 1)),
                    "backend": None, **self.identity}
        devices = {r["device"] for r in self.records if r.get("device") is not None}
        return {**identity, "pid": os.getpid(),
                "device": devices.pop() if len(devices) == 1 else None,
                "method": "cuda_events" if any("device" in r for r in self.records) else "wall_clock",
                "error": self.error, "records": self.records}

    def write(self) -> None:
        try:
            if not self.records and not self._pending:
                return
            report = self.report()
            path = os.path.join(self.folder, f"collectives-{os.getpid()}.json")
            os.makedirs(self.folder, exist_ok=True)
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                json.dump(report, handle)
            os.replace(f"{path}.tmp", path)
        except Exception:  # noqa: BLE001 - at exit nothing is left to tell; smlens says none came
            pass


def boot(runtime, vocab, environ=os.environ) -> None:
    """Start-up in the timing run: the annotation on a StackDomain, and the collectives' timer,
    once the program imports torch."""
    import sys

    domain = StackDomain()
    annotator = runtime.Annotator(vocab, domain)
    timer = CollectiveTimer(domain, tuple(vocab.PHASES), environ[ENV])

    def install(torch):
        annotator.install(torch)
        timer.install(torch)

    if "torch" in sys.modules:
        install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, runtime._AfterImport("torch", install))
