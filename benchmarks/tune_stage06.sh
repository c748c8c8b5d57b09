#!/usr/bin/env bash
# Stage 06's tuning runs: builds the stage's demo once per variant (tile sizes and the
# blocks-per-multiprocessor launch bound, set with -D flags) and times every variant on
# the same shapes, in one go on a GPU. Stage 06's README records the outcome.
# Usage: bash benchmarks/tune_stage06.sh [out-dir]      (needs nvcc, CMake, Ninja, a GPU)
set -uo pipefail
out=${1:-/tmp/tune06}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "base:"
  "min2:-DFA06_MIN_BLOCKS=2"
  "min3:-DFA06_MIN_BLOCKS=3"
  "min4:-DFA06_MIN_BLOCKS=4"
  "bc32:-DFA06_BC=32"
  "br128:-DFA06_BR=128"
  "br128_min2:-DFA06_BR=128 -DFA06_MIN_BLOCKS=2"
  "bc128:-DFA06_BC=128"
)
build_variants "$out" stage06_tensor_cores
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal")
printf "%-12s %-70s %s\n" variant shape "result (fp16, median of 20)"
for v in "${variants[@]}"; do
  name=${v%%:*}
  bin="$out/$name/bin/stage06_tensor_cores"
  [ -x "$bin" ] || continue
  regs=$(grep -A2 "tensor_core_kernelI6__halfLi64" "$out/$name.build.log" | grep -o "Used [0-9]* registers" | head -1)
  regs128=$(grep -A2 "tensor_core_kernelI6__halfLi128" "$out/$name.build.log" | grep -o "Used [0-9]* registers" | head -1)
  spills=$(grep -o "[0-9]* bytes spill stores" "$out/$name.build.log" | sort -n | tail -1)
  echo "$name: d=64 $regs, d=128 $regs128, most spill stores: ${spills:-none}"
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    r=$("$bin" $s --brief --check-rows 256 | sed -E 's/ +\[B=.*//')
    printf "%-12s %-70s %s\n" "$name" "$s" "$r"
  done
done
