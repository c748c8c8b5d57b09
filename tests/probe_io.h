// What the probe programs (tensor_core_probe_main.cpp, hopper_probe_main.cpp) share: their
// main (run the probes, then write their outputs on the GPU or compare with them on the CPU
// backend), the output files, operands packed two 16-bit values a register, and the
// comparisons of registers that must agree bit for bit or within a tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/demo.h"
#include "common/device.h"
#include "common/dtype.h"
#include "common/errors.h"

namespace fa::probe {

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

/// `x` rounded to type t and packed two values a 32-bit register, the first in the low half.
inline std::vector<uint32_t> pack_pairs(DType t, const std::vector<float>& x) {
  std::vector<uint32_t> regs;
  for (size_t i = 0; i + 1 < x.size(); i += 2) {
    regs.push_back(to_bits16(t, x[i]) | static_cast<uint32_t>(to_bits16(t, x[i + 1])) << 16);
  }
  return regs;
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

/// Counts the values further than `tol` apart (NaN counts), printing the first few as
/// compare_bits() does, and the largest difference.
inline int compare_floats(const char* what, const std::vector<float>& cpu, const std::vector<float>& gpu,
                          int per_unit, const char* unit, double tol) {
  double worst = 0;
  int off = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double diff = i < cpu.size() ? std::fabs(cpu[i] - gpu[i]) : INFINITY;
    worst = std::max(worst, diff);
    if (!(diff <= tol) && ++off <= 5) {
      std::printf("  %s: %s %zu d%zu: CPU backend %.8g, GPU %.8g\n", what, unit, i / static_cast<size_t>(per_unit),
                  i % static_cast<size_t>(per_unit), i < cpu.size() ? cpu[i] : NAN, gpu[i]);
    }
  }
  std::printf("%s: %zu values, max |CPU - GPU| = %.3g (allowed %.0e), %d outside\n", what, gpu.size(), worst, tol, off);
  return off + (cpu.size() != gpu.size());
}

/**
 * The main of a probe program, `--write FILE` (the GPU build) or `--check FILE` (the CPU
 * build). Both run the probes (`run`). --write first removes FILE, so that a failed run
 * never leaves one to compare with; then, unless `unfit(device)` gives a reason to skip,
 * writes the outputs (`write`). --check compares them with FILE (`check` returns the count
 * of mismatches) and says PASSED or FAILED; a missing FILE is a skip, said with `missing`.
 */
template <typename Outputs>
int run_probe_program(int argc, char** argv, const std::function<std::string(const DeviceInfo&)>& unfit,
                      const std::function<Outputs()>& run,
                      const std::function<void(std::ofstream&, const Outputs&)>& write,
                      const std::function<int(std::ifstream&, const Outputs&)>& check, const std::string& missing) {
  return run_guarded(argv[0], [&] {
    if (argc != 3 || (std::strcmp(argv[1], "--write") != 0 && std::strcmp(argv[1], "--check") != 0)) {
      std::cerr << "usage: " << argv[0] << " --write FILE | --check FILE\n";
      return 2;
    }
    const bool writing = std::strcmp(argv[1], "--write") == 0;
    const std::string path = argv[2];
    if (writing) std::remove(path.c_str());
    const DeviceInfo device = require_device();
    if (writing && unfit) {
      const std::string why = unfit(device);
      if (!why.empty()) {
        std::cout << "skipped: " << why << "\n";
        return 0;
      }
    }
    const Outputs out = run();
    if (writing) {
      std::ofstream f(path, std::ios::binary);
      write(f, out);
      if (!f) throw InputError(path + ": write failed");
      std::cout << "probe outputs of " << device.name << " written to " << path << "\n";
      return 0;
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::cout << "skipped: " << path << " is missing: " << missing << "\n";
      return 0;
    }
    const int bad = check(f, out);
    std::cout << (bad == 0 ? "PASSED: the CPU backend matches the GPU" : "FAILED") << "\n";
    return bad == 0 ? 0 : 1;
  });
}

}  // namespace fa::probe
