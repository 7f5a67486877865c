"""The CUDA C++ deterministic kernels (det_sgemm.cu, cuda_gemm.py) without a GPU: the compiled
configuration tables, the IEEE build flags, the fallback to the Gluon kernels when nvcc is missing,
fails or the operands do not fit, the dispatch by M bucket, and where nvcc is installed the build itself
read back as SASS (FFMA only, no flush-to-zero, no spill, one barrier per tile; marked `cuda_build`,
which CI without a GPU skips). What the H200 said of them, call by call, is read back from the
committed records by tests/records/test_h200_det_calls.py."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from profiler.workloads.deterministic import cuda_gemm  # noqa: E402
from profiler.workloads.deterministic import kernels as det  # noqa: E402
from profiler.workloads.deterministic import reference as ref  # noqa: E402

DATA = Path(__file__).parent / "data" / "h200_det"
LLAMA_8B = {"qkv_proj": (6144, 4096), "o_proj": (4096, 4096), "gate_up_proj": (28672, 4096),
            "down_proj": (4096, 14336)}
TILE = cuda_gemm.CudaTileConfig(128, 128, 8, 8, 8, True, 2)
GEMV = cuda_gemm.CudaGemvConfig(16, 2, 4, 16)
# CUDA_DECODE_RULES' choices per bucket as calls 7 and 8 measured them (call 13 changed M = 16's)
_N8, _W8, _N16 = "dec8_2c_w4_d8_ring4_b8_ef_wide", "dec8_8c_w4_d4_ring3_b4_ef", "dec8_4c_w4_d8_ring3_b6_ef_wide"
CALL7_CHOICE = {8: {"qkv_proj": _N8, "o_proj": _N8, "gate_up_proj": _W8, "down_proj": _W8},
                16: {"qkv_proj": _N16, "o_proj": _N16, "gate_up_proj": "dec16_4c_w4_d4_ring4_b4_ef_wide",
                     "down_proj": "dec16_8c_w4_d8_ring2_b3_ef"}}


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """No library loaded or refused yet in this process; builds go to a temporary folder."""
    monkeypatch.setattr(cuda_gemm, "_LIBS", {})
    monkeypatch.setattr(cuda_gemm, "_FAILED", {})
    monkeypatch.setenv("SMLENS_CACHE", str(tmp_path))
    monkeypatch.delenv(cuda_gemm.ENV_DISABLE, raising=False)
    return tmp_path


# --- the configuration tables ------------------------------------------------------------------------

def test_tile_table_geometry_matches_the_kernel_asserts():
    """Every compiled tile configuration: warps of 4 x 8 threads, every thread loads a whole 16-byte
    x vector and 8-byte W vector per tile, and BK divides the chain and the K multiple (so a tile
    never straddles two chains)."""
    cfgs = cuda_gemm.compiled_configs()
    assert TILE in cfgs and len(cfgs) >= 5
    assert len({c.name for c in cfgs}) == len(cfgs)
    for c in cfgs:
        ty, tx = c.block_m // c.tm, c.block_n // c.tn
        assert c.tm % 4 == 0 and c.tn % 4 == 0 and ty % 4 == 0 and tx % 8 == 0, c
        assert c.threads == ty * tx and c.threads % 32 == 0 and c.threads <= 1024
        for extent in (c.block_m, c.block_n):
            assert (extent * c.block_k) % (4 * c.threads) == 0 and extent * c.block_k >= 4 * c.threads, c
        assert ref.CHAIN_K % c.block_k == 0 and det.K_MULTIPLE % c.block_k == 0


def test_gemv_table_fits_the_chains():
    cfgs = cuda_gemm.compiled_gemv_configs()
    assert GEMV in cfgs and {c.rows for c in cfgs} == {1, 8, 16}
    for c in cfgs:
        assert c.tn in (2, 4, 8)                     # one 4-, 8- or 16-byte load per k row
        assert ref.CHAIN_K % (2 * c.depth) == 0 and det.K_MULTIPLE % (2 * c.depth) == 0
    assert cuda_gemm.GEMV_CHAIN == ref.CHAIN_K == int(re.search(r"GEMV_CHAIN = (\d+);", cuda_gemm.SOURCE.read_text())[1])


def test_tables_read_from_the_source_text():
    src = ("#define DET_SGEMM_VARIANTS(X) \\\n  X(64, 128, 16, 8, 8, true, 2)  \\\n"
           "  X(128, 64, 8, 8, 8, false, 1, true)\n\n"
           "#define DET_GEMV_VARIANTS(X) \\\n  X(8, 4, 2, 16)\n\nX(1, 1, 1, 1)\n")
    assert cuda_gemm.compiled_configs(src) == [cuda_gemm.CudaTileConfig(64, 128, 16, 8, 8, True, 2),
                                               cuda_gemm.CudaTileConfig(128, 64, 8, 8, 8, False, 1, True)]
    assert cuda_gemm.compiled_gemv_configs(src) == [cuda_gemm.CudaGemvConfig(8, 4, 2, 16)]


def test_build_is_ieee():
    cmd = cuda_gemm.build_command("nvcc", "90", cuda_gemm.SOURCE, Path("x.so"))
    assert "-gencode=arch=compute_90a,code=sm_90a" in cmd       # det_prefill_ws.cu's setmaxnreg
    assert "-gencode=arch=compute_80,code=sm_80" in cuda_gemm.build_command("nvcc", "80", cuda_gemm.SOURCE, Path("x"))
    assert "-ftz=false" in cmd and "-prec-div=true" in cmd
    assert not any("fast_math" in a or "fast-math" in a or a == "-ftz=true" for a in cmd)
    assert "--fmad=false" not in cmd                  # the kernel's FMAs are explicit either way


# --- fallback and dispatch ---------------------------------------------------------------------------

def test_no_nvcc_means_no_library(fresh_cache, monkeypatch):
    monkeypatch.setattr(cuda_gemm, "find_nvcc", lambda: None)
    assert cuda_gemm.load("90") is None
    assert "no nvcc" in cuda_gemm.why_not("90")


def test_disabled_by_environment(fresh_cache, monkeypatch):
    monkeypatch.setenv(cuda_gemm.ENV_DISABLE, "0")
    monkeypatch.setattr(cuda_gemm, "find_nvcc", lambda: pytest.fail("must not look for nvcc"))
    assert cuda_gemm.load("90") is None
    assert cuda_gemm.why_not("90") == "SMLENS_DET_CUDA=0"


def test_failed_build_is_remembered_and_leaves_nothing(fresh_cache, monkeypatch, tmp_path):
    """An nvcc that fails: no library, nvcc's message kept, no half-written file, no second try."""
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo fake 1.0; exit 0; fi\n"
                    "echo 'det_sgemm.cu(1): error: broken' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv(cuda_gemm.ENV_NVCC, str(fake))
    assert cuda_gemm.find_nvcc() == str(fake)
    assert cuda_gemm.load("90") is None
    assert "nvcc failed (3)" in cuda_gemm.why_not("90") and "broken" in cuda_gemm.why_not("90")
    assert not list((fresh_cache / "det_sgemm").rglob("*.so"))
    monkeypatch.setattr(cuda_gemm, "build", lambda *a: pytest.fail("built twice"))
    assert cuda_gemm.load("90") is None


