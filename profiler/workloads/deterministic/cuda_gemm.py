"""The deterministic GEMMs in CUDA C++ (det_sgemm.cu), built with nvcc at first use on the GPU.

Same order, same bits as the Gluon kernels (reference.py's chains). The tile kernel (large M): a
thread owns its outputs over the whole of K, in a register-blocked SGEMM layout that Gluon cannot
express (each thread's TM x TN block fed by 16-byte shared loads of 4 rows and 4 columns, one
barrier or mbarrier phase per tile); its warp-specialized form (det_prefill_ws.cu, #included by
det_sgemm.cu) leaves the tile loads to a producer warpgroup. The decode kernels (small M): one
program per (columns, chain) writes the chain's partials, each thread streaming its own weights
into registers D rows ahead (det_sgemm.cu) or through a per-thread cp.async ring in shared memory
(det_decode.cu, #included by det_sgemm.cu). The partials are folded in chain order by det_decode.cu's
fold kernel, launched with the decode kernel (`gemv_linear`; on compute capability 9.0 and up as a
programmatic dependent launch), or by kernels.py's Triton fold kernel: the same adds, the same bits.

The build: `nvcc -shared` of det_sgemm.cu (and what it includes) for the device's compute
capability, the CUDA runtime linked statically, into a cache folder keyed by the sources' hash, the
architecture and nvcc's version; the launch goes through ctypes on torch's current stream (CUDA
graphs capture it). No torch headers and no ninja, so the build takes seconds. Where nvcc is
missing or the build fails, `linear` returns None and kernels.py runs the Gluon kernel: the same
bits, slower. The same where the build's SASS (cuobjdump, once per build) gives a cp.async an odd
descriptor register: ptxas has emitted that, and such a kernel stops the GPU (`unsafe_kernels`).
IEEE arithmetic throughout: no --use_fast_math, no flush-to-zero (either would change bits).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).with_name("det_sgemm.cu")
DECODE_SOURCE = Path(__file__).with_name("det_decode.cu")   # #included by det_sgemm.cu
WS_SOURCE = Path(__file__).with_name("det_prefill_ws.cu")   # #included by det_sgemm.cu
GEMV_CHAIN = 256                         # the decode kernel's compiled chain length (det_sgemm.cu)
ENV_DISABLE = "SMLENS_DET_CUDA"          # "0": never build or run the CUDA kernel
ENV_NVCC = "SMLENS_NVCC"                 # nvcc to use (default: PATH, $CUDA_HOME, /usr/local/cuda)
GEMV_INFO_FIELDS = ("rows", "tn", "warps", "depth", "threads", "block_n", "registers", "local_bytes",
                    "blocks_per_sm")
DECODE_INFO_FIELDS = ("rows", "tn", "warps", "depth", "stages", "min_blocks", "flags", "threads", "block_n",
                      "smem_bytes", "registers", "local_bytes", "blocks_per_sm")
WS_INFO_FIELDS = ("block_k", "stages", "n_outer", "lookahead", "threads", "smem_bytes", "registers", "local_bytes",
                  "blocks_per_sm")
INFO_FIELDS = ("block_m", "block_n", "block_k", "tm", "tn", "total_smem", "min_blocks", "threads",
               "smem_bytes", "registers", "local_bytes", "blocks_per_sm", "n_outer", "flags")


@dataclass(frozen=True)
class CudaTileConfig:
    """One compiled configuration of det_sgemm.cu: BM x BN program tiles, BK k per tile, TM x TN
    outputs per thread, the running total of chain partials in shared memory or registers, and
    the __launch_bounds__ minimum of programs per SM, and the order of a k step's FMAs in the
    register block (n_outer: columns outer; speed only); flags (speed only): 2 the next tile stored
    after the barrier instead of before it, 4 three buffers with an mbarrier each instead of a
    barrier per tile, 8 (with 4) the next tile stored after the first k step and waited for before
    the last one, 16 x n (n < 16): the register block's FMAs in det_sgemm.cu's order n (`fma_slot`;
    it overrides n_outer), 256 the running total read and written as float4s. Must be one of
    `compiled_configs()`."""
    block_m: int
    block_n: int
    block_k: int
    tm: int
    tn: int
    total_smem: bool = False
    min_blocks: int = 1
    n_outer: bool = False
    flags: int = 0
    kind: str = "cuda_tile"

    @property
    def threads(self) -> int:
        return (self.block_m // self.tm) * (self.block_n // self.tn)

    @property
    def name(self) -> str:
        where = "smem" if self.total_smem else "reg"
        order = "_no" if self.n_outer else ""
        late = "_late" if self.flags & 2 else ""
        ring = ("_mbar3e" if self.flags & 8 else "_mbar3") if self.flags & 4 else ""
        fma_order = f"_o{(self.flags >> 4) & 15}" if (self.flags >> 4) & 15 else ""
        vec = "_v4" if self.flags & 256 else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_{self.tm}x{self.tn}_{where}_b{self.min_blocks}"
                f"{order}{late}{ring}{fma_order}{vec}")


@dataclass(frozen=True)
class CudaGemvConfig:
    """One compiled decode configuration of det_sgemm.cu: up to `rows` rows of M, `tn` adjacent
    columns per thread, `warps` warps per program, `depth` k rows per register batch (two batches:
    depth..2 depth rows in flight). The fold (kernels.py's) sums `fold_block` outputs per program."""
    rows: int
    tn: int
    warps: int
    depth: int
    fold_block: int = 128
    fold_warps: int = 4
    kind: str = "cuda_gemv"

    @property
    def block_n(self) -> int:
        return self.tn * 32 * self.warps

    @property
    def k_step(self) -> int:
        return 2 * self.depth                # K must hold whole batch pairs

    @property
    def name(self) -> str:
        return f"gemv{self.rows}_{self.tn}c_w{self.warps}_d{self.depth}"


@dataclass(frozen=True)
class CudaDecodeConfig:
    """One compiled configuration of det_decode.cu's decode kernel: `rows` rows of M per program
    (more rows: more programs), `tn` adjacent columns per thread, `warps` warps per program, W^T
    streamed in stages of `depth` rows through a per-thread cp.async ring of `stages` slots in
    shared memory, `min_blocks` the __launch_bounds__ programs per SM, `flags`: 1 the weights marked
    evict-first in L2 (the partials stay there for the fold), 2 wide copies (the threads sharing 16
    bytes of a W^T row take turns to copy them: one cp.async per 16 / (2 tn) rows), flags >> 2 the
    order of a W^T row's FMAs in the source (det_decode.cu's fma_m / fma_c; never the bits). The fold
    (kernels.py's) sums `fold_block` outputs per program."""
    rows: int
    tn: int
    warps: int
    depth: int
    stages: int
    min_blocks: int
    flags: int = 0
    fold_block: int = 128
    fold_warps: int = 4
    kind: str = "cuda_decode"

    @property
    def block_n(self) -> int:
        return self.tn * 32 * self.warps

    @property
    def k_step(self) -> int:
        return self.depth                    # K must hold whole stages

    @property
    def name(self) -> str:
        ef = "_ef" if self.flags & 1 else ""
        wide = "_wide" if self.flags & 2 else ""
        order = f"_o{self.flags >> 2}" if self.flags >> 2 else ""
        return (f"dec{self.rows}_{self.tn}c_w{self.warps}_d{self.depth}_ring{self.stages}_b{self.min_blocks}"
                f"{ef}{wide}{order}")


@dataclass(frozen=True)
class CudaWsConfig:
    """One compiled configuration of det_prefill_ws.cu's warp-specialized tile kernel: 256 x 128
    outputs per program, 8 x 16 per consumer thread (two consumer warpgroups, one producer
    warpgroup), `block_k` k per tile, a ring of `stages` shared buffers, `n_outer` the order of a k
    step's FMAs (columns outer; speed only), `lookahead` tiles of loads in flight per producer
    thread. Must be one of `compiled_ws_configs()`."""
    block_k: int
    stages: int
    n_outer: bool = True
    lookahead: int = 1
    kind: str = "cuda_ws"

    @property
    def name(self) -> str:
        la = f"_la{self.lookahead}" if self.lookahead > 1 else ""
        return f"ws256x128x{self.block_k}_ring{self.stages}{'_no' if self.n_outer else ''}{la}"


def _table(text: str, macro: str) -> str:
    return text.split(f"#define {macro}(X)", 1)[1].split("\n\n", 1)[0]


def compiled_gemv_configs(source: str | None = None) -> list[CudaGemvConfig]:
    """The decode configurations det_sgemm.cu instantiates, in its variant order."""
    text = source if source is not None else SOURCE.read_text()
    return [CudaGemvConfig(*map(int, g))
            for g in re.findall(r"X\((\d+), (\d+), (\d+), (\d+)\)", _table(text, "DET_GEMV_VARIANTS"))]


def compiled_decode_configs(source: str | None = None) -> list[CudaDecodeConfig]:
    """The configurations det_decode.cu instantiates, in its variant order."""
    text = source if source is not None else DECODE_SOURCE.read_text()
    return [CudaDecodeConfig(*map(int, g)) for g in
            re.findall(r"X\((\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\)", _table(text, "DET_DECODE_VARIANTS"))]


def compiled_ws_configs(source: str | None = None) -> list[CudaWsConfig]:
    """The configurations det_prefill_ws.cu instantiates, in its variant order."""
    text = source if source is not None else WS_SOURCE.read_text()
    return [CudaWsConfig(int(bk), int(p), no == "true", int(la)) for bk, p, no, la in
            re.findall(r"X\((\d+), (\d+), (true|false), (\d+)\)", _table(text, "DET_WS_VARIANTS"))]


def compiled_configs(source: str | None = None) -> list[CudaTileConfig]:
    """The configurations det_sgemm.cu instantiates, in its variant order (read from the source, so
    that the Python side and the library agree without a GPU)."""
    text = source if source is not None else SOURCE.read_text()
    table = _table(text, "DET_SGEMM_VARIANTS")
    out = []
    for bm, bn, bk, tm, tn, ts, mb, no, fl in re.findall(
            r"X\((\d+), (\d+), (\d+), (\d+), (\d+), (true|false), (\d+)(?:, (true|false))?(?:, (\d+))?\)", table):
        out.append(CudaTileConfig(int(bm), int(bn), int(bk), int(tm), int(tn), ts == "true", int(mb), no == "true",
                                  int(fl or 0)))
    return out


def find_nvcc() -> Optional[str]:
    for cand in (os.environ.get(ENV_NVCC), shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                 "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def build_command(nvcc: str, arch: str, source: Path, out: Path) -> list[str]:
    """nvcc's command line: one shared library for compute capability `arch` ("90" for sm_90),
    IEEE FP32 (nvcc's defaults: no flush-to-zero, exact division; the kernel's FMAs are explicit).
    9.0 builds for sm_90a: det_prefill_ws.cu's setmaxnreg needs it (the other kernels' SASS is the
    same as sm_90's)."""
    code = arch + "a" if arch == "90" else arch
    return [nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static", "-std=c++17",
            f"-gencode=arch=compute_{code},code=sm_{code}", "-ftz=false", "-prec-div=true", "-prec-sqrt=true",
            "-o", str(out), str(source)]


def cache_dir() -> Path:
    base = os.environ.get("SMLENS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "smlens")
    return Path(base) / "det_sgemm"


def nvcc_version(nvcc: Optional[str] = None) -> Optional[str]:
    """nvcc's release line ("Cuda compilation tools, release 13.0, V13.0.88"), None without nvcc."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return None
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "release" in ln), lines[-1] if lines else None)


def library_path(nvcc: str, arch: str) -> Path:
    """Where the build for these sources, architecture and nvcc lands (a new source builds anew)."""
    version = nvcc_version(nvcc) or ""
    sources = SOURCE.read_bytes() + DECODE_SOURCE.read_bytes() + WS_SOURCE.read_bytes()
    key = hashlib.sha256(sources + arch.encode() + version.encode()).hexdigest()[:16]
    return cache_dir() / f"sm{arch}-{key}" / "det_sgemm.so"


def build(nvcc: str, arch: str) -> Path:
    """Build (or find) the library; written under a temporary name and renamed, so that two
    processes building at once never load half a file. Raises RuntimeError with nvcc's output."""
    path = library_path(nvcc, arch)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        proc = subprocess.run(build_command(nvcc, arch, SOURCE, Path(tmp)), capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


ODD_DESCRIPTOR = re.compile(r"\bLDGSTS\b[^;]*desc\[UR(\d+)\]")


def odd_descriptor_kernels(sass: str) -> list[str]:
    """The kernels of a cuobjdump SASS listing with a cp.async (LDGSTS) whose 64-bit memory
    descriptor is named by an odd uniform register. nvcc 13.0's ptxas emitted that for two decode
    configurations that never shipped, and each stopped the H200 with an illegal instruction
    (benchmarks/DETERMINISM_NOTES.md, call 15d): a sticky error that ends the process's CUDA context,
    where a refused library only costs speed."""
    out = []
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, _, body = part.partition("\n")
        if any(int(reg) % 2 for reg in ODD_DESCRIPTOR.findall(body)):
            out.append(name.strip())
    return out


def find_cuobjdump(nvcc: Optional[str]) -> Optional[str]:
    """cuobjdump beside nvcc (if given), on PATH, or the triton wheel's copy; None without one."""
    for cand in (nvcc and os.path.join(os.path.dirname(nvcc), "cuobjdump"), shutil.which("cuobjdump")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    try:
        import triton
    except ImportError:
        return None
    cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(cand) if cand.exists() else None


def sass_of(path: Path, nvcc: Optional[str]) -> Optional[str]:
    """The library's SASS listing, None where no cuobjdump can read it."""
    cuobjdump = find_cuobjdump(nvcc)
    if cuobjdump is None:
        return None
    proc = subprocess.run([cuobjdump, "--dump-sass", str(path)], capture_output=True, text=True, timeout=300)
    return proc.stdout if proc.returncode == 0 else None


def unsafe_kernels(path: Path, nvcc: str) -> list[str]:
    """odd_descriptor_kernels of a built library, read once and remembered beside it
    (`sass_check.json`, written whole); [] where its SASS cannot be read (the library runs
    unchecked, as before the check)."""
    record = path.with_name("sass_check.json")
    try:
        return json.loads(record.read_text())["odd_descriptor"]
    except (OSError, ValueError, KeyError):
        pass
    sass = sass_of(path, nvcc)
    if sass is None:
        return []
    bad = odd_descriptor_kernels(sass)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"odd_descriptor": bad}, f)
    os.replace(tmp, record)
    return bad


NO_SHARED_MEMORY = -3                    # det_sgemm's answer when the tile's shared memory is not there


class NoSharedMemory(RuntimeError):
    """The device gives a program less shared memory than the configuration needs (nothing ran)."""


class Library:
    """The loaded det_sgemm library: its configurations and the launch."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.det_sgemm.restype = ctypes.c_int
        self.lib.det_sgemm.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
        self.lib.det_sgemm_info.restype = ctypes.c_int
        self.lib.det_sgemm_info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self.lib.det_gemv.restype = ctypes.c_int
        self.lib.det_gemv.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
        self.lib.det_gemv_info.restype = ctypes.c_int
        self.lib.det_gemv_info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self.lib.det_decode.restype = ctypes.c_int
        self.lib.det_decode.argtypes = self.lib.det_gemv.argtypes
        self.lib.det_decode_fold.restype = ctypes.c_int
        self.lib.det_decode_fold.argtypes = ([ctypes.c_int] + [ctypes.c_void_p] * 5 + [ctypes.c_int] * 5
                                             + [ctypes.c_void_p])
        self.lib.det_decode_info.restype = ctypes.c_int
        self.lib.det_decode_info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self.lib.det_ws.restype = ctypes.c_int
        self.lib.det_ws.argtypes = self.lib.det_sgemm.argtypes
        self.lib.det_ws_info.restype = ctypes.c_int
        self.lib.det_ws_info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self.configs = compiled_configs()
        self.gemv_configs = compiled_gemv_configs()
        self.decode_configs = compiled_decode_configs()
        self.ws_configs = compiled_ws_configs()
        counts = (self.lib.det_sgemm_variant_count(), self.lib.det_gemv_variant_count(),
                  self.lib.det_decode_variant_count(), self.lib.det_ws_variant_count())
        named = (len(self.configs), len(self.gemv_configs), len(self.decode_configs), len(self.ws_configs))
        if counts != named:
            raise RuntimeError(f"{path}: {counts} variants, the source names {named}")
        self.index = {cfg: i for i, cfg in enumerate(self.configs)}
        self.ws_index = {cfg: i for i, cfg in enumerate(self.ws_configs)}
        # the fold's shape is not compiled in: any fold_block / fold_warps maps to the same kernel
        self.gemv_index = {_gemv_key(cfg): i for i, cfg in enumerate(self.gemv_configs)}
        self.decode_index = {_gemv_key(cfg): i for i, cfg in enumerate(self.decode_configs)}

    def info(self, cfg) -> dict:
        """Registers, spilled bytes, programs per SM... of one configuration (needs the device)."""
        if isinstance(cfg, CudaWsConfig):
            out = (ctypes.c_int * len(WS_INFO_FIELDS))()
            err = self.lib.det_ws_info(self.ws_index[cfg], out)
            return {"error": err, **dict(zip(WS_INFO_FIELDS, list(out)))}
        if isinstance(cfg, CudaDecodeConfig):
            out = (ctypes.c_int * len(DECODE_INFO_FIELDS))()
            err = self.lib.det_decode_info(self.decode_index[_gemv_key(cfg)], out)
            return {"error": err, **dict(zip(DECODE_INFO_FIELDS, list(out)))}
        if isinstance(cfg, CudaGemvConfig):
            out = (ctypes.c_int * len(GEMV_INFO_FIELDS))()
            err = self.lib.det_gemv_info(self.gemv_index[_gemv_key(cfg)], out)
            return {"error": err, **dict(zip(GEMV_INFO_FIELDS, list(out)))}
        out = (ctypes.c_int * len(INFO_FIELDS))()
        err = self.lib.det_sgemm_info(self.index[cfg], out)
        return {"error": err, **dict(zip(INFO_FIELDS, list(out)))}

    def has(self, cfg) -> bool:
        if isinstance(cfg, CudaWsConfig):
            return cfg in self.ws_index
        if isinstance(cfg, CudaDecodeConfig):
            return _gemv_key(cfg) in self.decode_index
        return (_gemv_key(cfg) in self.gemv_index) if isinstance(cfg, CudaGemvConfig) else cfg in self.index

    def launch_gemv(self, cfg, x, wt, part, chain_k: int, stream: int) -> None:
        """The partials of a CudaGemvConfig (det_gemv) or CudaDecodeConfig (det_decode)."""
        M, K = x.shape
        N = wt.shape[1]
        fn, index = ((self.lib.det_decode, self.decode_index) if isinstance(cfg, CudaDecodeConfig)
                     else (self.lib.det_gemv, self.gemv_index))
        err = fn(index[_gemv_key(cfg)], x.data_ptr(), wt.data_ptr(), part.data_ptr(), M, N, K, chain_k, stream)
        if err:
            raise RuntimeError(f"{cfg.name}: launch error {err}")

    def launch_decode_fold(self, cfg, x, wt, part, bias, y, chain_k: int, mode: int, stream: int) -> None:
        """The partials of a CudaDecodeConfig, then y folded from them (det_decode_fold)."""
        M, K = x.shape
        N = wt.shape[1]
        err = self.lib.det_decode_fold(self.decode_index[_gemv_key(cfg)], x.data_ptr(), wt.data_ptr(), part.data_ptr(),
                                       bias.data_ptr() if bias is not None else None, y.data_ptr(), M, N, K, chain_k,
                                       mode, stream)
        if err:
            raise RuntimeError(f"{cfg.name}: launch error {err}")

    def launch(self, cfg, x, wt, bias, y, chain_k: int, stream: int) -> None:
        """y by a CudaTileConfig (det_sgemm) or CudaWsConfig (det_ws)."""
        M, K = x.shape
        N = wt.shape[1]
        ws = isinstance(cfg, CudaWsConfig)
        fn, index = (self.lib.det_ws, self.ws_index) if ws else (self.lib.det_sgemm, self.index)
        err = fn(index[cfg], x.data_ptr(), wt.data_ptr(), bias.data_ptr() if bias is not None else None,
                 y.data_ptr(), M, N, K, chain_k, stream)
        if err == NO_SHARED_MEMORY:
            raise NoSharedMemory(f"det_sgemm {cfg.name}: the device lacks its shared memory per program")
        if err:
            raise RuntimeError(f"det_sgemm {cfg.name}: launch error {err}")


def _gemv_key(cfg) -> tuple:
    """The compiled parameters (the fold's shape is not compiled in)."""
    if isinstance(cfg, CudaDecodeConfig):
        return cfg.rows, cfg.tn, cfg.warps, cfg.depth, cfg.stages, cfg.min_blocks, cfg.flags
    return cfg.rows, cfg.tn, cfg.warps, cfg.depth


_LIBS: dict[str, Library] = {}
_FAILED: dict[str, str] = {}


def disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "1").strip().lower() in ("0", "false", "no", "off")


def load(arch: str) -> Optional[Library]:
    """The library for compute capability `arch`, built at the first call; None (and the reason in
    `why_not(arch)`) when it cannot be had. A failure is remembered: no second build per process."""
    if arch in _LIBS:
        return _LIBS[arch]
    if arch in _FAILED:
        return None
    if disabled():
        _FAILED[arch] = f"{ENV_DISABLE}={os.environ.get(ENV_DISABLE)}"
        return None
    nvcc = find_nvcc()
    if nvcc is None:
        _FAILED[arch] = f"no nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin or ${ENV_NVCC})"
        return None
    try:
        path = build(nvcc, arch)
        bad = unsafe_kernels(path, nvcc)
        if bad:
            _FAILED[arch] = (f"{nvcc_version(nvcc)}: {len(bad)} kernels' cp.async name an odd descriptor register "
                             f"(an illegal instruction on the GPU), e.g. {bad[0]}; the Gluon kernels run instead")
            return None
        _LIBS[arch] = Library(path)
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        _FAILED[arch] = f"{type(err).__name__}: {err}"[:2000]
        return None
    return _LIBS[arch]


def why_not(arch: str) -> Optional[str]:
    return _FAILED.get(arch)


def fits(x, wt, bias, cfg, chain_k: int) -> bool:
    """Whether the kernel takes these operands as they are (else the Gluon kernel runs): FP32 x
    and bf16 W^T, contiguous, on a CUDA device; K and the chain length multiples of BK; N of 4;
    16-byte aligned x (8-byte W^T rows)."""
    import torch
    M, K = x.shape
    N = wt.shape[1]
    return (x.is_cuda and x.dtype == torch.float32 and wt.dtype == torch.bfloat16 and x.is_contiguous()
            and wt.is_contiguous() and K % cfg.block_k == 0 and chain_k % cfg.block_k == 0 and N % 4 == 0
            and K % 4 == 0 and x.data_ptr() % 16 == 0 and wt.data_ptr() % 8 == 0
            and (bias is None or bias.shape == (N,)))


def arch_of(device) -> str:
    import torch
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


def _library_for(x, cfg) -> Optional[Library]:
    """The library for x's device if it holds `cfg`, else None."""
    lib = load(arch_of(x.device))
    return lib if lib is not None and lib.has(cfg) else None


def linear(x, wt, bias, cfg, chain_k: int):
    """y = x . W^T (+ bias) by det_sgemm.cu's tile kernel (CudaTileConfig) or det_prefill_ws.cu's
    (CudaWsConfig), or None where it cannot run here (the caller falls back to the Gluon kernel:
    same bits)."""
    import torch
    lib = _library_for(x, cfg) if fits(x, wt, bias, cfg, chain_k) else None
    if lib is None:
        return None
    M, _ = x.shape
    N = wt.shape[1]
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    b = bias.float().contiguous() if bias is not None else None     # bf16 -> FP32 is exact
    try:
        lib.launch(cfg, x, wt, b, y, chain_k, torch.cuda.current_stream(x.device).cuda_stream)
    except NoSharedMemory:
        return None           # a smaller GPU: the Gluon kernel runs (same bits)
    return y


def gemv_fits(x, wt, cfg, chain_k: int) -> bool:
    """Whether a decode kernel (CudaGemvConfig or CudaDecodeConfig) takes these operands: M up to
    cfg.rows (any M for CudaDecodeConfig: blocks of cfg.rows rows), N a multiple of its columns per
    program, K of its k step and of 32, chains of GEMV_CHAIN k, 16-byte aligned x and W^T."""
    import torch
    M, K = x.shape
    N = wt.shape[1]
    return (x.is_cuda and x.dtype == torch.float32 and wt.dtype == torch.bfloat16 and x.is_contiguous()
            and wt.is_contiguous() and (M <= cfg.rows or isinstance(cfg, CudaDecodeConfig))    # row blocks
            and N % cfg.block_n == 0 and K % cfg.k_step == 0
            and K % 32 == 0 and chain_k == GEMV_CHAIN and wt.data_ptr() % 16 == 0 and x.data_ptr() % 16 == 0)


# det_decode_fold's mode bits: FOLD_WAIT, the fold kernel as a programmatic dependent launch of the
# decode kernel (resident and launched while the decode kernel's last programs run; dropped below
# compute capability 9.0); FOLD_DEEP, 16 partials in flight per thread instead of 8
FOLD_WAIT, FOLD_DEEP = 1, 2


def _partials_for(x, wt, cfg, chain_k: int):
    """(the library, an empty [S, M, N] FP32 partials buffer) for a decode kernel on these operands,
    or (None, None) where it cannot run here."""
    import torch
    lib = _library_for(x, cfg) if gemv_fits(x, wt, cfg, chain_k) else None
    if lib is None:
        return None, None
    M, K = x.shape
    return lib, torch.empty(-(-K // chain_k), M, wt.shape[1], device=x.device, dtype=torch.float32)


def gemv_linear(x, wt, bias, cfg, chain_k: int, mode: int):
    """y = x . W^T (+ bias) [M, N] FP32 by a CudaDecodeConfig and det_decode.cu's fold kernel in
    `mode`, or None where it cannot run here (the caller runs another kernel: the same bits)."""
    import torch
    if not isinstance(cfg, CudaDecodeConfig) or (bias is not None and bias.shape != (wt.shape[1],)):
        return None
    lib, part = _partials_for(x, wt, cfg, chain_k)
    if lib is None:
        return None
    if torch.cuda.get_device_capability(x.device) < (9, 0):
        mode &= ~FOLD_WAIT
    y = torch.empty(x.shape[0], wt.shape[1], device=x.device, dtype=torch.float32)
    b = bias.float().contiguous() if bias is not None else None     # bf16 -> FP32 is exact
    if b is not None and b.data_ptr() % 16:                          # the fold reads it as float4s
        b = b.clone()
    lib.launch_decode_fold(cfg, x, wt, part, b, y, chain_k, mode, torch.cuda.current_stream(x.device).cuda_stream)
    return y


def gemv_partials(x, wt, cfg, chain_k: int):
    """The chain partials [S, M, N] FP32 by a CUDA decode kernel (S = chains of K), or None
    where it cannot run here (the caller runs the Gluon kernel: same bits)."""
    import torch
    lib, part = _partials_for(x, wt, cfg, chain_k)
    if lib is not None:
        lib.launch_gemv(cfg, x, wt, part, chain_k, torch.cuda.current_stream(x.device).cuda_stream)
    return part
