"""The determinism benchmark: bits (batch invariance, run to run, equality with the CPU reference)
and speed of the deterministic GEMMs against their baselines, on a model's projection shapes.

`run_determinism` does everything on one GPU and returns a JSON-able dict (digests, versions,
timings); `compare_results` says whether two such files (two GPUs) gave the same bits.

Timing: CUDA events around CUDA-graph replays of `inner` calls (launch gaps out), median over
`repeats` replays. Decode shapes rotate over enough weight copies that they do not sit in L2: in a
real model every layer's weights are new to the cache.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import platform
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

SCHEMA = "smlens.bench.determinism/1"
DRAM_PEAK_BYTES_PER_S = 4.8e12     # H200 (docs/NCU_ON_H200.md: implied dram__throughput peak)
L2_ROTATE_BYTES = 150e6            # rotate weight copies until this many bytes are in play
DEFAULT_BATCHES = "1..256"
DECODE_TOKENS = (1, 8, 16)
PREFILL_TOKENS = (2048,)


# --- small helpers that need no GPU -------------------------------------------------------------

def parse_batches(text: str) -> list[int]:
    """'1..256', '1,2,4,8', '1..16,32,64' -> sorted distinct positive ints."""
    from profiler.errors import BadInput
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(v) for v in part.split("..", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise BadInput(f"--batches: cannot read {part!r}; write e.g. 1..256 or 1,2,4,8") from None
    if not out or min(out) < 1:
        raise BadInput("--batches needs positive batch sizes, e.g. 1..256")
    if max(out) > 65536:
        raise BadInput("--batches: at most 65536")
    return sorted(out)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensor_digest(t) -> str:
    """SHA-256 of a tensor's raw bytes (row-major), whatever its dtype."""
    import torch
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return sha256_bytes(t.cpu().numpy().tobytes())


def weight_roofline_us(N: int, K: int, weight_bytes: int = 2) -> float:
    """Time to read the 16-bit weights once at the DRAM peak: the decode floor."""
    return N * K * weight_bytes / DRAM_PEAK_BYTES_PER_S * 1e6


def summarize(times_us: list[float]) -> dict:
    s = sorted(times_us)

    def q(p):
        return s[min(len(s) - 1, max(0, int(round(p * (len(s) - 1)))))]

    return {"median_us": statistics.median(s), "p10_us": q(0.1), "p90_us": q(0.9), "samples": len(s)}


def versions() -> dict:
    """Versions of everything the bits may depend on (docs/DETERMINISM.md rule 5)."""
    import numpy as np
    env = {"python": platform.python_version(), "numpy": np.__version__, "host": platform.node()}
    try:
        import torch
        env["torch"] = torch.__version__
        env["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["gpu"] = p.name
            env["cc"] = f"{p.major}.{p.minor}"
            env["sm_count"] = p.multi_processor_count   # recorded, never used by a kernel
            env["gpu_memory_bytes"] = p.total_memory
    except ImportError:
        pass
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        first = out.stdout.strip().splitlines()[0].split(",") if out.returncode == 0 and out.stdout.strip() else []
        if first:
            env["driver"] = first[0].strip()
            env["sm_clock_max_mhz"] = first[1].strip() if len(first) > 1 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return env


# --- GPU measurement primitives -----------------------------------------------------------------

def _cuda_graph(warm: Callable[[], object], capture: Callable[[], object]):
    """A CUDA graph of what `capture()` launches, after `warm()` on a side stream (as torch asks
    before a capture: lazy initialisation and autotuning must not land in the graph)."""
    import torch
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


def time_graph(calls: list[Callable[[], object]], repeats: int, warmup: int = 3) -> dict:
    """Median time of one call, from CUDA-graph replays of `calls` (run in order, one graph)."""
    import torch

    def run_in_order(some: list[Callable[[], object]]) -> None:
        for c in some:
            c()

    run_in_order(calls)
    torch.cuda.synchronize()
    graph = _cuda_graph(lambda: run_in_order(calls[:2]), lambda: run_in_order(calls))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(warmup + repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) * 1000.0 / len(calls))
    del graph
    return summarize(times)


