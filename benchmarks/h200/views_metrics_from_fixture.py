"""Print the metric list of tests/data/targeted_raw.csv (the eight views' list, captured on the H200
before views.registry existed), for device runs made before the registry could be used."""
import csv
import sys

AUTO = ("device__", "nvlink__", "numa__", "c2clink__", "profiler__")
lines = open(sys.argv[1] if len(sys.argv) > 1 else "tests/data/targeted_raw.csv").read().splitlines()
header = next(csv.reader([next(l for l in lines if l.startswith('"ID",'))]))
print(",".join(h for h in header[13:] if "__" in h and not h.startswith(AUTO)))
