/**
 * \file hopper_attention.cu
 * \brief Stage 08: FlashAttention-2 on Hopper's own machinery: TMA copies into a ring of
 *        K/V buffers, mbarriers, warpgroup matrix products (wgmma) and warp specialisation.
 *
 * The idea: stage 07 feeds the tensor cores by hand: every thread issues its share of
 * each copy (cp.async), waits for it, loads fragments with ldmatrix and runs 16×8×16
 * mma.sync products one warp at a time. Hopper moves all of that off the threads:
 *
 *     warpgroup 0, the producer (one thread works; the others have given their registers away):
 *         TMA: Q_i → shared memory, completing on barrier q_full
 *         for each K/V tile j:  wait until slot j % S of the ring is empty,
 *                               TMA: K_j → slot, V_j → slot (barriers k_full, v_full)
 *     warpgroups 1 and 2, the consumers (64 query rows each):
 *         wait q_full;  S = Q_i·K_0ᵀ;  P_0 = softmax(S)
 *         for each K/V tile j:                         (the two consumers take turns to issue)
 *             issue S = Q_i·K_{j+1}ᵀ                   (wgmma, both operands in shared memory)
 *             issue O += P_j·V_j                       (wgmma, P from registers)
 *             wait for S;  mask, m_new = max(m, rowmax(S)), S = 2^(S − m_new),
 *                          alpha = 2^(m − m_new), l = alpha·l + rowsum(S)
 *                                                      (while the tensor cores still run P_j·V_j)
 *             wait for P_j·V_j;  arrive on empty[slot j];  P_{j+1} = S in 16 bits;  O = alpha·O
 *         O = O / l; write O and lse
 *
 * What changed since stage 07: copies are issued by one thread for a whole tile and
 * counted in bytes on an mbarrier (no per-thread wait); the tiles land 128-byte swizzled,
 * as the tensor cores read them; one wgmma instruction multiplies a 64×16 slice of Q by a
 * whole 16×128 slice of Kᵀ for four warps at once, reading shared memory directly; the
 * producer and the consumers are different warps, so copies and math overlap without the
 * consumers ever issuing a copy; and the softmax of one tile runs while the tensor cores
 * multiply the previous one, with the two consumer warpgroups taking turns at issuing their
 * products (FA08_OVERLAP, FA08_PINGPONG: the README's optimisation log measures each).
 * Cost: no workspace; HBM traffic as stage 07 (Q and O once, K and V once per Q tile).
 * Parallelism: B·H·⌈Nq/128⌉ blocks of 384 threads, one block a multiprocessor.
 *
 * Run: `stage08_hopper --dim 128` (needs a Hopper GPU)
 */
#include "stages/08_hopper/hopper_attention.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/head_dim.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/07_memory_pipeline/fast_exp2.cuh"
#include "stages/08_hopper/hopper.cuh"

