"""A stack of decoder layers in torch with random weights and a published model's shapes.

It runs three phases, each in an NVTX push/pop range of the `smlens` domain:
`cold_prefill` (the first forward pass after the weights are made: first-call library heuristics,
cold caches), `warm_prefill` (the same prompt again) and `decode` (one new token per step, against a
KV cache). Inside a phase every layer is a range `layer_<i>` (decode steps add `step_<j>` around
them), and inside a layer every kernel runs in a role range whose message carries its problem
shape (docs/VIEWS.md):

    smlens:cold_prefill / smlens:layer_0 / smlens:attention_block /
        smlens:qkv_proj M=4096 N=6144 K=4096
    smlens:decode / smlens:step_1 / smlens:layer_0 / smlens:attention_block /
        smlens:attention B=8 H=32 KVH=8 Sq=1 Skv=513 D=128 causal=0

The attention and MLP blocks are ranges of their own (`attention_block`, `mlp_block`), as the
annotation of a PyTorch program (profiler/run/annotate) makes them from its modules: the
activation's share of the MLP's time is read from them.

The layer and step ranges let ncu pick one representative layer and decode step (identical layers
and steps launch identical kernels), see `profiled_regions`. The annotation costs nothing when no
profiler is attached: the `nvtx` package then hands out a dummy domain and every range here is a
shared null context.

    python -m profiler.workloads.decoder --model llama-3.1-8b --layers 2 --batch 8 --prompt 512 \
        --decode-steps 2
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field

from profiler.workloads.models import ModelShape, get_model
from views.vocabulary import PHASES, PREFILL_PHASES

DOMAIN = "smlens"
# The blocks of a layer (views.vocabulary.BLOCKS), ranges between the layer and its roles.
ATTENTION_BLOCK, MLP_BLOCK = "attention_block", "mlp_block"
DTYPES = ("bf16", "fp16", "fp32", "fp8")
# fp8: the four projections' weights in float8 e4m3 with one scale per tensor, the activations
# quantized per tensor at each projection (dynamic W8A8, as FP8 checkpoints run in vLLM), the GEMM
# torch._scaled_mm; everything else (norms, attention, the KV cache) in bf16.
FP8_MAX = 448.0  # the largest e4m3 value
_NULL = contextlib.nullcontext()


def layer_range(index: int) -> str:
    return f"layer_{index}"


def step_range(index: int) -> str:
    return f"step_{index}"


def representative_decode_step(decode_steps: int) -> int:
    """The decode step profiled for all: the second, when there is one, so that the first call of
    the decode shapes (library heuristics) stays out, as `cold_prefill` keeps it out of
    `warm_prefill`."""
    return 1 if decode_steps > 1 else 0


@dataclass(frozen=True)
class WorkloadConfig:
    model: ModelShape
    layers: int = 2
    batch: int = 1
    prompt: int = 512
    decode_steps: int = 2
    dtype: str = "bf16"
    phases: tuple = PHASES
    seed: int = 0

    def __post_init__(self):
        from profiler.errors import BadInput
        for name in ("layers", "batch", "prompt"):
            if getattr(self, name) < 1:
                raise BadInput(f"--{name} must be at least 1 (got {getattr(self, name)})")
        if self.decode_steps < 0:
            raise BadInput(f"--decode-steps must be 0 or more (got {self.decode_steps})")
        # beyond the model's own sizes the stack is no longer that model (and a huge value would
        # only fail on the GPU, minutes later, out of memory)
        if self.layers > self.model.layers:
            raise BadInput(f"--layers {self.layers}: {self.model.id} has {self.model.layers} layers")
        if self.prompt + self.decode_steps > self.model.max_positions:
            raise BadInput(f"--prompt {self.prompt} and --decode-steps {self.decode_steps}: "
                           f"{self.model.id} takes at most {self.model.max_positions:,} positions, "
                           "prompt and decode steps together (its max_position_embeddings)")
        if self.dtype not in DTYPES:
            raise BadInput(f"--dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        self.model.check_rows_fit(self.batch * self.prompt, f"--batch {self.batch} x --prompt {self.prompt}",
                                  4 if self.dtype == "fp32" else 2)
        unknown = [p for p in self.phases if p not in PHASES]
        if unknown or not self.phases:
            raise BadInput(f"phases {','.join(unknown) or '(none)'}: choose from {', '.join(PHASES)}")
        if "decode" in self.phases and self.decode_steps == 0:
            raise BadInput("the decode phase needs --decode-steps 1 or more")

    def argv(self) -> list[str]:
        """The command-line arguments that rebuild this configuration in `main`."""
        return ["--model", self.model.id, "--layers", str(self.layers), "--batch", str(self.batch),
                "--prompt", str(self.prompt), "--decode-steps", str(self.decode_steps),
                "--dtype", self.dtype, "--phases", ",".join(self.phases), "--seed", str(self.seed)]


@dataclass(frozen=True)
class Region:
    """A stretch of the workload that ncu profiles once: one layer of one phase (and decode step)."""
    phase: str
    ranges: tuple                # NVTX push/pop ranges from the phase inwards, e.g. (decode, step_1, layer_0)
    repeats: int                 # how many identical stretches this one stands for (itself included)

    def nvtx_include(self, domain: str = DOMAIN) -> str:
        """ncu's push/pop filter for the stretch: `<domain>@<outer>/<inner>/`."""
        return f"{domain}@" + "/".join(self.ranges) + "/"