@dataclass
class ShapeCase:
    role: str
    N: int
    K: int


def model_shapes(model: str) -> list[ShapeCase]:
    from profiler.workloads.models import get_model
    m = get_model(model)
    return [ShapeCase(role, N, K) for role, (_, N, K) in m.gemm_shapes(1).items()]


class Inputs:
    """Seeded inputs on the CPU (the same values on every machine for one torch version), moved to
    the GPU: x [max_batch, K] FP32 and W [N, K] bf16. Their digests go into the JSON."""

    def __init__(self, case: ShapeCase, max_batch: int, seed: int, device: str = "cuda"):
        import torch
        gen = torch.Generator(device="cpu").manual_seed(seed * 1000003 + case.N * 31 + case.K)
        self.x_cpu = torch.randn(max_batch, case.K, generator=gen, dtype=torch.float32)
        self.w_cpu = (torch.randn(case.N, case.K, generator=gen) / math.sqrt(case.K)).to(torch.bfloat16)
        self.x = self.x_cpu.to(device)
        self.w = self.w_cpu.to(device)
        self.digests = {"x_sha256": tensor_digest(self.x_cpu), "w_sha256": tensor_digest(self.w_cpu)}


def impl_call(impl: str, lin):
    """x -> y for one implementation over one Linear."""
    return lambda x: lin(x, impl)


# --- the bits ---------------------------------------------------------------------------------

def batch_invariance(fn, x, batches: list[int]) -> dict:
    """Row 0 (and every row) of fn(x[:B]) against fn(x[:Bmax]) for each B."""
    import torch
    bmax = max(batches)
    full = fn(x[:bmax])
    if full.is_cuda:
        torch.cuda.synchronize()
    row0 = {}
    changed_row0, changed_any = [], []
    for b in batches:
        y = fn(x[:b])
        if not _bitwise_equal(y[0], full[0]):
            changed_row0.append(b)
        if not _bitwise_equal(y, full[:b]):
            changed_any.append(b)
        if b in (1, bmax):
            row0[b] = tensor_digest(y[0])
    return {"batches": len(batches), "max_batch": bmax,
            "row0_changed": len(changed_row0), "row0_changed_at": changed_row0[:32],
            "rows_changed": len(changed_any), "rows_changed_at": changed_any[:32],
            "invariant": not changed_row0 and not changed_any,
            "row0_sha256_b1": row0.get(1), "row0_sha256_bmax": row0.get(bmax),
            "full_sha256_bmax": tensor_digest(full)}


def _bitwise_equal(a, b) -> bool:
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = torch.int32 if a.dtype == torch.float32 else torch.int16
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


def run_to_run(fn, x, repeats: int) -> dict:
    """SHA-256 of the whole output over `repeats` calls on the same input: one digest = deterministic."""
    digests = [tensor_digest(fn(x)) for _ in range(repeats)]
    distinct = sorted(set(digests))
    return {"M": x.shape[0], "repeats": repeats, "distinct": len(distinct), "sha256": distinct[0] if len(distinct) == 1 else None,
            "sha256_all": distinct[:8]}


