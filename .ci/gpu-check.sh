#!/usr/bin/env bash
# Build, test and measure on a machine with a GPU, in one go (used with the lent H100).
# Usage: bash .ci/gpu-check.sh [build-dir]   Logs go to $OUT (or ./gpu-logs) when set.
# ctest runs everything, the compute-sanitizer entries (label sanitizer) included.
set -uo pipefail
build=${1:-/tmp/fa-build}
logs=${OUT:-$PWD/gpu-logs}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$logs/device.txt"
# The machine's own Catch2 and Boost if it has them, else Debian's packages carried in
# .deps/ (catch2/usr unpacked; boost-debs/*.deb, unpacked here): with Boost the CPU
# backend is built too, and the test that compares it with the GPU runs.
configure() { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > "$logs/configure.log" 2>&1; }
configure || configure -DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr" || { tail -30 "$logs/configure.log"; exit 1; }
if grep -q "Boost.Context not found" "$logs/configure.log" && ls .deps/boost-debs/*.deb > /dev/null 2>&1; then
  mkdir -p /tmp/fa-boost
  for deb in .deps/boost-debs/*.deb; do dpkg -x "$deb" /tmp/fa-boost; done
  rm -f "$build/CMakeCache.txt"  # forget the machine's Boost found without its context library
  configure -DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr;/tmp/fa-boost/usr" \
    -DBoost_DIR="$(ls -d /tmp/fa-boost/usr/lib/*/cmake/Boost-*)" || { tail -30 "$logs/configure.log"; exit 1; }
fi
grep -E "Catch2|CUDA|Boost" "$logs/configure.log"
cmake --build "$build" > "$logs/build.log" 2>&1 || { grep -E "error" -A5 "$logs/build.log" | head -60; exit 1; }
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" > "$logs/ctest.log" 2>&1
tail -15 "$logs/ctest.log"
bin="$build/bin"
{
  for s in $(ls "$bin" | grep -E '^stage[0-9]+_[a-z0-9_]+$' | grep -v '_cpu$' | sort); do
    "$bin/$s"
  done
} 2>&1 | tee "$logs/demos.txt"
