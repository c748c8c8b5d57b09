# shellcheck shell=bash
# What the tuning scripts (benchmarks/tune_stage0N.sh) share; they source this file.

# build_variants OUT TARGET [EXTRA...]: builds TARGET once per entry "name:flags" of the
# array `variants`, all at once, each in OUT/<name> with CMAKE_CUDA_FLAGS="flags -Xptxas -v",
# so that ptxas' register and spill report lands in OUT/<name>.build.log. The first variant
# also builds the EXTRA targets (an earlier stage to time beside it, say).
# shellcheck disable=SC2154  # variants: set by the sourcing script
build_variants() {
  local out=$1 target=$2
  shift 2
  local v name flags t first=1
  for v in "${variants[@]}"; do
    name=${v%%:*} flags=${v#*:}
    local targets=(--target "$target")
    if [ $first = 1 ]; then
      for t in "$@"; do targets+=(--target "$t"); done
      first=0
    fi
    (cmake -S . -B "$out/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=OFF -DFA_BUILD_DOCS=OFF \
       -DCMAKE_CUDA_FLAGS="$flags -Xptxas -v" > "$out/$name.configure.log" 2>&1 &&
     cmake --build "$out/$name" "${targets[@]}" -j 4 > "$out/$name.build.log" 2>&1 ||
     echo "$name: build failed (see $out/$name.build.log)") &
  done
  wait
}

# build_once OUT TARGET...: builds the targets once in OUT/build with -Xptxas -v, so that
# ptxas' register and spill report for every kernel, each variant of a stage's typed
# configuration among them, lands in OUT/build.log.
build_once() {
  local out=$1
  shift
  local targets=() t
  for t in "$@"; do targets+=(--target "$t"); done
  cmake -S . -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=OFF -DFA_BUILD_DOCS=OFF \
    -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$out/configure.log" 2>&1 &&
    cmake --build "$out/build" "${targets[@]}" > "$out/build.log" 2>&1 ||
    echo "build failed (see $out/build.log)"
}

# ptxas_usage LOG PATTERN: "Used N registers" and "M bytes spill stores" of the first kernel
# in a build log whose mangled name matches PATTERN.
ptxas_usage() {
  local line
  line=$(grep -A2 "$2" "$1" | tr '\n' ' ')
  echo "$(echo "$line" | grep -o 'Used [0-9]* registers') $(echo "$line" | grep -o '[0-9]* bytes spill stores')"
}
