"""Measuring helpers shared by the benchmark (bench.py) and the generation check (generate.py):
digests of a tensor's bits, CUDA graphs, and timers that work on a GPU and on a CPU."""
from __future__ import annotations

import hashlib
import statistics
import time
from typing import Callable

from profiler.workloads.deterministic.stack import torch


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensor_digest(t) -> str:
    """SHA-256 of a tensor's raw bytes (row-major), whatever its dtype."""
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return sha256_bytes(t.cpu().numpy().tobytes())


def bitwise_equal(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = torch.int32 if a.dtype == torch.float32 else torch.int16
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


def summarize(times_us: list[float]) -> dict:
    s = sorted(times_us)

    def q(p):
        return s[min(len(s) - 1, max(0, int(round(p * (len(s) - 1)))))]

    return {"median_us": statistics.median(s), "p10_us": q(0.1), "p90_us": q(0.9), "samples": len(s)}


def is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def cuda_graph(warm: Callable[[], object], capture: Callable[[], object]):
    """A CUDA graph of what `capture()` launches, after `warm()` on a side stream (as torch asks
    before a capture: lazy initialisation and library heuristics must not land in the graph)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture()
    return graph


def elapsed_ms(fn: Callable[[], object], device) -> float:
    """Elapsed ms of one call: CUDA events on a GPU, the host clock on a CPU."""
    if not is_cuda(device):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_calls(calls: list[Callable[[], object]], repeats: int, device="cuda", warmup: int = 3) -> dict:
    """Median time of one call of `calls` (run in order): on a GPU from replays of one CUDA graph
    of them all (launch gaps out), on a CPU from the host clock."""
    def run_in_order(some: list[Callable[[], object]]) -> None:
        for c in some:
            c()

    run_in_order(calls)
    replay = lambda: run_in_order(calls)  # noqa: E731
    graph = None
    if is_cuda(device):
        torch.cuda.synchronize()
        graph = cuda_graph(lambda: run_in_order(calls[:2]), replay)
        replay = graph.replay
    times = [elapsed_ms(replay, device) * 1000.0 / len(calls) for _ in range(warmup + repeats)][warmup:]
    del graph
    return summarize(times)
