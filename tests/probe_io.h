// What the probe programs (tensor_core_probe_main.cpp, hopper_probe_main.cpp) share: their
// output files, written on the GPU and read back on the CPU backend, and the comparison of
// registers that must agree bit for bit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/errors.h"

namespace fa::probe {

/// The probes' command line, `--write FILE` (the GPU build) or `--check FILE` (the CPU
/// build): sets *write and *path, or prints the usage and returns false. With --write the
/// old file is removed at once, so that a failed run never leaves one to compare with.
inline bool parse_probe_args(int argc, char** argv, bool* write, std::string* path) {
  if (argc != 3 || (std::strcmp(argv[1], "--write") != 0 && std::strcmp(argv[1], "--check") != 0)) {
    std::cerr << "usage: " << argv[0] << " --write FILE | --check FILE\n";
    return false;
  }
  *write = std::strcmp(argv[1], "--write") == 0;
  *path = argv[2];
  if (*write) std::remove(path->c_str());
  return true;
}

/// Appends `v` to the file: its length, then its elements.
template <typename T>
void put(std::ofstream& f, const std::vector<T>& v) {
  const uint64_t n = v.size();
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
}

/// Reads back what put() wrote.
template <typename T>
std::vector<T> get(std::ifstream& f) {
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!f || n > (1u << 22)) throw InputError("probe file is malformed");
  std::vector<T> v(n);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  if (!f) throw InputError("probe file is truncated");
  return v;
}

/// Counts the 32-bit words that differ, printing the first few with their `unit` (lane,
/// thread, ...) and index in it (`per_unit` words a unit).
inline int compare_bits(const char* what, const std::vector<uint32_t>& cpu, const std::vector<uint32_t>& gpu,
                        int per_unit, const char* unit = "lane") {
  int bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (i < cpu.size() && cpu[i] == gpu[i]) continue;
    if (++bad <= 5) {
      std::printf("  %s: %s %zu word %zu: CPU backend 0x%08x, GPU 0x%08x\n", what, unit,
                  i / static_cast<size_t>(per_unit), i % static_cast<size_t>(per_unit), i < cpu.size() ? cpu[i] : 0u,
                  gpu[i]);
    }
  }
  std::printf("%s: %zu words, %d differ\n", what, gpu.size(), bad);
  return bad + (cpu.size() != gpu.size());
}

}  // namespace fa::probe
