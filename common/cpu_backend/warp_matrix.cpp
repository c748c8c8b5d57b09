// CPU backend: ldmatrix, stmatrix and mma.sync as warp collectives (see fa_cpu/warp_matrix.h).
#include "fa_cpu/warp_matrix.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "fa_cpu/scheduler.h"
#include "racecheck.h"

namespace fa_cpu {

namespace {

// One lane's part of an ldmatrix.
struct LdmatrixLane {
  int count;
  bool trans;
  const void* row;
  std::uint32_t regs[4];
};

// The 16-bit element at (row r, column c) of matrix i, from the row addresses lanes gave.
std::uint16_t element(void* const lanes[32], int i, int r, int c) {
  const auto* lane = static_cast<const LdmatrixLane*>(lanes[8 * i + r]);
  std::uint16_t x;
  std::memcpy(&x, static_cast<const unsigned char*>(lane->row) + 2 * c, 2);
  return x;
}

// What ldmatrix and stmatrix require of the warp: every lane there, agreeing on .x and .trans,
// and the lanes that name rows naming 16-byte aligned ones.
template <typename Lane>
void check_matrix_lanes(void* const lanes[32], const char* what) {
  const auto* first = static_cast<const Lane*>(lanes[0]);
  if (!first) throw std::runtime_error(std::string(what) + ": lane 0 is not in the warp's mask");
  const int count = first->count;
  for (int l = 0; l < 32; ++l) {
    const auto* lane = static_cast<const Lane*>(lanes[l]);
    if (!lane) throw std::runtime_error(std::string(what) + " is .sync.aligned: all 32 lanes must execute it");
    if (lane->count != count || lane->trans != first->trans) {
      throw std::runtime_error(std::string(what) + ": lanes disagree on .x" + std::to_string(count) + " / .trans");
    }
    if (l < 8 * count && reinterpret_cast<std::uintptr_t>(lane->row) % 16 != 0) {
      throw std::runtime_error(std::string(what) + ": lane " + std::to_string(l) +
                               "'s row address is not 16-byte aligned (the PTX ISA requires it)");
    }
  }
}

void ldmatrix_op(void* const lanes[32]) {
  check_matrix_lanes<LdmatrixLane>(lanes, "ldmatrix");
  const auto* first = static_cast<const LdmatrixLane*>(lanes[0]);
  const int count = first->count;
  for (int l = 0; l < 32; ++l) {
    auto* lane = static_cast<LdmatrixLane*>(lanes[l]);
    const int q = l / 4, p = 2 * (l % 4);
    for (int i = 0; i < count; ++i) {
      const std::uint16_t lo = first->trans ? element(lanes, i, p, q) : element(lanes, i, q, p);
      const std::uint16_t hi = first->trans ? element(lanes, i, p + 1, q) : element(lanes, i, q, p + 1);
      lane->regs[i] = static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16;
    }
  }
}

// One lane's part of an stmatrix.
struct StmatrixLane {
  int count;
  bool trans;
  void* row;
  std::uint32_t regs[4];
};

// Element (row r, column c) of matrix i goes to byte 2c of the row lane 8i + r named. Lane
// L's register i holds (L/4, 2·(L%4)) in its low half and (L/4, 2·(L%4) + 1) in its high
// half; with .trans those are (2·(L%4), L/4) and (2·(L%4) + 1, L/4).
void stmatrix_op(void* const lanes[32]) {
  check_matrix_lanes<StmatrixLane>(lanes, "stmatrix");
  const auto* first = static_cast<const StmatrixLane*>(lanes[0]);
  for (int l = 0; l < 32; ++l) {
    const auto* lane = static_cast<const StmatrixLane*>(lanes[l]);
    const int q = l / 4, p = 2 * (l % 4);
    for (int i = 0; i < first->count; ++i) {
      for (int half = 0; half < 2; ++half) {
        const int r = first->trans ? p + half : q, c = first->trans ? q : p + half;
        const auto x = static_cast<std::uint16_t>(lane->regs[i] >> (16 * half));
        auto* row = static_cast<StmatrixLane*>(lanes[8 * i + r])->row;
        std::memcpy(static_cast<unsigned char*>(row) + 2 * c, &x, 2);
      }
    }
  }
}

// One lane's part of an mma.
struct MmaLane {
  MmaType type;
  std::uint32_t a[4], b[2];
  float c[4], d[4];
};

// mma_op and unpack touch only the lanes' operand records and locals, never kernel memory,
// and run for every mma.sync: AddressSanitizer builds leave them uninstrumented.
__attribute__((no_sanitize_address)) float unpack(MmaType t, std::uint32_t reg, int half) {
  const auto bits = static_cast<std::uint16_t>(half ? reg >> 16 : reg & 0xFFFFu);
  return t == MmaType::BF16 ? fa::bf16_bits_to_float(bits) : fa::half_bits_to_float(bits);
}

__attribute__((no_sanitize_address)) void mma_op(void* const lanes[32]) {
  for (int l = 0; l < 32; ++l) {
    if (!lanes[l]) throw std::runtime_error("mma.sync is .sync.aligned: all 32 lanes must execute it");
  }
  const MmaType type = static_cast<const MmaLane*>(lanes[0])->type;
  float A[16][16], B[16][8], C[16][8];
  // Gather: every lane's registers into their places in A, B and C.
  for (int l = 0; l < 32; ++l) {
    const auto* lane = static_cast<const MmaLane*>(lanes[l]);
    if (lane->type != type) throw std::runtime_error("mma.sync: lanes disagree on the operand type");
    const int g = l / 4, t = l % 4;
    for (int r = 0; r < 4; ++r) {  // a0..a7 in registers a[0..3]: rows g, g+8; columns 2t, 2t+8
      const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
      A[row][col] = unpack(type, lane->a[r], 0);
      A[row][col + 1] = unpack(type, lane->a[r], 1);
    }
    for (int r = 0; r < 2; ++r) {  // b0..b3 in registers b[0..1]: rows (k) 2t, 2t+8; column (n) g
      B[2 * t + 8 * r][g] = unpack(type, lane->b[r], 0);
      B[2 * t + 8 * r + 1][g] = unpack(type, lane->b[r], 1);
    }
    for (int e = 0; e < 4; ++e) C[g + 8 * (e / 2)][2 * t + e % 2] = lane->c[e];
  }
  // Compute D = A·B + C. Products of 16-bit values are exact in fp32; each sum is taken in
  // double, C first and then its 16 products in order of k, and rounded once. (k is the outer
  // loop so that the 128 sums advance side by side: the order within each is the same.)
  double D[16][8];
  for (int row = 0; row < 16; ++row) {
    for (int col = 0; col < 8; ++col) D[row][col] = C[row][col];
  }
  for (int k = 0; k < 16; ++k) {
    for (int row = 0; row < 16; ++row) {
      const double a = A[row][k];
      for (int col = 0; col < 8; ++col) D[row][col] += a * static_cast<double>(B[k][col]);
    }
  }
  // Scatter D by C's layout.
  for (int l = 0; l < 32; ++l) {
    auto* lane = static_cast<MmaLane*>(lanes[l]);
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) lane->d[e] = static_cast<float>(D[g + 8 * (e / 2)][2 * t + e % 2]);
  }
}

}  // namespace

