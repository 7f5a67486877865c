"""Decoder-layer shapes of published models, from their released configs (no download at run time).

Only what one decoder layer's kernels depend on is kept: hidden size, query and KV heads, head
dimension, MLP width, whether the QKV projection has a bias, the MLP activation. The numbers are
those of each model's `config.json` on its Hugging Face model card.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from profiler.errors import BadInput


# The largest memory of one GPU smlens knows (B200: 192 GB; H200: 141 GB)
LARGEST_GPU_BYTES = 192e9


@dataclass(frozen=True)
class ModelShape:
    id: str
    source: str            # where the numbers come from
    hidden: int            # hidden_size
    heads: int             # num_attention_heads
    kv_heads: int          # num_key_value_heads (GQA)
    head_dim: int
    mlp: int               # intermediate_size (gate and up are each this wide)
    layers: int            # num_hidden_layers of the full model
    max_positions: int = 131072  # max_position_embeddings: the longest sequence (prompt + decode)
    qkv_bias: bool = False
    activation: str = "silu"  # gate activation of the gated MLP
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_width(self) -> int:
        """N of the fused QKV projection."""
        return self.q_width + 2 * self.kv_width

    def gemm_shapes(self, tokens: int) -> dict[str, tuple[int, int, int]]:
        """(M, N, K) of each projection for `tokens` rows (batch x new tokens)."""
        return {
            "qkv_proj": (tokens, self.qkv_width, self.hidden),
            "o_proj": (tokens, self.hidden, self.q_width),
            "gate_up_proj": (tokens, 2 * self.mlp, self.hidden),
            "down_proj": (tokens, self.hidden, self.mlp),
        }

    def check_rows_fit(self, tokens: int, what: str, element_bytes: int = 4) -> None:
        """Refuse a row count whose widest projection output alone would not fit any GPU's memory:
        such a run would only fail on the GPU, after its start-up, out of memory."""
        widest = max(n for (_, n, _) in self.gemm_shapes(1).values())
        needed = tokens * widest * element_bytes
        if needed > LARGEST_GPU_BYTES:
            raise BadInput(f"{what}: {tokens:,} rows of {self.id}'s widest projection (N={widest:,}) "
                           f"need {needed / 1e9:,.0f} GB for its output alone, more than any GPU's "
                           f"{LARGEST_GPU_BYTES / 1e9:.0f} GB; use fewer rows")

    def layer_weight_count(self) -> int:
        """Parameters of one layer's projections (norms and biases left out)."""
        return sum(n * k for (_, n, k) in self.gemm_shapes(1).values())


MODELS: dict[str, ModelShape] = {m.id: m for m in [
    ModelShape("llama-3.1-8b", "meta-llama/Llama-3.1-8B config.json", hidden=4096, heads=32,
               kv_heads=8, head_dim=128, mlp=14336, layers=32, rope_theta=500000.0),
    ModelShape("llama-3.1-70b", "meta-llama/Llama-3.1-70B config.json", hidden=8192, heads=64,
               kv_heads=8, head_dim=128, mlp=28672, layers=80, rope_theta=500000.0),
    ModelShape("qwen2.5-7b", "Qwen/Qwen2.5-7B config.json", hidden=3584, heads=28, kv_heads=4,
               head_dim=128, mlp=18944, layers=28, qkv_bias=True, rms_eps=1e-6,
               rope_theta=1000000.0),
    # Mistral-7B-v0.3's layer has Llama-3.1-8B's shapes (its vocabulary and RoPE base differ).
    ModelShape("mistral-7b", "mistralai/Mistral-7B-v0.3 config.json", hidden=4096, heads=32,
               kv_heads=8, head_dim=128, mlp=14336, layers=32, max_positions=32768,
               rope_theta=1000000.0),
    # Gemma-2-9B: head_dim 256 and a tanh-GELU MLP. Its attention logit soft-capping and sliding
    # window are not modelled (plain causal SDPA).
    ModelShape("gemma-2-9b", "google/gemma-2-9b config.json", hidden=3584, heads=16, kv_heads=8,
               head_dim=256, mlp=14336, layers=42, max_positions=8192, activation="gelu_tanh",
               rms_eps=1e-6),
    # Not a published model: the smallest layer with every feature, for CPU tests.
    ModelShape("tiny", "smlens test shape", hidden=64, heads=4, kv_heads=2, head_dim=16, mlp=128,
               layers=8, max_positions=4096, qkv_bias=True),
]}

