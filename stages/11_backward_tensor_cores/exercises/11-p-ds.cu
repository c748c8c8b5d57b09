/**
 * \file tensor_core_backward.cu
 * \brief Stage 11: the backward pass on tensor cores. Stage 10's algorithm, with each of
 *        the five products a tile pair an `mma.sync` on fp16 or bf16 operands.
 *
 * The idea: stage 10 recomputes P from the log-sum-exp and runs five products a tile pair on
 * CUDA cores, in fp32. Here the same five products run on tensor cores, and the layout of
 * mma.sync's fragments decides where each intermediate lives. The trick is to compute the
 * transposes: a warp owns 32 keys of the block's K/V tile (two 16-row m-tiles), and
 *
 *     Sᵀ  = K_j·Q_iᵀ      (32 keys × 32 queries a pass: keys are the rows of its C fragments)
 *     dPᵀ = V_j·dO_iᵀ
 *     Pᵀ  = exp(scale·Sᵀ − lse)        dSᵀ = Pᵀ ∘ (dPᵀ − D)       elementwise, in registers
 *     dV_j += Pᵀ·dO_i                  Pᵀ is already the A operand: C fragments reused as A
 *     dK_j += dSᵀ·Q_i                  dSᵀ likewise (times scale once, at the end)
 *     dQ_i += dS·K_j                   dS's rows are queries: the one product that needs
 *                                      dSᵀ through shared memory, read back transposed
 *
 * So P never leaves registers, and dS goes to shared memory once, for dQ. At d = 128, where a
 * warp's dK and dV for 32 keys would take 256 registers a thread, two warps share 32 keys and
 * split d; each computes Pᵀ and dSᵀ for half the queries and passes them to the other
 * through shared memory (SPLIT_D). In full:
 *
 *     kernel 1, d/8 threads a query row, 16 bytes each (a warp a row where O or dO is not
 *               16-byte aligned): D_i = Σ_c dO_ic·O_ic; lse_i·log2(e) and D_i into a
 *               workspace padded to whole Q tiles (padding: lse = +inf, so P = 0); dQacc_i = 0
 *     kernel 2, one block per (K/V tile j of 128 keys, batch·head), 32 keys a warp (a pair of
 *               warps at d = 128):
 *     copy K_j, V_j; copy the first Q tile (Q_i, dO_i, lse_i, D_i) that sees a key of tile j
 *     (d = 128: and the second, in three buffers; wait for the first; barrier)
 *     for each such Q tile i:
 *         d ≤ 64: wait for tile i; barrier; start copying tile i+1 into the other buffer
 *         for each pass of 32 queries (d = 128: the warp's own pass):
 *             Sᵀ, dPᵀ (mma); mask where the tile crosses the diagonal or the end of the keys
 *             Pᵀ = 2^(scale·log2e·Sᵀ − lse·log2e);  dSᵀ = Pᵀ ∘ (dPᵀ − D)
 *             d ≤ 64: dV_j += Pᵀ·dO_i;  dK_j += dSᵀ·Q_i  (mma, A from registers)
 *             dSᵀ → shared memory (d = 128: Pᵀ too; two buffers, tile by tile in turn)
 *         d = 128: wait for tile i+1
 *         barrier (d = 128: the tile's only one)
 *         d = 128: start copying tile i+2 into tile i−1's buffer
 *         d = 128: dV_j += Pᵀ·dO_i;  dK_j += dSᵀ·Q_i  (mma, A by ldmatrix), half of d a warp
 *         dQacc_i += dS·K_j  (mma, A by ldmatrix.trans), fp32 atomics, 2 floats an atomic
 *     write dV_j and scale·dK_j, rounded to fp16/bf16
 *     kernel 3: dQ = scale·dQacc, rounded to fp16/bf16
 *
 * What changed since stage 10: the products are mma.sync (stage 06), tiles are copied by
 * cp.async into swizzled shared memory (stage 07), Q tiles in two or three buffers; the warps
 * split the K/V tile by keys instead of splitting the products into two groups; dQ is added
 * into an fp32 accumulator and rounded by a third kernel, since its atomics cannot add fp16.
 * Cost: workspace of 8 bytes a (padded) query row and dQ in fp32 (4·Nq·d bytes a head).
 * HBM traffic: K, V read and dK, dV written once; Q, dO, lse, D read and dQacc added to once
 * per K/V tile. Parallelism: B·H·⌈Nkv/Bc⌉ blocks.
 *
 * Run: `stage11_backward_tensor_cores --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/errors.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/07_memory_pipeline/cp_async.cuh"
#include "stages/11_backward_tensor_cores/tuning.h"

namespace fa::tc_backward {

using dev::atomic_add_vec;
using dev::fast_exp2;
using pipe::cp_async_16;
using pipe::cp_async_commit;
using pipe::cp_async_wait;
using pipe::swizzle;
using tc::a_from_c;
using tc::ldmatrix_x4;
using tc::ldmatrix_x4_trans;
using tc::mma_m16n8k16;
using tc::pack2;

constexpr float LOG2E = 1.4426950408889634f;  ///< log2(e): exp(x) = 2^(x·log2(e))

/// The main kernel's shape for head dimension D under configuration S (tuning.h; the
/// finished kernel is Config<D, Tuned>).
template <int HD, class S>
struct Config {
  static constexpr int D = HD;  ///< head dimension
  /// Whether two warps share 32 keys, splitting dK_j and dV_j along d, with Pᵀ and dSᵀ
  /// passed through shared memory (at d = 128, where one warp's dK and dV of 32 keys would
  /// take 256 registers a thread), or each warp keeps its keys' Pᵀ and dSᵀ in registers.
  static constexpr bool SPLIT_D = S::split_d > 0 ? S::split_d == 2 : D >= 128;
  /// 16-key m-tiles a warp owns: two, so that every Q and dO fragment a warp reads feeds
  /// twice the products (LOG.md); one in the variant before that step.
  static constexpr int MT = S::key_mtiles > 0 ? S::key_mtiles : (SPLIT_D || D <= 64 ? 2 : 1);
  /// Queries a pass of the tile's elementwise work: Sᵀ and dPᵀ are computed, turned into Pᵀ
  /// and dSᵀ and used for QW queries at a time, so that MT·QW = 64 keeps them at 32
  /// registers each. With SPLIT_D the two warps of a pair take one pass each.
  static constexpr int QW = Br / MT;
  static constexpr int PAIR = SPLIT_D ? 2 : 1;  ///< warps that share a group of 16·MT keys
  static constexpr int DW = D / PAIR;           ///< columns of dK_j and dV_j a warp owns
  /// Keys a block owns, chosen by measurement (LOG.md): 128, 4 warps of 32 keys up to d = 64
  /// and 4 pairs of warps at d = 128 (which share each Q tile's copies).
  static constexpr int Bc = S::bc > 0 ? S::bc : 128;
  static constexpr int WARPS = Bc / (16 * MT) * PAIR;  ///< warps a block
  static_assert(WARPS >= 1 && Bc % (16 * MT) == 0 && Br % (16 * MT) == 0, "whole m-tiles of keys and queries");
  static_assert(Br / QW == PAIR || !SPLIT_D, "with SPLIT_D each warp of a pair takes one pass");
  static constexpr int THREADS = 32 * WARPS;  ///< threads a block
  /// dQ_i (Br × D) split among the warps: each owns DQ_MT m-tiles of 16 queries and a range
  /// of DQ_COLS columns, computed DQ_CHUNK columns at a time so that its accumulators stay
  /// small beside dK's and dV's. Two m-tiles, where the columns allow, so that each K
  /// fragment read feeds two mma (LOG.md).
  static constexpr int DQ_MT = S::dq_mtiles > 0 ? S::dq_mtiles : (D * (Br / 32) / WARPS >= 16 ? 2 : 1);
  static constexpr int DQ_GROUPS = Br / (16 * DQ_MT);          ///< groups of DQ_MT m-tiles
  static constexpr int DQ_COLS = D / (WARPS / DQ_GROUPS);      ///< columns of dQ a warp owns
  static constexpr int DQ_CHUNK = DQ_COLS < 64 ? DQ_COLS : 64;  ///< columns of dQ a warp computes at once
  static_assert(WARPS % DQ_GROUPS == 0 && DQ_COLS % 16 == 0, "the warps split dQ into whole fragments");
  /// Blocks a multiprocessor should hold (__launch_bounds__): dK and dV's accumulators take
  /// MT·D registers a thread, Sᵀ and dPᵀ 64 more.
  static constexpr int MIN_BLOCKS = S::min_blocks > 0 ? S::min_blocks : (D <= 64 ? 2 : 1);
  /// Buffers of a Q tile (Q_i, dO_i, lse_i, D_i). Two: the next tile's copies start after
  /// the barrier at the top of a tile, and a second barrier, once dSᵀ is written, makes it
  /// visible. Three (d = 128): the next-but-one tile's copies start after that second
  /// barrier, which then does the first's work too, and dSᵀ (and Pᵀ) get two buffers: one
  /// barrier a tile (LOG.md). At d = 64 a third buffer would leave no room for two blocks a
  /// multiprocessor.
  static constexpr int QBUF = S::q_buffers > 0 ? S::q_buffers : (D >= 128 ? 3 : 2);
  static constexpr int DSBUF = QBUF == 3 ? 2 : 1;  ///< buffers of dSᵀ (and Pᵀ)
  static_assert(QBUF == 2 || QBUF == 3, "two or three Q-tile buffers");
  /// Shared memory: K, V, QBUF buffers of Q and dO, DSBUF of dSᵀ and with SPLIT_D of Pᵀ
  /// (16-bit elements), QBUF of lse and D.
  static constexpr std::size_t SMEM_BYTES =
      static_cast<std::size_t>((2 * Bc + 2 * QBUF * Br) * D + DSBUF * (SPLIT_D ? 2 : 1) * Bc * Br) * 2 +
      static_cast<std::size_t>(2 * QBUF * Br) * 4;
};

/// The value of a 16-bit element as a float.
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
/// The value of a 16-bit element as a float.
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Starts copying ROWS rows of D 16-bit elements, `row_stride` elements apart in global
/// memory, into a swizzled tile, 16 bytes a cp.async; rows at or past `valid` are
/// zero-filled by the copy (valid >= 1).
///
/// Each thread always copies the same chunk c of rows r0, r0 + STEP, r0 + 2·STEP, ... (STEP
/// rows a round of the block's threads). STEP is a multiple of 8 rows, so the swizzle
/// moves by STEP·D elements a round (cp_async.cuh's identity): the addresses are worked out
/// once a call, and each copy adds a constant. (A loop over idx = threadIdx.x + k·THREADS,
/// dividing each idx into row and chunk, cost 34 instructions a copy at d = 128: a fifth of
/// all the kernel executed; LOG.md.) Stage 07's TileCopy is the same idea for rows D apart,
/// with its offsets kept in registers for the whole kernel; here rows are `row_stride` apart
/// and no register is left to keep them (below).
///
/// The thread's index is read by an `asm volatile`, which the compiler may not move: read
/// as threadIdx.x, its row and chunk and the addresses made from them were computed once
/// for the whole kernel and kept in registers across the Q-tile loop, and at 255 registers
/// a thread that spilled (ptxas: 64 bytes at d = 128) and took back most of the gain (LOG.md).
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void copy_tile(T* tile, const T* src, int row_stride, int valid) {
  constexpr int CHUNKS = D / 8;  // 16-byte chunks a row
  constexpr int STEP = THREADS / CHUNKS;  // rows a round of the threads
  static_assert(THREADS % CHUNKS == 0 && STEP % 8 == 0 && ROWS % STEP == 0, "whole rounds of whole swizzle patterns");
  static_assert(ROWS <= 128, "32-bit offsets below");
#ifdef FA_CPU_KERNEL
  const unsigned tid = threadIdx.x;
#else
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
#endif
  const int c = static_cast<int>(tid % CHUNKS), r0 = static_cast<int>(tid / CHUNKS);
  T* const to = tile + swizzle<D>(r0, c);
  // Offsets from src in 32 bits (row_stride < 2^24 and ROWS <= 128: below 2^31), so that each
  // copy's global address is one multiply-add; a row past `valid` reads nothing, from src.
  const int from = r0 * row_stride + 8 * c, step = STEP * row_stride;
#pragma unroll
  for (int k = 0; k < ROWS / STEP; ++k) {
    const bool inside = r0 + k * STEP < valid;
    cp_async_16(to + k * STEP * D, src + (inside ? from + k * step : 0), inside);
  }
}

/// `lane ^ delta` for a lane's swizzled offset whose chunk in its row is below 8 (each of
/// the kernel's ldmatrix lanes): the swizzle's XOR moves only the 8 chunks of a pattern,
/// 64 elements, so past them the XOR is an addition, which ldmatrix takes as a constant.
/// At d = 128 the eight k-steps' addresses take 3 XOR instructions instead of 7 (LOG.md).
__device__ __forceinline__ int xor_in_row(int lane, int delta) { return (lane ^ (delta % 64)) + (delta - delta % 64); }

/// VEC elements of E, read or written in one access where VEC·sizeof(E) ≤ 16 (two accesses of
/// 16 bytes for 8 floats); the pointer must be aligned to the access.
template <typename E, int VEC>
struct alignas(VEC * sizeof(E) < 16 ? VEC * sizeof(E) : 16) Chunk {
  E e[VEC];  ///< the elements, in order
};

/// Kernel 1, for each row of the padded workspace [B·H][Nq_pad]: D_i = Σ_c dO_ic·O_ic and
/// lse_i·log2(e) for the main kernel's copies, +inf and 0 for the padding rows past Nq (so
/// that P = 2^(s − inf) = 0 there); and dQ's accumulator zeroed. A row has LANES =
/// min(32, D/VEC) threads, each taking VEC elements of O and of dO a step (and zeroing VEC
/// floats of dQacc); the row's threads then add their sums. VEC = 8, one 16-byte load and
/// D/8 threads a row, where O and dO start on 16 bytes: near HBM's rate, on the H100 1.7× as
/// fast at d = 64 as VEC = 1, a warp a row and one 2-byte element a lane, which takes O and dO
/// at any offset (LOG.md, "Kernels 1 and 3 in 16-byte accesses").
template <typename T, int D, int VEC>
__global__ void __launch_bounds__(256) prepare_kernel(const T* O, const T* dO, Strides o_strides, Strides do_strides,
                                                      int64_t heads, const float* lse, float* lse2, float* Dvec,
                                                      float* dQacc, int64_t seq_q, int64_t seq_q_pad,
                                                      int64_t padded_rows) {
  constexpr int LANES = D / VEC < 32 ? D / VEC : 32;
  static_assert(32 % LANES == 0 && D % (VEC * LANES) == 0, "whole rows in a warp, whole steps in a row");
  const int part = threadIdx.x % LANES;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (256 / LANES) + threadIdx.x / LANES;
  const bool in_grid = row < padded_rows;
  const int64_t bh = row / seq_q_pad, i = row % seq_q_pad;
  const bool real = in_grid && i < seq_q;  // a row of Q, not padding
  const int64_t src = bh * seq_q + i;
  float sum = 0.0f;
  if (real) {
    const T* o_row = O + o_strides.head_offset(bh, heads) + i * o_strides.row;
    const T* do_row = dO + do_strides.head_offset(bh, heads) + i * do_strides.row;
#pragma unroll
    for (int c = VEC * part; c < D; c += VEC * LANES) {
      const auto o = *reinterpret_cast<const Chunk<T, VEC>*>(o_row + c);
      const auto g = *reinterpret_cast<const Chunk<T, VEC>*>(do_row + c);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += to_float(g.e[e]) * to_float(o.e[e]);
      *reinterpret_cast<Chunk<float, VEC>*>(dQacc + src * D + c) = Chunk<float, VEC>{};
    }
  }
  // Every lane takes part (the mask names the whole warp); the row's LANES lanes add theirs.
#pragma unroll
  for (int off = LANES / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (in_grid && part == 0) {
    lse2[row] = real ? lse[src] * LOG2E : INFINITY;
    Dvec[row] = real ? sum : 0.0f;
  }
}

/// Kernel 2: one block per (K/V tile, batch·head), flattened into blockIdx.x; Q tiles inner.
template <typename T, int D, class S>
__global__ void __launch_bounds__(Config<D, S>::THREADS, Config<D, S>::MIN_BLOCKS)
    dkdv_kernel(const T* Q, const T* K, const T* V, const T* dO, Layout layout, int64_t heads, const float* lse2,
                const float* Dvec, float* dQacc, T* dK, T* dV, int64_t seq_q, int64_t seq_kv, int64_t seq_q_pad,
                float scale, float scale_log2, bool causal) {
  using C = Config<D, S>;
  constexpr int Bc = C::Bc, THREADS = C::THREADS;
  extern __shared__ uint4 smem[];  // 16-byte aligned, as cp.async and ldmatrix need
  T* Ks = reinterpret_cast<T*>(smem);  // [Bc][D]        the K tile, for the whole loop (swizzled, as all tiles)
  T* Vs = Ks + Bc * D;                 // [Bc][D]        the V tile
  constexpr int QBUF = C::QBUF, DSBUF = C::DSBUF;
  T* Qbuf = Vs + Bc * D;               // [QBUF][Br][D]   Q tiles
  T* dObuf = Qbuf + QBUF * Br * D;     // [QBUF][Br][D]   dO tiles
  T* dS_buf = dObuf + QBUF * Br * D;   // [DSBUF][Bc][Br] dSᵀ: rows are keys
  T* P_buf = dS_buf + DSBUF * Bc * Br;  // [DSBUF][Bc][Br] Pᵀ, with SPLIT_D only
  float* lse_buf = reinterpret_cast<float*>(P_buf + (C::SPLIT_D ? DSBUF * Bc * Br : 0));  // [QBUF][Br] lse·log2(e)
  float* D_buf = lse_buf + QBUF * Br;                                                   // [QBUF][Br] D

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment coordinates (mma.cuh)
  const int64_t kv_tiles = (seq_kv + Bc - 1) / Bc;
  const int64_t bh = blockIdx.x / kv_tiles;
  const int64_t j0 = (blockIdx.x % kv_tiles) * Bc;
  const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
  const T* Qh = Q + layout.q.head_offset(bh, heads);
  const T* dOh = dO + layout.d_o.head_offset(bh, heads);
  const int q_row = static_cast<int>(layout.q.row), do_row = static_cast<int>(layout.d_o.row);  // < 2^24 (launch)
  const float* lse_h = lse2 + bh * seq_q_pad;
  const float* D_h = Dvec + bh * seq_q_pad;
  float* dQh = dQacc + bh * seq_q * D;

  // Starts copying Q tile i0 (Q_i, dO_i, and lse_i, D_i from the padded workspace) into buffer b.
  const auto copy_q_tile = [&](int64_t i0, int b) {
    const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
    copy_tile<T, D, Br, THREADS>(Qbuf + b * Br * D, Qh + i0 * q_row, q_row, q_valid);
    copy_tile<T, D, Br, THREADS>(dObuf + b * Br * D, dOh + i0 * do_row, do_row, q_valid);
    static_assert(2 * (Br / 4) <= THREADS, "one copy of lse or D a thread at most");
    if (threadIdx.x < 2 * (Br / 4)) {  // 4 floats a copy
      const int c = static_cast<int>(threadIdx.x);
      const bool is_lse = c < Br / 4;
      const int k = 4 * (is_lse ? c : c - Br / 4);
      cp_async_16((is_lse ? lse_buf : D_buf) + b * Br + k, (is_lse ? lse_h : D_h) + i0 + k, true);
    }
  };

  copy_tile<T, D, Bc, THREADS>(Ks, K + layout.k.head_offset(bh, heads) + j0 * layout.k.row,
                               static_cast<int>(layout.k.row), kv_valid);
  copy_tile<T, D, Bc, THREADS>(Vs, V + layout.v.head_offset(bh, heads) + j0 * layout.v.row,
                               static_cast<int>(layout.v.row), kv_valid);
  // Under the causal mask query i sees key j only if j <= i: the loop starts at the Q tile
  // that holds query j0, the first that sees a key of this tile.
  const int64_t i_start = causal ? (j0 / Br) * Br : 0;
  if (i_start < seq_q) copy_q_tile(i_start, 0);
  cp_async_commit();
  if constexpr (QBUF == 3) {  // and the next tile, in a group of its own
    if (i_start + Br < seq_q) copy_q_tile(i_start + Br, 1);
    cp_async_commit();
    cp_async_wait<1>();  // the first group: K_j, V_j and the first tile
    __syncthreads();
  }

  // ldmatrix row addresses, lane by lane (lane 8·i + r gives row r of matrix i; mma.cuh).
  // Each is swizzled once, here, for the lane's first row and chunk; the identities of
  // cp_async.cuh give the rest: chunk c ^ δ is an XOR of the offset with 8·δ, and 8·m rows
  // further on an addition of 8·m row lengths, which ldmatrix takes as a constant.
  //   A of K or V (rows: the warp's m-tile m of 16 keys), k-step kk of d:
  const int key0 = 16 * C::MT * (warp / C::PAIR);  // the warp's first key in the tile
  const int a_lane = swizzle<D>(key0 + lane % 8 + 8 * (lane / 8 % 2), lane / 16);
  const auto a_at = [&](int m, int kk) { return xor_in_row(a_lane, 16 * kk) + 16 * m * D; };
  //   B of Q or dO for Sᵀ, dPᵀ (n even: queries 8n .. 8n + 15), k-step kk of d:
  const int b_lane = swizzle<D>(lane % 8 + 8 * (lane / 16), lane / 8 % 2);
  const auto b_at = [&](int n, int kk) { return xor_in_row(b_lane, 16 * kk) + 8 * n * D; };
  //   B, transposed, of dO or Q (rows: queries 16kk ..) or of K (rows: keys), columns 8n .. 8n + 15 of d:
  const int t_lane = swizzle<D>(lane % 8 + 8 * (lane / 8 % 2), lane / 16);
  const auto t_at = [&](int kk, int n) { return (t_lane ^ (8 * n)) + 16 * kk * D; };
  //   A, transposed, of dS from dSᵀ (rows: keys 16kk ..), m-tile mq0 + mm of the queries
  //   (mq0 is a multiple of DQ_MT, so its chunk bits and mm's do not overlap: + is ^):
  const int mq0 = warp % C::DQ_GROUPS * C::DQ_MT;
  const int ds_lane = swizzle<Br>(lane % 8 + 8 * (lane / 16), 2 * mq0 + lane / 8 % 2);
  const auto ds_at = [&](int mm, int kk) { return (ds_lane ^ (16 * mm)) + 16 * kk * Br; };
  //   where this lane writes dSᵀ (and Pᵀ): keys key0 + 16m + g (+8), queries 16kk + 2t (+8)
  const int ds_write = swizzle<Br>(key0 + g, 0) + 2 * t;
  // The columns of dQ_i this warp adds to (c0 ..), and where this lane's first element is.
  const int c0 = warp / C::DQ_GROUPS * C::DQ_COLS;
  const int dq_row = 16 * mq0 + g, dq_lane = dq_row * D + c0 + 2 * t;
  //   A of Pᵀ or dSᵀ (rows: the warp's m-tile m of keys), k-step kk of the queries (SPLIT_D):
  const int pa_lane = swizzle<Br>(key0 + lane % 8 + 8 * (lane / 8 % 2), lane / 16);
  const auto pa_at = [&](int m, int kk) { return (pa_lane ^ (16 * kk)) + 16 * m * Br; };

  // This warp's rows of dV_j and dK_j: keys key0 + 16m + g (+8), fp32, columns c_w .. c_w + DW.
  constexpr int MT = C::MT, QW = C::QW, DW = C::DW;
  const int c_w = warp % C::PAIR * DW;
  float dv_acc[MT][DW / 8][4] = {}, dk_acc[MT][DW / 8][4] = {};

  // Stores an A fragment of m-tile m, k-step kk, into a [key][query] tile (dSᵀ or Pᵀ): keys
  // key0 + 16m + g (+8), queries 16kk + 2t (+1), +8.
  const auto store_a = [&](T* tile, const uint32_t(&a)[4], int m, int kk) {
    T* row = tile + 16 * m * Br;
    *reinterpret_cast<uint32_t*>(row + (ds_write ^ (16 * kk))) = a[0];
    *reinterpret_cast<uint32_t*>(row + (ds_write ^ (16 * kk)) + 8 * Br) = a[1];
    *reinterpret_cast<uint32_t*>(row + (ds_write ^ (16 * kk + 8))) = a[2];
    *reinterpret_cast<uint32_t*>(row + (ds_write ^ (16 * kk + 8)) + 8 * Br) = a[3];
  };

  int b = 0, ds = 0;  // the buffers of the current Q tile and of its dSᵀ
  // ---- the only loop: Q tiles ----
  for (int64_t i0 = i_start; i0 < seq_q; i0 += Br, b = b + 1 == QBUF ? 0 : b + 1, ds ^= DSBUF - 1) {
    if constexpr (QBUF == 2) {
      cp_async_wait<0>();  // this thread's copies of tile i (and of K_j, V_j) have landed
      __syncthreads();     // everyone's; and every warp is done with tile i−1, dS included
      if (i0 + Br < seq_q) {  // tile i+1's copies fly while tile i is computed
        copy_q_tile(i0 + Br, b ^ 1);
        cp_async_commit();
      }
    }  // QBUF == 3: tile i landed, and was made visible, before tile i−1's barrier (below)
    const T* Qs = Qbuf + b * Br * D;
    const T* dOs = dObuf + b * Br * D;
    const float* lse_s = lse_buf + b * Br;
    const float* D_s = D_buf + b * Br;
    T* const dSs = dS_buf + ds * Bc * Br;
    T* const Ps = P_buf + ds * Bc * Br;
    // dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i for k-step kk (16 queries) and this warp's DW
    // columns, from the A fragments of its m-tiles: each B fragment of dO or Q feeds MT mma.
    const auto add_dv_dk = [&](const uint32_t(&ap)[MT][4], const uint32_t(&ads)[MT][4], int kk) {
#pragma unroll
      for (int n = 0; n < DW / 8; n += 2) {
        uint32_t bo[4], bq[4];
        ldmatrix_x4_trans(bo, dOs + t_at(kk, c_w / 8 + n));
        ldmatrix_x4_trans(bq, Qs + t_at(kk, c_w / 8 + n));
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_m16n8k16<T>(dv_acc[m][n], ap[m], bo[0], bo[1]);
          mma_m16n8k16<T>(dv_acc[m][n + 1], ap[m], bo[2], bo[3]);
          mma_m16n8k16<T>(dk_acc[m][n], ads[m], bq[0], bq[1]);
          mma_m16n8k16<T>(dk_acc[m][n + 1], ads[m], bq[2], bq[3]);
        }
      }
    };

    // Only a tile that crosses the diagonal or the end of the keys is masked; queries past
    // Nq need no mask, their lse is +inf.
    const bool needs_mask = j0 + Bc > seq_kv || (causal && j0 + Bc - 1 > i0);
    // The tile's queries in Br / QW passes of QW: each pass computes its part of Sᵀ and dPᵀ,
    // turns it into Pᵀ and dSᵀ, and adds its terms to dV_j and dK_j.
#pragma unroll 1
    for (int pass = warp % C::PAIR; pass < Br / QW; pass += C::PAIR) {
      const int nq0 = pass * (QW / 8);  // the pass's first n-tile of 8 queries
      // Sᵀ = K_j·Q_iᵀ and dPᵀ = V_j·dO_iᵀ for the warp's MT·16 keys and the pass's QW
      // queries: QW/8 C fragments each, per m-tile. Each B fragment of Q or dO feeds MT mma.
      float s[MT][QW / 8][4] = {}, dp[MT][QW / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ak[MT][4], av[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          ldmatrix_x4(ak[m], Ks + a_at(m, kk));
          ldmatrix_x4(av[m], Vs + a_at(m, kk));
        }
#pragma unroll
        for (int n = 0; n < QW / 8; n += 2) {
          uint32_t bq[4], bo[4];
          ldmatrix_x4(bq, Qs + b_at(nq0 + n, kk));
          ldmatrix_x4(bo, dOs + b_at(nq0 + n, kk));
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma_m16n8k16<T>(s[m][n], ak[m], bq[0], bq[1]);
            mma_m16n8k16<T>(s[m][n + 1], ak[m], bq[2], bq[3]);
            mma_m16n8k16<T>(dp[m][n], av[m], bo[0], bo[1]);
            mma_m16n8k16<T>(dp[m][n + 1], av[m], bo[2], bo[3]);
          }
        }
      }

      // Pᵀ and dSᵀ, elementwise. This lane holds keys key0 + 16m + g and + 8 (e / 2 = 0, 1)
      // and queries 8(nq0 + n) + 2t and + 1 (e % 2).
#pragma unroll
      for (int n = 0; n < QW / 8; ++n) {
        const int q0 = 8 * (nq0 + n) + 2 * t;  // this lane's first query of the n-tile
        const float2 lse_q = *reinterpret_cast<const float2*>(lse_s + q0);
        const float2 D_q = *reinterpret_cast<const float2*>(D_s + q0);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            // TODO(exercise 11-p-ds): element e of the m-tile's n-th C fragment: its key and query, the mask where the tile needs one (keys from kv_valid on; under the causal mask, keys after the query), then Pᵀ = 2^(scale_log2·Sᵀ − lse) into s and dSᵀ = Pᵀ·(dPᵀ − D) into dp, lse and D of the element's own query
            (void)lse_q, (void)D_q, (void)needs_mask;
          }
        }
      }

      // dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i: the C fragments of Pᵀ and dSᵀ, rounded to T, are
      // the A fragments (k = queries), as P was in stage 06's P·V.
#pragma unroll
      for (int kq = 0; kq < QW / 16; ++kq) {
        const int kk = pass * (QW / 16) + kq;  // the k-step's 16 queries in the tile
        uint32_t ap[MT][4], ads[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          a_from_c<T>(ap[m], s[m][2 * kq], s[m][2 * kq + 1]);
          a_from_c<T>(ads[m], dp[m][2 * kq], dp[m][2 * kq + 1]);
        }
        if constexpr (!C::SPLIT_D) add_dv_dk(ap, ads, kk);
        // dSᵀ into shared memory for dQ (and with SPLIT_D Pᵀ and dSᵀ for the pair's dV and dK).
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          store_a(dSs, ads[m], m, kk);
          if constexpr (C::SPLIT_D) store_a(Ps, ap[m], m, kk);
        }
      }
    }
    if constexpr (QBUF == 3) cp_async_wait<0>();  // this thread's copies of tile i+1 have landed
    __syncthreads();  // dSᵀ (and Pᵀ) are in shared memory; QBUF == 3: tile i+1 too, everyone's
    if constexpr (QBUF == 3) {
      // Every warp is past tile i−1 (its dQ included), so its Q buffer takes tile i+2, and
      // tile i+1 writes the other dSᵀ buffer while slower warps still read this one for dQ.
      if (i0 + 2 * Br < seq_q) {
        copy_q_tile(i0 + 2 * Br, b == 0 ? 2 : b - 1);
        cp_async_commit();
      }
    }

    // With SPLIT_D: dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i for the pair's 16·MT keys and this
    // warp's DW columns, all Br queries, the A fragments read back from shared memory.
    if constexpr (C::SPLIT_D) {
#pragma unroll
      for (int kk = 0; kk < Br / 16; ++kk) {
        uint32_t ap[MT][4], ads[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          ldmatrix_x4(ap[m], Ps + pa_at(m, kk));
          ldmatrix_x4(ads[m], dSs + pa_at(m, kk));
        }
        add_dv_dk(ap, ads, kk);
      }
    }

    // dQacc_i += dS·K_j (scale is applied by kernel 3): this warp's DQ_MT m-tiles of 16
    // queries and DQ_COLS columns, DQ_CHUNK at a time; every K/V tile of the head adds to the
    // same rows, from other blocks: fp32 atomics in L2, two neighbouring floats an instruction.
    constexpr int DQ_MT = C::DQ_MT;
    // This lane's first element of dQacc_i: every other it adds to is a constant away.
    float* const dq_tile = dQh + i0 * D + dq_lane;
    const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
#pragma unroll
    for (int off = 0; off < C::DQ_COLS; off += C::DQ_CHUNK) {
      const int chunk = c0 + off;  // the first of the DQ_CHUNK columns computed now
      float dq[DQ_MT][C::DQ_CHUNK / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t a[DQ_MT][4];
#pragma unroll
        for (int mm = 0; mm < DQ_MT; ++mm) ldmatrix_x4_trans(a[mm], dSs + ds_at(mm, kk));
#pragma unroll
        for (int n = 0; n < C::DQ_CHUNK / 8; n += 2) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, Ks + t_at(kk, chunk / 8 + n));
#pragma unroll
          for (int mm = 0; mm < DQ_MT; ++mm) {
            mma_m16n8k16<T>(dq[mm][n], a[mm], bk[0], bk[1]);
            mma_m16n8k16<T>(dq[mm][n + 1], a[mm], bk[2], bk[3]);
          }
        }
      }
      // exercise 11-dq-add: add this warp's dq fragments into dQacc_i, two neighbouring floats an atomic_add_vec<2, true>: dq_tile is this lane's first element (its row dq_row of the tile, its first column c0 + 2t), and rows from q_valid on are past Nq
      //   stub: (void)dq_tile, (void)q_valid;
#pragma unroll
      for (int mm = 0; mm < DQ_MT; ++mm) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool row_inside = dq_row + 16 * mm + 8 * h < q_valid;
#pragma unroll
          for (int n = 0; n < C::DQ_CHUNK / 8; ++n) {
            const float add[2] = {dq[mm][n][2 * h], dq[mm][n][2 * h + 1]};
            if (row_inside) atomic_add_vec<2, true>(dq_tile + (16 * mm + 8 * h) * D + off + 8 * n, add);
          }
        }
      }
      // end exercise 11-dq-add
    }
  }
  cp_async_wait<0>();  // K_j and V_j, when no Q tile sees this tile (causal, Nq < Nkv)

  // The only writes of dV_j and dK_j, rounded to T: rows past Nkv are not written.
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key0 + 16 * m + g + 8 * h;
      if (key >= kv_valid) continue;
      const int64_t at = (bh * seq_kv + j0 + key) * D + c_w + 2 * t;
#pragma unroll
      for (int n = 0; n < DW / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dV + at + 8 * n) = pack2<T>(dv_acc[m][n][2 * h], dv_acc[m][n][2 * h + 1]);
        *reinterpret_cast<uint32_t*>(dK + at + 8 * n) =
            pack2<T>(scale * dk_acc[m][n][2 * h], scale * dk_acc[m][n][2 * h + 1]);
      }
    }
  }
}

/// Kernel 3: dQ = scale·dQacc, rounded to T, VEC elements a thread a step: VEC = 8 (two
/// 16-byte loads, one 16-byte store) where dQ starts on 16 bytes, else VEC = 2. Swizzled
/// (stage 13's layout of dQacc), element (q, c) of a head's dQ is read from column
/// c XOR 8·(q % 8) of dQacc's row q: the 8-column groups of each row of 64 columns stored in
/// another order, which moves a step's VEC columns together.
template <typename T, int VEC, bool SWIZZLED>
__global__ void __launch_bounds__(256)
    convert_dq_kernel(const float* dQacc, T* dQ, int64_t steps, float scale, int dim, int seq_q) {
  static_assert(VEC == 2 || VEC == 8, "whole pairs, within an 8-column group");
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < steps;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t from = k;
    if constexpr (SWIZZLED) {
      const int64_t row = VEC * k / dim;  // the row of all heads' rows; its row in the head: row % seq_q
      from = k ^ (8 / VEC * (row % seq_q % 8));  // 8 columns are 8 / VEC steps
    }
    const auto v = reinterpret_cast<const Chunk<float, VEC>*>(dQacc)[from];
    Chunk<uint32_t, VEC / 2> out;
#pragma unroll
    for (int e = 0; e < VEC / 2; ++e) out.e[e] = pack2<T>(scale * v.e[2 * e], scale * v.e[2 * e + 1]);
    reinterpret_cast<Chunk<uint32_t, VEC / 2>*>(dQ)[k] = out;
  }
}

/// Whether a pointer and a tensor's strides allow 16-byte accesses of 16-bit elements.
static bool wide_ok(const void* ptr, const Strides& s) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
}

void prepare(const AttentionProblem& p, const Tensors& t, const Layout& layout, const Workspace& ws,
             const std::string& stage) {
  const int64_t seq_q_pad = padded_seq_q(p);
  const int64_t padded_rows = p.batch_heads() * seq_q_pad;
  // 16 bytes a thread where O and dO allow it, else one element; a row has min(32, D/VEC)
  // threads, as prepare_kernel counts them.
  const bool wide = wide_ok(t.o, layout.o) && wide_ok(t.d_o, layout.d_o);
  const int64_t rows_a_block = 256 / std::min<int64_t>(32, p.dim / (wide ? 8 : 1));
  const int64_t blocks = (padded_rows + rows_a_block - 1) / rows_a_block;
  if (blocks > 0x7fffffff) {
    throw InputError(stage + ": the grid would exceed 2^31 - 1 blocks; use fewer heads or shorter sequences");
  }
  with_head_dim(p.dim, [&](auto dim) {
    tc::with_mma_type(p.dtype, stage.c_str(), [&](auto type) {
      using T = decltype(type);
      constexpr int D = decltype(dim)::value;
      const auto kernel = wide ? prepare_kernel<T, D, 8> : prepare_kernel<T, D, 1>;
      kernel<<<static_cast<unsigned>(blocks), 256, 0, fa::stream()>>>(
          static_cast<const T*>(t.o), static_cast<const T*>(t.d_o), layout.o, layout.d_o, p.heads, t.lse, ws.lse2,
          ws.Dvec, ws.dQacc, p.seq_q, seq_q_pad, padded_rows);
    });
  });
  FA_CHECK_LAUNCH("prepare_kernel");
}

void finish_dq(const AttentionProblem& p, const Workspace& ws, void* dq, bool swizzled) {
  const bool wide = reinterpret_cast<uintptr_t>(dq) % 16 == 0;  // 16 bytes a store (d is a multiple of 8)
  const int64_t steps = p.q_elems() / (wide ? 8 : 2);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((steps + 255) / 256, 65535));
  tc::with_mma_type(p.dtype, "finish_dq", [&](auto type) {
    using T = decltype(type);
    const auto kernel = wide ? (swizzled ? convert_dq_kernel<T, 8, true> : convert_dq_kernel<T, 8, false>)
                             : (swizzled ? convert_dq_kernel<T, 2, true> : convert_dq_kernel<T, 2, false>);
    kernel<<<blocks, 256, 0, fa::stream()>>>(ws.dQacc, static_cast<T*>(dq), steps, p.scale, static_cast<int>(p.dim),
                                             static_cast<int>(p.seq_q));
  });
  FA_CHECK_LAUNCH("convert_dq_kernel");
}

int64_t padded_seq_q(const AttentionProblem& p) { return (p.seq_q + PAD_ROWS - 1) / PAD_ROWS * PAD_ROWS; }

Workspace split_workspace(const AttentionProblem& p, void* workspace) {
  const int64_t padded = p.batch_heads() * padded_seq_q(p);  // a multiple of PAD_ROWS: each piece stays 16-byte aligned
  float* base = static_cast<float*>(workspace);
  return {base, base + padded, base + 2 * padded};
}

namespace {

template <typename T, int D, class S>
void launch(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout) {
  using C = Config<D, S>;
  require_copyable(p, layout, "stage 11");
  for (const Strides* s : {&layout.q, &layout.k, &layout.v, &layout.d_o}) {  // dkdv_kernel's 32-bit row offsets
    if (s->row >= (int64_t{1} << 24)) {
      throw InputError("stage 11: a row stride of " + std::to_string(s->row) + " elements is beyond this kernel's 2^24");
    }
  }
  const Workspace ws = split_workspace(p, workspace);
  const int64_t seq_q_pad = padded_seq_q(p);
  const int64_t kv_blocks = (p.seq_kv + C::Bc - 1) / C::Bc * p.batch_heads();
  if (kv_blocks > 0x7fffffff) {
    throw InputError("stage 11: the grid would exceed 2^31 - 1 blocks; use fewer heads or shorter sequences");
  }
  // (prepare) and (finish_dq): this file's own, not found again by argument-dependent lookup in
  // a planted copy of it (cmake/FaStage.cmake), whose namespace is another.
  (prepare)(p, t, layout, ws, "stage 11");

  const std::size_t smem = C::SMEM_BYTES;
  FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  dkdv_kernel<T, D, S><<<static_cast<unsigned>(kv_blocks), C::THREADS, smem, fa::stream()>>>(
      static_cast<const T*>(t.q), static_cast<const T*>(t.k), static_cast<const T*>(t.v),
      static_cast<const T*>(t.d_o), layout, p.heads, ws.lse2, ws.Dvec, ws.dQacc, static_cast<T*>(t.dk),
      static_cast<T*>(t.dv), p.seq_q, p.seq_kv, seq_q_pad, p.scale, p.scale * LOG2E, p.causal);
  FA_CHECK_LAUNCH("dkdv_kernel");

  (finish_dq)(p, ws, t.dq, false);  // dQacc in order: stage 11 adds it by atomics
}

/// A variant of tuning.h on the demo's tensors, built for what LOG.md measures: d = 64 and 128.
template <class S>
void run_variant(const AttentionProblem& p, const BackwardTensors& t, void* workspace) {
  if (p.dim != 64 && p.dim != 128) {
    throw InputError(std::string("stage 11's variant ") + S::name + " runs d = 64 and 128 only");
  }
  const Tensors tensors{t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv};
  tc::with_mma_type(p.dtype, "stage 11", [&](auto type) {
    (p.dim == 64 ? launch<decltype(type), 64, S> : launch<decltype(type), 128, S>)(p, tensors, workspace,
                                                                                  Layout::contiguous(p));
  });
}

}  // namespace

namespace {

/// The shared memory a block may have on the current device; 0 where that cannot be asked.
std::size_t block_shared_limit() {
  int device = 0, most = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the launch, if any, reports what is wrong
    return 0;
  }
  return static_cast<std::size_t>(most);
}

/// Whether the finished kernel runs at head dim D here. Its three Q-tile buffers at d = 128
/// take 226 KiB, more than a block may have on some GPUs (the A100: 163 KiB); there the step
/// before, Qbuf2, runs.
template <int D>
bool runs_tuned() {
  const std::size_t most = block_shared_limit();
  return most == 0 || Config<D, Tuned>::SMEM_BYTES <= most;
}

}  // namespace

int key_tile_rows(int64_t d) {
  return with_head_dim(d, [](auto D) { return Config<decltype(D)::value, Tuned>::Bc; });
}

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) {
    constexpr int dd = decltype(D)::value;
    return runs_tuned<dd>() ? Config<dd, Tuned>::SMEM_BYTES : Config<dd, Qbuf2>::SMEM_BYTES;
  });
}

std::size_t workspace_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(2 * p.batch_heads() * padded_seq_q(p) + p.q_elems()) * sizeof(float);
}

double hbm_bytes_model_for(const AttentionProblem& p, int bc) {
  const double e = static_cast<double>(dtype_bytes(p.dtype));
  const double q = static_cast<double>(p.q_elems()), kv = static_cast<double>(p.kv_elems());
  const double rows = static_cast<double>(p.batch_heads() * padded_seq_q(p));
  const double kv_tiles = static_cast<double>((p.seq_kv + bc - 1) / bc);
  const double kernel1 = 2 * q * e + 4 * (static_cast<double>(p.rows()) + 2 * rows + q);  // O, dO, lse in; lse2, D, zeroed dQacc out
  const double once = 2 * kv * e + 2 * kv * e;                       // read K, V; write dK, dV
  const double per_kv_tile = 2 * q * e + 4 * 2 * rows + 4 * 2 * q;  // read Q, dO, lse2, D; read and write dQacc
  const double kernel3 = 4 * q + e * q;                              // dQacc in, dQ out
  return kernel1 + once + kv_tiles * per_kv_tile + kernel3;
}

double hbm_bytes_model(const AttentionProblem& p) { return hbm_bytes_model_for(p, key_tile_rows(p.dim)); }

double flops(const AttentionProblem& p) { return 2.5 * p.flops(); }

namespace {

void run_tuned(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout) {
  with_head_dim(p.dim, [&](auto D) {
    constexpr int d = decltype(D)::value;
    tc::with_mma_type(p.dtype, "stage 11", [&](auto type) {
      using T = decltype(type);
      if (runs_tuned<d>()) {
        launch<T, d, Tuned>(p, t, workspace, layout);
      } else {
        launch<T, d, Qbuf2>(p, t, workspace, layout);
      }
    });
  });
}

}  // namespace

void attention_backward_strided(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout) {
  run_tuned(p, t, workspace, layout);
}

void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace) {
  run_tuned(p, t, workspace, Layout::contiguous(p));
}


}  // namespace fa::tc_backward
