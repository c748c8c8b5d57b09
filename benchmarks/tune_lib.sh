# shellcheck shell=bash
# What the tuning scripts (benchmarks/tune_stage0N.sh) share; they source this file.

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

# variant_usage LOG KERNEL NAME:TYPE: ptxas_usage of the kernel template KERNEL (its mangled
# name up to the head dim, e.g. "hopper_kernelI6__half") built for the typed configuration
# TYPE at d = 64 and 128, a line each: "NAME: d=64 Used N registers M bytes spill stores".
variant_usage() {
  local log=$1 kernel=$2 name=${3%%:*} type=${3#*:} d
  for d in 64 128; do
    echo "$name: d=$d $(ptxas_usage "$log" "${kernel}Li${d}ENS0_${#type}${type}E")"
  done
}
