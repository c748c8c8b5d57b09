/**
 * \file tensor_core_attention.cu
 * \brief Stage 06: FlashAttention-2 on tensor cores, in fp16 or bf16 with fp32 accumulation.
 *
 * The idea: stage 05's algorithm, unchanged, with its two matrix products done by the
 * tensor cores. A tensor core multiplies small matrices of 16-bit values in one
 * instruction: `mma.sync.m16n8k16` computes a 16×8 tile of D = A·B + C (A 16×16, B 16×8)
 * for a whole warp, the operands spread over the warp's 32 lanes in fixed layouts (see
 * mma.cuh). On the H100 that path is about 15 times the fp32 CUDA-core rate.
 *
 *     (one block per Q tile i; warp w owns its 16 query rows 16w .. 16w+15)
 *     load Q_i into shared memory; m = −inf, l = 0, O = 0   (registers)
 *     for each K/V tile j:
 *         load K_j, V_j into shared memory
 *         S     = Q_i·K_jᵀ                  mma: A = Q (ldmatrix), B = K (ldmatrix)
 *         S     = scale·log2(e)·S, masked
 *         m_new = max(m, rowmax(S))          two shuffles: a row lives in 4 lanes
 *         P     = 2^(S − m_new)              stays in registers
 *         alpha = 2^(m − m_new)
 *         l     = alpha·l + rowsum(P)
 *         O     = alpha·O + P·V_j            mma: A = P (registers), B = V (ldmatrix.trans)
 *     O = O / l, once; write O (fp16/bf16) and the log-sum-exp (fp32)
 *
 * What changed since stage 05: the inner products are mma.sync instead of fp32 FMAs;
 * tensors are fp16 or bf16 (half the bytes), scores and O accumulate in fp32; operands
 * come from shared memory through ldmatrix; each warp owns 16 whole query rows, and the
 * fragment layout puts each row in one quad of four lanes, so the row max and sum need two
 * shuffles and no shared memory; P never goes to shared memory: the score accumulators,
 * rounded to 16 bits, are already laid out as the A operand of P·V (FlashAttention-2's
 * register reuse). Causal blocks stop at the diagonal as before.
 * What it does not do yet: overlap loads with compute (stage 07).
 * Cost: no workspace. HBM traffic: Q and O once; K and V once per Q tile, 2 bytes each.
 * Parallelism: B·H·⌈Nq/Br⌉ blocks of 4 warps.
 *
 * Run: `stage06_tensor_cores --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64 --dtype fp16`
 */
#include "stages/06_tensor_cores/tensor_core_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/06_tensor_cores/tuning.h"

namespace fa::tensor_core {

using tc::a_from_c;
using tc::ldmatrix_x4;
using tc::ldmatrix_x4_trans;
using tc::mma_m16n8k16;
using tc::pack2;
using tc::quad_max;
using tc::quad_sum;

/// The block's shape under configuration Tiles (tuning.h; the finished kernel's is
/// Config<Tuned>): Br and Bc, one warp per 16 query rows (the mma's M).
template <class Tiles>
struct Config {
  static constexpr int Br = Tiles::br;           ///< query rows per tile
  static constexpr int Bc = Tiles::bc;           ///< key/value rows per tile
  static constexpr int THREADS = 32 * (Br / 16);  ///< threads per block
  /// Blocks per multiprocessor the compiler must leave registers for (__launch_bounds__).
  static constexpr int MIN_BLOCKS = Tiles::min_blocks;
  static_assert(Br % 16 == 0 && Bc % 16 == 0, "warps own 16 rows; P·V takes 16 keys (the mma's K) a step");
};

/// Shared-memory row stride (elements) of the Q, K and V tiles for head dimension D.
/// The 8 extra elements (16 bytes) shift each row by 4 banks, so the 8 row addresses of
/// one ldmatrix matrix hit 8 different 4-bank groups: no bank conflicts.
template <int D>
constexpr int stride() {
  return D + 8;
}

/// Copies `rows` rows of D elements into a tile of row stride stride<D>(), 16 bytes per
/// thread per step (THREADS threads); rows past `valid` are zero-filled, so edge tiles need
/// no special case.
template <typename T, int D, int THREADS>
__device__ void load_tile(T* tile, const T* src, int rows, int valid) {
  constexpr int CHUNKS = D / 8;  // 16-byte pieces per row
  for (int idx = threadIdx.x; idx < rows * CHUNKS; idx += THREADS) {
    const int r = idx / CHUNKS, c = 8 * (idx % CHUNKS);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(r) * D + c);
    *reinterpret_cast<uint4*>(tile + r * stride<D>() + c) = v;
  }
}

