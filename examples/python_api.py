"""The Python API: a capture into a store, the eight views computed, figures read by name.

    python3 examples/python_api.py                       # the bundled H200 capture (what `smlens demo` shows)
    python3 examples/python_api.py CAPTURE [--shapes F]  # your own: ncu --csv --page raw output, or a .ncu-rep
    python3 examples/python_api.py --phase decode --format json

Each figure's label, unit and better direction come from the views' catalog (views.registry.figures()),
so what this prints is what `smlens views` calls it. The store is a temporary folder unless --store
names one (then the run stays in it, and a second run of the same file is recognised, not stored twice).
"""
import argparse
import json
import sys
import tempfile
from importlib.resources import as_file, files
from pathlib import Path

from profiler.errors import SmlensError
from profiler.ingest.shapes import parse_shapes_file
from profiler.ingest.stores import open_store
from views.registry import compute_views, figures

# the gap, headline first: what "SM utilization" says, then what the tensor pipe really did
SHOWN = ["time_share_pct", "sm_throughput_pct", "sm_active_pct", "tensor_pipe_elapsed_pct", "useful_tensor_pct",
         "dram_pct", "bound"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path, help="an ncu capture (default: the bundled H200 one)")
    parser.add_argument("--shapes", type=Path, help="GEMM shapes, `[phase/]role M N K` lines")
    parser.add_argument("--store", type=Path, help="a store folder to keep the run in")
    parser.add_argument("--phase", help="only this phase's groups")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    bundled = files("profiler") / "data"
    with as_file(bundled / "h200_targeted_raw.csv.gz") as demo_capture, \
            as_file(bundled / "h200_shapes.txt") as demo_shapes, \
            tempfile.TemporaryDirectory(prefix="smlens-example-") as folder:
        capture = args.capture or demo_capture
        shapes = args.shapes or (None if args.capture else demo_shapes)
        store = open_store(args.store or Path(folder) / "store")
        row, new = store.ingest(capture, shapes=parse_shapes_file(shapes) if shapes else None)
        kernels = store.kernels(row["id"])
    result = compute_views(kernels)
    gap = result.gap[result.gap["phase"] == args.phase] if args.phase else result.gap
    catalog = figures()
    if args.format == "json":
        records = gap[["phase", "role", *SHOWN]].astype(object).where(gap[["phase", "role", *SHOWN]].notna(), None)
        print(json.dumps({"run": row["id"], "stored_now": new, "kernels": len(kernels),
                          "gap": records.to_dict(orient="records")}))
        return 0
    print(f"run {row['id']}: {len(kernels)} kernels{'' if new else ' (already in the store)'}")
    heads = [heading(catalog, column) for column in SHOWN]
    widths = [max(len(h), 7) for h in heads]
    print(f"{'phase / role':<26}" + "".join(f"  {h:>{w}}" for h, w in zip(heads, widths)))
    for _, group in gap.iterrows():
        cells = [f"{group[c]:.1f}" if isinstance(group[c], float) else str(group[c]) for c in SHOWN]
        print(f"{group['phase'] + ' / ' + group['role']:<26}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths)))
    return 0


def heading(catalog, column: str) -> str:
    """The catalog's label and unit (a text figure has none); the time share is the gap's own."""
    if column not in catalog:
        return "time %" if column == "time_share_pct" else column
    figure = catalog[column]
    return figure.label if figure.unit == "text" else f"{figure.label} {figure.unit}"

if __name__ == "__main__":
    try:
        sys.exit(main())
    except SmlensError as error:  # a file that is no capture, a store that is not one: one line, as smlens says it
        print(f"python_api.py: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
