#!/bin/bash
# Ninth H200 call (issue 11): fp16 and int8-on-wgmma GEMMs under ncu with the views' metrics
# (benchmarks/h200/dtypes2.py). Writes $OUT/h200_dtypes2_raw.csv and the ncu log.
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
METRICS=$(python3 -c "from views.registry import required_metrics as r; print(','.join(r()))")
timeout 150 $NCU --clock-control none --nvtx --nvtx-include 'smlens@fp16/' --nvtx-include 'smlens@int8_wgmma/' \
  --csv --page raw --print-units base --metrics $METRICS python3 benchmarks/h200/dtypes2.py \
  > $OUT/h200_dtypes2_raw.csv 2> $OUT/ncu.log
echo "rc=$?"; tail -5 $OUT/ncu.log; grep -c '^"' $OUT/h200_dtypes2_raw.csv
