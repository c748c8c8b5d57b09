// BUG(exercise 07-bug): this copy of pipelined_attention.cu differs from a correct kernel in one place, and the tests of exercise 07-bug fail. Find it, fix it, then delete this line.
/**
 * \file pipelined_attention.cu
 * \brief Stage 07: stage 06's tensor-core FlashAttention-2, fed by a memory pipeline.
 *
 * The idea: in stage 06 every K/V tile is loaded, then waited for, then computed on: the
 * tensor cores idle while the tile travels from HBM, and the load units idle while the
 * tensor cores work. Here the copy of tile j+1 is in flight while tile j is computed.
 *
 *     (one block per Q tile i of 128 rows; warp w owns 32 of them, two 16-row m-tiles)
 *     cp.async Q_i; commit                  cp.async K_0, V_0 → buffer 0; commit
 *     wait until Q_i has landed; Q fragments → registers, for the whole loop (where they fit)
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
 * - each lane's swizzled offsets are computed once; every copy and ldmatrix then adds a
 *   constant or XORs one (cp_async.cuh), which removes a third of the instructions;
 * - each warp owns two 16-row m-tiles, so every K/V fragment feeds four mma instead of two;
 *   Bc is chosen per head dimension (128 up to d = 64, 64 at d = 128);
 * - Q's fragments are loaded once into registers where they fit (d ≤ 32; see Config::Q_REGS);
 * - causal in two phases: tiles wholly below the diagonal skip the mask arithmetic
 *   entirely (so do all full tiles without a mask), and the Q tiles are scheduled
 *   heaviest first (the last query tiles of a head see the most keys);
 * - 2^x by ex2.approx.ftz, the scale folded into the exponent: 2^(s·scale·log2 e − m), one
 *   FMA and one exponential per score;
 * - at d = 128, lazy rescaling: a row's max moves only when it grows by more than 2^8, and
 *   a warp whose rows' maxima all stayed skips O's rescale.
 * The kernel is a template on its configuration (tuning.h): `Tuned` is the finished kernel,
 * and each variant there undoes one step, so that LOG.md's rows can be measured again
 * (`--variant NAME`; benchmarks/tune_stage07.sh times them all).
 * Cost: no workspace. HBM traffic: stage 06's. Parallelism: B·H·⌈Nq/Br⌉ blocks of 4 warps.
 *
 * Run: `stage07_memory_pipeline --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/07_memory_pipeline/pipelined_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/07_memory_pipeline/cp_async.cuh"
#include "stages/07_memory_pipeline/tuning.h"

namespace fa::pipeline {

using dev::fast_exp2;
using dev::row_reduce;
using pipe::cp_async_16;
using pipe::cp_async_commit;
using pipe::cp_async_wait;
using pipe::swizzle;
using tc::a_from_c;
using tc::ldmatrix_x4;
using tc::ldmatrix_x4_trans;
using tc::mma_m16n8k16;
using tc::pack2;
using tc::quad_max;
using tc::quad_sum;

/// The kernel's shape and choices for head dimension D under configuration S (tuning.h;
/// the finished kernel is Config<D, Tuned>).
template <int HD, class S>
struct Config {
  static constexpr int D = HD;                     ///< head dimension
  static constexpr int Br = S::br;                 ///< query rows per tile
  static constexpr int M_TILES = S::m_tiles;       ///< 16-row m-tiles per warp: each K/V fragment feeds them all
  static constexpr int WARPS = Br / (16 * M_TILES);  ///< warps per block
  static constexpr int THREADS = 32 * WARPS;         ///< threads per block
  static_assert(Br % (16 * M_TILES) == 0, "warps own 16·M_TILES rows");

  /// Bc, the key/value rows per tile, chosen by measurement (LOG.md): 128 up to d = 64,
  /// 64 at d = 128, where the scores of a 128-key tile and O's accumulators no longer fit
  /// in registers together.
  static constexpr int Bc = S::bc > 0 ? S::bc : (D <= 64 ? 128 : 64);
  static_assert(Bc % 16 == 0, "P·V takes 16 keys a step");

  /// Whether a row's max moves lazily: measured to pay at d = 128, where skipping O's
  /// rescale saves 128 multiplies a tile per thread; at d = 64 it saves 64 and costs more,
  /// as the vote and the branch split the softmax from P·V.
  static constexpr bool LAZY = S::lazy == Lazy::always || (S::lazy == Lazy::at_d128 && D >= 128);

  /// Whether Q's fragments stay in registers for the whole loop: D/4 registers per m-tile,
  /// kept where they fit beside the scores (Bc/2 per m-tile) and O's accumulators (D/2)
  /// within 192 registers, which leaves room for addresses and temporaries: at d = 32,
  /// and at d = 64 with Bc = 64, but not at d = 64 with Bc = 128 nor at d = 128.
  static constexpr bool Q_REGS = M_TILES * (Bc / 2 + D / 2 + D / 4) <= 192;

  /// Blocks per multiprocessor the compiler must leave registers for (__launch_bounds__):
  /// 2 with two m-tiles per warp, whose accumulators need up to 255 registers a thread; with
  /// one, 4 up to d = 64 and 2 at d = 128.
  static constexpr int MIN_BLOCKS = S::min_blocks > 0 ? S::min_blocks : (M_TILES > 1 || D > 64 ? 2 : 4);

  /// Shared memory of one block: a Q tile and two K and two V tiles of 16-bit elements, unpadded.
  static constexpr std::size_t SMEM_BYTES = static_cast<std::size_t>((Br + 4 * Bc) * D) * 2;

  /// Whether each lane computes its swizzled offsets once (else at every copy and ldmatrix).
  static constexpr bool LANE_OFFSETS = S::lane_offsets;

  /// Element offset of 16-byte chunk `chunk` of tile row `row`: swizzled (cp_async.cuh),
  /// or plain rows where S undoes the swizzle.
  static __device__ __forceinline__ int at(int row, int chunk) {
    if constexpr (S::swizzle) {
      return swizzle<D>(row, chunk);
    } else {
      return row * D + 8 * chunk;
    }
  }
};

/// The lazy rescale's slack, in base-2 units: a row's reference max moves only when a
/// score passes it by more than this, so 2^(s − m) ≤ 2^8 = 256.
constexpr float RESCALE_SLACK = 8.0f;

/**
 * One thread's share of copying a tile of ROWS rows of D elements into a swizzled tile:
 * 16-byte chunk `threadIdx.x % (D/8)` of rows `first_row`, first_row + ROW_STEP, ... The
 * offsets are computed once, when the kernel starts; each copy then only adds constants
 * (the swizzle repeats every 8 rows and ROW_STEP is a multiple of 8).
 */
