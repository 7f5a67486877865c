#!/bin/bash
# Fourteenth H200 call: issue 16's numbers of record with call 14's fold (det_decode.cu's fold kernel as
# a programmatic dependent launch) -> $OUT/h200_det_r6.json. From the repository root on the device:
#   OUT=... bash benchmarks/h200/call14.sh
RECORD_NAME=h200_det_r6.json RECORD_SCRIPT=benchmarks/h200/call14.sh exec bash "$(dirname "$0")/call12.sh"
