"""`smlens bench determinism` and `bench compare`: the deterministic GEMMs' bits and speed."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from rich.console import Console

from commands.common import say
from profiler.errors import SmlensError
from profiler.option_checks import check_output_file
from profiler.workloads.deterministic import bench
from profiler.workloads.deterministic.kernels import IMPLS
from profiler.workloads.models import get_model
from reports.bench import render_comparison, render_result
from reports.formats import Format


def determinism(model: str, batches: str, repeats: int, impl: str, bits: bool = True, layer: bool = True,
                timing: bool = True, emulate: bool = False, generate: bool = False, seed: int = 0,
                out: Optional[Path] = None, format: Format = Format.table) -> dict:
    """Run the determinism benchmark on the GPU; the result, also written to `out`."""
    impls = [i.strip() for i in impl.split(",") if i.strip()]
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        raise SmlensError(f"--impl: unknown {', '.join(bad) or 'empty list'}; choose from {', '.join(IMPLS)}")
    batch_list = bench.parse_batches(batches)
    get_model(model)  # unknown model: a clear error before the GPU is touched
    if out is not None:
        check_output_file(out, "--out")
    with Console(stderr=True).status("starting") as status:
        result = bench.run_determinism(model, batch_list, repeats, impls, layer=layer, timing=timing, seed=seed,
                                       bits=bits, emulate=emulate, generate=generate,
                                       progress=lambda m: status.update(m), command=" ".join(sys.argv))
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    if format == Format.json:
        say(json.dumps(result))
    else:
        render_result(result)
    return result


def compare(a: Path, b: Path, impl: str = "det", format: Format = Format.table) -> int:
    """Did two runs give the same bits? 0 when every case of `impl` matches, 1 when some differ;
    a case of `impl` that could not be compared is raised (exit 2)."""
    impls = [i.strip() for i in impl.split(",") if i.strip()]
    if not impls:
        raise SmlensError("--impl is empty: give the implementations whose bits decide, e.g. --impl det")
    cmp = bench.compare_results(bench.load_result(a), bench.load_result(b))
    if format == Format.json:
        say(json.dumps(cmp))
    else:
        render_comparison(cmp)
    code = bench.compare_exit_code(cmp, impls)
    unjudged = [r["status"] for r in cmp["rows"] if r["impl"] in impls
                and r["status"] not in ("same bits", "different bits")]
    if code == 2 and len(unjudged) < sum(r["impl"] in impls for r in cmp["rows"]):
        raise SmlensError(f"{len(unjudged)} case(s) of {', '.join(impls)} in {a} could not be compared "
                          f"({', '.join(sorted(set(unjudged)))}): the bits are not known to match")
    if code == 2:
        raise SmlensError(f"{a} and {b} hold no comparable case of {', '.join(impls)} (missing, other inputs "
                          "or no digest in common); run both with the same --seed and --impl")
    return code
