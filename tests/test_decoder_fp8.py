"""`--dtype fp8` of the built-in decoder on the CPU: e4m3 weights with one scale each, every
projection one torch._scaled_mm under its role range, the rest in bf16."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from profiler.workloads import decoder  # noqa: E402
from profiler.workloads.models import get_model  # noqa: E402
from tests.test_workloads import OpRecorder, RecordingAnnotator  # noqa: E402
from views.vocabulary import GEMM_ROLES  # noqa: E402


def _config(dtype: str) -> decoder.WorkloadConfig:
    return decoder.WorkloadConfig(get_model("tiny"), layers=2, batch=2, prompt=6, decode_steps=2, dtype=dtype)


def test_fp8_weights_are_e4m3_with_one_scale_each():
    stack = decoder.DecoderStack.build(_config("fp8"), "cpu")
    reference = decoder.DecoderStack.build(_config("bf16"), "cpu")  # same seed, same values
    for fp8, bf16 in zip(stack.weights, reference.weights):
        for name in ("qkv", "o", "gate_up", "down"):
            weight = getattr(fp8, name)
            assert weight.data.dtype == torch.float8_e4m3fn and weight.scale.dtype == torch.float32
            assert weight.scale.dim() == 0
            # e4m3 keeps 3 mantissa bits: within 1/16 of each value, or of the smallest normal
            restored = weight.data.float() * weight.scale
            original = getattr(bf16, name).float()
            assert ((restored - original).abs() <= original.abs() / 16 + 2 ** -6 * weight.scale).all()
        assert fp8.norm_attn.dtype == torch.bfloat16 and fp8.qkv_bias.dtype == torch.bfloat16
    assert stack.k_cache[0].dtype == torch.bfloat16


def test_every_projection_is_one_scaled_mm_in_its_role_range():
    ann = RecordingAnnotator()
    with OpRecorder(ann) as ops:
        result = decoder.run(_config("fp8"), device="cpu", ann=ann)
    assert result["finite"]
    # the innermost range's name: `smlens:qkv_proj M=.. N=.. K=..` -> qkv_proj
    gemms = [(op, stack[-1].split(":", 1)[1].split(" ")[0] if stack else "") for op, stack in ops.ops
             if op in ("_scaled_mm", "mm", "addmm", "bmm", "linear")]
    assert {role for op, role in gemms if op == "_scaled_mm"} == set(GEMM_ROLES)
    assert all(op == "_scaled_mm" for op, role in gemms if role in GEMM_ROLES)
    # 2 layers x 4 projections x (cold prefill, warm prefill, 2 decode steps)
    assert sum(op == "_scaled_mm" for op, _ in gemms) == 2 * 4 * 4


def test_fp8_output_stays_near_bf16():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 64, dtype=torch.bfloat16)
    stack = decoder.DecoderStack.build(_config("fp8"), "cpu")
    reference = decoder.DecoderStack.build(_config("bf16"), "cpu")
    ann = decoder.Annotator(enabled=False)
    with torch.inference_mode():
        out, expected = stack.forward(x, 0, ann).float(), reference.forward(x, 0, ann).float()
    error = (out - expected).norm() / expected.norm()
    assert 0 < error < 0.1  # quantized, so not equal; per-tensor e4m3, so close


def test_fp8_in_the_command_line():
    config = _config("fp8")
    assert "--dtype" in config.argv() and config.argv()[config.argv().index("--dtype") + 1] == "fp8"
    parsed, _ = decoder._parse(config.argv())
    assert parsed.dtype == "fp8"
    from profiler.errors import BadInput
    with pytest.raises(BadInput, match="--dtype 'int4'"):
        _config("int4")
