#!/usr/bin/env bash
# Set up a virtual environment with smlens and its test dependencies (.venv), then run the tests on
# two workers (pytest-xdist). Runs as root on CI, where it also installs Debian's chromium for the
# report's browser test and a Java runtime for the Spark test (pyspark brings Spark, not the JVM).
#
#   bash scripts/test.sh                 the whole suite (what CI runs)
#   bash scripts/test.sh --quick         the edit loop: -m "not slow" (every file's cheap tests)
#   bash scripts/test.sh tests/test_x.py extra arguments go to pytest (-n 0: one process)
#   bash scripts/test.sh --record-durations   the whole suite, writing what each test took into
#                                        tests/durations.json (the slow marker and the workers' order)
#
# --python PY and --venv DIR set up another interpreter's environment (CI's Python 3.10 run);
# --no-torch leaves torch and triton out (their tests skip). Each setup step prints its time; a venv
# whose installs match pyproject.toml and this script is not installed again.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
python=python3
venv=.venv
torch=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) args+=(-m "not slow"); shift ;;
    --python) python=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
t0=$(date +%s)
step() { echo "smlens test.sh [$(( $(date +%s) - t0 )) s] $*"; }

# What the venv's installs depend on: when they match the stamp, the pip steps are skipped.
want=$({ cat pyproject.toml "$self"; echo "torch=$torch"; "$python" --version; } | sha256sum | cut -d' ' -f1)
stamp="$venv/.smlens-installed"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  step "$venv is up to date ($("$venv/bin/python" --version)); no install"
else
  step "creating $venv with $("$python" --version)"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  if [ "$torch" = 1 ]; then
    # torch: the CPU build, for the workload tests (decoder stack and deterministic GEMM reference);
    # triton: its interpreter runs the deterministic kernel on the CPU, and it compiles the sm_90 kernels
    step "installing torch 2.13.0 (CPU) and triton 3.6.0 (a fresh machine: a few minutes)"
    "$venv/bin/pip" install -q torch==2.13.0 triton==3.6.0
  fi
  step "installing smlens with its test dependencies (.[dev])"
  "$venv/bin/pip" install -q -e '.[dev]'
  echo "$want" > "$stamp"
fi

missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v java >/dev/null 2>&1 || missing="$missing default-jre-headless"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  step "installing${missing} from Debian (the browser and Spark tests; about a minute)"
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Bytecode for the package, once: the tests start smlens in hundreds of subprocesses, and where
# PYTHONDONTWRITEBYTECODE is set each would compile every module again.
step "compiling the package's bytecode"
"$venv/bin/python" -m compileall -q profiler views reports tests >/dev/null

# Two workers (a later -n of the arguments wins), taking the work longest first in the order
# tests/conftest.py collects it (not xdist's own, by number of tests); a file's tests that share a
# module fixture (a JVM, a browser, a compiled program) stay on one.
workers=()
if "$venv/bin/python" -c "import xdist" 2>/dev/null; then
  workers=(-n 2 --dist loadgroup --no-loadscope-reorder)
fi
step "pytest ${workers[*]-} ${args[*]-}"
set +e
# pytest keeps each test file's assertion-rewritten bytecode unless PYTHONDONTWRITEBYTECODE is set
# (as on these machines): without it every worker rewrote the 90 files again, 8 of the 16 s each collection took.
env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" -m pytest "${workers[@]}" "${args[@]}"
rc=$?
set -e
step "pytest exited $rc"
if [ "$rc" = 5 ]; then
  echo "smlens test.sh: pytest collected no tests (exit 5): a selection that matches nothing is a failure" >&2
fi
exit "$rc"
