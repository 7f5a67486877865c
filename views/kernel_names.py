"""What a kernel's name says: its kind, library family, tile, split-K, architecture and MMA path.

The one kernel-name parser: ingest stores its kind (profiler/ingest/nvtx.py), the views read the
rest (and the kind, for a kernels table without one).

Names are parsed once per distinct name (a capture of a million launches holds a few hundred
names). A name no rule knows gives nulls, never an error: the views that need a tile are then n/a.

Tiles are in the library's own terms: `tile_m` x `tile_n` x `tile_k`, where cuBLAS's m runs along
the rows of its column-major C. PyTorch hands a row-major problem (M tokens, N outputs, K) to
cuBLAS transposed, so for nvjet `tile_m` runs along N and `tile_n` along M: V3 and V8 try both
orientations against the grid and fall back to this one.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pandas as pd

FAMILIES = ("cublaslt_nvjet", "cublas", "cutlass", "cudnn_sdpa", "cudnn", "flash_attention",
            "cutlass_fmha", "flashinfer", "triton", "aten", "splitk_reduce")

# A kernel's kind (views/vocabulary.py KINDS) from words in its name: the first pattern that matches
# decides, so the specific ones come first. cuDNN's `lean_reduction_kernel` is its SDPA's split-KV
# reduction (it runs inside the attention range, seen on the H200).
_KIND_PATTERNS = [
    # inductor's generated pointwise and reduction kernels are named after the aten ops fused into
    # them, which may include the attention or GEMM whose inputs they prepare
    # (`triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy_...`, seen on the H200)
    ("elementwise", re.compile(r"^triton_(?:poi|red|per)_")),
    ("gemm", re.compile(r"^triton_tem_fused_(?:\w+_)?(?:addmm|baddbmm|bmm|mm)(?:_|$)")),  # its template
    ("splitk_reduce", re.compile(r"splitkreduce|splitk_reduce|split_k_reduce|reduce_splitk|"
                                 r"execute_split_k_kernel", re.I)),
    # collectives between GPUs: NCCL's kernels, vLLM's custom all-reduce
    ("communication", re.compile(r"^nccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|"
                                 r"all_?to_?all", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|attn|cudnn::lean_reduction|paged_?attention", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|cutlass|xmma|matmul|\bmm_|_mm\b|gemv|dot_kernel", re.I)),
    ("elementwise", re.compile(
        r"elementwise|vectorized|norm|reduce|catarray|copy|rotary|rope|silu|gelu|softmax|"
        r"activation|fill|distribution|index|scatter|gather|unrolled|roll", re.I)),
]
# The kind a library family implies, for a name no pattern above knows. Where both speak they
# agree on every kernel name of the bundled captures (tests/test_kernel_names.py).
FAMILY_KIND = {"cublaslt_nvjet": "gemm", "cublas": "gemm", "cutlass": "gemm",
               "cudnn_sdpa": "attention", "flash_attention": "attention", "cutlass_fmha": "attention",
               "flashinfer": "attention", "splitk_reduce": "splitk_reduce", "aten": "elementwise",
               "triton": "elementwise"}
# The MMA instruction family a name claims -> the tensor path the counters should show (V8a).
MMA_PATH = {"wgmma": "gmma", "wmma": "hmma", "hmma": "hmma", "imma": "imma", "tcgen05": "tcgen05",
            "ffma": "none"}

COLUMNS = ("kind", "kernel_family", "tile", "tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n",
           "name_split_k", "persistent", "name_arch", "name_mma")

_NVJET = re.compile(r"nvjet_(?:(sm\d+)_)?([a-z0-9]+)_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_(.*)")
_XMMA = re.compile(r"(sm\d+)_xmma_gemm_.*?tilesize(\d+)x(\d+)x(\d+)")
_LEGACY_CUBLAS = re.compile(r"\b(volta|turing|ampere|ada|hopper)_(?:[a-z0-9]+_)?([a-z]\d{3,5})gemm_"
                            r".*?(\d+)x(\d+)_")
_STAGES = re.compile(r"stages_(\d+)x\d+")
_ARCH_WORD = {"volta": "sm70", "turing": "sm75", "ampere": "sm80", "ada": "sm89", "hopper": "sm90"}
_CUTLASS3X = re.compile(r"cutlass3x_(sm\d+)_\w*?_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)x(\d+)_")
_CUTLASS2X = re.compile(r"cutlass_(\d{2,3})_(wmma_)?tensorop_(\w*?)_(\d+)x(\d+)_(\d+)x(\d+)_")
# An integer MMA: CUTLASS 2.x's `i16832gemm_s8`, or a templated tensor-op GEMM on 8-bit integers
_INTEGER_OP = re.compile(r"^(?:\w*_)?i\d{4,5}gemm")
_INTEGER_TENSOR_OP = re.compile(r"MmaTensorOp<\s*cutlass::gemm::GemmShape<[^>]*>,\s*(?:signed|unsigned) char")
_GEMM_SHAPE = re.compile(r"GemmShape<\s*(\d+),\s*(\d+),\s*(\d+)\s*>")
_CUTE_TUPLE = re.compile(r"cute::tuple<\s*cute::C<(\d+)>,\s*cute::C<(\d+)>,\s*cute::C<(\d+)>\s*>")
_SM_TEMPLATE = re.compile(r"[Ss]m(\d{2,3})\b|Sm(\d{2,3})[A-Z_]")
_CUDNN_SDPA = re.compile(r"cudnn_generated_\w*?sdpa_(sm\d+)_\w*?"
                         r"(\d+)x(\d+)x(\d+)_(\d+)x(\d+)x(\d+)_cga(\d+)x(\d+)x(\d+)")
_MMA_WORD = re.compile(r"_(wgmma|wmma|hmma|mma)_")
_FA2_TRAITS = re.compile(r"Flash_(?:fwd|bwd)_kernel_traits\w*<\s*(\d+),\s*(\d+),\s*(\d+)")
_FMHA = re.compile(r"fmha_cutlass[FB]_\w*?_(\d+)x(\d+)_\w*?(sm\d+)")
_SM_WORD = re.compile(r"(?<![a-z])sm_?(\d{2,3})(?![0-9])")
# cuBLAS's xmma split-K GEMM is `..._execute_kernel`, its reduce `..._execute_split_k_kernel`
_SPLITK_REDUCE = re.compile(r"splitKreduce|splitk_reduce|split_k_reduce|execute_split_k_kernel", re.I)


def _arch_mma(arch: str | None, explicit: str | None = None) -> str | None:
    """The MMA family a tensor-core kernel built for `arch` uses, unless the name says."""
    if explicit:
        return {"mma": "hmma"}.get(explicit, explicit)
    if not arch:
        return None
    number = int(arch[2:])
    if 100 <= number < 120:
        return "tcgen05"  # data-centre Blackwell's MMA: none of the hgmma/hmma counters see it
    return "wgmma" if number == 90 else "hmma"  # GeForce Blackwell (sm120) has mma.sync only


def _row(family, tile=None, cluster=(None, None), split_k=False, persistent=False, arch=None,
         mma=None) -> dict:
    tile_m, tile_n, tile_k = (tile + (None, None, None))[:3] if tile else (None, None, None)
    text = "x".join(str(t) for t in (tile_m, tile_n, tile_k) if t is not None) or None
    return {"kernel_family": family, "tile": text, "tile_m": tile_m, "tile_n": tile_n,
            "tile_k": tile_k, "cluster_m": cluster[0], "cluster_n": cluster[1],
            "name_split_k": split_k, "persistent": persistent, "name_arch": arch, "name_mma": mma}


def _nvjet(name: str):
    m = _NVJET.search(name)
    if not m:
        return None
    arch, _precision, tm, tn, tk, _stages, cm, cn, rest = m.groups()
    flags = rest.split("_")
    return _row("cublaslt_nvjet", (int(tm), int(tn), int(tk)), (int(cm), int(cn)),
                split_k=any(f.lower() == "splitk" for f in flags),
                persistent=any(f.startswith(("coop", "pingpong", "persist")) for f in flags),
                arch=arch, mma=_arch_mma(arch))


def _cublas(name: str):
    m = _XMMA.search(name)
    if m:
        arch = m.group(1)
        # an `_ffma_` xmma kernel multiplies on the FP32 CUDA cores: it claims no tensor path
        mma = "wgmma" if "warpgroup" in name else "ffma" if "_ffma_" in name else _arch_mma(arch)
        split = bool(re.search(r"splitk|segment_k_on", name, re.I))
        return _row("cublas", tuple(int(g) for g in m.groups()[1:4]), split_k=split, arch=arch, mma=mma)
    m = _LEGACY_CUBLAS.search(name)
    if m:
        arch = _ARCH_WORD[m.group(1)]
        stages = _STAGES.search(name)
        tile_k = int(stages.group(1)) if stages else None
        return _row("cublas", (int(m.group(3)), int(m.group(4)), tile_k), arch=arch,
                    split_k="splitk" in name.lower(), mma="hmma")
    if re.search(r"\bgemv|gemvx|gemmk1|gemmSN_|\bcublas", name):
        return _row("cublas")
    return None


def _cute_tile_cluster(name: str):
    """CuTe kernels carry their tile and cluster as `cute::tuple<cute::C<..>, ...>`: the tile is
    the largest such tuple, the cluster a small one (at most 16 blocks)."""
    tuples = [tuple(int(x) for x in t) for t in _CUTE_TUPLE.findall(name)]
    if not tuples:
        return None, (None, None)
    tile = max(tuples, key=lambda t: t[0] * t[1] * t[2])
    if tile[0] * tile[1] * tile[2] <= 16:
        tile = None
    small = [t for t in tuples if t[0] * t[1] * t[2] <= 16]
    return tile, ((small[0][0], small[0][1]) if small else (None, None))


def _cutlass(name: str):
    m = _CUTLASS3X.search(name)
    if m:
        arch = m.group(1)
        g = [int(x) for x in m.groups()[1:]]
        return _row("cutlass", tuple(g[:3]), (g[3], g[4]),
                    persistent=bool(re.search(r"cooperative|pingpong|persistent", name)),
                    split_k="splitk" in name.lower() or "stream_k" in name.lower(),
                    arch=arch, mma=_arch_mma(arch))
    m = _CUTLASS2X.search(name)
    if m:
        arch = f"sm{m.group(1)}"
        mma = "wmma" if m.group(2) else "imma" if _INTEGER_OP.search(m.group(3)) else _arch_mma(arch)
        return _row("cutlass", (int(m.group(4)), int(m.group(5)), int(m.group(6))),
                    arch=arch, mma=mma, split_k="splitk" in name.lower())
    if "cutlass" not in name:
        return None
    arch_match = _SM_TEMPLATE.search(name)
    arch = f"sm{arch_match.group(1) or arch_match.group(2)}" if arch_match else None
    tile, cluster = _cute_tile_cluster(name)
    shape = _GEMM_SHAPE.search(name)
    if tile is None and shape:
        tile = tuple(int(x) for x in shape.groups())
    mma = ("wgmma" if "Gmma" in name or "GMMA" in name else
           "imma" if _INTEGER_TENSOR_OP.search(name) else _arch_mma(arch))
    return _row("cutlass", tile, cluster, arch=arch, mma=mma,
                persistent=bool(re.search(r"Cooperative|Pingpong|Persistent", name)),
                split_k=bool(re.search(r"SplitK|StreamK", name)))


def _attention(name: str):
    m = _CUDNN_SDPA.search(name)
    if m:
        g = m.groups()
        word = _MMA_WORD.search(name)
        return _row("cudnn_sdpa", (int(g[1]), int(g[2]), int(g[3])), (int(g[7]), int(g[8])),
                    arch=g[0], mma=_arch_mma(g[0], word.group(1) if word else None))
    if "sdpa" in name and "cudnn" in name:
        arch = _SM_WORD.search(name)
        arch = f"sm{arch.group(1)}" if arch else None
        return _row("cudnn_sdpa", arch=arch, mma=_arch_mma(arch))
    if re.search(r"FlashAttn\w*Sm90|flash::\w*[Ss]m90|flash_fwd\w*sm90", name):
        tile, cluster = _cute_tile_cluster(name)
        return _row("flash_attention", tile, cluster, arch="sm90", mma="wgmma")
    if re.search(r"flash_(?:fwd|bwd)\w*kernel|flash::", name):
        m = _FA2_TRAITS.search(name)
        # FlashAttention-2's traits are <head dim, block M, block N, warps>
        tile = (int(m.group(2)), int(m.group(3)), int(m.group(1))) if m else None
        return _row("flash_attention", tile, arch="sm80", mma="hmma",
                    split_k="splitkv" in name)
    m = _FMHA.search(name)
    if m:
        return _row("cutlass_fmha", (int(m.group(1)), int(m.group(2))), arch=m.group(3), mma="hmma")
    if "flashinfer" in name:
        return _row("flashinfer")
    return None


def _other(name: str):
    if name.startswith("triton") or "triton_" in name:
        return _row("triton")
    if re.search(r"\bat::|at_cuda_detail|\bc10::", name):
        return _row("aten")
    if "cudnn" in name:
        return _row("cudnn")
    return None


# Attention first: FlashAttention and FMHA kernels are templated on cutlass types.
_RULES: list[Callable[[str], dict | None]] = [_nvjet, _attention, _cublas, _cutlass, _other]


def _pattern_kind(name: str) -> str | None:
    return next((kind for kind, pattern in _KIND_PATTERNS if pattern.search(name)), None)


def _family_row(name: str) -> dict:
    # split-K reduce kernels carry gemm-looking template arguments: decide them first
    if _SPLITK_REDUCE.search(name):
        return _row("splitk_reduce")
    for rule in _RULES:
        found = rule(name)
        if found is not None:
            return found
    return _row(None)


_TEMPLATE_ARGUMENTS = re.compile(r"<[^<>]*>")


def short_kernel_name(name, width: int = 60, missing: str = "n/a") -> str:
    """`void at::<unnamed>::vectorized_layer_norm_kernel<...>(...)` -> `at::vectorized_layer_norm_kernel`:
    no `void`, anonymous namespaces, template arguments or parameters; cut to `width`. Names with
    none of these (nvjet, cuDNN, Triton) stay whole."""
    if name is None or (not isinstance(name, str) and pd.isna(name)):
        return missing
    text = str(name)
    short = re.sub(r"^void\s+", "", text)
    short = re.sub(r"(<unnamed>|\(anonymous namespace\))::", "", short)
    for _ in range(20):  # nested template arguments, innermost first
        shorter = _TEMPLATE_ARGUMENTS.sub("", short)
        if shorter == short:
            break
        short = shorter
    if "(" in short[1:]:
        short = short[: short.index("(", 1)]
    short = short.strip() or text
    return short if len(short) <= width else short[: width - 1] + "\u2026"


def parse_name(name: str | None) -> dict:
    """One kernel name -> the COLUMNS: its kind (`other` when nothing says), and family and the
    rest null when no rule knows it."""
    if not isinstance(name, str) or not name:
        return {"kind": "other", **_row(None)}
    row = _family_row(name)
    return {"kind": _pattern_kind(name) or FAMILY_KIND.get(row["kernel_family"], "other"), **row}


def kind_of(name: str | None) -> str:
    """What a kernel is (views/vocabulary.py KINDS), from its name alone."""
    return parse_name(name)["kind"]


TEXT_COLUMNS = ("kind", "kernel_family", "tile", "name_arch", "name_mma", "arch_path", "claimed_path")
NUMBER_COLUMNS = ("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "arch_number")
FLAG_COLUMNS = ("name_split_k", "persistent")


def _distinct(names: pd.Series) -> tuple[np.ndarray, pd.DataFrame]:
    """Codes per row into a table with one parsed row per distinct name (last row: no name)."""
    codes, uniques = pd.factorize(names, use_na_sentinel=True)
    table = pd.DataFrame([parse_name(u) for u in uniques] + [parse_name(None)], columns=list(COLUMNS))
    table["arch_path"] = [(f"{a} {m}" if pd.notna(m) else a) if pd.notna(a) else None
                          for a, m in zip(table["name_arch"], table["name_mma"])]
    table["claimed_path"] = table["name_mma"].map(MMA_PATH)
    table["arch_number"] = pd.to_numeric(table["name_arch"].str[2:], errors="coerce")
    return np.where(codes < 0, len(uniques), codes), table


def parse_names(names: pd.Series) -> pd.DataFrame:
    """COLUMNS (+ arch_path, claimed_path, arch_number) for every row of `names`, parsing each
    distinct name once: text as categoricals, numbers as float (NaN unknown), flags as bool."""
    codes, table = _distinct(names)
    out = {}
    for column in TEXT_COLUMNS:
        labels, categories = pd.factorize(table[column], use_na_sentinel=True)
        out[column] = pd.Categorical.from_codes(labels[codes], categories=list(categories))
    for column in NUMBER_COLUMNS:
        out[column] = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)[codes]
    for column in FLAG_COLUMNS:
        out[column] = table[column].to_numpy(dtype=bool)[codes]
    return pd.DataFrame(out, index=names.index, copy=False)
