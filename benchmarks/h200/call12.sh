#!/bin/bash
# Twelfth H200 call: issue 16's numbers of record again, with call 8's tile kernel (the mbarrier ring):
# `bench.run_determinism` with the CLI's defaults plus --emulate --generate -> $OUT/h200_det_r4.json.
# Run from the repository root on the device:  OUT=... bash benchmarks/h200/call12.sh
# (later records run this with RECORD_NAME and RECORD_SCRIPT set: call13.sh)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"; mkdir -p $OUT
name=${RECORD_NAME:-h200_det_r4.json}; script=${RECORD_SCRIPT:-benchmarks/h200/call12.sh}
s=$(date +%s)
timeout -k 5 ${RECORD_LIMIT:-200} python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
import det_call4
det_call4.record('$OUT', True, name='$name', script='$script')
" > $OUT/record.log 2>&1
echo "record rc=$? $(( $(date +%s) - s )) s" | tee $OUT/times.txt
tail -3 $OUT/record.log
