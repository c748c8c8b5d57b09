#!/usr/bin/env bash
# Stage 07's optimisation log, measured: builds the stage once (its variants, each the
# finished kernel with one step of LOG.md undone or another tile choice, are the typed
# configurations of stages/07_memory_pipeline/tuning.h, run with --variant) and times every
# variant, and stage 06, on the bar shapes in one go on a GPU. Then Nsight Compute's
# shared-memory bank-conflict counters for stage 06, stage 07 without the swizzle and stage
# 07, if ncu is installed.
# Usage: bash benchmarks/tune_stage07.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune07}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=(
  "tuned:Tuned" "no_prefetch:NoPrefetch" "no_swizzle:NoSwizzle" "per_access:PerAccess" "mask_all:MaskAll"
  "exp2f:Exp2f" "first_first:FirstFirst" "eager:Eager" "lazy_all:LazyAll" "one_mtile:OneMTile" "bc64:Bc64"
  "bc128:Bc128" "min1:MinBlocks1"
)
build_once "$out" stage07_memory_pipeline stage06_tensor_cores
bin="$out/build/bin/stage07_memory_pipeline"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128 --causal")
run() {  # name binary [flags]
  local name=$1 binary=$2
  shift 2
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$binary" $s "$@" --brief --repeats 20 --warmup 3 --check-rows 256 | sed -E 's/ +\[B=.*//')
    printf "%-16s %-72s %s\n" "$name" "$s" "$r"
  done
}
printf "%-16s %-72s %s\n" variant shape "result (fp16, median of 20)"
run stage06 "$out/build/bin/stage06_tensor_cores"
for v in "${variants[@]}"; do
  name=${v%%:*}
  variant_usage "$out/build.log" "pipelined_kernelI6__half" "$v"
  run "$name" "$bin" --variant "$name"
done
if command -v ncu > /dev/null; then
  metrics=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_ldsm.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  shape="--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --repeats 1 --warmup 0 --no-check"
  for run in "stage06:$out/build/bin/stage06_tensor_cores" "no_swizzle:$bin --variant no_swizzle" "tuned:$bin --variant tuned"; do
    echo "== ncu, $shape: ${run%%:*}"
    # shellcheck disable=SC2086
    ncu --metrics "$metrics" --launch-count 1 -k regex:'tensor_core_kernel|pipelined_kernel' ${run#*:} $shape 2>&1 |
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
    for v in tuned per_access; do
      echo "== ncu stage07 ($v) $s"
      # shellcheck disable=SC2086
      ncu --metrics "$m" --launch-count 1 -k regex:pipelined_kernel "$bin" --variant "$v" $s \
        --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
    done
  done
fi
