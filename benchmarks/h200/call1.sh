#!/bin/bash
# First H200 call for issue 4: check the workload, the NVTX filters, dedup, progress lines, SIGINT.
# Run from the repository root on the device: bash benchmarks/h200/call1.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
W=$OUT/w; mkdir -p $W
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | tee -a $W/times.txt >&2; return $rc; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $W/env.txt
which ncu; NCU=$(which ncu || echo /usr/local/cuda/bin/ncu); $NCU --version | tee -a $W/env.txt
python3 -c 'import torch, nvtx; print(torch.__version__, torch.version.cuda, nvtx.__file__)' | tee -a $W/env.txt
python3 benchmarks/h200/views_metrics_from_fixture.py > $W/metrics.txt
M=${M:-"--model llama-3.1-8b --layers 2 --batch 8 --prompt 512 --decode-steps 2"}
# 1. the workload alone, with and without NVTX annotation
t python3 -m profiler.workloads.decoder $M | tee $W/plain_nvtx.json
t python3 -m profiler.workloads.decoder $M --no-nvtx | tee $W/plain_nonvtx.json
# 2. every kernel of every layer and step (no dedup), one cheap metric: the reference for dedup
t python3 -m profiler.cli profile $M --no-dedup --metrics gpu__time_duration.sum,launch__grid_size --quiet --keep $W/nodedup --store $W/store --name nodedup --format json > $W/nodedup.json
# 3. dedup with the views' metric list
t python3 -m profiler.cli profile $M --quiet --keep $W/dedup --store $W/store --name dedup --format json > $W/dedup.json
rc3=$?
if [ $rc3 -ne 0 ]; then  # the registry's list refused? the fixture's list then
  t python3 -m profiler.cli profile $M --metrics @$W/metrics.txt --quiet --keep $W/dedup2 --store $W/store --name dedup2 --format json > $W/dedup2.json
  rc3=$?
fi
if [ $rc3 -ne 0 ]; then  # filters matched nothing? probe ncu's syntax cheaply
  for f in "smlens@cold_prefill/" "regex:smlens@cold_prefill/layer_0/" "smlens@cold_prefill/*/" "cold_prefill/layer_0/"; do
    t $NCU --clock-control none --metrics gpu__time_duration.sum --nvtx --nvtx-include "$f" python3 -m profiler.workloads.decoder $M --phases cold_prefill 2>&1 | grep -c "==PROF== Profiling" | sed "s|^|probe $f: |" | tee -a $W/probes.txt
  done
fi
# 3b. where ncu's own lines go: stdout or stderr
$NCU --clock-control none --metrics gpu__time_duration.sum --launch-count 3 python3 -c "import torch; x=torch.ones(1<<20, device='cuda'); print('APP', float((x*2).sum()))" > $W/direct_stdout.txt 2> $W/direct_stderr.txt; echo "direct rc=$?" >> $W/direct_stdout.txt
# 4. time limit -> SIGINT to ncu's group -> partial run
t python3 -m profiler.cli profile $M --no-dedup --metrics @$W/metrics.txt --time-limit 15 --quiet --keep $W/limited --store $W/store --name limited --format json > $W/limited.json
# 5. doctor
t python3 -m profiler.cli doctor --deep --format json > $W/doctor.json
python3 -m profiler.cli runs --store $W/store --format json > $W/runs.json
cat $W/doctor.json
python3 - <<'PY'
import json, pandas as pd, glob, os
W = os.environ["OUT"] + "/w"
for n in ("nodedup", "dedup", "dedup2", "limited"):
    try:
        for o in json.load(open(f"{W}/{n}.json")):
            print(n, {k: o[k] for k in ("kernels", "skipped_duplicates", "partial", "seconds", "failure")},
                  [(i["label"], i["seconds"], i["kernels"], i["passes_per_kernel"], i["returncode"]) for i in o["invocations"]])
    except Exception as e:
        print(n, "no json", e)
from profiler.ingest.store import Store
s = Store(f"{W}/store", create=False)
for _, r in s.runs().iterrows():
    k = s.kernels(r["id"], columns=["phase", "role", "nvtx_stack", "kernel_name"])
    print(r["name"], r["kernel_count"], r["partial"])
    print(k.groupby(["phase", "role"]).size().to_string())
PY
head -c 1500 $W/direct_stdout.txt; echo ---; head -c 1500 $W/direct_stderr.txt; cat $W/probes.txt 2>/dev/null; cat $W/times.txt
rm -rf $W/store
find $W -name "*.ncu-rep" -size +5M -delete
cd $OUT && tar czf call1.tgz w && rm -rf w
ls -la $OUT
