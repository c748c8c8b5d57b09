#!/usr/bin/env bash
# Stage 09's tuning log, measured: builds the stage's demo once per variant (set with -D
# flags, see split_kv_decoding.h), times every variant at the bar shapes (fp16, d = 128,
# one new query), with the split count swept by hand for the final build, and reads the
# counters that explain the grouped-query case with Nsight Compute, if it is installed.
# Usage: bash benchmarks/tune_stage09.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune09}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "final:"
  "cuda_cores:-DFA09_MMA_MIN_ROWS=1000"  # grouped queries on CUDA cores, 4 rows a block
  "mma_all:-DFA09_MMA_MIN_ROWS=1"        # one row on the tensor cores too, 15 of 16 rows padding
  "no_pdl:-DFA09_PDL=0"                  # the merge kernel launched after the split kernel ends
  "unroll2:-DFA09_UNROLL=2"
  "unroll8:-DFA09_UNROLL=8"
  "blocks2:-DFA09_BLOCKS_PER_SM=2"
  "blocks8:-DFA09_BLOCKS_PER_SM=8"
)
build_variants "$out" stage09_split_kv_decoding
shapes=("--batch 1 --heads 32 --seq-kv 32768" "--batch 1 --heads 32 --seq-kv 131072"
        "--batch 16 --heads 32 --kv-heads 8 --seq-kv 32768")
run() {  # name binary [extra flags]
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$2" $s --dim 128 ${3:-} --brief --repeats 50 --warmup 5 --check-rows 64 | sed -E 's/ +\[B=.*//')
    printf "%-14s %-52s %s\n" "$1" "$s" "$r"
  done
}
printf "%-14s %-52s %s\n" variant shape "result (fp16, d = 128, median of 50)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  bin="$out/$name/bin/stage09_split_kv_decoding"
  [ -x "$bin" ] || continue
  for rows in 1 4; do
    echo "$name: $rows row(s) a block: $(ptxas_usage "$out/$name.build.log" "split_kernelI6__halfLi128ELi${rows}E")"
  done
  echo "$name: 16 rows a block, tensor cores: $(ptxas_usage "$out/$name.build.log" "split_kernel_mmaI6__halfLi128E")"
  run "$name" "$bin"
done
for splits in 1 2 3 4 8 16 32; do
  run "splits=$splits" "$out/final/bin/stage09_split_kv_decoding" "--splits $splits"
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
    ncu --metrics "$m" --launch-count 2 -k regex:"split_kernel|merge_kernel" "$out/final/bin/stage09_split_kv_decoding" $s --dim 128 \
      --repeats 1 --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
  done
fi
