#!/bin/bash
# Issue 30 item 3 on the H200: the sweep study, two `smlens sweep` grids of the built-in decoder
# (2 layers, 2 decode steps, all three phases, the eight views' metrics, dedup):
#   1. Llama-3.1-8B at batch 1, 4, 16, 64 x prompt 256, 1024, 4096 (12 points);
#   2. the four model shapes of tests/data/h200_runs (Llama-3.1-8B, Qwen2.5-7B, Mistral-7B,
#      Llama-3.1-70B) at batch 1 and 16, prompt 1024 (8 points; Llama-3.1-8B's two are grid 1's,
#      reused, not profiled again).
# One device call does not hold the 20 points (about 30 s each), so the store is kept between calls:
# STORE (a folder in the repository, carried to the next call; default $OUT/store) is where the
# sweeps store and find their runs, so each call profiles only the points the store lacks; LIMIT
# (seconds, default 520) bounds the call's sweeps: a point whose estimate no longer fits is not
# started, and the sweep exits 7 saying so. Each call leaves under $OUT: env.txt, times.txt, the
# grids' plans before (plan-*.json) and outcomes (sweep-*.json, progress lines in sweep-*.err),
# runs.json, sweep.tgz (each point's merged raw CSV, gzipped) and store.tgz (the store as it is).
# Run from the repository root on the device:  OUT=... STORE=smlens-store bash benchmarks/h200/sweep_study.sh
# (smlens-store is git-ignored: carry it, with .whl; after the call unpack $OUT/store.tgz in the
# repository root, `tar xzf store.tgz`, so the next call carries the store as this one left it).
# Locally (no GPU): SKIP_WHEELS=1 TINY=1 OUT=/tmp/osw PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/sweep_study.sh
W=${W:-/tmp/sweep}
. "$(dirname "$0")/common.sh"
STORE=${STORE:-$OUT/store}
LIMIT=${LIMIT:-520}
if [ -n "$TINY" ]; then  # the fake ncu replays the same rows at every point; tiny shapes run on a CPU
  GRIDS=("--model tiny --batch 1,2 --prompt 8,16" "--model tiny,llama-3.1-8b --batch 1,2 --prompt 16")
else
  GRIDS=("--model llama-3.1-8b --batch 1,4,16,64 --prompt 256,1024,4096"
         "--model llama-3.1-8b,qwen2.5-7b,mistral-7b,llama-3.1-70b --batch 1,16 --prompt 1024")
fi
SWEEP="$PY -m profiler.cli sweep --layers 2 --decode-steps 2 --store $STORE"
pack() {
  find $W/c -name "*.ncu-rep" -delete
  for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/sweep.tgz c)
  [ -d "$STORE" ] && tar czf $OUT/store.tgz -C "$(dirname "$STORE")" "$(basename "$STORE")"
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  ncu --version | tail -1; echo "store $STORE"; } 2>&1 | tee $OUT/env.txt
for i in ${ORDER:-${!GRIDS[@]}}; do  # ORDER="1 0": the grids in another order
  $SWEEP ${GRIDS[$i]} --plan --format json > $OUT/plan-$i.json 2>> $OUT/sweep-$i.err
  LEFT=$(( LIMIT - SECONDS ))
  if [ $LEFT -le 0 ]; then echo "grid $i: no time left in this call" | tee -a $OUT/times.txt; continue; fi
  # the sweep stops itself before a point that does not fit; timeout is the backstop
  t timeout -k 10 $(( LEFT + 60 )) $SWEEP ${GRIDS[$i]} --quiet --format json --keep $W/c \
    --time-limit $LEFT > $OUT/sweep-$i.json 2>> $OUT/sweep-$i.err
  pack
done
$PY -m profiler.cli runs --store $STORE --format json > $OUT/runs.json
for i in "${!GRIDS[@]}"; do echo "grid $i: $(tail -2 $OUT/sweep-$i.err 2>/dev/null | tr '\n' ' ' | cut -c1-300)"; done | tee $OUT/summary.txt
