#!/bin/bash
# Eleventh H200 call: issue 16's numbers of record with the kernels call 7 adopted (det_sgemm.cu's tile
# kernel from M = 1024, det_decode.cu's rules at M = 5..16): `bench.run_determinism` with the CLI's
# defaults plus --emulate --generate -> $OUT/h200_det_r3.json (call12.sh's record step, another
# name); then call10.sh again (the Mixtral capture, now with the annotation of transformers'
# decode-time bmm experts). Run from the repository root on the device:  OUT=... bash benchmarks/h200/call11.sh
: "${OUT:?set OUT}"
RECORD_NAME=h200_det_r3.json RECORD_SCRIPT=benchmarks/h200/call11.sh RECORD_LIMIT=${RECORD_LIMIT:-300} \
  bash "$(dirname "$0")/call12.sh" || exit 1
s=$(date +%s)
SKIP_WHEELS=1 OUT=$OUT bash benchmarks/h200/call10.sh > $OUT/call10.log 2>&1
echo "call10 rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/times.txt