/// One block per (Q tile, batch·head), flattened into blockIdx.x: K/V tiles inner.
/// T is __half or __nv_bfloat16; Tiles the configuration (tuning.h), Tuned for the finished kernel.
template <typename T, int D, class Tiles>
__global__ void __launch_bounds__(Config<Tiles>::THREADS, Config<Tiles>::MIN_BLOCKS)
    tensor_core_kernel(const T* Q, const T* K, const T* V, T* O, float* lse, int64_t seq_q, int64_t seq_kv,
                       float scale_log2, bool causal) {
  constexpr int Br = Config<Tiles>::Br, Bc = Config<Tiles>::Bc, THREADS = Config<Tiles>::THREADS;
  constexpr int S = stride<D>();
  extern __shared__ uint4 smem[];     // uint4: 16-byte aligned, as ldmatrix needs
  T* Qs = reinterpret_cast<T*>(smem);  // [Br][S]  the Q tile
  T* Ks = Qs + Br * S;                 // [Bc][S]  the K tile
  T* Vs = Ks + Bc * S;                 // [Bc][S]  the V tile

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment coordinates of mma.cuh: row g (and g+8), columns 2t, 2t+1
  const int64_t q_tiles = (seq_q + Br - 1) / Br;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (blockIdx.x % q_tiles) * Br;
  const T* Qh = Q + bh * seq_q * D;
  const T* Kh = K + bh * seq_kv * D;
  const T* Vh = V + bh * seq_kv * D;
  T* Oh = O + bh * seq_q * D;

  const int q_valid = static_cast<int>(seq_q - i0 < Br ? seq_q - i0 : Br);
  load_tile<T, D, THREADS>(Qs, Qh + i0 * D, Br, q_valid);

  // The running state of this lane's two rows (g and g+8 of the warp's 16), on chip for
  // the whole loop. O is D/8 C fragments of 16×8: o[n][0..1] row g, o[n][2..3] row g+8.
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};  // this lane's share of l: summed over the quad at the end
  float o_acc[D / 8][4] = {};

  // ldmatrix row addresses, lane by lane (lane 8·i + r gives row r of matrix i):
  // A from Q: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
  //           (rows 8-15, cols 8-15) of the warp's 16 rows: registers a0..a3 in order.
  // exercise 06-ldmatrix-rows: the row and column of its tile each lane hands ldmatrix, for Q (A), K (B) and V (B, transposed)
  //   stub: const int a_row = 16 * warp, a_col = 0, k_row = 0, k_col = 0, v_row = 0, v_col = 0;
  const int a_row = 16 * warp + lane % 8 + 8 * (lane / 8 % 2), a_col = 8 * (lane / 16);
  // B from K (keys are B's columns n, d is its k): matrices (keys 0-7, k 0-7), (keys 0-7,
  //           k 8-15), (keys 8-15, k 0-7), (keys 8-15, k 8-15): b0, b1 of two n-tiles.
  const int k_row = lane % 8 + 8 * (lane / 16), k_col = 8 * (lane / 8 % 2);
  // B from V (keys are k, d is n), transposed: matrices (keys 0-7, d 0-7), (keys 8-15,
  //           d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15): b0, b1 of two n-tiles.
  const int v_row = lane % 8 + 8 * (lane / 8 % 2), v_col = 8 * (lane / 16);
  // end exercise 06-ldmatrix-rows

  const int64_t kv_end = causal && i0 + Br < seq_kv ? i0 + Br : seq_kv;  // causal: stop at the diagonal
  for (int64_t j0 = 0; j0 < kv_end; j0 += Bc) {  // ---- the only loop: K/V tiles ----
    const int kv_valid = static_cast<int>(seq_kv - j0 < Bc ? seq_kv - j0 : Bc);
    load_tile<T, D, THREADS>(Ks, Kh + j0 * D, Bc, kv_valid);
    load_tile<T, D, THREADS>(Vs, Vh + j0 * D, Bc, kv_valid);
    __syncthreads();  // K_j, V_j (and, on the first pass, Q_i) are in shared memory

    // S = Q_i·K_jᵀ for the warp's 16 rows: Bc/8 C fragments of 16×8, fp32.
    float s[Bc / 8][4] = {};
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, Qs + a_row * S + 16 * kk + a_col);
      FA_TRACE(fragment<T>("A = Q", a_row * S + 16 * kk + a_col, a));
      for (int n = 0; n < Bc / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, Ks + (8 * n + k_row) * S + 16 * kk + k_col);
        FA_TRACE(fragment<T>("B = K", (8 * n + k_row) * S + 16 * kk + k_col, b));
        mma_m16n8k16<T>(s[n], a, b[0], b[1]);
        mma_m16n8k16<T>(s[n + 1], a, b[2], b[3]);
      }
    }
    FA_TRACE(accumulators("S", s));

    // Scale into base-2 units, mask, and update the running max; P = 2^(S − m_new) in
    // place. Element e of fragment n sits at row g + 8·(e/2), column 8n + 2t + e%2 of the
    // tile. Columns are compared relative to the tile (32-bit arithmetic): a key is
    // visible if c < kv_valid and, with the causal mask, c <= the row's last visible column.
    float alpha[2];
    for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
      const int64_t row = i0 + 16 * warp + g + 8 * h;
      // Below 0 when the whole tile lies above this row's diagonal (possible if Bc < Br).
      const int last = causal ? static_cast<int>(row - j0 < Bc ? row - j0 : Bc) : Bc;
      // exercise 06-row-max: mask this lane's scores of row g + 8h (its columns of the C fragments) and take the row's new max over its quad
      //   stub: const float m_new = m_run[h] == -INFINITY ? 0.0f : m_run[h];
      float mx = -INFINITY;
      for (int n = 0; n < Bc / 8; ++n) {
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int c = 8 * n + 2 * t + e % 2;
          s[n][e] = (c >= kv_valid || c > last) ? -INFINITY : s[n][e] * scale_log2;
          mx = fmaxf(mx, s[n][e]);
        }
      }
      const float m_new = fmaxf(m_run[h], quad_max(mx));
      // end exercise 06-row-max
      FA_TRACE(scalars(h == 0 ? "row max g" : "row max g+8", {mx, m_new}));
      alpha[h] = m_new == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new);  // 0 on the first tile
      float sum = 0.0f;
      for (int n = 0; n < Bc / 8; ++n) {
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[n][e] = m_new == -INFINITY ? 0.0f : exp2f(s[n][e] - m_new);
          sum += s[n][e];
        }
      }
      // alpha is the same on the four lanes of the row, so each lane can keep its own
      // part of l and the quad adds them up once, at the end.
      l_run[h] = alpha[h] * l_run[h] + sum;
      m_run[h] = m_new;
    }

    // O = alpha·O + P·V_j. P's fragments n = 2kk, 2kk+1 (keys 16kk .. 16kk+15), rounded
    // to T, are the A operand for that k-step: no trip through shared memory.
    for (int n = 0; n < D / 8; ++n) {
      o_acc[n][0] *= alpha[0], o_acc[n][1] *= alpha[0];
      o_acc[n][2] *= alpha[1], o_acc[n][3] *= alpha[1];
    }
    FA_TRACE(accumulators("P", s));
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t a[4];
      a_from_c<T>(a, s[2 * kk], s[2 * kk + 1]);
      FA_TRACE(fragment<T>("A = P", -1, a));
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Vs + (16 * kk + v_row) * S + 8 * n + v_col);
        FA_TRACE(fragment<T>("B = V", (16 * kk + v_row) * S + 8 * n + v_col, b));
        mma_m16n8k16<T>(o_acc[n], a, b[0], b[1]);
        mma_m16n8k16<T>(o_acc[n + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // everyone is done with the tiles before the next K/V tile overwrites them
  }

  // Divide by l once, and write O (rounded to T) and the log-sum-exp: the only writes to HBM.
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + g + 8 * h;
    const float l = quad_sum(l_run[h]);  // l >= 1: the max's own term is 2^0
    if (r >= q_valid) continue;
    const float inv = 1.0f / l;
    T* o_row = Oh + (i0 + r) * D;
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(o_row + 8 * n + 2 * t) = pack2<T>(o_acc[n][2 * h] * inv, o_acc[n][2 * h + 1] * inv);
    }
    // Back to natural units: ln(l·2^m) = (m + log2 l)·ln 2.
    if (lse && t == 0) lse[bh * seq_q + i0 + r] = (m_run[h] + log2f(l)) * 0.6931471805599453f;
  }
}

