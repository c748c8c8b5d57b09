#!/usr/bin/env bash
# Stage 08's optimisation log, measured: builds the stage once (its variants, each the
# finished kernel with one step of LOG.md undone or changed, are the typed configurations of
# stages/08_hopper/tuning.h, run with --variant), times every variant at the bar shapes in
# fp16 on a Hopper GPU, and reads the finished kernel's counters with Nsight Compute, if it
# is installed. An H100 at its power limit lowers its clock by up to a quarter during a run,
# so each shape is timed in ROUNDS rounds (default 3) that take the variants in turn, and the
# table gives each variant's median over the rounds.
# Usage: bash benchmarks/tune_stage08.sh [--build-only] [out-dir]   (needs nvcc, CMake, Ninja, an H100)
#   --build-only: build and stop (a second call, with the same out-dir, times the variants)
set -uo pipefail
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
out=${1:-/tmp/tune08}
rounds=${ROUNDS:-3}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# --variant name : the configuration's struct in tuning.h (for ptxas' report)
variants=(
  "tuned:Tuned" "persistent_always:PersistentAlways" "one_tile_a_block:OneTileABlock" "three_consumers:ThreeConsumers"
  "no_overlap:NoOverlap" "ring2:Ring2" "no_pingpong:NoPingpong" "serial_reduce:SerialReduce" "one_q_buffer:OneQBuffer"
  "p_double:PDouble" "eager:Eager" "lazy_all:LazyAll" "narrow_o:NarrowO"
)
bin="$out/build/bin/stage08_hopper"
[ -x "$bin" ] || build_once "$out" stage08_hopper
for v in "${variants[@]}"; do
  variant_usage "$out/build.log" "hopper_kernelI6__half" "$v"
done
[ $build_only = 1 ] && exit 0
shapes=("--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128"
        "--batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --causal"
        "--batch 1 --heads 16 --seq-q 16384 --seq-kv 16384 --dim 128 --causal")
raw="$out/times.txt"
: > "$raw"
for s in "${shapes[@]}"; do
  for round in $(seq "$rounds"); do
    for v in "${variants[@]}"; do
      name=${v%%:*}
      # shellcheck disable=SC2086
      r=$("$bin" $s --variant "$name" --brief --repeats 20 --warmup 3 --check-rows 64 2>/dev/null | sed -E 's/ +\[B=.*//')
      echo "$name|$s|$round|$r" >> "$raw"
    done
  done
done
echo "each run: fp16, median of 20 after 3 warm-up; the rounds' times in ms, then their median"
printf "%-18s %-62s %s\n" variant shape "rounds -> median"
for v in "${variants[@]}"; do
  name=${v%%:*}
  for s in "${shapes[@]}"; do
    runs=$(grep -F "$name|$s|" "$raw") || continue
    times=$(echo "$runs" | grep -o '[0-9.]* ms' | sed 's/ ms//' | sort -n | tr '\n' ' ')
    med=$(echo "$times" | tr ' ' '\n' | grep . | awk '{ t[NR] = $1 } END { print (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }')
    failed=$(echo "$runs" | grep -vc PASSED)
    printf "%-18s %-62s %s-> %s%s\n" "$name" "$s" "$times" "$med" "$([ "$failed" = 0 ] || echo "  ($failed runs not PASSED)")"
  done
done
if command -v ncu > /dev/null; then
  # Where the finished kernel's time goes: the tensor pipe, issue slots, stall reasons.
  m=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
  m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,dram__bytes_read.sum,gpu__time_duration.sum
  for s in "${shapes[0]}" "${shapes[1]}"; do
    echo "== ncu hopper_kernel, $s"
    # shellcheck disable=SC2086
    ncu --metrics "$m" --launch-count 1 -k regex:hopper_kernel "$bin" $s --repeats 1 \
      --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
  done
fi
