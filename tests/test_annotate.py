"""The annotation of unmodified PyTorch programs (profiler/run/annotate) on the CPU: tiny Hugging Face
models of five families, modules named and called as vLLM's are, a recording NVTX domain that keeps
every range pushed, and the aten ops each ran under (the CPU's stand-in for kernel launches)."""
from __future__ import annotations

import shutil
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from profiler.ingest import nvtx  # noqa: E402
from profiler.run.annotate.runtime import _PROJECTION, Annotator  # noqa: E402
from views import vocabulary  # noqa: E402

GEMM_OPS = {"mm", "addmm", "bmm", "linear", "matmul", "baddbmm"}
ATTENTION_OPS = {"_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention",
                 "_scaled_dot_product_attention_math", "_scaled_dot_product_efficient_attention"}
# ops that describe a view of memory: no kernel on a GPU
VIEW_OPS = {"view", "_unsafe_view", "unflatten", "transpose", "slice", "split", "split_with_sizes",
            "chunk", "select", "t", "expand", "unsqueeze", "reshape", "alias", "as_strided", "detach",
            "_reshape_alias", "permute", "squeeze", "unbind", "narrow", "split_tensor", "lift_fresh",
            "empty", "empty_like", "_to_copy", "to", "clone", "contiguous", "lift_fresh_copy",
            "new_empty", "empty_strided", "zeros", "arange", "full", "ones", "sym_size", "sym_stride"}


class RecordingDomain:
    """An NVTX domain with a tool attached: keeps the open stack, each stack as it was pushed
    (`smlens:<message>`, the form ncu's push/pop column gives), and counts pops."""

    def __init__(self):
        self.stack: list[str] = []
        self.pushed: list[tuple[str, ...]] = []

    def get_event_attributes(self, message):
        return message

    def push_range(self, attributes):
        self.stack.append(f"smlens:{attributes}")
        self.pushed.append(tuple(self.stack))

    def pop_range(self):
        self.stack.pop()


class OpRecorder(TorchDispatchMode):
    """Each aten op with the NVTX stack it ran under."""

    def __init__(self, domain):
        super().__init__()
        self.domain = domain
        self.ops: list[tuple[str, tuple[str, ...], tuple]] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        self.ops.append((func.overloadpacket.__name__, tuple(self.domain.stack), shapes))
        return func(*args, **(kwargs or {}))


def kernel_name(op: str) -> str:
    """What the GPU's kernel for an op would be called, as far as the name classifier cares."""
    if op in GEMM_OPS:
        return "gemm"
    if op in ATTENTION_OPS:
        return "flash_attention"
    return "elementwise"


TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=100, max_position_embeddings=64)


def hf_model(family: str, **extra):
    if family == "gemma2_eager":
        # Gemma-2's layout from transformers 5.18 on, whatever version is installed: no SDPA (it
        # has no softcap), attention is the modeling file's own eager_attention_forward
        family, extra = "gemma2", {**extra, "attn_implementation": "eager"}
    cfg_class, model_class, kw = {
        "llama": ("LlamaConfig", "LlamaForCausalLM", TINY),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", TINY),
        "mistral": ("MistralConfig", "MistralForCausalLM", TINY),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**TINY, "head_dim": 16}),
        "gpt2": ("GPT2Config", "GPT2LMHeadModel",
                 dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64,
                      bos_token_id=0, eos_token_id=0)),
    }[family]
    config = getattr(transformers, cfg_class)(**kw, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config).eval(), config


def generate_twice(model, batch=2, prompt=8, new=3):
    """A warm-up request, then the measured one: cold prefill, warm prefill, decode steps."""
    torch.manual_seed(1)
    ids = torch.randint(1, 100, (batch, prompt))
    outs = []
    for _ in range(2):
        outs.append(model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                   min_new_tokens=new, do_sample=False, pad_token_id=0,
                                   return_dict_in_generate=True, output_logits=True))
    return outs


