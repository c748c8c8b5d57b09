#!/usr/bin/env bash
# The measurements behind the tables of lessons 01-05, in one run on a GPU: each stage's demo
# at the shapes its lesson shows (median of 20 after 3 warm-up unless a line says fewer), and
# Nsight Compute's DRAM byte counts where a lesson quotes them. Every demo run is checked
# against the float64 reference; a failed check fails the script.
# Usage: bash benchmarks/lessons.sh BIN_DIR [out-file]   (BIN_DIR: a GPU build's bin/, with
#   the demos and fa_bench; ncu on the PATH for the counters, which are left out without it)
#   Environment: SECTIONS, the lessons to measure (default "01 02 03 04 05 05sparse", the last
#   stage 05's block-sparse attention), and APPEND=1 to
#   add to out-file instead of starting it afresh; COMMIT, the commit to name (default: HEAD).
#   The whole run takes about 10 minutes on an H100.
# Writes out-file (default: lessons_01_05.txt in the current directory): each command after
# "$ ", then what it printed.
set -uo pipefail
bin=$(cd "$1" && pwd)
out=${2:-lessons_01_05.txt}
failed=0
[ "${APPEND:-0}" = 1 ] || : > "$out"
say() { echo "$*" | tee -a "$out"; }
run() {  # a demo command: its line, then its output (stdout and stderr)
  say "\$ $*"
  "$bin/$1" "${@:2}" 2>&1 | tee -a "$out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  say ""
}
refused() {  # a demo command that must be refused with exit code 3 (does not fit)
  say "\$ $*"
  "$bin/$1" "${@:2}" 2>&1 | tee -a "$out"
  [ "${PIPESTATUS[0]}" -eq 3 ] || failed=1
  say ""
}
# ncu_dram CMD...: DRAM bytes read and written and the time of each kernel launch (a demo run
# with --repeats 1 launches each kernel twice: the checked run and the timed one). The times
# are under the profiler, which fixes the clock.
ncu_dram() {
  command -v ncu >/dev/null || { say "(ncu not found: $* left out)"; return; }
  say "\$ ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum $*"
  ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum "$bin/$1" "${@:2}" 2>&1 |
    grep -E "Context [0-9]+, Stream|dram__bytes|gpu__time_duration|==ERROR==" | tee -a "$out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
  say ""
}

[ "${APPEND:-0}" = 1 ] || say "# Lessons 01-05 on the $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) (commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})"
[ "${APPEND:-0}" = 1 ] || say ""
[ "${APPEND:-0}" = 1 ] && say "# appended: sections ${SECTIONS:-all} (commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})"
s01() {
  say "## Stage 01"
  run stage01_naive --brief
  run stage01_naive --brief --dim 128
  run stage01_naive --brief --causal
  run stage01_naive --brief --batch 1 --heads 8 --seq-q 16384 --seq-kv 16384
  refused stage01_naive --batch 64 --heads 64 --seq-q 65536 --seq-kv 65536
  ncu_dram stage01_naive --batch 1 --heads 32 --repeats 1 --warmup 0 --no-check
}

s02() {
  say "## Stage 02 (the softmax on its own: rows x cols = B*H*Nq x Nkv)"
  run stage02_online_softmax --brief
  run stage02_online_softmax --brief --batch 1 --heads 1 --seq-q 65536 --seq-kv 16384
  run stage02_online_softmax --brief --batch 1 --heads 1 --seq-q 16384 --seq-kv 65536
  run stage02_online_softmax --brief --batch 1 --heads 1 --seq-q 4096 --seq-kv 262144
  run stage02_online_softmax --brief --batch 1 --heads 1 --seq-q 1024 --seq-kv 1048576
  run stage02_online_softmax --brief --batch 1 --heads 1 --seq-q 256 --seq-kv 4194304
  ncu_dram stage02_online_softmax --batch 1 --heads 32 --repeats 1 --warmup 0 --no-check
  ncu_dram stage02_online_softmax --batch 1 --heads 1 --seq-q 256 --seq-kv 4194304 --repeats 1 --warmup 0 --no-check
  say "## Stage 02 inside attention (stage 01's kernels with this softmax), beside stage 01"
  run fa_bench --batch 4 --heads 32 --dim 64 --seq 4096 --stages 01_naive,02_online_softmax --repeats 20
  ncu_dram fa_bench --profile --batch 1 --heads 32 --dim 64 --seq 4096 --stages 01_naive,02_online_softmax
}

s03() {
  say "## Stage 03 (--compare: stage 01 on the same inputs)"
  run stage03_streaming --brief --compare
  run stage03_streaming --brief --dim 16 --repeats 5
  run stage03_streaming --brief --compare --dim 128 --repeats 5
  run stage03_streaming --brief --compare --causal --repeats 5
  run stage03_streaming --brief --compare --batch 1 --heads 8 --seq-q 16384 --seq-kv 16384 --repeats 3
  run stage03_streaming --brief --compare --batch 1 --heads 8 --seq-q 65536 --seq-kv 65536 --repeats 3 --warmup 1
  refused stage01_naive --batch 1 --heads 8 --seq-q 65536 --seq-kv 65536
}

s04() {
  say "## Stage 04 (--compare: stages 01 and 03 on the same inputs)"
  run stage04_flash1 --compare
  for f in "--dim 16" "--dim 32" "--dim 128" "--causal" "--seq-q 2048 --seq-kv 2048" "--seq-q 8192 --seq-kv 8192"; do
    run stage04_flash1 --brief $f
  done
  ncu_dram stage04_flash1 --batch 1 --heads 32 --repeats 1 --warmup 0 --no-check
}

s05() {
  say "## Stage 05 (--compare: stages 01, 03 and 04 on the same inputs)"
  run stage05_flash2 --compare
  for n in 2048 8192; do
    run stage05_flash2 --brief --compare --seq-q $n --seq-kv $n --repeats 5
  done
  run stage05_flash2 --brief --seq-q 16384 --seq-kv 16384 --repeats 5
  for f in "--dim 16" "--dim 32" "--dim 128" "--causal"; do
    run stage05_flash2 --brief $f
  done
  ncu_dram stage05_flash2 --batch 1 --heads 32 --repeats 1 --warmup 0 --no-check
}

s05sparse() {
  say "## Stage 05, block-sparse (--block-density: a random mask keeping that fraction of the 64x64 blocks)"
  run stage05_flash2 --brief
  for f in 1 0.5 0.25 0.1 0; do
    run stage05_flash2 --brief --block-density $f
  done
  run stage05_flash2 --brief --causal
  run stage05_flash2 --brief --causal --block-density 0.5
  ncu_dram stage05_flash2 --batch 1 --heads 32 --repeats 1 --warmup 0 --no-check --block-density 0.25
}

for section in ${SECTIONS:-01 02 03 04 05 05sparse}; do "s$section"; done
[ "$failed" -eq 0 ] || { echo "lessons.sh: a run failed (see $out)" >&2; exit 1; }