_ALIASES = {
    "meta-llama/llama-3.1-8b": "llama-3.1-8b", "meta-llama/meta-llama-3.1-8b": "llama-3.1-8b",
    "llama3.1-8b": "llama-3.1-8b", "llama-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b", "meta-llama/meta-llama-3.1-70b": "llama-3.1-70b",
    "llama3.1-70b": "llama-3.1-70b", "llama-70b": "llama-3.1-70b",
    "qwen/qwen2.5-7b": "qwen2.5-7b", "qwen-2.5-7b": "qwen2.5-7b",
    "mistralai/mistral-7b-v0.3": "mistral-7b", "mistral-7b-v0.3": "mistral-7b",
    "google/gemma-2-9b": "gemma-2-9b", "gemma2-9b": "gemma-2-9b",
}


def get_model(name: str) -> ModelShape:
    """A model by id or alias; `<model>/tp<N>` is one rank's slice of it at tensor-parallel
    degree N (`shard`), to run on one GPU."""
    key = name.strip().lower()
    base, sep, degree = key.rpartition("/tp")
    if sep and degree.isdigit() and base:
        return shard(get_model(base), int(degree)).rank_model
    key = _ALIASES.get(key, key)
    if key not in MODELS:
        raise BadInput(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[key]


# --- sharding arithmetic ---------------------------------------------------------------------

@dataclass(frozen=True)
class Shard:
    model: ModelShape        # the whole model
    tp: int
    rank_model: ModelShape   # one rank's slice of a layer, as a model of its own
    kv_layout: str           # "split" (KV heads divided over ranks) or "replicated" (one per rank, shared)

    @property
    def kv_copies(self) -> int:
        """Ranks that hold each KV head."""
        return 1 if self.kv_layout == "split" else self.tp // self.model.kv_heads

    def gemm_shapes(self, tokens: int) -> dict[str, tuple[int, int, int]]:
        """(M, N, K) of each projection on one rank."""
        return self.rank_model.gemm_shapes(tokens)


def shard(model: ModelShape, tp: int) -> Shard:
    """One rank's slice of `model` at tensor-parallel degree `tp`; BadInput when it cannot split."""
    if tp < 1:
        raise BadInput(f"--tp must be 1 or more (got {tp})")
    problems = []
    if model.heads % tp:
        problems.append(f"{model.heads} query heads")
    if model.mlp % tp:
        problems.append(f"an MLP width of {model.mlp}")
    if model.kv_heads % tp and tp % model.kv_heads:
        problems.append(f"{model.kv_heads} KV heads (neither a multiple nor a divisor of {tp})")
    if problems:
        raise BadInput(f"--tp {tp}: {model.id} has {' and '.join(problems)}, which {tp} ranks cannot "
                       f"share evenly; choose --tp from {', '.join(map(str, valid_tp(model)))}")
    layout = "split" if model.kv_heads % tp == 0 else "replicated"
    kv_heads = model.kv_heads // tp if layout == "split" else 1
    rank_model = replace(model, id=f"{model.id}/tp{tp}", source=f"{model.source}, one rank of TP {tp}",
                         heads=model.heads // tp, kv_heads=kv_heads, mlp=model.mlp // tp)
    return Shard(model, tp, rank_model, layout)


def valid_tp(model: ModelShape, largest: int = 64) -> list[int]:
    """The TP degrees up to `largest` that split the model evenly."""
    return [tp for tp in range(1, largest + 1)
            if model.heads % tp == 0 and model.mlp % tp == 0
            and (model.kv_heads % tp == 0 or tp % model.kv_heads == 0)]
