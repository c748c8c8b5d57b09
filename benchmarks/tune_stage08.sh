#!/usr/bin/env bash
# Stage 08's optimisation log, measured: builds the stage's demo once per variant (a step
# of the log switched off or changed, set with -D flags, see hopper_attention.h), times every
# variant at the bar shapes in fp16 on a Hopper GPU, and reads the final kernel's counters
# with Nsight Compute, if it is installed. An H100 at its power limit lowers its clock by up
# to a quarter during a run, so each shape is timed in ROUNDS rounds (default 3) that take
# the variants in turn, and the table gives each variant's median over the rounds.
# Usage: bash benchmarks/tune_stage08.sh [--build-only] [out-dir]   (needs nvcc, CMake, Ninja, an H100)
#   --build-only: build the variants and stop (a second call, with the same out-dir, times them)
set -uo pipefail
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
out=${1:-/tmp/tune08}
rounds=${ROUNDS:-3}
mkdir -p "$out"
# shellcheck source=benchmarks/tune_lib.sh
source "$(dirname "$0")/tune_lib.sh"
# name : compile flags
variants=(
  "final:"                                                  # the defaults (hopper_attention.h)
  "persistent_always:-DFA08_PERSISTENT=1"                   # one block a multiprocessor at every length
  "one_tile_a_block:-DFA08_PERSISTENT=0"                    # a block for each Q tile (tuning run 3's kernel)
  "three_consumers:-DFA08_CONSUMERS_D64=3"                  # d = 64: Br = 192 (spills 288 bytes)
  "no_overlap:-DFA08_OVERLAP=0"                             # each product waited for at once
  "ring2:-DFA08_STAGES=2"                                   # two K/V slots
  "no_pingpong:-DFA08_PINGPONG=0"                           # the consumers do not take turns
  "serial_reduce:-DFA08_TREE_REDUCE=0"                      # a row's max and sum in one chain each
  "one_q_buffer:-DFA08_Q_BUFFERS_D64=1"                     # d = 64: the next tile's Q copied after this one's last S
  "p_double:-DFA08_P_BUFFERS_D64=2"                         # d = 64: P_{j+1} made while P_j·V_j runs
  "eager:-DFA08_LAZY_RESCALE=0"                             # O rescaled at every tile at d = 128 too
  "lazy_all:-DFA08_LAZY_RESCALE=2"                          # lazy rescaling at d = 64 too
)
build_variants "$out" stage08_hopper
for v in "${variants[@]}"; do
  name=${v%%:*}
  for d in 64 128; do
    usage=$(ptxas_usage "$out/$name.build.log" "hopper_kernelI6__halfLi${d}E")
    [ -n "${usage// /}" ] && echo "$name: d=$d $usage"  # (empty when ninja had nothing to rebuild)
  done
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
      bin="$out/$name/bin/stage08_hopper"
      [ -x "$bin" ] || continue
      # shellcheck disable=SC2086
      r=$("$bin" $s --brief --repeats 20 --warmup 3 --check-rows 64 2>/dev/null | sed -E 's/ +\[B=.*//')
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
  # Where the final kernel's time goes: the tensor pipe, issue slots, stall reasons.
  m=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
  m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected; do
    m=$m,smsp__warp_issue_stalled_${r}_per_warp_active.pct
  done
  m=$m,dram__bytes_read.sum,gpu__time_duration.sum
  for s in "${shapes[0]}" "${shapes[1]}"; do
    echo "== ncu hopper_kernel, $s"
    # shellcheck disable=SC2086
    ncu --metrics "$m" --launch-count 1 -k regex:hopper_kernel "$out/final/bin/stage08_hopper" $s --repeats 1 \
      --warmup 0 --no-check 2>&1 | grep -E "sm__|smsp__|dram__|gpu__" | sed 's/^ *//'
  done
fi