template <typename T, class C, int ROWS>
struct TileCopy {
  static constexpr int D = C::D;                        ///< head dimension
  static constexpr int CHUNKS = D / 8;                  ///< 16-byte chunks per row
  static constexpr int ROW_STEP = C::THREADS / CHUNKS;  ///< rows the block covers in one step
  static_assert(C::THREADS % CHUNKS == 0 && ROW_STEP % 8 == 0, "each step covers whole 8-row swizzle patterns");
  int first_row;  ///< this thread's first row
  int to;         ///< its offset in the (swizzled) tile
  int from;       ///< its offset in the source rows

  __device__ TileCopy()
      : first_row(static_cast<int>(threadIdx.x) / CHUNKS),
        to(C::at(first_row, threadIdx.x % CHUNKS)),
        from(first_row * D + 8 * (threadIdx.x % CHUNKS)) {}

  /// Starts copying rows [0, ROWS) of `src` into `tile`; rows at or past `valid` are
  /// zero-filled by the copy itself (valid >= 1, so row 0 is a safe address to name).
  __device__ void operator()(T* tile, const T* src, int valid) const {
    if constexpr (!C::LANE_OFFSETS) {  // variant per_access: row, chunk and swizzle at every copy
      for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += C::THREADS) {
        const int r = idx / CHUNKS, c = idx % CHUNKS;
        const bool inside = r < valid;
        cp_async_16(tile + C::at(r, c), src + (inside ? r : 0) * D + 8 * c, inside);
      }
    } else if (valid >= ROWS) {  // a full tile: no row to test
#pragma unroll
      for (int i = 0; i * ROW_STEP < ROWS; ++i) {
        if (ROWS % ROW_STEP != 0 && first_row + i * ROW_STEP >= ROWS) break;
        cp_async_16(tile + to + i * ROW_STEP * D, src + from + i * ROW_STEP * D, true);
      }
    } else {
#pragma unroll
      for (int i = 0; i * ROW_STEP < ROWS; ++i) {
        if (ROWS % ROW_STEP != 0 && first_row + i * ROW_STEP >= ROWS) break;
        const bool inside = first_row + i * ROW_STEP < valid;
        cp_async_16(tile + to + i * ROW_STEP * D, src + (inside ? from + i * ROW_STEP * D : 0), inside);
      }
    }
  }
};

