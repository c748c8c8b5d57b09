#!/usr/bin/env bash
# Stage 10's tuning log, measured: builds the stage's demo once per variant (each later
# step of the log switched off in turn, set with -D flags, see backward_attention.h), times
# every variant at the benchmark's shapes (B = 4, H = 32, N = 4096, FP32) in one go on a
# GPU, and reads the counters of the final kernel with Nsight Compute, if it is installed.
# Usage: bash benchmarks/tune_stage10.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune10}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "final:"
  "exp2f:-DFA10_FAST_EXP=0"
  "late_load:-DFA10_EARLY_LOAD=0"               # the next Q tile loaded after dQ, not before
  "no_cp_async:-DFA10_CP_ASYNC=0 -DFA10_EARLY_LOAD=0"  # and loaded through registers
  "scalar_atomics:-DFA10_VECTOR_ATOMICS=0"
)
build_variants "$out" stage10_backward
shapes=("--dim 64" "--dim 64 --causal" "--dim 128" "--dim 128 --causal")
run() {  # name binary
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$2" --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 $s --brief --repeats 10 --warmup 2 --check-heads 1 |
        sed -E 's/ +\[B=.*//')
    printf "%-16s %-20s %s\n" "$1" "$s" "$r"
  done
}
printf "%-16s %-20s %s\n" variant shape "result (B=4 H=32 N=4096 fp32, median of 10)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  bin="$out/$name/bin/stage10_backward"
  [ -x "$bin" ] || continue
  for d in 64 128; do
    echo "$name: d=$d $(ptxas_usage "$out/$name.build.log" "dkdv_kernelILi${d}E")"
  done
  run "$name" "$bin"
done
if command -v ncu > /dev/null; then
  # Where the final kernel's time goes: pipes, issue slots, occupancy, stall reasons.
  m=sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active
  m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected lg_throttle; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,sm__inst_executed_pipe_fma.sum,smsp__inst_executed.sum,gpu__time_duration.sum
  for d in 64 128; do
    echo "== ncu dkdv_kernel<$d>, B = 1, H = 32, N = 4096"
    ncu --metrics "$m" --launch-count 1 -k regex:dkdv "$out/final/bin/stage10_backward" --batch 1 --heads 32 \
      --dim $d --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|l1tex__|gpu__" | sed 's/^ *//'
  done
fi
