#!/bin/bash
# Seventh H200 call (issue 10): the Hugging Face captures that earlier calls left incomplete, now that
# each ncu run ends the program after its last profiled forward: Gemma-2-9B batch 8 (never made),
# Mistral-7B batch 8 and Gemma-2-9B batch 1 (no warm prefill), Qwen2.5-7B batch 8 (warm prefill cut).
# As call 4: 2 layers, one ncu run each (--cache-control all), V1-V3's metrics, on one GPU.
# Each capture is packed as soon as it ends. Run from the repository root on the device:
#   OUT=... bash benchmarks/h200/call7.sh
# Locally: SKIP_WHEELS=1 TINY=1 OUT=/tmp/o7 PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call7.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
W=${W:-/tmp/call7}; rm -rf $W; mkdir -p $W/c
BUDGET=${BUDGET:-300}
PY=${PY:-python3}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-250 | tee -a $OUT/times7.txt >&2; return $rc; }
left() { echo $(( BUDGET - SECONDS )); }
pack() {
  find $W/c -name "*.ncu-rep" -delete
  for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/hf.tgz c)
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'; } 2>&1 | tee $OUT/env7.txt
if [ -n "$TINY" ]; then RUNS="tiny:8"; P=16; else RUNS="gemma-2-9b:8 mistral-7b:8 gemma-2-9b:1 qwen2.5-7b:8"; P=512; fi
for R in $RUNS; do
  M=${R%:*}; B=${R#*:}; T=$(( $(left) - 10 )); [ $T -gt 100 ] && T=100
  [ $T -gt 40 ] || { echo "SKIP hf-$M-b$B: out of time" | tee -a $OUT/times7.txt; continue; }
  t timeout -k 5 $(( T + 15 )) $PY -m profiler.cli profile --quiet --store $W/store --format json --keep $W/c --time-limit $T --views V1,V2,V3 --cache-control all --name hf-$M-b$B-p$P -- $PY benchmarks/h200/hf_generate.py --model $M --layers 2 --batch $B --prompt $P > $W/c/hf-$M-b$B.json
  pack
done
for f in $W/c/*.json; do echo "$(basename $f) $(head -c 600 $f | tr -d '\n ')"; done | tee $OUT/summary7.txt
