#!/usr/bin/env bash
# Stage 06's tuning runs: builds the stage once (its variants, other tile sizes and
# blocks-per-multiprocessor launch bounds, are the typed configurations of
# stages/06_tensor_cores/tuning.h, run with --variant) and times every variant on the same
# shapes, in one go on a GPU. Stage 06's README records the outcome.
# Usage: bash benchmarks/tune_stage06.sh [out-dir]      (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune06}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=("tuned:Tuned" "min2:Min2" "min3:Min3" "bc32:Bc32" "br128:Br128" "br128_min2:Br128Min2" "bc128:Bc128")
build_once "$out" stage06_tensor_cores
bin="$out/build/bin/stage06_tensor_cores"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal")
printf "%-12s %-70s %s\n" variant shape "result (fp16, median of 20)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  variant_usage "$out/build.log" "tensor_core_kernelI6__half" "$v"
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" $s --variant "$name" --brief --check-rows 256 | sed -E 's/ +\[B=.*//')
    printf "%-12s %-70s %s\n" "$name" "$s" "$r"
  done
done
