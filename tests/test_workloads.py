"""The built-in decoder workload on the CPU at tiny sizes: shapes, phases, roles, annotation."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from profiler.ingest import nvtx as nvtx_parse  # noqa: E402
from profiler.errors import BadInput  # noqa: E402
from profiler.workloads import decoder  # noqa: E402
from profiler.workloads.models import MODELS, get_model  # noqa: E402
from views.vocabulary import GEMM_ROLES, ROLES  # noqa: E402


class RecordingAnnotator(decoder.Annotator):
    """Records every range as `smlens:<message>` stacks, the form ncu's NVTX column gives."""

    def __init__(self):
        super().__init__(enabled=False)
        self.active = True
        self.stack: list[str] = []
        self.opened: list[tuple[str, ...]] = []

    def range(self, message):
        recorder = self

        class _R:
            def __enter__(self):
                recorder.stack.append(f"smlens:{message}")
                recorder.opened.append(tuple(recorder.stack))

            def __exit__(self, *exc):
                recorder.stack.pop()
                return False

        return _R()


class OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Which aten ops ran under which NVTX stack."""

    def __init__(self, annotator):
        super().__init__()
        self.annotator = annotator
        self.ops: list[tuple[str, tuple[str, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func.overloadpacket.__name__), tuple(self.annotator.stack)))
        return func(*args, **(kwargs or {}))


# Ops that only describe a view of memory: no kernel on a GPU.
VIEW_OPS = {"view", "_unsafe_view", "unflatten", "transpose", "slice", "split", "split_with_sizes",
            "chunk", "select", "t", "expand", "unsqueeze", "reshape", "alias", "as_strided",
            "detach", "_reshape_alias", "permute", "squeeze", "unbind", "narrow", "split_tensor"}


def tiny(**kw) -> decoder.WorkloadConfig:
    args = dict(model=get_model("tiny"), layers=2, batch=2, prompt=6, decode_steps=3, dtype="fp32")
    args.update(kw)
    return decoder.WorkloadConfig(**args)


@pytest.fixture(scope="module")
def recorded():
    config = tiny()
    ann = RecordingAnnotator()
    with OpRecorder(ann) as ops:
        result = decoder.run(config, device="cpu", ann=ann)
    return config, ann, ops, result


def test_published_shapes():
    llama8, llama70 = get_model("llama-3.1-8b"), get_model("Llama-3.1-70B")
    assert (llama8.hidden, llama8.heads, llama8.kv_heads, llama8.head_dim, llama8.mlp) == (4096, 32, 8, 128, 14336)
    assert (llama70.hidden, llama70.heads, llama70.kv_heads, llama70.head_dim, llama70.mlp) == (8192, 64, 8, 128, 28672)
    qwen = get_model("Qwen/Qwen2.5-7B")
    assert (qwen.hidden, qwen.heads, qwen.kv_heads, qwen.head_dim, qwen.mlp, qwen.qkv_bias) == (3584, 28, 4, 128, 18944, True)
    mistral = get_model("mistral-7b")
    assert (mistral.hidden, mistral.kv_heads, mistral.mlp) == (4096, 8, 14336)
    # GEMM shapes follow: Llama-3.1-8B decode at batch 8
    assert llama8.gemm_shapes(8) == {"qkv_proj": (8, 6144, 4096), "o_proj": (8, 4096, 4096),
                                     "gate_up_proj": (8, 28672, 4096), "down_proj": (8, 4096, 14336)}
    # Gemma-2-9B's attention is wider than its hidden size: o_proj K != N
    gemma = get_model("gemma-2-9b")
    assert gemma.gemm_shapes(1)["o_proj"] == (1, 3584, 4096)
    for model in MODELS.values():
        assert model.hidden > 0 and model.heads % model.kv_heads == 0


def test_unknown_model_is_bad_input():
    with pytest.raises(BadInput, match="unknown model 'gpt-5'.*llama-3.1-8b"):
        get_model("gpt-5")


@pytest.mark.parametrize("kw, message", [
    ({"batch": 0}, "--batch"), ({"dtype": "int4"}, "--dtype"), ({"phases": ("prefill",)}, "phases"),
    ({"decode_steps": 0}, "decode"),
])
def test_bad_config(kw, message):
    with pytest.raises(BadInput, match=message):
        tiny(**kw)


def test_phases_layers_and_steps_in_order(recorded):
    config, ann, _, result = recorded
    assert result["finite"] and set(result["times_s"]) == set(decoder.PHASES)
    outer = [s[0] for s in ann.opened if len(s) == 1]
    assert outer == ["smlens:cold_prefill", "smlens:warm_prefill", "smlens:decode"]
    layers = [s for s in ann.opened if s[-1].startswith("smlens:layer_")]
    # prefill: (phase, layer); decode: (phase, step, layer)
    assert [s[1:] for s in layers if s[0] == "smlens:cold_prefill"] == [("smlens:layer_0",), ("smlens:layer_1",)]
    decode_layers = [s[1:] for s in layers if s[0] == "smlens:decode"]
    assert decode_layers == [(f"smlens:step_{j}", f"smlens:layer_{i}")
                             for j in range(config.decode_steps) for i in range(config.layers)]


def test_role_ranges_carry_their_shapes(recorded):
    """Through the capture reader's own NVTX parser: phase, role and M N K for each role range."""
    config, ann, _, _ = recorded
    m = config.model
    seen = {}
    for stack in ann.opened:
        parsed = nvtx_parse.classify(list(stack), "")
        if parsed["role_source"] != "nvtx":
            continue
        seen.setdefault((parsed["phase"], parsed["role"]), set()).add(
            (parsed["shape_m"], parsed["shape_n"], parsed["shape_k"]))
    for phase in decoder.PHASES:
        tokens = config.batch * (1 if phase == "decode" else config.prompt)
        for role in ROLES:
            assert (phase, role) in seen, (phase, role)
        for role, shape in m.gemm_shapes(tokens).items():
            assert seen[(phase, role)] == {shape}
        assert seen[(phase, "attention")] == {(None, None, None)}
    attention = [s[-1] for s in ann.opened if s[-1].startswith("smlens:attention ")]
    assert attention[0] == "smlens:attention B=2 H=4 KVH=2 Sq=6 Skv=6 D=16 causal=1"
    assert attention[-1] == "smlens:attention B=2 H=4 KVH=2 Sq=1 Skv=9 D=16 causal=0"


