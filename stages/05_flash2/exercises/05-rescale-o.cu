/**
 * \file flash2_attention.cu
 * \brief Stage 05: FlashAttention-2: stage 04's loops swapped, m, l and O on chip.
 *
 * The idea: make the Q tile the outer loop. Each block then owns one Q tile for its
 * whole life, so its running m, l and O never have to leave the chip, and no block
 * depends on another: the grid covers every (Q tile, batch·head) pair in parallel.
 * The loop order of FlashAttention-2:
 *
 *     (one block per Q tile i)
 *     load Q_i; m = −inf, l = 0, O = 0       (registers)
 *     for each K/V tile j:
 *         load K_j, V_j into shared memory
 *         S     = scale·Q_i·K_jᵀ              (Br×Bc, on chip)
 *         m_new = max(m, rowmax(S))
 *         P     = exp(S − m_new)
 *         alpha = exp(m − m_new)
 *         l     = alpha·l + rowsum(P)
 *         O     = alpha·O + P·V_j             not divided by l yet
 *         m     = m_new
 *     O = O / l, once; write O and log-sum-exp m + log(l)
 *
 * What changed since stage 04: the two loops swapped; the state moved from HBM to
 * registers; one rescale factor instead of two (P is taken relative to the running
 * max directly); the division by l delayed to the end. And two of FlashAttention-2's
 * smaller points: exp(x) = 2^(x·log2 e), with log2 e folded into the scale, so every
 * exponential is one exp2f (the hardware's native ex2) instead of expf; and warps that
 * own whole rows of the tile need no block-wide barrier between P and P·V.
 * Block-sparse attention (the extension the FlashAttention paper sketches): with a block
 * mask, a Q tile skips the K/V tiles the mask drops, loading nothing and computing nothing
 * for them, so the time follows the fraction of tiles kept.
 * Cost: no workspace. HBM traffic: Q and O once; K and V once per Q tile.
 * Parallelism: B·H·⌈Nq/Br⌉ blocks.
 *
 * Run: `stage05_flash2 --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/05_flash2/flash2_attention.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere

namespace fa::flash2 {

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

/// One block per (Q tile, batch·head), flattened into blockIdx.x: K/V tiles inner. SPARSE:
/// block-sparse, under `block_mask` (a template flag: the dense kernel has no test of it in
/// its loop, which cost it 10% on the H100).
template <int D, bool SPARSE>
__global__ void __launch_bounds__(THREADS) flash2_kernel(const float* Q, const float* K, const float* V, float* O,
                                                         float* lse, RowStats* stats, int64_t seq_q, int64_t seq_kv,
                                                         float scale, bool causal, const uint8_t* block_mask) {
  using L = Layout<D>;
  extern __shared__ float smem[];
  float* Qs = smem;                 // [Br][QS]  the Q tile, pre-scaled
  float* Ks = Qs + Br * L::QS;      // [Bc][KS]  the K tile
  float* Vs = Ks + Bc * L::KS;      // [Bc][VS]  the V tile
  float* Ps = Vs + Bc * L::VS;      // [Br][PS]  P = exp(S − m_new), shared for the P·V product

  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t q_tiles = (seq_q + Br - 1) / Br;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (blockIdx.x % q_tiles) * Br;
  const float* Qh = Q + bh * seq_q * D;
  const float* Kh = K + bh * seq_kv * D;
  const float* Vh = V + bh * seq_kv * D;
  float* Oh = O + bh * seq_q * D;

  const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
  // Once, for the whole loop. Scores come out in base-2 units: s·log2(e).
  constexpr float LOG2E = 1.4426950408889634f;
  load_tile<D>(Qs, L::QS, Qh + i0 * D, Br, q_valid, scale * LOG2E);
  FA_TRACE(load("Q", i0, q_valid));

  // The running state of this thread's rows, on chip for the whole loop.
  float m_run[ROWS], l_run[ROWS], o_acc[ROWS][D / TX] = {};
  for (int ii = 0; ii < ROWS; ++ii) {
    m_run[ii] = -INFINITY;
    l_run[ii] = 0.0f;
  }

  for (int64_t j0 = 0; j0 < seq_kv; j0 += Bc) {  // ---- the only loop: K/V tiles ----
    if (causal && j0 > i0 + Br - 1) {  // this and every later tile lie above the diagonal
      FA_TRACE(skip(j0, i0));
      break;
    }
    // Block-sparse attention: a tile the mask drops for this Q tile is never loaded, and its
    // keys get no weight, as if all their scores were −inf.
    // exercise 05-block-sparse: skip K/V tile j0 / Bc if the block mask drops it for this Q tile (block_mask: ⌈Nq/Br⌉ × ⌈Nkv/Bc⌉ flags, row-major)
    if (SPARSE && !block_mask[(i0 / Br) * ((seq_kv + Bc - 1) / Bc) + j0 / Bc]) continue;
    // end exercise 05-block-sparse
    const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
    load_tile<D>(Ks, L::KS, Kh + j0 * D, Bc, kv_valid, 1.0f);
    load_tile<D>(Vs, L::VS, Vh + j0 * D, Bc, kv_valid, 1.0f);
    FA_TRACE(load("K, V", j0, kv_valid));
    __syncthreads();  // K_j, V_j (and, on the first pass, Q_i) are in shared memory

    // S = scale·log2(e)·Q_i·K_jᵀ: this thread's 4×4 block, in registers.
    float s[ROWS][COLS] = {};
    for (int k = 0; k < D; ++k) {
      float q[ROWS], kv[COLS];
      for (int ii = 0; ii < ROWS; ++ii) q[ii] = Qs[(ROWS * ty + ii) * L::QS + k];
      for (int jj = 0; jj < COLS; ++jj) kv[jj] = Ks[(tx + TX * jj) * L::KS + k];
      for (int ii = 0; ii < ROWS; ++ii)
        for (int jj = 0; jj < COLS; ++jj) s[ii][jj] += q[ii] * kv[jj];
    }

    // The new running max, P = 2^(S − m_new) and its row sums (base 2 throughout: the
    // same numbers as exp() of the natural-unit scores); masked scores (past Nkv, or
    // above the causal diagonal) are −inf and contribute 2^(−inf) = 0.
    float alpha[ROWS];
    for (int ii = 0; ii < ROWS; ++ii) {
      const int64_t row = i0 + ROWS * ty + ii;
      float mx = -INFINITY;
      for (int jj = 0; jj < COLS; ++jj) {
        const int64_t col = j0 + tx + TX * jj;
        if (col >= seq_kv || (causal && col > row)) s[ii][jj] = -INFINITY;
        mx = fmaxf(mx, s[ii][jj]);
      }
      const float m_new = fmaxf(m_run[ii], row_max(mx));
      alpha[ii] = m_new == -INFINITY ? 1.0f : exp2f(m_run[ii] - m_new);  // 0 on the first tile
      float sum = 0.0f;
      for (int jj = 0; jj < COLS; ++jj) {
        const float p = m_new == -INFINITY ? 0.0f : exp2f(s[ii][jj] - m_new);
        Ps[(ROWS * ty + ii) * L::PS + tx + TX * jj] = p;
        sum += p;
      }
      l_run[ii] = alpha[ii] * l_run[ii] + row_sum(sum);
      m_run[ii] = m_new;
    }
    FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "m", m_run, 1.0f / LOG2E));  // in natural units, as stage 04's
    FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "alpha", alpha));
    FA_TRACE(rows(j0, i0, i0 + ROWS * ty, "l", l_run));
    // The P rows a warp multiplies by V_j are rows it wrote itself (a warp's 32 threads
    // own 8 whole rows), so the warps need not wait for each other: a warp-level
    // barrier orders the writes and reads, where stage 04 stops the whole block.
    __syncwarp();

    // O = alpha·O + P·V_j: this thread's 4 rows × D/16 columns, kept in registers.
    // TODO(exercise 05-rescale-o): rescale each row of the accumulated O by its alpha before this tile's P*V is added
    for (int j = 0; j < Bc; ++j) {
      float p[ROWS], v[D / TX];
      for (int ii = 0; ii < ROWS; ++ii) p[ii] = Ps[(ROWS * ty + ii) * L::PS + j];
      for (int cc = 0; cc < D / TX; ++cc) v[cc] = Vs[j * L::VS + tx + TX * cc];
      for (int ii = 0; ii < ROWS; ++ii)
        for (int cc = 0; cc < D / TX; ++cc) o_acc[ii][cc] += p[ii] * v[cc];
    }
    FA_TRACE(o_part(j0, i0, i0 + ROWS * ty, tx, TX, D, o_acc));  // O, not yet divided by l
    FA_TRACE(step(j0, i0));
    __syncthreads();  // everyone is done with the tiles before the next K/V tile overwrites them
  }

  // Divide by l once, and write O and the log-sum-exp: the only writes to HBM.
  // exercise 05-normalise: divide each row of O by l once, write it, and write its log-sum-exp in natural units
  for (int ii = 0; ii < ROWS; ++ii) {
    const int r = ROWS * ty + ii;
    if (r >= q_valid) continue;
    // l >= 1, the max's own term being 2^0, unless the block mask left the row no key:
    // then O = 0 and the log-sum-exp is −inf.
    const float inv = l_run[ii] > 0.0f ? 1.0f / l_run[ii] : 0.0f;
    float* o_row = Oh + (i0 + r) * D;
    for (int cc = 0; cc < D / TX; ++cc) o_row[tx + TX * cc] = o_acc[ii][cc] * inv;
    // Back to natural units: ln(l·2^m) = m·ln 2 + ln l, one fused multiply-add, rounded once
    // (stage 10 rebuilds P from it: its README's section on large logits).
    if (lse && tx == 0) lse[bh * seq_q + i0 + r] = fmaf(m_run[ii], 0.6931471805599453f, logf(l_run[ii]));
  }
  // end exercise 05-normalise
  // m and 1/l themselves, for stage 10: in float32, lse = 1000 is rounded by up to 3e-5,
  // which would move the whole row's P by as much (stage 10's README: large logits).
  for (int ii = 0; ii < ROWS && stats && tx == 0; ++ii) {
    const int r = ROWS * ty + ii;
    const bool seen = l_run[ii] > 0.0f;
    if (r < q_valid) stats[bh * seq_q + i0 + r] = {seen ? m_run[ii] : 0.0f, seen ? 1.0f / l_run[ii] : 0.0f};
  }
  FA_TRACE(store(lse ? "O, lse" : "O", i0, q_valid));
}

namespace {

template <int D>
void launch(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* lse,
            const uint8_t* block_mask, RowStats* stats) {
  const std::size_t smem = shared_bytes(D);
  // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
  for (const auto kernel : {flash2_kernel<D, false>, flash2_kernel<D, true>}) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const unsigned blocks = q_tile_grid(p, Br, "stage 05");
  if (block_mask) {
    flash2_kernel<D, true><<<blocks, THREADS, smem, fa::stream()>>>(Q, K, V, O, lse, stats, p.seq_q, p.seq_kv, p.scale,
                                                                     p.causal, block_mask);
  } else {
    flash2_kernel<D, false><<<blocks, THREADS, smem, fa::stream()>>>(Q, K, V, O, lse, stats, p.seq_q, p.seq_kv, p.scale,
                                                                      p.causal, nullptr);
  }
  FA_CHECK_LAUNCH("flash2_kernel");
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return Layout<decltype(D)::value>::floats * sizeof(float); });
}

double hbm_bytes_model(const AttentionProblem& p) {
  return q_outer_hbm_bytes(p, Br);  // Q and O once; K and V once per Q tile; the lse
}

void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* lse,
               const uint8_t* block_mask, RowStats* stats) {
  with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value>(p, Q, K, V, O, lse, block_mask, stats); });
}

}  // namespace fa::flash2