@pytest.fixture
def annotated():
    """An annotator installed with a recording domain; removed afterwards."""
    made = []

    def make(**kw):
        domain = RecordingDomain()
        annotator = Annotator(vocabulary, domain, **kw).install(torch)
        made.append(annotator)
        return annotator, domain

    yield make
    for annotator in made:
        annotator.remove()


def _messages(stack):
    return [entry.split(":", 1)[1] for entry in stack]


# --- Hugging Face models ---------------------------------------------------------------------

FAMILIES = ["llama", "qwen2", "mistral", "gemma2", "gemma2_eager", "gpt2"]


def is_eager(config) -> bool:
    """gemma2_eager, and gemma2 itself from transformers 5.18 on"""
    return config._attn_implementation == "eager"


@pytest.fixture(scope="module", params=FAMILIES)
def hf_run(request):
    """Each family's tiny model, generate twice under the annotation, every aten op recorded."""
    family = request.param
    model, config = hf_model(family)
    domain = RecordingDomain()
    annotator = Annotator(vocabulary, domain).install(torch)
    try:
        with OpRecorder(domain) as recorder, torch.no_grad():
            generate_twice(model)
    finally:
        annotator.remove()
    return family, config, annotator, domain, recorder


def test_phases_steps_and_layers(hf_run):
    family, config, annotator, domain, _ = hf_run
    phases = [s[0] for s in domain.pushed if len(s) == 1]
    # generate: one prefill forward and two one-token forwards per call (3 new tokens)
    assert phases == ["smlens:cold_prefill", "smlens:decode", "smlens:decode",
                      "smlens:warm_prefill", "smlens:decode", "smlens:decode"]
    steps = [s[1] for s in domain.pushed if len(s) == 2 and s[0] == "smlens:decode"]
    assert steps == [f"smlens:step_{j}" for j in range(4)]
    layers = config.num_hidden_layers
    for phase, prefix in (("cold_prefill", ()), ("decode", ("step_2",))):
        seen = [_messages(s)[len(prefix) + 1] for s in domain.pushed
                if _messages(s)[: len(prefix) + 1] == [phase, *prefix] and len(s) == len(prefix) + 2
                and _messages(s)[-1].startswith("layer_")]
        assert seen == [f"layer_{i}" for i in range(layers)], (phase, seen)
    assert annotator.forwards == {"cold_prefill": 1, "warm_prefill": 1, "decode": 4}
    assert annotator.models[0]["layers"] == layers and domain.stack == []


def _expected_projections(family, config):
    """(role, N, K) of each projection module, as the config says."""
    if family == "gpt2":
        h = config.n_embd
        return {("qkv_proj", 3 * h, h), ("o_proj", h, h), ("gate_up_proj", 4 * h, h), ("down_proj", h, 4 * h)}
    h, i = config.hidden_size, config.intermediate_size
    d = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    return {("qkv_proj", q, h), ("qkv_proj", kv, h), ("o_proj", h, q), ("gate_up_proj", i, h),
            ("down_proj", h, i)}


def test_every_gemm_in_a_layer_has_its_role_and_shape(hf_run):
    """A matrix product inside a layer runs in a projection's range whose M N K are the product's
    own (M = batch x new tokens), and the (role, N, K) set is the config's."""
    family, config, _, _, recorder = hf_run
    found = set()
    for op, stack, shapes in recorder.ops:
        if op not in GEMM_OPS or not any(e.startswith("smlens:layer_") for e in stack):
            continue
        parsed = nvtx.classify(list(stack), kernel_name(op))
        if parsed["role"] == "attention" and is_eager(config):
            assert op in ("matmul", "bmm") and parsed["role_source"] == "annotation", stack  # QK^T, PV
            continue
        assert parsed["role"] in vocabulary.GEMM_ROLES and parsed["role_source"] == "annotation", stack
        m, n, k = parsed["shape_m"], parsed["shape_n"], parsed["shape_k"]
        tokens = 2 * 8 if nvtx.phase_of(list(stack)) != "decode" else 2
        assert m == tokens
        x = shapes[1] if op == "addmm" else shapes[0]  # addmm(bias, x, w)
        assert x[-1] == k and (op != "linear" or shapes[1] == (n, k)), (op, shapes, stack[-1])
        found.add((parsed["role"], n, k))
    assert found == _expected_projections(family, config)


