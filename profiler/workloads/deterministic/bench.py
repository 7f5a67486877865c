"""The determinism benchmark: bits (batch invariance, run to run, equality with the CPU emulation)
and speed of the deterministic GEMMs against their baselines, on a model's projection shapes, and
optionally batch-invariant generation end to end (generate.py).

`run_determinism` does everything on one device and returns a JSON-able dict (digests, versions,
timings); `compare_results` says whether two such files (two GPUs) gave the same bits. On a CPU
(tests, tiny shapes) det runs as its exact emulation and the baselines as torch's CPU kernels.

Timing: on a GPU, CUDA events around CUDA-graph replays of `inner` calls (launch gaps out), median
over `repeats` replays. Decode shapes rotate over enough weight copies that they do not sit in L2:
in a real model every layer's weights are new to the cache.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from profiler.workloads.deterministic.measure import (bitwise_equal, elapsed_ms, is_cuda, sha256_bytes,
                                                      summarize, tensor_digest, time_calls)

SCHEMA = "smlens.bench.determinism/1"
DRAM_PEAK_BYTES_PER_S = 4.8e12     # H200 (docs/NCU_ON_H200.md: implied dram__throughput peak)
L2_ROTATE_BYTES = 150e6            # rotate weight copies until this many bytes are in play
DEFAULT_BATCHES = "1..256"
DECODE_TOKENS = (1, 8, 16)
PREFILL_TOKENS = (2048,)
RUN_TO_RUN_M = (16, 128)
REFERENCE_M = (1, 2, 16, 17, 256)
EMULATE_M = (1, 2, 3, 8, 16, 17, 64, 256, 2048)   # every kernel and bucket edge
EMULATE_SAMPLES = 256


# --- small helpers that need no GPU -------------------------------------------------------------

MAX_BATCH = 65536


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
                out.update(range(lo, min(hi, MAX_BATCH + 1) + 1))  # more is refused below, not listed
            else:
                out.add(int(part))
        except ValueError:
            raise BadInput(f"--batches: cannot read {part!r}; write e.g. 1..256 or 1,2,4,8") from None
    if not out or min(out) < 1:
        raise BadInput("--batches needs positive batch sizes, e.g. 1..256")
    if max(out) > MAX_BATCH:
        raise BadInput(f"--batches: at most {MAX_BATCH}")
    return sorted(out)


def weight_roofline_us(N: int, K: int, weight_bytes: int = 2) -> float:
    """Time to read the 16-bit weights once at the DRAM peak: the decode floor."""
    return N * K * weight_bytes / DRAM_PEAK_BYTES_PER_S * 1e6


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
    from profiler.workloads.deterministic.cuda_gemm import nvcc_version
    env["nvcc"] = nvcc_version()          # builds det_sgemm.cu where kernels.py adopted it
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
    the device: x [max_batch, K] FP32 and W [N, K] bf16. Their digests go into the JSON."""

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
    bmax = max(batches)
    full = fn(x[:bmax])
    row0 = {}
    changed_row0, changed_any = [], []
    for b in batches:
        y = fn(x[:b])
        if not bitwise_equal(y[0], full[0]):
            changed_row0.append(b)
        if not bitwise_equal(y, full[:b]):
            changed_any.append(b)
        if b in (1, bmax):
            row0[b] = tensor_digest(y[0])
    return {"batches": len(batches), "max_batch": bmax,
            "row0_changed": len(changed_row0), "row0_changed_at": changed_row0[:32],
            "rows_changed": len(changed_any), "rows_changed_at": changed_any[:32],
            "invariant": not changed_row0 and not changed_any,
            "row0_sha256_b1": row0.get(1), "row0_sha256_bmax": row0.get(bmax),
            "full_sha256_bmax": tensor_digest(full)}


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