namespace fa::hopper {

constexpr int WG = 128;                  ///< threads of a warpgroup
constexpr int THREADS = 3 * WG;          ///< the producer warpgroup and two consumers
constexpr int STAGES = FA08_STAGES;      ///< slots of the K/V ring
constexpr bool PINGPONG = FA08_OVERLAP && FA08_PINGPONG;  ///< consumers alternate their products
constexpr int BOX = 64;                  ///< columns of one TMA box: 64 16-bit values, one 128-byte swizzle row
constexpr int PRODUCER_REGS = 24;        ///< registers a producer thread keeps (setmaxnreg)
constexpr int CONSUMER_REGS = 240;       ///< registers a consumer thread takes
constexpr float LOG2E = 1.4426950408889634f;  ///< scores are kept in base-2 units: s·scale·log2 e

/// Where everything lives in the block's shared memory (byte offsets, 1024-aligned: the
/// 128-byte swizzle repeats every 1024 bytes and the tensor cores expect it aligned).
/// A tile of R rows × D columns is stored as D/64 boxes of R rows × 128 bytes.
template <int D>
struct Smem {
  static constexpr int Q_BYTES = Br * D * 2;            ///< one Q tile
  static constexpr int KV_BYTES = Bc * D * 2;           ///< one K (or V) tile
  static constexpr int q = 0;                           ///< the Q tile
  static constexpr int k = q + Q_BYTES;                 ///< STAGES K tiles
  static constexpr int v = k + STAGES * KV_BYTES;       ///< STAGES V tiles
  static constexpr int bars = v + STAGES * KV_BYTES;    ///< q_full, k_full[S], v_full[S], empty[S]
  static constexpr int bytes = bars + (1 + 3 * STAGES) * 8 + 1024;  ///< + slack to align the base
};

/// One block per (Q tile, batch·head): the producer warpgroup and two consumers (see the
/// file's comment). The tensor maps describe Q, K and V as [B·H][N][D].
template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1)
    hopper_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                  const __grid_constant__ CUtensorMap tv, T* O, float* lse, int seq_q, int seq_kv, float scale_log2,
                  bool causal, int q_tiles) {
  using L = Smem<D>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + L::bars);
  uint64_t* k_full = q_full + 1;
  uint64_t* v_full = k_full + STAGES;
  uint64_t* empty = v_full + STAGES;

  // The last Q tile of each head first under the causal mask: it has the most work.
  const int bh = blockIdx.x / q_tiles;
  const int qt = causal ? q_tiles - 1 - static_cast<int>(blockIdx.x % q_tiles) : static_cast<int>(blockIdx.x % q_tiles);
  const int i0 = qt * Br;
  const int kv_tiles = (seq_kv + Bc - 1) / Bc;
  const int last_row = min(i0 + Br, seq_q) - 1;
  const int n_tiles = causal ? min(kv_tiles, last_row / Bc + 1) : kv_tiles;

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(&k_full[s], 1);
      mbarrier_init(&v_full[s], 1);
      mbarrier_init(&empty[s], 2 * WG);  // every consumer thread arrives
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int wg = threadIdx.x / WG;
  if (wg == 0) {  // ---------------- the producer ----------------
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(q_full, L::Q_BYTES);
      for (int c = 0; c < D / BOX; ++c) tma_load_3d(smem + L::q + c * Br * 128, &tq, q_full, c * BOX, i0, bh);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % STAGES, round = j / STAGES;
        mbarrier_wait(&empty[s], (round & 1) ^ 1);  // the consumers are done with this slot (round 0: free)
        mbarrier_arrive_expect_tx(&k_full[s], L::KV_BYTES);
        for (int c = 0; c < D / BOX; ++c)
          tma_load_3d(smem + L::k + s * L::KV_BYTES + c * Bc * 128, &tk, &k_full[s], c * BOX, j * Bc, bh);
        mbarrier_arrive_expect_tx(&v_full[s], L::KV_BYTES);
        for (int c = 0; c < D / BOX; ++c)
          tma_load_3d(smem + L::v + s * L::KV_BYTES + c * Bc * 128, &tv, &v_full[s], c * BOX, j * Bc, bh);
      }
    }
  } else {
    // ---------------- the consumers: warpgroup 1 has rows 0-63 of the tile, 2 rows 64-127 ----------------
    setmaxnreg_inc<CONSUMER_REGS>();
    const int cw = wg - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = i0 + 64 * cw + 16 * warp + g;  // this thread's rows: row0 and row0 + 8

    float o[D / 2];  // O: 64 × D per warpgroup, the wgmma accumulator layout
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this thread's part of the row sum
    float s[Bc / 2];  // S: 64 × Bc per warpgroup
    uint32_t p[Bc / 16][4];  // P (16-bit pairs): the A operand of P·V

    // S = Q_i·K_jᵀ: D/16 products of 64×16 by 16×Bc, issued (not waited for).
    const auto issue_s = [&](int j) {
      const uint8_t* Ks = smem + L::k + (j % STAGES) * L::KV_BYTES;
      mbarrier_wait(&k_full[j % STAGES], (j / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int box = kk / 4, along = (kk % 4) * 32;  // 16 columns are 32 bytes along a 128-byte row
        const uint64_t a = smem_desc(smem + L::q + box * Br * 128 + cw * 64 * 128 + along, 16, 1024);
        const uint64_t b = smem_desc(Ks + box * Bc * 128 + along, 16, 1024);
        wgmma_ss<T, Bc>(s, a, b, kk > 0);
      }
      wgmma_commit();
    };

    // O += P·V_j: Bc/16 products of 64×16 (P, registers) by 16×D (V, MN-major), issued.
    const auto issue_pv = [&](int j) {
      const uint8_t* Vs = smem + L::v + (j % STAGES) * L::KV_BYTES;
      mbarrier_wait(&v_full[j % STAGES], (j / STAGES) & 1);
      fence_registers(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        const uint64_t b = smem_desc(Vs + kk * 16 * 128, Bc * 128, 1024);
        wgmma_rs<T, D>(o, p[kk], b, true);
      }
      wgmma_commit();
    };

    // The online softmax of tile j on this thread's two rows (each row lives in one quad of
    // lanes), in S's registers: S becomes 2^(S·scale·log2 e − m_new); m and l move on, and
    // alpha is returned, by which O is still to be rescaled.
    const auto softmax = [&](int j, float(&alpha)[2]) {
      const int j0 = j * Bc;
      const bool needs_mask = j0 + Bc > seq_kv || (causal && j0 + Bc - 1 > i0 + 64 * cw);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = j0 + 8 * n + 2 * t + e;
            float& x = s[4 * n + 2 * r + e];
            if (needs_mask && (col >= seq_kv || (causal && col > row))) x = -INFINITY;
            mx = fmaxf(mx, x);
          }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * scale_log2);  // finite: every row sees key 0 in tile 0
        alpha[r] = pipe::fast_exp2<true>(m[r] - m_new);   // 0 on the first tile
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[4 * n + 2 * r + e];
            x = pipe::fast_exp2<true>(fmaf(x, scale_log2, -m_new));
            sum += x;
          }
        }
        l[r] = alpha[r] * l[r] + sum;
        m[r] = m_new;
      }
    };

    // P, rounded to T, as the A operand of P·V: two 8-column pieces of S are one A fragment.
    const auto make_p = [&] {
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        p[kk][0] = tc::pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = tc::pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = tc::pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = tc::pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };

    const auto rescale_o = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
      }
    };

    // One K/V tile that has a next one: P_j (made already) times V_j, and S_{j+1} made into
    // P_{j+1}. With FA08_OVERLAP, S_{j+1} is issued before P_j·V_j and its softmax runs while
    // the tensor cores still multiply P_j·V_j; P_{j+1} is written, and O rescaled, once that
    // product is done (it still reads P_j's registers and adds into O).
    const auto tile = [&](int j) {
      if (PINGPONG) named_barrier_sync(1 + cw, 2 * WG);  // this consumer's turn at the tensor cores
      if (FA08_OVERLAP) issue_s(j + 1);
      issue_pv(j);
      if (PINGPONG) named_barrier_arrive(1 + (cw ^ 1), 2 * WG);  // the other's turn
      if (!FA08_OVERLAP) {
        wgmma_wait<0>();
        mbarrier_arrive(&empty[j % STAGES]);
        issue_s(j + 1);
      }
      wgmma_wait<FA08_OVERLAP>();  // S_{j+1} is done; P_j·V_j may still run
      fence_registers(s);
      float alpha[2];
      softmax(j + 1, alpha);
      wgmma_wait<0>();
      fence_registers(o);
      if (FA08_OVERLAP) mbarrier_arrive(&empty[j % STAGES]);  // this thread is done with the slot's K and V
      make_p();
      rescale_o(alpha);
    };
    // The last tile: P·V only.
    const auto last_tile = [&](int j) {
      if (PINGPONG) named_barrier_sync(1 + cw, 2 * WG);
      issue_pv(j);
      if (PINGPONG && cw == 0) named_barrier_arrive(2, 2 * WG);  // consumer 1's last turn
      wgmma_wait<0>();
      fence_registers(o);
      mbarrier_arrive(&empty[j % STAGES]);
    };

    mbarrier_wait(q_full, 0);
    if (PINGPONG && cw == 1) named_barrier_arrive(1, 2 * WG);  // consumer 0 takes the first turn
    issue_s(0);
    wgmma_wait<0>();
    fence_registers(s);
    {
      float alpha[2];  // O is still 0: nothing to rescale
      softmax(0, alpha);
    }
    make_p();
    for (int j = 0; j + 1 < n_tiles; ++j) tile(j);
    last_tile(n_tiles - 1);

    // O / l, once, and the log-sum-exp. Each thread writes two neighbouring values a time.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const int row = row0 + 8 * r;
      if (row >= seq_q) continue;
      const float inv = 1.0f / l[r];
      T* o_row = O + (static_cast<int64_t>(bh) * seq_q + row) * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(o_row + 8 * n + 2 * t) = tc::pack2<T>(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
      }
      if (lse && t == 0) lse[static_cast<int64_t>(bh) * seq_q + row] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
    }
  }
}