def test_every_kernel_in_a_layer_has_one_of_the_six_roles(hf_run):
    """Through ingest's own parser, with the names a GPU kernel would carry: every op that would
    launch a kernel inside a decoder layer lands in one of the six roles; attention from SDPA's own
    range, with its shape."""
    family, config, _, _, recorder = hf_run
    roles = set()
    for op, stack, shapes in recorder.ops:
        if op in VIEW_OPS or not any(e.startswith("smlens:layer_") for e in stack):
            continue
        parsed = nvtx.classify(list(stack), kernel_name(op))
        assert parsed["role"] in vocabulary.ROLES, (op, stack)
        roles.add(parsed["role"])
        if op in ATTENTION_OPS or (is_eager(config) and parsed["role"] == "attention"):
            heads = config.num_attention_heads if family != "gpt2" else config.n_head
            kv_heads = heads if family == "gpt2" else config.num_key_value_heads
            decode = nvtx.phase_of(list(stack)) == "decode"
            assert parsed["role_source"] == "annotation"
            assert (parsed["attn_batch"], parsed["attn_heads"], parsed["attn_q_len"],
                    parsed["attn_head_dim"], parsed["attn_causal"]) == (2, heads, 1 if decode else 8,
                                                                         16, 0 if decode else 1)
            assert parsed["attn_kv_heads"] in (kv_heads, heads)  # repeat_kv may widen K and V
            assert parsed["attn_kv_len"] >= parsed["attn_q_len"]
            if op in ATTENTION_OPS:
                assert shapes[0] == (2, heads, parsed["attn_q_len"], 16)
    assert roles == set(vocabulary.ROLES)


def test_blocks_and_the_activation(hf_run):
    """Projections sit in their block; the MLP block holds gate/up, the activation and down."""
    _, _, _, domain, recorder = hf_run
    for stack in domain.pushed:
        parsed = nvtx.classify(list(stack), "")
        if parsed["role"] in ("qkv_proj", "o_proj", "attention"):
            assert parsed["block"] == "attention", stack
        elif parsed["role"] in ("gate_up_proj", "down_proj"):
            assert parsed["block"] == "mlp", stack
    in_mlp = {nvtx.classify(list(stack), kernel_name(op))["role"] for op, stack, _ in recorder.ops
              if op not in VIEW_OPS and nvtx.block_of(list(stack)) == "mlp"}
    assert in_mlp == {"gate_up_proj", "elementwise", "down_proj"}


def test_outputs_identical_with_and_without_annotation(annotated):
    """Same tokens and the same logits bit for bit with the annotation pushing its ranges."""
    for family in ("llama", "gpt2"):
        model, _ = hf_model(family)
        with torch.no_grad():
            plain = generate_twice(model)
            annotator, domain = annotated()
            ranged = generate_twice(model)
            annotator.remove()
        assert domain.pushed and annotator.forwards["decode"] == 4
        for a, b in zip(plain, ranged):
            assert torch.equal(a.sequences, b.sequences)
            assert all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))


