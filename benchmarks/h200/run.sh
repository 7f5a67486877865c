#!/bin/bash
# The GPU suites: one device call runs one suite (or several, in turn) from the repository root:
#   OUT=DIR bash benchmarks/h200/run.sh SUITE [SUITE ...]      (--list: the suites, one line each)
# What each suite ran as which call, and what it found: benchmarks/CALLS.md. Each suite works in
# $W (/tmp/smlens-<suite>), keeps the merged raw CSV of each profile gzipped (no .ncu-rep), packs
# $OUT/<suite>.tgz as soon as each step ends (a call cut short still returns what was done) and appends
# each step's wall time and exit code to $OUT/times.txt. BUDGET (seconds, default 540) bounds a suite:
# steps that no longer fit are skipped, said so in times.txt.
# Locally, no GPU (the fake ncu and nvidia-smi of tests/fakes; tiny models on the CPU), every suite
# but those whose programs need a GPU of their own (det-gemm, det-record, graphs, dtypes):
#   SKIP_WHEELS=1 TINY=1 OUT=/tmp/o PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/run.sh models
# (tp also FAKE_SMI_GPUS=2 FAKE_NCU_KEEP_PIDS=1). Knobs: MODELS (model:layers ...), BATCHES, PY, WHL.
HERE=$(cd "$(dirname "$0")" && pwd)
declare -A SUITES=(  # one line each, to fit 80 columns in --list
  [check]="the decoder alone and profiled: dedup, every kernel, a limit"
  [models]="the built-in decoder, four models at batch 1 and 8, all eight views"
  [gate]="the gate's decode-only captures: batch 1 and 4, three runs each"
  [cost]="smlens profile against ncu --set basic and full (bench_profile.py)"
  [det-gemm]="--workload det-gemm: cuBLAS bf16, det, LayerCast at M = 1, 16, 2048"
  [det-record]="the det GEMMs' numbers of record: bench determinism, emulated"
  [hf]="Hugging Face generates under profile --: four families, batch 1, 8"
  [hf-cost]="a 32-layer HF generate: profiled, as the built-in decoder, alone"
  [moe]="a Hugging Face Mixtral-8x7B generate (2 layers) under profile --"
  [graphs]="a decode replayed as a CUDA graph, --graph-profiling node"
  [tp]="2 GPUs: the decoder at TP 2, its ranks' shapes at TP 1, torchrun"
  [dtypes]="fp16 and int8 (wgmma) GEMMs under ncu with the views' metrics"
  [compiled]="eager, compiled, static-cache HF generates (compiled_captures.sh)"
  [sets]="smlens's metrics against ncu's standard sets (set_captures.sh)"
  [sweep]="smlens sweep grids over batch, prompt and model (sweep_study.sh)"
)
usage() {
  echo "usage: OUT=DIR bash benchmarks/h200/run.sh SUITE [SUITE ...]; the suites:" >&2
  for s in $(printf '%s\n' "${!SUITES[@]}" | sort); do printf '  %-10s %s\n' "$s" "${SUITES[$s]}" >&2; done
}
[ "$1" = --list ] && { usage 2>&1; exit 0; }
[ $# -gt 0 ] || { usage; exit 2; }
for s in "$@"; do [ -n "${SUITES[$s]}" ] || { echo "run.sh: no suite '$s'" >&2; usage; exit 2; }; done
[ -n "$OUT" ] || { echo "run.sh: set OUT to the folder the results go to" >&2; exit 2; }
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast off
if [ $# -gt 1 ]; then  # each suite in a shell of its own, so one that fails leaves the next to run
  for s in "$@"; do bash "$0" "$s"; echo "suite $s rc=$?" | tee -a "$OUT/times.txt"; done; exit 0
fi
SUITE=$1
case $SUITE in  # the suites that are scripts of their own
  compiled) exec bash "$HERE/compiled_captures.sh" ;;
  sets) exec bash "$HERE/set_captures.sh" ;;
  sweep) [ -f "$HERE/sweep_study.sh" ] || { echo "run.sh: benchmarks/h200/sweep_study.sh is not in this tree" >&2; exit 2; }
         exec bash "$HERE/sweep_study.sh" ;;
esac
W=${W:-/tmp/smlens-$SUITE}
. "$HERE/common.sh"
BUDGET=${BUDGET:-540}
left() { echo $(( BUDGET - SECONDS )); }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
pack() {
  find $W/c -name "*.ncu-rep" -delete
  for d in $W/c/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/$SUITE.tgz c)
}
# profile NAME LIMIT ARGS...: one smlens profile into the suite's store, its ncu runs stopped at LIMIT
# seconds; skipped when the budget has not LIMIT + 20 left. Output: $W/c/NAME.json and NAME.err.
profile() {
  local name=$1 limit=$2; shift 2
  [ $(left) -gt $(( limit + 20 )) ] || { echo "SKIP $name: $(left) s left" | tee -a $OUT/times.txt; return 1; }
  t timeout -k 5 $(( limit + 30 )) $PY -m profiler.cli profile --quiet --store $W/store --keep $W/c --format json \
    --time-limit $limit --name $name "$@" > $W/c/$name.json 2> $W/c/$name.err
  local rc=$?; pack; return $rc
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
  $NCU --version | tail -1
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee $OUT/env-$SUITE.txt
if [ -n "$TINY" ]; then P=16; DM=tiny; HM=tiny; else P=512; DM=llama-3.1-8b; HM=llama-3.1-8b; fi
HF=benchmarks/h200/hf_generate.py
echo "suite $SUITE: ${SUITES[$SUITE]}" | tee -a $OUT/times.txt
case $SUITE in
check)
  M="--model $DM --layers 2 --batch 8 --prompt $P --decode-steps 2"
  t $PY -m profiler.workloads.decoder $M > $W/c/alone.json
  t $PY -m profiler.workloads.decoder $M --no-nvtx > $W/c/alone-no-nvtx.json
  profile every-kernel 150 $M --no-dedup --metrics gpu__time_duration.sum,launch__grid_size
  profile dedup 150 $M
  profile limited 15 $M --no-dedup
  t $PY -m profiler.cli doctor --deep --format json > $W/c/doctor.json; pack ;;
