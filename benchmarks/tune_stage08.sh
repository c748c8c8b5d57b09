#!/usr/bin/env bash
# Stage 08's optimisation log, measured: builds the stage's demo once per variant (a step
# of the log switched off or changed, set with -D flags, see hopper_attention.h), times every
# variant at the bar shapes in fp16 in one go on a Hopper GPU, and reads the final kernel's
# counters with Nsight Compute, if it is installed.
# Usage: bash benchmarks/tune_stage08.sh [out-dir]   (needs nvcc, CMake, Ninja, an H100)
set -uo pipefail
out=${1:-/tmp/tune08}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "final:"                                                  # overlap, ping-pong, a ring of 3
  "ring2:-DFA08_STAGES=2"                                   # two K/V slots
  "no_pingpong:-DFA08_PINGPONG=0"                           # the consumers do not take turns
  "no_overlap:-DFA08_OVERLAP=0"                             # each product waited for at once
  "first:-DFA08_OVERLAP=0 -DFA08_STAGES=2"                  # the first version's schedule
)
build_variants "$out" stage08_hopper
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128 --causal")
printf "%-12s %-62s %s\n" variant shape "result (fp16, median of 20)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  bin="$out/$name/bin/stage08_hopper"
  [ -x "$bin" ] || continue
  for d in 64 128; do
    echo "$name: d=$d $(ptxas_usage "$out/$name.build.log" "hopper_kernelI6__halfLi${d}E")"
  done
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" $s --brief --repeats 20 --warmup 3 --check-rows 256 2>/dev/null | sed -E 's/ +\[B=.*//')
    printf "%-12s %-62s %s\n" "$name" "$s" "$r"
  done
done
if command -v ncu > /dev/null; then
  # Where the final kernel's time goes: the tensor pipe, issue slots, stall reasons.
  m=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
  m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,dram__bytes_read.sum,gpu__time_duration.sum
  for s in "${shapes[0]}" "${shapes[1]}"; do
    echo "== ncu hopper_kernel, $s"
    # shellcheck disable=SC2086
    ncu --metrics "$m" --launch-count 1 -k regex:hopper_kernel "$out/final/bin/stage08_hopper" $s --repeats 1 \
      --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
  done
fi