def test_nothing_installed_without_a_tool():
    """No NVTX tool attached (`nvtx` hands out a dummy domain): nothing to annotate, so no hook
    slows a module call and SDPA stays torch's own."""
    from torch.nn.modules import module as module_mod
    hooks = (dict(module_mod._global_forward_pre_hooks), dict(module_mod._global_forward_hooks))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    annotator = Annotator(vocabulary, None).install(torch)
    assert annotator.torch_imported
    assert (dict(module_mod._global_forward_pre_hooks), dict(module_mod._global_forward_hooks)) == hooks
    assert torch.nn.functional.scaled_dot_product_attention is sdpa


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_eager_attention_is_attention(annotated, family):
    """Eager attention computes QK^T and PV as plain matmuls, with the softcap and softmax between,
    in the modeling file's eager_attention_forward: all of it runs in an attention range with the
    shapes (Gemma-2's default since transformers 5.18, where this was a GEMM with no role)."""
    model, config = hf_model(family, attn_implementation="eager")
    _, domain = annotated()
    with OpRecorder(domain) as recorder, torch.no_grad():
        generate_twice(model)
    in_layers = [(op, shapes, nvtx.classify(list(stack), kernel_name(op)))
                 for op, stack, shapes in recorder.ops
                 if op not in VIEW_OPS and any(e.startswith("smlens:layer_") for e in stack)]
    matmuls = [(shapes, parsed) for op, shapes, parsed in in_layers if op in ("matmul", "bmm")]
    assert matmuls and {(p["role"], p["role_source"]) for _, p in matmuls} == {("attention", "annotation")}
    softmax = [p for op, _, p in in_layers if op == "_softmax"]
    assert softmax and {p["role"] for p in softmax} == {"attention"}
    heads = config.num_attention_heads
    for shapes, parsed in matmuls:
        assert (parsed["attn_batch"], parsed["attn_heads"], parsed["attn_kv_heads"],
                parsed["attn_head_dim"]) == (2, heads, config.num_key_value_heads, 16)
        assert parsed["attn_causal"] == (parsed["attn_q_len"] > 1)
        # QK^T's or PV's batch of matrices: B x H of them, Sq rows
        assert shapes[0][-2] == parsed["attn_q_len"]
        assert 2 * heads in (shapes[0][0], shapes[0][0] * shapes[0][1])


class Ended(BaseException):
    """What the annotation's exit raises here instead of ending the test process."""


@pytest.mark.parametrize("targets, forwards, ended", [
    ("cold_prefill", {"cold_prefill": 1, "warm_prefill": 0, "decode": 0}, True),
    # decode step 1 is in the first generate: the second one's prefill is the last target
    ("warm_prefill,decode:1", {"cold_prefill": 1, "warm_prefill": 1, "decode": 2}, True),
    ("decode:3", {"cold_prefill": 1, "warm_prefill": 1, "decode": 4}, True),
    ("decode:4", {"cold_prefill": 1, "warm_prefill": 1, "decode": 4}, False),  # never reached
])
def test_the_program_ends_after_the_last_profiled_forward(targets, forwards, ended):
    """With SMLENS_STOP_AFTER's targets the process ends (exit 0) as the forward that meets the
    last of them returns, every range closed; a target never met lets the program finish."""
    model, _ = hf_model("llama")
    domain = RecordingDomain()
    annotator = Annotator(vocabulary, domain, stop_after=targets).install(torch)
    exits = []

    def end(code):
        exits.append((code, tuple(domain.stack), dict(annotator.forwards)))
        raise Ended

    annotator._exit = end
    try:
        with torch.no_grad():
            generate_twice(model)
    except Ended:
        pass
    finally:
        annotator.remove()
    assert exits == ([(0, (), forwards)] if ended else [])
    assert annotator.forwards == forwards
    assert annotator.status()["stopped_after"] == (targets if ended else None)


def test_setup_is_labelled_only_when_asked(annotated):
    model, _ = hf_model("llama")
    _, domain = annotated(setup=True)
    with OpRecorder(domain) as recorder, torch.no_grad():
        generate_twice(model)
    outside = [stack for op, stack, _ in recorder.ops if not any(
        e.split(":", 1)[1].split()[0] in nvtx.PHASES for e in stack)]
    assert outside and all(stack == ("smlens:setup",) for stack in outside)
    # phases are outermost whenever a forward runs: ncu's include filters rely on it
    assert all(s[0] == "smlens:setup" and len(s) == 1 or s[0] != "smlens:setup" for s in domain.pushed)
    assert {nvtx.phase_of(list(s)) for _, s, _ in recorder.ops} == {"setup", "cold_prefill",
                                                                     "warm_prefill", "decode"}