def test_operands_the_kernels_decline():
    """CPU tensors (and so any operand here) never reach ctypes: linear, gemv_partials and
    gemv_linear say None (gemv_linear also for a configuration that is not det_decode.cu's)."""
    x = torch.zeros(256, 512)
    wt = torch.zeros(512, 1024, dtype=torch.bfloat16)
    assert not cuda_gemm.fits(x, wt, None, TILE, ref.CHAIN_K)
    assert cuda_gemm.linear(x, wt, None, TILE, ref.CHAIN_K) is None
    assert cuda_gemm.gemv_partials(x[:16], wt, GEMV, ref.CHAIN_K) is None
    decode = det.CUDA_DECODE_RULES[16][0][2]
    assert cuda_gemm.gemv_linear(x[:16], wt, None, decode, ref.CHAIN_K, det.CUDA_FOLD_MODE) is None
    assert cuda_gemm.gemv_linear(x[:16], wt, None, GEMV, ref.CHAIN_K, det.CUDA_FOLD_MODE) is None


def test_a_gpu_without_the_tiles_shared_memory_is_told_apart_from_a_failed_launch():
    """det_sgemm answers -3 when cudaFuncSetAttribute refuses the tile's shared memory (nothing ran):
    NoSharedMemory, on which `linear` returns None and the Gluon kernel runs; any other code raises."""
    lib = object.__new__(cuda_gemm.Library)
    lib.index = {TILE: 0}
    x, wt = torch.zeros(4, 8), torch.zeros(8, 16, dtype=torch.bfloat16)
    for code, error in ((cuda_gemm.NO_SHARED_MEMORY, cuda_gemm.NoSharedMemory), (1, RuntimeError)):
        lib.lib = type("Stub", (), {"det_sgemm": staticmethod(lambda *a, code=code: code)})()
        with pytest.raises(error) as info:
            lib.launch(TILE, x, wt, None, torch.zeros(4, 16), ref.CHAIN_K, 0)
        assert isinstance(info.value, cuda_gemm.NoSharedMemory) == (code == cuda_gemm.NO_SHARED_MEMORY)
    assert cuda_gemm.NO_SHARED_MEMORY == -3 and "return -3;" in cuda_gemm.SOURCE.read_text()


