#!/usr/bin/env bash
# Regenerates the benchmark results on this machine's GPU, in one command:
#
#   bash benchmarks/run.sh [--quick] [--readme] [OUTDIR]
#
#  1. builds fa_bench and libfa_inputs (CMake preset `bench`, in build-bench/);
#  2. fa_bench: every stage and the cuBLAS baseline, B=4 H=32, d = 64 and 128,
#     N = 512 ... 16384                                   -> bench.csv, bench.json
#  3. torch_sdpa.py, if PyTorch is installed: SDPA's backends and the naive
#     matmul-softmax-matmul on the same inputs            -> torch.csv
#  4. hbm.py, if Nsight Compute is installed: DRAM bytes per stage vs the IO model
#                                                          -> hbm.csv
#  5. report.py: RESULTS.md, results.csv and the SVG plots; with --readme it also
#     rewrites the results section of README.md.
#
# OUTDIR defaults to benchmarks/results/<gpu name>. --quick runs a small sweep to try
# the pipeline out (its figures are not the published ones). Without a GPU it stops
# with a message and exit code 77: fa_bench_cpu runs the harness on the CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 readme=0 out=""
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --readme) readme=1 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done

if ! gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) || [ -z "$gpu" ]; then
  echo "run.sh: no CUDA GPU is available; the benchmark measures GPU kernels." >&2
  echo "        To try the harness on the CPU backend (not GPU performance):" >&2
  echo "        cmake --preset release && cmake --build --preset release --target fa_bench_cpu && build/bin/fa_bench_cpu" >&2
  exit 77
fi
slug=$(echo "$gpu" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//')
out="${out:-benchmarks/results/$slug}"
mkdir -p "$out"
echo "== $gpu -> $out"

if [ "$quick" = 1 ]; then
  sweep=(--dim 64 --seq 512,2048) hbm_seq=4096 torch_seq=512,2048
else
  sweep=() hbm_seq=4096,8192 torch_seq=512,1024,2048,4096,8192,16384
fi

echo "== build"
cmake --preset bench > "$out/build.log"
cmake --build --preset bench >> "$out/build.log"

echo "== fa_bench"
set +e  # a failed step is reported; the steps after it still run
build-bench/bin/fa_bench "${sweep[@]}" --csv "$out/bench.csv" --json "$out/bench.json" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}

echo "== PyTorch"
torch_args=(--lib build-bench/lib/libfa_inputs.so --csv "$out/torch.csv" --seq "$torch_seq")
[ "$quick" = 1 ] && torch_args+=(--dim 64)
python3 benchmarks/torch_sdpa.py "${torch_args[@]}" 2>&1 | tee "$out/torch.log"
[ "${PIPESTATUS[0]}" = 0 ] || rm -f "$out/torch.csv"  # no PyTorch (77) or it failed: no rows

echo "== HBM traffic (Nsight Compute)"
python3 benchmarks/hbm.py --bench build-bench/bin/fa_bench --csv "$out/hbm.csv" --seq "$hbm_seq" 2>&1 | tee "$out/hbm.log"
[ "${PIPESTATUS[0]}" = 77 ] && rm -f "$out/hbm.csv"  # no Nsight Compute: no rows
set -e

echo "== report"
report_args=("$out")
[ "$readme" = 1 ] && report_args+=(--readme README.md)
python3 benchmarks/report.py "${report_args[@]}"
exit "$bench_rc"
