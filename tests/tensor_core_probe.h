// The probe kernels' inputs and outputs (see tensor_core_probe.cu): the tensor-core
// instructions, the 16-bit roundings, and cp.async.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa::probe {

constexpr int kTileRows = 40;  ///< rows of 16 elements in the ldmatrix probe's shared tile

/// Everything the probes read; make_inputs() draws it from a seed.
struct ProbeInputs {
  std::vector<uint16_t> tile;           ///< kTileRows × 16 random 16-bit patterns
  std::vector<int> row_of, col_of;      ///< lane L's ldmatrix row (distinct) and column half
  std::vector<uint32_t> mma_a[2];       ///< [fp16, bf16]: 32 lanes × 4 A registers
  std::vector<uint32_t> mma_b[2];       ///< [fp16, bf16]: 32 lanes × 2 B registers
  std::vector<float> mma_c;             ///< 32 lanes × 4 C values
  std::vector<float> floats;            ///< values to round to fp16 and bf16 (ties, subnormals, overflow)
  std::vector<uint32_t> copy_src;       ///< 64 × 16 random bytes for the cp.async probe
};

/// What they produced.
struct ProbeOutputs {
  std::vector<uint32_t> ldmatrix, ldmatrix_trans;  ///< 32 lanes × 4 registers each
  std::vector<float> mma_d[2];                     ///< [fp16, bf16]: 32 lanes × 4 D values
  std::vector<uint32_t> half2, bf162;              ///< pairs of rounded floats
  std::vector<uint32_t> cp_async;                  ///< what the cp.async probe read back
};

/// The probes' inputs for `seed`, identical on every machine.
ProbeInputs make_inputs(uint64_t seed);

/// Runs every probe kernel once (on whichever backend this file was built for).
ProbeOutputs run_probes(const ProbeInputs& in);

}  // namespace fa::probe
