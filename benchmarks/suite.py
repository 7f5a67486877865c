"""What every benchmark here shares: `--quick` and the machine it ran on.

`--quick` runs a benchmark in seconds on small inputs, the way tests/test_benchmarks.py runs each one
so that none rots while the code under it changes; its numbers measure nothing. The machine and the
command go to stderr, so that what stdout holds (JSON or a table) can be read by a script and a
BENCHMARKS.md section can name both.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys


def arguments(parser: argparse.ArgumentParser, quick: dict, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; with --quick, each option in `quick` that was left at its default
    takes the quick value instead (one given on the command line wins)."""
    parser.add_argument("--quick", action="store_true",
                        help="seconds, small inputs: a check that the benchmark runs, not a measurement")
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    command = " ".join(["python3", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    print(f"machine: {machine()}\ncommand: {command}", file=sys.stderr, flush=True)
    return args


def machine() -> str:
    """The CPU, its cores, the memory, Python and the 1-minute load (the development machine is shared)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
        with open("/proc/meminfo") as info:
            memory_gb = int(next(line.split()[1] for line in info if line.startswith("MemTotal"))) / 2**20
    except OSError:
        memory_gb = float("nan")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores, {memory_gb:.0f} GB, Python {platform.python_version()}, "
            f"load average {load:.1f}")
