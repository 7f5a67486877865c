# Sourced by the H200 capture scripts (compiled_captures.sh, set_captures.sh): the nvtx wheel the
# GPU image lacks (SKIP_WHEELS=1: already there), this checkout on PYTHONPATH, $OUT required, the
# work folder $W (emptied, its captures under $W/c), the Python to run ($PY), and t, which runs a
# command and appends its wall time and exit code to $OUT/times.txt.
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}" "${W:?set W}"
rm -rf $W; mkdir -p $W/c
PY=${PY:-python3}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-250 | tee -a $OUT/times.txt >&2; return $rc; }
