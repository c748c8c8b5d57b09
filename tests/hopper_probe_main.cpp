// The proof that the CPU backend's TMA copies, wgmma products and stmatrix stores are the
// hardware's: the same probe kernels (hopper_probe.cu) on the same inputs, once on a Hopper
// GPU and once on the CPU backend. Two programs, because one process cannot hold both CUDA runtimes:
//
//   hopper_probe --write FILE       (GPU build) runs the probes, writes their outputs
//   hopper_probe_cpu --check FILE   (CPU build) runs them too, compares with FILE
//
// TMA moves bits, so its boxes must be identical, swizzle and zero fill included, and so
// must the mbarrier's answers and the tiles stmatrix stores; wgmma results must agree within fp32 accumulation rounding
// (the emulation sums exactly).
#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "common/dtype.h"
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
    in.a_regs[t] = pack_pairs(types[t], random_uniform(128 * 8, seed + 3 + static_cast<uint64_t>(t), 2.0f));
  }
  in.c = random_uniform(128 * 64, seed + 5, 4.0f);
  for (float x : random_uniform(32 * 4, seed + 6, 1.0f)) in.st_regs.push_back(static_cast<uint32_t>((x + 1.0f) * 2147483647.5f));
  return in;
}

}  // namespace fa::probe

namespace {

// Words [at, at + n) of `all` (fewer where it is short).
template <typename T>
std::vector<T> slice(const std::vector<T>& all, size_t at, size_t n) {
  const size_t from = std::min(at, all.size()), to = std::min(at + n, all.size());
  return std::vector<T>(all.begin() + static_cast<long>(from), all.begin() + static_cast<long>(to));
}

// The GPU's outputs from the file against this run's, case by case, so that a report names the case.
int compare(std::ifstream& f, const fa::probe::HopperOutputs& out) {
  using namespace fa::probe;
  HopperOutputs gpu;
  gpu.tma = get<uint32_t>(f), gpu.wgmma = get<float>(f), gpu.parity = get<uint32_t>(f), gpu.tma4 = get<uint32_t>(f);
  gpu.reduce = get<float>(f), gpu.stmatrix = get<uint32_t>(f);
  int bad = compare_bits("mbarrier.test_wait.parity 0 and 1, before and after each arrival", out.parity, gpu.parity, 2,
                         "step");
  size_t at = 0;
  for (const TmaCase& t : tma_cases()) {
    const size_t words = static_cast<size_t>(t.bytes() / 4);
    const std::string name = "TMA box " + std::to_string(t.box_x) + "x" + std::to_string(t.box_y) + " of " +
                             std::to_string(8 * t.element_bytes) + "-bit values at (" + std::to_string(t.x) + "," +
                             std::to_string(t.y) + "," + std::to_string(t.z) + "), swizzle " + std::to_string(t.swizzle);
    bad += compare_bits(name.c_str(), slice(out.tma, at, words), slice(gpu.tma, at, words),
                        t.box_x * t.element_bytes / 4, "row");
    at += words;
  }
  bad += gpu.tma.size() != at;
  at = 0;
  for (const Tma4Case& t : tma4_cases()) {
    const size_t words = static_cast<size_t>(t.box_x * 16 * 2 / 4);
    const std::string name = "TMA 4-D box " + std::to_string(t.box_x) + "x16 at (" + std::to_string(t.x) + "," +
                             std::to_string(t.row) + "," + std::to_string(t.head) + "," + std::to_string(t.batch) +
                             ") of [" + std::to_string(t.batches) + "][" + std::to_string(t.heads) + "][" +
                             std::to_string(t.rows) + "][" + std::to_string(t.d) + "], heads interleaved, swizzle " +
                             std::to_string(t.swizzle);
    bad += compare_bits(name.c_str(), slice(out.tma4, at, words), slice(gpu.tma4, at, words), t.box_x / 2, "row");
    at += words;
  }
  bad += gpu.tma4.size() != at;
  at = 0;
  for (const StmatrixCase& c : stmatrix_cases()) {
    const size_t words = kStmatrixTileBytes / 4;
    const std::string name = "stmatrix .x" + std::to_string(c.count) + (c.trans ? ".trans" : "") +
                             " into a 128-byte swizzled tile, rows named as stage 13 names them (k-step " +
                             std::to_string(c.kk) + ", warp " + std::to_string(c.warp) + ")";
    bad += compare_bits(name.c_str(), slice(out.stmatrix, at, words), slice(gpu.stmatrix, at, words), 32, "row");
    at += words;
  }
  bad += gpu.stmatrix.size() != at;
  // |products| <= 2·2 each, 16 of them, plus |c| <= 4: sums stay below 68, so fp32
  // accumulation rounding is below 16 · 2^-24 · 68 ≈ 7e-5. A layout error is O(1).
  at = 0;
  for (const WgmmaCase& w : wgmma_cases()) {
    const size_t values = static_cast<size_t>(128 * w.n / 2);
    const std::string name = "wgmma m64n" + std::to_string(w.n) + "k16 " + (w.type == 0 ? "fp16" : "bf16") + ", A " +
                             (w.a_regs ? "registers" : "K-major") + ", B " + (w.b_mn_major() ? "MN-major" : "K-major") +
                             ", swizzle mode " + std::to_string(w.mode);
    bad += compare_floats(name.c_str(), slice(out.wgmma, at, values), slice(gpu.wgmma, at, values), w.n / 2, "thread",
                          1e-4);
    at += values;
  }
  bad += gpu.wgmma.size() != at;
  // Each element is one fp32 addition, rounded the same way on both: the sums must be identical.
  std::vector<uint32_t> mine(out.reduce.size()), theirs(gpu.reduce.size());
  std::memcpy(mine.data(), out.reduce.data(), 4 * mine.size());
  std::memcpy(theirs.data(), gpu.reduce.data(), 4 * theirs.size());
  return bad + compare_bits("cp.reduce.async.bulk .add.f32, two reductions into 4096 floats", mine, theirs, 64,
                            "row of 64");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fa::probe;
  return run_probe_program<HopperOutputs>(
      argc, argv,
      [](const fa::DeviceInfo& device) {
        return device.cc_major == 9 && device.cc_minor == 0
                   ? std::string()
                   : "the probes need a Hopper GPU (compute capability 9.0); this is " + device.name;
      },
      [] { return run_hopper_probes(hopper_inputs(2026)); },
      [](std::ofstream& f, const HopperOutputs& out) {
        put(f, out.tma), put(f, out.wgmma), put(f, out.parity), put(f, out.tma4), put(f, out.reduce), put(f, out.stmatrix);
      },
      compare, "no Hopper GPU was there to write it (hopper_probe --write)");
}
