"""The words smlens uses for phases, roles, kernel kinds and stall families, defined once.

The profiler (NVTX parsing, workloads, annotation), the views and the reports read them from here.
"""
from __future__ import annotations

# Phases of LLM inference, in the order a request meets them. A bare `prefill` range is told cold
# or warm by order at ingest; kernels outside any phase range are `other`. A profiled program's
# kernels outside its forward passes (model construction, weight loading, tokenisation, sampling)
# are `setup`, when asked for (`smlens profile --include setup`).
PREFILL_PHASES = ("cold_prefill", "warm_prefill")
PHASES = (*PREFILL_PHASES, "decode")
SETUP_PHASE = "setup"
OTHER_PHASE = "other"
PHASE_ORDER = (*PHASES, SETUP_PHASE, OTHER_PHASE)
# Kernels outside any forward: shown apart, and left out of the workload's shares and its charts
# when the run has phases (the verdict, the report).
OUTSIDE_PHASES = (SETUP_PHASE, OTHER_PHASE)

# Per-layer roles: the four projections of a transformer layer, attention, and the elementwise
# work between them (norms, rotary embedding, activation, residual adds).
GEMM_ROLES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ROLES = ("qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "elementwise")
# Tensor parallel: collectives between ranks, a role each (a range named so, or the timed rows that
# `smlens profile --tp` adds); `communication` is a collective kernel of unknown kind.
COLLECTIVE_ROLES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "communication")
# Every role a kernel can carry, in layer order: the six, and what the kernel-name classifier says
# of a kernel outside any role range (`gemm`: a GEMM of unknown role; `other`), the collectives.
KERNEL_ROLES = (*ROLES, "gemm", *COLLECTIVE_ROLES, "other")
# NVTX domains that name no phase, role or operation: the rank marker tensor parallel pushes
# around a rank's whole run, and libraries' own bookkeeping ranges.
RANK_DOMAIN = "smlens_rank"
LIBRARY_DOMAINS = ("NCCL", "NVSHMEM")

# What a kernel is, from its name alone.
KINDS = ("gemm", "attention", "splitk_reduce", "elementwise", "communication", "other")
# The kinds whose kernel a library chose (a family, a tile, a split-K): what V8 lists as what ran,
# and what a comparison of two runs matches by family.
CHOSEN_KINDS = ("gemm", "attention", "splitk_reduce")

# Why resident warps do not issue: ncu's stall reasons
# (smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio) in families. `selected` is the
# warp that issued: counted in the sum and in scheduling, but no stall.
STALL_FAMILIES = {
    "memory": ("long_scoreboard", "lg_throttle", "mio_throttle", "short_scoreboard", "tex_throttle",
               "drain", "imc_miss"),
    "compute": ("math_pipe_throttle", "wait", "dispatch_stall"),
    "tensor": ("gmma",),
    "sync": ("barrier", "membar", "sleeping"),
    "scheduling": ("not_selected", "selected", "no_instruction", "branch_resolving", "misc"),
}

# Range names other tools use for the same roles (vLLM, HF module names, our own older captures).
ROLE_ALIASES = {
    "qkv": "qkv_proj", "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
    "attn": "attention", "self_attn": "attention", "sdpa": "attention",
    "out_proj": "o_proj", "dense": "o_proj",
    "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "gate_up": "gate_up_proj",
    "fc1": "gate_up_proj", "fc2": "down_proj", "down": "down_proj",
    "norm": "elementwise", "rmsnorm": "elementwise", "layernorm": "elementwise",
    "rotary": "elementwise", "rope": "elementwise", "residual": "elementwise",
    "activation": "elementwise", "kv_cache": "elementwise",
    "all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
    "all_to_all": "alltoall",
}