models)
  [ -n "$TINY" ] && MODELS=${MODELS:-tiny:2}
  for spec in ${MODELS:-llama-3.1-8b:4 qwen2.5-7b:4 mistral-7b:4 llama-3.1-70b:2}; do
    for b in ${BATCHES:-1 8}; do
      profile ${spec%:*}-b$b-p$P 170 --model ${spec%:*} --layers ${spec#*:} --batch $b --prompt $P --decode-steps 4
    done
  done ;;
gate)
  G="--model $DM --layers 1 --prompt 128 --decode-steps 2 --phases decode"
  for b in ${BATCHES:-1 4}; do for i in 1 2 3; do profile gate-b$b-r$i 60 $G --batch $b; done; done ;;
cost)
  Q=""; [ -n "$TINY" ] && Q=--quick
  t $PY benchmarks/bench_profile.py gpu $Q --basic-box $(( $(left) - 60 )) > $W/c/cost.json; pack ;;
det-gemm)
  for spec in cublas_bf16:45 det:90 layercast:60; do
    profile det-gemm-${spec%:*} ${spec#*:} --workload det-gemm --model $DM --tokens 1,16,2048 --impl ${spec%:*}
  done ;;
det-record)
  t timeout -k 5 $(( $(left) - 10 )) $PY -m profiler.cli bench determinism --emulate --generate \
    --out $W/c/h200_det_record.json --format json > /dev/null 2> $W/c/record.err
  $PY benchmarks/h200/det_configs.py $W/c/h200_det_record.json; pack ;;
hf)
  [ -n "$TINY" ] && MODELS=${MODELS:-tiny}
  for m in ${MODELS:-llama-3.1-8b qwen2.5-7b mistral-7b gemma-2-9b}; do for b in ${BATCHES:-1 8}; do
    profile hf-$m-b$b-p$P 100 --views V1,V2,V3 --cache-control all -- $PY $HF --model $m --layers 2 --batch $b --prompt $P
  done; done ;;
hf-cost)
  L=32; [ -n "$TINY" ] && L=2
  profile hf-$HM-b8-p$P 160 -- $PY $HF --model $HM --layers $L --batch 8 --prompt $P
  profile decoder-$DM-b8-p$P 60 --model $DM --layers $L --batch 8 --prompt $P --decode-steps 2
  t timeout -k 5 60 $PY $HF --model $HM --layers $L --batch 8 --prompt $P > $W/c/alone.json; pack ;;
moe)
  m=mixtral-8x7b; [ -n "$TINY" ] && m=tiny-moe
  t $PY $HF --model $m --layers 2 --batch 8 --prompt $P > $W/c/alone.json
  profile hf-$m-b8-p$P 150 --views V1,V2,V3 --cache-control all -- $PY $HF --model $m --layers 2 --batch 8 --prompt $P ;;
graphs)
  profile graph-decode 60 --graph-profiling node -- $PY benchmarks/h200/graph_decode.py ;;
tp)
  M70=llama-3.1-70b; [ -n "$TINY" ] && M70=tiny
  B="--layers 2 --prompt $P --decode-steps 2"
  for spec in "$DM 1" "$DM 8" "$M70 1" "$M70 8"; do set -- $spec
    profile $1-tp2-b$2-p$P 110 $B --model $1 --tp 2 --batch $2 || break  # a hang would repeat in each
  done
  for m in $DM $M70; do profile $m-rank-tp1-b8-p$P 50 $B --model $m/tp2 --batch 8; done
  profile hf-tp-$HM-tp2-b8-p$P 150 --tp 2 --views V1,V2,V3 -- $PY -m torch.distributed.run --nproc-per-node 2 \
    benchmarks/h200/hf_tp_generate.py --model $HM --layers 8 --batch 8 --prompt $P ;;
dtypes)
  METRICS=$($PY -c "from views.registry import required_metrics as r; print(','.join(r()))")
  t timeout 150 $NCU --clock-control none --nvtx --nvtx-include 'smlens@fp16/' --nvtx-include 'smlens@int8_wgmma/' \
    --csv --page raw --print-units base --metrics $METRICS $PY benchmarks/h200/dtypes2.py \
    > $W/c/h200_dtypes_raw.csv 2> $W/c/ncu.log
  gzip -9f $W/c/h200_dtypes_raw.csv; pack ;;
esac
for f in $W/c/*.json; do [ -f "$f" ] && echo "$(basename $f) $(head -c 400 $f | tr -d '\n ')"; done | tee $OUT/summary-$SUITE.txt
