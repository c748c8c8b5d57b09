// The proof that the CPU backend's TMA copies and wgmma products are the hardware's: the
// same probe kernels (hopper_probe.cu) on the same inputs, once on a Hopper GPU and once on
// the CPU backend. Two programs, because one process cannot hold both CUDA runtimes:
//
//   hopper_probe --write FILE       (GPU build) runs the probes, writes their outputs
//   hopper_probe_cpu --check FILE   (CPU build) runs them too, compares with FILE
//
// TMA moves bits, so its boxes must be identical, swizzle and zero fill included, and so
// must the mbarrier's answers; wgmma results must agree within fp32 accumulation rounding
// (the emulation sums exactly).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "common/demo.h"
#include "common/device.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "common/random.h"
#include "tests/hopper_probe.h"
#include "tests/probe_io.h"

namespace fa::probe {

HopperInputs hopper_inputs(uint64_t seed) {
  HopperInputs in;
  for (float x : random_uniform(3 * 40 * 64, seed, 1.0f)) in.tensor.push_back(static_cast<uint16_t>((x + 1.0f) * 32767.5f));
  const DType types[2] = {DType::F16, DType::BF16};
  for (int t = 0; t < 2; ++t) {
    for (float x : random_uniform(kImageBytes / 2, seed + 1 + static_cast<uint64_t>(t), 2.0f)) {
      in.image[t].push_back(to_bits16(types[t], x));
    }
    const std::vector<float> a = random_uniform(128 * 8, seed + 3 + static_cast<uint64_t>(t), 2.0f);
    for (size_t i = 0; i < a.size(); i += 2) {
      in.a_regs[t].push_back(to_bits16(types[t], a[i]) | static_cast<uint32_t>(to_bits16(types[t], a[i + 1])) << 16);
    }
  }
  in.c = random_uniform(128 * 64, seed + 5, 4.0f);
  return in;
}

}  // namespace fa::probe

int main(int argc, char** argv) {
  using namespace fa::probe;
  return fa::run_guarded(argv[0], [&] {
    bool write = false;
    std::string path;
    if (!parse_probe_args(argc, argv, &write, &path)) return 2;
    const fa::DeviceInfo device = fa::require_device();
    if (write && (device.cc_major != 9 || device.cc_minor != 0)) {
      std::cout << "skipped: the probes need a Hopper GPU (compute capability 9.0); this is " << device.name << "\n";
      return 0;
    }
    const HopperInputs in = hopper_inputs(2026);
    const HopperOutputs out = run_hopper_probes(in);
    if (write) {
      std::ofstream f(path, std::ios::binary);
      put(f, out.tma), put(f, out.wgmma), put(f, out.parity);
      if (!f) throw fa::InputError(path + ": write failed");
      std::cout << "probe outputs of " << device.name << " written to " << path << "\n";
      return 0;
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      // The GPU probe removes the file first and writes it only when it ran on a Hopper GPU.
      std::cout << "skipped: " << path << " is missing: no Hopper GPU was there to write it (hopper_probe --write)\n";
      return 0;
    }
    HopperOutputs gpu;
    gpu.tma = get<uint32_t>(f), gpu.wgmma = get<float>(f), gpu.parity = get<uint32_t>(f);
    int bad = compare_bits("mbarrier.test_wait.parity 0 and 1, before and after each arrival", out.parity, gpu.parity, 2,
                           "step");
    size_t at = 0;
    for (const TmaCase& t : tma_cases()) {  // each box on its own, so a report names the case
      const size_t words = static_cast<size_t>(t.box_x * 16 * 2 / 4);
      const std::string name = "TMA box " + std::to_string(t.box_x) + "x16 at (" + std::to_string(t.x) + "," +
                               std::to_string(t.y) + "," + std::to_string(t.z) + "), swizzle " + std::to_string(t.swizzle);
      const auto slice = [&](const std::vector<uint32_t>& v) {
        return std::vector<uint32_t>(v.begin() + static_cast<long>(std::min(at, v.size())),
                                     v.begin() + static_cast<long>(std::min(at + words, v.size())));
      };
      bad += compare_bits(name.c_str(), slice(out.tma), slice(gpu.tma), t.box_x / 2, "row");
      at += words;
    }
    bad += gpu.tma.size() != at;
    // |products| <= 2·2 each, 16 of them, plus |c| <= 4: sums stay below 68, so fp32
    // accumulation rounding is below 16 · 2^-24 · 68 ≈ 7e-5. A layout error is O(1).
    const double tol = 1e-4;
    at = 0;
    for (const WgmmaCase& w : wgmma_cases()) {
      const size_t values = static_cast<size_t>(128 * w.n / 2);
      double worst = 0;
      int off = 0;
      for (size_t i = 0; i < values; ++i) {
        const bool have = at + i < gpu.wgmma.size() && at + i < out.wgmma.size();
        const double diff = have ? std::fabs(out.wgmma[at + i] - gpu.wgmma[at + i]) : INFINITY;
        worst = std::max(worst, diff);
        if (!(diff <= tol) && ++off <= 3) {
          std::printf("  thread %zu d%zu: CPU backend %.8g, GPU %.8g\n", i / static_cast<size_t>(w.n / 2),
                      i % static_cast<size_t>(w.n / 2), have ? out.wgmma[at + i] : NAN, have ? gpu.wgmma[at + i] : NAN);
        }
      }
      std::printf("wgmma m64n%dk16 %s, A %s, B %s, swizzle mode %d: max |CPU - GPU| = %.3g, %d outside %.0e\n", w.n,
                  w.type == 0 ? "fp16" : "bf16", w.a_regs ? "registers" : "K-major", w.a_regs ? "MN-major" : "K-major",
                  w.mode, worst, off, tol);
      bad += off;
      at += values;
    }
    bad += gpu.wgmma.size() != at;
    std::cout << (bad == 0 ? "PASSED: the CPU backend matches the GPU" : "FAILED") << "\n";
    return bad == 0 ? 0 : 1;
  });
}
