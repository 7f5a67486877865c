"""Batch-invariant generation, end to end: does a prompt's output depend on the batch it shares?

`Decoder` is a Llama-style decoder with random weights and a model's layer shapes (embedding,
`layers` decoder layers, final norm, LM head) over a batch of sequences with a static KV cache.
Every projection runs through one implementation (kernels.Linear); with `attention="invariant"` the
norms and attention are the batch-invariant kernels of invariant_ops.py, with `"sdpa"` torch's
RMSNorm arithmetic and scaled_dot_product_attention. The FP32 implementations (det, LayerCast)
carry FP32 activations, cuBLAS bf16 carries bf16.

`compare_generation` greedy-decodes prompt 0 alone and inside batches of other prompts, with each
implementation, and compares prompt 0's logits bit for bit and its tokens with those it got alone.
The deterministic path (det projections, invariant norm and attention) should give the same bits
at every batch size; cuBLAS bf16 and LayerCast with torch's attention are the usual stacks.

Timing: the prefill (eager, its second run: the first compiles) and each decode step (a CUDA-graph
replay on a GPU, eager on a CPU).
"""
from __future__ import annotations

import math
import statistics
from typing import Callable, Optional

from profiler.workloads.deterministic import invariant_ops
from profiler.workloads.deterministic.kernels import Linear
from profiler.workloads.deterministic.measure import cuda_graph, elapsed_ms, is_cuda, tensor_digest
from profiler.workloads.deterministic.stack import torch

FP32_ACTIVATION_IMPLS = ("det", "layercast", "portable")
GENERATE_IMPLS = ("det", "cublas_bf16", "layercast")
GENERATE_BATCHES = (1, 2, 8, 32)
DEFAULT_VOCAB = 32768     # Llama-3.1's is 128256; a smaller random head keeps the layers the main cost


class Weights:
    """Random bf16 weights with `shape`'s layer shapes, drawn on the device from a seed and shared by
    every implementation (det keeps its own transposed copy, see kernels.Linear). Projections are
    scaled by 1/sqrt(K) so activations stay O(1) through the layers. vocab=0: no embedding or head."""

    def __init__(self, shape, layers: int, vocab: int, seed: int, device: str):
        gen = torch.Generator(device=device).manual_seed(seed)
        bf16 = torch.bfloat16

        def proj(n: int, k: int) -> Linear:
            return Linear((torch.randn(n, k, generator=gen, device=device) / math.sqrt(k)).to(bf16))

        def norm():
            return (1 + 0.1 * torch.randn(shape.hidden, generator=gen, device=device)).to(bf16)

        self.shape, self.vocab, self.device = shape, vocab, device
        self.layers = [{"norm_attn": norm(), "qkv": proj(shape.qkv_width, shape.hidden),
                        "o": proj(shape.hidden, shape.q_width), "norm_mlp": norm(),
                        "gate_up": proj(2 * shape.mlp, shape.hidden), "down": proj(shape.hidden, shape.mlp)}
                       for _ in range(layers)]
        if vocab:
            self.embed = torch.randn(vocab, shape.hidden, generator=gen, device=device).to(bf16)
            self.norm_final = norm()
            self.lm_head = proj(vocab, shape.hidden)


