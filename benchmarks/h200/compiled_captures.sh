#!/bin/bash
# Issue 26 on the H200: a Hugging Face Llama-3.1-8B-shaped generate (2 layers, batch 8, prompt 512,
# 3 new tokens, a warm-up request then the measured one) run three ways, each under
# `smlens profile` (all eight views, dedup) and alone (the profiling cost):
#   eager    as written;
#   compile  model.forward = torch.compile(model.forward) (inductor, default mode);
#   static   generate(cache_implementation="static"): transformers compiles each decode step
#            (mode "reduce-overhead", CUDA graphs), profiled with --graph-profiling node.
# Each capture is the merged raw CSV that --keep leaves, packed as soon as its run ends.
# Run from the repository root on the device:  OUT=... bash benchmarks/h200/compiled_captures.sh
# Locally (no GPU): SKIP_WHEELS=1 TINY=1 OUT=/tmp/oc PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/compiled_captures.sh
W=${W:-/tmp/compiled}
. "$(dirname "$0")/common.sh"
MODES=${MODES:-compile static eager}
LIMIT=${LIMIT:-170}   # seconds per profile; LIMIT_<mode> for one mode
ALONE=${ALONE:-1}     # 0: no run of the program alone (its cost measured in an earlier call)
if [ -n "$TINY" ]; then MODEL=tiny; B=2; P=16; else MODEL=llama-3.1-8b; B=8; P=512; fi
pack() {
  find $W/c -name "*.ncu-rep" -delete
  for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/compiled.tgz c)
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  $PY -c 'import sys, torch, transformers; import torch._inductor.config as c; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "provenance_tracking_level" in dir(c.trace))'
  ncu --version | tail -1; } 2>&1 | tee $OUT/env.txt
ARGS="benchmarks/h200/hf_generate.py --model $MODEL --layers 2 --batch $B --prompt $P"
for MODE in $MODES; do
  [ "$ALONE" = 0 ] || t $PY $ARGS --mode $MODE > $W/c/alone-$MODE.json 2> $W/c/alone-$MODE.err
  G=""; [ $MODE = static ] && G="--graph-profiling node"
  N=hf-$MODEL-$MODE-b$B-p$P
  L=$(eval echo \${LIMIT_$MODE:-$LIMIT})
  t timeout -k 5 $(( L + 20 )) $PY -m profiler.cli profile --quiet --store $W/store --format json --keep $W/c \
    --time-limit $L $G --name $N -- $PY $ARGS --mode $MODE > $W/c/profile-$MODE.json 2> $W/c/profile-$MODE.err
  $PY -m profiler.cli views $N --store $W/store --format json > $W/c/views-$MODE.json 2>> $W/c/profile-$MODE.err
  pack
done
for f in $W/c/*.json; do echo "$(basename $f) $(head -c 400 $f | tr -d '\n ')"; done | tee $OUT/summary.txt