namespace {

/// cuTensorMapEncodeTiled from the driver, found through the runtime (so nothing links
/// libcuda, and a machine without a driver can still run the other stages' tests).
PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !f) throw CudaError("cuTensorMapEncodeTiled not found in the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// The tensor map of a [B·H, N, D] tensor of 16-bit values, read in boxes of `rows` × 64
/// with 128-byte swizzling; rows past N read as zeros.
template <typename T>
CUtensorMap tensor_map(const void* base, int64_t heads, int64_t n, int d, int rows) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(heads)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * 2, static_cast<cuuint64_t>(n * d) * 2};  // bytes
  const cuuint32_t box[3] = {BOX, static_cast<cuuint32_t>(rows), 1};
  const cuuint32_t step[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult rc = encode_function()(&map, type, 3, const_cast<void*>(base), dims, strides, box, step,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) throw CudaError("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(rc) + ")");
  return map;
}

template <typename T, int D>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  if (p.seq_q > 2147483647 - Br || p.seq_kv > 2147483647 - Bc) throw InputError("stage 08: sequences too long");
  const int64_t bh = p.batch_heads();
  const CUtensorMap tq = tensor_map<T>(Q, bh, p.seq_q, D, Br);
  const CUtensorMap tk = tensor_map<T>(K, bh, p.seq_kv, D, Bc);
  const CUtensorMap tv = tensor_map<T>(V, bh, p.seq_kv, D, Bc);
  const int smem = Smem<D>::bytes;
  FA_CUDA_CHECK(cudaFuncSetAttribute(hopper_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const unsigned blocks = q_tile_grid(p, Br, "stage 08");
  const int q_tiles = static_cast<int>((p.seq_q + Br - 1) / Br);
  hopper_kernel<T, D><<<blocks, THREADS, smem>>>(tq, tk, tv, static_cast<T*>(O), lse, static_cast<int>(p.seq_q),
                                                 static_cast<int>(p.seq_kv), static_cast<float>(p.scale) * LOG2E,
                                                 p.causal, q_tiles);
  FA_CHECK_LAUNCH("hopper_kernel");
}

}  // namespace

