// The proof that the CPU backend's ldmatrix, mma.sync, 16-bit roundings and cp.async are
// the hardware's: the same probe kernels (tensor_core_probe.cu) on the same inputs, once on
// the GPU and once on the CPU backend. Two programs, because one process cannot hold
// both CUDA runtimes:
//
//   tensor_core_probe --write FILE       (GPU build) runs the probes, writes their outputs
//   tensor_core_probe_cpu --check FILE   (CPU build) runs them too, compares with FILE
//
// ldmatrix and cp.async move bits and the roundings are exact, so those must be identical; mma
// results must agree within fp32 accumulation rounding (the order and rounding of the
// tensor core's internal sums are not specified, so the emulation sums exactly).
#include <cmath>
#include <limits>

#include "common/dtype.h"
#include "common/random.h"
#include "tests/probe_io.h"
#include "tests/tensor_core_probe.h"

namespace fa::probe {

ProbeInputs make_inputs(uint64_t seed) {
  ProbeInputs in;
  const std::vector<float> bits = random_uniform(kTileRows * 16, seed, 1.0f);
  for (float x : bits) in.tile.push_back(static_cast<uint16_t>((x + 1.0f) * 32767.5f));
  // Lane L reads row row_of[L]: a scrambled choice of distinct rows, and a column half.
  const std::vector<float> shuffle = random_uniform(kTileRows, seed + 1, 1.0f);
  std::vector<int> rows(kTileRows);
  for (int i = 0; i < kTileRows; ++i) rows[i] = i;
  for (int i = kTileRows - 1; i > 0; --i) {
    const int j = static_cast<int>((shuffle[static_cast<size_t>(i)] + 1.0f) * 0.5f * static_cast<float>(i + 1)) % (i + 1);
    std::swap(rows[static_cast<size_t>(i)], rows[static_cast<size_t>(j)]);
  }
  const std::vector<float> halves = random_uniform(32, seed + 2, 1.0f);
  for (int l = 0; l < 32; ++l) {
    in.row_of.push_back(rows[static_cast<size_t>(l)]);
    in.col_of.push_back(halves[static_cast<size_t>(l)] < 0 ? 0 : 1);
  }
  // mma operands: random values in [-2, 2] rounded to fp16 / bf16, packed two per register.
  const DType types[2] = {DType::F16, DType::BF16};
  for (int t = 0; t < 2; ++t) {
    in.mma_a[t] = pack_pairs(types[t], random_uniform(32 * 8, seed + 3 + static_cast<uint64_t>(t), 2.0f));
    in.mma_b[t] = pack_pairs(types[t], random_uniform(32 * 4, seed + 5 + static_cast<uint64_t>(t), 2.0f));
  }
  in.mma_c = random_uniform(32 * 4, seed + 7, 4.0f);
  // Values to round: random ones of every size, and the hard cases.
  for (float x : random_uniform(2000, seed + 8, 1.0f)) in.floats.push_back(std::ldexp(x, static_cast<int>(x * 1000) % 40));
  const float hard[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 6.1035156e-05f /* 2^-14 */,
                        5.9604645e-08f /* 2^-24 */, 2.9802322e-08f /* 2^-25: a tie */, 3.0e-08f, 1.0e-9f,
                        1.00048828125f /* 1 + 2^-11: a tie in fp16 */, 1.00146484375f /* 1 + 3·2^-11 */,
                        1.00390625f /* 1 + 2^-8: a tie in bf16 */, 1.01171875f /* 1 + 3·2^-8 */, 3.4e38f,
                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        1.17549435e-38f, 1e-40f /* an fp32 subnormal */};
  for (float x : hard) {
    in.floats.push_back(x);
    in.floats.push_back(-x);
  }
  for (float x : random_uniform(64 * 4, seed + 9, 1.0f)) in.copy_src.push_back(static_cast<uint32_t>((x + 1.0f) * 2147483647.0f));
  return in;
}

}  // namespace fa::probe

int main(int argc, char** argv) {
  using namespace fa::probe;
  return run_probe_program<ProbeOutputs>(
      argc, argv, nullptr, [] { return run_probes(make_inputs(2026)); },
      [](std::ofstream& f, const ProbeOutputs& out) {
        put(f, out.ldmatrix), put(f, out.ldmatrix_trans), put(f, out.mma_d[0]), put(f, out.mma_d[1]);
        put(f, out.half2), put(f, out.bf162), put(f, out.cp_async);
      },
      [](std::ifstream& f, const ProbeOutputs& out) {
        ProbeOutputs gpu;
        gpu.ldmatrix = get<uint32_t>(f), gpu.ldmatrix_trans = get<uint32_t>(f);
        gpu.mma_d[0] = get<float>(f), gpu.mma_d[1] = get<float>(f);
        gpu.half2 = get<uint32_t>(f), gpu.bf162 = get<uint32_t>(f), gpu.cp_async = get<uint32_t>(f);
        int bad = compare_bits("ldmatrix.x4", out.ldmatrix, gpu.ldmatrix, 4);
        bad += compare_bits("ldmatrix.x4.trans", out.ldmatrix_trans, gpu.ldmatrix_trans, 4);
        bad += compare_bits("fp16 rounding (pairs)", out.half2, gpu.half2, 1);
        bad += compare_bits("bf16 rounding (pairs)", out.bf162, gpu.bf162, 1);
        bad += compare_bits("cp.async groups and zero-fill", out.cp_async, gpu.cp_async, 4);
        // |products| <= 2·2 each, 16 of them, plus |c| <= 4: sums stay below 68, so fp32
        // accumulation rounding is below 16 · 2^-24 · 68 ≈ 7e-5. A layout error is O(1).
        bad += compare_floats("mma.sync fp16", out.mma_d[0], gpu.mma_d[0], 4, "lane", 1e-4);
        bad += compare_floats("mma.sync bf16", out.mma_d[1], gpu.mma_d[1], 4, "lane", 1e-4);
        return bad;
      },
      "no CUDA GPU is available to write it (tensor_core_probe --write)");
}
