#!/usr/bin/env bash
# Nothing got slower: the code before a change and the code after it, built side by side
# and timed in the same run on a GPU, at every bar point of the tensor-core stages:
#   stages 06, 07 and 08 (fa_bench) at the eight forward bar points: B=4 H=32 N=4096 d=64
#     and B=1 H=16 N=16384 d=128, non-causal and causal, fp16 and bf16;
#   stage 09 (its demo) at the decode bar points: one new query, d = 128, fp16, B=1 Hq=Hkv=32
#     with L = 32768 and 131072, and B=16 Hq=32 Hkv=8 with L = 32768;
#   stage 10 (its demo) at the backward bar points: B=4 H=32 N=4096, fp32, d = 64 and 128.
# The two builds take turns, point by point, in ROUNDS rounds, so that a drifting clock
# (the H100 slows down at its power limit) touches both alike. Every run is checked against
# the float64 reference. Prints, for each stage and point, the median over the rounds
# before and after and their ratio, and writes it to out-dir/before_after.txt.
# Usage: bash benchmarks/before_after.sh BEFORE_SRC [out-dir]   (needs nvcc, CMake, Ninja, a GPU)
#   BEFORE_SRC: a checkout of the code before (git worktree add /tmp/before <revision>);
#   the code after is this checkout. Environment: ROUNDS (default 3); BEFORE_BUILD and
#   AFTER_BUILD, build directories to reuse instead of building.
set -uo pipefail
before_src=$(cd "$1" && pwd)
out=${2:-/tmp/before_after}
rounds=${ROUNDS:-3}
mkdir -p "$out"
# The builds: BEFORE_BUILD and AFTER_BUILD name existing build directories to reuse (with
# fa_bench and the demos of stages 09 and 10 built), else they are built here, in parallel.
build() {  # name source-dir
  if ! cmake -S "$2" -B "$out/build-$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=OFF \
         -DFA_BUILD_DOCS=OFF > "$out/configure-$1.log" 2>&1 ||
     ! cmake --build "$out/build-$1" --target fa_bench stage09_split_kv_decoding stage10_backward \
         > "$out/build-$1.log" 2>&1; then
    echo "before_after.sh: the $1 build failed (see $out/build-$1.log)" >&2
  fi
}
declare -A dir=([before]=${BEFORE_BUILD:-$out/build-before} [after]=${AFTER_BUILD:-$out/build-after})
[ -n "${BEFORE_BUILD:-}" ] || build before "$before_src" &
[ -n "${AFTER_BUILD:-}" ] || build after "$PWD" &
wait
for code in before after; do
  [ -x "${dir[$code]}/bin/fa_bench" ] || { echo "before_after.sh: no fa_bench in ${dir[$code]}" >&2; exit 1; }
done

rows="$out/rows.txt"  # code|stage|point|median ms|PASSED or FAILED
: > "$rows"
forward=("--batch 4 --heads 32 --dim 64 --seq 4096" "--batch 1 --heads 16 --dim 128 --seq 16384")
decode=("--batch 1 --heads 32 --seq-kv 32768" "--batch 1 --heads 32 --seq-kv 131072"
        "--batch 16 --heads 32 --kv-heads 8 --seq-kv 32768")
backward=("--dim 64" "--dim 128")
for round in $(seq "$rounds"); do
  echo "== round $round of $rounds"
  for code in before after; do
    bin="${dir[$code]}/bin"
    for shape in "${forward[@]}"; do
      for causal in "" "--causal"; do
        # shellcheck disable=SC2086
        "$bin/fa_bench" --stages 06_tensor_cores,07_memory_pipeline,08_hopper --precisions fp16,bf16 $shape $causal \
          --repeats 20 --min-repeats 5 --csv "$out/fwd.csv" > /dev/null 2>&1
        python3 - "$out/fwd.csv" "$code" >> "$rows" <<'EOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["median_ms"]:
        point = f"B{r['batch']} H{r['heads']} N{r['seq_q']} d{r['dim']} {r['precision']}" + (" causal" if r["causal"] == "1" else "")
        print(f"{sys.argv[2]}|{r['name']}|{point}|{r['median_ms']}|{r['status'].upper()}")
EOF
      done
    done
    for shape in "${decode[@]}"; do
      # shellcheck disable=SC2086
      r=$("$bin/stage09_split_kv_decoding" $shape --dim 128 --brief --repeats 50 --warmup 5 --check-rows 64)
      echo "$code|09_split_kv_decoding|$shape d128 fp16|$(echo "$r" | grep -o '[0-9.]* ms' | head -1 | sed 's/ ms//')|$(echo "$r" | grep -o 'PASSED\|FAILED')" >> "$rows"
    done
    for shape in "${backward[@]}"; do
      # shellcheck disable=SC2086
      r=$("$bin/stage10_backward" --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 $shape --brief --repeats 10 --warmup 2 \
          --check-heads 1)
      echo "$code|10_backward|B4 H32 N4096 ${shape#--dim } fp32|$(echo "$r" | grep -o '[0-9.]* ms' | head -1 | sed 's/ ms//')|$(echo "$r" | grep -o 'PASSED\|FAILED')" >> "$rows"
    done
  done
done
python3 - "$rows" "$rounds" <<'EOF' | tee "$out/before_after.txt"
# The median over the rounds of each stage at each point, before and after, and after / before.
import statistics, sys
times, status = {}, {}
for line in open(sys.argv[1]):
    code, stage, point, ms, verdict = line.rstrip("\n").split("|")
    if ms:
        times.setdefault((stage, point), {}).setdefault(code, []).append(float(ms))
    if verdict and verdict != "PASSED":
        status[(stage, point)] = verdict
print(f"median of {sys.argv[2]} rounds, ms; after / before > 1 is slower")
print(f"{'stage':<22} {'point':<46} {'before':>9} {'after':>9} {'after/before':>13}")
worst = {}
for (stage, point), t in sorted(times.items()):
    b, a = statistics.median(t.get("before", [float("nan")])), statistics.median(t.get("after", [float("nan")]))
    worst[stage] = max(worst.get(stage, 0.0), a / b)
    note = f"  {status[(stage, point)]}" if (stage, point) in status else ""
    print(f"{stage:<22} {point:<46} {b:>9.3f} {a:>9.3f} {a / b:>13.3f}{note}")
print("largest after / before per stage: " + ", ".join(f"{s} {w:.3f}" for s, w in sorted(worst.items())))
print("checks: " + ("every run PASSED" if not status else f"{len(status)} points with a run not PASSED"))
EOF