def profiled_regions(config: WorkloadConfig, dedup: bool = True, layer: int = 0) -> list[Region]:
    """What ncu profiles: with dedup, layer `layer` of each prefill and of one decode step;
    without, every layer of every step."""
    from profiler.errors import BadInput
    if not 0 <= layer < config.layers:
        raise BadInput(f"--layer {layer}: the stack has layers 0 to {config.layers - 1}")
    regions = []
    for phase in config.phases:
        if not dedup:
            regions.append(Region(phase, (phase,), 1))
        elif phase == "decode":
            step = representative_decode_step(config.decode_steps)
            regions.append(Region(phase, (phase, step_range(step), layer_range(layer)),
                                  config.layers * config.decode_steps))
        else:
            regions.append(Region(phase, (phase, layer_range(layer)), config.layers))
    return regions


# Kernels one layer launches per role with torch 2.11 on the H200 (tests/data/h200_runs): RMSNorm
# one kernel, RoPE and the KV-cache writes six, SiLU-and-multiply two, each residual add one;
# cuDNN's decode attention adds a reduction kernel. A GEMM may add a split-K reduce kernel (seen at
# decode), so these counts are the plan's estimate and the progress bar's first total, not a promise.
_LAYER_KERNELS = {
    "prefill": {"elementwise": 12, "qkv_proj": 1, "attention": 1, "o_proj": 1, "gate_up_proj": 1,
                "down_proj": 1},
    "decode": {"elementwise": 12, "qkv_proj": 1, "attention": 2, "o_proj": 1, "gate_up_proj": 1,
               "down_proj": 1},
}


def layer_kernels(phase: str) -> dict[str, int]:
    """Kernels one layer launches in `phase`, per role (estimates, see _LAYER_KERNELS)."""
    return dict(_LAYER_KERNELS["decode" if phase == "decode" else "prefill"])


def region_kernels(config: "WorkloadConfig", region: "Region") -> int:
    """Kernels ncu profiles in one region: one layer, or with dedup off the whole phase."""
    per_layer = sum(layer_kernels(region.phase).values())
    if len(region.ranges) > 1:  # one layer (of one decode step)
        return per_layer
    return per_layer * config.layers * (config.decode_steps if region.phase == "decode" else 1)


# --- annotation ----------------------------------------------------------------------------------

class _Range:
    __slots__ = ("_domain", "_attributes")

    def __init__(self, domain, attributes):
        self._domain, self._attributes = domain, attributes

    def __enter__(self):
        self._domain.push_range(self._attributes)

    def __exit__(self, *exc):
        self._domain.pop_range()
        return False


class Annotator:
    """NVTX push/pop ranges in one domain. With no profiler attached (or no `nvtx` package) every
    range is the same null context, so the annotated code runs as if it had none."""

    def __init__(self, domain: str = DOMAIN, enabled: bool = True):
        self.active = False
        self._domain = None
        self._ranges: dict[str, _Range] = {}
        if not enabled:
            return
        try:
            import nvtx
        except ImportError:
            return
        domain_obj = nvtx.get_domain(domain)
        # A dummy domain (no tool attached) answers None here.
        if domain_obj.get_event_attributes(message=domain) is not None:
            self._domain, self.active = domain_obj, True

    def range(self, message: str):
        if not self.active:
            return _NULL
        found = self._ranges.get(message)
        if found is None:
            attributes = self._domain.get_event_attributes(message=message)
            found = self._ranges[message] = _Range(self._domain, attributes)
        return found


