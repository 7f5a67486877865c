#!/bin/bash
# Second tensor-parallel call (issue 13) on nvidia-h200-x2 (2 x H200), one run, each step time-boxed:
#   1. smlens profile --tp 2 of Llama-3.1-70B, batch 8, prompt 512 (the capture the first call
#      could not make), then the same per-rank shapes at TP 1 (`--model llama-3.1-70b/tp2`, one GPU):
#      the profiling cost at TP 2 against TP 1;
#   2. a user's tensor-parallel program (benchmarks/h200/hf_tp_generate.py: Hugging Face Llama,
#      row-parallel outputs summed by dist.all_reduce in forward hooks, NCCL) under
#      `smlens profile --tp 2 -- python3 -m torch.distributed.run ...`: its collectives timed on the GPU;
#   3. Llama-3.1-8B's per-rank shapes at TP 1, batch 8 (the TP 2 run is in the first call).
# Everything lands in $OUT/tp.tgz (merged CSVs gzip -9, ncu logs, smlens JSON) and $OUT/times.txt.
# Run from the repository root on the device: WHL=../../.whl bash benchmarks/h200/call_tp2.sh
# Locally (fake ncu and nvidia-smi, tiny models on the CPU with gloo):
#   SKIP_WHEELS=1 TINY=1 OUT=/tmp/otp PATH=tests/fakes:$PATH FAKE_SMI_GPUS=2 FAKE_NCU_KEEP_PIDS=1 \
#   FAKE_NCU_CSV=<a TP capture, unzipped> bash benchmarks/h200/call_tp2.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
PY=${PY:-python3}
W=${W:-/tmp/calltp2}; rm -rf $W; mkdir -p $W/runs $W/times
BUDGET=${BUDGET:-520}   # seconds this script may use
left() { echo $(( BUDGET - SECONDS )); }
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-300 | tee -a $OUT/times.txt >&2; return $rc; }
pack() {  # the merged CSV of each run (gzip), logs and JSON; no .ncu-rep, no per-invocation CSVs
  find $W/runs -name "*.ncu-rep" -delete
  for d in $W/runs/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  cp $OUT/times.txt $W/times/ 2>/dev/null
  (cd $W && tar czf $OUT/tp.tgz runs times 2>/dev/null)
}
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m; $NCU --version | tail -1
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count(), "transformers", transformers.__version__)'
  $PY -c 'import nvtx, importlib.metadata as m; print("nvtx", m.version("nvtx"))'; } 2>&1 | tee $OUT/env.txt
if [ -n "$TINY" ]; then M8=tiny; M70=tiny; HFM=tiny; P=16; else M8=llama-3.1-8b; M70=llama-3.1-70b; HFM=llama-3.1-8b; P=512; fi
C="profile --quiet --store $W/store --keep $W/runs --format json"
B="--prompt $P --layers 2 --decode-steps 2"
run() {  # run NAME BOX LIMIT ARGS...: one smlens profile, its ncu runs stopped at LIMIT s, all at BOX
  local name=$1 box=$2 limit=$3; shift 3
  [ $(left) -gt $(( box * 2 / 3 )) ] || { echo "SKIP $name: $(left) s left" | tee -a $OUT/times.txt; return 1; }
  t timeout -k 5 $box $PY -m profiler.cli $C --time-limit $limit --name $name "$@" > $W/times/$name.json 2> $W/times/$name.err
  local rc=$?; tail -c 400 $W/times/$name.err; return $rc
}
run $M70-tp2-b8-p$P 130 110 $B --model $M70 --tp 2 --batch 8
pack
run $M70-rank-tp1-b8-p$P 60 50 $B --model $M70/tp2 --batch 8
pack
run hf-tp-$HFM-tp2-b8-p$P 200 150 --tp 2 --views V1,V2,V3 -- \
    $PY -m torch.distributed.run --nproc-per-node 2 benchmarks/h200/hf_tp_generate.py \
    --model $HFM --layers 8 --batch 8 --prompt $P
pack
run $M8-rank-tp1-b8-p$P 60 50 $B --model $M8/tp2 --batch 8
pack
ls -la $OUT
