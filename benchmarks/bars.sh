#!/usr/bin/env bash
# The tensor-core stages' performance bars, measured in one run on a GPU: stages 06, 07 and
# 08 (with stage 05 for scale) beside PyTorch SDPA's flash and cuDNN backends on the same inputs,
# at the two shapes the bars are set at, non-causal and causal:
#   B=4 H=32 N=4096 d=64   and   B=1 H=16 N=16384 d=128
# Usage: bash benchmarks/bars.sh [build-dir] [out-dir]
#   build-dir must hold fa_bench and lib/libfa_inputs.so (default build/); rows go to
#   out-dir/bars.csv (fa_bench and PyTorch rows in one CSV) and out-dir/bars.log, and a
#   summary (the median over rounds of each point, and each stage's speed as a share of
#   SDPA cuDNN's) is printed at the end and written to out-dir/bars_summary.txt.
# Environment:
#   STAGES=07_memory_pipeline,08_hopper   times only those stages beside SDPA
#   SHAPES=d64 or d128                    only one of the two shapes (default: both)
#   CAUSAL=no or yes                      only non-causal or only causal (default: both)
#   ROUNDS=n                              measure everything n times, the stages and SDPA in
#                                         turn, so that a drifting clock (the H100 slows down
#                                         at its power limit) touches both alike (default 1)
set -uo pipefail
build=${1:-build}
out=${2:-benchmarks/results/bars}
mkdir -p "$out"
csv="$out/bars.csv"
log="$out/bars.log"
: > "$log"
tmp=$(mktemp -d)
d64="--batch 4 --heads 32 --dim 64 --seq 4096"
d128="--batch 1 --heads 16 --dim 128 --seq 16384"
case "${SHAPES:-both}" in
  both) shapes=("$d64" "$d128") ;;
  d64) shapes=("$d64") ;;
  d128) shapes=("$d128") ;;
  *) echo "bars.sh: SHAPES must be d64, d128 or both, not '$SHAPES'" >&2; exit 2 ;;
esac
case "${CAUSAL:-both}" in
  both) masks=("" "--causal") ;;
  no) masks=("") ;;
  yes) masks=("--causal") ;;
  *) echo "bars.sh: CAUSAL must be no, yes or both, not '$CAUSAL'" >&2; exit 2 ;;
esac
rounds=${ROUNDS:-1}
n=0
for round in $(seq 1 "$rounds"); do
  for causal in "${masks[@]}"; do
    for shape in "${shapes[@]}"; do
      n=$((n + 1))
      [ "$rounds" -gt 1 ] && echo "== round $round of $rounds" | tee -a "$log"
      # shellcheck disable=SC2086  # the shape is a list of flags
      "$build/bin/fa_bench" --stages "${STAGES:-05_flash2,06_tensor_cores,07_memory_pipeline,08_hopper}" --precisions fp32,fp16,bf16 $shape $causal \
        --repeats 20 --min-repeats 5 --csv "$tmp/stages$n.csv" 2>&1 | tee -a "$log"
      # shellcheck disable=SC2086
      python3 benchmarks/torch_sdpa.py --lib "$build/lib/libfa_inputs.so" --precisions fp16,bf16 $shape $causal \
        --repeats 20 --min-repeats 5 --csv "$tmp/torch$n.csv" 2>&1 | tee -a "$log"
    done
  done
done
# One CSV: the header once, then every row (with several rounds, each point once a round).
first=1
for f in "$tmp"/stages*.csv "$tmp"/torch*.csv; do
  [ -f "$f" ] || continue
  if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi
done > "$csv"
rm -rf "$tmp"
echo "bars: $csv ($(($(wc -l < "$csv") - 1)) rows), log $log"
python3 - "$csv" <<'EOF' | tee "$out/bars_summary.txt"
# The median of each point over the rounds, and each stage's speed over SDPA cuDNN's.
import csv, statistics, sys
times = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["median_ms"] and r["precision"] in ("fp16", "bf16"):
        shape = f"B{r['batch']} H{r['heads']} N{r['seq_q']} d{r['dim']}" + (" causal" if r["causal"] == "1" else "")
        name = r["name"] if r["source"] == "stages" else f"{r['source']}:{r['name']}"
        times.setdefault((shape, r["precision"]), {}).setdefault(name, []).append(float(r["median_ms"]))
print(f"{'shape':<28} {'dtype':<5} {'name':<24} {'rounds':>6} {'median ms':>10} {'min':>8} {'max':>8} {'cuDNN speed':>12}")
for (shape, prec), names in times.items():
    cudnn = statistics.median(names["pytorch:sdpa_cudnn"]) if "pytorch:sdpa_cudnn" in names else None
    for name, ms in sorted(names.items()):
        share = f"{cudnn / statistics.median(ms):.1%}" if cudnn and ":" not in name else ""
        print(f"{shape:<28} {prec:<5} {name:<24} {len(ms):>6} {statistics.median(ms):>10.3f} {min(ms):>8.3f} "
              f"{max(ms):>8.3f} {share:>12}")
EOF
