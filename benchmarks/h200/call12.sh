#!/bin/bash
# Twelfth H200 call: issue 16's numbers of record again, with call 8's tile kernel (the mbarrier ring):
# `bench.run_determinism` with the CLI's defaults plus --emulate --generate -> $OUT/h200_det_r4.json.
# Run from the repository root on the device:  OUT=... bash benchmarks/h200/call12.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"; mkdir -p $OUT
s=$(date +%s)
timeout -k 5 ${RECORD_LIMIT:-200} python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
import det_call4
det_call4.record('$OUT', True, name='h200_det_r4.json', script='benchmarks/h200/call12.sh')
" > $OUT/record12.log 2>&1
echo "record rc=$? $(( $(date +%s) - s )) s" | tee $OUT/times12.txt
tail -3 $OUT/record12.log
