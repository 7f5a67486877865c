#!/bin/bash
# Eighth call, on nvidia-h200-x2: (1) issue 13: the user's tensor-parallel HF program of call_tp2.sh
# again, with a time limit that lets every phase finish, so its collectives are timed on the GPU
# (CUDA events, NCCL) and merged; (2) issue 10: benchmarks/h200/call7.sh on GPU 0 in the time left.
# Run from the repository root on the device: OUT=... bash benchmarks/h200/call8.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SKIP_WHEELS=1
: "${OUT:?set OUT}"
PY=${PY:-python3}
W=${W:-/tmp/call8}; rm -rf $W; mkdir -p $W/runs
TOTAL=${TOTAL:-570}   # seconds for the whole script
if [ -n "$TINY" ]; then M=tiny; P=16; else M=llama-3.1-8b; P=512; fi
s=$(date +%s%N)
timeout -k 5 380 $PY -m profiler.cli profile --quiet --store $W/store --keep $W/runs --format json \
    --time-limit ${TP_LIMIT:-350} --name hf-tp-$M-tp2-b8-p$P --tp 2 --views V1,V2,V3 -- \
    $PY -m torch.distributed.run --nproc-per-node 2 benchmarks/h200/hf_tp_generate.py \
    --model $M --layers 8 --batch 8 --prompt $P > $W/tp.json 2> $W/tp.err
rc=$?
echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: hf-tp-$M-tp2-b8-p$P" | tee $OUT/times8.txt
tail -c 600 $W/tp.err
find $W/runs -name "*.ncu-rep" -delete
for d in $W/runs/*/; do n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
(cd $W && tar czf $OUT/tp3.tgz runs tp.json tp.err)
CUDA_VISIBLE_DEVICES=0 BUDGET=$(( TOTAL - SECONDS )) bash benchmarks/h200/call7.sh
