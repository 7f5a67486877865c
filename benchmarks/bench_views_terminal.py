"""`smlens views` on the demo run, end to end: what a person waits for at the terminal.

    python3 benchmarks/bench_views_terminal.py [--repeats 7] [--tree DIR] [--brief] [--profile] [--quick]

The demo run (the bundled H200 capture, profiler/data/h200_targeted_raw.csv.gz with its shapes:
188 kernels) is ingested once into a temporary store; then `python -m profiler.cli views` runs
`--repeats` times, each in a fresh process with its output piped (as wide as its tables) and,
with COLUMNS=80, as at an 80-column terminal. Each run's wall time and CPU time (user + system of
the child) are recorded: on a shared machine the wall time grows with the load, the CPU time much
less, so both are printed with the load average. `--tree DIR` runs another checkout's code (a
copy of an older commit: the before of a before/after). `--profile` prints where one run's time
goes in-process (cProfile, the 25 costliest functions by cumulative time). In-process, fresh
processes also time its parts: the imports, reading the store, computing the views, printing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite import arguments

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "profiler" / "data" / "h200_targeted_raw.csv.gz"
SHAPES = ROOT / "profiler" / "data" / "h200_shapes.txt"


def _run(tree: Path, args: list[str], env: dict) -> tuple[float, float, int]:
    """One fresh `python -m profiler.cli ARGS` from `tree`: (wall s, CPU s, output lines)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "profiler.cli", *args], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.count("\n")


# In a fresh process: what one `smlens views` spends where (the same calls as the command).
_SPLIT = """
import io, json, sys, time
t0 = time.perf_counter()
from rich.console import Console
from profiler.ingest.stores import open_store
from reports.terminal import print_views
from views.registry import compute_views, input_columns
t1 = time.perf_counter()
store = open_store(sys.argv[1], create=False)
row = store.run(None)
kernels = store.kernels(row["id"], columns=input_columns())
t2 = time.perf_counter()
result = compute_views(kernels)
t3 = time.perf_counter()
print_views(result, row, Console(width=int(sys.argv[2]), file=io.StringIO(), soft_wrap=True))
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "compute_s": t3 - t2, "print_s": t4 - t3}))
"""


def _split(tree: Path, store: Path, width: int, env: dict, repeats: int) -> dict:
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SPLIT, str(store), str(width)], cwd=tree, env=env,
                                      capture_output=True, text=True, check=True).stdout)
            for _ in range(repeats)]
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def _stats(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "runs": [round(v, 3) for v in values]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code runs")
    parser.add_argument("--brief", action="store_true", help="time `smlens views --brief`")
    parser.add_argument("--profile", action="store_true")
    args = arguments(parser, quick={"repeats": 1})

    tree = args.tree.resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("COLUMNS", None)
    with tempfile.TemporaryDirectory(prefix="bench-views-") as folder:
        store = Path(folder) / "store"
        subprocess.run([sys.executable, "-m", "profiler.cli", "ingest", str(CAPTURE), "--store", str(store),
                        "--name", "h200-demo", "--shapes", str(SHAPES)], cwd=tree, env=env,
                       capture_output=True, check=True)
        command = ["views", "--store", str(store)] + (["--brief"] if args.brief else [])
        # the first run warms the file cache and byte-compiles, even where PYTHONDONTWRITEBYTECODE is
        # set (this VM sets it): else every timed run compiles each module newer than its .pyc, 0.3 s
        # more than an installed smlens pays
        _run(tree, command, {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"})
        results = {}
        for label, extra in (("piped", {}), ("80 columns", {"COLUMNS": "80"})):
            walls, cpus, lines = [], [], 0
            for _ in range(args.repeats):
                wall, cpu, lines = _run(tree, command, {**env, **extra})
                walls.append(wall)
                cpus.append(cpu)
            results[label] = {"wall_s": _stats(walls), "cpu_s": _stats(cpus), "lines": lines}
        baseline = [_run(tree, ["--version"], env) for _ in range(args.repeats)]
        split = {f"in-process at {width} columns": _split(tree, store, width, env, args.repeats)
                 for width in (80, 1000)}
        if args.profile:
            subprocess.run([sys.executable, "-c", (
                "import cProfile, pstats, sys; from profiler.cli import app; "
                f"sys.argv = ['smlens', *{command!r}]; "
                "cProfile.run('app(standalone_mode=False)', '/tmp/bench_views_terminal.prof'); "
                "pstats.Stats('/tmp/bench_views_terminal.prof', stream=sys.stderr)"
                ".sort_stats('cumulative').print_stats(25)")], cwd=tree, env=env, stdout=subprocess.DEVNULL)
    facts = {"command": "smlens " + " ".join(c if not c.startswith(folder) else "<store>" for c in command),
             "tree": str(tree), "repeats": args.repeats,
             "smlens --version wall_s": _stats([b[0] for b in baseline]),
             "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
             "python": sys.version.split()[0]}
    print("\n".join([json.dumps(facts)] + [json.dumps({"output": label, **result}) for label, result in results.items()]
                    + [json.dumps({label: times}) for label, times in split.items()]))


if __name__ == "__main__":
    main()
