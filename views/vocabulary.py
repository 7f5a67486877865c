"""The words smlens uses for phases, roles, kernel kinds and stall families, defined once.

The profiler (NVTX parsing, workloads, annotation), the views and the reports read them from here.
"""
from __future__ import annotations

# Phases of LLM inference, in the order a request meets them. A bare `prefill` range is told cold
# or warm by order at ingest; kernels outside any phase range are `other`.
PHASES = ("cold_prefill", "warm_prefill", "decode")
PHASE_ORDER = (*PHASES, "other")

# Per-layer roles: the four projections of a transformer layer, attention, and the elementwise
# work between them (norms, rotary embedding, activation, residual adds).
GEMM_ROLES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ROLES = ("qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "elementwise")
# Every role a kernel can carry, in layer order: the six, and what the kernel-name classifier says
# of a kernel outside any role range (`gemm`: a GEMM of unknown role; `other`).
KERNEL_ROLES = (*ROLES, "gemm", "other")

# What a kernel is, from its name alone.
KINDS = ("gemm", "attention", "splitk_reduce", "elementwise", "other")

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
}
