"""`smlens profile -- CMD` for a program nobody annotated: the start-up injection in real
subprocesses (a recording `nvtx` stand-in, tests/fakes/nvtx_recorder, keeps the ranges pushed), the
plan, and bad input through the CLI with the fake ncu (tests/fakes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from profiler.ingest.store import Store
from profiler.run import annotate, ncu
from profiler.run import program as program_path
from tests.cli import smlens

FAKES = Path(__file__).parent / "fakes"
NVTX_RECORDER = FAKES / "nvtx_recorder"
DECODER_CAPTURE = Path(__file__).parent / "data" / "h200_runs" / "dedup-reference-all-layers.csv.gz"
NO_SMLENS_RANGES = Path(__file__).parent / "data" / "targeted_raw.csv"  # default-domain ranges only
needs_torch = pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None,
                                 reason="the program runs torch")

# A program as a user writes it: no smlens, no NVTX. Two prefills and two one-token forwards.
PROGRAM = '''
import sys
mode = sys.argv[1] if len(sys.argv) > 1 else "run"
if mode == "notorch":
    print("no torch here"); sys.exit(0)
import torch
from torch import nn
if mode == "noforward":
    print("torch, but no model"); sys.exit(0)

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(16, 32), nn.Linear(16, 32)
        self.act_fn, self.down_proj = nn.SiLU(), nn.Linear(32, 16)
    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.mlp = nn.LayerNorm(16), MLP()
    def forward(self, x):
        return x + self.mlp(self.input_layernorm(x))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(50, 16)
        self.layers = nn.ModuleList([Layer(), Layer(), Layer()])
    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x

torch.manual_seed(0)
model = Model()
outs = []
with torch.no_grad():
    for length in (5, 5, 1, 1):
        outs.append(model(input_ids=torch.arange(2 * length).view(2, length) % 50))
        if mode == "crash":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if mode == "exit3":
            sys.exit(3)
print("bits", b"".join(o.numpy().tobytes() for o in outs).hex())
'''
# a child of the program, started after its first forward: it is not the process smlens stops
CHILD = '''
import os, subprocess, sys
import torch
from torch import nn
model = nn.Module()
model.layers = nn.ModuleList([nn.Linear(4, 4)])
model.forward = lambda x: model.layers[0](x)
if len(sys.argv) == 1:
    code = subprocess.run([sys.executable, __file__, "child"]).returncode
    print("child exit", code, flush=True)
with torch.no_grad():
    model(torch.ones(1, 1, 4))  # decode step 0
print("stop env", os.environ.get("SMLENS_STOP_AFTER"), flush=True)
'''


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "app.py"
    path.write_text(PROGRAM)
    return path


def run_program(program, tmp_path, *args, annotate_it=True, extra_path=(), setup=False, stop_after=None):
    """The program in a fresh interpreter, with the environment `smlens profile` gives it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SMLENS_ANNOTATE_DIR")}
    if stop_after:
        env[program_path.STOP_ENV] = stop_after
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*extra_path, NVTX_RECORDER))
    env["FAKE_NVTX_LOG"] = str(tmp_path / "nvtx.jsonl")
    if annotate_it:
        env = annotate.program_env(env, tmp_path / "status", setup=setup)
    proc = subprocess.run([sys.executable, str(program), *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    log = tmp_path / "nvtx.jsonl"
    pushed = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    statuses = [json.loads(p.read_text()) for p in sorted((tmp_path / "status").glob("*.json"))]
    return proc, pushed, statuses


@needs_torch
def test_injection_in_a_real_process(program, tmp_path):
    """Started as `smlens profile` starts it, the program's forwards come out as phases, steps,
    layers, blocks and roles with shapes; its outputs are the same bits as without smlens."""
    plain, none_pushed, _ = run_program(program, tmp_path, annotate_it=False)
    assert plain.returncode == 0, plain.stderr
    assert none_pushed == []
    annotated, pushed, statuses = run_program(program, tmp_path)
    assert annotated.returncode == 0, annotated.stderr
    assert annotated.stdout == plain.stdout and "bits" in plain.stdout
    phases = [p[0] for p in pushed if len(p) == 1]
    assert phases == ["smlens:cold_prefill", "smlens:warm_prefill", "smlens:decode", "smlens:decode"]
    assert ["smlens:decode", "smlens:step_1", "smlens:layer_2", "smlens:mlp_block",
            "smlens:down_proj M=2 N=16 K=32 module=layers.2.mlp.down_proj"] in pushed
    assert ["smlens:cold_prefill", "smlens:layer_0", "smlens:mlp_block",
            "smlens:gate_up_proj M=10 N=32 K=16 module=layers.0.mlp.gate_proj"] in pushed
    assert ["smlens:warm_prefill", "smlens:layer_1",
            "smlens:elementwise module=layers.1.input_layernorm"] in pushed
    (status,) = statuses
    assert status["torch_imported"] and status["nvtx_tool"] and status["error"] is None
    assert status["forwards"] == {"cold_prefill": 1, "warm_prefill": 1, "decode": 2}
    assert status["models"] == [{"class": "Model", "layers": 3, "layer_kinds": [[0, 1, 2]]}]


@needs_torch
def test_injection_keeps_the_programs_own_modules(program, tmp_path):
    """The sitecustomize already on the path still runs, and a `profiler` package of the
    program's own is the one it imports; sys.path is as it would be without smlens."""
    site = tmp_path / "site"
    (site / "profiler").mkdir(parents=True)
    (site / "profiler" / "__init__.py").write_text("MINE = True\n")
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys, profiler, sitecustomize\n"
                     "print(os.environ.get('USER_SITECUSTOMIZE'), getattr(profiler, 'MINE', False),\n"
                     "      any('boot' in p for p in sys.path), sitecustomize.__file__)\n"
                     "print('torch' in sys.modules)\n")
    proc, _, statuses = run_program(probe, tmp_path, extra_path=[site])
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == f"ran True False {site / 'sitecustomize.py'}"
    assert second == "False"  # torch is never imported for the program
    assert statuses[0]["torch_imported"] is False


@needs_torch
@pytest.mark.parametrize("wrapped", [False, True])
def test_the_program_ends_after_its_last_profiled_forward(program, tmp_path, wrapped):
    """SMLENS_STOP_AFTER=cold_prefill: the process exits 0 right after its first forward (no
    later range, its last line never printed), and its status says so. Also when a Python
    launcher without torch starts it (the H200 image's `python3` is such a shim)."""
    if wrapped:
        launcher = tmp_path / "launcher.py"
        launcher.write_text("import subprocess, sys\n"
                            f"sys.exit(subprocess.run([sys.executable, {str(program)!r}]).returncode)\n")
    proc, pushed, statuses = run_program(launcher if wrapped else program, tmp_path,
                                         stop_after="cold_prefill")
    assert proc.returncode == 0, proc.stderr
    assert "bits" not in proc.stdout
    assert {p[0] for p in pushed} == {"smlens:cold_prefill"} and len(pushed) > 10
    status = next(s for s in statuses if s["torch_imported"])
    assert len(statuses) == 1 + wrapped
    assert status["forwards"] == {"cold_prefill": 1, "warm_prefill": 0, "decode": 0}
    assert status["stopped_after"] == "cold_prefill"


@needs_torch
def test_only_the_started_process_is_ended(tmp_path):
    """A process the program starts neither inherits the stop nor is ended (it runs on to its last
    line); the program itself ends after its forward."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    proc, _, statuses = run_program(child, tmp_path, stop_after="decode:0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["stop env None", "child exit 0"]
    assert sorted(str(s["stopped_after"]) for s in statuses) == ["None", "decode:0"]


@needs_torch
def test_setup_range_in_a_real_process(program, tmp_path):
    _, pushed, _ = run_program(program, tmp_path, setup=True)
    assert pushed[0] == ["smlens:setup"]
    assert all(p[0] != "smlens:setup" or p == ["smlens:setup"] for p in pushed)


# --- the plan -----------------------------------------------------------------------------------

def test_plan_profiles_one_layer_per_phase(program):
    code, out, _ = smlens("profile", "--plan", "--format", "json", "--", "python3", program, "--x")
    assert code == 0
    (plan,) = json.loads(out)
    cold, warm = plan["invocations"]
    assert (cold["cache_control"], warm["cache_control"]) == ("all", "none")
    assert cold["nvtx_include"] == ["smlens@cold_prefill/layer_0/"]
    assert warm["nvtx_include"] == ["smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"]
    # the compilers' caches are smlens's own (issue 26: a plain run's cache holds code without the sites)
    caches = annotate.compile_caches(dict(os.environ))
    assert set(caches) == {"TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT"}
    assert cold["env"] == {"PYTHONPATH": str(annotate.BOOT_DIR), **caches, "SMLENS_STOP_AFTER": "cold_prefill"}
    assert {k: warm["env"][k] for k in caches} == caches
    assert warm["env"]["SMLENS_STOP_AFTER"] == "warm_prefill,decode:1"
    assert cold["command"][-3:] == ["python3", str(program), "--x"]
    notes = " ".join(plan["notes"])
    assert "--include setup" in notes and "dedup: layer_0" in notes and "MODULE_ROLES" in notes
    assert "torch.compile" in notes and "--no-dedup" in notes


@pytest.mark.parametrize("args, cold, warm, stops", [
    (["--layer", "3"], ["smlens@cold_prefill/layer_3/"],
     ["smlens@warm_prefill/layer_3/", "smlens@decode/step_1/layer_3/"],
     ["cold_prefill", "warm_prefill,decode:1"]),
    # setup is profiled after the cold prefill too; a whole phase has no last forward
    (["--include", "setup"], ["smlens@cold_prefill/layer_0/", "smlens@setup/"],
     ["smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"], [None, "warm_prefill,decode:1"]),
    (["--no-dedup"], ["smlens@cold_prefill/"], ["smlens@warm_prefill/", "smlens@decode/"], [None, None]),
    (["--graph-profiling", "node"], ["smlens@cold_prefill/layer_0/"],
     ["smlens@warm_prefill/layer_0/", "smlens@decode/"], ["cold_prefill", None]),
    (["--tp", "2"], ["smlens@cold_prefill/layer_0/"],
     ["smlens@warm_prefill/layer_0/", "smlens@decode/step_1/layer_0/"], [None, None]),
])
def test_plan_options(program, args, cold, warm, stops):
    code, out, err = smlens("profile", "--plan", "--format", "json", *args, "--", "python3", program)
    assert code == 0, err
    first, second = json.loads(out)[0]["invocations"]
    assert first["nvtx_include"] == cold and second["nvtx_include"] == warm
    assert [first["env"].get("SMLENS_STOP_AFTER"), second["env"].get("SMLENS_STOP_AFTER")] == stops
    assert (first["env"].get("SMLENS_ANNOTATE_SETUP") == "1") == ("setup" in args)


@pytest.mark.parametrize("args, named", [({}, True), ({"dedup": False}, False),
                                          ({"phases": "cold_prefill,warm_prefill"}, False)])
@pytest.mark.parametrize("seen, why", [
    ({"compiled_annotation": "unavailable: this torch's inductor has no provenance tracking"},
     "ran compiled (torch.compile) and the compiled code could not be annotated"),
    ({"compiled_annotation": "on", "graph_replays": {"decode": 4}}, "replayed CUDA graphs in 4 decode"),
    ({"compiled_annotation": "on"}, None)])
def test_forwards_without_layer_ranges_are_explained(program, args, named, seen, why):
    """Decode forwards with no layer ranges (CUDA graphs replayed in them, or compiled code that
    could not be annotated): with decode filtered by layer, the reason nothing matched and a note
    after a run say why; with decode profiled whole or not at all, neither does. Compiled forwards
    whose code was annotated have their layers: nothing to explain."""
    from profiler.run.options import ProgramOptions

    argv = ("python3", str(program))
    plan = program_path.plan_program(list(argv), ["gpu__time_duration.sum"],
                                     ProgramOptions(program=argv, **args), "auto", None)
    status = {"torch_imported": True, "nvtx_tool": True, "models": [{"class": "M", "layers": 2}],
              "forwards": {"cold_prefill": 1, "warm_prefill": 1, "decode": 4},
              "compiled_forwards": {"decode": 4}, **seen}
    reason = program_path.nothing_profiled([status], plan)
    notes = program_path.missing_phases([status], plan)
    if why is None:
        assert "replayed" not in reason and "could not be annotated" not in reason
        assert not any("compiled" in n or "replayed" in n for n in notes)
    else:
        assert (why in reason) == named
        assert any(why in n for n in notes) == named


def test_plan_without_annotation_profiles_everything(program):
    code, out, _ = smlens("profile", "--plan", "--format", "json", "--no-annotate", "--", "python3", program)
    (inv,) = json.loads(out)[0]["invocations"]
    assert code == 0 and inv["nvtx_include"] == [] and inv["env"] == {}


@pytest.mark.parametrize("args, words", [
    (["--include", "weights", "--", "python3", "-c", "1"], "--include weights"),
    (["--layer", "-1", "--", "python3", "-c", "1"], "--layer -1"),
    (["--layer", "2"], "--layer 2: the stack has layers 0 to 1"),
])
def test_bad_program_input(args, words):
    code, _, err = smlens("profile", "--plan", *args)
    assert code == 2
    assert err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1


# --- running under the fake ncu ---------------------------------------------------------------------

@pytest.mark.parametrize("program_args, words", [
    (["no-such-program-here"], "program 'no-such-program-here' not found"),
    (["python3", "no_such_script.py"], "no_such_script.py: no such Python script"),
])
def test_program_not_found(program_args, words, monkeypatch, tmp_path):
    """Said before anything runs (no ncu needed); --plan still shows the commands."""
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    code, _, err = smlens("profile", "--store", tmp_path / "store", "--", *program_args)
    assert code == 2
    assert err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1
    assert smlens("profile", "--plan", "--", *program_args)[0] == 0

@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.setenv("FAKE_NCU_CSV", str(DECODER_CAPTURE))
    # the program sees an NVTX tool, as under ncu: the recording stand-in of the `nvtx` package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(NVTX_RECORDER), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FAKE_NVTX_LOG", str(tmp_path / "nvtx.jsonl"))
    for name in ("FAKE_NCU_MODE", "FAKE_SMI_MODE", "SMLENS_NCU", "SMLENS_STORE", "FAKE_NCU_ARGS_LOG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@needs_torch
def test_profile_a_program(fake_env, program):
    """Two ncu runs with the dedup filters; the duplicates skipped counted from the layers and
    decode steps the annotation saw (3 layers, 2 decode steps)."""
    store = fake_env / "store"
    code, out, err = smlens("profile", "--store", store, "--format", "json", "--quiet", "--keep",
                            fake_env / "kept", "--", sys.executable, program)
    assert code == 0, err
    # each run's program ended after the last forward its filters match
    statuses = program_path.read_status(fake_env / "kept" / "app")
    assert [(s["stopped_after"], s["forwards"]) for s in statuses] == [
        ("cold_prefill", {"cold_prefill": 1, "warm_prefill": 0, "decode": 0}),
        ("warm_prefill,decode:1", {"cold_prefill": 1, "warm_prefill": 1, "decode": 2})]
    (outcome,) = json.loads(out)
    # the fake replays the decoder capture's rows that match the filters: 17 + 17 + 20
    assert outcome["kernels"] == 54
    assert [i["label"] for i in outcome["invocations"]] == ["cold", "warm+decode"]
    assert outcome["skipped_duplicates"] == 17 * 2 + 17 * 2 + 20 * (3 * 2 - 1)
    assert outcome["notes"] == []
    tags = json.loads(Store(store, create=False).runs()["tags"].iloc[0])
    assert tags["workload"] == "command" and tags["annotate"] == "true" and tags["layer"] == "0"


@needs_torch
@pytest.mark.parametrize("mode, code, words", [
    ("crash", ncu.EXIT_WORKLOAD_FAILED, "RuntimeError: CUDA error: an illegal memory access"),
    ("exit3", ncu.EXIT_WORKLOAD_FAILED, "failed with exit code 3"),
])
def test_a_failing_program_keeps_what_was_profiled(fake_env, program, mode, code, words):
    store = fake_env / "store"
    got, _, err = smlens("profile", "--store", store, "--quiet", "--", sys.executable, program, mode)
    assert got == code
    assert err.startswith("smlens: ") and words in err and "marked partial" in err
    assert len(err.strip().splitlines()) == 1
    runs = Store(store, create=False).runs()
    # the cold run ended the program after its first forward, before the failure: the failure is
    # the second run's (the fake ncu 'profiles' its 37 rows whatever the program does)
    assert bool(runs["partial"].iloc[0]) and runs["kernel_count"].iloc[0] == 17 + 37


@needs_torch
@pytest.mark.parametrize("mode, words", [
    ("notorch", "never imported torch"),
    ("noforward", "imported torch but never called a model"),
    ("run", "the program ran 1 cold_prefill, 1 warm_prefill, 2 decode forward(s) of a model with 3"),
    ("no tool", "no NVTX tool was attached"),
])
def test_nothing_profiled_says_why(fake_env, program, monkeypatch, mode, words):
    """ncu matched nothing (here: a capture with no smlens ranges): the annotation's status says
    why, exit 9, no run stored."""
    monkeypatch.setenv("FAKE_NCU_CSV", str(NO_SMLENS_RANGES))
    if mode == "no tool":  # the real `nvtx` package, no tool: the program runs unannotated
        monkeypatch.setenv("PYTHONPATH", os.environ["PYTHONPATH"].split(os.pathsep, 1)[1])
        mode = "run"
    store = fake_env / "store"
    code, _, err = smlens("profile", "--store", store, "--quiet", "--", sys.executable, program, mode)
    assert code == ncu.EXIT_NOTHING_PROFILED
    assert err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1
    assert not (store / "runs.parquet").exists()


def test_decoder_layer_option():
    """--layer picks the built-in decoder's profiled layer too."""
    code, out, _ = smlens("profile", "--plan", "--format", "json", "--layers", "4", "--layer", "2")
    cold, warm = json.loads(out)[0]["invocations"]
    assert code == 0 and cold["nvtx_include"] == ["smlens@cold_prefill/layer_2/"]
    assert warm["nvtx_include"][-1] == "smlens@decode/step_1/layer_2/"


def test_boot_folder_holds_only_the_hook():
    """Every module in the boot folder is importable by the program: one stray would shadow the
    program's own module of that name."""
    found = sorted(p.name for p in annotate.BOOT_DIR.iterdir() if p.name != "__pycache__")
    assert found == ["sitecustomize.py"]