def test_no_ranges_inside_torch_compile(annotated):
    """The hooks step aside while dynamo traces: no graph break, the same result, and no range
    from inside the compiled forward (traced pushes and pops would be replayed out of pairs). The
    compiled module's own call, made eagerly, still opens the forward's phase."""
    model, _ = hf_model("llama")
    ids = torch.randint(1, 100, (2, 8))
    with torch.no_grad():
        expected = model(ids).logits
        annotator, domain = annotated()
        explained = torch._dynamo.explain(model)(ids)
        compiled_model = torch.compile(model, backend="eager")
        compiled = [compiled_model(ids).logits for _ in range(2)]
    assert explained.graph_break_count == 0
    assert all(torch.equal(c, expected) for c in compiled)
    assert [s for s in domain.pushed if len(s) > 1] == [] and domain.stack == []
    assert [s[0] for s in domain.pushed][-2:] == ["smlens:warm_prefill"] * 2


@pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                    reason="torch.compile's default backend builds C++ on the CPU")
def test_compiled_decode_steps_get_layers_and_roles():
    """Hugging Face's static cache with its compile config (default backend and mode
    "reduce-overhead", which on the CPU compiles without CUDA graphs): prefill runs eagerly and
    keeps its layers; each decode step runs `torch.compile(model.__call__)`, whose call opens its
    phase and step, and inside it the compiled code's sites open layers and roles
    (role_source compiled); the same tokens and logits bit for bit as compiled without the
    annotation (dynamo's caches reset, so neither run reuses the other's code)."""
    def generate(model):
        torch._dynamo.reset()
        config = transformers.CompileConfig(fullgraph=False)
        config._compile_all_devices = True  # Hugging Face compiles on GPUs only by default
        ids = torch.randint(1, 100, (2, 8), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            return [model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                                   min_new_tokens=3, do_sample=False, pad_token_id=0,
                                   cache_implementation="static", compile_config=config,
                                   return_dict_in_generate=True, output_logits=True)
                    for _ in range(2)]

    plain = generate(hf_model("llama")[0])
    domain = RecordingDomain()
    annotator = Annotator(vocabulary, domain).install(torch)
    try:
        ranged = generate(hf_model("llama")[0])
    finally:
        annotator.remove()
    for a, b in zip(plain, ranged):
        assert torch.equal(a.sequences, b.sequences)
        assert all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))
    assert annotator.forwards == {"cold_prefill": 1, "warm_prefill": 1, "decode": 4}
    assert annotator.status()["compiled_forwards"] == {"decode": 4}
    assert annotator.status()["compiled_annotation"] == "on"
    decode = [_messages(s) for s in domain.pushed if s[0] == "smlens:decode"]
    assert [m for m in decode if len(m) <= 2] == [m for j in range(4) for m in (["decode"], ["decode", f"step_{j}"])]
    for step in range(4):
        roles = {nvtx.classify(list(s), "k")["role"] for s in domain.pushed
                 if s[:3] == ("smlens:decode", f"smlens:step_{step}", "smlens:layer_1")
                 and f" {vocabulary.COMPILED_KEY}=1 " in s[-1]}
        assert roles == set(vocabulary.ROLES)
    parsed = nvtx.classify(list(next(s for s in domain.pushed if "down_proj M=2 " in s[-1])), "mm")
    assert (parsed["phase"], parsed["role"], parsed["role_source"], parsed["shape_m"], parsed["shape_k"]) == \
        ("decode", "down_proj", "compiled", 2, 128)
    assert ["warm_prefill", "layer_1"] in [_messages(s) for s in domain.pushed]
    assert domain.stack == []


def test_cuda_graph_replays_get_the_captured_phase():
    """A graph captured around a decode forward replays inside `decode / step_<j>`, so the eager
    order can name its kernels (CUDA graphs themselves need a GPU: a stand-in graph class here)."""
    log = []

    class Graph:
        def capture_end(self):
            log.append("capture_end")

        def replay(self):
            log.append(("replay", tuple(domain.stack)))

    domain = RecordingDomain()
    annotator = Annotator(vocabulary, domain)
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=Graph))
    annotator._wrap_cuda_graph(fake_torch)
    graph, other = Graph(), Graph()
    annotator._captured_phase = "decode"  # what a forward during capture leaves
    graph.capture_end()
    graph.replay()
    graph.replay()
    other.replay()  # a graph of no forward: nothing around it
    assert log == ["capture_end", ("replay", ("smlens:decode", "smlens:step_0")),
                   ("replay", ("smlens:decode", "smlens:step_1")), ("replay", ())]
    assert domain.stack == []