def reference_columns(N: int, count: int = 64) -> list[int]:
    """The output columns checked against the CPU reference: both ends of N (different programs)."""
    half = min(count // 2, N // 2)
    return sorted(set(list(range(half)) + list(range(N - half, N))))


def reference_check(fn, x, w, rows: int, columns: list[int], Ms: Iterable[int]) -> dict:
    """GPU bits of fn(x[:M])[:rows, columns] for each M against the exact CPU emulation."""
    import numpy as np
    import torch
    from profiler.workloads.deterministic.kernels import reference_linear
    cols = torch.tensor(columns, device=w.device)
    ref = reference_linear(x[:rows].cpu(), w.index_select(0, cols).cpu())
    out = {"rows": rows, "columns": len(columns), "K": int(x.shape[1]), "by_M": {}}
    for M in Ms:
        y = fn(x[:max(M, rows)])[:rows].index_select(1, cols).float().cpu().numpy()
        mism = int(np.count_nonzero(y.view(np.int32) != ref.view(np.int32)))
        out["by_M"][str(M)] = mism
    out["mismatches"] = sum(out["by_M"].values())
    out["equal"] = out["mismatches"] == 0
    return out


# --- one full decoder layer ---------------------------------------------------------------------

class _Layer:
    """One Llama-style decoder layer whose four projections run through `impl`; activations FP32 for
    the FP32 implementations and bf16 for the 16-bit ones. Static KV cache, so one CUDA graph
    serves every decode step."""

    def __init__(self, model: str, impl: str, max_len: int, seed: int, device: str = "cuda"):
        import torch
        from profiler.workloads.deterministic.kernels import Linear
        from profiler.workloads.models import get_model
        m = self.m = get_model(model)
        self.impl = impl
        self.act = torch.float32 if impl in ("det", "layercast", "portable") else torch.bfloat16
        gen = torch.Generator(device="cpu").manual_seed(seed)

        def w(n, k):
            return (torch.randn(n, k, generator=gen) / math.sqrt(k)).to(torch.bfloat16).to(device)

        self.qkv = Linear(w(m.qkv_width, m.hidden))
        self.o = Linear(w(m.hidden, m.q_width))
        self.gate_up = Linear(w(2 * m.mlp, m.hidden))
        self.down = Linear(w(m.hidden, m.mlp))
        self.norm1 = (1 + 0.1 * torch.randn(m.hidden, generator=gen)).to(device, self.act)
        self.norm2 = (1 + 0.1 * torch.randn(m.hidden, generator=gen)).to(device, self.act)
        half = m.head_dim // 2
        inv = 1.0 / (m.rope_theta ** (torch.arange(0, half, dtype=torch.float32) / half))
        ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(device, self.act), ang.sin().to(device, self.act)
        self.k_cache = torch.zeros(1, m.kv_heads, max_len, m.head_dim, device=device, dtype=self.act)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.max_len = max_len

    def _lin(self, lin, x):
        return lin(x, self.impl).to(self.act)

    def _norm(self, x, weight):
        import torch
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.m.rms_eps).to(x.dtype) * weight

    def _rope(self, t, pos):
        c, s = self.cos.index_select(0, pos)[:, None, :], self.sin.index_select(0, pos)[:, None, :]
        a, b = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]
        import torch
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)

    def forward(self, h, pos, decode: bool):
        """h [T, hidden]; pos [T] long on the device (absolute positions)."""
        import torch
        import torch.nn.functional as F
        m = self.m
        T = h.shape[0]
        qkv = self._lin(self.qkv, self._norm(h, self.norm1))
        q, k, v = qkv.split([m.q_width, m.kv_width, m.kv_width], dim=-1)
        q = self._rope(q.reshape(T, m.heads, m.head_dim), pos)
        k = self._rope(k.reshape(T, m.kv_heads, m.head_dim), pos)
        v = v.reshape(T, m.kv_heads, m.head_dim)
        self.k_cache.index_copy_(2, pos, k.transpose(0, 1).unsqueeze(0))
        self.v_cache.index_copy_(2, pos, v.transpose(0, 1).unsqueeze(0))
        qh = q.transpose(0, 1).unsqueeze(0)
        if decode:
            mask = (torch.arange(self.max_len, device=h.device) <= pos[-1]).view(1, 1, 1, -1)
            attn = F.scaled_dot_product_attention(qh, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True)
        else:
            attn = F.scaled_dot_product_attention(qh, self.k_cache[:, :, :T], self.v_cache[:, :, :T],
                                                  is_causal=True, enable_gqa=True)
        attn = attn.squeeze(0).transpose(0, 1).reshape(T, m.q_width)
        h = h + self._lin(self.o, attn)
        gu = self._lin(self.gate_up, self._norm(h, self.norm2))
        g, u = gu.chunk(2, dim=-1)
        return h + self._lin(self.down, F.silu(g) * u)

    def decode_graph(self, h_step, pos_step):
        """A CUDA graph of one decode step that writes its output back into `h_step` [1, hidden]
        (`pos_step` [1] its position): replays chain steps."""
        return _cuda_graph(lambda: [self.forward(h_step, pos_step, decode=True) for _ in range(2)],
                           lambda: h_step.copy_(self.forward(h_step, pos_step, decode=True)))


