#!/bin/bash
# Third H200 call (issues 4, 5 and 7), all in one run, each part time-boxed:
#   b. two more captures of the gate workload at batch 4 (gate-b4-r2, gate-b4-r3), made exactly as
#      gate-b4-r1 was (call2.sh step 2)
#   a. smlens profile --workload det-gemm: cuBLAS bf16, det and LayerCast on Llama-3.1-8B's four
#      projections at M = 1, 16 (decode) and 2048 (prefill), one run each
#   c. the issue-4 benchmark: smlens profile of the 4-layer Llama-3.1-8B batch-8 workload, then a
#      complete plain `ncu --set basic` on the same workload (`--set full` is call2.sh's: 10 kernels
#      in 30 s)
# Each part packs its results into $OUT/part-<x>.tgz as soon as it ends, so a call cut short still
# returns what was done. Run from the repository root on the device: bash benchmarks/h200/call3.sh
# Locally (fake ncu, tiny model; the det workload then fails for want of a GPU, which tests that path):
#   SKIP_WHEELS=1 TINY=1 OUT=/tmp/o3 PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call3.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
W=${W:-/tmp/call3}; rm -rf $W; mkdir -p $W/a $W/b $W/c
BUDGET=${BUDGET:-530}   # seconds this script may use
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-230 | tee -a $OUT/times.txt >&2; return $rc; }
left() { echo $(( BUDGET - SECONDS )); }
box() { local want=$1 reserve=$2 b; b=$(( $(left) - reserve )); [ $b -gt $want ] && b=$want; echo $b; }
pack() {  # keep the merged CSV of each run (gzip), logs and JSON; no .ncu-rep
  local part=$1
  find $W/$part -name "*.ncu-rep" -delete
  for d in $W/$part/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; gzip -9f $d/$n.csv 2>/dev/null; done
  (cd $W && tar czf $OUT/part-$part.tgz $part)
}
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; $NCU --version | tail -1
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import nvtx, importlib.metadata as m; print("nvtx", m.version("nvtx"))'; } 2>&1 | tee $OUT/env.txt
if [ -n "$TINY" ]; then L8=tiny; BW="--model tiny --layers 2 --batch 8 --prompt 16 --decode-steps 4"
else L8=llama-3.1-8b; BW="--model llama-3.1-8b --layers 4 --batch 8 --prompt 512 --decode-steps 4"; fi

# b. the gate's batch-4 repeats (about 14 s each in call 2)
G="profile --model $L8 --layers 1 --prompt 128 --decode-steps 2 --phases decode --quiet --store $W/store --keep $W/b --format json --time-limit 60"
for i in 2 3; do
  [ $(left) -gt 380 ] && t timeout -k 10 90 python3 -m profiler.cli $G --batch 4 --name gate-b4-r$i > $W/b/gate-b4-r$i.json
done
pack b

# a. det-gemm: one ncu run per implementation; c keeps 300 s for itself
D="profile --workload det-gemm --model $L8 --tokens 1,16,2048 --quiet --store $W/store --keep $W/a --format json"
for spec in cublas_bf16:45 det:90 layercast:60; do
  impl=${spec%:*}; B=$(box ${spec#*:} 300)
  [ $B -gt 20 ] || { echo "SKIP det-gemm $impl: out of time" | tee -a $OUT/times.txt; continue; }
  t timeout -k 10 $(( B + 40 )) python3 -m profiler.cli $D --impl $impl --name det-gemm-$impl --time-limit $B > $W/a/det-gemm-$impl.json
done
pack a

# c. the benchmark: the workload alone, smlens profile, then plain ncu --set basic to its end
t python3 -m profiler.workloads.decoder $BW > $W/c/plain.json
t timeout -k 10 120 python3 -m profiler.cli profile $BW --quiet --store $W/store --keep $W/c --format json --name bench-smlens > $W/c/bench-smlens.json
B=$(box 260 15)
echo "basic box ${B}s" | tee -a $OUT/times.txt
[ $B -gt 30 ] && t timeout -s INT -k 10 $B $NCU --clock-control none --set basic -f -o $W/c/bench-basic python3 -m profiler.workloads.decoder $BW > $W/c/bench-basic.log 2>&1
echo "bench-basic kernels done: $(grep -c '==PROF== Profiling.*100%' $W/c/bench-basic.log 2>/dev/null), passes: $(grep -o '[0-9]* passes' $W/c/bench-basic.log | sort | uniq -c | tr '\n' ' ')" | tee -a $OUT/times.txt
pack c
rm -rf $W/store

# summary, last
python3 - "$W" <<'PY' 2>&1 | tee $OUT/summary.txt
import json, glob, os, sys
W = sys.argv[1]
for f in sorted(glob.glob(f"{W}/[abc]/*.json")):
    try:
        data = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "no json:", str(e)[:80]); continue
    for o in data if isinstance(data, list) else []:
        print(o.get("name"), o.get("kernels"), "kernels,", o.get("seconds"), "s, partial", o.get("partial"),
              [(i["label"], i["seconds"], i["kernels"], i["passes_per_kernel"]) for i in o.get("invocations", [])],
              (o.get("failure") or "")[:160])
import gzip, csv, collections
for f in sorted(glob.glob(f"{W}/a/*/*.csv.gz")):
    rows = list(csv.reader(l for l in gzip.open(f, "rt") if l.startswith('"')))
    h = rows[0]; k = h.index("Kernel Name"); tcol = h.index("gpu__time_duration.sum") if "gpu__time_duration.sum" in h else None
    names = collections.Counter(r[k].split("<")[0].split("(")[0][:40] for r in rows[2:])
    print(os.path.basename(f), len(rows) - 2, "kernels:", dict(names))
PY
cat $OUT/times.txt | cut -c1-170
ls -la $OUT
