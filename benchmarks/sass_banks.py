"""Count the FFMAs whose source registers share a register bank, per kernel, from a build's SASS.

    python3 benchmarks/sass_banks.py LIB_OR_CUBIN [--kernel SUBSTRING] [--format json]
    python3 benchmarks/sass_banks.py --build profiler/workloads/deterministic/det_sgemm.cu -D NAME=V ...

Why: what is left between the deterministic tile kernels and cuBLAS's SGEMM is dispatch stalls on
the FFMAs (DETERMINISM_NOTES.md, calls 7 and 8), and the order in which the source writes a k step's
independent FMAs changes ptxas's register allocation but not the bits. This reads the allocation
back without a GPU (nvcc and cuobjdump only), so that a device call only times the orders with the
fewest conflicts. The model: two banks (register number mod 2), an operand marked `.reuse` on the
previous instruction comes from the reuse cache, not the bank; RZ and constants read no bank.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from profiler.workloads.deterministic import cuda_gemm  # noqa: E402

FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
FFMA_RE = re.compile(r"\bFFMA\s+(R\d+)\s*,\s*([^,]+),\s*([^,]+),\s*([^;]+);")
INSN_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
REG_RE = re.compile(r"^-?\|?R(\d+)(\.reuse)?")


def nvcc() -> str:
    """cuda_gemm's nvcc (the library's build uses the same)."""
    found = cuda_gemm.find_nvcc()
    if found is None:
        raise SystemExit("sass_banks: no nvcc (install the CUDA toolkit)")
    return found


def sources(operands: list[str], reused: set[int]) -> list[tuple[int, bool]]:
    """(register, from the reuse cache) of each register source operand."""
    out = []
    for slot, text in enumerate(operands):
        m = REG_RE.match(text.strip())
        if m:
            out.append((int(m.group(1)), slot in reused))
    return out


def count(sass: str, kernel: str | None = None) -> dict[str, dict]:
    """Per kernel: instructions, FFMAs, FFMAs with two or three bank-sharing sources not from reuse."""
    result: dict[str, dict] = {}
    name = None
    prev_reuse: set[int] = set()
    for line in sass.splitlines():
        f = FUNC_RE.match(line)
        if f:
            name = f.group(1)
            prev_reuse = set()
            if kernel is None or kernel in name:
                result[name] = {"instructions": 0, "ffma": 0, "ffma_two_same_bank": 0, "ffma_three_same_bank": 0,
                                "ffma_no_reuse": 0}
            continue
        if name not in result:
            continue
        i = INSN_RE.search(line)
        if not i:
            continue
        k = result[name]
        k["instructions"] += 1
        m = FFMA_RE.search(line)
        if not m:
            prev_reuse = set()
            continue
        k["ffma"] += 1
        ops = [m.group(2), m.group(3), m.group(4)]
        # a source marked .reuse on the previous instruction in the same slot is read from the cache
        regs = sources(ops, prev_reuse)
        prev_reuse = {s for s, t in enumerate(ops) if ".reuse" in t}
        banked = [r % 2 for r, cached in regs if not cached]
        same = max((banked.count(b) for b in (0, 1)), default=0)
        k["ffma_two_same_bank"] += same >= 2
        k["ffma_three_same_bank"] += same >= 3
        k["ffma_no_reuse"] += not any(cached for _, cached in regs)   # every source from the register file
    return result


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> readable (the template arguments are the configuration); unchanged without c++filt."""
    filt = shutil.which("c++filt")
    if filt is None or not names:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {n: re.sub(r"\(anonymous namespace\)::|\(.*\)$", "", d) for n, d in zip(names, out)}


def build_cubin(source: Path, defines: list[str], out: Path) -> Path:
    cmd = [nvcc(), "-O3", "-cubin", "-std=c++17", "-arch=sm_90", "-ftz=false", "-prec-div=true",
           "-prec-sqrt=true", *[f"-D{d}" for d in defines], "-o", str(out), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"sass_banks: nvcc failed: {proc.stderr[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", help="a .so or .cubin with sm_90 SASS")
    ap.add_argument("--build", help="a .cu to build as a cubin first")
    ap.add_argument("-D", dest="defines", action="append", default=[])
    ap.add_argument("--kernel", default=None, help="only kernels whose mangled name contains this")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        binary = build_cubin(Path(args.build), args.defines, Path(tmp) / "k.cubin") if args.build else args.binary
        if binary is None:
            ap.error("a binary or --build")
        sass = cuda_gemm.sass_of(Path(binary), cuda_gemm.find_nvcc())
        if sass is None:
            raise SystemExit(f"sass_banks: no cuobjdump, or it could not read {binary}")
    counts = count(sass, args.kernel)
    readable = demangle(list(counts))
    counts = {readable[n]: k for n, k in counts.items()}
    if args.format == "json":
        json.dump(counts, sys.stdout, indent=1)
        print()
    else:
        for name, k in counts.items():
            print(f"{k['ffma']:6d} FFMA of {k['instructions']:6d}  two same bank {k['ffma_two_same_bank']:5d}"
                  f"  three {k['ffma_three_same_bank']:5d}  no reuse {k['ffma_no_reuse']:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