def layer_benchmark(model: str, impls: list[str], prompt: int = 2048, decode_steps: int = 32,
                    repeats: int = 3, seed: int = 0, progress=None) -> dict:
    """Prefill `prompt` tokens then `decode_steps` single-token steps through one decoder layer, per
    implementation; prefill eager, each decode step one CUDA-graph replay. Median of `repeats`."""
    import torch
    out = {"model": model, "prompt": prompt, "decode_steps": decode_steps, "repeats": repeats, "by_impl": {}}
    for impl in impls:
        layer = _Layer(model, impl, prompt + decode_steps, seed)
        gen = torch.Generator(device="cpu").manual_seed(seed + 1)
        h0 = torch.randn(prompt, layer.m.hidden, generator=gen).to("cuda", layer.act)
        pos_prefill = torch.arange(prompt, device="cuda")
        pos_step = torch.zeros(1, dtype=torch.long, device="cuda")
        h_step = torch.zeros(1, layer.m.hidden, device="cuda", dtype=layer.act)
        # warm-up (compilation, heuristics), then capture one decode step
        h = layer.forward(h0, pos_prefill, decode=False)
        h_step.copy_(h[-1:])
        pos_step.fill_(prompt)
        graph = layer.decode_graph(h_step, pos_step)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        runs = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            ev[0].record()
            h = layer.forward(h0, pos_prefill, decode=False)
            ev[1].record()
            h_step.copy_(h[-1:])
            for step in range(decode_steps):
                pos_step.fill_(prompt + step)
                graph.replay()
            ev[2].record()
            ev[2].synchronize()
            runs.append({"prefill_ms": ev[0].elapsed_time(ev[1]), "decode_ms": ev[1].elapsed_time(ev[2]),
                         "total_ms": ev[0].elapsed_time(ev[2])})
        best = sorted(runs, key=lambda r: r["total_ms"])[len(runs) // 2]
        out["by_impl"][impl] = {**best, "runs": runs, "finite": bool(torch.isfinite(h_step.float()).all())}
        del graph, layer
        torch.cuda.empty_cache()
        if progress:
            progress(impl)
    base = out["by_impl"].get("layercast")
    if base:
        for impl, r in out["by_impl"].items():
            r["speedup_vs_layercast"] = base["total_ms"] / r["total_ms"]
    return out


# --- the whole benchmark --------------------------------------------------------------------------

def time_case(impl: str, lin_copies: list, x, repeats: int) -> dict:
    """Time of one call of `impl` on x, rotating over the weight copies (one CUDA graph)."""
    inner = max(len(lin_copies), 1 if x.shape[0] > 64 else 10)
    calls = [(lambda lin=lin_copies[i % len(lin_copies)]: lin(x, impl)) for i in range(inner)]
    return time_graph(calls, repeats)


def run_determinism(model: str = "llama-3.1-8b", batches: Optional[list[int]] = None, repeats: int = 50,
                    impls: Optional[list[str]] = None, decode_tokens=DECODE_TOKENS,
                    prefill_tokens=PREFILL_TOKENS, layer: bool = True, seed: int = 0,
                    reference: bool = True, timing: bool = True, roles: Optional[list[str]] = None,
                    progress: Optional[Callable[[str], None]] = None, command: str = "") -> dict:
    """Bits and speed of every implementation on every projection of `model` (see module doc)."""
    from profiler.errors import EnvironmentProblem
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("smlens bench determinism needs torch and triton: pip install 'smlens[gpu]'") from None
    from profiler.workloads.deterministic import kernels as det
    if not torch.cuda.is_available():
        raise EnvironmentProblem("smlens bench determinism needs a CUDA GPU (torch.cuda.is_available() is False)")
    det._need_gpu_stack()
    impls = list(impls or det.IMPLS)
    batches = batches or parse_batches(DEFAULT_BATCHES)
    say = progress or (lambda _m: None)
    shapes = [s for s in model_shapes(model) if not roles or s.role in roles]
    result = {"schema": SCHEMA, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "env": versions(), "model": model, "chain_k": det.CHAIN_K,
              "batches": [min(batches), max(batches), len(batches)], "repeats": repeats, "seed": seed,
              "impls": {i: det.IMPL_TITLES[i] for i in impls}, "shapes": [], "bits": [], "timing": []}
    max_batch = max(max(batches), max(prefill_tokens, default=1), max(decode_tokens, default=1))
    for case in shapes:
        inp = Inputs(case, max_batch, seed)
        lin = det.Linear(inp.w)
        result["shapes"].append({"role": case.role, "N": case.N, "K": case.K, **inp.digests,
                                 "chains": det.chain_count(case.K)})
        for impl in impls:
            fn = impl_call(impl, lin)
            say(f"{case.role} {impl}: bits")
            entry = {"impl": impl, "role": case.role, "N": case.N, "K": case.K}
            entry["batch_invariance"] = batch_invariance(fn, inp.x, batches)
            entry["run_to_run"] = [run_to_run(fn, inp.x[:m], repeats) for m in (16, 128) if m <= max_batch]
            if reference and impl == "det":
                say(f"{case.role} {impl}: CPU reference")
                entry["reference"] = reference_check(fn, inp.x, inp.w, rows=2,
                                                     columns=reference_columns(case.N),
                                                     Ms=[m for m in (1, 2, 16, 17, 256) if m <= max_batch])
            result["bits"].append(entry)
            torch.cuda.empty_cache()
        if timing:
            copies = max(1, math.ceil(L2_ROTATE_BYTES / (case.N * case.K * 2)) + 1)
            lins = [lin] + [det.Linear(inp.w.clone()) for _ in range(copies - 1)]
            for M in list(decode_tokens) + list(prefill_tokens):
                x = inp.x[:M].contiguous()
                row = {"role": case.role, "M": M, "N": case.N, "K": case.K,
                       "weight_roofline_us": weight_roofline_us(case.N, case.K), "by_impl": {}}
                for impl in impls:
                    say(f"{case.role} M={M} {impl}: time")
                    use = lins if M <= 64 else lins[:1]
                    t = time_case(impl, use, x, repeats if M <= 64 else max(5, repeats // 5))
                    t["tflops"] = 2.0 * M * case.N * case.K / (t["median_us"] * 1e-6) / 1e12
                    t["weight_roofline_share"] = row["weight_roofline_us"] / t["median_us"]
                    row["by_impl"][impl] = t
                if "det" in row["by_impl"]:
                    d = row["by_impl"]["det"]["median_us"]
                    row["det_speedup"] = {b: row["by_impl"][b]["median_us"] / d for b in row["by_impl"] if b != "det"}
                result["timing"].append(row)
            del lins
        del inp, lin
        torch.cuda.empty_cache()
    if layer:
        say("decoder layer")
        result["layer"] = layer_benchmark(model, impls, seed=seed,
                                          progress=lambda i: say(f"decoder layer: {i} done"))
    result["targets"] = evaluate_targets(result)
    return result


# --- targets, comparison, rendering -------------------------------------------------------------

def evaluate_targets(result: dict) -> list[dict]:
    """The issue's speed targets, each with its measured value and a pass flag."""
    out = []
    for row in result.get("timing", []):
        sp = row.get("det_speedup", {})
        if row["M"] <= 64:
            if "layercast" in sp:
                out.append({"target": "decode >= 3x LayerCast", "role": row["role"], "M": row["M"],
                            "value": sp["layercast"], "pass": sp["layercast"] >= 3.0})
            if "cublas_bf16" in sp:
                out.append({"target": "decode within 1.5x cuBLAS bf16", "role": row["role"], "M": row["M"],
                            "value": 1.0 / sp["cublas_bf16"], "pass": 1.0 / sp["cublas_bf16"] <= 1.5})
        elif "layercast" in sp:
            out.append({"target": "prefill >= LayerCast", "role": row["role"], "M": row["M"],
                        "value": sp["layercast"], "pass": sp["layercast"] >= 1.0})
    lay = result.get("layer", {}).get("by_impl", {})
    if "det" in lay and "speedup_vs_layercast" in lay["det"]:
        v = lay["det"]["speedup_vs_layercast"]
        out.append({"target": "decoder layer >= 1.17x LayerCast", "role": "layer", "M": None,
                    "value": v, "pass": v >= 1.17})
    return out


def load_result(path) -> dict:
    from profiler.errors import BadInput
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadInput(f"{p}: not a determinism result ({err.__class__.__name__}); "
                       "write one with `smlens bench determinism --out FILE`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInput(f"{p}: not a determinism result (schema {SCHEMA!r} expected); "
                       "write one with `smlens bench determinism --out FILE`")
    return data


def _bits_key(entry: dict) -> tuple:
    return (entry["impl"], entry["role"], entry["N"], entry["K"])


def compare_results(a: dict, b: dict) -> dict:
    """Did two runs (two GPUs, two software stacks) give the same bits? Per implementation and
    shape: same inputs (their digests), then the output digests (row 0 at batch 1, the whole
    output at the largest batch, the run-to-run digests)."""
    rows = []
    inputs_a = {(s["role"], s["N"], s["K"]): s for s in a.get("shapes", [])}
    inputs_b = {(s["role"], s["N"], s["K"]): s for s in b.get("shapes", [])}
    bits_b = {_bits_key(e): e for e in b.get("bits", [])}
    for ea in a.get("bits", []):
        key = _bits_key(ea)
        eb = bits_b.get(key)
        shape = (ea["role"], ea["N"], ea["K"])
        row = {"impl": ea["impl"], "role": ea["role"], "N": ea["N"], "K": ea["K"]}
        if eb is None:
            row.update(status="missing", detail="not in the second file")
            rows.append(row)
            continue
        sa, sb = inputs_a.get(shape, {}), inputs_b.get(shape, {})
        if (sa.get("x_sha256"), sa.get("w_sha256")) != (sb.get("x_sha256"), sb.get("w_sha256")):
            row.update(status="inputs differ", detail="the two runs used different inputs (seed or torch RNG)")
            rows.append(row)
            continue
        checks = []
        ba, bb = ea["batch_invariance"], eb["batch_invariance"]
        for name in ("row0_sha256_b1", "full_sha256_bmax"):
            if ba.get(name) is not None and bb.get(name) is not None and ba["max_batch"] == bb["max_batch"]:
                checks.append((name, ba[name] == bb[name]))
        ra = {r["M"]: r.get("sha256") for r in ea.get("run_to_run", [])}
        rb = {r["M"]: r.get("sha256") for r in eb.get("run_to_run", [])}
        for M in sorted(set(ra) & set(rb)):
            if ra[M] is not None and rb[M] is not None:
                checks.append((f"run_sha256_M{M}", ra[M] == rb[M]))
        if not checks:
            row.update(status="not comparable", detail="no digest in common")
        else:
            differ = [n for n, same in checks if not same]
            row.update(status="same bits" if not differ else "different bits",
                       detail=", ".join(differ) if differ else f"{len(checks)} digests equal")
        rows.append(row)
    same_by_impl: dict[str, bool] = {}
    for r in rows:
        if r["status"] in ("same bits", "different bits"):
            same_by_impl[r["impl"]] = same_by_impl.get(r["impl"], True) and r["status"] == "same bits"
    return {"a": {"gpu": a.get("env", {}).get("gpu"), "created": a.get("created")},
            "b": {"gpu": b.get("env", {}).get("gpu"), "created": b.get("created")},
            "rows": rows, "same_bits_by_impl": same_by_impl}


# --- terminal output ----------------------------------------------------------------------------

_SHORT = {"det": "det", "layercast": "LayerCast", "cublas_bf16": "cuBLAS", "bi_tc": "BI-TC"}


def render_result(result: dict, console=None) -> None:
    """Bits, speed and targets of one run as rich tables that fit a terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    con = console or Console()
    env = result.get("env", {})
    con.print(f"[bold]{result.get('model')}[/] on {env.get('gpu', '?')} (driver {env.get('driver', '?')}, "
              f"torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, CUDA {env.get('cuda_runtime', '?')}); "
              f"chain {result.get('chain_k')} k, batches {result['batches'][0]}..{result['batches'][1]}, "
              f"{result.get('repeats')} repeats")
    bits = Table(title="bits: batch sizes that change row 0 / any row; distinct digests over the repeats",
                 title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("impl", "role", "row 0", "any row", "digests", "CPU reference"):
        bits.add_column(col, justify="left" if col in ("impl", "role") else "right", no_wrap=True)
    for e in result.get("bits", []):
        bi = e["batch_invariance"]
        r2r = "/".join(str(r["distinct"]) for r in e.get("run_to_run", [])) or "-"
        ref = e.get("reference")
        ref_cell = "-" if ref is None else ("equal" if ref["equal"] else f"[red]{ref['mismatches']} differ[/]")
        colour = "green" if bi["row0_changed"] == 0 else "yellow"
        bits.add_row(_SHORT.get(e["impl"], e["impl"]), e["role"].replace("_proj", ""),
                     f"[{colour}]{bi['row0_changed']}/{bi['batches']}[/]",
                     f"{bi['rows_changed']}/{bi['batches']}", r2r, ref_cell)
    con.print(bits)
    if result.get("timing"):
        impls = list(result.get("impls", {}))
        speed = Table(title="median us per call (det's speedup over each)", title_justify="left",
                      box=box.SIMPLE_HEAD)
        speed.add_column("role", no_wrap=True)
        speed.add_column("M", justify="right")
        for i in impls:
            speed.add_column(_SHORT.get(i, i), justify="right", no_wrap=True)
        speed.add_column("roof", justify="right")
        for row in result["timing"]:
            cells = []
            for i in impls:
                t = row["by_impl"].get(i)
                if t is None:
                    cells.append("-")
                    continue
                sp = row.get("det_speedup", {}).get(i)
                cells.append(f"{t['median_us']:.1f}" + (f" {sp:.2f}x" if sp else ""))
            d = row["by_impl"].get("det")
            # share of the bf16 weight-read floor: meaningful where decode is bound by it
            share = f"{100 * d['weight_roofline_share']:.0f}%" if d and row["M"] <= 64 else "-"
            speed.add_row(row["role"].replace("_proj", ""), str(row["M"]), *cells, share)
        con.print(speed)
        con.print("roof: det's share of the time to read the bf16 weights once at 4.8 TB/s")
    lay = result.get("layer", {}).get("by_impl", {})
    if lay:
        t = Table(title=f"decoder layer: prefill {result['layer']['prompt']} + {result['layer']['decode_steps']} "
                        "decode steps (ms)", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("impl", "prefill", "decode", "total", "vs LayerCast"):
            t.add_column(col, justify="left" if col == "impl" else "right")
        for impl, r in lay.items():
            t.add_row(impl, f"{r['prefill_ms']:.2f}", f"{r['decode_ms']:.2f}", f"{r['total_ms']:.2f}",
                      f"{r.get('speedup_vs_layercast', float('nan')):.2f}x")
        con.print(t)
    targets = result.get("targets", [])
    if targets:
        t = Table(title="targets", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("target", "role", "M", "value", ""):
            t.add_column(col, justify="left" if col in ("target", "role") else "right")
        for g in targets:
            t.add_row(g["target"], g["role"].replace("_proj", ""), "" if g["M"] is None else str(g["M"]),
                      f"{g['value']:.2f}",
                      "[green]pass[/]" if g["pass"] else "[red]miss[/]")
        con.print(t)


def render_comparison(cmp: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    con = console or Console()
    con.print(f"A: {cmp['a']['gpu']} ({cmp['a']['created']})   B: {cmp['b']['gpu']} ({cmp['b']['created']})")
    t = Table()
    for col in ("impl", "role", "N", "K", "bits", "detail"):
        t.add_column(col, justify="right" if col in ("N", "K") else "left", no_wrap=col != "detail")
    colour = {"same bits": "green", "different bits": "red"}
    for r in cmp["rows"]:
        c = colour.get(r["status"], "yellow")
        t.add_row(r["impl"], r["role"], str(r["N"]), str(r["K"]), f"[{c}]{r['status']}[/]", r["detail"])
    con.print(t)
    for impl, same in cmp["same_bits_by_impl"].items():
        con.print(f"{impl}: " + ("[green]same bits on both[/]" if same else "[red]bits differ[/]"))
