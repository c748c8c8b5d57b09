/**
 * \file mma.cuh
 * \brief The tensor-core instructions of stage 06, each a few lines of inline PTX:
 *        `ldmatrix` (shared memory to fragments) and `mma.sync.m16n8k16` (D = A·B + C).
 *
 * A warp computes a 16×8 tile of D = A·B + C with A 16×16 and B 16×8, each lane holding
 * a fixed piece of each matrix (g = lane / 4, t = lane % 4; A row-major, B as k × n):
 *
 *              A (16×16, four registers a0..a3,            B (16×8, two registers
 *                 each two 16-bit values)                     b0, b1)
 *              cols 0..7        cols 8..15                    n = 0 .. 7
 *            +----------------+----------------+            +------------------+
 *  rows 0..7 | a0: (g, 2t..+1)| a2: (g, 2t+8..)|  k = 0..7  | b0: (k=2t..+1, g)|
 *            +----------------+----------------+            +------------------+
 *  rows 8..15| a1: (g+8, 2t..)| a3: (g+8,2t+8..)|  k = 8..15 | b1: (k=2t+8.., g)|
 *            +----------------+----------------+            +------------------+
 *
 *              C and D (16×8 fp32, four floats c0..c3)
 *            +---------------------------------+
 *  rows 0..7 | c0, c1: (g, 2t), (g, 2t+1)      |
 *  rows 8..15| c2, c3: (g+8, 2t), (g+8, 2t+1)  |
 *            +---------------------------------+
 *
 * The drawing names registers. Each register holds two neighbouring columns (of A, C) or
 * rows (k, of B), the lower one in its low 16 bits; the ISA numbers those 16-bit elements
 * a0..a7 and b0..b3, two per register, in register order.
 *
 * So lane t of a quad (the four lanes with the same g) holds columns 2t, 2t+1 of rows g
 * and g+8 of C: a row of the score tile lives in one quad, which is why a row max needs
 * only two shuffles. And C's layout is A's layout, column pair for column pair: two
 * neighbouring 16×8 C tiles, rounded to 16 bits, are exactly the A fragment of the next
 * product. That is how P goes from Q·Kᵀ into P·V without leaving registers.
 *
 * `ldmatrix.x4` loads four 8×8 matrices of 16-bit elements: lane 8·i + r gives the
 * address of row r of matrix i (one 16-byte row), and register i of lane L receives
 * row L/4, columns 2·(L%4) and 2·(L%4)+1 of matrix i: exactly an A or B register. With
 * `.trans` lane L receives column L/4, rows 2·(L%4) and 2·(L%4)+1: the transpose, for an
 * operand stored the other way round in shared memory (V, whose rows are keys = k).
 *
 * On the CPU backend each instruction is a warp collective that implements these layouts
 * (common/cpu_backend/include/fa_cpu/warp_matrix.h); a GPU test proves it against the
 * hardware.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/dtype.h"
#include "common/errors.h"

namespace fa::tc {

/// Four 8×8 matrices from shared memory; `row` is this lane's row address (16-byte aligned).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::ldmatrix(4, false, row, r, __FILE__, __LINE__);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));  // a shared-window address
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

/// The same, each matrix transposed on the way (for an operand stored k-major).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#ifdef FA_CPU_KERNEL
  ::fa_cpu::ldmatrix(4, true, row, r, __FILE__, __LINE__);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

/// d = A·B + d for one 16×8×16 tile; T is __half or __nv_bfloat16, accumulation in fp32.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value, "fp16 or bf16");
#ifdef FA_CPU_KERNEL
  const uint32_t b[2] = {b0, b1};
  const auto type = std::is_same<T, __half>::value ? ::fa_cpu::MmaType::F16 : ::fa_cpu::MmaType::BF16;
  ::fa_cpu::mma_m16n8k16(type, d, a, b, d, __FILE__, __LINE__);
#else
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

/// Two floats rounded to T (nearest even) in one 32-bit register, `lo` in the low half:
/// one A or B register, or two neighbouring output elements.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 h = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  }
  return u;
}

/// The A fragment of a k-step from the C fragments of two neighbouring n-tiles, `lo`
/// (columns 8k .. 8k+7 of a 16-row block) and `hi` (8k+8 .. 8k+15), rounded to T. A C
/// fragment holds rows g and g + 8, columns 2t and 2t + 1, which is where the A fragment
/// wants them with those columns as k (the drawings above): P = softmax(S) becomes the A
/// operand of P·V in registers, with no trip through shared memory.
template <typename T>
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);  // row g,     k 2t, 2t+1
  a[1] = pack2<T>(lo[2], lo[3]);  // row g + 8, k 2t, 2t+1
  a[2] = pack2<T>(hi[0], hi[1]);  // row g,     k 2t+8, 2t+9
  a[3] = pack2<T>(hi[2], hi[3]);  // row g + 8, k 2t+8, 2t+9
}

/// Max over the quad of lanes that holds one row of a C fragment (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
/// Sum over the quad of lanes that holds one row of a C fragment.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// A 4 × 4 transpose across the quad of lanes that holds one row of a C fragment: on entry
/// lane t's w[k] is its word (two 16-bit values, columns 2t and 2t + 1) of 8-column group k;
/// on exit lane t's w[k] is lane k's word of group t. Lane t then holds group t's 8 columns,
/// 16 contiguous bytes of the row, in order: one 16-byte store instead of four 4-byte ones.
/// Two butterfly steps (partner t ^ 2, then t ^ 1), each sending the two words the partner
/// needs and keeping the two it needs itself: four shuffles and twelve selects. Every lane
/// of the warp must call it (the shuffles name them all).
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int t) {
  const bool hi = (t & 2) != 0;  // step 1: lanes 0, 1 swap groups 2, 3 with lanes 2, 3's 0, 1
#pragma unroll
  for (int k0 = 0; k0 < 2; ++k0) {
    const uint32_t got = __shfl_xor_sync(0xffffffffu, hi ? w[k0] : w[2 + k0], 2);
    w[k0] = hi ? got : w[k0];
    w[2 + k0] = hi ? w[2 + k0] : got;
  }
  const bool odd = (t & 1) != 0;  // step 2: the same within each pair of groups, partner t ^ 1
#pragma unroll
  for (int k1 = 0; k1 < 2; ++k1) {
    const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? w[2 * k1] : w[2 * k1 + 1], 1);
    w[2 * k1] = odd ? got : w[2 * k1];
    w[2 * k1 + 1] = odd ? w[2 * k1 + 1] : got;
  }
}

/// Whether store_c_row may take its 16-byte path for the rows of a tensor starting at `base`:
/// where a stage's tuning asks for it at this head dim (`tuned`), and `base` is on 16 bytes.
/// A tensor whose strides are whole 16 bytes (require_copyable) then has every row aligned,
/// and the answer is the same for every lane, as store_c_row needs.
__device__ __forceinline__ bool store_c_wide(bool tuned, const void* base) {
  return tuned && reinterpret_cast<uintptr_t>(base) % 16 == 0;
}

/// One row of an output tile held as C fragments (wgmma's accumulator has the same layout):
/// this thread's values of the row, columns 8n + 2t and 8n + 2t + 1 in c[4n + 2r] and
/// c[4n + 2r + 1] for n < D/8, times `inv` and rounded to T, written at `row` if `store`.
/// `wide`: 16 bytes a store after quad_transpose (`row` 16-byte aligned), a quarter of the
/// store instructions; else 4 bytes a store. Every lane of the warp must call it with the same
/// `wide` (the transpose's shuffles); `store` may differ from quad to quad.
template <typename T, int D>
__device__ __forceinline__ void store_c_row(T* row, const float (&c)[D / 2], int r, float inv, int t, bool wide,
                                            bool store) {
  uint32_t w[D / 8];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) w[n] = pack2<T>(c[4 * n + 2 * r] * inv, c[4 * n + 2 * r + 1] * inv);
  if (wide) {
#pragma unroll
    for (int a = 0; a < D / 32; ++a) {
      uint32_t q[4] = {w[4 * a], w[4 * a + 1], w[4 * a + 2], w[4 * a + 3]};
      quad_transpose(q, t);
      if (store) *reinterpret_cast<uint4*>(row + 8 * (4 * a + t)) = make_uint4(q[0], q[1], q[2], q[3]);
    }
  } else if (store) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) *reinterpret_cast<uint32_t*>(row + 8 * n + 2 * t) = w[n];
  }
}

/// Host side: calls f(T{}) with T the 16-bit type of `dtype`, __half or __nv_bfloat16, so a
/// launcher picks its kernel template; fp32 throws InputError naming `stage`.
template <typename F>
void with_mma_type(DType dtype, const char* stage, F&& f) {
  switch (dtype) {
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    case DType::F32: break;
  }
  throw InputError(std::string(stage) + " runs in fp16 or bf16 (tensor cores), not fp32");
}

}  // namespace fa::tc
