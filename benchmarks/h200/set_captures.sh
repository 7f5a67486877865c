#!/bin/bash
# Issue 27 item 5 on the H200 (written in the tenth round, not yet run: that round's device time went
# to issue 26): the built-in decoder (Llama-3.1-8B, 2 layers, batch 8, prompt 512, 2 decode steps)
# captured with smlens's own metric list (`smlens profile`), and the same workload and the same
# dedup filters (layer 0 of each prefill, layer 0 of decode step 1) under ncu's standard sets
# `--set basic`, `--set full` and `--set roofline`, each kept as a .ncu-rep and exported to the raw
# page (CSV). One ncu run per set over the three phases (caches as the program leaves them).
# Run from the repository root on the device:  OUT=... bash benchmarks/h200/set_captures.sh
# Locally (no GPU): SKIP_WHEELS=1 TINY=1 OUT=/tmp/os PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/set_captures.sh
W=${W:-/tmp/sets}
. "$(dirname "$0")/common.sh"
SETS=${SETS:-basic roofline full}
if [ -n "$TINY" ]; then SHAPE="--model llama-3.1-8b --layers 2 --batch 1 --prompt 16"; else SHAPE="--model llama-3.1-8b --layers 2 --batch 8 --prompt 512"; fi
# a --set full report of these ~52 kernels is some 65 MB (its SourceCounters section carries each
# kernel's SASS): too large to bring back or commit. Its CSV exports come back, and each report is
# read on the device by smlens's own .ncu-rep reader into views JSON, to compare with its CSV's.
# (in 15 MB parts: a file over 16 MB does not come back; the basic and roofline reports gzip to 10 MB)
pack() { rm -f $OUT/sets.tgz.part-*; (cd $W && tar czf - --exclude='*set-full.ncu-rep' c | split -b 15m - $OUT/sets.tgz.part-); }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; ncu --version | tail -1; } 2>&1 | tee $OUT/env.txt
N=decoder-llama-3.1-8b-smlens
t $PY -m profiler.cli profile --quiet --store $W/store --format json --keep $W/c/$N --name $N $SHAPE --decode-steps 2 > $W/c/$N.json
pack
FILTERS="--nvtx --nvtx-include smlens@cold_prefill/layer_0/ --nvtx-include smlens@warm_prefill/layer_0/ --nvtx-include smlens@decode/step_1/layer_0/"
for S in $SETS; do
  R=$W/c/decoder-llama-3.1-8b-set-$S
  t ncu --clock-control none --set $S $FILTERS --target-processes all --export $R --force-overwrite \
    $PY -m profiler.workloads.decoder $SHAPE --decode-steps 2 --dtype bf16 --seed 0 > $R.log 2>&1
  t ncu --import $R.ncu-rep --csv --page raw --print-units base > $R.raw.csv && gzip -9f $R.raw.csv
  t ncu --import $R.ncu-rep --csv --page details --print-units base > $R.details.csv && gzip -9f $R.details.csv
  for F in $R.ncu-rep $R.raw.csv.gz $R.details.csv.gz; do
    B=$(basename $F); t $PY -m profiler.cli ingest $F --store $W/store --name $B --format json > $W/c/$B.ingest.json
    $PY -m profiler.cli views $B --store $W/store --format json > $W/c/$B.views.json
  done
  ls -la $R.ncu-rep >> $OUT/summary.txt
  pack
done
ls -la $W/c | tee -a $OUT/summary.txt
