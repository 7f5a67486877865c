#!/bin/bash
# Thirteenth H200 call: issue 16's numbers of record with call 13's kernels (prefill flags 284 and the
# decode rules of call 13) -> $OUT/h200_det_r5.json. From the repository root on the device:
#   OUT=... bash benchmarks/h200/call13.sh
RECORD_NAME=h200_det_r5.json RECORD_SCRIPT=benchmarks/h200/call13.sh exec bash "$(dirname "$0")/call12.sh"
