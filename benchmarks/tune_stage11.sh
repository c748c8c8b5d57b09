#!/usr/bin/env bash
# Stage 11's tuning log, measured: builds the stage once (its variants, each the finished
# kernel with one step of LOG.md undone, are the typed configurations of
# stages/11_backward_tensor_cores/tuning.h, run with --variant), times every variant at the
# benchmark's shapes (FP16: d = 64 at B = 4, H = 32, N = 4096; d = 128 at B = 1, H = 16,
# N = 8192) in one go on a GPU, and reads the counters of the finished kernel with Nsight
# Compute, if it is installed. The gradients are not checked here (the tests check every
# variant); the times are medians of 10.
# Usage: bash benchmarks/tune_stage11.sh [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune11}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=("tuned:Tuned" "warp16:Warp16" "no_split:NoSplit" "dq_mt1:DqOne" "min3:Min3" "qbuf2:Qbuf2")
build_once "$out" stage11_backward_tensor_cores
bin="$out/build/bin/stage11_backward_tensor_cores"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128 --causal")
run() {  # name
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" $s --variant "$1" --brief --repeats 10 --warmup 2 --no-check | sed -E 's/ +\[B=.*//')
    printf "%-10s %-66s %s\n" "$1" "$s" "$r"
  done
}
printf "%-10s %-66s %s\n" variant shape "result (fp16, median of 10)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  variant_usage "$out/build.log" "dkdv_kernelI6__half" "$v"
  run "$name"
done
if command -v ncu > /dev/null; then
  # Where the finished kernel's time goes: pipes, shared memory, issue slots, occupancy.
  for a in "--batch 1 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64" \
           "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128"; do
    echo "== ncu dkdv_kernel, $a"
    # shellcheck disable=SC2086
    ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --launch-count 1 -k regex:dkdv "$bin" $a --repeats 1 --warmup 0 --no-check 2>&1 |
      grep -E "Duration|Throughput|Issue Slots|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|highest-utilized"
  done
fi
