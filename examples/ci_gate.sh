#!/bin/bash
# A performance gate on hardware counters for any CI system (examples/github-actions-gpu.yml is the
# same for GitHub Actions): profile the workload, keep the runs in a store that outlives the job,
# and on a branch other than main gate them against main's newest runs.
#
#   BRANCH=main   COMMIT=$SHA bash examples/ci_gate.sh      # on main: the runs are the baseline
#   BRANCH=pr-123 COMMIT=$SHA bash examples/ci_gate.sh      # on a change: profile, then gate
#
# Exit code: 0 no regression, 1 a regression, 2 the gate could not judge, any other: smlens could
# not profile (smlens --help lists the codes). Written: gate.md (the job's summary), gate-junit.xml
# (a test report), report.html (the current run against main's newest). The store is $SMLENS_STORE
# (a folder on the runner, or s3://bucket/prefix). What to profile: the arguments, default the
# built-in decoder at Llama-3.1-8B's shapes; `-- python3 my_server_bench.py` for your own program.
# REPEAT (default 3) profiles of each side: the gate needs repeats to tell a change from noise.
set -u
: "${BRANCH:?set BRANCH}" "${COMMIT:?set COMMIT}" "${SMLENS_STORE:?set SMLENS_STORE to a store that outlives the job}"
SMLENS=${SMLENS:-smlens}
RULES=${RULES:-$(dirname "$0")/gate.toml}
[ $# -gt 0 ] || set -- --model llama-3.1-8b --layers 2 --batch 8 --prompt 512 --decode-steps 2
NAME="$BRANCH-${COMMIT:0:8}"
$SMLENS doctor --format json > doctor.json || { echo "ci_gate.sh: this runner cannot profile (doctor.json)" >&2; exit 3; }
$SMLENS profile --quiet --repeat "${REPEAT:-3}" --name "$NAME" --tag branch="$BRANCH" --tag commit="$COMMIT" "$@" \
  > profile.json || exit $?
[ "$BRANCH" = main ] && exit 0
$SMLENS gate --baseline 'tag:branch=main~'"${REPEAT:-3}" --current "tag:commit=$COMMIT" --rules "$RULES" \
  --markdown gate.md --junit gate-junit.xml
verdict=$?
# main's newest run, for the report's comparison (none yet: the report of the current run alone)
BASE=$($SMLENS runs --format json | python3 -c '
import json, sys
main = [r for r in json.load(sys.stdin) if (r.get("tags") or {}).get("branch") == "main"]
print(max(main, key=lambda r: r["created"])["id"] if main else "")')
$SMLENS report latest ${BASE:+--baseline "$BASE"} -o report.html > /dev/null
exit $verdict
