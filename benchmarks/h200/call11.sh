#!/bin/bash
# Eleventh H200 call: issue 16's numbers of record with the kernels call 7 adopted (det_sgemm.cu's tile
# kernel from M = 1024, det_decode.cu's rules at M = 5..16): `bench.run_determinism` with the CLI's
# defaults plus --emulate --generate -> $OUT/h200_det_r3.json; then call10.sh again (the Mixtral
# capture, now with the annotation of transformers' decode-time bmm experts). Run from the
# repository root on the device:  OUT=... bash benchmarks/h200/call11.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"; mkdir -p $OUT
s=$(date +%s)
timeout -k 5 ${RECORD_LIMIT:-300} python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
import det_call4
det_call4.record('$OUT', True, name='h200_det_r3.json', script='benchmarks/h200/call11.sh')
" > $OUT/record11.log 2>&1
echo "record rc=$? $(( $(date +%s) - s )) s" | tee $OUT/times11.txt
tail -3 $OUT/record11.log
SKIP_WHEELS=1 OUT=$OUT bash benchmarks/h200/call10.sh > $OUT/call10.log 2>&1
echo "call10 rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/times11.txt
