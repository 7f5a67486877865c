#!/bin/bash
# Sixth H200 call (issue 10): the cost of `smlens profile -- CMD` re-measured once each ncu run ends
# the program after the last forward it profiles. In one call, the profiled run first (time is
# short), each time-boxed: an unmodified Hugging Face generate of a 32-layer Llama-3.1-8B config
# (batch 8, prompt 512, 3 new tokens, a warm-up request then the measured one) under
# `smlens profile -- ...`, the built-in decoder of the same shapes (`smlens profile --model`), and
# the program alone. Writes $OUT/cost.json (and the smlens outputs and logs in $OUT/cost.tgz).
# Run from the repository root on the device, the nvtx wheel installed and on PYTHONPATH:
#   OUT=... bash benchmarks/h200/call6.sh
# Locally (fake ncu, a tiny model on the CPU):
#   TINY=1 OUT=/tmp/o6 PATH=tests/fakes:$PATH PYTHONPATH=tests/fakes/nvtx_recorder:$PWD \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call6.sh
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT}"
W=${W:-/tmp/call6}; rm -rf $W; mkdir -p $W
BUDGET=${BUDGET:-160}   # seconds this script may use
PY=${PY:-python3}
if [ -n "$TINY" ]; then M=tiny; DM=tiny; L=2; P=16; else M=llama-3.1-8b; DM=llama-3.1-8b; L=32; P=512; fi
HF="benchmarks/h200/hf_generate.py --model $M --layers $L --batch 8 --prompt $P"
S="--quiet --store $W/store --format json"
# step NAME LIMIT_S CMD...: wall seconds and exit code into $W/steps.txt, stdout into $W/NAME.json
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - SECONDS - 3 ))
  [ $limit -gt $left ] && limit=$left
  [ $limit -gt 10 ] || { echo "$name 0" >> $W/steps.txt; return; }
  local start=$(date +%s%N)
  timeout -k 5 $limit "$@" > $W/$name.json 2> $W/$name.err
  local rc=$?
  echo "$name $(( ($(date +%s%N) - start) / 1000000 )) $rc $limit" >> $W/steps.txt
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $(which ncu || echo /usr/local/cuda/bin/ncu) --version 2>/dev/null | tail -1
  $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'; } > $W/env.txt 2>&1
step hf $(( ${HF_LIMIT:-100} + 10 )) $PY -m profiler.cli profile $S --keep $W/kept --time-limit ${HF_LIMIT:-100} --name hf-$M-b8-p$P -- $PY $HF
step decoder 50 $PY -m profiler.cli profile $S --keep $W/kept --time-limit 45 --name decoder-$DM-b8-p$P --model $DM --layers $L --batch 8 --prompt $P --decode-steps 2
step plain 30 $PY $HF
$PY - "$W" > $OUT/cost.json <<'PY'
import json, sys
from pathlib import Path
W = Path(sys.argv[1])
out = {"env": (W / "env.txt").read_text().splitlines()}
for line in (W / "steps.txt").read_text().splitlines():
    name, ms, *rest = line.split()
    entry = {"wall_s": round(int(ms) / 1000, 2), "rc": int(rest[0]) if rest else None,
             "limit_s": int(rest[1]) if len(rest) > 1 else None}
    text = (W / f"{name}.json").read_text() if (W / f"{name}.json").exists() else ""
    try:
        data = json.loads(text.strip().splitlines()[-1]) if name == "plain" else json.loads(text)
    except (ValueError, IndexError):
        data = None
    if isinstance(data, list):
        data = [{k: o.get(k) for k in ("name", "kernels", "skipped_duplicates", "partial", "seconds",
                                        "failure", "exit_code", "notes")}
                | {"invocations": [{k: i[k] for k in ("label", "seconds", "kernels", "passes_per_kernel",
                                                       "returncode")} for i in o["invocations"]]}
                for o in data]
    entry["output"] = data
    entry["stderr_tail"] = (W / f"{name}.err").read_text()[-600:] if (W / f"{name}.err").exists() else ""
    out[name] = entry
statuses = sorted((W / "kept").glob("*/annotate-*/annotate-*.json"))
out["annotation_statuses"] = {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
                              for p in statuses}
print(json.dumps(out, indent=1))
PY
find $W/kept -name "*.ncu-rep" -delete; find $W/kept -name "*.csv" -delete
(cd $W && tar czf $OUT/cost.tgz kept steps.txt *.err env.txt)
cat $OUT/cost.json | head -c 3000
