#!/bin/bash
# Fifth H200 call (issue 10): the three captures call4.sh ran out of time for (Mistral-7B batch 8,
# Gemma-2-9B batch 1 and 8), 2 layers, one ncu run each (--cache-control all), with V1-V3's metrics
# less the 10-pass headline (sm__throughput) so that the three fit in two minutes. Each capture is
# packed as soon as it ends. Run from the repository root on the device: bash benchmarks/h200/call5.sh
# Locally: SKIP_WHEELS=1 TINY=1 OUT=/tmp/o5 PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call5.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
W=${W:-/tmp/call5}; rm -rf $W; mkdir -p $W/c
BUDGET=${BUDGET:-130}
PY=${PY:-python3}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-250 | tee -a $OUT/times.txt >&2; return $rc; }
left() { echo $(( BUDGET - SECONDS )); }
pack() {
  find $W/c -name "*.ncu-rep" -delete
  for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/part-c.tgz c)
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } 2>&1 | tee $OUT/env.txt
METRICS=$($PY -c "from views.registry import required_metrics as r; print(','.join(m for m in r(['V1','V2','V3']) if not m.startswith('sm__throughput')))")
if [ -n "$TINY" ]; then RUNS="tiny:8"; P=16; else RUNS="mistral-7b:8 gemma-2-9b:1 gemma-2-9b:8"; P=512; fi
for R in $RUNS; do
  M=${R%:*}; B=${R#*:}; T=$(( $(left) - 8 )); [ $T -gt 50 ] && T=50
  [ $T -gt 15 ] || { echo "SKIP hf-$M-b$B: out of time" | tee -a $OUT/times.txt; continue; }
  t timeout -k 5 $(( T + 15 )) $PY -m profiler.cli profile --quiet --store $W/store --format json --keep $W/c --time-limit $T --metrics $METRICS --cache-control all --name hf-$M-b$B-p$P -- $PY benchmarks/h200/hf_generate.py --model $M --layers 2 --batch $B --prompt $P > $W/c/hf-$M-b$B.json
  pack
done
for f in $W/c/*.json; do echo "$(basename $f) $(head -c 600 $f | tr -d '\n ')"; done | tee $OUT/summary.txt
