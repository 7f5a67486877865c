#!/usr/bin/env bash
# Issue 16's decode call 7 on the device machine: the sweep (benchmarks/det_call7_decode.py), then
# one ncu run of the best decode kernels at M = 16 on gate_up (clocks left alone).
#   OUT=DIR bash benchmarks/det_call7.sh [ROLE:M ...]
# SCRIPT: another call's sweep with the same steps and options (det_call8.sh's).
set -u
OUT=${OUT:?set OUT}
SCRIPT=${SCRIPT:-benchmarks/det_call7_decode.py}
timeout 170 python3 "$SCRIPT" --out "$OUT" --repeats 10 2>&1 | tee "$OUT/log.txt"
METRICS="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active"
METRICS+=",sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
METRICS+=",sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS+=",dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
METRICS+=",l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__inst_executed_pipe_lsu_mem_shared_cmd_read.sum"
METRICS+=",launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem"
METRICS+=",launch__waves_per_multiprocessor,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for target in "${@:-gate_up_proj:16}"; do
  timeout 120 /usr/local/cuda/bin/ncu --clock-control none -k regex:det_ --metrics "$METRICS" --csv --page raw \
    python3 "$SCRIPT" --out "$OUT" --ncu "$target" > "$OUT/ncu_${target%%:*}.csv" 2> "$OUT/ncu_${target%%:*}.err"
  echo "ncu $target rc $?"
done