/// One block per (Q tile, batch·head), flattened into blockIdx.x. T is __half or
/// __nv_bfloat16; S the configuration (tuning.h), Tuned for the finished kernel.
template <typename T, int D, class S>
__global__ void __launch_bounds__(Config<D, S>::THREADS, Config<D, S>::MIN_BLOCKS)
    pipelined_kernel(const T* Q, const T* K, const T* V, T* O, float* lse, int64_t seq_q, int64_t seq_kv,
                     float scale_log2, bool causal) {
  using C = Config<D, S>;
  constexpr int Br = C::Br, Bc = C::Bc, M_TILES = C::M_TILES;
  extern __shared__ uint4 smem[];       // uint4: 16-byte aligned, as cp.async and ldmatrix need
  T* Qs = reinterpret_cast<T*>(smem);   // [Br][D]        the Q tile (swizzled, like all tiles)
  T* KVs = Qs + Br * D;                 // [2][K, V][Bc][D] two buffers, each a K and a V tile
  const auto Ks = [&](int buf) { return KVs + (2 * buf) * Bc * D; };
  const auto Vs = [&](int buf) { return KVs + (2 * buf + 1) * Bc * D; };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment coordinates (mma.cuh): rows g, g+8; columns 2t, 2t+1
  // Within a head, the last Q tile first: under a causal mask it has the most keys to
  // see, and the lightest tiles then run at the end of the grid, filling the gaps.
  const int64_t q_tiles = (seq_q + Br - 1) / Br;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (S::heavy_first ? q_tiles - 1 - blockIdx.x % q_tiles : blockIdx.x % q_tiles) * Br;
  const T* Qh = Q + bh * seq_q * D;
  const T* Kh = K + bh * seq_kv * D;
  const T* Vh = V + bh * seq_kv * D;
  T* Oh = O + bh * seq_q * D;

  const int64_t kv_end = causal && i0 + Br < seq_kv ? i0 + Br : seq_kv;  // causal: stop at the diagonal
  const int64_t kv_tiles = (kv_end + Bc - 1) / Bc;
  const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
  const auto kv_valid = [&](int64_t j0) { return static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc); };

  // The pipeline fills: Q_i is one group, K_0/V_0 the next.
  const TileCopy<T, C, Br> copy_q;
  const TileCopy<T, C, Bc> copy_kv;
  copy_q(Qs, Qh + i0 * D, q_valid);
  FA_TRACE(copy("Q", i0, q_valid, -1));  // the pipeline's steps, for See it run (cp_async.cuh traces commit and wait)
  cp_async_commit();
  if constexpr (S::prefetch) {
    copy_kv(Ks(0), Kh, kv_valid(0));
    copy_kv(Vs(0), Vh, kv_valid(0));
    FA_TRACE(copy("K, V", 0, kv_valid(0), 0));
    cp_async_commit();
  }
  cp_async_wait<S::prefetch ? 1 : 0>();  // Q_i has landed; K_0/V_0 may still be in flight
  __syncthreads();
  FA_TRACE(barrier());

  // The warp's rows: M_TILES m-tiles of 16, m-tile mt starting at row 16·(M_TILES·warp + mt)
  // of the Q tile. ldmatrix row addresses, lane by lane (lane 8·i + r gives row r of
  // matrix i), as in stage 06: A from Q, B from K, B from V (transposed). Each lane's
  // offset is swizzled once, here, for its first row and chunk; the identities in
  // cp_async.cuh give the rest: k-step kk (chunks 2kk, 2kk + 1) is an XOR with 16·kk,
  // and the rows 8·m further on an addition of 8·m·D, which ldmatrix takes as a constant.
  // (Variant per_access computes the swizzle at every ldmatrix instead.)
  const int q_row = 16 * M_TILES * warp + lane % 8 + 8 * (lane / 8 % 2), q_chunk = lane / 16;
  const int k_row = lane % 8 + 8 * (lane / 16), k_chunk = lane / 8 % 2;
  const int v_row = lane % 8 + 8 * (lane / 8 % 2), v_chunk = lane / 16;
  const int q_lane = C::at(q_row, q_chunk), k_lane = C::at(k_row, k_chunk), v_lane = C::at(v_row, v_chunk);
  const auto q_at = [&](int mt, int kk) {  // m-tile mt, k-step kk: rows 16·mt on, chunks 2kk, 2kk + 1
    if constexpr (!S::lane_offsets) return C::at(q_row + 16 * mt, 2 * kk + q_chunk);
    return (q_lane ^ (16 * kk)) + 16 * mt * D;
  };
  const auto k_at = [&](int n, int kk) {  // keys 8n .. 8n + 15, k-step kk
    if constexpr (!S::lane_offsets) return C::at(k_row + 8 * n, 2 * kk + k_chunk);
    return (k_lane ^ (16 * kk)) + 8 * n * D;
  };
  const auto v_at = [&](int kk, int n) {  // keys 16kk .. 16kk + 15, columns 8n .. 8n + 15
    if constexpr (!S::lane_offsets) return C::at(v_row + 16 * kk, n + v_chunk);
    return (v_lane ^ (8 * n)) + 16 * kk * D;
  };
  // Q's A fragments for every m-tile and k-step (16 columns of d): loaded once and kept
  // in registers where they fit (Config::Q_REGS), else reloaded from shared memory.
  constexpr bool Q_REGS = C::Q_REGS;
  uint32_t q_frag[M_TILES][Q_REGS ? D / 16 : 1][4];
  if constexpr (Q_REGS) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q_frag[mt][Q_REGS ? kk : 0], Qs + q_at(mt, kk));
  }

  // The running state of this lane's rows (g and g+8 of each m-tile), in base-2 units of
  // the scaled scores: m is max(s·scale·log2 e).
  float m_run[M_TILES][2], l_run[M_TILES][2];  // l: this lane's share, summed over the quad at the end
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;
  float o_acc[M_TILES][D / 8][4] = {};

  for (int64_t j = 0; j < kv_tiles; ++j) {  // ---- the only loop: K/V tiles ----
    const int64_t j0 = j * Bc;
    const int buf = static_cast<int>(j % 2);
    if constexpr (!S::prefetch) {  // variant no_prefetch: copy this tile, wait for it
      copy_kv(Ks(buf), Kh + j0 * D, kv_valid(j0));
      copy_kv(Vs(buf), Vh + j0 * D, kv_valid(j0));
      FA_TRACE(copy("K, V", j0, kv_valid(j0), buf));
      cp_async_commit();
      cp_async_wait<0>();
    // exercise 07-prefetch: copy tile j+1 into the other buffer, then wait only for tile j's copies
    //   stub: } else {
    //   stub: }
    } else if (j + 1 < kv_tiles) {  // start the next tile's copy into the other buffer ...
      copy_kv(Ks(1 - buf), Kh + (j0 + Bc) * D, kv_valid(j0 + Bc));
      copy_kv(Vs(1 - buf), Vh + (j0 + Bc) * D, kv_valid(j0 + Bc));
      FA_TRACE(copy("K, V", j0 + Bc, kv_valid(j0 + Bc), 1 - buf));
      cp_async_commit();
      cp_async_wait<2>();  // ... and wait only for this tile's (the older group)
    } else {
      cp_async_wait<0>();  // the last tile: nothing else is in flight
    }
    // end exercise 07-prefetch
    __syncthreads();  // every thread's copies of tile j have landed and are visible
    FA_TRACE(barrier());
    const T* Kt = Ks(buf);
    const T* Vt = Vs(buf);
    FA_TRACE(tile("K", Kt, Bc * D));  // the K tile as it lies in shared memory

    // S = Q_i·K_jᵀ for the warp's rows: Bc/8 C fragments of 16×8 per m-tile, fp32,
    // unscaled. Each K fragment from ldmatrix feeds every m-tile of the warp.
    float s[M_TILES][Bc / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (!Q_REGS) {
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) ldmatrix_x4(q_frag[mt][0], Qs + q_at(mt, kk));
      }
#pragma unroll
      for (int n = 0; n < Bc / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, Kt + k_at(n, kk));
        FA_TRACE(fragment<T>("B = K", k_at(n, kk), b));
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_m16n8k16<T>(s[mt][n], q_frag[mt][Q_REGS ? kk : 0], b[0], b[1]);
          mma_m16n8k16<T>(s[mt][n + 1], q_frag[mt][Q_REGS ? kk : 0], b[2], b[3]);
        }
      }
    }

    // Phase two of causal, and the last partial tile: only a tile that crosses the
    // diagonal (its last key is past the block's first row) or the end of the keys is
    // masked. Every other tile skips this code.
    const bool needs_mask = !S::two_phase || j0 + Bc > seq_kv || (causal && j0 + Bc - 1 > i0);
    if (needs_mask) {
      const int valid = kv_valid(j0);
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
          const int64_t row = i0 + 16 * (M_TILES * warp + mt) + g + 8 * h;
          // The row's last visible column, relative to the tile (below 0: none visible).
          const int64_t last64 = causal ? row - j0 : Bc;
          const int last = static_cast<int>(last64 < Bc ? last64 : Bc);
#pragma unroll
          for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              const int c = 8 * n + 2 * t + e % 2;
              if (c >= valid || c > last) s[mt][n][e] = -INFINITY;
            }
          }
        }
      }
    }

    // Online softmax in base 2, with the scale folded into the exponent: P = 2^(s·k − m).
    // Lazy rescaling (Config::LAZY): m is the row's reference max, and it moves only
    // when the tile's max passes it by more than RESCALE_SLACK. Until then P may exceed 1
    // (up to 2^8, which fp16 and bf16 hold with their usual relative precision) but the
    // result is the same: O and l are both sums of 2^(s·k − m) terms with the same m,
    // and O / l cancels it. Most tiles after the first few move no row's max, and then
    // the warp skips O's rescale altogether.
    float alpha[M_TILES][2];
    bool moved = false;  // did any of this lane's rows move its max?
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // scale > 0: max commutes with it
        const float mx = quad_max(row_reduce(s[mt], h, [](float a, float b) { return fmaxf(a, b); })) * scale_log2;
        const float m_old = m_run[mt][h];
        const float m_new = C::LAZY ? (mx > m_old + RESCALE_SLACK ? mx : m_old) : fmaxf(m_old, mx);
        // A row with no visible key yet has m_new = −inf, and −inf − (−inf) is NaN. Subtracting
        // 0 instead gives 2^−inf = 0 for every masked score, with one test per row rather
        // than one per score.
        const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
        alpha[mt][h] = m_new == m_old ? 1.0f : fast_exp2<S::fast_exp>(m_old - m_sub);  // 0 on the first tile
        moved |= m_new != m_old;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
          s[mt][n][2 * h] = fast_exp2<S::fast_exp>(fmaf(s[mt][n][2 * h], scale_log2, -m_sub));
          s[mt][n][2 * h + 1] = fast_exp2<S::fast_exp>(fmaf(s[mt][n][2 * h + 1], scale_log2, -m_sub));
        }
        const float sum = row_reduce(s[mt], h, [](float a, float b) { return a + b; });
        l_run[mt][h] = alpha[mt][h] * l_run[mt][h] + sum;
        m_run[mt][h] = m_new;
      }
    }

    // O = alpha·O + P·V_j, P straight from the score registers (as in stage 06); each V
    // fragment feeds every m-tile. The rescale is skipped when no row of the warp moved
    // its max (a warp-wide vote, so the whole warp takes the same branch).
    if (!C::LAZY || __any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o_acc[mt][n][0] *= alpha[mt][0], o_acc[mt][n][1] *= alpha[mt][0];
          o_acc[mt][n][2] *= alpha[mt][1], o_acc[mt][n][3] *= alpha[mt][1];
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) a_from_c<T>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Vt + v_at(kk, n));
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_m16n8k16<T>(o_acc[mt][n], a[mt], b[0], b[1]);
          mma_m16n8k16<T>(o_acc[mt][n + 1], a[mt], b[2], b[3]);
        }
      }
    }
    FA_TRACE(compute("S = Q·Kᵀ, softmax, O += P·V", j0, buf));
    __syncthreads();  // all warps are done with buffer j%2 before the next iteration refills it
    FA_TRACE(barrier());
  }

  // Divide by l once, and write O (rounded to T) and the log-sum-exp.
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * (M_TILES * warp + mt) + g + 8 * h;
      const float l = quad_sum(l_run[mt][h]);  // l >= 1: the max's own term is at least 2^0
      if (r >= q_valid) continue;
      const float inv = 1.0f / l;
      T* o_row = Oh + (i0 + r) * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(o_row + 8 * n + 2 * t) =
            pack2<T>(o_acc[mt][n][2 * h] * inv, o_acc[mt][n][2 * h + 1] * inv);
      }
      if (lse && t == 0) lse[bh * seq_q + i0 + r] = (m_run[mt][h] + log2f(l)) * 0.6931471805599453f;  // ln(l·2^m)
    }
  }
}

