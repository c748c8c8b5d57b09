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
 *     kernel 1, one warp per query row:   D_i = Σ_c dO_ic·O_ic;  dQ_i = 0
 *     kernel 2, one block per K/V tile j:
 *     load K_j, V_j; dK_j = 0, dV_j = 0        (registers, for the whole loop)
 *     for each Q tile i that sees a key of tile j:
 *         load Q_i, dO_i, lse_i, D_i
 *         S     = scale·Q_i·K_jᵀ                  (Br×Bc, on chip)
 *         P     = exp(S − lse_i)                  the forward's probabilities
 *         dP    = dO_i·V_jᵀ
 *         dS    = P ∘ (dP − D_i)
 *         dV_j += Pᵀ·dO_i
 *         dK_j += dSᵀ·Q_i                         (times scale once, at the end)
 *         dQ_i += scale·dS·K_j                    atomically: every K/V tile adds to it
 *     write dK_j, dV_j
 *
 * What changed since stage 05: the outer loop runs over K/V tiles, as in stage 04, because
 * dK_j and dV_j sum over all queries and are then owned by one block, in registers; dQ_i
 * sums over all keys and is the one that is shared, added in fp32 atomics in HBM (as
 * FlashAttention-2 does). The scores are recomputed, never stored: five matrix products a
 * tile pair, against two in the forward pass.
 * Cost: D, one float per query row. HBM traffic: K, V read and dK, dV written once; Q, dO,
 * lse and D read, and dQ added to, once per K/V tile.
 * Parallelism: B·H·⌈Nkv/Bc⌉ blocks.
 *
 * Run: `stage10_backward --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/10_backward/backward_attention.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/head_dim.h"

namespace fa::backward {

// 256 threads see every 64×64 tile (of S, P, dP, dS) as a 16×16 grid of 4×4 blocks, as in
// stage 05: thread (ty, tx) owns rows 4·ty .. 4·ty+3 and the strided columns tx, tx+16,
// tx+32, tx+48. For the products with d columns (dV_j, dK_j and dQ_i) it owns the same 4
// rows (keys for dV and dK, queries for dQ) and VEC adjacent columns of d in each group of
// 16·VEC: columns VEC·tx .. VEC·tx+VEC−1, then 16·VEC further on, and so on.
//
// Every shared-memory read is as wide as the data allows (128 bits for 4 floats): each
// product reads its operands 4 at a time along the sum (S and dP along d, dQ along the keys)
// or across a thread's 4 adjacent rows or columns (dV and dK). A 4×4 block of products then
// costs 8 loads per 4 steps of the sum, where scalar reads cost 32. The bytes read per
// multiply-add stay the same, and shared memory still sets the pace (the README's tuning log).
constexpr int THREADS = 256;      ///< threads per block
constexpr int TX = 16;            ///< threads along a row of a tile
constexpr int ROWS = Br / 16;     ///< rows per thread (4)
constexpr int COLS = Bc / TX;     ///< S columns per thread (4)
static_assert(Br == Bc && ROWS == 4 && COLS == 4, "a thread's rows of S and of dK/dV are both 4·ty .. 4·ty+3");
static_assert(ROWS * 16 == Br && 16 * TX == THREADS, "tile and thread layout must agree");

constexpr float LOG2E = 1.4426950408889634f;  ///< log2(e): exp(x) = 2^(x·log2(e))

/// Shared-memory row strides (floats). +4 keeps rows 16-byte aligned for 128-bit reads and
/// puts the 8 rows that a quarter of a warp reads at once in 8 different groups of 4 banks.
template <int D>
struct Layout {
  static constexpr int DS = D + 4;   ///< row stride of the K, V, Q and dO tiles
  static constexpr int PS = Bc + 4;  ///< row stride of the P and dS tiles
  static constexpr int floats = (Bc + Bc + Br + Br) * DS + 2 * Br * PS + 2 * Br;  ///< the block's shared memory
  static constexpr int VEC = D >= 64 ? 4 : D / 16;  ///< adjacent columns of d a thread owns (1, 2 or 4)
  static constexpr int DCOLS = D / TX;             ///< columns of d a thread owns
  /// The n-th column of d that thread tx owns.
  static __device__ int col(int tx, int n) { return VEC * tx + TX * VEC * (n / VEC) + n % VEC; }
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

/// Copies `rows` rows of D floats (16-byte aligned in global memory) into a tile with row
/// stride `stride`; rows past `valid` are zero-filled, so edge tiles need no special case.
template <int D>
__device__ void load_tile(float* tile, int stride, const float* src, int rows, int valid) {
  for (int idx = threadIdx.x; idx < rows * (D / 4); idx += THREADS) {
    const int r = idx / (D / 4), c = 4 * (idx % (D / 4));
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(r) * D + c);
    *reinterpret_cast<float4*>(tile + r * stride + c) = v;
  }
}

/// This thread's 4×4 block of A·Bᵀ for A and B tiles whose rows hold D values: rows
/// 4·ty + ii of A against rows tx + 16·jj of B, both read 4 values of d at a time.
template <int D>
__device__ void rows_times_rows(float (&acc)[ROWS][COLS], const float* A, const float* B, int ty, int tx) {
  using L = Layout<D>;
  for (int k = 0; k < D; k += 4) {
    float a[ROWS][4], b[COLS][4];
    for (int ii = 0; ii < ROWS; ++ii) load_vec<4>(a[ii], A + (ROWS * ty + ii) * L::DS + k);
    for (int jj = 0; jj < COLS; ++jj) load_vec<4>(b[jj], B + (tx + TX * jj) * L::DS + k);
    for (int kk = 0; kk < 4; ++kk)
      for (int ii = 0; ii < ROWS; ++ii)
        for (int jj = 0; jj < COLS; ++jj) acc[ii][jj] += a[ii][kk] * b[jj][kk];
  }
}

/// Kernel 1: D_i = Σ_c dO_ic·O_ic for every query row, one warp a row; and dQ_i = 0, the
/// starting point of kernel 2's atomic sums.
template <int D>
__global__ void __launch_bounds__(THREADS) compute_D_kernel(const float* O, const float* dO, float* Dvec, float* dQ,
                                                            int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (THREADS / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float sum = 0.0f;
  for (int c = lane; c < D; c += 32) {
    sum += dO[row * D + c] * O[row * D + c];
    dQ[row * D + c] = 0.0f;
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) Dvec[row] = sum;
}

/// Kernel 2: one block per (K/V tile, batch·head), flattened into blockIdx.x; Q tiles inner.
template <int D>
__global__ void __launch_bounds__(THREADS) dkdv_kernel(const float* Q, const float* K, const float* V,
                                                       const float* dO, const float* lse, const float* Dvec,
                                                       float* dQ, float* dK, float* dV, int64_t seq_q,
                                                       int64_t seq_kv, float scale, bool causal) {
  using L = Layout<D>;
  constexpr int VEC = L::VEC, DCOLS = L::DCOLS;
  extern __shared__ __align__(16) float smem[];
  float* Ks = smem;                 // [Bc][DS]  the K tile, for the whole loop
  float* Vs = Ks + Bc * L::DS;      // [Bc][DS]  the V tile, for the whole loop
  float* Qs = Vs + Bc * L::DS;      // [Br][DS]  the current Q tile
  float* dOs = Qs + Br * L::DS;     // [Br][DS]  the current dO tile
  float* Ps = dOs + Br * L::DS;     // [Br][PS]  P, read across rows by dV's product
  float* dSs = Ps + Br * L::PS;     // [Br][PS]  dS, read across rows by dK's and dQ's
  float* lse_s = dSs + Br * L::PS;  // [Br]      the Q tile's lse, in base-2 units
  float* D_s = lse_s + Br;          // [Br]      the Q tile's D

  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t kv_tiles = (seq_kv + Bc - 1) / Bc;
  const int64_t bh = blockIdx.x / kv_tiles;
  const int64_t j0 = (blockIdx.x % kv_tiles) * Bc;
  const float* Qh = Q + bh * seq_q * D;
  const float* dOh = dO + bh * seq_q * D;
  const float* lse_h = lse + bh * seq_q;
  const float* D_h = Dvec + bh * seq_q;
  float* dQh = dQ + bh * seq_q * D;

  const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
  load_tile<D>(Ks, L::DS, K + (bh * seq_kv + j0) * D, Bc, kv_valid);
  load_tile<D>(Vs, L::DS, V + (bh * seq_kv + j0) * D, Bc, kv_valid);

  // This tile's gradients, on chip for the whole loop: key rows 4·ty + kk, columns col(tx, n).
  float dk_acc[ROWS][DCOLS] = {}, dv_acc[ROWS][DCOLS] = {};

  // Under the causal mask query i sees key j only if j <= i: Q tiles wholly above this
  // K/V tile's first key add nothing, so the loop starts at the tile holding query j0.
  const int64_t i_start = causal ? (j0 / Br) * Br : 0;
  for (int64_t i0 = i_start; i0 < seq_q; i0 += Br) {  // ---- the only loop: Q tiles ----
    const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
    load_tile<D>(Qs, L::DS, Qh + i0 * D, Br, q_valid);
    load_tile<D>(dOs, L::DS, dOh + i0 * D, Br, q_valid);
    for (int r = threadIdx.x; r < Br; r += THREADS) {
      lse_s[r] = r < q_valid ? lse_h[i0 + r] * LOG2E : 0.0f;
      D_s[r] = r < q_valid ? D_h[i0 + r] : 0.0f;
    }
    __syncthreads();  // Q_i, dO_i, lse_i, D_i (and on the first pass K_j, V_j) are in shared memory

    // S = Q_i·K_jᵀ and dP = dO_i·V_jᵀ: this thread's 4×4 blocks of both, in registers.
    float s[ROWS][COLS] = {}, dp[ROWS][COLS] = {};
    rows_times_rows<D>(s, Qs, Ks, ty, tx);
    rows_times_rows<D>(dp, dOs, Vs, ty, tx);

    // P = exp(S − lse) = 2^(scale·log2(e)·S − lse·log2(e)), and dS = P ∘ (dP − D). Masked
    // entries (past Nq or Nkv, or above the causal diagonal) have P = 0 and so dS = 0.
    for (int ii = 0; ii < ROWS; ++ii) {
      const int r = ROWS * ty + ii;
      const int64_t row = i0 + r;
      for (int jj = 0; jj < COLS; ++jj) {
        const int c = tx + TX * jj;
        const int64_t col = j0 + c;
        const bool masked = row >= seq_q || col >= seq_kv || (causal && col > row);
        const float p = masked ? 0.0f : exp2f(s[ii][jj] * (scale * LOG2E) - lse_s[r]);
        Ps[r * L::PS + c] = p;
        dSs[r * L::PS + c] = p * (dp[ii][jj] - D_s[r]);
      }
    }
    __syncthreads();  // the next products read P and dS across rows other warps wrote

    // dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i: this thread's key rows 4·ty .. 4·ty+3 are 4
    // adjacent columns of P and dS (one 128-bit read each); its columns of d, VEC at a time.
    for (int r = 0; r < Br; ++r) {
      float p[ROWS], ds[ROWS], d_o[DCOLS], q[DCOLS];
      load_vec<ROWS>(p, Ps + r * L::PS + ROWS * ty);
      load_vec<ROWS>(ds, dSs + r * L::PS + ROWS * ty);
      for (int n = 0; n < DCOLS; n += VEC) {
        load_vec<VEC>(d_o + n, dOs + r * L::DS + L::col(tx, n));
        load_vec<VEC>(q + n, Qs + r * L::DS + L::col(tx, n));
      }
      for (int kk = 0; kk < ROWS; ++kk)
        for (int n = 0; n < DCOLS; ++n) {
          dv_acc[kk][n] += p[kk] * d_o[n];
          dk_acc[kk][n] += ds[kk] * q[n];
        }
    }

    // dQ_i += scale·dS·K_j: this thread's query rows 4·ty + ii, reading dS 4 keys at a time.
    // Every K/V tile of the head adds to the same rows, from other blocks: fp32 atomic adds
    // in HBM (through L2).
    float dq[ROWS][DCOLS] = {};
    for (int c = 0; c < Bc; c += 4) {
      float ds[ROWS][4];
      for (int ii = 0; ii < ROWS; ++ii) load_vec<4>(ds[ii], dSs + (ROWS * ty + ii) * L::PS + c);
      for (int cc = 0; cc < 4; ++cc) {
        float kk[DCOLS];
        for (int n = 0; n < DCOLS; n += VEC) load_vec<VEC>(kk + n, Ks + (c + cc) * L::DS + L::col(tx, n));
        for (int ii = 0; ii < ROWS; ++ii)
          for (int n = 0; n < DCOLS; ++n) dq[ii][n] += ds[ii][cc] * kk[n];
      }
    }
    for (int ii = 0; ii < ROWS; ++ii) {
      const int r = ROWS * ty + ii;
      if (r >= q_valid) continue;
      for (int n = 0; n < DCOLS; ++n) atomicAdd(&dQh[(i0 + r) * D + L::col(tx, n)], scale * dq[ii][n]);
    }
    __syncthreads();  // everyone is done with Q_i, dO_i, P and dS before the next tile overwrites them
  }

  // The only writes of dK_j and dV_j: rows past Nkv are not written.
  for (int kk = 0; kk < ROWS; ++kk) {
    const int c = ROWS * ty + kk;
    if (c >= kv_valid) continue;
    float* dk_row = dK + (bh * seq_kv + j0 + c) * D;
    float* dv_row = dV + (bh * seq_kv + j0 + c) * D;
    for (int n = 0; n < DCOLS; ++n) {
      dk_row[L::col(tx, n)] = scale * dk_acc[kk][n];
      dv_row[L::col(tx, n)] = dv_acc[kk][n];
    }
  }
}

namespace {

template <int D>
void launch(const AttentionProblem& p, const Tensors& t, float* Dvec) {
  const int64_t rows = p.rows();
  const int64_t warps_per_block = THREADS / 32;
  const int64_t d_blocks = (rows + warps_per_block - 1) / warps_per_block;
  const int64_t kv_blocks = (p.seq_kv + Bc - 1) / Bc * p.batch_heads();
  if (d_blocks > 0x7fffffff || kv_blocks > 0x7fffffff) {
    throw InputError("stage 10: the grid would exceed 2^31 - 1 blocks; use fewer heads or shorter sequences");
  }
  compute_D_kernel<D><<<static_cast<unsigned>(d_blocks), THREADS>>>(t.o, t.d_o, Dvec, t.dq, rows);
  FA_CHECK_LAUNCH("compute_D_kernel");

  const std::size_t smem = shared_bytes(D);
  // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
  FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  dkdv_kernel<D><<<static_cast<unsigned>(kv_blocks), THREADS, smem>>>(
      t.q, t.k, t.v, t.d_o, t.lse, Dvec, t.dq, t.dk, t.dv, p.seq_q, p.seq_kv, p.scale, p.causal);
  FA_CHECK_LAUNCH("dkdv_kernel");
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return Layout<decltype(D)::value>::floats * sizeof(float); });
}

std::size_t workspace_bytes(const AttentionProblem& p) { return static_cast<std::size_t>(p.rows()) * sizeof(float); }

double hbm_bytes_model(const AttentionProblem& p) {
  const double q = static_cast<double>(p.q_elems()), kv = static_cast<double>(p.kv_elems());
  const double rows = static_cast<double>(p.rows());
  const double kv_tiles = static_cast<double>((p.seq_kv + Bc - 1) / Bc);
  const double kernel1 = 2 * q + rows + q;                 // read O, dO; write D; zero dQ
  const double once = 2 * kv + 2 * kv;                     // read K, V; write dK, dV
  const double per_kv_tile = 2 * q + 2 * rows + 2 * q;     // read Q, dO, lse, D; read and write dQ
  return 4.0 * (kernel1 + once + kv_tiles * per_kv_tile);  // fp32 throughout
}

double flops(const AttentionProblem& p) { return 2.5 * p.flops(); }

void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace) {
  if (p.dtype != DType::F32) {
    throw InputError(std::string("stage 10 runs in fp32 only, not ") + dtype_name(p.dtype));
  }
  with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value>(p, t, static_cast<float*>(workspace)); });
}

}  // namespace fa::backward