# --- vLLM's names and call structure, on the CPU ---------------------------------------------

class QKVParallelLinear(nn.Module):
    def __init__(self, hidden, head_size, heads, kv_heads):
        super().__init__()
        self.output_size_per_partition = (heads + 2 * kv_heads) * head_size
        self.weight = nn.Parameter(torch.randn(self.output_size_per_partition, hidden) * 0.05)

    def forward(self, x):
        return nn.functional.linear(x, self.weight), None


class RowParallelLinear(QKVParallelLinear):
    def __init__(self, inputs, outputs):
        nn.Module.__init__(self)
        self.output_size_per_partition = outputs
        self.weight = nn.Parameter(torch.randn(outputs, inputs) * 0.05)


class MergedColumnParallelLinear(RowParallelLinear):
    pass


class SiluAndMul(nn.Module):
    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up


class RMSNorm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return nn.functional.rms_norm(x, (x.shape[-1],), self.weight)


class RotaryEmbedding(nn.Module):
    def forward(self, positions, q, k):
        angle = positions[:, None].float() * 0.01
        return q * angle.cos(), k * angle.cos()


class Attention(nn.Module):
    """vLLM's attention layer: flattened tokens in, the attention out (here: one sequence per
    run of positions, computed with SDPA)."""

    def __init__(self, heads, head_size, kv_heads):
        super().__init__()
        self.num_heads, self.head_size, self.num_kv_heads = heads, head_size, kv_heads

    def forward(self, q, k, v):
        t = q.shape[0]
        q = q.view(1, t, self.num_heads, self.head_size).transpose(1, 2)
        k = k.view(1, t, self.num_kv_heads, self.head_size).transpose(1, 2)
        v = v.view(1, t, self.num_kv_heads, self.head_size).transpose(1, 2)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
        return out.transpose(1, 2).reshape(t, -1)


class VllmLlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_size):
        super().__init__()
        self.q_size, self.kv_size = heads * head_size, kv_heads * head_size
        self.qkv_proj = QKVParallelLinear(hidden, head_size, heads, kv_heads)
        self.o_proj = RowParallelLinear(self.q_size, hidden)
        self.rotary_emb = RotaryEmbedding()
        self.attn = Attention(heads, head_size, kv_heads)

    def forward(self, positions, hidden_states):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        out, _ = self.o_proj(self.attn(q, k, v))
        return out


class VllmLlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden, 2 * intermediate)
        self.down_proj = RowParallelLinear(intermediate, hidden)
        self.act_fn = SiluAndMul()

    def forward(self, x):
        gate_up, _ = self.gate_up_proj(x)
        out, _ = self.down_proj(self.act_fn(gate_up))
        return out


class VllmLlamaDecoderLayer(nn.Module):
    def __init__(self, hidden=64, heads=4, kv_heads=2, head_size=16, intermediate=128):
        super().__init__()
        self.self_attn = VllmLlamaAttention(hidden, heads, kv_heads, head_size)
        self.mlp = VllmLlamaMLP(hidden, intermediate)
        self.input_layernorm = RMSNorm(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)

    def forward(self, positions, hidden_states):
        hidden_states = hidden_states + self.self_attn(positions, self.input_layernorm(hidden_states))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class VllmLlamaModel(nn.Module):
    def __init__(self, layers=3):
        super().__init__()
        self.embed_tokens = nn.Embedding(100, 64)
        self.layers = nn.ModuleList(VllmLlamaDecoderLayer() for _ in range(layers))
        self.norm = RMSNorm(64)

    def forward(self, input_ids, positions):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = layer(positions, hidden_states)
        return self.norm(hidden_states)


class VllmLlamaForCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = VllmLlamaModel()

    def forward(self, input_ids, positions):
        return self.model(input_ids, positions)


def test_vllm_names_flattened_batches(annotated):
    """vLLM's fused projections, its Attention layer and a flattened batch: the model runner calls
    the model with keyword arguments, the inner model gets ids and positions positionally."""
    torch.manual_seed(0)
    model = VllmLlamaForCausalLM().eval()
    _, domain = annotated()
    with torch.no_grad(), OpRecorder(domain) as recorder:
        model(input_ids=torch.randint(0, 100, (10,)), positions=torch.arange(10))   # one prompt
        model(input_ids=torch.randint(0, 100, (2,)), positions=torch.tensor([10, 40]))  # two decodes
    messages = [_messages(s) for s in domain.pushed]
    assert [m[0] for m in messages if len(m) == 1] == ["cold_prefill", "decode"]
    roles = {(nvtx.classify(list(s), "")["role"], nvtx.classify(list(s), "")["shape_n"],
              nvtx.classify(list(s), "")["shape_k"]) for s in domain.pushed
             if nvtx.classify(list(s), "")["role_source"] == "annotation"}
    assert {("qkv_proj", 128, 64), ("o_proj", 64, 64), ("gate_up_proj", 256, 64),
            ("down_proj", 64, 128)} <= roles
    attention_layer = [m[-1] for m in messages if m[-1].startswith("attention H=")]
    assert attention_layer[0] == "attention H=4 KVH=2 D=16 module=model.layers.0.self_attn.attn"
    decode_qkv = [m for m in messages if m[0] == "decode" and m[-1].startswith("qkv_proj")]
    assert decode_qkv[0][:3] == ["decode", "step_0", "layer_0"] and "M=2 " in decode_qkv[0][-1]
    # SiluAndMul is the activation, inside the MLP block
    act = [s for op, s, _ in recorder.ops if op == "silu"]
    assert act and all(nvtx.block_of(list(s)) == "mlp" and
                       nvtx.classify(list(s), "")["role"] == "elementwise" for s in act)


def test_module_table_resolves_by_block():
    """GPT-2's c_proj and GPT-NeoX's dense are the attention output in the attention block and
    the down projection in the MLP."""
    assert vocabulary.MODULE_ROLES["c_proj"] == {"attention": "o_proj", "mlp": "down_proj"}
    annotator = Annotator(vocabulary)
    linear = nn.Linear(8, 16)
    named = []
    assert annotator._role("transformer.h.0.attn.c_proj", linear, named) == (_PROJECTION, "o_proj")
    assert annotator._role("transformer.h.0.mlp.c_proj", linear, named) == (_PROJECTION, "down_proj")
    assert annotator._role("gpt_neox.layers.0.attention.dense", linear, named)[1] == "o_proj"
    assert annotator._role("gpt_neox.layers.0.mlp.dense_4h_to_h", linear, named)[1] == "down_proj"
    assert annotator._role("model.layers.0.lm_head", linear, named)[1] == ""


# --- mixture of experts, and layers of more than one kind --------------------------------------

MOE = dict(TINY, num_local_experts=4, num_experts_per_tok=2)


def mixtral(experts_implementation=None, **extra):
    config = transformers.MixtralConfig(**MOE, **extra)
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config).eval()
    if experts_implementation:
        model.config._experts_implementation = experts_implementation
    return model, config


