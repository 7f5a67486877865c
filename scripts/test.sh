#!/usr/bin/env bash
# Set up a virtual environment with smlens and its test dependencies (.venv), then run the tests.
# Extra arguments go to pytest. Runs as root on CI, where it also installs Debian's chromium for the
# report's browser test and a Java runtime for the Spark test (pyspark brings Spark, not the JVM).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch: the CPU build, for the workload tests (decoder stack and deterministic GEMM reference);
# triton: its interpreter runs the deterministic kernel on the CPU, and it compiles the sm_90 kernels
.venv/bin/pip install -q torch==2.13.0 triton==3.6.0
.venv/bin/pip install -q -e '.[dev]'
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v java >/dev/null 2>&1 || missing="$missing default-jre-headless"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
exec .venv/bin/python -m pytest "$@"
