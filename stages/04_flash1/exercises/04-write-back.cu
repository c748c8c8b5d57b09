/**
 * \file flash1_attention.cu
 * \brief Stage 04: tiled, fused FlashAttention-1, with m, l and the partial O in HBM.
 *
 * The idea: stage 03 streamed keys past one query at a time and shared nothing. Here a
 * block loads a tile of Bc keys and values into shared memory once and uses it for
 * every query tile of its head. S exists only as one Br×Bc tile, on chip. The loop
 * order is Algorithm 1 of the FlashAttention paper:
 *
 *     for each K/V tile j:                       (outer)
 *         load K_j, V_j into shared memory
 *         for each Q tile i:                     (inner)
 *             load Q_i; read m_i, l_i, O_i from HBM
 *             S = scale·Q_i·K_jᵀ                  (Br×Bc, on chip)
 *             m̃ = rowmax(S), P̃ = exp(S − m̃), l̃ = rowsum(P̃)
 *             m_new = max(m_i, m̃)
 *             l_new = exp(m_i − m_new)·l_i + exp(m̃ − m_new)·l̃
 *             O_i   = (l_i·exp(m_i − m_new)·O_i + exp(m̃ − m_new)·P̃·V_j) / l_new
 *             write O_i, m_new, l_new back to HBM
 *
 * What changed since stage 03: tiles in shared memory, reused by Br (or Bc) threads'
 * worth of work; S as a tile; and, because the K/V loop is outside, the running state
 * of every query row must leave the chip after each K/V tile.
 * Cost: workspace of 2·B·H·Nq floats (m, l). HBM traffic: K and V once; Q, O, m, l once
 * per K/V tile. Parallelism: one block per head (B·H blocks).
 *
 * Run: `stage04_flash1 --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/04_flash1/flash1_attention.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere

namespace fa::flash1 {

// 256 threads see a Br×Bc tile of S as a 16×16 grid of 4×4 blocks: thread (ty, tx) owns
// rows 4·ty .. 4·ty+3 and columns tx, tx+16, tx+32, tx+48 (strided, so that the 16
// threads of a row read 16 different shared-memory banks). For O it owns the same 4 rows
// and columns tx, tx+16, ... of the d outputs.
constexpr int THREADS = 256;      ///< threads per block
constexpr int TX = 16;            ///< threads along a row of the tile
constexpr int ROWS = Br / 16;     ///< rows per thread (4)
constexpr int COLS = Bc / TX;     ///< S columns per thread (4)
static_assert(ROWS * 16 * TX == Br * TX && 16 * TX == THREADS, "tile and thread layout must agree");

/// Shared-memory row strides (floats). +1 puts consecutive rows in different banks.
template <int D>
struct Layout {
  static constexpr int QS = D + 1;   ///< Q tile row stride
  static constexpr int KS = D + 1;   ///< K tile row stride
  static constexpr int VS = D;       ///< V tile row stride (read along rows: no padding needed)
  static constexpr int PS = Bc + 1;  ///< P tile row stride
  static constexpr int floats = Br * QS + Bc * KS + Bc * VS + Br * PS;  ///< the block's shared memory
};

/// Copies `rows` rows of D floats (16-byte aligned in global memory) into a tile with row
/// stride `stride`; rows past `valid` are zero-filled, so edge tiles need no special case.
template <int D>
__device__ void load_tile(float* tile, int stride, const float* src, int rows, int valid, float mul) {
  for (int idx = threadIdx.x; idx < rows * (D / 4); idx += THREADS) {
    const int r = idx / (D / 4), c = 4 * (idx % (D / 4));
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(r) * D + c);
    tile[r * stride + c] = v.x * mul;
    tile[r * stride + c + 1] = v.y * mul;
    tile[r * stride + c + 2] = v.z * mul;
    tile[r * stride + c + 3] = v.w * mul;
  }
}

/// Max (or sum) over the 16 threads that share a row: lanes 0-15 and 16-31 of a warp.
__device__ float row_max(float x) {
  for (int off = TX / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
/// See row_max.
__device__ float row_sum(float x) {
  for (int off = TX / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// One block per (batch, head): Algorithm 1, K/V tiles outer, Q tiles inner.
template <int D>
__global__ void __launch_bounds__(THREADS) flash1_kernel(const float* Q, const float* K, const float* V, float* O,
                                                         float* m_hbm, float* l_hbm, int64_t seq_q,
                                                         int64_t seq_kv, float scale, bool causal) {
  using L = Layout<D>;
  extern __shared__ float smem[];
  float* Qs = smem;                 // [Br][QS]  the Q tile, pre-scaled
  float* Ks = Qs + Br * L::QS;      // [Bc][KS]  the K tile
  float* Vs = Ks + Bc * L::KS;      // [Bc][VS]  the V tile
  float* Ps = Vs + Bc * L::VS;      // [Br][PS]  P̃ = exp(S − m̃), shared for the P̃·V product

  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t bh = blockIdx.x;
  const float* Qh = Q + bh * seq_q * D;
  const float* Kh = K + bh * seq_kv * D;
  const float* Vh = V + bh * seq_kv * D;
  float* Oh = O + bh * seq_q * D;
  float* mh = m_hbm + bh * seq_q;
  float* lh = l_hbm + bh * seq_q;

  // Algorithm 1, step 2: O = 0, l = 0, m = −inf in HBM for this head's rows.
  for (int64_t idx = threadIdx.x; idx < seq_q * D; idx += THREADS) Oh[idx] = 0.0f;
  for (int64_t idx = threadIdx.x; idx < seq_q; idx += THREADS) {
    mh[idx] = -INFINITY;
    lh[idx] = 0.0f;
  }
  __syncthreads();  // this block's HBM writes are visible to its threads after the barrier
  FA_TRACE(store("O, m, l", 0, seq_q));

  for (int64_t j0 = 0; j0 < seq_kv; j0 += Bc) {  // ---- outer loop: K/V tiles ----
    const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
    load_tile<D>(Ks, L::KS, Kh + j0 * D, Bc, kv_valid, 1.0f);
    load_tile<D>(Vs, L::VS, Vh + j0 * D, Bc, kv_valid, 1.0f);
    FA_TRACE(load("K, V", j0, kv_valid));

    for (int64_t i0 = 0; i0 < seq_q; i0 += Br) {  // ---- inner loop: Q tiles ----
      if (causal && j0 > i0 + Br - 1) {  // tile entirely above the diagonal: nothing to add
        FA_TRACE(skip(j0, i0));
        continue;
      }
      const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
      load_tile<D>(Qs, L::QS, Qh + i0 * D, Br, q_valid, scale);
      FA_TRACE(load("Q", i0, q_valid));

      // The running statistics of this thread's rows, from HBM (read before anyone writes).
      float m_old[ROWS], l_old[ROWS];
      for (int ii = 0; ii < ROWS; ++ii) {
        const int r = ROWS * ty + ii;
        m_old[ii] = r < q_valid ? mh[i0 + r] : -INFINITY;
        l_old[ii] = r < q_valid ? lh[i0 + r] : 0.0f;
      }
      FA_TRACE(load("m, l", i0, q_valid));
      __syncthreads();  // Q_i (and, on the first pass, K_j, V_j) are in shared memory

      // S = scale·Q_i·K_jᵀ: this thread's 4×4 block, in registers.
      float s[ROWS][COLS] = {};
      for (int k = 0; k < D; ++k) {
        float q[ROWS], kv[COLS];
        for (int ii = 0; ii < ROWS; ++ii) q[ii] = Qs[(ROWS * ty + ii) * L::QS + k];
        for (int jj = 0; jj < COLS; ++jj) kv[jj] = Ks[(tx + TX * jj) * L::KS + k];
        for (int ii = 0; ii < ROWS; ++ii)
          for (int jj = 0; jj < COLS; ++jj) s[ii][jj] += q[ii] * kv[jj];
      }

      // Tile statistics m̃, l̃ and P̃ = exp(S − m̃); masked scores (past Nkv, or above the
      // causal diagonal) are −inf and contribute exp(−inf) = 0.
      // exercise 04-tile-stats: the tile's m~ and l~ of this thread's rows (masked scores -inf) and P~ = exp(S - m~) into Ps
      //   stub: float m_tile[ROWS] = {}, l_tile[ROWS] = {};
      float m_tile[ROWS], l_tile[ROWS];
      for (int ii = 0; ii < ROWS; ++ii) {
        const int64_t row = i0 + ROWS * ty + ii;
        float mx = -INFINITY;
        for (int jj = 0; jj < COLS; ++jj) {
          const int64_t col = j0 + tx + TX * jj;
          if (col >= seq_kv || (causal && col > row)) s[ii][jj] = -INFINITY;
          mx = fmaxf(mx, s[ii][jj]);
        }
        m_tile[ii] = row_max(mx);
        float sum = 0.0f;
        for (int jj = 0; jj < COLS; ++jj) {
          const float p = m_tile[ii] == -INFINITY ? 0.0f : expf(s[ii][jj] - m_tile[ii]);
          Ps[(ROWS * ty + ii) * L::PS + tx + TX * jj] = p;
          sum += p;
        }
        l_tile[ii] = row_sum(sum);
      }
      // end exercise 04-tile-stats
      FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "m_tile", m_tile));
      FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "l_tile", l_tile));
      __syncthreads();  // P̃ complete before anyone multiplies it by V_j

      // P̃·V_j: this thread's 4 rows × D/16 columns of the tile's contribution.
      float pv[ROWS][D / TX] = {};
      for (int j = 0; j < Bc; ++j) {
        float p[ROWS], v[D / TX];
        for (int ii = 0; ii < ROWS; ++ii) p[ii] = Ps[(ROWS * ty + ii) * L::PS + j];
        for (int cc = 0; cc < D / TX; ++cc) v[cc] = Vs[j * L::VS + tx + TX * cc];
        for (int ii = 0; ii < ROWS; ++ii)
          for (int cc = 0; cc < D / TX; ++cc) pv[ii][cc] += p[ii] * v[cc];
      }

      // Combine with the running state and write it back to HBM (Algorithm 1, steps 12-13).
      FA_TRACE(load("O", i0, q_valid));  // each thread reads its part of O's rows, just below
      // TODO(exercise 04-write-back): combine the tile with the m, l and O read from HBM and write all three back (steps 12-13)
      __syncthreads();  // everyone is done with the tiles before the next Q tile, or the next K/V tile, overwrites them
      FA_TRACE(step(j0, i0));
      FA_TRACE(store("O, m, l", i0, q_valid));
      FA_TRACE(hbm_state(j0, i0, mh, lh, Oh, i0, q_valid, D));
    }
  }
}

namespace {

template <int D>
void launch(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* m, float* l) {
  const std::size_t smem = shared_bytes(D);
  // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
  FA_CUDA_CHECK(cudaFuncSetAttribute(flash1_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t blocks = p.batch_heads();
  if (blocks > 2147483647) throw InputError("stage 04: too many heads for one grid");
  flash1_kernel<D><<<static_cast<unsigned>(blocks), THREADS, smem, fa::stream()>>>(Q, K, V, O, m, l, p.seq_q, p.seq_kv,
                                                                      p.scale, p.causal);
  FA_CHECK_LAUNCH("flash1_kernel");
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return Layout<decltype(D)::value>::floats * sizeof(float); });
}

std::size_t workspace_bytes(const AttentionProblem& p) {
  return 2 * static_cast<std::size_t>(p.rows()) * sizeof(float);
}

double hbm_bytes_model(const AttentionProblem& p) {
  // K and V once; per K/V tile, Q, O (read and written), m and l (read and written).
  const double kv_tiles = static_cast<double>((p.seq_kv + Bc - 1) / Bc);
  const double bh = static_cast<double>(p.batch_heads());
  const double q = static_cast<double>(p.seq_q) * static_cast<double>(p.dim) * 4.0;
  const double kv = 2.0 * static_cast<double>(p.seq_kv) * static_cast<double>(p.dim) * 4.0;
  const double stats = 2.0 * static_cast<double>(p.seq_q) * 4.0;
  return bh * (kv + kv_tiles * (q + 2.0 * q + 2.0 * stats) + q + stats);  // + the initial O, m, l writes
}

void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* m,
               float* l) {
  with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value>(p, Q, K, V, O, m, l); });
}

}  // namespace fa::flash1
