#!/usr/bin/env bash
# Issue 16's call 14 on the device machine: det_call14_fold.py's sweep of the partials' folds, then
# the numbers of record with the committed fold mode (benchmarks/h200/call14.sh). From the repository root:
#   OUT=DIR bash benchmarks/det_call14.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"; mkdir -p $OUT
s=$(date +%s)
timeout -k 5 ${SWEEP_LIMIT:-330} python3 benchmarks/det_call14_fold.py --out $OUT --repeats 10 --rounds 2 > $OUT/sweep.log 2>&1
echo "sweep rc=$? $(( $(date +%s) - s )) s" | tee $OUT/sweep_time.txt
tail -4 $OUT/sweep.log
[ -n "$NO_RECORD" ] || OUT=$OUT bash benchmarks/h200/call14.sh