def test_choose_config_uses_adopted_cuda_kernels_by_bucket(monkeypatch):
    monkeypatch.setattr(det, "CUDA_TILE_CONFIG", TILE)
    monkeypatch.setattr(det, "CUDA_TILE_MIN_M", 256)
    monkeypatch.setattr(det, "CUDA_GEMV_CONFIGS", {16: GEMV})
    monkeypatch.setattr(det, "CUDA_DECODE_RULES", {})
    assert det.choose_config(2048, 4096, 4096) == TILE
    assert det.choose_config(129, 4096, 4096) == TILE           # bucket 256
    assert det.choose_config(128, 4096, 4096) == det.TILE_CONFIG
    assert det.choose_config(16, 4096, 4096) == GEMV and det.choose_config(9, 4096, 4096) == GEMV
    assert det.choose_config(8, 4096, 4096) == det.GEMV_CONFIGS[8]
    assert det.choose_config(2048, 4096, 100) is None            # K % 32: the portable kernel


def test_decode_rules_choose_by_n_and_k():
    """M = 5..16 run det_decode.cu by (N, K): down (long K) and gate_up (wide N) wider register
    blocks, qkv and o at M = 9..16 blocks of 8 rows; M = 1..4 and 17.. keep the Gluon kernels, and
    every adopted configuration is compiled and bit-checked on the device by its own rows."""
    pick = {M: {role: det.choose_config(M, N, K).name for role, (N, K) in LLAMA_8B.items()} for M in (5, 8, 9, 16)}
    assert pick[5] == pick[8] == CALL7_CHOICE[8]
    narrow16 = "dec8_4c_w4_d16_ring2_b6_ef_wide_o1"       # blocks of 8 rows
    assert pick[9] == pick[16] == {"qkv_proj": narrow16, "o_proj": narrow16,
                                   "gate_up_proj": "dec16_4c_w4_d8_ring3_b4_ef_wide_o1",
                                   "down_proj": "dec16_8c_w4_d8_ring2_b3_ef_o5"}
    for M in (1, 2, 4, 17, 64):
        assert det.choose_config(M, 28672, 4096) == det.GEMV_CONFIGS[det._next_pow2(M)]
    compiled = cuda_gemm.compiled_decode_configs()
    for rules in det.CUDA_DECODE_RULES.values():
        assert rules[-1][:2] == (0, 0)                  # a catch-all last
        assert all(cfg in compiled for _, _, cfg in rules)
    # operands the kernel does not take (N not a multiple of its columns) fall back to the Gluon kernel
    assert not cuda_gemm.gemv_fits(torch.zeros(16, 4096), torch.zeros(4096, 1000, dtype=torch.bfloat16),
                                   det.choose_config(16, 1000, 4096), ref.CHAIN_K)


