#!/usr/bin/env bash
# The tensor-core stages' performance bars, measured in one run on a GPU: stages 06, 07 and
# 08 (with stage 05 for scale) beside PyTorch SDPA's flash and cuDNN backends on the same inputs,
# at the two shapes the bars are set at, non-causal and causal:
#   B=4 H=32 N=4096 d=64   and   B=1 H=16 N=16384 d=128
# Usage: bash benchmarks/bars.sh [build-dir] [out-dir]
#   build-dir must hold fa_bench and lib/libfa_inputs.so (default build/); rows go to
#   out-dir/bars.csv (fa_bench and PyTorch rows in one CSV) and out-dir/bars.log.
#   STAGES=07_memory_pipeline,08_hopper (say) times only those stages beside SDPA.
set -uo pipefail
build=${1:-build}
out=${2:-benchmarks/results/bars}
mkdir -p "$out"
csv="$out/bars.csv"
log="$out/bars.log"
: > "$log"
tmp=$(mktemp -d)
shapes=("--batch 4 --heads 32 --dim 64 --seq 4096" "--batch 1 --heads 16 --dim 128 --seq 16384")
n=0
for causal in "" "--causal"; do
  for shape in "${shapes[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086  # the shape is a list of flags
    "$build/bin/fa_bench" --stages "${STAGES:-05_flash2,06_tensor_cores,07_memory_pipeline,08_hopper}" --precisions fp32,fp16,bf16 $shape $causal \
      --repeats 20 --min-repeats 5 --csv "$tmp/stages$n.csv" 2>&1 | tee -a "$log"
    # shellcheck disable=SC2086
    python3 benchmarks/torch_sdpa.py --lib "$build/lib/libfa_inputs.so" --precisions fp16,bf16 $shape $causal \
      --repeats 20 --min-repeats 5 --csv "$tmp/torch$n.csv" 2>&1 | tee -a "$log"
  done
done
# One CSV: the header once, then every row.
first=1
for f in "$tmp"/stages*.csv "$tmp"/torch*.csv; do
  [ -f "$f" ] || continue
  if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi
done > "$csv"
rm -rf "$tmp"
echo "bars: $csv ($(($(wc -l < "$csv") - 1)) rows), log $log"
