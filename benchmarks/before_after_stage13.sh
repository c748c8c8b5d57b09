#!/usr/bin/env bash
# Stage 13 before and after a change: the code before (BEFORE_SRC) and this checkout, built side
# by side, then every variant of each timed at the benchmark's shapes (FP16: d = 64 at B = 4,
# H = 32, N = 4096; d = 128 at B = 1, H = 16, N = 8192), the two builds taking turns shape by
# shape in two rounds, so that a drifting clock touches both alike. The variants are those of
# stages/13_backward_hopper/tuning.h that both builds have (VARIANTS, default "tuned atomics
# bulk deterministic"); a variant only one build has prints "-". The gradients are not checked
# here (the tests check every variant); the times are the demo's medians of 10. Also writes
# ptxas' registers and spills of the kernels after the change.
# Usage: bash benchmarks/before_after_stage13.sh BEFORE_SRC [out-dir]   (nvcc 12+, CMake, Ninja, a Hopper GPU)
#   BEFORE_SRC: a checkout of the code before (git worktree add /tmp/before <revision>).
set -uo pipefail
before_src=$(cd "$1" && pwd)
out=${2:-/tmp/before_after13}
read -r -a variants <<< "${VARIANTS:-tuned atomics bulk deterministic}"
mkdir -p "$out"
build() {  # name source-dir
  cmake -S "$2" -B "$out/build-$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=OFF -DFA_BUILD_DOCS=OFF \
    -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$out/configure-$1.log" 2>&1 &&
    cmake --build "$out/build-$1" --target stage13_backward_hopper > "$out/build-$1.log" 2>&1 ||
    echo "before_after_stage13.sh: the $1 build failed (see $out/build-$1.log)" >&2
}
build before "$before_src" &
build after "$PWD" &
wait
grep -A2 "backward_kernelI6__half" "$out/build-after.log" | grep -E "entry|Used|spill" > "$out/ptxas_after.txt"
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128"
        "--batch 1 --heads 16 --seq-q 8192 --seq-kv 8192 --dim 128 --causal")
printf "%-6s %-66s %s\n" round shape "build/variant: ms (fp16, median of 10)" | tee "$out/times.txt"
for round in 1 2; do
  for s in "${shapes[@]}"; do
    line=""
    for code in before after; do
      for v in "${variants[@]}"; do
        # shellcheck disable=SC2086
        ms=$("$out/build-$code/bin/stage13_backward_hopper" $s --variant "$v" --brief --repeats 10 --warmup 2 \
               --no-check 2>/dev/null | grep -oE '[0-9.]+ ms' | head -1)
        line="$line  $code/$v ${ms:--}"
      done
    done
    printf "%-6s %-66s%s\n" "$round" "$s" "$line" | tee -a "$out/times.txt"
  done
done