@pytest.mark.parametrize("implementation", [None, "eager", "batched_mm"])
def test_expert_gemms_get_their_roles_and_shapes(annotated, implementation):
    """Mixtral's experts keep their weights as 3-D parameters and multiply with function calls:
    transformers' default one grouped GEMM per projection over all experts, `batched_mm` (its
    default for decode on a GPU) a bmm over the weights gathered per (token, expert) pair, `eager`
    one F.linear per expert hit. Each gets its projection's range, M the rows it multiplies (all
    experts together: tokens x experts per token), N and K from the weight; nothing else changes."""
    model, config = mixtral(implementation)
    with torch.no_grad():
        plain = generate_twice(model)
        annotator, domain = annotated()
        with OpRecorder(domain) as recorder:
            ranged = generate_twice(model)
        annotator.remove()
    for a, b in zip(plain, ranged):
        assert torch.equal(a.sequences, b.sequences)
        assert all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))
    hidden, inter, experts = config.hidden_size, config.intermediate_size, config.num_local_experts
    expected = {"gate_up_proj": (2 * inter, hidden), "down_proj": (hidden, inter)}
    rows = {}  # (phase, role) -> rows multiplied in layer 0, over all expert GEMMs
    for op, stack, shapes in recorder.ops:
        if op not in GEMM_OPS | {"_grouped_mm"} or "smlens:layer_0" not in stack:
            continue
        parsed = nvtx.classify(list(stack), kernel_name(op))
        if parsed["block"] != "mlp":
            continue
        if parsed["role_source"] != "annotation":  # the router: a plain GEMM by its name
            assert stack[-1] == "smlens:mlp_block" and shapes[-1] == (hidden, experts), (op, stack)  # x @ W^T
            continue
        role = parsed["role"]
        assert (parsed["shape_n"], parsed["shape_k"]) == expected[role]
        assert stack[-1].endswith(f"module=model.layers.0.mlp.experts.{role}")
        assert sum(e.startswith(f"smlens:{role}") for e in stack) == 1  # one range, not nested
        assert ("experts=4" in stack[-1]) == (implementation is None) == (op == "_grouped_mm")
        m, n, k = parsed["shape_m"], parsed["shape_n"], parsed["shape_k"]
        if implementation == "batched_mm":  # bmm(W gathered [M, N, K], x [M, K, 1])
            assert op == "bmm" and shapes == ((m, n, k), (m, k, 1))
        else:
            assert shapes[0] == (m, k)
        key = (nvtx.phase_of(list(stack)), role)
        rows[key] = rows.get(key, 0) + parsed["shape_m"]
    tokens = {"cold_prefill": 2 * 8, "warm_prefill": 2 * 8, "decode": 2}
    assert rows == {(phase, role): tokens[phase] * (4 if phase == "decode" else 1) * 2
                    for phase in tokens for role in expected}


def test_layer_kinds_and_the_note_when_the_profiled_layer_is_not_all(annotated):
    """A model whose first layer is dense and the others mixture-of-experts has two kinds of layer:
    the annotation says which, and the run's notes say that layer 0 stands only for itself."""
    config = transformers.Qwen2MoeConfig(**{**TINY, "num_hidden_layers": 4}, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=64, mlp_only_layers=[0])
    torch.manual_seed(0)
    models = {"moe": transformers.Qwen2MoeForCausalLM(config).eval(), "llama": hf_model("llama")[0]}
    seen = {}
    for name, model in models.items():
        annotator, _ = annotated()
        with torch.no_grad():
            generate_twice(model)
        annotator.remove()
        seen[name] = annotator.models
    assert [m["layer_kinds"] for m in seen["moe"]] == [[[0], [1, 2, 3]]]
    assert [m["layer_kinds"] for m in seen["llama"]] == [[[0, 1]]]
    from profiler.run import program

    def notes(name, layer):
        plan = types.SimpleNamespace(regions=program.regions(vocabulary.PHASES, True, layer, False))
        return program.unlike_layers([{"models": seen[name]}] * 2, plan)  # two runs: one note

    assert notes("moe", 0) == ["Qwen2MoeForCausalLM's decoder layers are of 2 kinds (layers 0; 1-3): "
                               "the profiled layer stands for its own kind only, and layers 1-3 may "
                               "run other kernels: --layer 1 profiles one of them, --no-dedup all"]
    assert "--layer 0 profiles" in notes("moe", 2)[0]
    assert notes("llama", 0) == []
    no_dedup = types.SimpleNamespace(regions=program.regions(vocabulary.PHASES, False, 0, False))
    assert program.unlike_layers([{"models": seen["moe"]}], no_dedup) == []