# --- the model -------------------------------------------------------------------------------

def _torch_dtype(torch, name: str):
    """The activations' type (fp8 runs its activations in bf16 between the projections)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.bfloat16}[name]


@dataclass
class Fp8Weight:
    """A projection's weight in float8 e4m3 ([N, K], as nn.Linear keeps it) and its scale."""
    data: object
    scale: object  # float32 scalar: data x scale is the weight


def _quantize_fp8(torch, tensor):
    """(tensor in float8 e4m3, its float32 scale), one scale for the whole tensor."""
    scale = tensor.abs().amax().float().clamp(min=1e-12) / FP8_MAX
    return (tensor.float() / scale).to(torch.float8_e4m3fn), scale


def linear(x, weight, bias=None):
    """x @ weight^T (+ bias): F.linear, or for an Fp8Weight x quantized per tensor and
    torch._scaled_mm (one FP8 GEMM on the tensor cores)."""
    import torch
    import torch.nn.functional as F
    if not isinstance(weight, Fp8Weight):
        return F.linear(x, weight, bias)
    rows, row_scale = _quantize_fp8(torch, x.reshape(-1, x.shape[-1]))
    out = torch._scaled_mm(rows, weight.data.t(), scale_a=row_scale, scale_b=weight.scale,
                           out_dtype=x.dtype).reshape(*x.shape[:-1], -1)
    return out if bias is None else out + bias


@dataclass
class LayerWeights:
    norm_attn: object
    qkv: object          # [N, K] as nn.Linear keeps it: F.linear computes x @ W^T
    qkv_bias: object     # or None
    o: object
    norm_mlp: object
    gate_up: object      # gate and up fused: [2 * mlp, hidden]
    down: object


