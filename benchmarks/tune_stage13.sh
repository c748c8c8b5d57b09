#!/usr/bin/env bash
# Stage 13's tuning log, measured: builds the stage once (its variants are the typed
# configurations of stages/13_backward_hopper/tuning.h, run with --variant: how dQ's parts are
# added, by atomics or by one bulk reduction a tile, and by whom, at each head dim; in a fixed
# order or not; Q tiles of 64 or 128 rows at d = 64; dK's product before or after dQ's; dQ's tile swizzled or not; the causal grid's order) and times every variant at the benchmark's
# shapes (FP16: d = 64 at B = 4, H = 32, N = 4096; d = 128 at B = 1, H = 16, N = 8192) in two
# alternating rounds on a Hopper GPU,
# with ptxas' registers and spills of each kernel. The gradients are not checked here (the tests check every variant);
# the times are medians of 10.
# Usage: bash benchmarks/tune_stage13.sh [out-dir]   (needs nvcc 12+, CMake, Ninja, a Hopper GPU)
set -uo pipefail
out=${1:-/tmp/tune13}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=("tuned:Tuned" "atomics:Atomics" "bulk:Bulk" "deterministic:Deterministic"
          "deterministic_atomics:DeterministicAtomics" "dq_warp:DqWarp" "q64:Q64" "dk_first:DkFirst" "dk_last:DkLast" "dk_split:DkSplit"
          "dq_plain:DqPlain" "head_order:HeadOrder")
build_once "$out" stage13_backward_hopper
bin="$out/build/bin/stage13_backward_hopper"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128 --causal")
for v in "${variants[@]}"; do
  variant_usage "$out/build.log" "backward_kernelI6__half" "$v"
done
printf "%-6s %-66s %s\n" round shape "variant: ms (fp16, median of 10)"
for round in 1 2; do
  for s in "${shapes[@]}"; do
    line=""
    for v in "${variants[@]}"; do
      name=${v%%:*}
      # shellcheck disable=SC2086
      ms=$("$bin" $s --variant "$name" --brief --repeats 10 --warmup 2 --no-check | grep -oE '[0-9.]+ ms' | head -1)
      line="$line  $name $ms"
    done
    printf "%-6s %-66s%s\n" "$round" "$s" "$line"
  done
done