def sample_positions(rows: int, N: int, count: int, seed: int) -> list[tuple[int, int]]:
    """`count` output positions (m, n) spread over a rows x N output: half in rows 0 and 1 (checked
    at every batch size), half in any row; columns uniform over N, both ends included (the first
    and last column tiles)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    low = count // 2
    ms = np.concatenate([rng.integers(0, min(2, rows), low), rng.integers(0, rows, count - low)])
    ns = rng.integers(0, N, count)
    ns[:2] = (0, N - 1)
    return sorted(set(zip(ms.tolist(), ns.tolist())))


def emulation_check(fn, x, w, positions: list[tuple[int, int]], Ms: Iterable[int]) -> dict:
    """The bits of fn(x[:M]) at `positions` (m, n), for each M, against the CPU's exact emulation
    of the same order (reference.reference_pairs: one FMA chain per sampled output). A position
    is checked at every M above its row; the emulated value is the same for all (it does not
    depend on M)."""
    import numpy as np
    import torch
    from profiler.workloads.deterministic.reference import reference_pairs
    ms = torch.tensor([p[0] for p in positions])
    ns = torch.tensor([p[1] for p in positions])
    emulated = reference_pairs(x.index_select(0, ms.to(x.device)).cpu(), w.index_select(0, ns.to(w.device)).cpu())
    out = {"positions": len(positions), "K": int(x.shape[1]), "by_M": {}, "checked": 0,
           "emulated_sha256": sha256_bytes(emulated.tobytes())}
    for M in Ms:
        sel = (ms < M).nonzero().flatten()
        if not len(sel):
            continue
        y = fn(x[:M])
        got = y[ms[sel].to(y.device), ns[sel].to(y.device)].float().cpu().numpy()
        want = emulated[sel.numpy()]
        out["by_M"][str(M)] = int(np.count_nonzero(got.view(np.int32) != want.view(np.int32)))
        out["checked"] += len(sel)
    out["mismatches"] = sum(out["by_M"].values())
    out["equal"] = out["mismatches"] == 0 and out["checked"] > 0
    return out


def reference_check(fn, x, w, rows: int, columns: list[int], Ms: Iterable[int]) -> dict:
    """GPU bits of fn(x[:M])[:rows, columns] for each M against the exact CPU emulation."""
    res = emulation_check(fn, x, w, [(m, n) for m in range(rows) for n in columns], Ms)
    return {"rows": rows, "columns": len(columns), "K": res["K"], "by_M": res["by_M"],
            "mismatches": res["mismatches"], "equal": res["equal"]}


# --- one full decoder layer ---------------------------------------------------------------------

def layer_benchmark(model: str, impls: list[str], prompt: int = 2048, decode_steps: int = 32,
                    repeats: int = 3, seed: int = 0, device: str = "cuda", progress=None) -> dict:
    """Prefill `prompt` tokens then `decode_steps` single-token steps through one decoder layer
    (generate.Decoder, torch's attention), per implementation; prefill eager, each decode step one
    CUDA-graph replay on a GPU. Median of `repeats`."""
    import torch
    from profiler.workloads.deterministic.generate import Decoder, Weights
    from profiler.workloads.deterministic.measure import cuda_graph
    from profiler.workloads.models import get_model
    shape = get_model(model)
    weights = Weights(shape, layers=1, vocab=0, seed=seed, device=device)
    out = {"model": model, "prompt": prompt, "decode_steps": decode_steps, "repeats": repeats, "by_impl": {}}
    for impl in impls:
        dec = Decoder(weights, impl, batch=1, max_len=prompt + decode_steps)
        gen = torch.Generator(device="cpu").manual_seed(seed + 1)
        h0 = torch.randn(1, prompt, shape.hidden, generator=gen).to(device, dec.act)
        pos_prefill = torch.arange(prompt, device=device)
        pos_step = torch.full((1,), prompt, dtype=torch.long, device=device)
        h_step = torch.zeros(1, 1, shape.hidden, device=device, dtype=dec.act)

        def step():
            h_step.copy_(dec.hidden(h_step, pos_step, decode=True))

        # warm-up (compilation, heuristics), then one decode step as a graph where there is a GPU
        h_step.copy_(dec.hidden(h0, pos_prefill, decode=False)[:, -1:])
        replay = cuda_graph(lambda: [dec.hidden(h_step, pos_step, decode=True) for _ in range(2)], step).replay \
            if is_cuda(device) else step
        runs = []
        for _ in range(repeats):
            state = {}

            def prefill():
                state["h"] = dec.hidden(h0, pos_prefill, decode=False)

            def decode():
                h_step.copy_(state["h"][:, -1:])
                for i in range(decode_steps):
                    pos_step.fill_(prompt + i)
                    replay()

            prefill_ms = elapsed_ms(prefill, device)
            decode_ms = elapsed_ms(decode, device)
            runs.append({"prefill_ms": prefill_ms, "decode_ms": decode_ms, "total_ms": prefill_ms + decode_ms})
        best = sorted(runs, key=lambda r: r["total_ms"])[len(runs) // 2]
        out["by_impl"][impl] = {**best, "runs": runs, "finite": bool(torch.isfinite(h_step.float()).all())}
        del replay, dec
        if is_cuda(device):
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
    """Time of one call of `impl` on x, rotating over the weight copies (one CUDA graph on a GPU of
    10 calls at decode, where one call is a few microseconds)."""
    inner = max(len(lin_copies), 10 if x.shape[0] <= 64 and is_cuda(x.device) else 1)
    calls = [(lambda lin=lin_copies[i % len(lin_copies)]: lin(x, impl)) for i in range(inner)]
    return time_calls(calls, repeats, x.device)


def _need_device(device: str) -> None:
    from profiler.errors import EnvironmentProblem
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("smlens bench determinism needs torch and triton: pip install 'smlens[gpu]'") from None
    if is_cuda(device):
        if not torch.cuda.is_available():
            raise EnvironmentProblem("smlens bench determinism needs a CUDA GPU (torch.cuda.is_available() is False)")
        from profiler.workloads.deterministic.stack import need_gpu_stack
        need_gpu_stack()


def run_determinism(model: str = "llama-3.1-8b", batches: Optional[list[int]] = None, repeats: int = 50,
                    impls: Optional[list[str]] = None, decode_tokens=DECODE_TOKENS,
                    prefill_tokens=PREFILL_TOKENS, layer: bool = True, seed: int = 0,
                    bits: bool = True, reference: bool = True, timing: bool = True,
                    emulate: bool = False, emulate_m=EMULATE_M, generate: bool = False,
                    layer_options: Optional[dict] = None,
                    roles: Optional[list[str]] = None, device: str = "cuda",
                    progress: Optional[Callable[[str], None]] = None, command: str = "") -> dict:
    """Bits and speed of every implementation on every projection of `model` (see module doc);
    `emulate`: the CPU emulation of a sample of every projection's outputs at each M of
    `emulate_m`; `generate`: generate.compare_generation's defaults with these implementations;
    `layer_options`: layer_benchmark's sizes (tests run it small)."""
    _need_device(device)
    import torch
    from profiler.workloads.deterministic import kernels as det
    from profiler.workloads.deterministic.reference import CHAIN_K, chain_count
    impls = list(impls or det.IMPLS)
    batches = batches or parse_batches(DEFAULT_BATCHES)
    say = progress or (lambda _m: None)
    shapes = [s for s in model_shapes(model) if not roles or s.role in roles]
    result = {"schema": SCHEMA, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "env": versions(), "device": str(device), "model": model, "chain_k": CHAIN_K,
              "batches": [min(batches), max(batches), len(batches)], "repeats": repeats, "seed": seed,
              "impls": {i: det.IMPL_TITLES[i] for i in impls}, "shapes": [], "bits": [], "timing": []}
    m_lists = [batches, prefill_tokens, decode_tokens] + ([emulate_m] if emulate else [])
    max_batch = max(max(ms, default=1) for ms in m_lists)

    def free():
        if is_cuda(device):
            torch.cuda.empty_cache()

    for case in shapes:
        inp = Inputs(case, max_batch, seed, device)
        lin = det.Linear(inp.w)
        result["shapes"].append({"role": case.role, "N": case.N, "K": case.K, **inp.digests,
                                 "chains": chain_count(case.K)})
        for impl in impls if bits else []:
            fn = impl_call(impl, lin)
            say(f"{case.role} {impl}: bits")
            entry = {"impl": impl, "role": case.role, "N": case.N, "K": case.K}
            entry["batch_invariance"] = batch_invariance(fn, inp.x, batches)
            entry["run_to_run"] = [run_to_run(fn, inp.x[:m], repeats) for m in RUN_TO_RUN_M if m <= max_batch]
            if reference and impl == "det":
                say(f"{case.role} {impl}: CPU reference")
                entry["reference"] = reference_check(fn, inp.x, inp.w, rows=2, columns=reference_columns(case.N),
                                                     Ms=[m for m in REFERENCE_M if m <= max_batch])
            result["bits"].append(entry)
            free()
        if emulate and "det" in impls:
            say(f"{case.role} det: CPU emulation of {EMULATE_SAMPLES} outputs")
            positions = sample_positions(max(emulate_m), case.N, EMULATE_SAMPLES, seed + case.N + case.K)
            result.setdefault("emulation", []).append(
                {"role": case.role, "N": case.N, "K": case.K,
                 **emulation_check(impl_call("det", lin), inp.x, inp.w, positions, emulate_m)})
        if timing:
            copies = max(1, math.ceil(L2_ROTATE_BYTES / (case.N * case.K * 2)) + 1) if is_cuda(device) else 1
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
        free()
    if layer:
        say("decoder layer")
        result["layer"] = layer_benchmark(model, impls, seed=seed, device=device, **(layer_options or {}),
                                          progress=lambda i: say(f"decoder layer: {i} done"))
    if generate:
        from profiler.workloads.deterministic.generate import GENERATE_IMPLS, compare_generation
        result["generation"] = compare_generation(model, [i for i in GENERATE_IMPLS if i in impls], seed=seed,
                                                  device=device, progress=say)
    result["targets"] = evaluate_targets(result)
    return result


# --- targets and comparison -----------------------------------------------------------------------

def evaluate_targets(result: dict) -> list[dict]:
    """The issue's targets, each with its measured value and a pass flag."""
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
    gen = result.get("generation", {}).get("by_impl", {})
    if "det" in gen:
        rows = gen["det"]["by_batch"]
        same = sum(1 for r in rows.values() if r["logits_identical"] and r["tokens_identical"])
        # value: the share of batch sizes whose logits and tokens equal those of the prompt alone
        out.append({"target": "det generation batch-invariant", "role": "generation", "M": None,
                    "value": same / len(rows), "pass": same == len(rows)})
    for e in result.get("emulation", []):
        # value: the share of sampled outputs equal to the CPU emulation, over every M
        out.append({"target": "det = CPU emulation", "role": e["role"], "M": None,
                    "value": 1.0 - e["mismatches"] / max(e["checked"], 1), "pass": e["equal"]})
    return out


def load_result(path) -> dict:
    from profiler.errors import BadInput
    from profiler.option_checks import check_regular_file
    p = Path(path)
    check_regular_file(p, str(p))
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


def _digest_checks(ea: dict, eb: dict, emu_a: Optional[dict], emu_b: Optional[dict]) -> list[tuple[str, bool]]:
    """(name, equal) for each output digest both runs recorded for one implementation and shape."""
    checks = []
    ba, bb = ea.get("batch_invariance", {}), eb.get("batch_invariance", {})
    for name in ("row0_sha256_b1", "full_sha256_bmax"):
        if ba.get(name) is not None and bb.get(name) is not None and ba.get("max_batch") == bb.get("max_batch"):
            checks.append((name, ba[name] == bb[name]))
    ra = {r["M"]: r.get("sha256") for r in ea.get("run_to_run", [])}
    rb = {r["M"]: r.get("sha256") for r in eb.get("run_to_run", [])}
    for M in sorted(set(ra) & set(rb)):
        if ra[M] is not None and rb[M] is not None:
            checks.append((f"run_sha256_M{M}", ra[M] == rb[M]))
    if emu_a and emu_b and emu_a.get("emulated_sha256") == emu_b.get("emulated_sha256"):
        # the same sampled outputs on both: each run's bits against the same emulated values
        checks.append(("emulated_samples", emu_a["equal"] and emu_b["equal"]))
    return checks


def compare_results(a: dict, b: dict) -> dict:
    """Did two runs (two GPUs, two software stacks) give the same bits? Per implementation and
    shape: same inputs (their digests), then the output digests (row 0 at batch 1, the whole
    output at the largest batch, the run-to-run digests, the emulated samples). `differing` names
    every case whose bits differ, `comparable` counts the cases that could be compared."""
    rows = []
    inputs_a = {(s["role"], s["N"], s["K"]): s for s in a.get("shapes", [])}
    inputs_b = {(s["role"], s["N"], s["K"]): s for s in b.get("shapes", [])}
    bits_b = {_bits_key(e): e for e in b.get("bits", [])}
    emu_a = {(e["role"], e["N"], e["K"]): e for e in a.get("emulation", [])}
    emu_b = {(e["role"], e["N"], e["K"]): e for e in b.get("emulation", [])}
    for ea in a.get("bits", []):
        key = _bits_key(ea)
        eb = bits_b.get(key)
        shape = (ea["role"], ea["N"], ea["K"])
        row = {"impl": ea["impl"], "role": ea["role"], "N": ea["N"], "K": ea["K"]}
        sa, sb = inputs_a.get(shape, {}), inputs_b.get(shape, {})
        if eb is None:
            row.update(status="missing", detail="not in the second file")
        elif (sa.get("x_sha256"), sa.get("w_sha256")) != (sb.get("x_sha256"), sb.get("w_sha256")):
            row.update(status="inputs differ", detail="the two runs used different inputs (seed or torch RNG)")
        else:
            det_emulation = ea["impl"] == "det"
            checks = _digest_checks(ea, eb, emu_a.get(shape) if det_emulation else None,
                                    emu_b.get(shape) if det_emulation else None)
            differ = [n for n, same in checks if not same]
            if not checks:
                row.update(status="not comparable", detail="no digest in common")
            else:
                row.update(status="same bits" if not differ else "different bits",
                           detail=", ".join(differ) if differ else f"{len(checks)} digests equal")
        rows.append(row)
    same_by_impl: dict[str, bool] = {}
    for r in rows:
        if r["status"] in ("same bits", "different bits"):
            same_by_impl[r["impl"]] = same_by_impl.get(r["impl"], True) and r["status"] == "same bits"
    differing = [f"{r['impl']} {r['role']} {r['N']}x{r['K']}: {r['detail']}" for r in rows
                 if r["status"] == "different bits"]
    return {"a": {"gpu": a.get("env", {}).get("gpu"), "created": a.get("created")},
            "b": {"gpu": b.get("env", {}).get("gpu"), "created": b.get("created")},
            "rows": rows, "same_bits_by_impl": same_by_impl, "differing": differing,
            "comparable": sum(1 for r in rows if r["status"] in ("same bits", "different bits"))}


def compare_exit_code(cmp: dict, impls: Iterable[str] = ("det",)) -> int:
    """0: every case of `impls` has the same bits; 1: some differ; 2: none differs but some (or
    all) could not be compared: what was not judged is not "the same"."""
    wanted = set(impls)
    rows = [r for r in cmp["rows"] if r["impl"] in wanted]
    judged = [r for r in rows if r["status"] in ("same bits", "different bits")]
    if any(r["status"] == "different bits" for r in judged):
        return 1
    return 0 if judged and len(judged) == len(rows) else 2