void ldmatrix(int count, bool trans, const void* row, std::uint32_t* regs, const char* file, int line) {
  if (count != 1 && count != 2 && count != 4) throw std::runtime_error("ldmatrix: .x1, .x2 or .x4 only");
  // The row this lane names is read by the instruction: tell the race detector, as the
  // compiler's instrumentation does for ordinary loads in kernel code.
  if (current_thread() % 32 < 8 * count) race::access(row, 16, false, __builtin_return_address(0));
  LdmatrixLane lane{count, trans, row, {0, 0, 0, 0}};
  warp_matrix(ldmatrix_op, trans ? "ldmatrix.trans" : "ldmatrix", 0xffffffffu, &lane, file, line);
  for (int i = 0; i < count; ++i) regs[i] = lane.regs[i];
}

void stmatrix(int count, bool trans, void* row, const std::uint32_t* regs, const char* file, int line) {
  if (count != 1 && count != 2 && count != 4) throw std::runtime_error("stmatrix: .x1, .x2 or .x4 only");
  // The row this lane names is written by the instruction (see ldmatrix).
  if (current_thread() % 32 < 8 * count) race::access(row, 16, true, __builtin_return_address(0));
  StmatrixLane lane{count, trans, row, {0, 0, 0, 0}};
  for (int i = 0; i < count; ++i) lane.regs[i] = regs[i];
  warp_matrix(stmatrix_op, trans ? "stmatrix.trans" : "stmatrix", 0xffffffffu, &lane, file, line);
}

void mma_m16n8k16(MmaType type, float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c,
                  const char* file, int line) {
  MmaLane lane{type, {a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}, {0, 0, 0, 0}};
  warp_matrix(mma_op, "mma.sync", 0xffffffffu, &lane, file, line);
  for (int e = 0; e < 4; ++e) d[e] = lane.d[e];
}

}  // namespace fa_cpu