std::string unavailable_reason() {
  // Two attributes, cheap enough for every call of attention(); the name only when needed.
  int device = 0, major = 0, minor = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major == 9 && minor == 0) return "";
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string("stage 08 needs a Hopper GPU (compute capability 9.0, sm_90a); this is ") + prop.name +
         " (compute capability " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

std::size_t shared_bytes(int64_t d) {
  if (d == 64) return Smem<64>::bytes;
  if (d == 128) return Smem<128>::bytes;
  throw InputError("stage 08: head dim " + std::to_string(d) + " is not supported (64 or 128)");
}

double hbm_bytes_model(const AttentionProblem& p) { return q_outer_hbm_bytes(p, Br); }

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  tc::with_mma_type(p.dtype, "stage 08", [&](auto type) {
    using T = decltype(type);
    if (p.dim != 64 && p.dim != 128) {
      throw InputError("stage 08: head dim " + std::to_string(p.dim) + " is not supported (64 or 128)");
    }
    const std::string why = unavailable_reason();
    if (!why.empty()) throw NoGpuError(why);
    if (p.dim == 64) {
      launch<T, 64>(p, Q, K, V, O, lse);
    } else {
      launch<T, 128>(p, Q, K, V, O, lse);
    }
  });
}

}  // namespace fa::hopper
