#!/usr/bin/env bash
# Stage 10's tuning log, measured: builds the stage once (its variants, each the finished
# kernel with one later step of LOG.md undone, are the typed configurations of
# stages/10_backward/tuning.h, run with --variant), times every variant at the benchmark's
# shapes (B = 4, H = 32, N = 4096, FP32) in one go on a GPU, and reads the counters of the
# finished kernel with Nsight Compute, if it is installed.
# Usage: bash benchmarks/tune_stage10.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune10}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=("tuned:Tuned" "exp2f:Exp2f" "late_load:LateLoad" "no_cp_async:NoCpAsync" "scalar_atomics:ScalarAtomics")
build_once "$out" stage10_backward
bin="$out/build/bin/stage10_backward"
shapes=("--dim 64" "--dim 64 --causal" "--dim 128" "--dim 128 --causal")
run() {  # name
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 $s --variant "$1" --brief --repeats 10 --warmup 2 \
        --check-heads 1 | sed -E 's/ +\[B=.*//')
    printf "%-16s %-20s %s\n" "$1" "$s" "$r"
  done
}
printf "%-16s %-20s %s\n" variant shape "result (B=4 H=32 N=4096 fp32, median of 10)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  variant_usage "$out/build.log" "dkdv_kernelI" "$v"
  run "$name"
done
if command -v ncu > /dev/null; then
  # Where the finished kernel's time goes: pipes, issue slots, occupancy, stall reasons.
  m=sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active
  m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected lg_throttle; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,sm__inst_executed_pipe_fma.sum,smsp__inst_executed.sum,gpu__time_duration.sum
  for d in 64 128; do
    echo "== ncu dkdv_kernel<$d>, B = 1, H = 32, N = 4096"
    ncu --metrics "$m" --launch-count 1 -k regex:dkdv "$bin" --batch 1 --heads 32 \
      --dim $d --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|l1tex__|gpu__" | sed 's/^ *//'
  done
fi
