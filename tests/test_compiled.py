"""torch.compile'd programs under the annotation (profiler/run/annotate/compiled.py), on the CPU with
inductor's C++ backend: the program runs as `smlens profile` starts it (the start-up hook first on
PYTHONPATH, a recording `nvtx` stand-in, tests/fakes/nvtx_recorder), and every kernel inductor
generates or leaves to a library gets its phase, layer, block and role ranges from inductor's
provenance record, role_source `compiled`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.ingest import nvtx
from profiler.run import annotate
from views import vocabulary
from tests.test_profile_program import fake_env  # noqa: F401 - the fake ncu, the recording nvtx

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                                reason="inductor's CPU backend builds C++")

RECORDER = Path(__file__).parent / "fakes" / "nvtx_recorder"

# A user's program: a Hugging Face Llama whose forward is compiled (inductor, default mode), a
# warm-up generate and the measured one. It prints the tokens, so a run can be compared bit for bit.
PROGRAM = '''
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                     num_hidden_layers=2, vocab_size=100, max_position_embeddings=64)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
model.forward = torch.compile(model.forward)
ids = torch.randint(1, 100, (2, 8), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    for _ in range(2):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                             min_new_tokens=3, do_sample=False, pad_token_id=0)
print(json.dumps(out.tolist()))
'''


def run_as_profiled(tmp_path: Path, program: str, annotated: bool = True) -> tuple:
    """(exit code, stdout, stderr, the recorded stacks, the annotation's status)."""
    script = tmp_path / "prog.py"
    script.write_text(program)
    log, status_dir = tmp_path / "nvtx.jsonl", tmp_path / "status"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMLENS_", "TORCHINDUCTOR_"))}
    env.update(FAKE_NVTX_LOG=str(log), SMLENS_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(RECORDER), str(Path(__file__).parents[1])]))
    if annotated:
        env = annotate.program_env(env, status_dir)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    stacks = [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.exists() else []
    statuses = [json.loads(p.read_text()) for p in status_dir.glob("annotate-*.json")]
    return done.returncode, done.stdout, done.stderr, stacks, statuses


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    return run_as_profiled(tmp_path_factory.mktemp("compiled"), PROGRAM)


def _sites(stacks, phase):
    """The compiled sites' innermost ranges of a phase, as `nvtx.classify` reads them."""
    found = []
    for stack in stacks:
        if stack and nvtx.phase_of(list(stack)) == phase and f" {vocabulary.COMPILED_KEY}=1" in stack[-1]:
            found.append((stack, nvtx.classify(list(stack), stack[-1].rsplit("kernel=", 1)[-1])))
    return found


def test_a_compiled_program_runs_and_is_annotated(compiled_run):
    """The program runs to its end under the annotation (on main it died at its first compile:
    `duplicate extern kernel: gemm`, the annotation's wrappers of torch.bmm and F.linear), and the
    annotation says the compiled code was annotated."""
    code, out, err, stacks, statuses = compiled_run
    assert code == 0, err[-2000:]
    assert len(json.loads(out.strip().splitlines()[-1])) == 2
    status = next(s for s in statuses if s["torch_imported"])
    assert status["compiled_annotation"] == "on" and status["error"] is None
    assert status["forwards"]["cold_prefill"] == 1 and status["forwards"]["warm_prefill"] == 1
    assert status["compiled_forwards"]["decode"] == status["forwards"]["decode"] == 4


@pytest.mark.parametrize("phase, tokens", [("cold_prefill", 16), ("warm_prefill", 16), ("decode", 2)])
def test_compiled_kernels_get_layers_roles_and_shapes(compiled_run, phase, tokens):
    """Every phase: both layers, the six roles from the modules each kernel came from, the GEMMs
    inductor leaves to the BLAS library with their projection's M N K (M: the step's tokens)."""
    sites = _sites(compiled_run[3], phase)
    assert sites and all(parsed["role_source"] == "compiled" for _, parsed in sites)
    layered = [(stack, parsed) for stack, parsed in sites if any(e == "smlens:layer_0" for e in stack)]
    assert {parsed["role"] for _, parsed in layered} == set(vocabulary.ROLES)
    assert any("smlens:layer_1" in stack for stack, _ in sites)
    shapes = {(p["role"], p["shape_m"], p["shape_n"], p["shape_k"]) for _, p in layered if p["shape_m"]}
    assert shapes == {("qkv_proj", tokens, 64, 64), ("qkv_proj", tokens, 32, 64), ("o_proj", tokens, 64, 64),
                      ("gate_up_proj", tokens, 128, 64), ("down_proj", tokens, 64, 128)}
    attention = [p for _, p in layered if p["role"] == "attention" and p["attn_heads"]]
    assert attention and {(p["attn_heads"], p["attn_kv_heads"], p["attn_head_dim"]) for p in attention} == {(4, 2, 16)}
    # blocks as in eager mode: projections inside theirs, the norms between them outside any
    assert {p["block"] for _, p in layered if p["role"] == "gate_up_proj"} == {"mlp"}
    assert {p["block"] for _, p in layered if p["role"] == "qkv_proj"} == {"attention"}


def test_fused_kernels_spanning_roles_are_elementwise(compiled_run):
    """The kernel inductor fuses from the residual add (the layer's own code) and the next norm is
    elementwise, and the residual add of layer 0 that feeds layer 1's norm belongs to layer 1."""
    sites = _sites(compiled_run[3], "cold_prefill")
    fused = [(s, p) for s, p in sites if "_add_" in s[-1] and "rsqrt" in s[-1]]
    assert fused and {p["role"] for _, p in fused} == {"elementwise"}
    assert {p["block"] for _, p in fused} == {None}
    assert any("smlens:layer_1" in s for s, _ in fused)


def test_per_layer_dedup_filters_match_compiled_kernels(compiled_run):
    """ncu's include filter for dedup (`smlens@decode/step_1/layer_0/`) matches compiled kernels
    of that step and layer only: the decode step's every role, as in eager mode."""
    prefix = ("smlens:decode", "smlens:step_1", "smlens:layer_0")
    matched = [stack for stack in compiled_run[3]
               if stack[:3] == prefix and f" {vocabulary.COMPILED_KEY}=1 " in stack[-1]]
    roles = {nvtx.classify(list(stack), "k")["role"] for stack in matched}
    assert roles == set(vocabulary.ROLES)
    assert all("layer_1" not in entry for stack in matched for entry in stack)


def test_the_generated_code_runs_without_smlens(tmp_path):
    """The sites' import is guarded: compiled code that an annotated process wrote runs where
    smlens is absent (its site calls are no-ops)."""
    from profiler.run.annotate import compiled
    namespace = {}
    exec(compiled.HEADER.format(module="_no_such_smlens_module"), namespace)  # noqa: S102
    assert namespace[compiled.SITE]("layer_0", "qkv_proj M=1 N=2 K=3") is None


# A program whose own code cannot compile: fullgraph=True around a graph break
COMPILE_FAILS = '''
import torch
from torch import nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])
    def forward(self, x):
        torch._dynamo.graph_break()
        return self.layers[0](x)
model = Model()
model.forward = torch.compile(model.forward, fullgraph=True)
model(torch.ones(2, 3, 4))
'''


def test_a_compile_the_program_breaks_is_the_programs_failure(fake_env, tmp_path):
    """dynamo refusing the program's own code under smlens is the program's failure (exit 6, its
    last line), never smlens's (exit 70)."""
    from tests.cli import smlens
    script = tmp_path / "fails.py"
    script.write_text(COMPILE_FAILS)
    code, _, err = smlens("profile", "--store", fake_env / "store", "--quiet", "--", sys.executable, script)
    assert code == 6, err
    assert err.startswith("smlens: ") and len(err.strip().splitlines()) == 1
    assert "graph_break" in err or "Unsupported" in err