namespace {

/// Shared memory of one block: Q, K and V tiles of 16-bit elements, rows padded to stride<D>().
template <int D, class Tiles>
constexpr std::size_t smem_bytes() {
  return static_cast<std::size_t>((Tiles::br + 2 * Tiles::bc) * stride<D>()) * 2;
}

template <typename T, int D, class Tiles>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  constexpr std::size_t smem = smem_bytes<D, Tiles>();
  // More than 48 KiB of dynamic shared memory needs an explicit opt-in per kernel.
  FA_CUDA_CHECK(cudaFuncSetAttribute(tensor_core_kernel<T, D, Tiles>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const unsigned blocks = q_tile_grid(p, Tiles::br, "stage 06");
  constexpr float LOG2E = 1.4426950408889634f;
  tensor_core_kernel<T, D, Tiles><<<blocks, Config<Tiles>::THREADS, smem, fa::stream()>>>(
      static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), lse,
      p.seq_q, p.seq_kv, p.scale * LOG2E, p.causal);
  FA_CHECK_LAUNCH("tensor_core_kernel");
}

/// A variant of tuning.h, built for what the tuning runs measured: fp16 at d = 64 and 128.
template <class Tiles>
void run_variant(const AttentionProblem& p, const DeviceTensors& t, void*) {
  if (p.dtype != DType::F16 || (p.dim != 64 && p.dim != 128)) {
    throw InputError(std::string("stage 06's variant ") + Tiles::name + " runs fp16 at d = 64 and 128 only");
  }
  (p.dim == 64 ? launch<__half, 64, Tiles> : launch<__half, 128, Tiles>)(p, t.q, t.k, t.v, t.o, t.lse);
}

}  // namespace

std::size_t shared_bytes(int64_t d) {
  return with_head_dim(d, [](auto D) { return smem_bytes<decltype(D)::value, Tuned>(); });
}

double hbm_bytes_model(const AttentionProblem& p) {
  return q_outer_hbm_bytes(p, Br);  // stage 05's model; p.dtype makes the elements 2 bytes
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  with_head_dim(p.dim, [&](auto D) {
    tc::with_mma_type(p.dtype, "stage 06", [&](auto type) {
      launch<decltype(type), decltype(D)::value, Tuned>(p, Q, K, V, O, lse);
    });
  });
}

// The variants of tuning.h, for --variant, the tests and benchmarks/tune_stage06.sh (a
// planted copy of this file leaves them out: cmake/FaStage.cmake).
std::vector<StageVariant> variants() {
  return std::apply([](auto... s) { return std::vector<StageVariant>{{s.name, s.summary, run_variant<decltype(s)>}...}; },
                    Variants{});
}

}  // namespace fa::tensor_core
