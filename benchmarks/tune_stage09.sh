#!/usr/bin/env bash
# Stage 09's tuning log, measured: builds the stage once (its variants, each the finished
# kernels and plan with one step of LOG.md changed, are the typed configurations of
# stages/09_split_kv_decoding/tuning.h, run with --variant), times every variant at the bar
# shapes (fp16, d = 128, one new query), with the split count swept by hand for the finished
# kernels, and reads the counters that explain the grouped-query case with Nsight Compute, if
# it is installed.
# Usage: bash benchmarks/tune_stage09.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune09}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=("tuned:Tuned" "cuda_cores:CudaCores" "mma_all:MmaAll" "no_pdl:NoPdl" "unroll2:Unroll2" "unroll8:Unroll8"
          "blocks2:Blocks2" "blocks8:Blocks8" "min3:MinBlocks3")
build_once "$out" stage09_split_kv_decoding
bin="$out/build/bin/stage09_split_kv_decoding"
shapes=("--batch 1 --heads 32 --seq-kv 32768" "--batch 1 --heads 32 --seq-kv 131072"
        "--batch 16 --heads 32 --kv-heads 8 --seq-kv 32768")
run() {  # name [flags]
  local name=$1
  shift
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" $s --dim 128 "$@" --brief --repeats 50 --warmup 5 --check-rows 64 | sed -E 's/ +\[B=.*//')
    printf "%-14s %-52s %s\n" "$name" "$s" "$r"
  done
}
printf "%-14s %-52s %s\n" variant shape "result (fp16, d = 128, median of 50)"
for v in "${variants[@]}"; do
  name=${v%%:*} type=${v#*:}
  for rows in 1 4; do
    echo "$name: $rows row(s) a block: $(ptxas_usage "$out/build.log" "split_kernelI6__halfLi128ELi${rows}ENS0_${#type}${type}E")"
  done
  echo "$name: 16 rows a block, tensor cores: $(ptxas_usage "$out/build.log" "split_kernel_mmaI6__halfLi128ENS0_${#type}${type}E")"
  run "$name" --variant "$name"
done
for splits in 1 2 3 4 8 16 32; do
  run "splits=$splits" --splits "$splits"
done
if command -v ncu > /dev/null; then
  # Where the time goes: issue slots, pipes, occupancy, stall reasons, DRAM throughput.
  m=smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
  m=$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
  m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
  for r in long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected lg_throttle barrier; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum
  for s in "--batch 1 --heads 32 --seq-kv 32768" "--batch 16 --heads 32 --kv-heads 8 --seq-kv 32768"; do
    echo "== ncu split kernel, then merge kernel: $s --dim 128"
    # shellcheck disable=SC2086
    ncu --metrics "$m" --launch-count 2 -k regex:"split_kernel|merge_kernel" "$bin" $s --dim 128 \
      --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
  done
fi