@dataclass
class DecoderStack:
    config: WorkloadConfig
    device: str
    weights: list = field(default_factory=list)
    k_cache: list = field(default_factory=list)
    v_cache: list = field(default_factory=list)
    cos: object = None
    sin_signed: object = None
    # Tensor parallel: sums a row-parallel GEMM's partial output over the ranks (reduce(t, after=role)).
    reduce: object = None

    @classmethod
    def build(cls, config: WorkloadConfig, device: str) -> "DecoderStack":
        """Random weights, one buffer per layer (one random-fill kernel each), and the KV cache."""
        import torch
        m, dtype = config.model, _torch_dtype(torch, config.dtype)
        generator = torch.Generator(device=device).manual_seed(config.seed)
        stack = cls(config, device)
        sizes = [m.hidden, m.qkv_width * m.hidden, m.qkv_width if m.qkv_bias else 0,
                 m.hidden * m.q_width, m.hidden, 2 * m.mlp * m.hidden, m.hidden * m.mlp]
        for _ in range(config.layers):
            flat = torch.empty(sum(sizes), dtype=dtype, device=device)
            # Scaled so activations stay O(1) through the layers: no inf/NaN in bf16.
            flat.normal_(0.0, 0.02, generator=generator)
            parts = list(torch.split(flat, sizes))
            norm_attn, qkv, bias, o, norm_mlp, gate_up, down = parts
            norm_attn.fill_(1.0)
            norm_mlp.fill_(1.0)
            stack.weights.append(LayerWeights(
                norm_attn=norm_attn, qkv=qkv.view(m.qkv_width, m.hidden),
                qkv_bias=bias if m.qkv_bias else None, o=o.view(m.hidden, m.q_width),
                norm_mlp=norm_mlp, gate_up=gate_up.view(2 * m.mlp, m.hidden),
                down=down.view(m.hidden, m.mlp)))
            if config.dtype == "fp8":
                w = stack.weights[-1]
                for name in ("qkv", "o", "gate_up", "down"):
                    setattr(w, name, Fp8Weight(*_quantize_fp8(torch, getattr(w, name))))
        max_len = config.prompt + config.decode_steps
        cache_shape = (config.batch, m.kv_heads, max_len, m.head_dim)
        for _ in range(config.layers):
            stack.k_cache.append(torch.zeros(cache_shape, dtype=dtype, device=device))
            stack.v_cache.append(torch.zeros(cache_shape, dtype=dtype, device=device))
        # RoPE tables for every position; rotate_half(x) * sin == roll(x, D/2) * [-sin, sin].
        half = m.head_dim // 2
        inv_freq = 1.0 / (m.rope_theta ** (torch.arange(0, half, device=device, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv_freq)
        stack.cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(dtype)
        stack.sin_signed = torch.cat([-angles.sin(), angles.sin()], dim=-1).to(dtype)
        return stack

    def layer(self, index: int, x, pos: int, ann: Annotator):
        """One decoder layer over x [B, S, hidden] at positions pos..pos+S-1; fills the KV cache."""
        import torch
        import torch.nn.functional as F
        m, w = self.config.model, self.weights[index]
        batch, seq, _ = x.shape
        tokens = batch * seq
        heads, kv_heads, dim = m.heads, m.kv_heads, m.head_dim
        with ann.range("elementwise op=rms_norm"):
            h = F.rms_norm(x, (m.hidden,), w.norm_attn, m.rms_eps)
        with ann.range(ATTENTION_BLOCK):
            with ann.range(f"qkv_proj M={tokens} N={m.qkv_width} K={m.hidden}"):
                qkv = linear(h, w.qkv, w.qkv_bias)
            with ann.range("elementwise op=rope_kv_cache"):
                # q and k sit side by side in qkv: one rotary pass over both.
                qk = qkv[..., : m.q_width + m.kv_width].unflatten(-1, (heads + kv_heads, dim))
                cos = self.cos[pos: pos + seq, None, :]
                sin = self.sin_signed[pos: pos + seq, None, :]
                qk = torch.addcmul(qk * cos, torch.roll(qk, dim // 2, dims=-1), sin)
                q = qk[:, :, :heads].transpose(1, 2)
                k = qk[:, :, heads:].transpose(1, 2)
                v = qkv[..., m.q_width + m.kv_width:].unflatten(-1, (kv_heads, dim)).transpose(1, 2)
                self.k_cache[index][:, :, pos: pos + seq] = k
                self.v_cache[index][:, :, pos: pos + seq] = v
            kv_len = pos + seq
            causal = seq > 1
            with ann.range(f"attention B={batch} H={heads} KVH={kv_heads} Sq={seq} Skv={kv_len} "
                           f"D={dim} causal={int(causal)}"):
                attn = F.scaled_dot_product_attention(
                    q, self.k_cache[index][:, :, :kv_len], self.v_cache[index][:, :, :kv_len],
                    is_causal=causal, enable_gqa=heads != kv_heads)
            with ann.range("elementwise op=attn_layout"):
                attn = attn.transpose(1, 2).reshape(batch, seq, m.q_width)
            with ann.range(f"o_proj M={tokens} N={m.hidden} K={m.q_width}"):
                o = linear(attn, w.o)
        if self.reduce is not None:
            o = self.reduce(o, after="o_proj")
        with ann.range("elementwise op=residual_add"):
            x = x + o
        with ann.range("elementwise op=rms_norm"):
            h = F.rms_norm(x, (m.hidden,), w.norm_mlp, m.rms_eps)
        with ann.range(MLP_BLOCK):
            with ann.range(f"gate_up_proj M={tokens} N={2 * m.mlp} K={m.hidden}"):
                gate_up = linear(h, w.gate_up)
            with ann.range(f"elementwise op={m.activation}_mul"):
                gate, up = gate_up.chunk(2, dim=-1)
                if m.activation == "gelu_tanh":
                    act = F.gelu(gate, approximate="tanh") * up
                else:
                    act = F.silu(gate) * up
            with ann.range(f"down_proj M={tokens} N={m.hidden} K={m.mlp}"):
                down = linear(act, w.down)
        if self.reduce is not None:
            down = self.reduce(down, after="down_proj")
        with ann.range("elementwise op=residual_add"):
            x = x + down
        return x

    def forward(self, x, pos: int, ann: Annotator):
        for index in range(self.config.layers):
            with ann.range(layer_range(index)):
                x = self.layer(index, x, pos, ann)
        return x


def run(config: WorkloadConfig, device: str = "cuda", annotate: bool = True,
        ann: Annotator | None = None, cuda_graph: bool = False, reduce=None) -> dict:
    """Build the stack and run the configured phases; returns wall times per phase (seconds).

    cuda_graph: decode step 0 runs eagerly with its ranges (the warm-up a capture needs, and the
    kernel order that names the graph's kernels, see nvtx.EagerOrder); it is then captured in a
    CUDA graph (at the next position) that the remaining steps replay inside their step ranges.
    reduce: the tensor-parallel all-reduce after o_proj and down_proj (DecoderStack.reduce)."""
    import torch
    ann = ann if ann is not None else Annotator(enabled=annotate)
    m = config.model
    dtype = _torch_dtype(torch, config.dtype)
    stack = DecoderStack.build(config, device)
    stack.reduce = reduce
    generator = torch.Generator(device=device).manual_seed(config.seed + 1)
    prompt = torch.empty(config.batch, config.prompt, m.hidden, dtype=dtype, device=device)
    prompt.normal_(0.0, 1.0, generator=generator)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    times = {}
    sync()
    with torch.inference_mode():
        out = prompt
        # A cold prefill always runs, profiled or not: what follows is only warm after it, and
        # it fills the KV cache that decode reads.
        for phase in PREFILL_PHASES:
            if phase == "warm_prefill" and phase not in config.phases:
                continue
            start = time.perf_counter()
            with ann.range(phase):
                out = stack.forward(prompt, 0, ann)
            sync()
            times[phase] = time.perf_counter() - start
        if "decode" in config.phases:
            x = out[:, -1:, :]
            start = time.perf_counter()
            with ann.range("decode"):
                for step in range(config.decode_steps):
                    if cuda_graph and step == 1:
                        x = _graph_decode(torch, stack, x, config, ann)
                        break
                    with ann.range(step_range(step)):
                        x = stack.forward(x, config.prompt + step, ann)
            sync()
            times["decode"] = time.perf_counter() - start
        finite = bool(torch.isfinite(x if "decode" in config.phases else out).all())
    return {"times_s": times, "finite": finite}


def _graph_decode(torch, stack: DecoderStack, x, config: WorkloadConfig, ann: Annotator):
    """Capture one decode step (no ranges inside: they would not survive capture) and replay it
    for steps 1..decode_steps-1."""
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = stack.forward(static_x, config.prompt + 1, Annotator(enabled=False))
    for step in range(1, config.decode_steps):
        with ann.range(step_range(step)):
            graph.replay()
    return static_out


def build_parser(prog: str = "python -m profiler.workloads.decoder",
                 description: str = "Annotated decoder-layer stack with random weights."
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--decode-steps", type=int, default=2)
    parser.add_argument("--dtype", default="bf16", choices=DTYPES)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--no-nvtx", action="store_true", help="run without any annotation")
    return parser


def config_from_args(args: argparse.Namespace) -> WorkloadConfig:
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    return WorkloadConfig(get_model(args.model), args.layers, args.batch, args.prompt,
                          args.decode_steps, args.dtype, phases, args.seed)


def _parse(argv: list[str] | None) -> tuple[WorkloadConfig, argparse.Namespace]:
    parser = build_parser()
    parser.add_argument("--cuda-graph", action="store_true",
                        help="decode steps after the first replay a CUDA graph (needs a GPU)")
    args = parser.parse_args(argv)
    return config_from_args(args), args


def main(argv: list[str] | None = None) -> int:
    from profiler.errors import SmlensError
    try:
        config, args = _parse(argv)
    except SmlensError as err:
        print(f"smlens workload: {err}", file=sys.stderr)
        return 2
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.cuda_graph and not device.startswith("cuda"):
        print("smlens workload: --cuda-graph needs a CUDA device", file=sys.stderr)
        return 2
    result = run(config, device=device, annotate=not args.no_nvtx, cuda_graph=args.cuda_graph)
    print(json.dumps({"workload": "decoder", "model": config.model.id, "layers": config.layers,
                      "batch": config.batch, "prompt": config.prompt,
                      "decode_steps": config.decode_steps, "device": device, **result}))
    return 0 if result["finite"] else 1


if __name__ == "__main__":
    sys.exit(main())