class Decoder:
    """The layers of `weights` over `batch` sequences of up to `max_len` positions (module doc)."""

    def __init__(self, weights: Weights, impl: str, batch: int, max_len: int, attention: str = "sdpa"):
        if attention not in ("sdpa", "invariant"):
            raise ValueError(f"attention must be 'sdpa' or 'invariant', got {attention!r}")
        m = self.m = weights.shape
        self.w, self.impl, self.max_len = weights, impl, max_len
        self.invariant = attention == "invariant"
        self.act = torch.float32 if impl in FP32_ACTIVATION_IMPLS else torch.bfloat16
        device = weights.device
        cache = (batch, m.kv_heads, max_len, m.head_dim)
        self.k_cache = [torch.zeros(cache, device=device, dtype=self.act) for _ in weights.layers]
        self.v_cache = [torch.zeros(cache, device=device, dtype=self.act) for _ in weights.layers]
        half = m.head_dim // 2
        inv = 1.0 / (m.rope_theta ** (torch.arange(0, half, dtype=torch.float32) / half))
        ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(device, self.act), ang.sin().to(device, self.act)
        self.positions = torch.arange(max_len, device=device)

    def _lin(self, lin: Linear, x):
        return lin(x, self.impl).to(self.act)

    def _norm(self, x, weight):
        if self.invariant:
            return invariant_ops.bi_rms_norm(x, weight, self.m.rms_eps).to(self.act)
        w = weight.to(self.act)
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.m.rms_eps).to(x.dtype) * w

    def _rope(self, t, pos):
        c, s = self.cos.index_select(0, pos)[:, None, :], self.sin.index_select(0, pos)[:, None, :]
        a, b = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)

    def _attention(self, i: int, q, seq, pos, batch: int, decode: bool):
        """q [T, heads, D] of T = batch x S tokens, token t of sequence seq[t] at position pos[t]."""
        import torch.nn.functional as F
        m = self.m
        T = q.shape[0]
        if self.invariant:
            return invariant_ops.bi_attention(q, self.k_cache[i], self.v_cache[i], seq, pos).to(self.act)
        qh = q.reshape(batch, T // batch, m.heads, m.head_dim).transpose(1, 2)
        if decode:   # one token per sequence against the whole static cache, masked past its position
            mask = (self.positions[None, :] <= pos[:, None]).view(batch, 1, 1, self.max_len)
            out = F.scaled_dot_product_attention(qh, self.k_cache[i], self.v_cache[i], attn_mask=mask,
                                                 enable_gqa=True)
        else:        # a prefill from position 0
            S = T // batch
            out = F.scaled_dot_product_attention(qh, self.k_cache[i][:, :, :S], self.v_cache[i][:, :, :S],
                                                 is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(T, m.heads, m.head_dim)

    def hidden(self, x, pos, decode: bool):
        """x [B, S, hidden] at positions pos [B * S] (long, token-major) through every layer."""
        m = self.m
        B, S, _ = x.shape
        T = B * S
        seq = torch.arange(B, device=x.device).repeat_interleave(S)
        h = x.reshape(T, m.hidden).to(self.act)
        for i, lw in enumerate(self.w.layers):
            qkv = self._lin(lw["qkv"], self._norm(h, lw["norm_attn"]))
            q, k, v = qkv.split([m.q_width, m.kv_width, m.kv_width], dim=-1)
            q = self._rope(q.reshape(T, m.heads, m.head_dim), pos)
            k = self._rope(k.reshape(T, m.kv_heads, m.head_dim), pos)
            self.k_cache[i][seq, :, pos] = k
            self.v_cache[i][seq, :, pos] = v.reshape(T, m.kv_heads, m.head_dim)
            attn = self._attention(i, q, seq, pos, B, decode)
            h = h + self._lin(lw["o"], attn.reshape(T, m.q_width))
            g, u = self._lin(lw["gate_up"], self._norm(h, lw["norm_mlp"])).chunk(2, dim=-1)
            h = h + self._lin(lw["down"], torch.nn.functional.silu(g) * u)
        return h.reshape(B, S, m.hidden)

    def embed(self, tokens):
        return self.w.embed[tokens].to(self.act)

    def logits(self, h):
        """FP32 logits of h [B, hidden]."""
        return self.w.lm_head(self._norm(h, self.w.norm_final), self.impl).float()


def generate(weights: Weights, impl: str, prompts, new_tokens: int, attention: str) -> dict:
    """Greedy decoding of `prompts` [B, S] (long, CPU) for `new_tokens` tokens. Returns prompt 0's
    logits at each new token [new_tokens, vocab] (FP32, CPU), every sequence's tokens, the prefill
    time and each decode step's time (ms)."""
    device = weights.device
    B, S = prompts.shape
    dec = Decoder(weights, impl, B, S + new_tokens, attention)
    pos = torch.arange(S, device=device).repeat(B)
    x = dec.embed(prompts.to(device))
    out = {}
    with torch.inference_mode():
        def prefill():
            out["h"] = dec.hidden(x, pos, decode=False)
        elapsed_ms(prefill, device)           # compiles and warms; the second run is timed
        prefill_ms = elapsed_ms(prefill, device)
        logits = dec.logits(out["h"][:, -1])
        tok = torch.zeros(B, dtype=torch.long, device=device)
        step_pos = torch.zeros(B, dtype=torch.long, device=device)
        step_logits = torch.zeros(B, weights.vocab, device=device)

        def step():
            h = dec.hidden(dec.embed(tok[:, None]), step_pos, decode=True)
            step_logits.copy_(dec.logits(h[:, 0]))

        rows, tokens, step_ms = [logits[0].cpu()], [logits.argmax(-1)], []
        graph = None
        for i in range(1, new_tokens):
            tok.copy_(tokens[-1])
            step_pos.fill_(S + i - 1)
            if graph is None and is_cuda(device):  # its warm-up runs this very step: the same cache entries
                graph = cuda_graph(step, step)
            step_ms.append(elapsed_ms(graph.replay if graph is not None else step, device))
            rows.append(step_logits[0].cpu())
            tokens.append(step_logits.argmax(-1))
        del graph
    return {"logits": torch.stack(rows), "tokens": torch.stack(tokens, dim=1).cpu(),
            "prefill_ms": prefill_ms, "step_ms": step_ms}


def compare_generation(model: str = "llama-3.1-8b", impls=GENERATE_IMPLS, batches=GENERATE_BATCHES,
                       layers: int = 4, prompt_len: int = 64, new_tokens: int = 16,
                       vocab: int = DEFAULT_VOCAB, seed: int = 0, device: str = "cuda",
                       progress: Optional[Callable[[str], None]] = None) -> dict:
    """Prompt 0 alone and inside batches of `batches` (other prompts after it), per implementation:
    are its tokens and logits identical to those it got alone? With the time per decode step and
    per token. det runs the invariant norm and attention, the others torch's."""
    from profiler.workloads.models import get_model
    shape = get_model(model)
    say = progress or (lambda _m: None)
    batches = sorted(set(batches) | {1})
    gen = torch.Generator(device="cpu").manual_seed(seed + 7)
    prompts = torch.randint(0, vocab, (max(batches), prompt_len), generator=gen)
    say("generation: weights")
    weights = Weights(shape, layers, vocab, seed, device)
    result = {"model": shape.id, "layers": layers, "vocab": vocab, "prompt": prompt_len, "new_tokens": new_tokens,
              "batches": batches, "prompts_sha256": tensor_digest(prompts), "by_impl": {}}
    for impl in impls:
        att = "invariant" if impl == "det" else "sdpa"
        runs = {}
        for B in batches:
            say(f"generation: {impl} batch {B}")
            runs[B] = generate(weights, impl, prompts[:B], new_tokens, att)
        alone = runs[1]
        rows = {}
        for B, r in runs.items():
            same_logits = r["logits"].view(torch.int32) == alone["logits"].view(torch.int32)
            differing = [i for i in range(new_tokens) if not bool(same_logits[i].all())]
            step = statistics.median(r["step_ms"]) if r["step_ms"] else None
            rows[str(B)] = {"tokens_identical": bool(torch.equal(r["tokens"][0], alone["tokens"][0])),
                            "logits_identical": not differing,
                            "first_differing_token": differing[0] if differing else None,
                            "max_abs_logit_diff": float((r["logits"] - alone["logits"]).abs().max()),
                            "logits_sha256": tensor_digest(r["logits"]),
                            "prefill_ms": r["prefill_ms"], "step_ms": step,
                            "ms_per_token": None if step is None else step / B}
        result["by_impl"][impl] = {"attention": att, "tokens_alone": alone["tokens"][0].tolist(),
                                   "by_batch": rows,
                                   "invariant": all(v["logits_identical"] and v["tokens_identical"] for v in rows.values())}
        del runs, alone
        if is_cuda(device):
            torch.cuda.empty_cache()
    return result
