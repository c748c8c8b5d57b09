/**
 * \file backward_attention.cu
 * \brief Stage 10: the backward pass. dQ, dK and dV from dO, recomputing the
 *        probabilities tile by tile from the forward's log-sum-exp: no N×N matrix stored.
 *
 * The idea: the forward pass (stage 05) kept only O and each row's log-sum-exp
 * lse_i = m_i + log(l_i). That one number per row is enough to rebuild any tile of P
 * exactly, P_ij = exp(S_ij − lse_i), with no running max and no rescaling: the backward
 * pass recomputes S and P where it needs them instead of reading them from HBM. With
 * D_i = rowsum(dO_i ∘ O_i) (the README derives why this is the only row statistic needed):
 *
 *     kernel 1, one warp per query row:   D_i = Σ_c dO_ic·O_ic;  dQ_i = 0;  Q'_i = scale·log2(e)·Q_i
 *     kernel 2, one block per K/V tile j:
 *     load K_j, V_j; dK_j = 0, dV_j = 0        (registers, for the whole loop)
 *     for each Q tile i that sees a key of tile j:
 *         load Q'_i, dO_i, lse_i, D_i
 *         S     = scale·Q_i·K_jᵀ                  (Br×Bc, on chip; from Q', stage 05's S bit for bit)
 *         P     = exp(S − lse_i)                  the forward's probabilities
 *         dP    = dO_i·V_jᵀ
 *         dS    = P ∘ (dP − D_i)
 *         dV_j += Pᵀ·dO_i
 *         dK_j += dSᵀ·Q'_i                        (times scale / (scale·log2 e) once, at the end)
 *         dQ_i += scale·dS·K_j                    atomically: every K/V tile adds to it
 *     write dK_j, dV_j
 *
 * What changed since stage 05: the outer loop runs over K/V tiles, as in stage 04, because
 * dK_j and dV_j sum over all queries and are then owned by one block, in registers; dQ_i
 * sums over all keys and is the one that is shared, added by fp32 atomics in L2 (as
 * FlashAttention-2 does). The scores are recomputed, never stored: five matrix products a
 * tile pair, against two in the forward pass. Inside a block, two warp groups split each
 * tile pair's work between them (below).
 * Cost: D, one float per query row, and Q'. HBM traffic: K, V read and dK, dV written once; Q, dO,
 * lse and D read, and dQ added to, once per K/V tile.
 * Parallelism: B·H·⌈Nkv/Bc⌉ blocks.
 * The main kernel is a template on its configuration (tuning.h): `Tuned` is the finished
 * kernel, and each variant there undoes one step of LOG.md (`--variant NAME`).
 *
 * Run: `stage10_backward --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/10_backward/backward_attention.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/errors.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere
#include "stages/07_memory_pipeline/cp_async.cuh"
#include "stages/10_backward/tuning.h"

namespace fa::backward {

using dev::atomic_add_vec;

// The block's 256 threads are two warp groups of 128 that share the work of each tile pair
// (see the README's tuning log for why): group 0 computes S and P, then dV_j += Pᵀ·dO_i;
// group 1 computes dP and dS, then dK_j += dSᵀ·Q_i; then all 256 threads compute dQ_i. The
// two products of each pair have the same shape, on different tiles, so each pair is one
// code path with the group choosing its operands: no branch inside a warp.
//
// Register blocking, as in an SGEMM: a thread keeps a block of each product in registers,
// and every value it reads from shared memory feeds a whole row or column of its block.
// An R×C block reads R + C floats a step of the sum for R·C multiply-adds: 8×4 reads 1.5
// bytes a multiply-add, 8×8 reads 1, where stage 05's 4×4 reads 2. Shared memory delivers
// about 1 byte per multiply-add the FMA units can do, so larger blocks let the FMA units,
// not shared memory, set the pace.
//
// Thread t of a group is (gy, tx) = (t / 16, t % 16), gy in 0..7:
//   S and dP (64×64):   rows gy + 8·ii (ii < 8), columns tx + 16·jj (jj < 4)     8×4
//   dV or dK (64×D):    keys 4·gy .. 4·gy+3 and 32 + 4·gy .. 32 + 4·gy+3,         8×D/16
//                       columns col(tx, n) of d (n < D/16)
// and for dQ (64×D) all 256 threads are (qy, tx) = (threadIdx.x / 16, tx), qy in 0..15:
//   dQ:                 rows qy + 16·ii (ii < 4), columns col(tx, n)            4×D/16
// A thread's rows are interleaved, so that the two rows a warp touches at once are adjacent
// and fall in different banks; its columns of d are VEC adjacent ones (one 128-bit read
// when VEC = 4) in each group of 16·VEC.
constexpr int THREADS = 256;   ///< threads per block
constexpr int GROUP = 128;     ///< threads per warp group
constexpr int TX = 16;         ///< threads along a row of a tile
constexpr int S_ROWS = 8;      ///< rows of S (or dP) per thread
constexpr int S_COLS = 4;      ///< columns of S (or dP) per thread
constexpr int KEYS = 8;        ///< keys of dV (or dK) per thread
constexpr int Q_ROWS = 4;      ///< query rows of dQ per thread
static_assert(S_ROWS * (GROUP / TX) == Br && S_COLS * TX == Bc,
              "the 8×16 threads of a group cover the 64×64 tile of S");
static_assert(KEYS * (GROUP / TX) == Bc && Q_ROWS * (THREADS / TX) == Br,
              "the keys of dK, dV and rows of dQ are covered");

constexpr float LOG2E = 1.4426950408889634f;  ///< log2(e): exp(x) = 2^(x·log2(e))

/// Shared-memory row strides (floats) and a thread's columns of d.
template <int D>
struct Layout {
  /// Row stride of the K, V, Q and dO tiles: +4 keeps rows 16-byte aligned for 128-bit
  /// reads and puts the 16 rows that a warp's 16 columns of S read in different banks.
  static constexpr int DS = D + 4;
  /// Row stride of the P and dS tiles: +16 puts two adjacent rows half a bank row apart,
  /// so the two rows a warp writes (or reads) at once never share a bank.
  static constexpr int PS = Bc + 16;
  static constexpr int floats = (Bc + Bc + Br + Br) * DS + 2 * Br * PS + 3 * Br;  ///< the block's shared memory
  static constexpr int VEC = D >= 64 ? 4 : D / 16;  ///< adjacent columns of d a thread owns (1, 2 or 4)
  static constexpr int DCOLS = D / TX;             ///< columns of d a thread owns
  /// Blocks a multiprocessor should hold: two at d ≤ 64 (ptxas keeps 128 registers a
  /// thread), one at d = 128, whose shared memory allows no second block anyway.
  static constexpr int MIN_BLOCKS = D <= 64 ? 2 : 1;
  /// Steps of the sum (4 values of d each) unrolled in S = Q·Kᵀ and dP = dO·Vᵀ: two at
  /// d = 128, whose registers let the next step's loads start before this step's
  /// multiply-adds; one at d ≤ 64, where the 128 registers of two blocks a multiprocessor
  /// would spill (the README's tuning log).
  static constexpr int S_UNROLL = D >= 128 ? 2 : 1;
  /// The n-th column of d that thread tx owns.
  static __device__ int col(int tx, int n) { return VEC * tx + TX * VEC * (n / VEC) + n % VEC; }
  /// The kk-th key of dK, dV that thread row gy owns: two runs of 4 adjacent keys.
  static __device__ int key(int gy, int kk) { return 4 * gy + kk % 4 + (Bc / 2) * (kk / 4); }
};

/// `N` (1, 2 or 4) adjacent floats from 16-, 8- or 4-byte aligned memory, in one load.
template <int N>
__device__ void load_vec(float* dst, const float* src) {
  static_assert(N == 1 || N == 2 || N == 4, "a load of 4, 8 or 16 bytes");
  if constexpr (N == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
  } else if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    dst[0] = v.x, dst[1] = v.y;
  } else {
    dst[0] = *src;
  }
}

/// Starts copying `rows` rows of D floats (16-byte aligned in global memory) into a tile
/// with row stride `stride`, 16 bytes a cp.async (stage 07): every copy of the tile is in
/// flight at once, with no registers to stage them. Rows past `valid` are zero-filled, so
/// edge tiles need no special case. The tile is there after cp_async_wait and a barrier.
/// (Variant no_cp_async loads through registers instead, one load's latency after another.)
template <int D, class S>
__device__ void load_tile(float* tile, int stride, const float* src, int rows, int valid) {
  for (int idx = threadIdx.x; idx < rows * (D / 4); idx += THREADS) {
    const int r = idx / (D / 4), c = 4 * (idx % (D / 4));
    const bool inside = r < valid;
    if constexpr (S::cp_async) {
      pipe::cp_async_16(tile + r * stride + c, src + (inside ? static_cast<int64_t>(r) * D + c : 0), inside);
    } else {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (inside) v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(r) * D + c);
      *reinterpret_cast<float4*>(tile + r * stride + c) = v;
    }
  }
}

/// This thread's 8×4 block of A·Bᵀ (S = Q·Kᵀ or dP = dO·Vᵀ), for tiles whose rows hold D
/// values: rows gy + 8·ii of A against rows tx + 16·jj of B, read 4 values of d at a time.
template <int D>
__device__ void rows_times_rows(float (&acc)[S_ROWS][S_COLS], const float* A, const float* B, int gy, int tx) {
  using L = Layout<D>;
#pragma unroll L::S_UNROLL
  for (int k = 0; k < D; k += 4) {
    float b[S_COLS][4];
    for (int jj = 0; jj < S_COLS; ++jj) load_vec<4>(b[jj], B + (tx + TX * jj) * L::DS + k);
    for (int ii = 0; ii < S_ROWS; ++ii) {
      float a[4];
      load_vec<4>(a, A + (gy + 8 * ii) * L::DS + k);
      for (int kk = 0; kk < 4; ++kk)
        for (int jj = 0; jj < S_COLS; ++jj) acc[ii][jj] += a[kk] * b[jj][kk];
    }
  }
}

/// This thread's KEYS×D/16 block of Xᵀ·Y (dV += Pᵀ·dO or dK += dSᵀ·Q), summed over the Br
/// query rows: X is Br×Bc (row stride PS), Y is Br×D (row stride DS). Each step of the sum
/// reads the thread's 8 keys of one row of X (two 128-bit reads) and its columns of Y.
template <int D>
__device__ void cols_times_cols(float (&acc)[KEYS][Layout<D>::DCOLS], const float* X, const float* Y, int gy,
                                int tx) {
  using L = Layout<D>;
  constexpr int VEC = L::VEC, DCOLS = L::DCOLS;
  for (int r = 0; r < Br; ++r) {
    float x[KEYS], y[DCOLS];
    load_vec<4>(x, X + r * L::PS + L::key(gy, 0));
    load_vec<4>(x + 4, X + r * L::PS + L::key(gy, 4));
    for (int n = 0; n < DCOLS; n += VEC) load_vec<VEC>(y + n, Y + r * L::DS + L::col(tx, n));
    for (int kk = 0; kk < KEYS; ++kk)
      for (int n = 0; n < DCOLS; ++n) acc[kk][n] += x[kk] * y[n];
  }
}

/// Kernel 1: D_i = Σ_c dO_ic·O_ic for every query row, one warp a row; dQ_i = 0, the
/// starting point of kernel 2's atomic sums; and Q'_i = Q_i·q_scale, the Q kernel 2 reads.
template <int D>
__global__ void __launch_bounds__(THREADS) compute_D_kernel(const float* O, const float* dO, const float* Q,
                                                            float* Dvec, float* dQ, float* Qp, float q_scale,
                                                            int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (THREADS / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  // exercise 10-row-d: D = rowsum(dO * O) for this warp's row (32 lanes, then shuffles), and this row of dQ set to 0
  float sum = 0.0f;
  for (int c = lane; c < D; c += 32) {
    sum += dO[row * D + c] * O[row * D + c];
    dQ[row * D + c] = 0.0f;
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) Dvec[row] = sum;
  // end exercise 10-row-d
  if (lane == 0) FA_TRACE(keyed("D", {row}, 0, 1, sum));
  // Q' = Q times scale·log2(e), the float stage 05 multiplies its Q tile by, rounded as it
  // rounds it: with the sum in stage 05's order (k = 0, 1, ..., D − 1) kernel 2's S comes out
  // as the forward pass's S, bit for bit, and S − lse leaves only lse's own rounding (the
  // README's section on large logits).
  for (int c = lane; c < D; c += 32) Qp[row * D + c] = Q[row * D + c] * q_scale;
}

/// Kernel 2: one block per (K/V tile, batch·head), flattened into blockIdx.x; Q tiles inner.
/// S is the configuration (tuning.h), Tuned for the finished kernel.
template <int D, class S>
__global__ void __launch_bounds__(THREADS, Layout<D>::MIN_BLOCKS)
    dkdv_kernel(const float* Q, const float* K, const float* V, const float* dO, const float* lse,
                const flash2::RowStats* stats, const float* Dvec, float* dQ, float* dK, float* dV, int64_t seq_q,
                int64_t seq_kv, float scale, float q_scale, bool causal) {
  using L = Layout<D>;
  constexpr int DCOLS = L::DCOLS;
  extern __shared__ __align__(16) float smem[];
  float* Ks = smem;                 // [Bc][DS]  the K tile, for the whole loop
  float* Vs = Ks + Bc * L::DS;      // [Bc][DS]  the V tile, for the whole loop
  float* Qs = Vs + Bc * L::DS;      // [Br][DS]  the current Q' tile (Q·q_scale, from kernel 1)
  float* dOs = Qs + Br * L::DS;     // [Br][DS]  the current dO tile
  float* Ps = dOs + Br * L::DS;     // [Br][PS]  P, written by group 0
  float* dSs = Ps + Br * L::PS;     // [Br][PS]  dS, written by group 1
  float* shift_s = dSs + Br * L::PS;  // [Br]    the Q tile's lse, or its m (with stats)
  float* inv_s = shift_s + Br;        // [Br]    1, or the Q tile's 1/l (with stats)
  float* D_s = inv_s + Br;            // [Br]    the Q tile's D

  const int group = threadIdx.x / GROUP;  // 0: S, P and dV; 1: dP, dS and dK
  const int tx = threadIdx.x % TX, gy = threadIdx.x % GROUP / TX, qy = threadIdx.x / TX;
  const int64_t kv_tiles = (seq_kv + Bc - 1) / Bc;
  const int64_t bh = blockIdx.x / kv_tiles;
  const int64_t j0 = (blockIdx.x % kv_tiles) * Bc;
  const float* Qh = Q + bh * seq_q * D;
  const float* dOh = dO + bh * seq_q * D;
  // P = 2^(fmaf(−shift, shift_units, S))·inv: from lse, 2^(S − lse·log2(e)); from stage 05's
  // statistics, 2^(S − m)/l, whose S − m is rounded at its own size, not at the logits' (S is
  // stage 05's S and m one of its values), and needs no float lse.
  const float shift_units = stats ? 1.0f : LOG2E;
  const float* D_h = Dvec + bh * seq_q;
  float* dQh = dQ + bh * seq_q * D;

  const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
  load_tile<D, S>(Ks, L::DS, K + (bh * seq_kv + j0) * D, Bc, kv_valid);
  load_tile<D, S>(Vs, L::DS, V + (bh * seq_kv + j0) * D, Bc, kv_valid);
  pipe::cp_async_commit();

  // The two products each group runs, as (left, right) operands:
  //   group 0: S = Q_i·K_jᵀ,  dV_j += Pᵀ·dO_i        group 1: dP = dO_i·V_jᵀ,  dK_j += dSᵀ·Q_i
  const float* left = group == 0 ? Qs : dOs;
  const float* right = group == 0 ? Ks : Vs;
  const float* x_tile = group == 0 ? Ps : dSs;
  const float* y_tile = group == 0 ? dOs : Qs;

  // This group's gradient tile, dV_j (group 0) or dK_j (group 1), on chip for the whole loop.
  float grad[KEYS][DCOLS] = {};

  // Starts loading the Q tile at query i0: Q_i and dO_i by cp.async (waited for at the top
  // of its loop pass), lse_i (or m_i and 1/l_i) and D_i by plain loads.
  auto load_q_tile = [&](int64_t i0) {
    const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
    load_tile<D, S>(Qs, L::DS, Qh + i0 * D, Br, q_valid);
    load_tile<D, S>(dOs, L::DS, dOh + i0 * D, Br, q_valid);
    pipe::cp_async_commit();
    for (int r = threadIdx.x; r < Br; r += THREADS) {
      const int64_t row = bh * seq_q + i0 + r;
      shift_s[r] = r >= q_valid ? 0.0f : stats ? stats[row].m : lse[row];
      inv_s[r] = r >= q_valid ? 0.0f : stats ? stats[row].inv_l : 1.0f;
      D_s[r] = r < q_valid ? D_h[i0 + r] : 0.0f;
    }
  };

  // Under the causal mask query i sees key j only if j <= i: Q tiles wholly above this
  // K/V tile's first key add nothing, so the loop starts at the tile holding query j0.
  const int64_t i_start = causal ? (j0 / Br) * Br : 0;
  if (i_start < seq_q) load_q_tile(i_start);
  for (int64_t i0 = i_start; i0 < seq_q; i0 += Br) {  // ---- the only loop: Q tiles ----
    const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
    pipe::cp_async_wait<0>();  // this thread's copies of Q_i and dO_i (and K_j and V_j) have landed
    __syncthreads();           // everyone's: Q_i, dO_i, lse_i, D_i, K_j, V_j are in shared memory

    // Group 0: S = Q'_i·K_jᵀ in base-2 units, then P = exp(S − lse) = 2^(S − lse·log2(e)),
    // the exponent one fused multiply-add: S and lse·log2(e) cancel before it rounds (with
    // stage 05's statistics, 2^(S − m)·(1/l)).
    // Group 1: dP = dO_i·V_jᵀ, kept in registers until P is there. Masked entries (past Nq
    // or Nkv, or above the causal diagonal) get P = 0, and so dS = 0.
    float s[S_ROWS][S_COLS] = {};
    rows_times_rows<D>(s, left, right, gy, tx);
    if (group == 0) {
      for (int ii = 0; ii < S_ROWS; ++ii) {
        const int r = gy + 8 * ii;
        // The last key of the tile that row r sees, as a column of the tile (−1: none).
        // Under the causal mask query i0 + r sees keys up to its own position, column
        // i0 + r − j0 of the tile (never negative: the loop starts at the Q tile of key j0).
        const int64_t own = i0 + r - j0;
        int last = kv_valid - 1;
        if (causal && own < last) last = static_cast<int>(own);
        if (r >= q_valid) last = -1;
        const float shift_r = shift_s[r], inv_r = inv_s[r];
        for (int jj = 0; jj < S_COLS; ++jj) {
          const int c = tx + TX * jj;
          const float e = dev::fast_exp2<S::fast_exp>(fmaf(-shift_r, shift_units, s[ii][jj]));
          Ps[r * L::PS + c] = c <= last ? e * inv_r : 0.0f;
          FA_TRACE(keyed("P", {blockIdx.x, i0, r}, c, Bc, Ps[r * L::PS + c]));  // this tile pair's P, dP and dS
        }
      }
    }
    __syncthreads();  // P is in shared memory

    // Group 1: dS = P ∘ (dP − D), P read where group 0's thread of the same rank wrote it.
    // TODO(exercise 10-ds): group 1: dS = P * (dP - D) into dSs, for this thread's S_ROWS x S_COLS of the tile (dP is in s)
    for (int ii = 0; ii < S_ROWS && group == 1; ++ii) {  // this pair's dP and dS, for See it run
      for (int jj = 0; jj < S_COLS; ++jj) {
        FA_TRACE(keyed("dP", {blockIdx.x, i0, gy + 8 * ii}, tx + TX * jj, Bc, s[ii][jj]));
      }
    }
    __syncthreads();  // dS is in shared memory
    for (int c = threadIdx.x; c < Br * Bc; c += THREADS) {
      FA_TRACE(keyed("dS", {blockIdx.x, i0, c / Bc}, c % Bc, Bc, dSs[c / Bc * L::PS + c % Bc]));
    }

    // dV_j += Pᵀ·dO_i (group 0) or dK_j += dSᵀ·Q'_i (group 1, times scale / q_scale once,
    // at the end, since Q' = q_scale·Q).
    cols_times_cols<D>(grad, x_tile, y_tile, gy, tx);
    for (int kk = 0; kk < KEYS; ++kk) {  // dV_j (group 0) or dK_j (group 1) so far, in their final units
      for (int n = 0; n < DCOLS; ++n) {
        FA_TRACE(keyed(group == 0 ? "dV" : "dK", {blockIdx.x, i0, L::key(gy, kk)}, L::col(tx, n), D,
                       (group == 0 ? 1.0f : scale / q_scale) * grad[kk][n]));
      }
    }
    __syncthreads();  // Q_i, dO_i, lse_i (or m_i, 1/l_i) and D_i are read for the last time: the next tile may load

    // The next Q tile's copies fly while this one's dQ (which reads only dS and K_j) is computed.
    if (S::early_load && i0 + Br < seq_q) load_q_tile(i0 + Br);

    // dQ_i += scale·dS·K_j, all 256 threads: rows qy + 16·ii, dS read 4 keys at a time. Every
    // K/V tile of the head adds to the same rows, from other blocks: fp32 atomic adds in L2,
    // VEC adjacent floats in one instruction.
    float dq[Q_ROWS][DCOLS] = {};
    for (int c = 0; c < Bc; c += 4) {
      float ds[Q_ROWS][4];
      for (int ii = 0; ii < Q_ROWS; ++ii) load_vec<4>(ds[ii], dSs + (qy + 16 * ii) * L::PS + c);
      for (int cc = 0; cc < 4; ++cc) {
        float kk[DCOLS];
        for (int n = 0; n < DCOLS; n += L::VEC) load_vec<L::VEC>(kk + n, Ks + (c + cc) * L::DS + L::col(tx, n));
        for (int ii = 0; ii < Q_ROWS; ++ii)
          for (int n = 0; n < DCOLS; ++n) dq[ii][n] += ds[ii][cc] * kk[n];
      }
    }
    for (int ii = 0; ii < Q_ROWS; ++ii) {
      const int r = qy + 16 * ii;
      if (r >= q_valid) continue;
      for (int n = 0; n < DCOLS; n += L::VEC) {
        float add[L::VEC];
        for (int e = 0; e < L::VEC; ++e) add[e] = scale * dq[ii][n + e];
        for (int e = 0; e < L::VEC; ++e) FA_TRACE(keyed("dQ add", {blockIdx.x, i0, r}, L::col(tx, n) + e, D, add[e]));
        atomic_add_vec<L::VEC, S::vector_atomics>(&dQh[(i0 + r) * D + L::col(tx, n)], add);
      }
    }
    if (!S::early_load && i0 + Br < seq_q) load_q_tile(i0 + Br);
  }

  pipe::cp_async_wait<0>();  // K_j and V_j, when no Q tile sees this tile (causal, Nq < Nkv)

  // The only writes of dV_j (group 0) and dK_j (group 1): rows past Nkv are not written.
  float* out = group == 0 ? dV : dK;
  const float factor = group == 0 ? 1.0f : scale / q_scale;
  for (int kk = 0; kk < KEYS; ++kk) {
    const int c = L::key(gy, kk);
    if (c >= kv_valid) continue;
    float* row = out + (bh * seq_kv + j0 + c) * D;
    for (int n = 0; n < DCOLS; ++n) row[L::col(tx, n)] = factor * grad[kk][n];
  }
}

namespace {

/// Where each piece of the workspace starts: D, then Q' (16-byte aligned).
struct Workspace {
  float* Dvec;  ///< [B·H·Nq]
  float* Qp;    ///< [B·H·Nq][d]  Q·scale·log2(e)
};

/// Floats of D in the workspace: B·H·Nq, rounded up to whole 16 bytes.
int64_t d_floats(const AttentionProblem& p) { return (p.rows() + 3) / 4 * 4; }

template <int D, class S>
void launch(const AttentionProblem& p, const Tensors& t, void* workspace) {
  const Workspace ws{static_cast<float*>(workspace), static_cast<float*>(workspace) + d_floats(p)};
  const float q_scale = p.scale * LOG2E;  // as stage 05 computes it: S in base-2 units
  const int64_t rows = p.rows();
  const int64_t warps_per_block = THREADS / 32;
  const int64_t d_blocks = (rows + warps_per_block - 1) / warps_per_block;
  const int64_t kv_blocks = (p.seq_kv + Bc - 1) / Bc * p.batch_heads();
  if (d_blocks > 0x7fffffff || kv_blocks > 0x7fffffff) {
    throw InputError("stage 10: the grid would exceed 2^31 - 1 blocks; use fewer heads or shorter sequences");
  }
  compute_D_kernel<D><<<static_cast<unsigned>(d_blocks), THREADS, 0, fa::stream()>>>(t.o, t.d_o, t.q, ws.Dvec, t.dq,
                                                                                    ws.Qp, q_scale, rows);
  FA_CHECK_LAUNCH("compute_D_kernel");

  const std::size_t smem = shared_bytes(D);
  // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
  FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  dkdv_kernel<D, S><<<static_cast<unsigned>(kv_blocks), THREADS, smem, fa::stream()>>>(
      ws.Qp, t.k, t.v, t.d_o, t.lse, t.stats, ws.Dvec, t.dq, t.dk, t.dv, p.seq_q, p.seq_kv, p.scale, q_scale,
      p.causal);
  FA_CHECK_LAUNCH("dkdv_kernel");
}

/// Refuses what no stage-10 kernel runs: a dtype other than fp32.
void require_fp32(const AttentionProblem& p) {
  if (p.dtype != DType::F32) {
    throw InputError(std::string("stage 10 runs in fp32 only, not ") + dtype_name(p.dtype));
  }
}

/// A variant of tuning.h, built for what LOG.md measures: d = 64 and 128.
template <class S>
void run_variant(const AttentionProblem& p, const Tensors& t, void* workspace) {
  require_fp32(p);
  if (p.dim != 64 && p.dim != 128) {
    throw InputError(std::string("stage 10's variant ") + S::name + " runs d = 64 and 128 only");
  }
  (p.dim == 64 ? launch<64, S> : launch<128, S>)(p, t, workspace);
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return Layout<decltype(D)::value>::floats * sizeof(float); });
}

std::size_t workspace_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(d_floats(p) + p.q_elems()) * sizeof(float);
}

double hbm_bytes_model(const AttentionProblem& p) {
  const double q = static_cast<double>(p.q_elems()), kv = static_cast<double>(p.kv_elems());
  const double rows = static_cast<double>(p.rows());
  const double kv_tiles = static_cast<double>((p.seq_kv + Bc - 1) / Bc);
  const double kernel1 = 2 * q + rows + q + 2 * q;         // read O, dO; write D; zero dQ; Q in, Q' out
  const double once = 2 * kv + 2 * kv;                     // read K, V; write dK, dV
  const double per_kv_tile = 2 * q + 3 * rows + 2 * q;     // read Q', dO, m and 1/l, D; read and write dQ
  return 4.0 * (kernel1 + once + kv_tiles * per_kv_tile);  // fp32 throughout
}

double flops(const AttentionProblem& p) { return 2.5 * p.flops(); }

void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace) {
  require_fp32(p);
  with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value, Tuned>(p, t, workspace); });
}


}  // namespace fa::backward
