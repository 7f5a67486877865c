#!/usr/bin/env bash
# Issue 16's decode call 13 on the device machine: det_call7.sh's steps (the sweep, then ncu of the
# adopted and the fastest new gate_up kernel, clocks left alone) with det_call13_decode.py's configurations.
#   OUT=DIR bash benchmarks/det_call13.sh [ROLE:M ...]
SCRIPT=benchmarks/det_call13_decode.py exec bash "$(dirname "$0")/det_call7.sh" "$@"
