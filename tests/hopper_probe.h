// The Hopper probe's cases, inputs and outputs (see hopper_probe.cu): TMA tile copies and
// wgmma products, run on the GPU and on the CPU backend's emulation.
#pragma once

#include <cstdint>
#include <vector>

namespace fa::probe {

/// One TMA copy: a box of `box_y` rows × `box_x` values of `element_bytes` bytes (16-bit
/// values, or fp32 as stage 13 copies lse and D) at (x, y, z) of a tensor [3][40][tensor_x]
/// with swizzle `swizzle` (CUtensorMapSwizzle's numbering).
struct TmaCase {
  int swizzle, box_x, tensor_x, x, y, z;
  int element_bytes = 2, box_y = 16;
  /// The box's bytes.
  int bytes() const { return box_x * box_y * element_bytes; }
};

/// One 4-D TMA copy, as stages 08 and 12 read [B][H][N][d] views: a box of 16 rows ×
/// `box_x` values at (x, row, head, batch) of the probe's tensor seen as `batches` × `heads`
/// × `rows` × `d` with its heads interleaved in each row (a PyTorch [B, N, H, d] tensor viewed
/// as [B, H, N, d]): strides of H·d values a row, d a head, rows·H·d a batch; with swizzle
/// `swizzle`.
struct Tma4Case {
  int swizzle, box_x, d, heads, rows, batches, x, row, head, batch;
};

/// One wgmma: m64n{n}k16 in fp16 (type 0) or bf16 (1). A from shared memory (K-major,
/// descriptor a_*) or, if `a_regs`, from registers; B through descriptor b_*: MN-major with
/// registers A (as stage 08 uses them), else K-major, or MN-major if `b_mn` (stage 13's dQ).
/// Descriptors share the swizzle `mode`.
struct WgmmaCase {
  int type, n;
  bool a_regs;
  int mode;
  uint32_t a_start, a_lbo, a_sbo;
  uint32_t b_start, b_lbo, b_sbo;
  bool b_mn = false;
  /// Whether B is read MN-major.
  bool b_mn_major() const { return a_regs || b_mn; }
};

/// One stmatrix: `count` (1, 2 or 4) 8×8 matrices, transposed or not, stored from the
/// warp's registers into a poisoned 64-row × 128-byte tile. Each lane names its row as stage
/// 13 does for dS: lane 8·m + j, row j of matrix m, gives query q = 16·kk + 8·(m / 2) + j,
/// 16-byte chunk (2·warp + m % 2) ^ (q % 8) (the 128-byte swizzle).
struct StmatrixCase {
  int count;
  bool trans;
  int kk, warp;
};

constexpr int kImageBytes = 64 * 1024;  ///< the shared-memory image the wgmma probes read
constexpr int kStmatrixTileBytes = 64 * 128;  ///< the tile each stmatrix case stores into

/// The cases, the same on every machine.
std::vector<TmaCase> tma_cases();
std::vector<Tma4Case> tma4_cases();
std::vector<WgmmaCase> wgmma_cases();
std::vector<StmatrixCase> stmatrix_cases();

/// What the probes read; hopper_inputs() draws it from a seed.
struct HopperInputs {
  std::vector<uint16_t> tensor;     ///< 3 × 40 × 64 random 16-bit patterns (a case of width X reads the first 3 × 40 × X)
  std::vector<uint16_t> image[2];   ///< [fp16, bf16]: kImageBytes / 2 values in [-2, 2]
  std::vector<uint32_t> a_regs[2];  ///< [fp16, bf16]: 128 threads × 4 A registers
  std::vector<float> c;             ///< 128 threads × 64 accumulators to start from
  std::vector<uint32_t> st_regs;    ///< 32 lanes × 4 registers of random bits, for stmatrix
};

/// What they produced, case after case.
struct HopperOutputs {
  std::vector<uint32_t> tma;  ///< each case's box as it lies in shared memory
  std::vector<uint32_t> tma4;  ///< the same for each 4-D case
  std::vector<float> wgmma;   ///< each case's 128 threads × n/2 accumulators
  std::vector<uint32_t> parity;  ///< mbarrier.test_wait.parity answers (see hopper_probe.cu)
  std::vector<float> reduce;     ///< a global buffer after two bulk reduce-adds into it
  std::vector<uint32_t> stmatrix;  ///< each stmatrix case's tile as it lies in shared memory
};

HopperInputs hopper_inputs(uint64_t seed);

/// Runs every case (on whichever backend this file was built for).
HopperOutputs run_hopper_probes(const HopperInputs& in);

}  // namespace fa::probe
