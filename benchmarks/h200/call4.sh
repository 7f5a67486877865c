#!/bin/bash
# Fourth H200 call (issue 10: unmodified PyTorch programs), all in one run, each part time-boxed:
#   a. the cost: an unmodified Hugging Face generate of a 32-layer Llama-3.1-8B config (batch 8,
#      prompt 512, 3 new tokens, a warm-up request then the measured one) on its own, under
#      `smlens profile -- ...` (kept: hf-llama-3.1-8b-b8-p512), and `smlens profile --model` of the
#      same shapes, batch and prompt (kept: decoder-llama-3.1-8b-b8-p512, the built-in decoder's
#      ranges with its MLP block)
#   b. the other seven captures: Llama-3.1-8B batch 1, Qwen2.5-7B, Mistral-7B, Gemma-2-9B at batch 1
#      and 8, prompt 512, 2 layers; V1-V3's metrics and one ncu run each (--cache-control all) to fit
#      the call
#   e. CUDA graphs: a plain model whose decode replays a captured graph, --graph-profiling node
# Each part packs into $OUT/part-<x>.tgz as soon as it ends. Run from the repository root on the
# device: bash benchmarks/h200/call4.sh
# Locally (fake ncu, a tiny model on the CPU; the graph part then fails for want of a GPU):
#   SKIP_WHEELS=1 TINY=1 OUT=/tmp/o4 PATH=tests/fakes:$PATH \
#   FAKE_NCU_CSV=tests/data/h200_runs/dedup-reference-all-layers.csv.gz bash benchmarks/h200/call4.sh
[ -n "$SKIP_WHEELS" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvtx-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT}"
W=${W:-/tmp/call4}; rm -rf $W; mkdir -p $W/a $W/b $W/e
BUDGET=${BUDGET:-500}   # seconds this script may use
PY=${PY:-python3}
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "TIME $(( ($(date +%s%N) - s) / 1000000 )) ms rc=$rc :: $*" | cut -c1-250 | tee -a $OUT/times.txt >&2; return $rc; }
left() { echo $(( BUDGET - SECONDS )); }
box() { local want=$1 reserve=$2 b; b=$(( $(left) - reserve )); [ $b -gt $want ] && b=$want; echo $b; }
pack() {  # the merged CSV of each run (gzip), logs, JSON and the annotation's status; no .ncu-rep
  local part=$1
  find $W/$part -name "*.ncu-rep" -delete
  for d in $W/$part/*/; do [ -d "$d" ] || continue; n=$(basename $d); rm -f $d/$n-*.csv; [ -f $d/$n.csv ] && gzip -9f $d/$n.csv; done
  (cd $W && tar czf $OUT/part-$part.tgz $part)
}
NCU=$(which ncu || echo /usr/local/cuda/bin/ncu)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; $NCU --version | tail -1
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  $PY -c 'import nvtx, importlib.metadata as m; print("nvtx", m.version("nvtx"))'; } 2>&1 | tee $OUT/env.txt
if [ -n "$TINY" ]; then MODELS="tiny"; L32=2; P=16; else MODELS="llama-3.1-8b qwen2.5-7b mistral-7b gemma-2-9b"; L32=32; P=512; fi
HF=benchmarks/h200/hf_generate.py
S="--quiet --store $W/store --format json"

# a. the cost, then the two captures it leaves
M=${MODELS%% *}; DM=$M; [ -n "$TINY" ] && DM=tiny
t timeout -k 5 120 $PY $HF --model $M --layers $L32 --batch 8 --prompt $P > $W/a/plain.json
t timeout -k 10 200 $PY -m profiler.cli profile $S --keep $W/a --time-limit 180 --name hf-$M-b8-p$P -- $PY $HF --model $M --layers $L32 --batch 8 --prompt $P > $W/a/hf.json
t timeout -k 10 150 $PY -m profiler.cli profile $S --keep $W/a --time-limit 130 --name decoder-$DM-b8-p$P --model $DM --layers $L32 --batch 8 --prompt $P --decode-steps 2 > $W/a/decoder.json
pack a

# b. the other captures, one ncu run each, V1-V3's metrics
for M in $MODELS; do for B in 1 8; do
  [ "$M" = "${MODELS%% *}" ] && [ $B = 8 ] && continue   # part a made it
  want=60; [ "$M" = gemma-2-9b ] && want=75
  T=$(box $want 45)
  [ $T -gt 20 ] || { echo "SKIP hf-$M-b$B: out of time" | tee -a $OUT/times.txt; continue; }
  t timeout -k 10 $(( T + 30 )) $PY -m profiler.cli profile $S --keep $W/b --time-limit $T --views V1,V2,V3 --cache-control all --name hf-$M-b$B-p$P -- $PY $HF --model $M --layers 2 --batch $B --prompt $P > $W/b/hf-$M-b$B.json
  pack b
done; done

# e. CUDA graphs (a GPU is needed)
T=$(box 60 10)
[ $T -gt 20 ] && t timeout -k 10 $(( T + 20 )) $PY -m profiler.cli profile $S --keep $W/e --time-limit $T --graph-profiling node --name graph-decode -- $PY benchmarks/h200/graph_decode.py > $W/e/graph.json
pack e

# summary, last
$PY - "$W" <<'PY' 2>&1 | tee $OUT/summary.txt
import glob, json, os, sys
W = sys.argv[1]
for f in sorted(glob.glob(f"{W}/[abe]/*.json")):
    try:
        data = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "no json:", str(e)[:80]); continue
    if isinstance(data, dict):
        print(os.path.basename(f), data); continue
    for o in data:
        print(o.get("name"), o.get("kernels"), "kernels,", o.get("seconds"), "s, partial", o.get("partial"),
              "skipped", o.get("skipped_duplicates"), o.get("notes"),
              [(i["label"], i["seconds"], i["kernels"], i["passes_per_kernel"]) for i in o.get("invocations", [])],
              (o.get("failure") or "")[:200])
from profiler.ingest.store import Store
store = Store(f"{W}/store", create=False)
for _, run in store.runs().iterrows():
    k = store.kernels(run["id"], columns=["phase", "role", "role_source", "block", "gpu__time_duration.sum"])
    t = k.groupby(["phase", "role"], observed=True)["gpu__time_duration.sum"].sum() / 1e3
    print(run["name"], len(k), "kernels; sources", k["role_source"].value_counts().to_dict(),
          "; us by phase/role", {f"{p}/{r}": round(v, 1) for (p, r), v in t.items()})
PY
cat $OUT/times.txt | cut -c1-200
ls -la $OUT