namespace {

template <typename T, int D, class S>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  using C = Config<D, S>;
  const std::size_t smem = C::SMEM_BYTES;
  FA_CUDA_CHECK(cudaFuncSetAttribute(pipelined_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const unsigned blocks = q_tile_grid(p, C::Br, "stage 07");
  constexpr float LOG2E = 1.4426950408889634f;
  pipelined_kernel<T, D, S><<<blocks, C::THREADS, smem, fa::stream()>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), lse,
      p.seq_q, p.seq_kv, p.scale * LOG2E, p.causal);
  FA_CHECK_LAUNCH("pipelined_kernel");
}

/// A variant of tuning.h, built for what LOG.md measures: fp16 at d = 64 and 128.
template <class S>
void run_variant(const AttentionProblem& p, const DeviceTensors& t, void*) {
  if (p.dtype != DType::F16 || (p.dim != 64 && p.dim != 128)) {
    throw InputError(std::string("stage 07's variant ") + S::name + " runs fp16 at d = 64 and 128 only");
  }
  (p.dim == 64 ? launch<__half, 64, S> : launch<__half, 128, S>)(p, t.q, t.k, t.v, t.o, t.lse);
}

}  // namespace

int key_tile_rows(int64_t d) {
  return with_head_dim(d, [](auto D) { return Config<decltype(D)::value, Tuned>::Bc; });
}

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return Config<decltype(D)::value, Tuned>::SMEM_BYTES; });
}

double hbm_bytes_model(const AttentionProblem& p) {
  return q_outer_hbm_bytes(p, Br);  // stage 05's model; p.dtype makes the elements 2 bytes
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  with_head_dim(p.dim, [&](auto D) {
    tc::with_mma_type(p.dtype, "stage 07", [&](auto type) {
      launch<decltype(type), decltype(D)::value, Tuned>(p, Q, K, V, O, lse);
    });
  });
}


}  // namespace fa::pipeline
