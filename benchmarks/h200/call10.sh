#!/bin/bash
# Tenth H200 call: an unmodified Hugging Face mixture-of-experts generate (Mixtral-8x7B's layer shapes,
# 2 layers, random weights, transformers' default grouped_mm experts) under `smlens profile -- CMD`,
# as call 7 made the dense families' captures (one ncu run, --cache-control all, V1-V3's metrics),
# and the program alone for its time and tokens. Run from the repository root on the device:
#   OUT=... bash benchmarks/h200/call10.sh
# Locally (no GPU): SKIP_WHEELS=1 TINY=1 OUT=/tmp/o10 PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call10.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"; mkdir -p $OUT
W=${W:-/tmp/call10}; rm -rf $W; mkdir -p $W/c
PY=${PY:-python3}
LIMIT=${LIMIT:-150}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-250 | tee -a $OUT/times10.txt >&2; return $rc; }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'; } 2>&1 | tee $OUT/env10.txt
if [ -n "$TINY" ]; then M=tiny-moe; P=16; else M=mixtral-8x7b; P=512; fi
B=8
t $PY benchmarks/h200/hf_generate.py --model $M --layers 2 --batch $B --prompt $P > $OUT/plain10.json
t timeout -k 5 $(( LIMIT + 20 )) $PY -m profiler.cli profile --quiet --store $W/store --format json --keep $W/c --time-limit $LIMIT --views V1,V2,V3 --cache-control all --name hf-$M-b$B-p$P -- $PY benchmarks/h200/hf_generate.py --model $M --layers 2 --batch $B --prompt $P > $W/c/hf-$M-b$B.json
find $W/c -name "*.ncu-rep" -delete
for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
(cd $W && tar czf $OUT/hf10.tgz c)
head -c 1500 $W/c/hf-$M-b$B.json | tee $OUT/summary10.txt
