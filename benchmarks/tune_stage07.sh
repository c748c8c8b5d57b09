#!/usr/bin/env bash
# Stage 07's optimisation log, measured: builds the stage's demo once per variant (each
# step of the log switched off in turn, and the tile and launch-bound choices, set with -D
# flags, see pipelined_attention.h) and times every variant, and stage 06, on the bar
# shapes in one go on a GPU. Then Nsight Compute's shared-memory bank-conflict counters
# for stage 06, stage 07 without the swizzle and stage 07, if ncu is installed.
# Usage: bash benchmarks/tune_stage07.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune07}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "final:"
  "no_prefetch:-DFA07_PREFETCH=0"
  "no_swizzle:-DFA07_SWIZZLE=0"
  "per_access:-DFA07_LANE_OFFSETS=0"
  "mask_all:-DFA07_TWO_PHASE=0"
  "exp2f:-DFA07_FAST_EXP=0"
  "first_first:-DFA07_HEAVY_FIRST=0"
  "eager:-DFA07_LAZY_RESCALE=0"
  "lazy_all:-DFA07_LAZY_RESCALE=2"
  "one_mtile:-DFA07_M_TILES=1 -DFA07_BR=64"
  "bc64:-DFA07_BC=64"
  "bc128:-DFA07_BC=128"
  "min1:-DFA07_MIN_BLOCKS=1"
)
build_variants "$out" stage07_memory_pipeline stage06_tensor_cores  # stage 06 with "final"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128 --causal")
run() {  # name binary
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$2" $s --brief --repeats 20 --warmup 3 --check-rows 256 | sed -E 's/ +\[B=.*//')
    printf "%-16s %-72s %s\n" "$1" "$s" "$r"
  done
}
printf "%-16s %-72s %s\n" variant shape "result (fp16, median of 20)"
run stage06 "$out/final/bin/stage06_tensor_cores"
for v in "${variants[@]}"; do
  name=${v%%:*}
  bin="$out/$name/bin/stage07_memory_pipeline"
  [ -x "$bin" ] || continue
  for d in 64 128; do
    echo "$name: d=$d $(ptxas_usage "$out/$name.build.log" "pipelined_kernelI6__halfLi${d}E")"
  done
  run "$name" "$bin"
done
if command -v ncu > /dev/null; then
  metrics=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_ldsm.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  shape="--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --repeats 1 --warmup 0 --no-check"
  for pair in "stage06:$out/final/bin/stage06_tensor_cores" "no_swizzle:$out/no_swizzle/bin/stage07_memory_pipeline" \
              "final:$out/final/bin/stage07_memory_pipeline"; do
    echo "== ncu, $shape: ${pair%%:*}"
    # shellcheck disable=SC2086
    ncu --metrics "$metrics" --launch-count 1 -k regex:'tensor_core_kernel|pipelined_kernel' "${pair#*:}" $shape 2>&1 |
      grep -E "bank_conflicts|ldsm|wavefronts|Duration" | sed 's/^ *//'
  done
fi
if command -v ncu > /dev/null; then
  # Where the finished kernel's time goes: pipes, issue slots, occupancy, stall reasons.
  m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
  m=$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
  m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected lg_throttle dispatch_stall; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum
  # The same for the variant that computes the swizzled offsets at every access, whose
  # instruction count explains its row of the log.
  for s in "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64" "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"; do
    for v in final per_access; do
      echo "== ncu stage07 ($v) $s"
      # shellcheck disable=SC2086
      ncu --metrics "$m" --launch-count 1 -k regex:pipelined_kernel "$out/$v/bin/stage07_memory_pipeline" $s \
        --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
    done
  done
fi
