/**
 * \file pipelined_attention.cu
 * \brief Stage 07: stage 06's tensor-core FlashAttention-2, fed by a memory pipeline.
 *
 * The idea: in stage 06 every K/V tile is loaded, then waited for, then computed on: the
 * tensor cores idle while the tile travels from HBM, and the load units idle while the
 * tensor cores work. Here the copy of tile j+1 is in flight while tile j is computed.
 *
 *     (one block per Q tile i; warp w owns its 16 query rows, as in stage 06)
 *     cp.async Q_i; commit                  cp.async K_0, V_0 → buffer 0; commit
 *     wait until Q_i has landed; Q fragments → registers, for the whole loop
 *     for each K/V tile j:
 *         cp.async K_{j+1}, V_{j+1} → buffer (j+1)%2; commit     (nothing waits for it yet)
 *         wait until tile j has landed (at most 1 group in flight); __syncthreads()
 *         S = Q_i·K_jᵀ; mask only if the tile crosses the diagonal or the end of the keys
 *         online softmax, O = alpha·O + P·V_j, as in stage 06
 *         __syncthreads()                    (buffer j%2 is refilled next iteration)
 *     O = O / l; write O and the log-sum-exp
 *
 * What changed since stage 06:
 * - cp.async copies global → shared without registers and without waiting, in two
 *   buffers (double buffering); wait_group says which copies must have landed;
 * - tiles are stored unpadded with an XOR swizzle (cp_async.cuh): ldmatrix without bank
 *   conflicts, and 6% less shared memory than stage 06's padding at d=128;
 * - each warp owns two 16-row m-tiles, so every K/V fragment feeds four mma instead of two;
 * - Q's fragments are loaded once into registers (where they fit: d ≤ 64);
 * - causal in two phases: tiles wholly below the diagonal skip the mask arithmetic
 *   entirely (so do all full tiles without a mask), and the Q tiles are scheduled
 *   heaviest first (the last query tiles of a head see the most keys);
 * - 2^x by ex2.approx.ftz, the scale folded into the exponent: 2^(s·scale·log2 e − m), one
 *   FMA and one exponential per score.
 * Each step can be switched off (pipelined_attention.h) to measure it: the README's log.
 * Cost: no workspace. HBM traffic: stage 06's. Parallelism: B·H·⌈Nq/Br⌉ blocks of 4 warps.
 *
 * Run: `stage07_memory_pipeline --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/07_memory_pipeline/pipelined_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/head_dim.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/07_memory_pipeline/cp_async.cuh"

namespace fa::pipeline {

using pipe::cp_async_16;
using pipe::cp_async_commit;
using pipe::cp_async_wait;
using pipe::swizzle;
using tc::ldmatrix_x4;
using tc::ldmatrix_x4_trans;
using tc::mma_m16n8k16;
using tc::pack2;

constexpr int M_TILES = FA07_M_TILES;     ///< 16-row m-tiles per warp: each K/V fragment feeds them all
constexpr int WARPS = Br / (16 * M_TILES);  ///< warps per block
constexpr int THREADS = 32 * WARPS;         ///< threads per block
static_assert(Br % (16 * M_TILES) == 0 && Bc % 16 == 0, "warps own 16·M_TILES rows; P·V takes 16 keys a step");

/// Whether Q's fragments stay in registers for the whole loop: D/16 · M_TILES · 4
/// registers, which fit beside O's accumulators up to d = 64 with two m-tiles.
template <int D>
constexpr bool q_in_registers() {
  return FA07_Q_IN_REGISTERS && D * M_TILES <= 128;
}

/// Blocks per multiprocessor the compiler must leave registers for (__launch_bounds__):
/// 2 with two m-tiles per warp, whose accumulators need up to 255 registers a thread; with
/// one, 4 up to d = 64 and 2 at d = 128.
template <int D>
constexpr int min_blocks() {
  if (FA07_MIN_BLOCKS > 0) return FA07_MIN_BLOCKS;
  return M_TILES > 1 || D > 64 ? 2 : 4;
}

/// Element offset of 16-byte chunk `chunk` of tile row `row`: swizzled (cp_async.cuh), or
/// plain rows for the optimisation log's "before" (FA07_SWIZZLE=0).
template <int D>
__device__ __forceinline__ int at(int row, int chunk) {
  if constexpr (FA07_SWIZZLE) {
    return swizzle<D>(row, chunk);
  } else {
    return row * D + 8 * chunk;
  }
}

/// Starts copying `rows` rows of D elements from `src` into a swizzled tile, 16 bytes
/// per thread per step; rows at or past `valid` are zero-filled by the copy itself.
template <typename T, int D>
__device__ void copy_tile_async(T* tile, const T* src, int rows, int valid) {
  constexpr int CHUNKS = D / 8;  // 16-byte pieces per row
  for (int idx = threadIdx.x; idx < rows * CHUNKS; idx += THREADS) {
    const int r = idx / CHUNKS, c = idx % CHUNKS;
    const bool inside = r < valid;  // valid >= 1, so row 0 is a safe address to name
    cp_async_16(tile + at<D>(r, c), src + static_cast<int64_t>(inside ? r : 0) * D + 8 * c, inside);
  }
}

/// 2^x by the hardware's approximation, flushing denormal results to zero: exp2f is the
/// same approximation (PTX ex2.approx.f32) but must keep denormals, which costs instructions. The CPU backend has no
/// such instruction and uses exp2f. FA07_FAST_EXP=0 uses exp2f on the GPU too.
__device__ __forceinline__ float fast_exp2(float x) {
#if defined(FA_CPU_KERNEL) || !FA07_FAST_EXP
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// Max (or sum) over the quad of lanes that holds one row of a C fragment (lanes 4g .. 4g+3).
__device__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
/// See quad_max.
__device__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// One block per (Q tile, batch·head), flattened into blockIdx.x. T is __half or __nv_bfloat16.
template <typename T, int D>
__global__ void __launch_bounds__(THREADS, min_blocks<D>())
    pipelined_kernel(const T* Q, const T* K, const T* V, T* O, float* lse, int64_t seq_q, int64_t seq_kv,
                     float scale_log2, bool causal) {
  extern __shared__ uint4 smem[];       // uint4: 16-byte aligned, as cp.async and ldmatrix need
  T* Qs = reinterpret_cast<T*>(smem);   // [Br][D]      the Q tile (swizzled, like all tiles)
  T* Ks[2] = {Qs + Br * D, Qs + Br * D + Bc * D};               // [2][Bc][D]  two K buffers
  T* Vs[2] = {Qs + Br * D + 2 * Bc * D, Qs + Br * D + 3 * Bc * D};  // [2][Bc][D]  two V buffers

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment coordinates (mma.cuh): rows g, g+8; columns 2t, 2t+1
  // Within a head, the last Q tile first: under a causal mask it has the most keys to
  // see, and the lightest tiles then run at the end of the grid, filling the gaps.
  const int64_t q_tiles = (seq_q + Br - 1) / Br;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (FA07_HEAVY_FIRST ? q_tiles - 1 - blockIdx.x % q_tiles : blockIdx.x % q_tiles) * Br;
  const T* Qh = Q + bh * seq_q * D;
  const T* Kh = K + bh * seq_kv * D;
  const T* Vh = V + bh * seq_kv * D;
  T* Oh = O + bh * seq_q * D;

  const int64_t kv_end = causal && i0 + Br < seq_kv ? i0 + Br : seq_kv;  // causal: stop at the diagonal
  const int64_t kv_tiles = (kv_end + Bc - 1) / Bc;
  const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
  const auto kv_valid = [&](int64_t j0) { return static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc); };

  // The pipeline fills: Q_i is one group, K_0/V_0 the next.
  copy_tile_async<T, D>(Qs, Qh + i0 * D, Br, q_valid);
  cp_async_commit();
  if (FA07_PREFETCH) {
    copy_tile_async<T, D>(Ks[0], Kh, Bc, kv_valid(0));
    copy_tile_async<T, D>(Vs[0], Vh, Bc, kv_valid(0));
    cp_async_commit();
  }
  cp_async_wait<FA07_PREFETCH>();  // Q_i has landed; K_0/V_0 may still be in flight
  __syncthreads();

  // The warp's rows: M_TILES m-tiles of 16, m-tile mt starting at row 16·(M_TILES·warp + mt)
  // of the Q tile. ldmatrix row addresses, lane by lane (lane 8·i + r gives row r of
  // matrix i), as in stage 06: A from Q, B from K, B from V (transposed).
  const auto a_row = [&](int mt) { return 16 * (M_TILES * warp + mt) + lane % 8 + 8 * (lane / 8 % 2); };
  const int a_chunk = lane / 16;
  const int k_row = lane % 8 + 8 * (lane / 16), k_chunk = lane / 8 % 2;
  const int v_row = lane % 8 + 8 * (lane / 8 % 2), v_chunk = lane / 16;
  // Q's A fragments for every m-tile and k-step (16 columns of d): loaded once and kept
  // in registers where they fit (q_in_registers), else reloaded from shared memory.
  constexpr bool Q_REGS = q_in_registers<D>();
  uint32_t q_frag[M_TILES][Q_REGS ? D / 16 : 1][4];
  if (Q_REGS) {
    for (int mt = 0; mt < M_TILES; ++mt)
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q_frag[mt][Q_REGS ? kk : 0], Qs + at<D>(a_row(mt), 2 * kk + a_chunk));
  }

  // The running state of this lane's rows (g and g+8 of each m-tile), in base-2 units of
  // the scaled scores: m is max(s·scale·log2 e).
  float m_run[M_TILES][2], l_run[M_TILES][2];  // l: this lane's share, summed over the quad at the end
  for (int mt = 0; mt < M_TILES; ++mt) m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
  float o_acc[M_TILES][D / 8][4] = {};

  for (int64_t j = 0; j < kv_tiles; ++j) {  // ---- the only loop: K/V tiles ----
    const int64_t j0 = j * Bc;
    const int buf = static_cast<int>(j % 2);
    if (!FA07_PREFETCH) {  // the optimisation log's "before": copy this tile, wait for it
      copy_tile_async<T, D>(Ks[buf], Kh + j0 * D, Bc, kv_valid(j0));
      copy_tile_async<T, D>(Vs[buf], Vh + j0 * D, Bc, kv_valid(j0));
      cp_async_commit();
      cp_async_wait<0>();
    } else if (j + 1 < kv_tiles) {  // start the next tile's copy into the other buffer ...
      copy_tile_async<T, D>(Ks[1 - buf], Kh + (j0 + Bc) * D, Bc, kv_valid(j0 + Bc));
      copy_tile_async<T, D>(Vs[1 - buf], Vh + (j0 + Bc) * D, Bc, kv_valid(j0 + Bc));
      cp_async_commit();
      cp_async_wait<1>();  // ... and wait only for this tile's (the older group)
    } else {
      cp_async_wait<0>();  // the last tile: nothing else is in flight
    }
    __syncthreads();  // every thread's copies of tile j have landed and are visible
    const T* Kt = Ks[buf];
    const T* Vt = Vs[buf];

    // S = Q_i·K_jᵀ for the warp's rows: Bc/8 C fragments of 16×8 per m-tile, fp32,
    // unscaled. Each K fragment from ldmatrix feeds every m-tile of the warp.
    float s[M_TILES][Bc / 8][4] = {};
    for (int kk = 0; kk < D / 16; ++kk) {
      if (!Q_REGS) {
        for (int mt = 0; mt < M_TILES; ++mt) ldmatrix_x4(q_frag[mt][0], Qs + at<D>(a_row(mt), 2 * kk + a_chunk));
      }
      for (int n = 0; n < Bc / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, Kt + at<D>(8 * n + k_row, 2 * kk + k_chunk));
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_m16n8k16<T>(s[mt][n], q_frag[mt][Q_REGS ? kk : 0], b[0], b[1]);
          mma_m16n8k16<T>(s[mt][n + 1], q_frag[mt][Q_REGS ? kk : 0], b[2], b[3]);
        }
      }
    }

    // Phase two of causal, and the last partial tile: only a tile that crosses the
    // diagonal (its last key is past the block's first row) or the end of the keys is
    // masked. Every other tile skips this code.
    const bool needs_mask = !FA07_TWO_PHASE || j0 + Bc > seq_kv || (causal && j0 + Bc - 1 > i0);
    if (needs_mask) {
      const int valid = kv_valid(j0);
      for (int mt = 0; mt < M_TILES; ++mt) {
        for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
          const int64_t row = i0 + 16 * (M_TILES * warp + mt) + g + 8 * h;
          // The row's last visible column, relative to the tile (below 0: none visible).
          const int64_t last64 = causal ? row - j0 : Bc;
          const int last = static_cast<int>(last64 < Bc ? last64 : Bc);
          for (int n = 0; n < Bc / 8; ++n) {
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              const int c = 8 * n + 2 * t + e % 2;
              if (c >= valid || c > last) s[mt][n][e] = -INFINITY;
            }
          }
        }
      }
    }

    // Online softmax in base 2, with the scale folded into the exponent: P = 2^(s·k − m).
    float alpha[M_TILES][2];
    for (int mt = 0; mt < M_TILES; ++mt) {
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
        for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        const float m_new = fmaxf(m_run[mt][h], quad_max(mx) * scale_log2);  // scale > 0: max commutes
        // A row with no visible key yet has m_new = −inf, and −inf − (−inf) is NaN. Subtracting
        // 0 instead gives 2^−inf = 0 for every masked score and for alpha, with one test per
        // row rather than one per score. (alpha = 0 then scales an l and O that are still 0.)
        const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
        alpha[mt][h] = fast_exp2(m_run[mt][h] - m_sub);  // 0 on the first tile
        float sum = 0.0f;
        for (int n = 0; n < Bc / 8; ++n) {
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[mt][n][e] = fast_exp2(fmaf(s[mt][n][e], scale_log2, -m_sub));
            sum += s[mt][n][e];
          }
        }
        l_run[mt][h] = alpha[mt][h] * l_run[mt][h] + sum;
        m_run[mt][h] = m_new;
      }
    }

    // O = alpha·O + P·V_j, P straight from the score registers (as in stage 06); each V
    // fragment feeds every m-tile.
    for (int mt = 0; mt < M_TILES; ++mt) {
      for (int n = 0; n < D / 8; ++n) {
        o_acc[mt][n][0] *= alpha[mt][0], o_acc[mt][n][1] *= alpha[mt][0];
        o_acc[mt][n][2] *= alpha[mt][1], o_acc[mt][n][3] *= alpha[mt][1];
      }
    }
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t a[M_TILES][4];
      for (int mt = 0; mt < M_TILES; ++mt) {
        const float(*p)[4] = s[mt];
        a[mt][0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]), a[mt][1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
        a[mt][2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]), a[mt][3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
      }
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Vt + at<D>(16 * kk + v_row, n + v_chunk));
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_m16n8k16<T>(o_acc[mt][n], a[mt], b[0], b[1]);
          mma_m16n8k16<T>(o_acc[mt][n + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // all warps are done with buffer j%2 before the next iteration refills it
  }

  // Divide by l once, and write O (rounded to T) and the log-sum-exp.
  for (int mt = 0; mt < M_TILES; ++mt) {
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * (M_TILES * warp + mt) + g + 8 * h;
      const float l = quad_sum(l_run[mt][h]);  // l >= 1: the max's own term is 2^0
      if (r >= q_valid) continue;
      const float inv = 1.0f / l;
      T* o_row = Oh + (i0 + r) * D;
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(o_row + 8 * n + 2 * t) =
            pack2<T>(o_acc[mt][n][2 * h] * inv, o_acc[mt][n][2 * h + 1] * inv);
      }
      if (lse && t == 0) lse[bh * seq_q + i0 + r] = (m_run[mt][h] + log2f(l)) * 0.6931471805599453f;  // ln(l·2^m)
    }
  }
}

namespace {

template <typename T, int D>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  const std::size_t smem = shared_bytes(D);
  FA_CUDA_CHECK(cudaFuncSetAttribute(pipelined_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t blocks = p.batch_heads() * ((p.seq_q + Br - 1) / Br);
  if (blocks > 2147483647) throw InputError("stage 07: too many query tiles for one grid");
  constexpr float LOG2E = 1.4426950408889634f;
  pipelined_kernel<T, D><<<static_cast<unsigned>(blocks), THREADS, smem>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), lse,
      p.seq_q, p.seq_kv, p.scale * LOG2E, p.causal);
  FA_CHECK_LAUNCH("pipelined_kernel");
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  // A Q tile and two K and two V tiles of 16-bit elements, unpadded.
  return static_cast<std::size_t>((Br + 4 * Bc) * d) * 2;
}

double hbm_bytes_model(const AttentionProblem& p) {
  return q_outer_hbm_bytes(p, Br);  // stage 05's model; p.dtype makes the elements 2 bytes
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  with_head_dim(p.dim, [&](auto D) {
    tc::with_mma_type(p.dtype, "stage 07", [&](auto type) {
      launch<decltype(type), decltype(D)::value>(p, Q, K, V, O, lse);
    });
  });
}

}  // namespace fa::pipeline
