#!/bin/bash
# Tensor-parallel call (issue 13) on nvidia-h200-x2 (2 x H200), one run, each step time-boxed:
#   1. smlens profile --tp 2 of Llama-3.1-8B and Llama-3.1-70B, batch 1 and 8, prompt 512, 2 layers,
#      2 decode steps (dedup): four stored runs, their merged CSVs kept as test captures;
#   2. the profiling cost at TP 1 for the same per-rank shapes: `--model <m>/tp2` on one GPU
#      (batch 8; the 70B one only when time is left).
# Everything lands in $OUT/tp.tgz (merged CSVs gzip -9, ncu logs, smlens JSON) and $OUT/times.txt.
# Run from the repository root on the device: WHL=../../.whl bash benchmarks/h200/call_tp.sh
# Locally (fake ncu and nvidia-smi, tiny model on the CPU with gloo):
#   SKIP_WHEELS=1 TINY=1 OUT=/tmp/otp PATH=tests/fakes:$PATH FAKE_SMI_GPUS=2 \
#   FAKE_NCU_CSV=<a TP capture> bash benchmarks/h200/call_tp.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
W=${W:-/tmp/calltp}; rm -rf $W; mkdir -p $W/runs
BUDGET=${BUDGET:-270}   # seconds this script may use
left() { echo $(( BUDGET - SECONDS )); }
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-260 | tee -a $OUT/times.txt >&2; return $rc; }
pack() {  # the merged CSV of each run (gzip), logs and JSON; no .ncu-rep, no per-invocation CSVs
  find $W/runs -name "*.ncu-rep" -delete
  for d in $W/runs/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/tp.tgz runs times 2>/dev/null)
}
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m; $NCU --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  python3 -c 'import nvtx, importlib.metadata as m; print("nvtx", m.version("nvtx"))'; } 2>&1 | tee $OUT/env.txt
if [ -n "$TINY" ]; then M8=tiny; M70=tiny; P=16; else M8=llama-3.1-8b; M70=llama-3.1-70b; P=512; fi
C="profile --prompt $P --layers 2 --decode-steps 2 --quiet --store $W/store --keep $W/runs --format json"
mkdir -p $W/times
run() {  # run NAME BOX LIMIT ARGS...: one smlens profile, its ncu runs stopped at LIMIT s, all at BOX
  local name=$1 box=$2 limit=$3; shift 3
  [ $(left) -gt $(( box / 2 )) ] || { echo "SKIP $name: $(left) s left" | tee -a $OUT/times.txt; return 1; }
  t timeout -k 5 $box python3 -m profiler.cli $C --time-limit $limit "$@" > $W/times/$name.json 2> $W/times/$name.err
}
# 1. the four TP 2 captures; stop at the first failure (a hang would repeat in every step)
ok=1
for spec in "$M8 1" "$M8 8" "$M70 1" "$M70 8"; do
  set -- $spec
  [ $ok = 1 ] || break
  run $1-tp2-b$2 170 110 --model $1 --tp 2 --batch $2 || ok=0
  tail -c 600 $W/times/$1-tp2-b$2.err
done
pack
# 2. TP 1, one rank's shapes on one GPU
for m in $M8 $M70; do
  [ $ok = 1 ] && run $m-rank-tp1-b8 80 60 --model $m/tp2 --batch 8
done
pack
cp $OUT/times.txt $W/times/ 2>/dev/null; pack
ls -la $OUT