# Where a kernel's role came from: a range that named it (`nvtx`), smlens's annotation of a PyTorch
# program (`annotation`: a module-table range, see MODULE_ROLES), the annotation of torch.compile'd
# code (`compiled`: inductor's record of the modules each generated kernel came from), the
# kernel-name classifier (`name`), or an eager step's kernel order for CUDA-graph replays (`order`).
ROLE_SOURCES = ("nvtx", "annotation", "compiled", "name", "order")
# The message key that marks a range as the annotation's: `qkv_proj M=8 N=4096 K=4096 module=...`,
# and the one that marks it as compiled code's: `... module=... compiled=1 kernel=mm`.
ANNOTATION_KEY = "module"
COMPILED_KEY = "compiled"

# Ranges between a layer and its roles: `attention_block` (the attention module: projections, rotary,
# the attention itself) and `mlp_block` (gate/up, activation, down). A kernel's `block` is the
# word before `_block`; the activation's share of the MLP's time is read from them.
BLOCKS = ("attention", "mlp")

# --- module names -> roles (the annotation of PyTorch programs) ----------------------------------
# The last part of a module's path (`model.layers.3.self_attn.q_proj` -> `q_proj`) names its role.
# Hugging Face transformers (Llama, Qwen2, Mistral, Gemma, ...), vLLM (fused projections), GPT-style
# models (GPT-2, GPT-NeoX, Falcon, OPT, Phi). A name whose role depends on the block it sits in maps
# to {block: role}: GPT-2's `c_proj` is the attention output in `attn` and the MLP's down projection
# in `mlp`; GPT-NeoX's `dense` likewise.
MODULE_ROLES = {
    # Hugging Face: separate projections
    "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "o_proj": "o_proj",
    "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj",
    # Mixtral's and Meta's reference code: w1 the gate, w3 the up, w2 the down projection
    "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj",
    # vLLM: fused projections (QKVParallelLinear, MergedColumnParallelLinear)
    "qkv_proj": "qkv_proj", "gate_up_proj": "gate_up_proj",
    # GPT-style
    "c_attn": "qkv_proj", "query_key_value": "qkv_proj", "qkv": "qkv_proj", "Wqkv": "qkv_proj",
    "out_proj": "o_proj", "c_fc": "gate_up_proj", "fc1": "gate_up_proj", "fc2": "down_proj",
    "dense_h_to_4h": "gate_up_proj", "dense_4h_to_h": "down_proj",
    "c_proj": {"attention": "o_proj", "mlp": "down_proj"},
    "dense": {"attention": "o_proj", "mlp": "down_proj"},
    # elementwise modules, by name (norms, rotary embedding and activations are also found by class)
    "act": "elementwise", "act_fn": "elementwise", "activation_fn": "elementwise",
    "rotary_emb": "elementwise", "input_layernorm": "elementwise",
    "post_attention_layernorm": "elementwise", "pre_feedforward_layernorm": "elementwise",
    "post_feedforward_layernorm": "elementwise", "ln_1": "elementwise", "ln_2": "elementwise",
    "norm": "elementwise",
}
# Module names of the blocks inside a layer (see BLOCKS). A name here holding no projection is the
# attention computation itself (vLLM's `attn`, an `Attention` module): role attention.
MODULE_BLOCKS = {
    "self_attn": "attention", "attn": "attention", "attention": "attention",
    "self_attention": "attention", "mlp": "mlp", "feed_forward": "mlp", "ffn": "mlp",
    "block_sparse_moe": "mlp", "moe": "mlp",
}
# Class-name words for modules no name above covers: `LlamaRMSNorm`, `RotaryEmbedding`, `SiLU`.
ELEMENTWISE_CLASS_WORDS = ("Norm", "Rotary", "SiLU", "GELU", "Activation", "AndMul", "ReLU", "Tanh")
# The element lists holding a model's decoder layers: `model.layers.N`, `transformer.h.N`.
LAYER_LISTS = ("layers", "h", "blocks", "layer", "block")
# Functions an inference engine runs model forwards from before any request (the annotation gives
# such a forward no phase): vLLM's `_dummy_run` (its memory-profiling `profile_run`, compile warm-up
# and CUDA-graph capture all call it), its GPU runner's `warmup_kernels` (prefill and decode steps of
# made-up requests) and `capture_model`.
START_UP_FORWARDS = ("_dummy_run", "warmup_kernels", "capture_model")
