#!/bin/bash
# Second H200 call for issue 4 (and the captures issue 7's gate tests need):
#   1. smlens profile of the four models at batch 1 and 8 (all three phases, the views' metrics)
#   2. four small decode-only runs for the gate: three of one workload, one at another batch
#   3. the benchmark: smlens profile vs plain `ncu --set basic` and `ncu --set full` (time-boxed)
# Run from the repository root on the device: bash benchmarks/h200/call2.sh
# Locally (fake ncu, tiny model): SKIP_WHEELS=1 TINY=1 OUT=/tmp/o PATH=tests/fakes:$PATH bash ...
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
W=$OUT/w; mkdir -p $W/runs
BUDGET=${BUDGET:-490}   # seconds this script may use; steps are skipped or time-boxed to fit
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | tee -a $W/times.txt >&2; return $rc; }
left() { echo $(( BUDGET - SECONDS )); }
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; $NCU --version | tail -1
  python3 -c 'import torch, nvtx; print("torch", torch.__version__, "cuda", torch.version.cuda, "nvtx", nvtx.__version__ if hasattr(nvtx, "__version__") else "?")'; } | tee $W/env.txt
P="profile --prompt 512 --decode-steps 4 --quiet --store $W/store --keep $W/runs --format json --time-limit 170"
if [ -n "$TINY" ]; then MODELS="tiny:2 tiny:2 tiny:2 tiny:2"; L8=tiny; P="${P/--prompt 512/--prompt 16}"; else MODELS="llama-3.1-8b:4 qwen2.5-7b:4 mistral-7b:4 llama-3.1-70b:2"; L8=llama-3.1-8b; fi
# 1. the four models, batch 1 and 8: one run each (Llama-3.1-8B's batch 8 run is the benchmark's)
for spec in $MODELS; do
  m=${spec%:*}; l=${spec#*:}
  for b in 1 8; do
    [ $(left) -gt 60 ] || { echo "SKIP $m b$b: out of time"; continue; }
    t python3 -m profiler.cli $P --model $m --layers $l --batch $b > $W/$m-b$b.json
  done
done
# 2. the gate's captures: decode only, Llama-3.1-8B 1 layer, batch 1 three times, batch 4 once
G="profile --model $L8 --layers 1 --prompt 128 --decode-steps 2 --phases decode --quiet --store $W/store --keep $W/runs --format json --time-limit 60"
for i in 1 2 3; do [ $(left) -gt 40 ] && t python3 -m profiler.cli $G --batch 1 --name gate-b1-r$i > $W/gate-b1-r$i.json; done
[ $(left) -gt 40 ] && t python3 -m profiler.cli $G --batch 4 --name gate-b4-r1 > $W/gate-b4-r1.json
# 3. benchmark workload: the same program smlens ran for $L8 batch 8
BW="-m profiler.workloads.decoder --model $L8 --layers 4 --batch 8 --prompt 512 --decode-steps 4"
[ -n "$TINY" ] && BW="-m profiler.workloads.decoder --model tiny --layers 2 --batch 8 --prompt 16 --decode-steps 4"
t python3 $BW > $W/bench-plain.json
t $NCU --clock-control none --metrics gpu__time_duration.sum python3 $BW > $W/bench-count.log 2>&1
t timeout -s INT -k 10 30 $NCU --clock-control none --set full -f -o $W/bench-full python3 $BW > $W/bench-full.log 2>&1
BOX=$(( $(left) - 25 )); [ $BOX -gt 240 ] && BOX=240
echo "basic box ${BOX}s" | tee -a $W/times.txt
[ $BOX -gt 30 ] && t timeout -s INT -k 10 $BOX $NCU --clock-control none --set basic -f -o $W/bench-basic python3 $BW > $W/bench-basic.log 2>&1
for f in count full basic; do echo "bench-$f kernels: $(grep -c '==PROF== Profiling' $W/bench-$f.log 2>/dev/null)" | tee -a $W/times.txt; done
grep -h "passes" $W/bench-full.log | tail -1; grep -h "passes" $W/bench-basic.log | tail -1
# keep what comes back small: the merged CSV of each run (gzip), logs and JSON; no .ncu-rep
find $W -name "*.ncu-rep" -delete
for d in $W/runs/*/; do n=$(basename $d); rm -f $d/$n-*.csv; gzip -9 $d/$n.csv 2>/dev/null; done
rm -rf $W/store
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/w/*.json")):
    try:
        data = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "unreadable", e); continue
    for o in data if isinstance(data, list) else []:
        print(o.get("name"), o.get("kernels"), "skipped", o.get("skipped_duplicates"), "partial", o.get("partial"),
              "s", o.get("seconds"), [(i["label"], i["seconds"], i["kernels"], i["passes_per_kernel"]) for i in o.get("invocations", [])],
              o.get("failure") or "")
PY
cat $W/times.txt | cut -c1-140
cd $OUT && tar czf call2.tgz w && rm -rf w && ls -la $OUT