def test_blocks_hold_their_roles(recorded):
    """Projections and attention in the attention block, gate/up, activation and down in the MLP
    block; norms and residual adds in neither (as a Hugging Face layer nests its modules)."""
    config, ann, _, _ = recorded
    blocks = {}
    for stack in ann.opened:
        parsed = nvtx_parse.classify(list(stack), "")
        if parsed["role_source"] == "nvtx":
            blocks.setdefault(parsed["role"], set()).add(parsed["block"])
    assert blocks == {"qkv_proj": {"attention"}, "attention": {"attention"}, "o_proj": {"attention"},
                      "gate_up_proj": {"mlp"}, "down_proj": {"mlp"},
                      "elementwise": {None, "attention", "mlp"}}
    mlp_elementwise = {s[-1] for s in ann.opened if s[-2:-1] == ("smlens:mlp_block",)
                       and s[-1].startswith("smlens:elementwise")}
    assert mlp_elementwise == {f"smlens:elementwise op={config.model.activation}_mul"}


def test_every_compute_op_runs_in_a_role_range(recorded):
    """Within the phases every op that would launch a kernel has a role; matrix products only in
    the four GEMM roles, attention only in `attention`."""
    _, _, recorder, _ = recorded
    in_phases = [(op, stack) for op, stack in recorder.ops if stack and nvtx_parse.phase_of(list(stack)) != "other"]
    pairs = {(op, nvtx_parse.classify(list(stack), "")["role"]) for op, stack in in_phases}
    assert {("linear", role) for role in GEMM_ROLES} | {("scaled_dot_product_attention", "attention"),
                                                       ("rms_norm", "elementwise")} <= pairs
    for op, stack in in_phases:
        if op in VIEW_OPS:
            continue
        role = nvtx_parse.classify(list(stack), "")["role"]
        assert role in ROLES, (op, stack)
        if op in ("mm", "addmm", "bmm", "linear", "matmul"):
            assert role in GEMM_ROLES, (op, stack)
        if "attention" in op:
            assert role == "attention", (op, stack)


def test_decode_with_kv_cache_equals_a_longer_prefill():
    """The KV cache and rotary positions are right: decoding token P after a P-token prefill gives
    the last row of a (P+1)-token prefill."""
    config = tiny(decode_steps=1)
    stack = decoder.DecoderStack.build(config, "cpu")
    ann = decoder.Annotator(enabled=False)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(config.batch, config.prompt + 1, config.model.hidden, generator=gen)
    with torch.inference_mode():
        full = stack.forward(x, 0, ann)[:, -1]
        stack.forward(x[:, :-1], 0, ann)
        step = stack.forward(x[:, -1:], config.prompt, ann)[:, 0]
    assert torch.allclose(full, step, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(full, stack.forward(x[:, -1:], 0, ann)[:, 0], atol=1e-3)


def test_annotation_is_a_shared_null_context_without_a_profiler():
    ann = decoder.Annotator()
    assert not ann.active  # no tool attached to this process
    assert ann.range("qkv_proj M=1 N=2 K=3") is ann.range("decode")


def test_profiled_regions_and_filters():
    config = tiny(layers=4, decode_steps=3)
    regions = decoder.profiled_regions(config)
    assert [r.nvtx_include() for r in regions] == [
        "smlens@cold_prefill/layer_0/", "smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"]
    assert [r.repeats for r in regions] == [4, 4, 12]
    assert [r.nvtx_include() for r in decoder.profiled_regions(config, dedup=False)] == [
        "smlens@cold_prefill/", "smlens@warm_prefill/", "smlens@decode/"]
    assert decoder.representative_decode_step(1) == 0


def test_module_runs_from_the_command_line():
    out = subprocess.run([sys.executable, "-m", "profiler.workloads.decoder", "--model", "tiny",
                          "--layers", "1", "--batch", "1", "--prompt", "4", "--decode-steps", "1",
                          "--device", "cpu", "--phases", "cold_prefill,decode"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["finite"] and set(result["times_s"]) == {"cold_prefill", "decode"}
    bad = subprocess.run([sys.executable, "-m", "profiler.workloads.decoder", "--model", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown model" in bad.stderr and "Traceback" not in bad.stderr
