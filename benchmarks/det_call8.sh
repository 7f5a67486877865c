#!/usr/bin/env bash
# Issue 16's decode call 8 on the device machine: det_call7.sh's steps (the sweep, then ncu of the best
# decode kernels, clocks left alone) with benchmarks/det_call8_decode.py's configurations.
#   OUT=DIR bash benchmarks/det_call8.sh [ROLE:M ...]
SCRIPT=benchmarks/det_call8_decode.py exec bash "$(dirname "$0")/det_call7.sh" "$@"