def test_nothing_cuda_adopted_without_a_measurement():
    """The CUDA kernels run by default only once an H200 call adopted them (BENCHMARKS.md)."""
    assert det.choose_config(2048, 4096, 4096) in (det.TILE_CONFIG, det.CUDA_TILE_CONFIG)
    for bucket, cfg in det.CUDA_GEMV_CONFIGS.items():
        assert cfg.rows == bucket and cfg in cuda_gemm.compiled_gemv_configs()
    if det.CUDA_TILE_CONFIG is not None:
        assert det.CUDA_TILE_CONFIG in cuda_gemm.compiled_configs() + cuda_gemm.compiled_ws_configs()


@pytest.fixture
def no_device_run(monkeypatch):
    """det_linear on meta tensors (past its CPU emulation branch), the launches recorded."""
    pytest.importorskip("triton")
    ran = []
    monkeypatch.setattr(det, "_launch_tile", lambda x, wt, bias, cfg, chain_k: ran.append(cfg) or "gluon tile")
    monkeypatch.setattr(det, "_launch_gemv", lambda x, wt, bias, cfg, chain_k, fold=True: ran.append(cfg) or "gluon gemv")
    monkeypatch.setattr(det, "HAVE_GLUON", True)
    return ran


def test_det_linear_falls_back_to_gluon_when_cuda_declines(no_device_run, monkeypatch):
    x = torch.empty(2048, 4096, device="meta")
    wt = torch.empty(4096, 6144, dtype=torch.bfloat16, device="meta")
    assert det.det_linear(x, wt, config=TILE) == "gluon tile"
    assert det.det_linear(x[:16], wt, config=GEMV) == "gluon gemv"
    assert no_device_run == [det.TILE_CONFIG, det.GEMV_CONFIGS[16]]


def test_det_linear_takes_the_cuda_result_when_there_is_one(no_device_run, monkeypatch):
    x = torch.empty(2048, 4096, device="meta")
    wt = torch.empty(4096, 6144, dtype=torch.bfloat16, device="meta")
    monkeypatch.setattr(cuda_gemm, "linear", lambda *a: "cuda tile")
    monkeypatch.setattr(det, "_launch_cuda_gemv", lambda *a: "cuda gemv")
    monkeypatch.setattr(det, "CUDA_TILE_CONFIG", TILE)
    assert det.det_linear(x, wt) == "cuda tile"
    assert det.det_linear(x[:16], wt, config=GEMV) == "cuda gemv"
    assert no_device_run == []


# --- the build, where nvcc is installed ---------------------------------------------------------------

def _sass_by_kernel(sass: str) -> dict[str, str]:
    parts = re.split(r"\n\s*Function : ", sass)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


def _build_cache() -> str:
    """Where the tests' builds are kept between runs. A build is named by the kernel sources, the
    architecture and nvcc's version (cuda_gemm.library_path), this folder by cuda_gemm.py (its
    flags): a change to any of them builds anew, an unchanged tree builds once per machine."""
    key = hashlib.sha256(Path(cuda_gemm.__file__).read_bytes()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(base / "smlens-tests" / f"det_cuda-{key}")


@pytest.fixture(scope="module")
def built():
    """The library built for sm_90 here (no GPU needed to build or to load it), and its SASS."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SMLENS_CACHE", _build_cache())
    yield from _built()
    mp.undo()


def _built():
    nvcc = cuda_gemm.find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    cuobjdump = cuda_gemm.find_cuobjdump(nvcc)
    if cuobjdump is None:
        pytest.skip("no cuobjdump")
    path = cuda_gemm.build(nvcc, "90")
    sass = cuda_gemm.sass_of(path, nvcc)
    usage = subprocess.run([cuobjdump, "--dump-resource-usage", str(path)], capture_output=True,
                           text=True, timeout=300).stdout
    yield path, _sass_by_kernel(sass), usage


@pytest.mark.cuda_build
def test_library_builds_for_ampere_with_every_configuration(monkeypatch):
    """Compute capability 8.0 builds too (the mbarrier waits poll with test_wait there, setmaxnreg
    and the programmatic launch are left out), with every configuration of the tables: the CUDA
    kernels, not only the Gluon ones, run on GPUs other than the H200's."""
    nvcc = cuda_gemm.find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    monkeypatch.setenv("SMLENS_CACHE", _build_cache())
    lib = cuda_gemm.Library(cuda_gemm.build(nvcc, "80"))
    assert lib.configs == cuda_gemm.compiled_configs() and lib.ws_configs == cuda_gemm.compiled_ws_configs()
    assert lib.decode_configs == cuda_gemm.compiled_decode_configs()


@pytest.mark.cuda_build
def test_library_loads_and_agrees_with_the_tables(built):
    lib = cuda_gemm.Library(built[0])
    assert lib.configs == cuda_gemm.compiled_configs()
    assert lib.has(TILE) and lib.has(GEMV) and lib.has(dataclasses.replace(GEMV, fold_block=256))
    assert not lib.has(cuda_gemm.CudaTileConfig(64, 64, 8, 4, 4))
    assert lib.ws_configs == cuda_gemm.compiled_ws_configs() and lib.has(lib.ws_configs[0])
    assert not lib.has(cuda_gemm.CudaWsConfig(8, 9))


@pytest.mark.cuda_build
def test_tile_kernels_are_ieee_fp32_fma(built):
    """Each tile kernel: BK x TM x TN FFMAs per tile (unrolled, a multiple of it in all), none with
    .FTZ, no tensor-core instruction, one barrier in the k loop, no spilled register."""
    _, kernels, usage = built
    tile = {k: v for k, v in kernels.items() if "det_sgemm_kernel" in k}
    assert len(tile) == len(cuda_gemm.compiled_configs())
    for name, sass in tile.items():
        bm, bn, bk, tm, tn = map(int, re.search(r"kernelILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", name).groups())
        ffma = len(re.findall(r"\bFFMA\b", sass))
        assert ffma >= bk * tm * tn and ffma % (bk * tm * tn) == 0, name
        assert "FFMA.FTZ" not in sass and "FADD.FTZ" not in sass and "FMUL" not in sass
        for op in ("HMMA", "HGMMA", "IMMA", "DFMA"):
            assert op not in sass
        assert sass.count("BAR.SYNC") <= 2, name
        flags = int(re.search(r"ELb[01]ELi(\d+)EEEv", name).group(1))
        if flags & 4:    # the mbarrier ring: arrivals and phase waits, one barrier (the set-up's)
            assert "SYNCS.ARRIVE" in sass and "SYNCS.PHASECHK" in sass and sass.count("BAR.SYNC") == 1, name
    # "Function NAME:" then its "REG:.. STACK:.. SHARED:.. LOCAL:.." line
    local = dict(re.findall(r"Function (\S+):\s*\n\s*REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:(\d+)", usage))
    assert len(local) == (len(cuda_gemm.compiled_configs()) + len(cuda_gemm.compiled_gemv_configs())
                          + len(cuda_gemm.compiled_decode_configs()) + len(cuda_gemm.compiled_ws_configs())
                          + FOLD_KERNELS)
    assert set(local.values()) == {"0"}
    # a spill shows as a stack frame, not as LOCAL
    stack = dict(re.findall(r"Function (\S+):\s*\n\s*REG:\d+ STACK:(\d+)", usage))
    assert {v for k, v in stack.items() if "det_sgemm_kernel" in k or "det_ws_kernel" in k} == {"0"}


@pytest.mark.cuda_build
def test_ws_kernels_move_registers_to_the_consumers_and_wait_on_mbarriers(built):
    """det_prefill_ws.cu: BK x 8 x 16 FFMAs per tile (IEEE), the producer warpgroup gives registers
    up and the consumers take them (setmaxnreg: without it, 168 a thread and spills), one barrier
    (the set-up's), mbarrier waits and arrivals in the k loop, no spill."""
    _, kernels, usage = built
    ws = {k: v for k, v in kernels.items() if "det_ws_kernel" in k}
    assert len(ws) == len(cuda_gemm.compiled_ws_configs())
    for name, sass in ws.items():
        bk = int(re.search(r"kernelILi(\d+)E", name).group(1))
        ffma = len(re.findall(r"\bFFMA\b", sass))
        assert ffma >= bk * 8 * 16 and ffma % (bk * 8 * 16) == 0, name
        assert "FFMA.FTZ" not in sass and "FMUL" not in sass and "HGMMA" not in sass
        assert "USETMAXREG.DEALLOC" in sass and "USETMAXREG.TRY_ALLOC" in sass, name
        assert sass.count("BAR.SYNC") == 1 and "SYNCS.ARRIVE" in sass and "SYNCS.PHASECHK" in sass, name
        assert re.search(rf"Function {name}:\s*\n\s*REG:168 STACK:0 ", usage), name


@pytest.mark.cuda_build
def test_gemv_kernels_are_fp32_fma_without_a_barrier_in_the_loop(built):
    _, kernels, _ = built
    gemv = {k: v for k, v in kernels.items() if "det_gemv_kernel" in k}
    assert len(gemv) == len(cuda_gemm.compiled_gemv_configs())
    for name, sass in gemv.items():
        mb, tn, nw, d = map(int, re.search(r"kernelILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", name).groups())
        assert len(re.findall(r"\bFFMA\b", sass)) >= 2 * d * mb * tn, name
        assert "FFMA.FTZ" not in sass and "HMMA" not in sass
        assert sass.count("BAR.SYNC") == 1, name        # the x slice only


FOLD_KERNELS = 2 * 2 * 2   # det_fold_kernel: with and without a bias, x waiting or not, x 8 or 16 loads


@pytest.mark.cuda_build
def test_decode_kernels_are_fp32_fma_without_a_barrier_in_the_loop(built):
    """det_decode.cu: every configuration's SASS holds its register block's FFMAs (none flushing
    to zero), one barrier (the x slice, before the k loop), and in ring mode the weights arrive by
    cp.async (LDGSTS) and are waited for per thread (DEPBAR), not by a barrier; each lets the fold
    kernel launch early (PREEXIT)."""
    _, kernels, _ = built
    dec = {k: v for k, v in kernels.items() if "det_decode_kernel" in k}
    assert len(dec) == len(cuda_gemm.compiled_decode_configs())
    for name, sass in dec.items():
        mb, tn, nw, d, p, minb, fl = map(int, re.search(r"kernelILi(\d+)" + r"ELi(\d+)" * 6 + "E", name).groups())
        assert len(re.findall(r"\bFFMA\b", sass)) >= d * mb * tn, name
        assert "FFMA.FTZ" not in sass and "HMMA" not in sass and "FMUL" not in sass
        assert sass.count("BAR.SYNC") == 1, name
        assert "LDGSTS" in sass and "DEPBAR" in sass and "PREEXIT" in sass, name
        width = 16 if fl & 2 else 2 * tn                   # wide copies: 16 bytes shared by a thread group
        assert re.search(r"LDGSTS\.E(\.BYPASS)?(\.LTC128B)?\." + str(8 * width) + r"\b", sass) or width == 4, name


@pytest.mark.cuda_build
def test_no_async_copy_names_an_odd_descriptor_register(built):
    """Every cp.async (LDGSTS) of the library built here takes its 64-bit memory descriptor from an
    even uniform register: cuda_gemm.load refuses a build where one does not (see the next tests)."""
    _, kernels, _ = built
    listing = "".join("\n  Function : " + text for text in kernels.values())
    assert len(cuda_gemm.ODD_DESCRIPTOR.findall(listing)) > 100         # the copies are there to check
    assert cuda_gemm.odd_descriptor_kernels(listing) == []


SASS_15D = DATA / "sass15d_ldgsts.txt"
CRASHED = ["_ZN7det_dec17det_decode_kernelILi16ELi8ELi4ELi8ELi2ELi3ELi85EEEvPKfPKtPfiii",
           "_ZN7det_dec17det_decode_kernelILi8ELi4ELi4ELi4ELi3ELi7ELi7EEEvPKfPKtPfiii"]


def test_odd_descriptor_kernels_finds_the_two_that_stopped_the_h200():
    """The SASS of the two configurations that stopped the H200 with an illegal instruction (call
    15d's 16 x 8 with flag 64, call 14b's (8, 4, 4, 4, 3, 7, 7)) against the adopted 16 x 8 kernel's:
    exactly the two are named (DETERMINISM_NOTES.md, call 15d)."""
    sass = SASS_15D.read_text()
    assert sass.count("Function : ") == 3
    assert cuda_gemm.odd_descriptor_kernels(sass) == CRASHED


def test_load_refuses_a_build_whose_copies_name_an_odd_descriptor(tmp_path, monkeypatch):
    """A build whose SASS has such a copy is not loaded: load() answers None with the reason (the
    Gluon kernels run, the same bits), and the verdict is kept beside the library, so the next
    process reads it instead of disassembling again."""
    lib = tmp_path / "sm90-x" / "det_sgemm.so"
    lib.parent.mkdir()
    lib.write_bytes(b"not loaded")
    reads = []
    monkeypatch.setattr(cuda_gemm, "_LIBS", {})
    monkeypatch.setattr(cuda_gemm, "_FAILED", {})
    monkeypatch.setattr(cuda_gemm, "disabled", lambda: False)
    monkeypatch.setattr(cuda_gemm, "find_nvcc", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(cuda_gemm, "nvcc_version", lambda nvcc=None: "release 13.0")
    monkeypatch.setattr(cuda_gemm, "build", lambda nvcc, arch: lib)
    monkeypatch.setattr(cuda_gemm, "sass_of", lambda path, nvcc: reads.append(path) or SASS_15D.read_text())
    assert cuda_gemm.load("90") is None
    why = cuda_gemm.why_not("90")
    assert "2 kernels" in why and "odd descriptor" in why and CRASHED[0] in why
    assert json.loads((lib.parent / "sass_check.json").read_text()) == {"odd_descriptor": CRASHED}
    assert cuda_gemm.unsafe_kernels(lib, "/opt/cuda/bin/nvcc") == CRASHED and reads == [lib]


@pytest.mark.cuda_build
def test_fold_kernels_add_in_fp32_and_wait_as_their_mode_says(built):
    """det_fold_kernel: IEEE FP32 adds only (no FMA that could fuse a product in, no flush to
    zero), a round of 8 or 16 float4 loads unrolled; the waiting form waits for the decode grid
    (ACQBULK), the other does not."""
    _, kernels, _ = built
    fold = {k: v for k, v in kernels.items() if "det_fold_kernel" in k}
    assert len(fold) == FOLD_KERNELS
    for name, sass in fold.items():
        bias, wait, loads = re.search(r"det_fold_kernelILb([01])ELb([01])ELi(\d+)E", name).groups()
        assert "FADD" in sass and "FADD.FTZ" not in sass and "FFMA" not in sass and "FMUL" not in sass, name
        assert ("ACQBULK" in sass) == (wait == "1"), name
        assert len(re.findall(r"\bLDG\.E\.128\b", sass)) >= int(loads) + 1, name   # a round unrolled


SASS_BANKS = Path(__file__).parents[1] / "benchmarks" / "sass_banks.py"


def _bank_counts(library: Path, kernel: str) -> dict[int, dict]:
    """benchmarks/sass_banks.py's counts (FFMAs; those reading every operand from the register banks,
    none from the reuse cache) of the library's kernels whose mangled name holds `kernel`, by their
    last template argument (the flags). The tool runs here, so it cannot rot unseen."""
    proc = subprocess.run([sys.executable, str(SASS_BANKS), str(library), "--kernel", kernel, "--format", "json"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SASS_BANKS.parents[1])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    flags = lambda name: int((re.search(r"(\d+)>$", name) or re.search(r"ELi(\d+)EEEvPKf", name)).group(1))
    return {flags(name): counts for name, counts in json.loads(proc.stdout).items()}


@pytest.mark.cuda_build
def test_decode_snake_order_halves_the_ffmas_without_a_reused_operand(built):
    """Call 13's adopted gate_up order (flags 4: every other row's columns backwards, so a row's last
    weight is the next one's first) against the same shape in call 7's order: the same FFMAs, about
    half as many reading all three operands from the register banks (ptxas 13.0: 0.30 -> 0.15)."""
    library, _, _ = built
    by_flags = _bank_counts(library, "det_decode_kernelILi16ELi4ELi4ELi8ELi3ELi4ELi")
    plain, snake = by_flags[3], by_flags[7]
    assert plain["ffma"] == snake["ffma"] >= 8 * 16 * 4
    assert snake["ffma_no_reuse"] < 0.6 * plain["ffma_no_reuse"]

